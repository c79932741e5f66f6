//! # chatgate-core
//!
//! Every rule of the chatgate gateway as pure state machines: no sockets, no
//! files, no clocks, no threads, no futures or executors. The runtime crates
//! (one per executor, or plain blocking code) move bytes, keep time and
//! append files; every decision is made here.
//!
//! The crate root is the whole public API, grouped by layer below; each
//! layer uses only the layers above it, and the modules are private (the
//! HTTP codecs, the usage report, traces, the console, reasoning's replay
//! and the other client APIs' translators keep a namespace of their own:
//! [`http`], [`report`], [`trace`], [`console`], [`reasoning`] and
//! [`dialect`]). Where each concern lives, for contributors:
//! `docs/architecture.md`.
//!
//! | layer | modules | what they hold |
//! |---|---|---|
//! | foundations | `time`, `error`, `secret`, `url`, `conninfo` | [`Instant`] passed in and wall-clock formatting; [`ApiError`] (the error body, README *Errors*), [`UpstreamFault`], [`StoreError`]; [`Secret`], a string `Debug` never prints; the one URL reader; libpq's TLS settings read out of a PostgreSQL connection string ([`split_tls`]) |
//! | codecs | [`http`], `json`, `sse`, `redis_protocol`, `redis_topology` | HTTP/1.1 for both sides (strict request heads, response heads, chunked/length/close bodies, writers); the one JSON cursor (validation, usage, hazards); the SSE framer ([`SseFramer`]); RESP ([`RedisReply`]); where a Redis command goes with Sentinel or a cluster (slots, redirections, roles) |
//! | rules | `routes`, `validate`, [`reasoning`], [`dialect`], `usage`, `stream`, `catalog`, `limits`, `quota`, [`trace`], `auth`, `keyops`, `ledger`, `pool`, [`report`] | the API's paths and their methods; request validation and the rewrite for the provider; reasoning through the tool loop (replay, the memory, signatures and sealing); the other client APIs translated to and from chat (the Responses and Messages APIs); the provider's usage and answer; the stream tracker (`[DONE]`, `finish_reason`, usage); prices in nano-dollars; rate limits (token buckets, the Redis script); budgets and in-flight caps; trace context, sampling and spans; keys; changes to the keys and their audit records; the ledger line; the keep-alive pool's policy; usage reports |
//! | shared state | [`console`], `config`, `endpoints`, `metrics`, `gateway` | what the operator's console records, and its sessions; every setting and configuration type; the provider endpoints (choice, health, failover's bookkeeping); the process's metrics; what connections share ([`Gateway`]) |
//! | the exchange | `exchange`, `admin` | one client connection from first byte to close ([`Connection`]); the admin listener's answers, the console's pages and JSON among them |
//!
//! ## The driving loop
//!
//! A runtime accepts a connection, asks [`Connection::accept`] for the
//! connection's state machine, then loops: feed what happened with `handle_*`,
//! do what `poll_*` says, sleep until the next readiness or
//! [`Connection::poll_timeout`]. The loop below is complete except
//! for the I/O itself, which is what a runtime supplies.
//!
//! ```no_run
//! use std::time::Duration;
//! use chatgate_core::{AdmitRequest, Connection, Endpoint, Event, Gateway, Instant, Settlement};
//!
//! /// What a runtime provides (sockets, pool, ledger file, clock).
//! trait Io {
//!     fn now(&self) -> Instant;
//!     fn write_client(&mut self, bytes: &[u8]) -> usize;
//!     fn write_upstream(&mut self, bytes: &[u8]) -> usize;
//!     /// A connection to this endpoint (from its pool unless `fresh`):
//!     /// whether it was reused.
//!     fn connect_upstream(&mut self, endpoint: &Endpoint, fresh: bool) -> Result<bool, chatgate_core::UpstreamFailure>;
//!     fn release_upstream(&mut self);
//!     fn close_upstream(&mut self);
//!     /// Whether the line was appended.
//!     fn append_ledger(&mut self, line: &[u8]) -> bool;
//!     /// Writes an access log line (its fields from the ledger record).
//!     fn log_access(&mut self, fields: &[u8]);
//!     /// The shared limiter (Redis), when limits are shared.
//!     fn shared_admit(&mut self, ask: &AdmitRequest) -> chatgate_core::SharedAdmission;
//!     fn shared_settle(&mut self, settlement: &Settlement) -> Result<(), chatgate_core::StoreError>;
//!     /// The shared reasoning memory (Redis, with shared limits).
//!     fn shared_get(&mut self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, chatgate_core::StoreError>;
//!     fn shared_set(&mut self, remember: &chatgate_core::Remember);
//!     /// The Responses API's store (with `--apis responses`).
//!     fn responses_store(&mut self, ask: chatgate_core::StoreAsk) -> Result<chatgate_core::StoreReply, chatgate_core::StoreError>;
//!     /// Waits for client bytes, provider bytes, or the deadline.
//!     fn wait(&mut self, read_client: bool, read_upstream: bool, deadline: Option<Instant>) -> Happened;
//! }
//! enum Happened { Client(Vec<u8>), ClientEof, Upstream(Vec<u8>), UpstreamEof, Timeout }
//!
//! fn drive(gateway: &Gateway, conn: &mut Connection, io: &mut impl Io) {
//!     loop {
//!         // 1. Events, in order: the ledger line before the bytes it guards.
//!         while let Some(event) = conn.poll_event() {
//!             let now = io.now();
//!             match event {
//!                 Event::ConnectUpstream { endpoint, fresh } => match io.connect_upstream(&endpoint, fresh) {
//!                     Ok(reused) => conn.handle_upstream_connected(now, reused),
//!                     Err(failure) => conn.handle_upstream_failure(now, failure),
//!                 },
//!                 Event::ReleaseUpstream => io.release_upstream(),
//!                 Event::CloseUpstream => io.close_upstream(),
//!                 Event::Ledger(record) => {
//!                     let appended = io.append_ledger(&record.to_line());
//!                     let mut fields = Vec::new();
//!                     record.access_fields(&mut fields, false);
//!                     io.log_access(&fields);
//!                     conn.handle_ledger_written(io.now(), appended);
//!                 }
//!                 Event::Admit(ask) => {
//!                     let verdict = io.shared_admit(&ask);
//!                     conn.handle_admission(io.now(), verdict);
//!                 }
//!                 Event::Settle(settlement) => {
//!                     let outcome = io.shared_settle(&settlement);
//!                     settlement.finish(gateway, io.now(), outcome);
//!                 }
//!                 Event::Recall(recall) => {
//!                     let values = io.shared_get(&recall.keys);
//!                     conn.handle_recall(io.now(), values);
//!                 }
//!                 Event::Remember(remember) => io.shared_set(&remember),
//!                 Event::Responses(ask) => {
//!                     let reply = io.responses_store(*ask);
//!                     conn.handle_responses(io.now(), reply);
//!                 }
//!                 // Background runs (the Responses API's `background: true`)
//!                 // need a runtime that drives several connections.
//!                 Event::Background(_) => {}
//!                 Event::Follow(_) => conn.handle_run_events(io.now(), chatgate_core::RunEvents::NotHere),
//!                 Event::Cancel(_) => conn.handle_cancelled(io.now()),
//!                 Event::CloseClient => return,
//!             }
//!         }
//!         // 2. Bytes to write.
//!         if let Some(bytes) = conn.poll_upstream_transmit() {
//!             let n = io.write_upstream(bytes);
//!             conn.handle_upstream_written(io.now(), n);
//!             continue;
//!         }
//!         if let Some(bytes) = conn.poll_client_transmit() {
//!             let n = io.write_client(bytes);
//!             conn.handle_client_written(io.now(), n);
//!             continue;
//!         }
//!         // 3. Wait for input or the next deadline.
//!         let deadline = conn.poll_timeout();
//!         match io.wait(conn.wants_client_read(), conn.wants_upstream_read(), deadline) {
//!             Happened::Client(b) => conn.handle_client_data(io.now(), &b),
//!             Happened::ClientEof => conn.handle_client_eof(io.now()),
//!             Happened::Upstream(b) => conn.handle_upstream_data(io.now(), &b),
//!             Happened::UpstreamEof => conn.handle_upstream_eof(io.now()),
//!             Happened::Timeout => conn.handle_timeout(io.now()),
//!         }
//!     }
//! }
//! # let _ = Duration::ZERO;
//! ```
//!
//! ## Guarantees
//!
//! - Peer input never panics: every cap (head 64 KiB, 64 headers, body
//!   2 MiB, chunk lines, SSE events, provider bodies) ends in a typed error
//!   mapped to an HTTP status.
//! - Parsing resumes where it stopped: feeding one byte at a time costs
//!   O(bytes), and gives the same result as feeding everything at once.
//! - Streamed events are forwarded exactly as the provider sent them.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

