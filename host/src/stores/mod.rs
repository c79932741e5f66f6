//! The stores: the keys (`keys`: in the keys file, `keys_file`, or in
//! PostgreSQL) and their audit trail (`audit`), the append-only ledger file
//! (`ledger`), everything kept in PostgreSQL (`postgres/`: the connection,
//! the ledger's shipping and what is read back from it, the keys, the
//! console's sessions), the shared limiter over Redis (`redis/`: its
//! client, which server a command goes to — one, the Sentinels' primary, a
//! cluster's — and the connections), the Responses API's kept responses
//! (`responses/`), and where spend is rebuilt from (`spend`).

pub(crate) mod audit;
pub(crate) mod keys;
pub(crate) mod keys_file;
pub(crate) mod ledger;
pub(crate) mod postgres;
pub(crate) mod redis;
pub(crate) mod responses;
pub(crate) mod spend;
