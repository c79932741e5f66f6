//! Connections to PostgreSQL: every store's, one way.

use std::time::Duration;

use crate::error::Error;

/// A connection to `url` that reads only (no schema created).
pub(crate) fn open_plain(url: &str) -> Result<postgres::Client, Error> {
    let mut config: postgres::Config = url
        .parse()
        .map_err(|e| Error::Config(format!("bad URL: {e}")))?;
    config.connect_timeout(Duration::from_secs(3));
    config.connect(postgres::NoTls).map_err(failed)
}

/// A connection to `url`, with `schema` created if missing under the
/// advisory lock `lock`.
pub(crate) fn open(url: &str, schema: &str, lock: i64) -> Result<postgres::Client, Error> {
    let mut c = open_plain(url)?;
    // Several instances starting together would race on CREATE TABLE IF
    // NOT EXISTS (PostgreSQL can fail one with a duplicate-type error): an
    // advisory lock makes them take turns.
    c.batch_execute(&format!(
        "BEGIN; SELECT pg_advisory_xact_lock({lock}); {schema} COMMIT;"
    ))
    .map_err(failed)?;
    Ok(c)
}

/// What PostgreSQL (or the driver) said.
pub(crate) fn failed(e: postgres::Error) -> Error {
    Error::Postgres(e.to_string())
}
