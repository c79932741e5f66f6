//! Connections to PostgreSQL: every store's, one way; and what a failure
//! was, kept from the driver's error: the server's SQLSTATE and message
//! (never just "db error"), and whether it was the row's or the
//! connection's.

use std::time::Duration;

use chatgate_core::{PgTls, TlsAttempt};
use postgres::config::SslMode;
use rustls::CertificateError;

use crate::error::Error;

/// A connection to `url` that reads only (no schema created), over TLS
/// as the URL's libpq settings say (`sslmode`, `sslrootcert`, `sslcert`,
/// `sslkey`; `prefer` when it says nothing, as libpq).
pub(crate) fn open_plain(url: &str) -> Result<postgres::Client, Error> {
    let info = chatgate_core::split_tls(url)
        .map_err(|e| Error::Config(format!("the PostgreSQL URL: {e}")))?;
    let mut config: postgres::Config = info
        .rest
        .parse()
        .map_err(|e| Error::Config(format!("bad URL: {e}")))?;
    config.connect_timeout(Duration::from_secs(3));
    let connected = match info.tls.attempt() {
        TlsAttempt::Never => config.ssl_mode(SslMode::Disable).connect(postgres::NoTls),
        attempt => {
            let tls = super::tls::connector(&info.tls)?;
            config.ssl_mode(if attempt == TlsAttempt::Always {
                SslMode::Require
            } else {
                SslMode::Prefer
            });
            config.connect(tls)
        }
    };
    connected.map_err(|e| Error::Postgres(explained(&e, &info.tls)))
}

/// [`describe`]'s words for a failure to connect, and the setting of the
/// URL to change when TLS is why.
fn explained(e: &postgres::Error, tls: &PgTls) -> String {
    let said = describe(e);
    let hint = tls_hint(e, &said, tls);
    match hint {
        Some(hint) => format!("{said}; {hint}"),
        None => said,
    }
}

fn tls_hint(e: &postgres::Error, said: &str, tls: &PgTls) -> Option<&'static str> {
    if let Some(db) = e.as_db_error() {
        let message = db.message();
        return if message.contains("no encryption") && tls.attempt() != TlsAttempt::Always {
            Some(
                "the server accepts only TLS here: set sslmode=verify-full (with sslrootcert) or sslmode=require in the PostgreSQL URL",
            )
        } else if message.contains("requires a valid client certificate") {
            Some(
                "the server asks for a client certificate: set sslcert and sslkey in the PostgreSQL URL",
            )
        } else if message.contains("certificate authentication failed") {
            Some(
                "the client certificate's common name (CN) must be the user name in the URL: change the user or sslcert",
            )
        } else {
            None
        };
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(rustls::Error::InvalidCertificate(c)) = cause.downcast_ref::<rustls::Error>() {
            return Some(match c {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    "the server's certificate is not signed by a CA of sslrootcert: set sslrootcert to the file of the CA that signed it"
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => {
                    "the server's certificate does not name the host in the URL: connect by a name it has, or set sslmode=verify-ca"
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "the server's certificate has expired: renew it on the server"
                }
                _ => {
                    "the server's certificate is refused: check sslrootcert and sslmode in the PostgreSQL URL"
                }
            });
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(rustls::Error::InvalidCertificate(_)) =
                inner.downcast_ref::<rustls::Error>()
        {
            source = Some(inner);
            continue;
        }
        source = cause.source();
    }
    if said.contains("server does not support TLS") {
        return Some(
            "the server offers no TLS: turn ssl on in the server, or set sslmode=prefer in the PostgreSQL URL",
        );
    }
    if said.contains("did not use channel binding") {
        return Some(
            "channel_binding=require needs TLS (sslmode=require or stronger) and SCRAM authentication with a server certificate signed with RSA or ECDSA: change channel_binding or sslmode in the PostgreSQL URL",
        );
    }
    None
}

/// A store's tables: the SQL that creates them when missing, and a probe
/// that reads every column the store uses (and nothing else).
pub(crate) struct Schema {
    /// `CREATE TABLE IF NOT EXISTS …` and the like, run when the probe
    /// fails.
    pub(crate) sql: &'static str,
    /// `SELECT <every column> FROM <table> LIMIT 0`, one per table.
    pub(crate) probe: &'static str,
    /// The advisory lock taken while creating them.
    pub(crate) lock: i64,
    /// The SQL file's name, for the error that says how to create them.
    pub(crate) file: &'static str,
}

/// A connection to `url`, with `schema`'s tables created if the probe
/// finds them missing or short of a column. Tables that are already
/// whole are not touched: the gateway's role needs no more than reading
/// and writing rows (an operator may create them as another role, with
/// the SQL file, and grant it only that).
pub(crate) fn open(url: &str, schema: &Schema) -> Result<postgres::Client, Error> {
    let mut c = open_plain(url)?;
    if c.batch_execute(schema.probe).is_ok() {
        return Ok(c);
    }
    // Several instances starting together would race on CREATE TABLE IF
    // NOT EXISTS (PostgreSQL can fail one with a duplicate-type error): an
    // advisory lock makes them take turns.
    let sql = format!(
        "BEGIN; SELECT pg_advisory_xact_lock({}); {} COMMIT;",
        schema.lock, schema.sql
    );
    c.batch_execute(&sql).map_err(|e| {
        let mut said = describe(&e);
        if e.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) {
            said.push_str(&format!(
                "; this role may not create or change chatgate's tables: create them once with {} as a role that may (its owner), and grant this one the rows",
                schema.file
            ));
        }
        Error::Postgres(said)
    })?;
    Ok(c)
}

/// What PostgreSQL (or the driver) said: the server's message, its
/// detail and its SQLSTATE; else the driver's error and its causes.
pub(crate) fn failed(e: postgres::Error) -> Error {
    Error::Postgres(describe(&e))
}

/// [`failed`]'s words.
pub(crate) fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            s.push_str(": ");
            s.push_str(detail);
        }
        return s;
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

/// Column `i` of `row`, a row of `table`, or the error saying which
/// column is not what the table chatgate makes has (a table made by hand).
pub(crate) fn column<'a, T: postgres::types::FromSql<'a>>(
    row: &'a postgres::Row,
    i: usize,
    table: &str,
) -> Result<T, Error> {
    row.try_get(i).map_err(|e| {
        let name = row.columns().get(i).map_or("?", |c| c.name());
        Error::Postgres(format!(
            "the column {name} of {table} is not what chatgate makes it ({}); is it a table made by hand?",
            describe(&e)
        ))
    })
}

/// Whether the server refused what a row holds (a data exception, class
/// 22: a value the column cannot hold; an integrity constraint, class
/// 23): sending the same row again fails again, so it is set aside. Any
/// other failure (the connection, the server going away or read-only, a
/// lock, a missing table) is the connection's: the same rows are sent
/// again once it is back.
pub(crate) fn is_row_fault(e: &postgres::Error) -> bool {
    e.code()
        .is_some_and(|c| c.code().starts_with("22") || c.code().starts_with("23"))
}
