-- chatgate's shared ledger: one row per metered request, the same fields as
-- a JSONL ledger line. Created on start when missing (--ledger-postgres).
-- request_id is the primary key, so replaying lines never bills twice.
CREATE TABLE IF NOT EXISTS chatgate_ledger (
    request_id          text PRIMARY KEY,
    ts                  timestamptz NOT NULL,
    key                 text NOT NULL,
    model               text NOT NULL,
    stream              boolean NOT NULL,
    status              smallint NOT NULL,
    prompt_tokens       bigint NOT NULL,
    completion_tokens   bigint NOT NULL,
    reasoning_tokens    bigint NOT NULL,
    cached_tokens       bigint NOT NULL,
    cost_nano_usd       bigint NOT NULL,
    cost_usd            numeric(20, 9) GENERATED ALWAYS AS (cost_nano_usd::numeric / 1000000000) STORED,
    finish_reason       text,
    complete            boolean NOT NULL,
    client_disconnected boolean NOT NULL,
    upstream_status     smallint,
    endpoint            text,
    attempts            integer NOT NULL DEFAULT 0,
    provider_request_id text,
    usage_missing       boolean NOT NULL DEFAULT false,
    charged_nano_usd    bigint NOT NULL DEFAULT 0,
    error               text,
    duration_ms         bigint NOT NULL,
    ttfb_ms             bigint
);
-- Tables made before the endpoint pool get its two columns.
ALTER TABLE chatgate_ledger ADD COLUMN IF NOT EXISTS endpoint text;
ALTER TABLE chatgate_ledger ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0;
-- ... and the three of the provider's id and of missing usage (what the
-- budget was charged instead of the reported cost).
ALTER TABLE chatgate_ledger ADD COLUMN IF NOT EXISTS provider_request_id text;
ALTER TABLE chatgate_ledger ADD COLUMN IF NOT EXISTS usage_missing boolean NOT NULL DEFAULT false;
ALTER TABLE chatgate_ledger ADD COLUMN IF NOT EXISTS charged_nano_usd bigint NOT NULL DEFAULT 0;
-- ... and the client API when it is not chat completions (`responses`).
ALTER TABLE chatgate_ledger ADD COLUMN IF NOT EXISTS api text;
-- ... and the model that answered when a fallback did (`served_model`).
ALTER TABLE chatgate_ledger ADD COLUMN IF NOT EXISTS served_model text;
CREATE INDEX IF NOT EXISTS chatgate_ledger_key_ts ON chatgate_ledger (key, ts);
CREATE INDEX IF NOT EXISTS chatgate_ledger_ts ON chatgate_ledger (ts);
