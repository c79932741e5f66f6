//! The shared ledger (`--ledger-postgres URL`): a thread that ships the
//! local JSONL ledger's lines to a PostgreSQL table in batches.
//!
//! The JSONL file stays the first place every record is written (one
//! `write(2)` before the response's last bytes, surviving SIGKILL); it is
//! also the spool. The shipper reads it from a checkpoint, inserts complete
//! lines in one transaction per batch with `ON CONFLICT (request_id) DO
//! NOTHING`, then moves the checkpoint. While PostgreSQL is down it retries
//! with a growing pause and the lines wait in the file; when it returns,
//! they are replayed from the checkpoint. A crash between a commit and the
//! checkpoint's write replays lines PostgreSQL already has: the primary key
//! makes that a no-op, so nothing is billed twice and nothing is lost.
//!
//! The checkpoint (`<ledger>.pg-offset`) names files by identity (device
//! and inode), not by path, with the byte offset of the first line not yet
//! in PostgreSQL: one line `DEV INO OFFSET` per file still to ship, oldest
//! first. Rotation (the file moved away, SIGHUP, a new file at the path)
//! therefore cannot make the shipper skip or mix up lines: it keeps the
//! moved file open and ships it to its end (including what was appended
//! after the move and before the signal), and only then the new one, from
//! its first byte. A restart finds a moved file again in the ledger's
//! directory by its inode.
//!
//! A commit acknowledged by a primary is not yet on its asynchronous
//! replica: a crash of the primary followed by the replica's promotion
//! loses the last commits, a suffix of the primary's WAL, and so a suffix of
//! this shipper's commits (made in order, one at a time). The checkpoint
//! has moved past them, so the shipper remembers its recent commits (file,
//! byte range, the request id of the batch's last record; also in the
//! checkpoint, for a restart that coincides with a failover) and, on every
//! new connection (a failover always breaks the one it had), asks which of
//! those last ids the server holds: it ships everything again from the
//! oldest commit whose last row is missing. A transaction is all or
//! nothing, so one row answers for its whole batch, and the conflict clause
//! makes the rows that did survive no-ops.

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chatgate_core::Gateway;
use chatgate_core::LedgerRecord;

use super::connection::{failed, open};
use super::rows::{Inserted, SCHEMA, insert};
use crate::error::Error;
use crate::stores::ledger::FileId;

/// Most lines per insert.
const BATCH: usize = 500;
/// Most bytes read per pass.
const READ: u64 = 4 << 20;
/// Pause when there is nothing to ship, and how often the path is looked
/// at for a new file during longer pauses.
const IDLE: Duration = Duration::from_millis(100);
/// Longest pause between attempts while PostgreSQL is down.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long before the newest commit the commits are remembered for the
/// reconciliation after a reconnection: what a replica further behind than
/// this when its primary failed had not received can be lost without the
/// shipper knowing. Counted back from the newest commit, not from now: a
/// primary fails after the shipper's last commit to it, so no outage, hung
/// connection or stopped gateway, however long, makes the shipper forget
/// what that failure may have lost.
const REMEMBER: Duration = Duration::from_secs(15 * 60);
/// Commits that follow one another in one file within one slice of this
/// much wall time are remembered as one: the checkpoint, rewritten after
/// every commit, stays small (some 180 entries per file over `REMEMBER`,
/// however many batches), for the price of shipping again, after a
/// failover, up to this much of batches that were in fact kept (no-ops).
const GRAIN: Duration = Duration::from_secs(5);
/// Most commits remembered (the oldest forgotten first); only reached with
/// many rotations or a clock that jumps.
const MAX_COMMITS: usize = 2000;

