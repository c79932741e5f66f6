//! The Responses API's store in one file (redb): kept responses by id,
//! when each expires (and the same ordered by time, for the reaper), and
//! the bytes each key keeps.
//!
//! redb because it does this job better than code we would write: a
//! stable file format (1.0 and later), ACID transactions whose commit is
//! on disk when it returns (`Durability::Immediate`, its default), one
//! writer beside many readers that never block (copy-on-write B-trees),
//! no unsafe storage tricks, no dependencies, and a crash-safe file with
//! nothing to recover by hand. Every call here is blocking and runs off
//! the reactor threads.

use std::path::Path;

use chatgate_core::dialect::responses::stored::{self, StoredResponse};
use chatgate_core::{StoreError, StoreReply};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::Backend;
use crate::error::Error;

/// Each kept response's record, by id.
const RESPONSES: TableDefinition<&str, &[u8]> = TableDefinition::new("responses");
/// When each expires (Unix seconds), by id: a conversation continued
/// later moves its responses' expiry forward without rewriting them.
const EXPIRES: TableDefinition<&str, u64> = TableDefinition::new("expires");
/// The same, ordered by time: what the reaper walks.
const BY_EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("by_expiry");
/// The bytes each key keeps, by key name.
const KEY_BYTES: TableDefinition<&str, u64> = TableDefinition::new("key_bytes");
/// The background runs not finished, by id: failed when the file is next
/// opened (the process that ran them is gone: the file is locked to one).
const RUNNING: TableDefinition<&str, ()> = TableDefinition::new("running");

/// What a background run left unfinished by its gateway's end says.
pub(crate) const RESTARTED: &str = "The gateway stopped before this background response \
     finished (a crash, or a restart); it was not completed. Send the request again.";

/// Most responses forgotten in one transaction of the reaper.
const REAP_BATCH: usize = 1_000;

/// The store's file.
pub(crate) struct Embedded {
    db: Database,
}

fn failed(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Unreachable(format!("the responses store could not {what}: {e}"))
}

impl Embedded {
    /// Opens (or creates) the file at `path`.
    pub(crate) fn open(path: &str) -> Result<Embedded, Error> {
        let refused = |e: &dyn std::fmt::Display| {
            Error::Config(format!(
                "cannot open the responses store '{path}' (--responses-store): {e}"
            ))
        };
        if let Some(dir) = Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            return Err(refused(&"its directory does not exist"));
        }
        let db = Database::create(path).map_err(|e| refused(&e))?;
        let tx = db.begin_write().map_err(|e| refused(&e))?;
        {
            tx.open_table(RESPONSES).map_err(|e| refused(&e))?;
            tx.open_table(EXPIRES).map_err(|e| refused(&e))?;
            tx.open_table(BY_EXPIRY).map_err(|e| refused(&e))?;
            tx.open_table(KEY_BYTES).map_err(|e| refused(&e))?;
            tx.open_table(RUNNING).map_err(|e| refused(&e))?;
        }
        tx.commit().map_err(|e| refused(&e))?;
        let store = Embedded { db };
        let failed = store.fail_unfinished().map_err(|e| refused(&e))?;
        if failed > 0 {
            tracing::warn!(
                responses = failed,
                "background responses left unfinished by the last run were marked failed"
            );
        }
        Ok(store)
    }

    /// Marks every run left unfinished failed; how many.
    fn fail_unfinished(&self) -> Result<usize, StoreError> {
        let write = |e: &dyn std::fmt::Display| failed("be written", e);
        let ids: Vec<String> = {
            let tx = self.db.begin_read().map_err(|e| failed("be read", e))?;
            let running = tx.open_table(RUNNING).map_err(|e| failed("be read", e))?;
            let mut ids = Vec::new();
            for entry in running.iter().map_err(|e| failed("be read", e))? {
                let (k, _) = entry.map_err(|e| failed("be read", e))?;
                ids.push(k.value().to_owned());
            }
            ids
        };
        for id in &ids {
            let found = {
                let tx = self.db.begin_read().map_err(|e| failed("be read", e))?;
                let records = tx.open_table(RESPONSES).map_err(|e| failed("be read", e))?;
                records
                    .get(id.as_str())
                    .map_err(|e| failed("be read", e))?
                    .and_then(|b| StoredResponse::decode(b.value()).ok())
            };
            match found {
                Some(mut r) => {
                    r.object = stored::with_status(&r.object, "failed", Some(RESTARTED));
                    self.keep(&r, 0, true)?;
                }
                None => {
                    let tx = self.db.begin_write().map_err(|e| write(&e))?;
                    tx.open_table(RUNNING)
                        .map_err(|e| write(&e))?
                        .remove(id.as_str())
                        .map_err(|e| write(&e))?;
                    tx.commit().map_err(|e| write(&e))?;
                }
            }
        }
        Ok(ids.len())
    }
}

