//! The stores: the keys (`keys`: in the keys file, `keys_file`, or in
//! PostgreSQL, `keys_pg`) and their audit trail (`audit`), the append-only ledger file
//! (`ledger`), its shipping to PostgreSQL (`postgres`), the shared limiter
//! over Redis (`redis`) and which Redis server a command goes to
//! (`redis_nodes`: one, the Sentinels' primary, a cluster's), where spend is rebuilt from (`spend`), and the
//! console's sessions in PostgreSQL (`sessions_pg`).

pub(crate) mod audit;
pub(crate) mod keys;
pub(crate) mod keys_file;
pub(crate) mod keys_pg;
pub(crate) mod ledger;
pub(crate) mod postgres;
pub(crate) mod redis;
pub(crate) mod redis_nodes;
pub(crate) mod sessions_pg;
pub(crate) mod spend;
