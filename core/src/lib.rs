//! chatgate-core (work in progress)
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
pub mod catalog;
pub mod error;
pub mod http;
pub mod ledger;
pub mod limits;
pub mod sse;
pub mod stream;
pub mod time;
pub mod usage;
pub mod validate;
