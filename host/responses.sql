-- chatgate's kept responses (the Responses API's store, previous_response_id,
-- item references), when --responses-store is a PostgreSQL URL: one row per
-- response, shared by every instance. `record` is the response as chatgate
-- encodes it (its input items, its response object, the ids of the
-- responses before it); `ancestors` repeats those ids so a conversation is
-- read in one query. `key_name` is the key's name, never the key.
CREATE TABLE IF NOT EXISTS chatgate_responses (
    id         text PRIMARY KEY,
    key_name   text NOT NULL,
    expires_at bigint NOT NULL,
    bytes      bigint NOT NULL,
    ancestors  text[] NOT NULL,
    record     bytea NOT NULL,
    -- A background run not finished: until when its instance vouches for
    -- it (renewed while it runs; 0 once it ended). Past it, any instance
    -- marks it failed.
    running_until bigint NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS chatgate_responses_expires_at ON chatgate_responses (expires_at);
CREATE INDEX IF NOT EXISTS chatgate_responses_running ON chatgate_responses (running_until)
    WHERE running_until > 0;
-- The bytes each key keeps (what --responses-key-max-bytes caps).
CREATE TABLE IF NOT EXISTS chatgate_response_bytes (
    key_name text PRIMARY KEY,
    bytes    bigint NOT NULL
);
