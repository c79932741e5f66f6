//! The Responses API's kept responses in PostgreSQL (`responses.sql`),
//! shared by a fleet: one row per response, the bytes each key keeps, and
//! what the core asks of them ([`chatgate_core::StoreAsk`]) in one
//! transaction each. A conversation is one query: the response and every
//! id its `ancestors` column names. Core decides what is kept and what an
//! answer says; this reads and writes the rows.

use std::sync::Mutex;

use chatgate_core::dialect::responses::stored::StoredResponse;
use chatgate_core::{StoreError, StoreReply};

use super::connection::describe;
use crate::error::Error;

/// The tables (created when missing): `responses.sql`, probed for their
/// columns.
const SCHEMA: super::Schema = super::Schema {
    sql: include_str!("../../../responses.sql"),
    probe: "SELECT id, key_name, expires_at, bytes, ancestors, record, running_until FROM chatgate_responses LIMIT 0; \
            SELECT key_name, bytes FROM chatgate_response_bytes LIMIT 0",
    // "cgresp" in ASCII.
    lock: 0x6367_7265_7370,
    file: "responses.sql",
};

/// Most responses forgotten in one transaction of the reaper.
const REAP_BATCH: i64 = 1_000;

/// Connections kept open between calls, at most.
const IDLE_CONNECTIONS: usize = 8;

/// How long an instance vouches for a run it keeps running (seconds); it
/// renews it three times as often ([`crate::stores::responses`]).
pub(crate) const LEASE_SECS: u64 = 15;

/// The store: its URL, the connections not in use, and the runs this
/// process has not finished (their leases renewed).
pub(crate) struct PgResponses {
    url: String,
    idle: Mutex<Vec<postgres::Client>>,
    running: Mutex<std::collections::HashSet<String>>,
}

fn failed(e: &postgres::Error) -> StoreError {
    StoreError::Unreachable(format!(
        "the responses store in PostgreSQL: {}",
        describe(e)
    ))
}

fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl PgResponses {
    /// Connects once (the tables created when missing), so a wrong URL
    /// stops the start.
    pub(crate) fn open(url: &str) -> Result<PgResponses, Error> {
        let c = super::open(url, &SCHEMA).map_err(|e| match e {
            Error::Postgres(why) => {
                Error::Postgres(format!("the responses store (--responses-store): {why}"))
            }
            other => other,
        })?;
        Ok(PgResponses {
            url: url.to_owned(),
            idle: Mutex::new(vec![c]),
            running: Mutex::new(std::collections::HashSet::new()),
        })
    }

    /// Runs `f` on a connection: an idle one, else a new one. A connection
    /// that failed is dropped, never reused.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut postgres::Client) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut c = match idle {
            Some(c) if !c.is_closed() => c,
            _ => super::open_plain(&self.url).map_err(|e| {
                StoreError::Unreachable(format!("the responses store in PostgreSQL: {e}"))
            })?,
        };
        let out = f(&mut c).map_err(|e| failed(&e))?;
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE_CONNECTIONS {
            idle.push(c);
        }
        Ok(out)
    }
}

impl crate::stores::responses::Backend for PgResponses {
    fn read(
        &self,
        key: &str,
        chain: Option<&str>,
        responses: &[String],
        unix: u64,
    ) -> Result<StoreReply, StoreError> {
        let (rows, bytes) = self.with(|c| {
            let rows = c.query(
                "SELECT id, record FROM chatgate_responses \
                 WHERE key_name = $1 AND expires_at > $2 AND (id = $3 OR id = ANY($4) OR id = ANY( \
                   COALESCE((SELECT ancestors FROM chatgate_responses WHERE id = $3 AND key_name = $1), '{}')))",
                &[&key, &as_i64(unix), &chain.unwrap_or(""), &responses],
            )?;
            let bytes = c.query_opt(
                "SELECT bytes FROM chatgate_response_bytes WHERE key_name = $1",
                &[&key],
            )?;
            Ok((rows, bytes))
        })?;
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let (Ok(id), Ok(record)) = (row.try_get::<_, &str>(0), row.try_get::<_, &[u8]>(1))
            else {
                continue;
            };
            match StoredResponse::decode(record) {
                Ok(r) if r.key == key && r.id == id => found.push(r),
                Ok(_) => tracing::warn!(
                    id,
                    "a kept response whose row does not match its record is skipped"
                ),
                Err(e) => tracing::warn!(id, error = %e, "a kept response is skipped"),
            }
        }
        let take = |id: &str, found: &[StoredResponse]| found.iter().find(|r| r.id == id).cloned();
        let mut found_chain = Vec::new();
        if let Some(last) = chain.and_then(|id| take(id, &found)) {
            found_chain.extend(last.ancestors.iter().filter_map(|a| take(a, &found)));
            found_chain.push(last);
        }
        let alone = responses.iter().filter_map(|id| take(id, &found)).collect();
        let key_bytes = bytes
            .and_then(|r| r.try_get::<_, i64>(0).ok())
            .map_or(0, |b| u64::try_from(b).unwrap_or(0));
        Ok(StoreReply::Read {
            chain: found_chain,
            responses: alone,
            key_bytes,
        })
    }

    fn keep(&self, r: &StoredResponse, unix: u64, replace_only: bool) -> Result<(), StoreError> {
        let bytes = as_i64(r.bytes());
        let expires = as_i64(r.expires_at);
        let running = chatgate_core::dialect::responses::stored::is_running(&r.status());
        let lease = if running {
            as_i64(unix + LEASE_SECS)
        } else {
            0
        };
        self.with(|c| {
            let mut tx = c.transaction()?;
            // A background run's record replaces its queued one: its key
            // keeps the difference.
            let old: Option<i64> = tx
                .query_opt(
                    "SELECT bytes FROM chatgate_responses WHERE id = $1 AND key_name = $2 FOR UPDATE",
                    &[&r.id, &r.key],
                )?
                .map(|row| row.try_get(0))
                .transpose()?;
            if replace_only && old.is_none() {
                // Deleted meanwhile: stays deleted.
                return tx.commit();
            }
            let old = old.unwrap_or(0);
            let written = tx.execute(
                "INSERT INTO chatgate_responses (id, key_name, expires_at, bytes, ancestors, record, running_until) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET \
                   expires_at = excluded.expires_at, bytes = excluded.bytes, record = excluded.record, \
                   running_until = excluded.running_until \
                 WHERE chatgate_responses.key_name = excluded.key_name",
                &[&r.id, &r.key, &expires, &bytes, &r.ancestors, &r.encode(), &lease],
            )?;
            if written == 1 {
                tx.execute(
                    "INSERT INTO chatgate_response_bytes (key_name, bytes) VALUES ($1, $2) \
                     ON CONFLICT (key_name) DO UPDATE SET bytes = GREATEST(chatgate_response_bytes.bytes + $2, 0)",
                    &[&r.key, &(bytes - old)],
                )?;
            }
            // Its conversation lasts as long as it does.
            if !r.ancestors.is_empty() {
                tx.execute(
                    "UPDATE chatgate_responses SET expires_at = $1 \
                     WHERE key_name = $2 AND id = ANY($3) AND expires_at < $1",
                    &[&expires, &r.key, &r.ancestors],
                )?;
            }
            tx.commit()
        })?;
        let mut mine = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if running {
            mine.insert(r.id.clone());
        } else {
            mine.remove(&r.id);
        }
        Ok(())
    }

    fn delete(&self, key: &str, id: &str) -> Result<bool, StoreError> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            let gone = tx.query_opt(
                "DELETE FROM chatgate_responses WHERE id = $1 AND key_name = $2 RETURNING bytes",
                &[&id, &key],
            )?;
            if let Some(row) = &gone {
                let bytes: i64 = row.try_get(0)?;
                subtract(&mut tx, key, bytes)?;
            }
            tx.commit()?;
            Ok(gone.is_some())
        })
    }
}