// Foundations.
mod conninfo;
mod error;
mod secret;
mod time;
mod url;

pub use conninfo::{
    Conninfo, ConninfoError, PgTls, RootCert, SslMode, TlsAttempt, TlsVerify, TlsVersion, split_tls,
};
pub use error::{ApiError, ErrorType, ProviderError, StoreError, UpstreamFault};
pub use time::{Instant, WallClock, parse_rfc3339, rfc3339_ms};

// Codecs.
pub mod http;
mod json;
mod redis_protocol;
mod redis_topology;
mod sse;

pub use redis_protocol::{
    RedisProtocolError, RedisReply, RedisReplyLimits, encode_redis_command, parse_redis_reply,
};
pub use redis_topology::{
    CLUSTER_SLOTS, NodeAddr, RedisAttempt, RedisErrorKind, RedisNext, RedisRetry, Replication,
    SlotMap, TopologyUpdate, classify_error, key_slot, parse_node_addr, parse_replication,
    sentinel_primary,
};
pub use sse::{SseError, SseFramer};

// Rules.
mod auth;
mod catalog;
pub mod dialect;
mod keyops;
mod ledger;
mod limits;
mod pool;
mod quota;
pub mod reasoning;
pub mod report;
mod routes;
mod stream;
pub mod trace;
mod usage;
mod validate;

