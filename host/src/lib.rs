//! # chatgate-host
//!
//! Everything a chatgate runtime does that does not depend on which runtime
//! it is, written once against the small [`Runtime`] trait (an executor,
//! TCP, timers and signals). A runtime crate implements [`Runtime`] and
//! calls [`main`]; that is the whole public API.
//!
//! | part | modules | what they do |
//! |---|---|---|
//! | the runtime's side | `runtime`, `gate` | the [`Runtime`] trait, the clock and alarm that follow core's deadlines, the per-thread read buffer; per-source wakers, so a loop polls only what woke |
//! | serving | `serve`, `driver`, `admin`, `sim` | accept loops and the shutdown sequence; the per-connection loop that obeys core's `Connection` — the only place bytes move between client, provider and ledger; the admin listener; the simulator's server |
//! | the provider | `upstream`, `tls`, `probe` | resolving, connecting, rustls over any futures-io stream, the keep-alive pool; probing ejected endpoints |
//! | records | `ledger`, `pgledger`, `logging`, `report` | the append-only ledger file; shipping it to PostgreSQL; stderr logs with batched access lines; the `usage` report command |
//! | shared state | `keys`, `pool`, `redis` | the keys file's live reload and the `keys` commands; the provider pool's live reload from the config file; the shared rate limiter over Redis |
//! | the command line | `cli` | every binary's commands (`serve`, `keys`, `usage`, `demo`, `sim`) |

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod admin;
mod cli;
mod driver;
mod gate;
mod keys;
mod ledger;
mod logging;
mod otlp;
mod pgledger;
mod pool;
mod probe;
mod redis;
mod report;
mod runtime;
mod serve;
mod sim;
mod spend;
mod tls;
mod upstream;

pub use cli::{EXIT_CONFIG, main};
pub use runtime::Runtime;
