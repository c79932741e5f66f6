//! # chatgate-host
//!
//! Everything a chatgate runtime does that does not depend on which runtime
//! it is, written once against the small [`Runtime`] trait (an executor,
//! TCP, timers and signals). A runtime crate implements [`Runtime`] and
//! calls [`main`]; that is the whole public API, with [`Error`] (what can
//! go wrong, by kind) and [`EXIT_CONFIG`].
//!
//! Its modules are rooms by job, each a folder named for it (as pingora
//! separates connectors, listeners, protocols and apps):
//!
//! | room | modules | what they do |
//! |---|---|---|
//! | `runtime/` | `mod.rs`, `wakeup` | the [`Runtime`] trait, the clock and alarm that follow core's deadlines, the per-thread read buffer; per-source wakers, so a loop polls only what woke |
//! | `serving/` | `listener`, `driver`, `admin`, `sim` | accept loops and the shutdown sequence; the per-connection loop that obeys core's `Connection` — the only place bytes move between client, provider and ledger; the admin listener; the simulator's server |
//! | `provider/` | `connector`, `probe` | resolving, connecting (TLS through `tls/`), each endpoint's keep-alive pool; probing ejected endpoints |
//! | `tls/` | `stream`, `client`, `listener` | rustls over any futures-io stream, either side; what outbound connections trust; TLS on the listeners, their certificates reloaded, and plain HTTP told from a handshake |
//! | `stores/` | `keys_file`, `ledger`, `postgres`, `redis`, `spend` | the keys file and its edits; the append-only ledger file; shipping it to PostgreSQL; the shared limiter over Redis; where spend is rebuilt from |
//! | `telemetry/` | `logging`, `exporter` | stderr logs with batched access lines; the OTLP trace exporter |
//! | `reload/` | `mod.rs`, `keys`, `endpoints` | one watcher (files and SIGHUP) that reloads the keys file, the config file's endpoint set and the listeners' certificates |
//! | `cli/` | `mod.rs`, `serve`, `keys`, `usage`, `demo` | the command schema and dispatch; `serve`'s wiring; the `keys` commands; the `usage` report and budgets; `demo` and `sim` |
//! | (root) | `error` | [`Error`], what can go wrong, by kind (a setting, a file, a socket, TLS, PostgreSQL, the trace collector, the runtime), each with the one line the operator reads |

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod cli;
mod error;
mod provider;
mod reload;
mod runtime;
mod serving;
mod stores;
mod telemetry;
mod tls;

pub use cli::{EXIT_CONFIG, main};
pub use error::Error;
pub use runtime::Runtime;