impl super::Backend for Embedded {
    fn read(
        &self,
        key: &str,
        chain: Option<&str>,
        responses: &[String],
        unix: u64,
    ) -> Result<StoreReply, StoreError> {
        let tx = self.db.begin_read().map_err(|e| failed("be read", e))?;
        let records = tx.open_table(RESPONSES).map_err(|e| failed("be read", e))?;
        let expires = tx.open_table(EXPIRES).map_err(|e| failed("be read", e))?;
        let get = |id: &str| -> Result<Option<StoredResponse>, StoreError> {
            let live = expires
                .get(id)
                .map_err(|e| failed("be read", e))?
                .is_some_and(|at| at.value() > unix);
            if !live {
                return Ok(None);
            }
            let Some(bytes) = records.get(id).map_err(|e| failed("be read", e))? else {
                return Ok(None);
            };
            match StoredResponse::decode(bytes.value()) {
                Ok(r) if r.key == key => Ok(Some(r)),
                Ok(_) => Ok(None),
                Err(e) => {
                    tracing::warn!(id, error = %e, "a kept response is skipped");
                    Ok(None)
                }
            }
        };
        let mut found_chain = Vec::new();
        if let Some(last) = chain.map(get).transpose()?.flatten() {
            for a in &last.ancestors {
                found_chain.extend(get(a)?);
            }
            found_chain.push(last);
        }
        let mut found = Vec::new();
        for id in responses {
            found.extend(get(id)?);
        }
        let key_bytes = tx
            .open_table(KEY_BYTES)
            .map_err(|e| failed("be read", e))?
            .get(key)
            .map_err(|e| failed("be read", e))?
            .map_or(0, |v| v.value());
        Ok(StoreReply::Read {
            chain: found_chain,
            responses: found,
            key_bytes,
        })
    }

    fn keep(&self, r: &StoredResponse, _unix: u64, replace_only: bool) -> Result<(), StoreError> {
        let write = |e: &dyn std::fmt::Display| failed("be written", e);
        let tx = self.db.begin_write().map_err(|e| write(&e))?;
        {
            let mut records = tx.open_table(RESPONSES).map_err(|e| write(&e))?;
            let mut expires = tx.open_table(EXPIRES).map_err(|e| write(&e))?;
            let mut by_expiry = tx.open_table(BY_EXPIRY).map_err(|e| write(&e))?;
            let mut key_bytes = tx.open_table(KEY_BYTES).map_err(|e| write(&e))?;
            if replace_only && records.get(r.id.as_str()).map_err(|e| write(&e))?.is_none() {
                // Deleted meanwhile: stays deleted.
                return Ok(());
            }
            // A background run's record replaces its queued one: its key
            // keeps the difference.
            let replaced = records
                .insert(r.id.as_str(), r.encode().as_slice())
                .map_err(|e| write(&e))?
                .and_then(|old| StoredResponse::decode(old.value()).ok())
                .filter(|old| old.key == r.key)
                .map_or(0, |old| old.bytes());
            let before = key_bytes
                .get(r.key.as_str())
                .map_err(|e| write(&e))?
                .map_or(0, |v| v.value());
            key_bytes
                .insert(
                    r.key.as_str(),
                    before.saturating_sub(replaced).saturating_add(r.bytes()),
                )
                .map_err(|e| write(&e))?;
            let mut running = tx.open_table(RUNNING).map_err(|e| write(&e))?;
            if stored::is_running(&r.status()) {
                running.insert(r.id.as_str(), ()).map_err(|e| write(&e))?;
            } else {
                running.remove(r.id.as_str()).map_err(|e| write(&e))?;
            }
            // It, and every response its conversation holds, last as long
            // as it does.
            for id in r.ancestors.iter().chain(std::iter::once(&r.id)) {
                let old = expires
                    .get(id.as_str())
                    .map_err(|e| write(&e))?
                    .map(|v| v.value());
                if id != &r.id && old.is_none_or(|at| at >= r.expires_at) {
                    continue;
                }
                if let Some(at) = old {
                    by_expiry.remove((at, id.as_str())).map_err(|e| write(&e))?;
                }
                expires
                    .insert(id.as_str(), r.expires_at)
                    .map_err(|e| write(&e))?;
                by_expiry
                    .insert((r.expires_at, id.as_str()), ())
                    .map_err(|e| write(&e))?;
            }
        }
        tx.commit().map_err(|e| write(&e))
    }

