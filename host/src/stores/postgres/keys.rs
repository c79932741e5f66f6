//! The keys in PostgreSQL (`keys = "postgres://…"`): the table
//! `chatgate_keys` (one row per secret, as a keys file's `[[key]]`
//! tables) and the audit trail `chatgate_audit` (`keys.sql`, created when
//! missing).
//!
//! A change is one transaction: the table locked against other writers
//! (readers go on), read, changed by [`chatgate_core::apply_key_op`],
//! written back row by row, its audit record inserted, and `NOTIFY
//! chatgate_keys` sent, which PostgreSQL delivers only if it commits.
//! Every instance has a thread ([`watch`]) that `LISTEN`s on its own
//! connection and re-reads the table on a notification, after every
//! reconnection, and every [`REREAD`] in any case, so a notification lost
//! while a connection was down heals. While PostgreSQL is unreachable the
//! keys already loaded stay in force.

use std::collections::HashMap;
use std::time::Duration;

use chatgate_core::{AuditRecord, FieldChange, KeyOp, RawKey, apply_key_op};
use postgres::GenericClient;

use super::connection::{column, describe};
use postgres::fallible_iterator::FallibleIterator;

use crate::error::Error;
use crate::stores::keys::ChangeError;

/// The tables (created when missing): `keys.sql`, probed for every column
/// read or written here and the index.
const SCHEMA: super::Schema = super::Schema {
    sql: include_str!("../../../keys.sql"),
    probe: "SELECT sha256, name, requests_per_minute, tokens_per_minute, budget_usd, \
        budget_period, max_in_flight, models, created, expires, position FROM chatgate_keys LIMIT 0; \
        SELECT id, at, actor, address, action, key, changes FROM chatgate_audit LIMIT 0; \
        SELECT 'chatgate_keys_name'::regclass",
    // "cgkeys" in ASCII.
    lock: 0x6367_6b65_7973,
    file: "keys.sql",
};
/// The channel changes are announced on.
pub(crate) const CHANNEL: &str = "chatgate_keys";
/// The longest a watcher goes without re-reading the table.
pub(crate) const REREAD: Duration = Duration::from_secs(5);
/// Longest pause between attempts while PostgreSQL is down.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

const COLUMNS: &str = "name, sha256, requests_per_minute, tokens_per_minute, budget_usd, \
    budget_period, max_in_flight, models, created, expires";

fn connect(url: &str) -> Result<postgres::Client, Error> {
    super::open(url, &SCHEMA)
}

/// The URL with its password (if any) left out.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "postgres://…".to_owned();
    };
    // The query may hold a password too: left out whole.
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    match rest.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{scheme}://{user}:…@{host}")
        }
        None => format!("{scheme}://{rest}"),
    }
}

/// Every key, in the order they were added.
pub(crate) fn read(url: &str) -> Result<Vec<RawKey>, Error> {
    read_rows(&mut connect(url)?)
}

fn read_rows(c: &mut impl GenericClient) -> Result<Vec<RawKey>, Error> {
    let rows = c
        .query(
            &format!("SELECT {COLUMNS} FROM chatgate_keys ORDER BY position"),
            &[],
        )
        .map_err(failed)?;
    let n = |r: &postgres::Row, i: usize| -> Result<Option<u64>, Error> {
        Ok(column::<Option<i64>>(r, i, "chatgate_keys")?.and_then(|v| u64::try_from(v).ok()))
    };
    rows.iter()
        .map(|r| {
            let col = |i: usize| column(r, i, "chatgate_keys");
            Ok(RawKey {
                name: col(0)?,
                sha256: col(1)?,
                requests_per_minute: n(r, 2)?,
                tokens_per_minute: n(r, 3)?,
                budget_usd: column(r, 4, "chatgate_keys")?,
                budget_period: column(r, 5, "chatgate_keys")?,
                max_in_flight: n(r, 6)?,
                models: column(r, 7, "chatgate_keys")?,
                created: column(r, 8, "chatgate_keys")?,
                expires: column(r, 9, "chatgate_keys")?,
            })
        })
        .collect()
}

