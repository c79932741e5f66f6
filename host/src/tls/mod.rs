//! TLS, both ways, with rustls.
//!
//! | file | job |
//! |---|---|
//! | `stream.rs` | rustls driven over any futures-io stream, client or server side ([`stream::TlsStream`]), and a stream that is TLS or plain ([`stream::MaybeTls`]) |
//! | `client.rs` | what the provider's, the trace collector's and Redis's connections trust: the webpki roots plus `--upstream-ca`, and the server name |
//! | `listener.rs` | TLS on the listeners: each one's certificate, key and client CAs, reloaded when they change, and the first look at a connection (TLS or plain HTTP) |
//!
//! PostgreSQL's TLS is its driver's (tokio) and lives with it, in
//! `stores/postgres/tls.rs`.

pub(crate) mod client;
pub(crate) mod listener;
pub(crate) mod stream;
