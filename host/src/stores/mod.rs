//! The stores: the keys (`keys`: in the keys file, `keys_file`, or in
//! PostgreSQL) and their audit trail (`audit`), the append-only ledger file
//! (`ledger`), everything kept in PostgreSQL (`postgres/`: the connection,
//! the ledger's shipping and what is read back from it, the keys, the
//! console's sessions), the shared limiter over Redis (`redis`) and which
//! Redis server a command goes to (`redis_nodes`: one, the Sentinels'
//! primary, a cluster's), and where spend is rebuilt from (`spend`).

pub(crate) mod audit;
pub(crate) mod keys;
pub(crate) mod keys_file;
pub(crate) mod ledger;
pub(crate) mod postgres;
pub(crate) mod redis;
pub(crate) mod redis_nodes;
pub(crate) mod spend;
