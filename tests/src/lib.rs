//! Support for the end-to-end tests: start the real binaries, talk HTTP to
//! them over real sockets, read their ledgers and the simulator's journal.
//!
//! Every process listens on port 0 and prints the address it got, so tests
//! never race for ports; every process is killed when its handle drops, so
//! a failing test leaves nothing running.
//!
//! Everything is re-exported here, so a test needs only
//! `use chatgate_tests::*;`.
//!
//! | file | job |
//! |---|---|
//! | `agents.rs` | the coding agents, run offline: [`claude`] (Claude Code), [`codex`] (Codex CLI) and [`gemini_cli`] (Gemini CLI) |
//! | `process.rs` | the binaries and their processes: [`RUNTIMES`] and [`cases!`], [`bin_path`], [`child_command`], [`Proc`] (killed on drop), [`run`] to completion |
//! | `wait.rs` | [`PATIENCE`], how long to wait for anything quick, and [`eventually`] |
//! | `gateway.rs` | a running gateway ([`Gw`], [`GwOptions`]): keys minted with [`mint`], its ledger, its admin [`metric`]s, [`gateways_sharing_a_key`]; [`start_demo`] |
//! | `sim.rs` | a running simulator ([`Sim`]): its journal and its runtime fault |
//! | `http.rs` | HTTP over a real socket: [`raw_request`], [`Conn`], [`request`], [`try_exchange`], and [`ResponseExt`] for errors, SSE events and chunks |
//! | `chat.rs` | the chat requests the tests send: [`MODEL`], [`body`], [`stream_body`] |
//! | `tls.rs` | test [`certs`], a rustls terminator in front of a backend ([`tls_proxy`]), and a TLS client ([`tls_connect`], [`tls_exchange`]) |
//! | `redis.rs` | a `redis-server` child ([`RedisServer`]), a primary with a replica and three Sentinels ([`SentinelSet`]), a six-node Redis Cluster ([`RedisCluster`]), and a blocking RESP client ([`RedisClient`]) |
//! | `pg.rs` | a throwaway PostgreSQL cluster ([`PgServer`]) |
//! | `otlp.rs` | the OTLP trace receiver ([`OtlpReceiver`]) and the spans it decoded |
//! | `resources.rs` | what the OS says: [`raise_fd_limit`], a process's resident memory ([`rss_kib`]) |
//! | `noise.rs` | [`Noise`], deterministic hostile input from a seed |
//! | `browser.rs` | headless Chromium over WebDriver ([`Browser`]), and what a user does on a page: [`click`], [`fill`], [`text_of`], [`dialog_open`] |

mod agents;
mod browser;
mod chat;
mod gateway;
mod http;
mod noise;
mod otlp;
mod pg;
mod process;
mod redis;
mod resources;
mod sim;
mod tls;
mod wait;

pub use agents::{claude, claude_env, codex, codex_with, gemini_cli, gemini_env, repo};
pub use browser::{Browser, ENTER, ESCAPE, TAB, click, dialog_open, fill, text_of};
pub use chat::{MODEL, body, stream_body};
pub use gateway::{
    Gw, GwOptions, chat_status, gateways_sharing_a_key, metric, mint, serve_refusing, set_on_each,
    start_demo,
};
pub use http::{
    Conn, Response, ResponseExt, parse_one, raw_request, request, sse_data, try_exchange,
};
pub use noise::Noise;
pub use otlp::OtlpReceiver;
pub use pg::PgServer;
pub use process::{Proc, RUNTIMES, address_from, bin_path, child_command, run};
pub use redis::{RedisClient, RedisCluster, RedisServer, RedisTls, SentinelSet, scaling_block};
pub use resources::{raise_fd_limit, rss_kib};
pub use sim::Sim;
pub use tls::{
    Certs, ClientCert, TlsConn, certs, certs_and_clients, der_of, server_certificate, tls_connect,
    tls_exchange, tls_proxy,
};
pub use wait::{PATIENCE, eventually, eventually_within};