/// Figures shared with the metrics and the shutdown.
#[derive(Debug, Default)]
pub(crate) struct ShipperState {
    /// Rows inserted (or found already there) so far.
    pub shipped: AtomicU64,
    /// Failed attempts (connection or insert).
    pub errors: AtomicU64,
    /// Whether the last attempt reached PostgreSQL.
    pub up: AtomicBool,
    /// Set to stop after a last attempt.
    pub stop: AtomicBool,
    /// Bytes of the file not yet shipped (as of the last pass).
    pub backlog_bytes: AtomicU64,
    /// Lines shipped again because a reconnection found their batch missing.
    pub reshipped: AtomicU64,
    /// Where the figures are also reported.
    pub gateway: Option<Arc<Gateway>>,
}

impl ShipperState {
    fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.up.store(false, Ordering::Relaxed);
        if let Some(g) = &self.gateway {
            g.metrics().ledger_ship_error();
        }
    }

    fn backlog(&self, bytes: u64) {
        self.backlog_bytes.store(bytes, Ordering::Relaxed);
        if let Some(g) = &self.gateway {
            g.metrics().ledger_backlog(bytes);
        }
    }

    /// What an insert repaired and set aside: said in the log, with each
    /// row's request id, and counted.
    fn note(&self, done: &Inserted) {
        for id in &done.repaired {
            tracing::warn!(
                request_id = id.as_str(),
                "ledger: a record held a NUL character, which PostgreSQL's text cannot store; it is stored there with U+FFFD in its place (the local ledger keeps it as it was)"
            );
            if let Some(g) = &self.gateway {
                g.metrics().ledger_repaired();
            }
        }
        for (id, why) in &done.set_aside {
            tracing::error!(
                request_id = id.as_str(),
                error = why.as_str(),
                "ledger: PostgreSQL refused this record; it is set aside (it stays in the local ledger) and the records after it are shipped"
            );
            if let Some(g) = &self.gateway {
                g.metrics().ledger_set_aside();
            }
        }
    }

    fn reshipping(&self, lines: u64) {
        self.reshipped.fetch_add(lines, Ordering::Relaxed);
        if let Some(g) = &self.gateway {
            g.metrics().ledger_reshipped(lines);
        }
    }
}

/// Starts the shipping thread.
pub(crate) fn start(
    url: String,
    ledger_path: String,
    gateway: Arc<Gateway>,
) -> (Arc<ShipperState>, std::thread::JoinHandle<()>) {
    let state = Arc::new(ShipperState {
        gateway: Some(gateway),
        ..ShipperState::default()
    });
    let s = Arc::clone(&state);
    let handle = std::thread::Builder::new()
        .name("ledger-postgres".into())
        .spawn(move || run(&url, &ledger_path, &s))
        .expect("spawn the ledger shipper");
    (state, handle)
}

/// Where the checkpoint of the ledger at `ledger` is kept.
fn checkpoint_path(ledger: &str) -> String {
    format!("{ledger}.pg-offset")
}

/// A ledger file being shipped, held open (it may have been moved away).
#[derive(Debug)]
struct Tracked {
    file: File,
    id: FileId,
    /// The first byte not yet in PostgreSQL.
    offset: u64,
}

/// A commit of this shipper (or several in a row, see [`GRAIN`]): what a
/// failover may have lost.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Commit {
    file: FileId,
    /// The byte range of the file it shipped.
    start: u64,
    end: u64,
    /// The request id of its last record: present in the table if and only
    /// if the commit is (a transaction is all or nothing).
    last: String,
    /// Records it shipped.
    rows: u64,
    /// Wall time of the (last) commit, Unix milliseconds.
    at_ms: u64,
}

impl Commit {
    /// The checkpoint line's text after `commit `: `DEV INO START END AT_MS
    /// ROWS REQUEST_ID`, the id last (it is the rest of the line).
    fn parse(text: &str) -> Option<Commit> {
        let mut f = text.splitn(7, ' ');
        let mut n = || f.next()?.parse::<u64>().ok();
        let (dev, ino, start, end, at_ms, rows) = (n()?, n()?, n()?, n()?, n()?, n()?);
        let last = f.next().filter(|id| storable(id))?.to_owned();
        (start <= end).then_some(Commit {
            file: FileId { dev, ino },
            start,
            end,
            last,
            rows,
            at_ms,
        })
    }
}

