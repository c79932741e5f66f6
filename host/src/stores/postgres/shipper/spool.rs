//! The spool: the ledger files still to ship, read from the checkpoint
//! and shipped from it, and the recent commits a failover may have lost
//! (the module above says how).

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chatgate_core::LedgerRecord;

use super::super::rows::Inserted;
use super::{BATCH, GRAIN, IDLE, MAX_COMMITS, READ, REMEMBER, ShipperState};
use crate::error::Error;
use crate::stores::ledger::FileId;

/// Where the checkpoint of the ledger at `ledger` is kept.
pub(super) fn checkpoint_path(ledger: &str) -> String {
    format!("{ledger}.pg-offset")
}

/// A ledger file being shipped, held open (it may have been moved away).
#[derive(Debug)]
pub(super) struct Tracked {
    pub(super) file: File,
    pub(super) id: FileId,
    /// The first byte not yet in PostgreSQL.
    pub(super) offset: u64,
}

/// A commit of this shipper (or several in a row, see [`GRAIN`]): what a
/// failover may have lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Commit {
    pub(super) file: FileId,
    /// The byte range of the file it shipped.
    pub(super) start: u64,
    pub(super) end: u64,
    /// The request id of its last record: present in the table if and only
    /// if the commit is (a transaction is all or nothing).
    pub(super) last: String,
    /// Records it shipped.
    pub(super) rows: u64,
    /// Wall time of the (last) commit, Unix milliseconds.
    pub(super) at_ms: u64,
}

impl Commit {
    /// The checkpoint line's text after `commit `: `DEV INO START END AT_MS
    /// ROWS REQUEST_ID`, the id last (it is the rest of the line).
    pub(super) fn parse(text: &str) -> Option<Commit> {
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
pub(super) fn storable(id: &str) -> bool {
    !id.is_empty() && !id.chars().any(char::is_control)
}

/// Wall time, Unix milliseconds.
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The files still to ship, oldest first: the last is normally the one at
/// the ledger's path.
#[derive(Debug)]
pub(super) struct Spool {
    pub(super) path: String,
    pub(super) files: VecDeque<Tracked>,
    /// The recent commits, oldest first.
    pub(super) commits: VecDeque<Commit>,
    /// The files the commits name that are no longer in `files` (shipped to
    /// their end), held open so that a rewind can read them again even if
    /// they are deleted meanwhile.
    pub(super) held: Vec<(FileId, File)>,
    /// Lines still to ship again after the last reconciliation (for the
    /// log line saying they were).
    pub(super) resend: u64,
}

impl Spool {
    /// The files named by the checkpoint, then the one at the path.
    pub(super) fn recover(path: &str) -> Spool {
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
    pub(super) fn watch(&mut self) {
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
    pub(super) fn pause(&mut self, d: Duration, stop: &AtomicBool) {
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
    pub(super) fn save(&self) -> std::io::Result<()> {
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
    pub(super) fn backlog(&self) -> u64 {
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
    pub(super) fn head_is_finished(&self) -> bool {
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
    pub(super) fn ship_once(
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
    pub(super) fn remember(&mut self, c: Commit) {
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
    pub(super) fn forget(&mut self) {
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
    pub(super) fn release(&mut self) {
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
    pub(super) fn reconcile(
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
    pub(super) fn rewind(&mut self, from: usize) -> u64 {
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
pub(super) type Present<'a> = dyn FnMut(&[&str]) -> Result<HashSet<String>, Error> + 'a;

pub(super) fn checkpoint_unwritable(source: std::io::Error) -> Error {
    Error::File {
        what: "cannot write the checkpoint".into(),
        source,
    }
}

/// The file with identity `id`: the one at `path`, or else one in the same
/// directory (moved there by a rotation).
pub(super) fn find(path: &str, id: FileId) -> Option<File> {
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
pub(super) fn read_at(f: &File, offset: u64, n: u64) -> std::io::Result<Vec<u8>> {
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
