use chatgate_core::LedgerRecord;

use super::spool::*;
use super::*;
use crate::stores::ledger::Ledger;

/// The wall time the tests' commits are made at (Unix ms).
const T0: u64 = 1_795_000_000_000;

fn line(id: &str) -> Vec<u8> {
    LedgerRecord::new(1_795_000_000_000, id, "k").to_line()
}

/// Ships until nothing is left; the request ids, in order.
fn ship_all(spool: &mut Spool) -> Vec<String> {
    let state = ShipperState::default();
    let mut got = Vec::new();
    let mut sink = |r: &[LedgerRecord]| -> Result<Inserted, Error> {
        got.extend(r.iter().map(|r| r.request_id.clone()));
        Ok(Inserted::default())
    };
    while spool.ship_once(&mut sink, &state, T0).unwrap() > 0 {}
    got
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// A directory removed when dropped.
struct Dir(std::path::PathBuf);

impl Dir {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn setup() -> (Dir, String, Ledger) {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = Dir(std::env::temp_dir().join(format!(
        "chatgate-pgledger-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )));
    std::fs::create_dir_all(dir.path()).unwrap();
    let path = dir
        .path()
        .join("ledger.jsonl")
        .to_string_lossy()
        .into_owned();
    let ledger = Ledger::open(&path).unwrap();
    (dir, path, ledger)
}

#[test]
fn rotation_ships_the_moved_file_to_its_end_then_the_new_one() {
    let (dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    for id in ["a1", "a2"] {
        assert!(ledger.append(&line(id)));
    }
    assert_eq!(ship_all(&mut spool), ids(&["a1", "a2"]));
    assert!(ledger.append(&line("a3")));
    std::fs::rename(&path, dir.path().join("ledger-1.jsonl")).unwrap();
    // After the move and before the signal: still the moved file.
    assert!(ledger.append(&line("a4")));
    spool.watch();
    ledger.reopen().unwrap();
    // The new file grows past the old offset before the shipper looks.
    for i in 0..5 {
        assert!(ledger.append(&line(&format!("b{i}"))));
    }
    spool.watch();
    assert_eq!(
        ship_all(&mut spool),
        ids(&["a3", "a4", "b0", "b1", "b2", "b3", "b4"])
    );
    assert_eq!(spool.files.len(), 1);
}

#[test]
fn a_file_created_before_the_signal_waits_for_the_ledger_to_switch() {
    // logrotate's `create`: a new empty file at the path, SIGHUP later.
    let (dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    assert!(ledger.append(&line("a1")));
    std::fs::rename(&path, dir.path().join("ledger-1.jsonl")).unwrap();
    std::fs::File::create(&path).unwrap();
    spool.watch();
    assert_eq!(ship_all(&mut spool), ids(&["a1"]));
    assert_eq!(spool.files.len(), 2, "the moved file is not finished yet");
    assert!(ledger.append(&line("a2")));
    assert_eq!(ship_all(&mut spool), ids(&["a2"]));
    ledger.reopen().unwrap();
    assert!(ledger.append(&line("b1")));
    assert_eq!(ship_all(&mut spool), ids(&["b1"]));
    assert_eq!(spool.files.len(), 1);
}

#[test]
fn a_restart_finds_the_moved_file_by_its_inode() {
    let (dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    assert!(ledger.append(&line("a1")));
    assert_eq!(ship_all(&mut spool), ids(&["a1"]));
    drop(spool);
    // Rotated while nothing shipped (the gateway down, or PostgreSQL).
    assert!(ledger.append(&line("a2")));
    std::fs::rename(&path, dir.path().join("ledger-1.jsonl")).unwrap();
    ledger.reopen().unwrap();
    assert!(ledger.append(&line("b1")));
    let mut spool = Spool::recover(&path);
    assert_eq!(ship_all(&mut spool), ids(&["a2", "b1"]));
    // The checkpoint names only the live file now (and the commits).
    let text = std::fs::read_to_string(checkpoint_path(&path)).unwrap();
    assert_eq!(
        text.lines().filter(|l| !l.starts_with("commit ")).count(),
        1,
        "{text}"
    );
    // Another restart ships nothing again.
    assert!(ship_all(&mut Spool::recover(&path)).is_empty());
}

#[test]
fn checkpoints_of_the_earlier_format_and_none_at_all() {
    let (_dir, path, ledger) = setup();
    assert!(ledger.append(&line("a1")));
    let first = line("a1").len();
    assert!(ledger.append(&line("a2")));
    std::fs::write(checkpoint_path(&path), format!("{first}\n")).unwrap();
    let mut spool = Spool::recover(&path);
    assert!(spool.commits.is_empty());
    assert_eq!(ship_all(&mut spool), ids(&["a2"]));
    std::fs::remove_file(checkpoint_path(&path)).unwrap();
    assert_eq!(ship_all(&mut Spool::recover(&path)), ids(&["a1", "a2"]));
    // A checkpoint past the file's end is not this file's: from 0.
    let text = std::fs::read_to_string(checkpoint_path(&path)).unwrap();
    let id = text
        .lines()
        .next()
        .unwrap()
        .rsplit_once(' ')
        .unwrap()
        .0
        .to_owned();
    std::fs::write(checkpoint_path(&path), format!("{id} 999999\n")).unwrap();
    assert_eq!(ship_all(&mut Spool::recover(&path)), ids(&["a1", "a2"]));
    // The format of the version before the commits were remembered:
    // `DEV INO OFFSET` lines only. Nothing to reconcile, then.
    std::fs::write(checkpoint_path(&path), format!("{id} {first}\n")).unwrap();
    let mut spool = Spool::recover(&path);
    assert!(spool.commits.is_empty());
    let state = ShipperState::default();
    let mut never = |_: &[&str]| -> Result<HashSet<String>, Error> {
        panic!("nothing to ask PostgreSQL about")
    };
    assert_eq!(spool.reconcile(&mut never, &state, T0).unwrap(), 0);
    assert_eq!(ship_all(&mut spool), ids(&["a2"]));
    assert_eq!(spool.commits.len(), 1, "remembered from now on");
}

/// A table standing in for PostgreSQL: the request ids it holds, and
/// the batches committed to it, in order.
#[derive(Default)]
struct Db {
    rows: HashSet<String>,
    batches: Vec<Vec<String>>,
}

impl Db {
    /// A failover to a replica that had not received the last `n`
    /// commits: their rows are gone.
    fn lose(&mut self, n: usize) {
        for b in self.batches.split_off(self.batches.len() - n) {
            for id in b {
                self.rows.remove(&id);
            }
        }
    }

    /// Reconciles `spool` with this table; the lines to ship again.
    fn reconcile(&self, spool: &mut Spool, now_ms: u64) -> u64 {
        let state = ShipperState::default();
        let mut present = |ids: &[&str]| -> Result<HashSet<String>, Error> {
            Ok(ids
                .iter()
                .filter(|id| self.rows.contains(**id))
                .map(|id| (*id).to_owned())
                .collect())
        };
        let lines = spool.reconcile(&mut present, &state, now_ms).unwrap();
        assert_eq!(state.reshipped.load(Ordering::Relaxed), lines);
        lines
    }
}

/// Ships until nothing is left, into `db`, committing at `now_ms`; the
/// request ids, in order.
fn ship_into(spool: &mut Spool, db: &mut Db, now_ms: u64) -> Vec<String> {
    let state = ShipperState::default();
    let mut got = Vec::new();
    let mut sink = |r: &[LedgerRecord]| -> Result<Inserted, Error> {
        let batch: Vec<String> = r.iter().map(|r| r.request_id.clone()).collect();
        db.rows.extend(batch.iter().cloned());
        got.extend(batch.iter().cloned());
        db.batches.push(batch);
        Ok(Inserted::default())
    };
    while spool.ship_once(&mut sink, &state, now_ms).unwrap() > 0 {}
    got
}

/// `GRAIN` in milliseconds: commits this far apart are remembered apart.
fn grain() -> u64 {
    GRAIN.as_millis() as u64
}

fn append(ledger: &Ledger, ids_: &[&str]) {
    for id in ids_ {
        assert!(ledger.append(&line(id)));
    }
}

#[test]
fn a_failover_that_lost_the_last_commits_ships_them_again() {
    let (_dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    let mut db = Db::default();
    for (i, batch) in [&["a1", "a2"][..], &["a3"], &["a4", "a5"], &["a6"]]
        .iter()
        .enumerate()
    {
        append(&ledger, batch);
        let at = T0 + i as u64 * grain();
        assert_eq!(ship_into(&mut spool, &mut db, at), ids(batch));
    }
    assert_eq!(spool.commits.len(), 4);
    // Nothing lost: nothing to do.
    assert_eq!(db.reconcile(&mut spool, T0 + 4 * grain()), 0);
    assert_eq!(spool.commits.len(), 4);
    assert!(ship_into(&mut spool, &mut db, T0 + 4 * grain()).is_empty());
    // The promoted replica had not received the last two commits.
    db.lose(2);
    assert_eq!(db.reconcile(&mut spool, T0 + 4 * grain()), 3);
    assert_eq!(spool.commits.len(), 2, "the lost commits are forgotten");
    assert_eq!(
        ship_into(&mut spool, &mut db, T0 + 5 * grain()),
        ids(&["a4", "a5", "a6"])
    );
    assert_eq!(db.rows.len(), 6);
    // The lines shipped again are remembered again, and the next
    // reconnection finds them.
    assert_eq!(spool.commits.len(), 3);
    assert_eq!(db.reconcile(&mut spool, T0 + 5 * grain()), 0);
    // Lost again, with what followed.
    append(&ledger, &["a7"]);
    assert_eq!(
        ship_into(&mut spool, &mut db, T0 + 6 * grain()),
        ids(&["a7"])
    );
    db.lose(2);
    assert_eq!(db.reconcile(&mut spool, T0 + 6 * grain()), 4);
    assert_eq!(
        ship_into(&mut spool, &mut db, T0 + 7 * grain()),
        ids(&["a4", "a5", "a6", "a7"])
    );
}

#[test]
fn a_rewind_goes_back_into_a_rotated_file() {
    let (dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    let mut db = Db::default();
    append(&ledger, &["a1", "a2"]);
    ship_into(&mut spool, &mut db, T0);
    append(&ledger, &["a3"]);
    ship_into(&mut spool, &mut db, T0 + grain());
    std::fs::rename(&path, dir.path().join("ledger-1.jsonl")).unwrap();
    ledger.reopen().unwrap();
    append(&ledger, &["b1", "b2"]);
    spool.watch();
    assert_eq!(
        ship_into(&mut spool, &mut db, T0 + 2 * grain()),
        ids(&["b1", "b2"])
    );
    append(&ledger, &["b3"]);
    ship_into(&mut spool, &mut db, T0 + 3 * grain());
    assert_eq!(spool.files.len(), 1, "the moved file is shipped");
    assert_eq!(spool.held.len(), 1, "and held for a rewind");
    // Deleted meanwhile: held open, it is still read.
    std::fs::remove_file(dir.path().join("ledger-1.jsonl")).unwrap();
    db.lose(3);
    assert_eq!(db.reconcile(&mut spool, T0 + 3 * grain()), 4);
    assert_eq!(spool.files.len(), 2);
    assert_eq!(
        ship_into(&mut spool, &mut db, T0 + 4 * grain()),
        ids(&["a3", "b1", "b2", "b3"])
    );
    assert_eq!(spool.files.len(), 1);
    assert_eq!(db.rows.len(), 6);
    // Once no commit names the moved file, it is let go.
    append(&ledger, &["b4"]);
    ship_into(
        &mut spool,
        &mut db,
        T0 + 5 * grain() + REMEMBER.as_millis() as u64,
    );
    assert_eq!(spool.commits.len(), 1);
    assert!(spool.held.is_empty());
}

#[test]
fn a_restart_during_a_failover_finds_the_commits_in_the_checkpoint() {
    let (dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    let mut db = Db::default();
    append(&ledger, &["a1"]);
    ship_into(&mut spool, &mut db, T0);
    append(&ledger, &["a2", "a3"]);
    ship_into(&mut spool, &mut db, T0 + grain());
    std::fs::rename(&path, dir.path().join("ledger-1.jsonl")).unwrap();
    ledger.reopen().unwrap();
    append(&ledger, &["b1"]);
    spool.watch();
    ship_into(&mut spool, &mut db, T0 + 2 * grain());
    let remembered = spool.commits.clone();
    drop(spool);
    // The gateway restarts; PostgreSQL failed over meanwhile.
    let mut spool = Spool::recover(&path);
    assert_eq!(spool.commits, remembered);
    assert_eq!(spool.held.len(), 1, "the moved file, found by its inode");
    db.lose(2);
    assert_eq!(db.reconcile(&mut spool, T0 + 3 * grain()), 3);
    assert_eq!(
        ship_into(&mut spool, &mut db, T0 + 3 * grain()),
        ids(&["a2", "a3", "b1"])
    );
    // A moved file deleted before a restart cannot be read again: its
    // lines are reported, the later files still shipped again.
    db.lose(2);
    drop(spool);
    std::fs::remove_file(dir.path().join("ledger-1.jsonl")).unwrap();
    let mut spool = Spool::recover(&path);
    assert!(spool.held.is_empty());
    assert_eq!(db.reconcile(&mut spool, T0 + 4 * grain()), 1);
    assert_eq!(
        ship_into(&mut spool, &mut db, T0 + 4 * grain()),
        ids(&["b1"])
    );
}

#[test]
fn with_no_commit_present_the_oldest_remembered_is_shipped_again() {
    let (_dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    let mut db = Db::default();
    append(&ledger, &["a1"]);
    ship_into(&mut spool, &mut db, T0);
    // Forgotten: committed longer than REMEMBER before the newest.
    let later = T0 + REMEMBER.as_millis() as u64 + grain();
    append(&ledger, &["a2"]);
    ship_into(&mut spool, &mut db, later);
    append(&ledger, &["a3"]);
    ship_into(&mut spool, &mut db, later + grain());
    assert_eq!(spool.commits.len(), 2);
    db.lose(3);
    // However long PostgreSQL was away, what its failure may have lost
    // is still known.
    let long_after = later + 10 * REMEMBER.as_millis() as u64;
    assert_eq!(db.reconcile(&mut spool, long_after), 2);
    assert_eq!(
        ship_into(&mut spool, &mut db, later + 2 * grain()),
        ids(&["a2", "a3"])
    );
}

#[test]
fn commits_within_a_grain_are_remembered_as_one_and_the_memory_is_bounded() {
    let (_dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    let mut db = Db::default();
    for id in ["a1", "a2", "a3"] {
        append(&ledger, &[id]);
        ship_into(&mut spool, &mut db, T0 + 1);
    }
    assert_eq!(db.batches.len(), 3);
    assert_eq!(spool.commits.len(), 1);
    assert_eq!(spool.commits[0].rows, 3);
    assert_eq!(spool.commits[0].last, "a3");
    // Losing the last commit ships the whole entry again: the first two
    // are no-ops in PostgreSQL.
    db.lose(1);
    assert_eq!(db.reconcile(&mut spool, T0 + 1), 3);
    assert_eq!(
        ship_into(&mut spool, &mut db, T0 + 1),
        ids(&["a1", "a2", "a3"])
    );
    // Commits that cannot be merged (not contiguous), all recent.
    let file = spool.files[0].id;
    for i in 0..MAX_COMMITS as u64 + 10 {
        spool.remember(Commit {
            file,
            start: 1000 + 2 * i,
            end: 1001 + 2 * i,
            last: format!("x{i}"),
            rows: 1,
            at_ms: T0 + 10 * grain(),
        });
    }
    assert_eq!(spool.commits.len(), MAX_COMMITS);
    assert_eq!(
        spool.commits.back().unwrap().last,
        format!("x{}", MAX_COMMITS + 9)
    );
}

#[test]
fn the_commits_are_kept_in_the_checkpoint_with_the_files() {
    let (_dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    let mut db = Db::default();
    append(&ledger, &["a1"]);
    ship_into(&mut spool, &mut db, T0);
    append(&ledger, &["a2"]);
    ship_into(&mut spool, &mut db, T0 + grain());
    let text = std::fs::read_to_string(checkpoint_path(&path)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0].split(' ').count(), 3, "{text}");
    assert!(
        lines[1].starts_with("commit ") && lines[1].ends_with(" a1"),
        "{text}"
    );
    // A line that does not parse is skipped; the rest is read.
    std::fs::write(
        checkpoint_path(&path),
        format!("{}\ncommit 1 2 x\n{}\n{}\n", lines[0], lines[1], lines[2]),
    )
    .unwrap();
    let spool = Spool::recover(&path);
    assert_eq!(spool.commits.len(), 2);
    assert_eq!(spool.files.len(), 1);
    assert_eq!(
        spool.files[0].offset,
        std::fs::metadata(&path).unwrap().len()
    );
}

#[test]
fn a_failed_reconciliation_moves_nothing() {
    let (_dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    let mut db = Db::default();
    append(&ledger, &["a1"]);
    ship_into(&mut spool, &mut db, T0);
    let state = ShipperState::default();
    let mut failing =
        |_: &[&str]| -> Result<HashSet<String>, Error> { Err(Error::Postgres("down".into())) };
    assert!(spool.reconcile(&mut failing, &state, T0).is_err());
    assert_eq!(spool.commits.len(), 1);
    assert_eq!(spool.backlog(), 0);
}

#[test]
fn a_batch_answers_for_itself_by_a_row_stored_as_it_is() {
    let (_dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    append(&ledger, &["a1", "a2", "a3"]);
    let state = ShipperState::default();
    // The server refused a3 and a2 was stored repaired: a1 answers.
    let mut sink = |_: &[LedgerRecord]| -> Result<Inserted, Error> {
        Ok(Inserted {
            repaired: vec!["a2".into()],
            set_aside: vec![("a3".into(), "refused".into())],
        })
    };
    while spool.ship_once(&mut sink, &state, T0).unwrap() > 0 {}
    assert_eq!(spool.backlog(), 0, "set aside, not shipped again");
    assert_eq!(spool.commits.back().map(|c| c.last.as_str()), Some("a1"));
    // None stored as it is: nothing to answer for the batch.
    append(&ledger, &["b1"]);
    let mut sink = |_: &[LedgerRecord]| -> Result<Inserted, Error> {
        Ok(Inserted {
            repaired: Vec::new(),
            set_aside: vec![("b1".into(), "refused".into())],
        })
    };
    while spool.ship_once(&mut sink, &state, T0 + grain()).unwrap() > 0 {}
    assert_eq!(spool.commits.back().map(|c| c.last.as_str()), Some("a1"));
}

#[test]
fn a_failed_insert_moves_nothing() {
    let (_dir, path, ledger) = setup();
    let mut spool = Spool::recover(&path);
    assert!(ledger.append(&line("a1")));
    let state = ShipperState::default();
    let mut failing =
        |_: &[LedgerRecord]| -> Result<Inserted, Error> { Err(Error::Postgres("down".into())) };
    assert!(spool.ship_once(&mut failing, &state, T0).is_err());
    assert_eq!(spool.backlog(), line("a1").len() as u64);
    assert_eq!(ship_all(&mut spool), ids(&["a1"]));
    assert_eq!(spool.backlog(), 0);
}
