//! The console's sessions in PostgreSQL (`console.sql`), so that a session
//! survives a restart and works on every instance: the digest of each
//! session's id (never the id), who, whether an administrator, and when it
//! expires. Core decides everything about sessions
//! (`chatgate_core::console::Access`); this reads and writes the rows.

use chatgate_core::console::{SessionChange, StoredSession};

use super::connection::column;
use crate::error::Error;

/// The table (created when missing): `console.sql`, probed for its
/// columns.
const SCHEMA: super::Schema = super::Schema {
    sql: include_str!("../../../console.sql"),
    probe: "SELECT id_sha256, actor, admin, expires_ms FROM chatgate_sessions LIMIT 0",
    // "cgsess" in ASCII.
    lock: 0x6367_7365_7373,
    file: "console.sql",
};

fn failed(e: postgres::Error) -> Error {
    Error::Postgres(format!(
        "console sessions in PostgreSQL: {}",
        super::connection::describe(&e)
    ))
}

/// A connection, the table created when missing.
pub(crate) fn connect(url: &str) -> Result<postgres::Client, Error> {
    super::open(url, &SCHEMA)
}

/// Writes what opened and closed, and forgets the sessions expired at
/// `now_ms`; then every session still open.
pub(crate) fn sync(
    c: &mut postgres::Client,
    changes: &[SessionChange],
    now_ms: u64,
) -> Result<Vec<StoredSession>, Error> {
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let mut tx = c.transaction().map_err(failed)?;
    for change in changes {
        match change {
            SessionChange::Opened(s) => tx.execute(
                "INSERT INTO chatgate_sessions (id_sha256, actor, admin, expires_ms) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (id_sha256) DO NOTHING",
                &[
                    &StoredSession::hex(&s.digest),
                    &s.actor,
                    &s.admin,
                    &ms(s.until_ms),
                ],
            ),
            SessionChange::Closed(d) => tx.execute(
                "DELETE FROM chatgate_sessions WHERE id_sha256 = $1",
                &[&StoredSession::hex(d)],
            ),
        }
        .map_err(failed)?;
    }
    tx.execute(
        "DELETE FROM chatgate_sessions WHERE expires_ms <= $1",
        &[&ms(now_ms)],
    )
    .map_err(failed)?;
    let rows = tx
        .query(
            "SELECT id_sha256, actor, admin, expires_ms FROM chatgate_sessions",
            &[],
        )
        .map_err(failed)?;
    tx.commit().map_err(failed)?;
    let mut open = Vec::with_capacity(rows.len());
    for r in &rows {
        // A digest that is not one: a row no session can match.
        let Some(digest) = StoredSession::unhex(column(r, 0, "chatgate_sessions")?) else {
            continue;
        };
        open.push(StoredSession {
            digest,
            actor: column(r, 1, "chatgate_sessions")?,
            admin: column(r, 2, "chatgate_sessions")?,
            until_ms: column::<i64>(r, 3, "chatgate_sessions")?.max(0) as u64,
        });
    }
    Ok(open)
}