/// Whether a request id fits on a checkpoint line (the gateway's always do;
/// a hand-edited ledger's might not).
fn storable(id: &str) -> bool {
    !id.is_empty() && !id.chars().any(char::is_control)
}

/// Wall time, Unix milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The files still to ship, oldest first: the last is normally the one at
/// the ledger's path.
#[derive(Debug)]
struct Spool {
    path: String,
    files: VecDeque<Tracked>,
    /// The recent commits, oldest first.
    commits: VecDeque<Commit>,
    /// The files the commits name that are no longer in `files` (shipped to
    /// their end), held open so that a rewind can read them again even if
    /// they are deleted meanwhile.
    held: Vec<(FileId, File)>,
    /// Lines still to ship again after the last reconciliation (for the
    /// log line saying they were).
    resend: u64,
}

impl Spool {
    /// The files named by the checkpoint, then the one at the path.
    fn recover(path: &str) -> Spool {
        let mut spool = Spool {
            path: path.to_owned(),
            files: VecDeque::new(),
            commits: VecDeque::new(),
            held: Vec::new(),
            resend: 0,
        };
        let text = std::fs::read_to_string(checkpoint_path(path)).unwrap_or_default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("commit ") {
                match Commit::parse(rest) {
                    Some(c) => spool.commits.push_back(c),
                    None => tracing::warn!(
                        "ledger: ignoring a checkpoint line that does not parse: {line:?}"
                    ),
                }
                continue;
            }
            let fields: Vec<u64> = line
                .split_whitespace()
                .map_while(|f| f.parse().ok())
                .collect();
            let (file, offset) = match fields[..] {
                // A checkpoint of an earlier version: an offset into the
                // file at the path.
                [offset] => match File::open(path) {
                    Ok(f) => (f, offset),
                    Err(_) => continue,
                },
                [dev, ino, offset] => match find(path, FileId { dev, ino }) {
                    Some(f) => (f, offset),
                    None => {
                        tracing::error!(
                            "ledger: the file {dev}:{ino} (device:inode) named by the checkpoint, whose lines from byte {offset} on were not yet in PostgreSQL, is no longer in the ledger's directory; those lines were not shipped"
                        );
                        continue;
                    }
                },
                _ => {
                    tracing::warn!(
                        "ledger: ignoring a checkpoint line that does not parse: {line:?}"
                    );
                    continue;
                }
            };
            let Ok(meta) = file.metadata() else { continue };
            let id = FileId::of(&meta);
            if spool.files.iter().any(|t| t.id == id) {
                continue;
            }
            // Shorter than the checkpoint: not the file it was written for
            // (an inode used again). Shipped from its start: lines already
            // in PostgreSQL are not inserted twice.
            let offset = if meta.len() < offset { 0 } else { offset };
            spool.files.push_back(Tracked { file, id, offset });
        }
        spool.watch();
        // The rotated files the commits name, found again now (by inode, in
        // the ledger's directory) and held open, in case a reconciliation
        // must ship some of their lines again. One shorter than its
        // commits' end is not the file they were made from.
        let mut wanted: Vec<(FileId, u64)> = Vec::new();
        for c in &spool.commits {
            match wanted.iter_mut().find(|(id, _)| *id == c.file) {
                Some(w) => w.1 = w.1.max(c.end),
                None => wanted.push((c.file, c.end)),
            }
        }
        for (id, end) in wanted {
            if spool.files.iter().any(|t| t.id == id) {
                continue;
            }
            if let Some(f) = find(path, id).filter(|f| f.metadata().is_ok_and(|m| m.len() >= end)) {
                spool.held.push((id, f));
            }
        }
        spool
    }

    /// Starts tracking the file at the path when it is a new one (the
    /// ledger was rotated).
    fn watch(&mut self) {
        let Ok(meta) = std::fs::metadata(&self.path) else {
            // Moved away and not yet reopened: the file in hand still
            // takes the appends.
            return;
        };
        let seen = FileId::of(&meta);
        if self.files.iter().any(|t| t.id == seen) {
            return;
        }
        let Ok(file) = File::open(&self.path) else {
            return;
        };
        let Ok(id) = file.metadata().map(|m| FileId::of(&m)) else {
            return;
        };
        if self.files.iter().any(|t| t.id == id) {
            return;
        }
        if !self.files.is_empty() {
            tracing::info!(
                path = %self.path,
                "ledger: a new file at the path (rotated); it is shipped once the previous one is"
            );
        }
        self.files.push_back(Tracked {
            file,
            id,
            offset: 0,
        });
        if let Err(e) = self.save() {
            tracing::error!("ledger: cannot write the checkpoint: {e}");
        }
    }

    /// Sleeps for `d`, looking at the path for a new file meanwhile (so
    /// that rotations are noticed even while PostgreSQL is away); returns
    /// early when `stop` is set.
    fn pause(&mut self, d: Duration, stop: &AtomicBool) {
        let until = Instant::now() + d;
        loop {
            self.watch();
            let now = Instant::now();
            if now >= until || stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep((until - now).min(IDLE));
        }
    }

    /// Writes the checkpoint: a line `DEV INO OFFSET` per file to ship,
    /// oldest first, then a line `commit DEV INO START END AT_MS ROWS
    /// REQUEST_ID` per remembered commit, oldest first. (A version before
    /// the commit lines ignores them, with a warning each.)
    fn save(&self) -> std::io::Result<()> {
        use std::fmt::Write as _;
        let mut text = String::new();
        for t in &self.files {
            let _ = writeln!(text, "{} {} {}", t.id.dev, t.id.ino, t.offset);
        }
        for c in &self.commits {
            let _ = writeln!(
                text,
                "commit {} {} {} {} {} {} {}",
                c.file.dev, c.file.ino, c.start, c.end, c.at_ms, c.rows, c.last
            );
        }
        let path = checkpoint_path(&self.path);
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &path)
    }

    /// Bytes not yet shipped, over every file.
    fn backlog(&self) -> u64 {
        self.files
            .iter()
            .map(|t| {
                t.file
                    .metadata()
                    .map_or(0, |m| m.len().saturating_sub(t.offset))
            })
            .sum()
    }

    /// Whether the oldest file can take no more lines: a later one exists
    /// and the ledger appends to another file. Decided before its length
    /// is read, so that the length read afterwards is its last.
    fn head_is_finished(&self) -> bool {
        let Some(head) = self.files.front() else {
            return false;
        };
        self.files.len() > 1
            && crate::stores::ledger::appending_to(&self.path).is_none_or(|id| id != head.id)
    }

    /// Ships up to one batch from the oldest file, moving past files that
    /// are finished; returns the lines shipped (0: nothing to ship now).
    /// `insert` commits a batch (or fails); `now_ms` is the wall time the
    /// commit is remembered with.
    fn ship_once(
        &mut self,
        insert: &mut dyn FnMut(&[LedgerRecord]) -> Result<Inserted, Error>,
        state: &ShipperState,
        now_ms: u64,
    ) -> Result<usize, Error> {
        loop {
            let finished = self.head_is_finished();
            let Some(head) = self.files.front_mut() else {
                state.backlog(0);
                return Ok(0);
            };
            let len = head.file.metadata().map_err(Error::Io)?.len();
            if len < head.offset {
                tracing::error!(
                    "ledger: the file being shipped shrank (truncated? rotate by moving it, not with copytruncate); shipping it again from its start"
                );
                head.offset = 0;
            }
            let buf = read_at(&head.file, head.offset, (len - head.offset).min(READ)).map_err(
                |source| Error::File {
                    what: "cannot read the ledger".into(),
                    source,
                },
            )?;
            let mut records = Vec::new();
            let mut used = 0usize;
            for line in buf.split_inclusive(|b| *b == b'\n') {
                if !line.ends_with(b"\n") || records.len() == BATCH {
                    break;
                }
                used += line.len();
                let text = &line[..line.len() - 1];
                if text.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match LedgerRecord::from_line(text) {
                    Ok(r) => records.push(r),
                    Err(e) => {
                        tracing::error!("ledger: a line that does not parse is not shipped: {e}")
                    }
                }
            }
            if used > 0 {
                let done = insert(&records)?;
                state.note(&done);
                let (file, start) = (head.id, head.offset);
                head.offset += used as u64;
                let end = head.offset;
                // Any record of the batch answers for all of it; the last
                // one stored as it is whose id fits on a line. (A batch
                // without one, or without records, is not remembered: no
                // rows to lose.)
                let answers = |r: &&LedgerRecord| {
                    storable(&r.request_id)
                        && !done.repaired.contains(&r.request_id)
                        && !done.set_aside.iter().any(|(id, _)| *id == r.request_id)
                };
                if let Some(last) = records.iter().rev().find(answers) {
                    self.remember(Commit {
                        file,
                        start,
                        end,
                        last: last.request_id.clone(),
                        rows: records.len() as u64,
                        at_ms: now_ms,
                    });
                }
                if self.resend > 0 {
                    self.resend = self.resend.saturating_sub(records.len() as u64);
                    if self.resend == 0 {
                        tracing::info!(
                            "ledger: the lines found missing from PostgreSQL after the reconnection are shipped again"
                        );
                    }
                }
                self.save().map_err(checkpoint_unwritable)?;
                state
                    .shipped
                    .fetch_add(records.len() as u64, Ordering::Relaxed);
                if let Some(g) = &state.gateway {
                    g.metrics().ledger_shipped(records.len() as u64);
                }
                state.backlog(self.backlog());
                return Ok(records.len().max(1));
            }
            if !finished {
                state.backlog(self.backlog());
                return Ok(0);
            }
            // The oldest file is shipped to its end: on to the next.
            if len > head.offset {
                tracing::error!(
                    "ledger: a rotated file ends with an incomplete line ({} bytes), not shipped",
                    len - head.offset
                );
            }
            if let Some(done) = self.files.pop_front()
                && self.commits.iter().any(|c| c.file == done.id)
                && !self.held.iter().any(|(h, _)| *h == done.id)
            {
                self.held.push((done.id, done.file));
            }
            self.save().map_err(checkpoint_unwritable)?;
        }
    }

    /// Adds a commit to those remembered (merged into the newest when it
    /// continues it in the same slice of [`GRAIN`]), forgetting the old.
    fn remember(&mut self, c: Commit) {
        let grain = GRAIN.as_millis() as u64;
        match self.commits.back_mut() {
            Some(b)
                if b.file == c.file && b.end == c.start && b.at_ms / grain == c.at_ms / grain =>
            {
                b.end = c.end;
                b.last = c.last;
                b.rows += c.rows;
                b.at_ms = c.at_ms;
            }
            _ => self.commits.push_back(c),
        }
        self.forget();
    }

    /// Forgets the commits made more than [`REMEMBER`] before the newest
    /// and those beyond [`MAX_COMMITS`], and lets go of the files no commit
    /// names any more.
    fn forget(&mut self) {
        let newest = self.commits.back().map_or(0, |c| c.at_ms);
        let keep = REMEMBER.as_millis() as u64;
        while self.commits.len() > MAX_COMMITS
            || (self.commits.front()).is_some_and(|c| newest.saturating_sub(c.at_ms) > keep)
        {
            self.commits.pop_front();
        }
        self.release();
    }

    /// Closes the files held that no remembered commit names.
    fn release(&mut self) {
        let commits = &self.commits;
        self.held
            .retain(|(id, _)| commits.iter().any(|c| c.file == *id));
    }

    /// On a new connection, before shipping anything new: finds which of
    /// the remembered commits the server holds (`present` answers which of
    /// the ids it is given are in the table) and ships again from the
    /// oldest that it does not (a failover to a replica that had not
    /// received it). Returns the lines to ship again; `now_ms` is for the
    /// log.
    fn reconcile(
        &mut self,
        present: &mut Present<'_>,
        state: &ShipperState,
        now_ms: u64,
    ) -> Result<u64, Error> {
        if self.commits.is_empty() {
            return Ok(0);
        }
        let ids: Vec<&str> = self.commits.iter().map(|c| c.last.as_str()).collect();
        let found = present(&ids)?;
        // With a suffix lost, the oldest missing is the one after the
        // newest present; were anything else missing (rows deleted by
        // hand, two primaries), starting from the oldest missing still
        // ships it all.
        let Some(from) = self.commits.iter().position(|c| !found.contains(&c.last)) else {
            return Ok(0);
        };
        let since = self.commits[from].at_ms;
        if from == 0 {
            let age = now_ms.saturating_sub(since) / 1000;
            tracing::warn!(
                "ledger: not even the oldest batch remembered (committed {age} s ago) is in PostgreSQL; shipping again from it, but lines shipped before it cannot be checked"
            );
        }
        let lines = self.rewind(from);
        self.save().map_err(checkpoint_unwritable)?;
        if lines > 0 {
            let age = now_ms.saturating_sub(since) / 1000;
            tracing::warn!(
                "ledger: {lines} lines committed to PostgreSQL in the last {age} s are not there after reconnecting (a failover to a replica that had not received them?); shipping them again"
            );
            self.resend += lines;
            state.reshipping(lines);
        }
        Ok(lines)
    }

    /// Forgets the commits from the `from`th on and ships their lines
    /// again: each file they name from the start of its first one, the
    /// oldest first, then the files tracked that they do not name. Returns
    /// the lines they had shipped (from the files still there).
    fn rewind(&mut self, from: usize) -> u64 {
        let redo: Vec<Commit> = self.commits.drain(from..).collect();
        // (file, from byte, to byte, records), in the order they were
        // shipped.
        let mut again: Vec<(FileId, u64, u64, u64)> = Vec::new();
        for c in &redo {
            match again.iter_mut().find(|(id, ..)| *id == c.file) {
                Some(a) => {
                    a.1 = a.1.min(c.start);
                    a.2 = a.2.max(c.end);
                    a.3 += c.rows;
                }
                None => again.push((c.file, c.start, c.end, c.rows)),
            }
        }
        let mut lines = 0;
        let mut files = VecDeque::new();
        for (id, offset, end, rows) in again {
            let tracked = (self.files.iter())
                .position(|t| t.id == id)
                .and_then(|i| self.files.remove(i));
            let held = (self.held.iter())
                .position(|(h, _)| *h == id)
                .map(|i| self.held.swap_remove(i).1);
            let file = match (tracked, held) {
                // Not shipped to its end yet: from wherever is earlier.
                (Some(t), _) => Some((t.file, offset.min(t.offset))),
                (None, Some(f)) => Some((f, offset)),
                // Not found when the checkpoint was read; perhaps moved
                // back since. Shorter than the commits: another file.
                (None, None) => find(&self.path, id)
                    .filter(|f| f.metadata().is_ok_and(|m| m.len() >= end))
                    .map(|f| (f, offset)),
            };
            match file {
                Some((file, offset)) => {
                    lines += rows;
                    files.push_back(Tracked { file, id, offset });
                }
                None => tracing::error!(
                    "ledger: the rotated file {}:{} (device:inode), whose {rows} lines from byte {offset} to byte {end} must be shipped to PostgreSQL again, is no longer in the ledger's directory; those lines are missing from PostgreSQL",
                    id.dev,
                    id.ino
                ),
            }
        }
        files.extend(self.files.drain(..));
        self.files = files;
        self.release();
        lines
    }
}