/// Makes `op` at `now_ms` in one transaction with its audit record
/// (`record` builds it from what changed): the record, with its id.
pub(crate) fn change(
    url: &str,
    op: &KeyOp,
    now_ms: u64,
    record: impl FnOnce(Vec<FieldChange>) -> AuditRecord,
) -> Result<AuditRecord, ChangeError> {
    let mut c = connect(url)?;
    let mut tx = c.transaction().map_err(failed)?;
    tx.batch_execute("LOCK TABLE chatgate_keys IN EXCLUSIVE MODE")
        .map_err(failed)?;
    let before = read_rows(&mut tx)?;
    let mut after = before.clone();
    // Refused: the transaction is dropped, so rolled back.
    let changes = apply_key_op(&mut after, op, now_ms).map_err(ChangeError::Refused)?;
    write_back(&mut tx, &before, &after)?;
    let mut record = record(changes);
    record.id = Some(insert_audit(&mut tx, &record, now_ms)?);
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &op.name()])
        .map_err(failed)?;
    tx.commit().map_err(failed)?;
    Ok(record)
}

/// Writes the rows that differ between `before` and `after` (by secret).
fn write_back(
    c: &mut impl GenericClient,
    before: &[RawKey],
    after: &[RawKey],
) -> Result<(), Error> {
    let old: HashMap<&str, &RawKey> = before.iter().map(|k| (k.sha256.as_str(), k)).collect();
    let new: HashMap<&str, &RawKey> = after.iter().map(|k| (k.sha256.as_str(), k)).collect();
    for k in before
        .iter()
        .filter(|k| !new.contains_key(k.sha256.as_str()))
    {
        c.execute("DELETE FROM chatgate_keys WHERE sha256 = $1", &[&k.sha256])
            .map_err(failed)?;
    }
    for k in after {
        let sql = match old.get(k.sha256.as_str()) {
            Some(o) if *o == k => continue,
            Some(_) => {
                "UPDATE chatgate_keys SET name = $1, requests_per_minute = $3, \
                tokens_per_minute = $4, budget_usd = $5, budget_period = $6, max_in_flight = $7, \
                models = $8, created = $9, expires = $10 WHERE sha256 = $2"
            }
            None => {
                "INSERT INTO chatgate_keys (name, sha256, requests_per_minute, \
                tokens_per_minute, budget_usd, budget_period, max_in_flight, models, created, \
                expires) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            }
        };
        let n = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
        c.execute(
            sql,
            &[
                &k.name,
                &k.sha256,
                &n(k.requests_per_minute),
                &n(k.tokens_per_minute),
                &k.budget_usd,
                &k.budget_period,
                &n(k.max_in_flight),
                &k.models,
                &k.created,
                &k.expires,
            ],
        )
        .map_err(failed)?;
    }
    Ok(())
}

fn insert_audit(c: &mut impl GenericClient, r: &AuditRecord, now_ms: u64) -> Result<u64, Error> {
    let changes = serde_json::to_string(&r.changes).unwrap_or_else(|_| "[]".into());
    let row = c
        .query_one(
            "INSERT INTO chatgate_audit (at, actor, address, action, key, changes) \
             VALUES (to_timestamp($1::bigint / 1000.0), $2, $3, $4, $5, $6::text::jsonb) RETURNING id",
            &[
                &i64::try_from(now_ms).unwrap_or(i64::MAX),
                &r.actor,
                &r.address,
                &r.action,
                &r.key,
                &changes,
            ],
        )
        .map_err(failed)?;
    Ok(column::<i64>(&row, 0, "chatgate_audit")?.max(0) as u64)
}

/// Up to `limit` audit records, newest first, with ids below `before`.
pub(crate) fn audit(
    url: &str,
    before: Option<u64>,
    limit: usize,
) -> Result<Vec<AuditRecord>, Error> {
    let mut c = connect(url)?;
    let before = before.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
    let rows = c
        .query(
            "SELECT id, (extract(epoch FROM at) * 1000)::bigint, actor, address, action, key, \
             changes::text FROM chatgate_audit WHERE ($1::bigint IS NULL OR id < $1) \
             ORDER BY id DESC LIMIT $2",
            &[&before, &(limit as i64)],
        )
        .map_err(failed)?;
    rows.iter()
        .map(|r| {
            let at: i64 = column(r, 1, "chatgate_audit")?;
            let changes: &str = column(r, 6, "chatgate_audit")?;
            Ok(AuditRecord {
                id: Some(column::<i64>(r, 0, "chatgate_audit")?.max(0) as u64),
                at: chatgate_core::rfc3339_ms(at.max(0) as u64),
                actor: column(r, 2, "chatgate_audit")?,
                address: column(r, 3, "chatgate_audit")?,
                action: column(r, 4, "chatgate_audit")?,
                key: column(r, 5, "chatgate_audit")?,
                changes: serde_json::from_str(changes).unwrap_or_default(),
            })
        })
        .collect()
}

/// Watches the table for the life of the process: `loaded` gets every
/// version of the keys that differs from the last one it got, first the
/// one read at start (`initial`).
pub(crate) fn watch(
    url: String,
    initial: Vec<RawKey>,
    loaded: impl Fn(Vec<RawKey>) + Send + 'static,
) {
    let spawned = std::thread::Builder::new()
        .name("chatgate-keys".into())
        .spawn(move || {
            let mut last = initial;
            let mut backoff = Duration::from_millis(100);
            let mut warned = false;
            loop {
                match listen(&url, &mut last, &loaded, &mut warned) {
                    Ok(()) => backoff = Duration::from_millis(100),
                    Err(e) => {
                        if !warned {
                            tracing::error!(
                                "{e}; the keys in force stay until PostgreSQL answers again"
                            );
                            warned = true;
                        }
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the thread that watches the keys in PostgreSQL");
    }
}

/// One connection's life: `LISTEN`, then re-read on every notification
/// and every [`REREAD`]; returns when the connection fails.
fn listen(
    url: &str,
    last: &mut Vec<RawKey>,
    loaded: &impl Fn(Vec<RawKey>),
    warned: &mut bool,
) -> Result<(), Error> {
    let mut c = connect(url)?;
    c.batch_execute(&format!("LISTEN {CHANNEL}"))
        .map_err(failed)?;
    if *warned {
        tracing::info!("keys: PostgreSQL answers again; re-reading the keys");
        *warned = false;
    }
    loop {
        // Read after LISTEN: a change committed in between is in this
        // read or announced to this connection.
        let keys = read_rows(&mut c)?;
        if keys != *last {
            last.clone_from(&keys);
            loaded(keys);
        }
        {
            let mut notes = c.notifications();
            // A notification, or the time to re-read anyway.
            notes.timeout_iter(REREAD).next().map_err(failed)?;
            // Several changes at once: one read.
            while notes.iter().next().map_err(failed)?.is_some() {}
        }
        if c.is_closed() {
            return Err(Error::Postgres(
                "keys in PostgreSQL: connection closed".into(),
            ));
        }
    }
}

fn failed(e: postgres::Error) -> Error {
    Error::Postgres(format!("keys in PostgreSQL: {}", describe(&e)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_password_is_shown() {
        use super::redacted;
        assert_eq!(
            redacted("postgres://cg:s3cret@db/keys"),
            "postgres://cg:…@db/keys"
        );
        assert_eq!(
            redacted("postgres://cg:p@ss@db/keys"),
            "postgres://cg:…@db/keys"
        );
        assert_eq!(
            redacted("postgres://db/keys?password=s3cret"),
            "postgres://db/keys"
        );
    }
}
