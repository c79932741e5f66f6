//! The client side's configuration: the provider's, the trace collector's
//! and Redis's connections verify the server's certificate against the
//! webpki roots plus any extra CA given with `--upstream-ca`, and its name.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use rustls::{ClientConfig, RootCertStore};

use crate::error::Error;

/// The client configuration: webpki roots, plus the certificates of the PEM
/// file at `extra_ca`, HTTP/1.1 by ALPN.
pub(crate) fn client_config(extra_ca: Option<&str>) -> Result<Arc<ClientConfig>, Error> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = extra_ca {
        let bad_ca =
            |e: &dyn std::fmt::Display| Error::Tls(format!("upstream CA file '{path}': {e}"));
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad_ca(&e))?
            .collect::<Result<_, _>>()
            .map_err(|e| bad_ca(&e))?;
        if certs.is_empty() {
            return Err(Error::Tls(format!(
                "upstream CA file '{path}' holds no certificate"
            )));
        }
        for c in certs {
            roots.add(c).map_err(|e| bad_ca(&e))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The server name to verify for `host`.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, Error> {
    ServerName::try_from(host.to_owned())
        .map_err(|e| Error::Tls(format!("'{host}' is not a valid TLS server name: {e}")))
}