/// Which of the request ids it is given are in the table.
type Present<'a> = dyn FnMut(&[&str]) -> Result<HashSet<String>, Error> + 'a;

fn checkpoint_unwritable(source: std::io::Error) -> Error {
    Error::File {
        what: "cannot write the checkpoint".into(),
        source,
    }
}

/// The file with identity `id`: the one at `path`, or else one in the same
/// directory (moved there by a rotation).
fn find(path: &str, id: FileId) -> Option<File> {
    let open = |p: &std::path::Path| -> Option<File> {
        let f = File::open(p).ok()?;
        (FileId::of(&f.metadata().ok()?) == id).then_some(f)
    };
    let path = std::path::Path::new(path);
    if let Some(f) = open(path) {
        return Some(f);
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let m = e.metadata().ok()?;
        (m.is_file() && FileId::of(&m) == id)
            .then(|| open(&e.path()))
            .flatten()
    })
}

/// Up to `n` bytes of `f` from `offset` (fewer at its end).
fn read_at(f: &File, offset: u64, n: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; n as usize];
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

fn run(url: &str, ledger: &str, state: &ShipperState) {
    let mut client: Option<postgres::Client> = None;
    let mut backoff = Duration::from_millis(100);
    let mut spool = Spool::recover(ledger);
    let mut warned = false;
    loop {
        let stopping = state.stop.load(Ordering::Relaxed);
        spool.watch();
        if client.is_none() {
            // Nothing new is shipped on a connection before the commits
            // the previous one may have lost are found (and rewound to).
            let connected = connect(url).and_then(|mut c| {
                spool.reconcile(&mut |ids| present(&mut c, ids), state, now_ms())?;
                Ok(c)
            });
            match connected {
                Ok(c) => {
                    if warned {
                        tracing::info!("ledger: PostgreSQL answers again; shipping the lines kept");
                    }
                    client = Some(c);
                    warned = false;
                    backoff = Duration::from_millis(100);
                    state.up.store(true, Ordering::Relaxed);
                }
                Err(e) => {
                    state.error();
                    state.backlog(spool.backlog());
                    if !warned {
                        tracing::error!(
                            "ledger: cannot ship to PostgreSQL ({e}); lines are kept in the local ledger and shipped once it can"
                        );
                        warned = true;
                    }
                    if stopping {
                        return;
                    }
                    spool.pause(backoff, &state.stop);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        let c = client.as_mut().expect("connected");
        match spool.ship_once(&mut |records| insert(c, records), state, now_ms()) {
            Ok(0) => {
                if stopping {
                    return;
                }
                spool.pause(IDLE, &state.stop);
            }
            Ok(_) => {}
            Err(e) => {
                state.error();
                tracing::error!("ledger: shipping to PostgreSQL failed ({e}); will retry");
                warned = true;
                client = None;
                if stopping {
                    return;
                }
                spool.pause(backoff, &state.stop);
            }
        }
    }
}

pub(super) fn connect(url: &str) -> Result<postgres::Client, Error> {
    open(url, &SCHEMA)
}

/// Which of `ids` are request ids in the table.
fn present(c: &mut postgres::Client, ids: &[&str]) -> Result<HashSet<String>, Error> {
    let rows = c
        .query(
            "SELECT request_id FROM chatgate_ledger WHERE request_id = ANY($1)",
            &[&ids],
        )
        .map_err(failed)?;
    // A column of another type (a table made by hand) is an error, not a
    // panic of the shipper's thread.
    rows.iter()
        .map(|r| r.try_get::<_, String>(0).map_err(failed))
        .collect()
}

#[cfg(test)]
mod tests {
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
}
