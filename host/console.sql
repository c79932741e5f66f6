-- chatgate's console sessions, when PostgreSQL is configured (the keys in
-- PostgreSQL, or --ledger-postgres): a session survives a restart and is
-- valid on every instance. Only the SHA-256 of a session's id is kept; the
-- id itself is only in the browser's cookie.
CREATE TABLE IF NOT EXISTS chatgate_sessions (
    id_sha256  text PRIMARY KEY,
    actor      text NOT NULL,
    admin      boolean NOT NULL,
    expires_ms bigint NOT NULL
);
