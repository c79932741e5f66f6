-- chatgate's shared keys (`keys = "postgres://…"`): one row per secret, as
-- a keys file's [[key]] table (a rotated key has two rows of one name while
-- the old secret's grace runs). Only SHA-256 digests of secrets are stored.
-- Every change is made in one transaction with its audit record and a
-- NOTIFY on the channel chatgate_keys, which every instance LISTENs to.
CREATE TABLE IF NOT EXISTS chatgate_keys (
    sha256              text PRIMARY KEY,
    name                text NOT NULL,
    requests_per_minute bigint,
    tokens_per_minute   bigint,
    budget_usd          double precision,
    budget_period       text,
    max_in_flight       bigint,
    models              text[],
    created             text,
    expires             text,
    position            bigserial
);
CREATE INDEX IF NOT EXISTS chatgate_keys_name ON chatgate_keys (name);
-- One row per change: who, from where, what (field, before, after; never a
-- secret).
CREATE TABLE IF NOT EXISTS chatgate_audit (
    id      bigserial PRIMARY KEY,
    at      timestamptz NOT NULL,
    actor   text NOT NULL,
    address text,
    action  text NOT NULL,
    key     text NOT NULL,
    changes jsonb NOT NULL
);
