//! PostgreSQL, every store kept there, in one room: the connection every
//! store makes, the shared ledger (shipped from the local file, read back
//! for reports, the console and spend), the keys and their audit trail,
//! the console's sessions, the Responses API's kept responses.
//!
//! | file | job |
//! |---|---|
//! | `connection.rs` | a connection: the URL read, a store's tables created under an advisory lock when its probe finds them missing (never for what only reads), failures worded |
//! | `shipper/` | the ledger shipper: the thread that ships the local ledger's lines from a checkpoint, exactly once across a failover |
//! | `rows.rs` | the ledger's rows: one insert of a batch of records |
//! | `reads.rs` | what is read back from the ledger: `usage --postgres`, the console's figures of every instance, spend rebuilt for the shared limiter |
//! | `keys.rs` | the keys and the audit trail, and the watcher that keeps every instance's keys in step |
//! | `sessions.rs` | the console's sessions |
//! | `responses.rs` | the Responses API's kept responses, shared by a fleet: one row each, the bytes each key keeps, a conversation in one query |
//! | `tls.rs` | TLS as the URL's `sslmode` says: the verifiers, the client certificate, the channel binding |

mod connection;
pub(crate) mod keys;
mod reads;
pub(crate) mod responses;
mod rows;
pub(crate) mod sessions;
mod shipper;
mod tls;

pub(crate) use connection::{Schema, open, open_plain};
pub(crate) use reads::{connect_ledger, report_from_postgres, tallies_since, tally_postgres};
pub(crate) use shipper::start;
