//! # chatgate-host
//!
//! Everything a chatgate runtime does that does not depend on which runtime
//! it is, written once against the small [`runtime::Runtime`] trait (an
//! executor, TCP, timers and signals):
//!
//! - [`driver`]: the per-connection loop that obeys `chatgate-core`'s
//!   `Connection` — the only place bytes move between client, provider and
//!   ledger;
//! - [`upstream`] and [`tls`]: resolving, connecting, rustls over any
//!   futures-io stream, the keep-alive pool;
//! - [`gate`]: per-source wakers, so the loop polls only what woke;
//! - [`ledger`]: the append-only ledger file;
//! - [`logging`]: stderr logs, with a cheap formatter for the per-request lines;
//! - [`serve`] and [`sim`]: accept loops and the shutdown sequence;
//! - [`cli`]: the command line of every binary (`serve`, `keys new`, `demo`,
//!   `sim`).
//!
//! A runtime crate implements [`runtime::Runtime`] and calls [`cli::main`].

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod admin;
pub mod cli;
pub mod driver;
pub mod gate;
pub mod keys;
pub mod ledger;
pub mod logging;
pub mod pgledger;
pub mod redis;
pub mod report;
pub mod runtime;
pub mod serve;
pub mod sim;
pub mod tls;
pub mod upstream;
