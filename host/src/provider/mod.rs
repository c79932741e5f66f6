//! The provider client: resolving, connecting, rustls over any futures-io
//! stream and the keep-alive connection pool of each endpoint
//! (`connector`, with `tls`), and the probes of ejected endpoints (`probe`).

pub(crate) mod connector;
pub(crate) mod probe;
