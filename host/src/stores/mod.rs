//! The stores: the keys file (`keys_file`), the append-only ledger file
//! (`ledger`), its shipping to PostgreSQL (`postgres`), the shared limiter
//! over Redis (`redis`), and where spend is rebuilt from (`spend`).

pub(crate) mod keys_file;
pub(crate) mod ledger;
pub(crate) mod postgres;
pub(crate) mod redis;
pub(crate) mod spend;