pub use auth::{
    AuthFailure, KEY_PREFIX, KeyDefaults, KeyEntry, KeyTable, KeysError, RawKey, entry_toml,
    is_valid_name, key_hash_hex, key_sha256, mint_key, parse_keys_file, render_keys_file,
};
pub use catalog::{Catalog, Model, Price, format_usd};
pub use dialect::splice::Continuation;
pub use keyops::{AuditRecord, FieldChange, KeyChanges, KeyOp, OpError, apply_key_op, check_keys};
pub use ledger::LedgerRecord;
pub use limits::{
    Admission, LimitKind, LimitStatus, Limits, REBUILD_AFTER_MS, REDIS_SCRIPT, RateLimiter,
    Rejection, SHARED_MAX_PER_MINUTE, ScriptOp, ScriptOutcome, ScriptQuota, decode_script_reply,
    script_args, script_keys, shared_limits_error,
};
pub use pool::Pool;
pub use quota::{
    Budget, BudgetRefusal, DEFAULT_RESERVE_TOKENS, MAX_BUDGET_USD, Period, Quota, QuotaBook,
    QuotaRefusal, QuotaStatus, SpendTally, usd_to_nano, worst_case_cost,
};
pub use stream::{EventKind, StreamTracker};
pub use usage::{CompletionSummary, NotJson, Usage, parse_completion};
pub use validate::{ChatRequest, validate_chat_request, validate_chat_request_replaying};

// Shared state.
mod config;
mod endpoints;
mod gateway;
mod metrics;

pub use config::{
    Apis, ConfigError, DEFAULT_ENDPOINT, EndpointConfig, GatewayConfig, ListenerTls, OtlpExport,
    ReasoningConfig, RedisTopology, RedisUrl, ResponsesKeeping, ResponsesStoreAt, SERVE_SETTINGS,
    Secret, ServeConfig, Setting, SharedLimits, SharedRedis, Sources, Target, Timeouts, env_name,
    flag_name, parse_duration, parse_endpoints, parse_redis_list,
};
pub use endpoints::{
    Attempt, Endpoint, EndpointSet, EndpointStatus, FailureKind, Outcome, PromptAllowance,
};
pub use gateway::{Gateway, provider_request_id};
pub use metrics::Metrics;

// The exchange.
mod admin;
pub mod console;
mod exchange;

pub use admin::{
    AdminRequest, AdminRoute, ApiChange, ApiRoute, ApiStep, ConsoleRoute, MAX_ADMIN_BODY,
    Readiness, StoreFailure, admin_response, admin_route, admin_step, api_audit, api_changed,
    secure_cookies, sso_finish, sso_unavailable,
};
pub use exchange::{
    Accept, AdmitRequest, Connection, Event, Follow, Recall, Refusal, Remember, Run, RunEvents,
    Settlement, SharedAdmission, StoreAsk, StoreReply, UpstreamFailure,
};
