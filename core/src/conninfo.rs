//! PostgreSQL connection strings, as libpq reads them (a `postgres://` URL
//! or the `key=value` form): the TLS settings taken out and decided here,
//! the rest left as written for the driver.
//!
//! The driver knows only `sslmode=disable|prefer|require` and refuses the
//! rest of what users copy from their provider's console (`verify-full`,
//! `sslrootcert=…`): this reads libpq's TLS settings, says what each
//! combination means as libpq documents it, and refuses, with the setting
//! to change, what libpq refuses too.
//!
//! | setting | values |
//! |---|---|
//! | `sslmode` | `disable`, `allow`, `prefer` (the default), `require`, `verify-ca`, `verify-full` |
//! | `sslrootcert` | a PEM file of the CA certificates to trust, or `system` (the public roots; `verify-full` unless said otherwise) |
//! | `sslcert`, `sslkey` | the client's certificate chain and key (PEM), for `cert` authentication |
//! | `sslsni` | `1` (the default) or `0`: the server name sent in the handshake |
//! | `ssl_min_protocol_version`, `ssl_max_protocol_version` | `TLSv1.2`, `TLSv1.3` |
//! | `sslcompression` | ignored: TLS compression is never used |
//!
//! `channel_binding` and `sslnegotiation` stay in the string: the driver
//! reads them.

use crate::url::percent_decode;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server insists (taken as `prefer`: TLS when offered).
    Allow,
    /// TLS when the server offers it, unverified (libpq's default).
    Prefer,
    /// TLS or nothing, unverified (verified as `verify-ca` when
    /// `sslrootcert` names a file, as libpq does).
    Require,
    /// TLS, the certificate's chain verified, not its name.
    VerifyCa,
    /// TLS, the chain and the host name verified.
    VerifyFull,
}

impl SslMode {
    fn parse(v: &str) -> Option<SslMode> {
        Some(match v {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// As written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// The CA certificates a server's certificate must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// The PEM file at this path.
    File(String),
    /// The public roots (`sslrootcert=system`).
    System,
}

/// Whether TLS is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsAttempt {
    /// Never (`disable`).
    Never,
    /// When the server offers it; plain otherwise.
    IfOffered,
    /// Always: a server without TLS is refused.
    Always,
}

/// What is verified of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVerify {
    /// Nothing (the handshake's signatures only): encryption against a
    /// passive listener, not an impostor.
    Nothing,
    /// That it chains to the root certificates; not the name.
    Chain,
    /// That it chains to them and names the host connected to.
    ChainAndName,
}

/// A TLS protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2.
    V1_2,
    /// TLS 1.3.
    V1_3,
}

/// The TLS settings of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgTls {
    /// `sslmode`, as written, else `prefer` (`verify-full` with
    /// `sslrootcert=system`).
    pub mode: SslMode,
    /// `sslrootcert`.
    pub root_cert: Option<RootCert>,
    /// `sslcert`: the client's certificate chain.
    pub cert: Option<String>,
    /// `sslkey`: the client's private key.
    pub key: Option<String>,
    /// `sslsni`: whether the host name is sent in the handshake.
    pub sni: bool,
    /// `ssl_min_protocol_version` (TLS 1.2 by default, as libpq).
    pub min_version: TlsVersion,
    /// `ssl_max_protocol_version`.
    pub max_version: TlsVersion,
}

impl Default for PgTls {
    fn default() -> PgTls {
        PgTls {
            mode: SslMode::Prefer,
            root_cert: None,
            cert: None,
            key: None,
            sni: true,
            min_version: TlsVersion::V1_2,
            max_version: TlsVersion::V1_3,
        }
    }
}

impl PgTls {
    /// Whether TLS is tried.
    pub fn attempt(&self) -> TlsAttempt {
        match self.mode {
            SslMode::Disable => TlsAttempt::Never,
            SslMode::Allow | SslMode::Prefer => TlsAttempt::IfOffered,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => TlsAttempt::Always,
        }
    }

    /// What is verified of the server's certificate.
    pub fn verify(&self) -> TlsVerify {
        match self.mode {
            SslMode::Disable | SslMode::Allow | SslMode::Prefer => TlsVerify::Nothing,
            SslMode::Require => match self.root_cert {
                Some(RootCert::File(_)) => TlsVerify::Chain,
                _ => TlsVerify::Nothing,
            },
            SslMode::VerifyCa => TlsVerify::Chain,
            SslMode::VerifyFull => TlsVerify::ChainAndName,
        }
    }
}