impl PgResponses {
    /// A run of this process ended: its lease is no longer renewed.
    pub(crate) fn run_ended(&self, id: &str) {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// Renews the leases of this process's unfinished runs, and marks
    /// failed the runs whose instance stopped vouching for them (it
    /// stopped or crashed); how many.
    pub(crate) fn check_runs(&self, unix: u64) -> Result<usize, StoreError> {
        let mine: Vec<String> = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect();
        self.with(|c| {
            if !mine.is_empty() {
                c.execute(
                    "UPDATE chatgate_responses SET running_until = $1 WHERE id = ANY($2) AND running_until > 0",
                    &[&as_i64(unix + LEASE_SECS), &mine],
                )?;
            }
            let mut tx = c.transaction()?;
            let rows = tx.query(
                "SELECT id, record FROM chatgate_responses \
                 WHERE running_until > 0 AND running_until < $1 FOR UPDATE SKIP LOCKED",
                &[&as_i64(unix)],
            )?;
            let mut n = 0;
            for row in &rows {
                let id: &str = row.try_get(0)?;
                let Ok(mut r) = StoredResponse::decode(row.try_get(1)?) else {
                    continue;
                };
                let before = as_i64(r.bytes());
                r.object = chatgate_core::dialect::responses::stored::with_status(
                    &r.object,
                    "failed",
                    Some(crate::stores::responses::RESTARTED),
                );
                let after = as_i64(r.bytes());
                tx.execute(
                    "UPDATE chatgate_responses SET record = $2, bytes = $3, running_until = 0 WHERE id = $1",
                    &[&id, &r.encode(), &after],
                )?;
                tx.execute(
                    "UPDATE chatgate_response_bytes SET bytes = GREATEST(bytes + $2, 0) WHERE key_name = $1",
                    &[&r.key, &(after - before)],
                )?;
                n += 1;
            }
            tx.commit()?;
            Ok(n)
        })
    }

    /// Forgets the responses expired at `unix`; how many. Every instance
    /// reaps; a row is deleted (and its bytes subtracted) by one of them.
    pub(crate) fn reap(&self, unix: u64) -> Result<usize, StoreError> {
        let mut total = 0;
        loop {
            let n = self.with(|c| {
                let mut tx = c.transaction()?;
                let rows = tx.query(
                    "DELETE FROM chatgate_responses WHERE id IN ( \
                       SELECT id FROM chatgate_responses WHERE expires_at <= $1 \
                       ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
                     RETURNING key_name, bytes",
                    &[&as_i64(unix), &REAP_BATCH],
                )?;
                for row in &rows {
                    let key: &str = row.try_get(0)?;
                    let bytes: i64 = row.try_get(1)?;
                    subtract(&mut tx, key, bytes)?;
                }
                tx.commit()?;
                Ok(rows.len())
            })?;
            total += n;
            if n < REAP_BATCH as usize {
                return Ok(total);
            }
        }
    }
}

/// Takes `bytes` off what `key` keeps.
fn subtract(
    tx: &mut postgres::Transaction<'_>,
    key: &str,
    bytes: i64,
) -> Result<(), postgres::Error> {
    tx.execute(
        "UPDATE chatgate_response_bytes SET bytes = GREATEST(bytes - $2, 0) WHERE key_name = $1",
        &[&key, &bytes],
    )?;
    Ok(())
}
