//! # chatgate-core
//!
//! Every rule of the chatgate gateway as pure state machines: no sockets, no
//! files, no clocks, no threads, no futures or executors. The runtime crates
//! (one per executor, or plain blocking code) move bytes, keep time and
//! append files; every decision is made here.
//!
//! | module | what it holds |
//! |---|---|
//! | [`http`] | HTTP/1.1 codecs for both sides: strict request heads (smuggling shapes rejected), response heads, chunked/length/close bodies, writers |
//! | [`validate`] | chat request validation and the rewrite for the provider (raw JSON splicing: unknown parameters keep their exact text and order) |
//! | [`sse`] | the SSE framer: complete events as byte ranges of the caller's buffer |
//! | [`stream`] | the stream tracker: `[DONE]`, `finish_reason`, last `usage`, error events |
//! | [`usage`], [`catalog`], [`ledger`] | token usage, prices in integer nano-dollars, the ledger line |
//! | [`limits`] | per-key requests/tokens per minute (continuous token buckets, integer math) |
//! | [`auth`] | the keys file, SHA-256 bearer authentication, key minting |
//! | [`exchange`] | one client connection from first byte to close, driving all of the above |
//! | [`gateway`] | what connections share: config, keys, limiter, request ids |
//! | [`config`] | every setting: flag, environment variable, file key, default, and their resolution |
//! | [`pool`] | the upstream keep-alive pool's policy |
//! | [`sim`] | the simulated reasoning provider (a server state machine) |
//! | [`harness`] | client ↔ exchange ↔ simulator in memory, on a virtual clock |
//! | [`time`] | monotonic [`time::Instant`] passed in, wall-clock formatting |
//!
//! ## The driving loop
//!
//! A runtime accepts a connection, asks [`gateway::Gateway::accept`] for a
//! [`exchange::Connection`], then loops: feed what happened with `handle_*`,
//! do what `poll_*` says, sleep until the next readiness or
//! [`exchange::Connection::poll_timeout`]. The loop below is complete except
//! for the I/O itself, which is what a runtime supplies.
//!
//! ```no_run
//! use std::time::Duration;
//! use chatgate_core::exchange::{Connection, Event};
//! use chatgate_core::time::Instant;
//!
//! /// What a runtime provides (sockets, pool, ledger file, clock).
//! trait Io {
//!     fn now(&self) -> Instant;
//!     fn write_client(&mut self, bytes: &[u8]) -> usize;
//!     fn write_upstream(&mut self, bytes: &[u8]) -> usize;
//!     fn connect_upstream(&mut self, fresh: bool) -> Result<bool, chatgate_core::exchange::UpstreamFailure>;
//!     fn release_upstream(&mut self);
//!     fn close_upstream(&mut self);
//!     /// Whether the line was appended.
//!     fn append_ledger(&mut self, line: &[u8]) -> bool;
//!     /// Writes an access log line (its fields from the ledger record).
//!     fn log_access(&mut self, fields: &[u8]);
//!     /// The shared limiter (Redis), when limits are shared.
//!     fn shared_admit(&mut self, key: &str, limits: chatgate_core::limits::Limits, tokens: u64)
//!         -> chatgate_core::exchange::SharedAdmission;
//!     fn shared_settle(&mut self, key: &str, limits: chatgate_core::limits::Limits, reserved: u64, used: u64);
//!     /// Waits for client bytes, provider bytes, or the deadline.
//!     fn wait(&mut self, read_client: bool, read_upstream: bool, deadline: Option<Instant>) -> Happened;
//! }
//! enum Happened { Client(Vec<u8>), ClientEof, Upstream(Vec<u8>), UpstreamEof, Timeout }
//!
//! fn drive(conn: &mut Connection, io: &mut impl Io) {
//!     loop {
//!         // 1. Events, in order: the ledger line before the bytes it guards.
//!         while let Some(event) = conn.poll_event() {
//!             let now = io.now();
//!             match event {
//!                 Event::ConnectUpstream { fresh } => match io.connect_upstream(fresh) {
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
//!                 Event::Admit { key, limits, tokens } => {
//!                     let verdict = io.shared_admit(&key, limits, tokens);
//!                     conn.handle_admission(io.now(), verdict);
//!                 }
//!                 Event::Settle { key, limits, reserved, used } => {
//!                     io.shared_settle(&key, limits, reserved, used)
//!                 }
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

pub mod admin;
pub mod auth;
pub mod catalog;
pub mod config;
pub mod error;
pub mod exchange;
pub mod gateway;
pub mod harness;
pub mod http;
mod json;
pub mod ledger;
pub mod limits;
pub mod metrics;
pub mod pool;
pub mod report;
pub mod resp;
pub mod sim;
pub mod sse;
pub mod stream;
pub mod time;
pub mod usage;
pub mod validate;