/// A connection string without its TLS settings, and those settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conninfo {
    /// The string as written, less the settings read here.
    pub rest: String,
    /// The TLS settings.
    pub tls: PgTls,
}

/// Why a connection string was refused: a sentence naming the setting to
/// change (never the string, which may hold a password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConninfoError(pub String);

impl std::fmt::Display for ConninfoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The settings read here; `Some(why)` for those refused.
fn ours(key: &str) -> Option<Option<&'static str>> {
    Some(match key {
        "sslmode"
        | "sslrootcert"
        | "sslcert"
        | "sslkey"
        | "sslsni"
        | "sslcompression"
        | "ssl_min_protocol_version"
        | "ssl_max_protocol_version" => None,
        "sslpassword" => Some("an encrypted sslkey is not supported: decrypt the key file"),
        "sslcrl" | "sslcrldir" => {
            Some("certificate revocation lists are not supported: leave sslcrl out")
        }
        "requiressl" => Some("requiressl is gone from libpq: write sslmode=require"),
        _ => return None,
    })
}

/// Splits `s`, a `postgres://`/`postgresql://` URL or a `key=value`
/// string, into the settings read here and the rest.
pub fn split_tls(s: &str) -> Result<Conninfo, ConninfoError> {
    let is_url = s.starts_with("postgres://") || s.starts_with("postgresql://");
    let (pairs, rest) = if is_url {
        url_pairs(s)?
    } else {
        keyword_pairs(s)?
    };
    let mut tls = PgTls::default();
    let mut mode_given = false;
    let bad = |key: &str, v: &str, allowed: &str| {
        ConninfoError(format!(
            "{key}={v} is not one of {allowed}: change {key} in the PostgreSQL URL"
        ))
    };
    for (key, value) in pairs {
        let v = value.as_str();
        match key.as_str() {
            "sslmode" => {
                tls.mode = SslMode::parse(v).ok_or_else(|| {
                    bad(
                        "sslmode",
                        v,
                        "disable, allow, prefer, require, verify-ca, verify-full",
                    )
                })?;
                mode_given = true;
            }
            "sslrootcert" => {
                tls.root_cert = Some(if v == "system" {
                    RootCert::System
                } else {
                    RootCert::File(value)
                })
            }
            "sslcert" => tls.cert = Some(value),
            "sslkey" => tls.key = Some(value),
            "sslsni" => {
                tls.sni = match v {
                    "1" => true,
                    "0" => false,
                    _ => return Err(bad("sslsni", v, "0, 1")),
                }
            }
            "ssl_min_protocol_version" | "ssl_max_protocol_version" => {
                let version = match v {
                    "TLSv1.2" => TlsVersion::V1_2,
                    "TLSv1.3" => TlsVersion::V1_3,
                    _ => return Err(bad(&key, v, "TLSv1.2, TLSv1.3")),
                };
                if key == "ssl_min_protocol_version" {
                    tls.min_version = version;
                } else {
                    tls.max_version = version;
                }
            }
            "sslcompression" => {}
            other => {
                let why = ours(other).flatten().unwrap_or("it is not supported");
                return Err(ConninfoError(format!("{other}: {why}")));
            }
        }
    }
    if tls.root_cert == Some(RootCert::System) {
        if !mode_given {
            tls.mode = SslMode::VerifyFull;
        } else if tls.mode != SslMode::VerifyFull && tls.mode != SslMode::Disable {
            // libpq refuses it: the public roots vouch for names, so only a
            // check of the name means anything.
            return Err(ConninfoError(format!(
                "sslmode={} may not be used with sslrootcert=system: write sslmode=verify-full",
                tls.mode.as_str()
            )));
        }
    }
    if matches!(tls.mode, SslMode::VerifyCa | SslMode::VerifyFull) && tls.root_cert.is_none() {
        return Err(ConninfoError(format!(
            "sslmode={} needs sslrootcert: the file of the CA that signed the server's certificate (or system, for a certificate from a public CA)",
            tls.mode.as_str()
        )));
    }
    match (&tls.cert, &tls.key) {
        (Some(_), None) => {
            return Err(ConninfoError(
                "sslcert without sslkey: give the client certificate's key too".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(ConninfoError(
                "sslkey without sslcert: give the client certificate too".into(),
            ));
        }
        _ => {}
    }
    if tls.min_version > tls.max_version {
        return Err(ConninfoError(
            "ssl_min_protocol_version is above ssl_max_protocol_version: change one".into(),
        ));
    }
    Ok(Conninfo { rest, tls })
}

type Pairs = Vec<(String, String)>;

/// The URL's query settings read here (decoded), and the URL without
/// them.
fn url_pairs(s: &str) -> Result<(Pairs, String), ConninfoError> {
    let Some((head, query)) = s.split_once('?') else {
        return Ok((Vec::new(), s.to_owned()));
    };
    let mut pairs = Vec::new();
    let mut kept: Vec<&str> = Vec::new();
    for param in query.split('&') {
        let (k, v) = param.split_once('=').unwrap_or((param, ""));
        let key = percent_decode(k).unwrap_or_default();
        if ours(&key).is_some() {
            let value = percent_decode(v).ok_or_else(|| {
                ConninfoError(format!(
                    "the value of {key} has a bad %-escape: write it %XX-encoded"
                ))
            })?;
            pairs.push((key, value));
        } else {
            kept.push(param);
        }
    }
    let rest = if kept.is_empty() {
        head.to_owned()
    } else {
        format!("{head}?{}", kept.join("&"))
    };
    Ok((pairs, rest))
}

/// The `key=value` settings read here (unquoted), and the string without
/// them.
fn keyword_pairs(s: &str) -> Result<(Pairs, String), ConninfoError> {
    let b = s.as_bytes();
    let mut pairs = Vec::new();
    let mut rest = String::with_capacity(s.len());
    let mut kept_from = 0;
    let mut i = 0;
    let space = |c: u8| c.is_ascii_whitespace();
    while i < b.len() {
        while i < b.len() && space(b[i]) {
            i += 1;
        }
        if i == b.len() {
            break;
        }
        let start = i;
        while i < b.len() && b[i] != b'=' && !space(b[i]) {
            i += 1;
        }
        let key = &s[start..i];
        while i < b.len() && space(b[i]) {
            i += 1;
        }
        if b.get(i) != Some(&b'=') {
            // Not ours to judge: the driver says what is wrong.
            return Ok((pairs, format!("{rest}{}", &s[kept_from..])));
        }
        i += 1;
        while i < b.len() && space(b[i]) {
            i += 1;
        }
        let mut value = Vec::new();
        if b.get(i) == Some(&b'\'') {
            i += 1;
            loop {
                match b.get(i) {
                    None => {
                        return Err(ConninfoError(format!(
                            "the value of {key} has no closing quote"
                        )));
                    }
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') if i + 1 < b.len() => {
                        value.push(b[i + 1]);
                        i += 2;
                    }
                    Some(&c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < b.len() && !space(b[i]) {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                value.push(b[i]);
                i += 1;
            }
        }
        if ours(key).is_some() {
            rest.push_str(&s[kept_from..start]);
            kept_from = i;
            let value = String::from_utf8(value)
                .map_err(|_| ConninfoError(format!("the value of {key} is not UTF-8")))?;
            pairs.push((key.to_owned(), value));
        }
    }
    rest.push_str(&s[kept_from..]);
    Ok((pairs, rest.trim().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> (String, PgTls) {
        let c = split_tls(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        (c.rest, c.tls)
    }

    fn refused(s: &str) -> String {
        split_tls(s).expect_err(s).0
    }

    #[test]
    fn a_url_without_tls_settings_is_left_alone_and_prefers_tls() {
        let url =
            "postgres://u:p%40ss@db:5432/x?application_name=a&target_session_attrs=read-write";
        let (rest, tls) = split(url);
        assert_eq!(rest, url);
        assert_eq!(tls, PgTls::default());
        assert_eq!(tls.attempt(), TlsAttempt::IfOffered);
        assert_eq!(tls.verify(), TlsVerify::Nothing);
        assert_eq!(split("postgresql://db").0, "postgresql://db");
    }

    #[test]
    fn url_settings_are_taken_out_and_decoded() {
        let (rest, tls) = split(
            "postgres://u@h1,h2/db?sslmode=verify-full&application_name=a&sslrootcert=%2Fetc%2Fca%20b.pem&channel_binding=require&sslcert=c.pem&sslkey=k.pem",
        );
        assert_eq!(
            rest,
            "postgres://u@h1,h2/db?application_name=a&channel_binding=require"
        );
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert, Some(RootCert::File("/etc/ca b.pem".into())));
        assert_eq!(
            (tls.cert.as_deref(), tls.key.as_deref()),
            (Some("c.pem"), Some("k.pem"))
        );
        assert_eq!(tls.attempt(), TlsAttempt::Always);
        assert_eq!(tls.verify(), TlsVerify::ChainAndName);
        let (rest, tls) = split("postgres://db/x?sslmode=disable");
        assert_eq!(rest, "postgres://db/x");
        assert_eq!(tls.attempt(), TlsAttempt::Never);
    }

    #[test]
    fn keyword_settings_are_taken_out_and_unquoted() {
        let (rest, tls) = split(
            "host=db  sslmode = require user=u sslrootcert='/my ca\\'s.pem' password='a b' sslsni=0",
        );
        assert_eq!(
            rest.split_whitespace().collect::<Vec<_>>(),
            ["host=db", "user=u", "password='a", "b'"]
        );
        assert_eq!(tls.mode, SslMode::Require);
        assert_eq!(tls.root_cert, Some(RootCert::File("/my ca's.pem".into())));
        assert!(!tls.sni);
        // require with a root file: verified as verify-ca, as libpq does.
        assert_eq!(tls.verify(), TlsVerify::Chain);
        assert_eq!(
            split("host=db sslmode=require").1.verify(),
            TlsVerify::Nothing
        );
        assert_eq!(
            refused("host=db sslrootcert='x"),
            "the value of sslrootcert has no closing quote"
        );
    }

    #[test]
    fn what_libpq_refuses_is_refused_with_the_setting_to_change() {
        assert!(
            refused("postgres://db?sslmode=verify_full")
                .contains("sslmode=verify_full is not one of")
        );
        assert!(refused("postgres://db?sslmode=verify-ca").contains("needs sslrootcert"));
        assert!(refused("host=db sslmode=verify-full").contains("needs sslrootcert"));
        assert!(
            refused("postgres://db?sslrootcert=system&sslmode=require")
                .contains("sslmode=verify-full")
        );
        assert!(refused("postgres://db?sslcert=c.pem").contains("sslkey"));
        assert!(refused("postgres://db?sslkey=k.pem").contains("sslcert"));
        assert!(refused("postgres://db?sslpassword=x").contains("encrypted"));
        assert!(refused("postgres://db?sslcrl=x").contains("revocation"));
        assert!(refused("postgres://db?sslrootcert=%zz").contains("%-escape"));
        assert!(
            refused(
                "postgres://db?ssl_min_protocol_version=TLSv1.3&ssl_max_protocol_version=TLSv1.2"
            )
            .contains("ssl_min_protocol_version")
        );
        assert!(
            refused("postgres://db?ssl_min_protocol_version=TLSv1.1").contains("TLSv1.2, TLSv1.3")
        );
        // Never the password.
        assert!(!refused("postgres://u:secret@db?sslmode=x").contains("secret"));
    }

    #[test]
    fn the_public_roots_mean_verify_full() {
        let tls = split("postgres://db?sslrootcert=system").1;
        assert_eq!(
            (tls.mode, tls.verify()),
            (SslMode::VerifyFull, TlsVerify::ChainAndName)
        );
        assert_eq!(
            split("postgres://db?sslrootcert=system&sslmode=disable")
                .1
                .attempt(),
            TlsAttempt::Never
        );
    }

    #[test]
    fn what_is_not_ours_reaches_the_driver_as_written() {
        // A malformed keyword string is the driver's to refuse.
        assert_eq!(split("host=db oops").0, "host=db oops");
        assert_eq!(split("").0, "");
        assert_eq!(split("postgres://db?x").0, "postgres://db?x");
    }

    proptest::proptest! {
        /// Whatever the string, an answer and no panic; what is kept
        /// holds none of the settings read here.
        #[test]
        fn any_string_is_split_or_refused(
            s in "(postgres://|host=db )?[a-z_=&?%'\\\\ .0-9/-]{0,60}(sslmode|sslrootcert|sslcert|sslkey|sslsni)?[=a-z' ]{0,12}",
        ) {
            if let Ok(c) = split_tls(&s) {
                let kept_keys: Vec<&str> = if s.starts_with("postgres://") {
                    c.rest.split_once('?').map(|(_, q)| q).unwrap_or("").split('&').map(|p| p.split('=').next().unwrap_or("")).collect()
                } else {
                    Vec::new()
                };
                for k in kept_keys {
                    proptest::prop_assert!(ours(&crate::url::percent_decode(k).unwrap_or_default()).is_none(), "{k} kept in {}", c.rest);
                }
            }
        }
    }
}
