//! TLS on the listeners: which certificate and key each serves, and whose
//! client certificates the admin listener asks for. The files are read by
//! the runtime (and read again when they change); here the settings are
//! paired and checked.

use super::ConfigError;
use super::settings::Resolver;

/// A listener's TLS files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    /// The certificate chain (PEM), the server's certificate first.
    pub cert: String,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: String,
    /// CA certificates (PEM) a client certificate must chain to; the
    /// listener then refuses clients without one. Admin listener only.
    pub client_ca: Option<String>,
}

/// The public listener's TLS (`tls_cert`, `tls_key`), if set.
pub(super) fn public(r: &Resolver) -> Result<Option<ListenerTls>, ConfigError> {
    pair(r, "tls_cert", "tls_key", None)
}

/// The admin listener's TLS (`admin_tls_cert`, `admin_tls_key`,
/// `admin_client_ca`), if set.
pub(super) fn admin(r: &Resolver) -> Result<Option<ListenerTls>, ConfigError> {
    let client_ca = r.get("admin_client_ca").map(|(v, _)| v);
    let tls = pair(r, "admin_tls_cert", "admin_tls_key", client_ca.clone())?;
    if tls.is_some() && r.get("admin_listen").is_none() {
        return Err(ConfigError(
            "admin_tls_cert: there is no admin listener to serve TLS on; set admin_listen too"
                .into(),
        ));
    }
    if tls.is_none() && client_ca.is_some() {
        return Err(ConfigError(
            "admin_client_ca: client certificates are asked for in the TLS handshake; set admin_tls_cert and admin_tls_key too".into(),
        ));
    }
    Ok(tls)
}

fn pair(
    r: &Resolver,
    cert: &str,
    key: &str,
    client_ca: Option<String>,
) -> Result<Option<ListenerTls>, ConfigError> {
    let nonempty = |k: &str| r.get(k).map(|(v, _)| v).filter(|v| !v.is_empty());
    match (nonempty(cert), nonempty(key)) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(ListenerTls {
            cert,
            key,
            client_ca,
        })),
        (Some(_), None) => Err(ConfigError(format!(
            "{cert} is set but {key} is not: TLS needs the certificate's private key too"
        ))),
        (None, Some(_)) => Err(ConfigError(format!(
            "{key} is set but {cert} is not: TLS needs the certificate too"
        ))),
    }
}