    fn delete(&self, key: &str, id: &str) -> Result<bool, StoreError> {
        let write = |e: &dyn std::fmt::Display| failed("be written", e);
        let tx = self.db.begin_write().map_err(|e| write(&e))?;
        let deleted = {
            let records = tx.open_table(RESPONSES).map_err(|e| write(&e))?;
            let mine = records
                .get(id)
                .map_err(|e| write(&e))?
                .and_then(|b| StoredResponse::decode(b.value()).ok())
                .is_some_and(|r| r.key == key);
            drop(records);
            mine && forget(&tx, id)?
        };
        tx.commit().map_err(|e| write(&e))?;
        Ok(deleted)
    }
}

impl Embedded {
    /// Forgets the responses expired at `unix`; how many.
    pub(crate) fn reap(&self, unix: u64) -> Result<usize, StoreError> {
        let write = |e: &dyn std::fmt::Display| failed("be written", e);
        let mut total = 0;
        loop {
            let tx = self.db.begin_write().map_err(|e| write(&e))?;
            let due: Vec<String> = {
                let by_expiry = tx.open_table(BY_EXPIRY).map_err(|e| write(&e))?;
                let range = by_expiry
                    .range(..=(unix, "\u{10ffff}"))
                    .map_err(|e| write(&e))?;
                let mut due = Vec::new();
                for entry in range.take(REAP_BATCH) {
                    let (k, _) = entry.map_err(|e| write(&e))?;
                    due.push(k.value().1.to_owned());
                }
                due
            };
            for id in &due {
                forget(&tx, id)?;
            }
            tx.commit().map_err(|e| write(&e))?;
            total += due.len();
            if due.len() < REAP_BATCH {
                return Ok(total);
            }
        }
    }
}

/// Removes response `id` (its record, its expiry, its bytes from its
/// key's); whether it was there.
fn forget(tx: &redb::WriteTransaction, id: &str) -> Result<bool, StoreError> {
    let write = |e: &dyn std::fmt::Display| failed("be written", e);
    let mut records = tx.open_table(RESPONSES).map_err(|e| write(&e))?;
    let mut expires = tx.open_table(EXPIRES).map_err(|e| write(&e))?;
    let mut by_expiry = tx.open_table(BY_EXPIRY).map_err(|e| write(&e))?;
    let mut key_bytes = tx.open_table(KEY_BYTES).map_err(|e| write(&e))?;
    tx.open_table(RUNNING)
        .map_err(|e| write(&e))?
        .remove(id)
        .map_err(|e| write(&e))?;
    if let Some(at) = expires.remove(id).map_err(|e| write(&e))? {
        by_expiry.remove((at.value(), id)).map_err(|e| write(&e))?;
    }
    let Some(bytes) = records.remove(id).map_err(|e| write(&e))? else {
        return Ok(false);
    };
    // A record that does not decode still leaves; its bytes are then not
    // known, and its key's count keeps them until the key's next count.
    if let Ok(r) = StoredResponse::decode(bytes.value()) {
        let before = key_bytes
            .get(r.key.as_str())
            .map_err(|e| write(&e))?
            .map_or(0, |v| v.value());
        let after = before.saturating_sub(r.bytes());
        if after == 0 {
            key_bytes.remove(r.key.as_str()).map_err(|e| write(&e))?;
        } else {
            key_bytes
                .insert(r.key.as_str(), after)
                .map_err(|e| write(&e))?;
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chatgate_core::StoreAsk;

    fn record(n: u64, key: &str, expires_at: u64, ancestors: &[&StoredResponse]) -> StoredResponse {
        let id = format!("resp_{n:024x}");
        StoredResponse {
            object: format!(r#"{{"id":"{id}","status":"completed","output":[]}}"#).into_bytes(),
            id,
            key: key.into(),
            created_at: 1,
            expires_at,
            previous: ancestors.last().map(|a| a.id.clone()),
            ancestors: ancestors.iter().map(|a| a.id.clone()).collect(),
            input: b"[]".to_vec(),
            events: Vec::new(),
        }
    }

    fn read(e: &Embedded, key: &str, chain: &str, unix: u64) -> (Vec<String>, u64) {
        let ask = StoreAsk::Read {
            key: key.into(),
            chain: Some(chain.into()),
            responses: Vec::new(),
        };
        match e.answer(ask, unix).unwrap() {
            StoreReply::Read {
                chain, key_bytes, ..
            } => (chain.into_iter().map(|r| r.id).collect(), key_bytes),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_continued_conversation_outlives_its_first_expiry_then_is_reaped() {
        let path = std::env::temp_dir().join(format!(
            "chatgate-responses-test-{}.redb",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let e = Embedded::open(path.to_str().unwrap()).unwrap();
        let first = record(1, "a", 100, &[]);
        let second = record(2, "a", 200, &[&first]);
        let bytes = first.bytes() + second.bytes();
        e.keep(&first, 0, false).unwrap();
        e.keep(&second, 0, false).unwrap();
        // The second turn moved the first's expiry to its own.
        assert_eq!(e.reap(150).unwrap(), 0);
        assert_eq!(
            read(&e, "a", &second.id, 150),
            (vec![first.id.clone(), second.id.clone()], bytes)
        );
        // Another key reads nothing, and deletes nothing.
        assert_eq!(read(&e, "b", &second.id, 150).0, Vec::<String>::new());
        assert!(!e.delete("b", &second.id).unwrap());
        // Past the expiry: not read, then forgotten, the key's bytes too.
        assert_eq!(read(&e, "a", &second.id, 200).0, Vec::<String>::new());
        assert_eq!(e.reap(250).unwrap(), 2);
        assert_eq!(read(&e, "a", &second.id, 10).1, 0);
        let third = record(3, "a", 300, &[]);
        e.keep(&third, 0, false).unwrap();
        assert!(e.delete("a", &third.id).unwrap());
        assert!(!e.delete("a", &third.id).unwrap());
        assert_eq!(read(&e, "a", &third.id, 10), (Vec::new(), 0));
        drop(e);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_run_left_unfinished_is_failed_when_the_file_opens_again() {
        let path = std::env::temp_dir().join(format!(
            "chatgate-responses-run-test-{}.redb",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let mut run = record(7, "a", u64::MAX, &[]);
        run.object = br#"{"id":"x","status":"queued","error":null,"output":[]}"#.to_vec();
        let done = record(8, "a", u64::MAX, &[]);
        {
            let e = Embedded::open(path.to_str().unwrap()).unwrap();
            e.keep(&run, 0, false).unwrap();
            e.keep(&done, 0, false).unwrap();
        }
        let e = Embedded::open(path.to_str().unwrap()).unwrap();
        let ask = StoreAsk::Read {
            key: "a".into(),
            chain: None,
            responses: vec![run.id.clone(), done.id.clone()],
        };
        let StoreReply::Read {
            responses,
            key_bytes,
            ..
        } = e.answer(ask, 1).unwrap()
        else {
            panic!("a read");
        };
        assert_eq!(responses[0].status(), "failed");
        assert!(String::from_utf8_lossy(&responses[0].object).contains("gateway stopped"));
        assert_eq!(responses[1].status(), "completed");
        assert_eq!(key_bytes, responses[0].bytes() + responses[1].bytes());
        // Failed once: opening again changes nothing.
        drop(e);
        assert_eq!(
            Embedded::open(path.to_str().unwrap())
                .unwrap()
                .fail_unfinished()
                .unwrap(),
            0
        );
        let _ = std::fs::remove_file(&path);
    }
}
