//! The ledger file: one line appended per metered request.
//!
//! Each line is one `write(2)` on a file opened with `O_APPEND`, completed
//! before the exchange lets the response's last bytes go to the client. Once
//! `write` returns, the line is in the kernel's page cache: a process killed
//! with SIGKILL right after loses nothing (only a machine crash could, and
//! `sync_all` at shutdown narrows that window).
//!
//! Which file a path's ledger appends to (its device and inode) is also
//! published for the PostgreSQL shipper ([`appending_to`]): after a
//! rotation it must finish the moved file, and it may only call that file
//! finished once no append can land in it any more.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::Error;

/// A file's identity: what a path names can change (rotation), this cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
}

impl FileId {
    /// The identity in `m`.
    pub(crate) fn of(m: &std::fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// The file each open ledger of this process appends to, by path.
static APPENDING: Mutex<Vec<(String, FileId)>> = Mutex::new(Vec::new());

fn publish(path: &str, id: Option<FileId>) {
    let mut all = APPENDING.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|(p, _)| p != path);
    if let Some(id) = id {
        all.push((path.to_owned(), id));
    }
}

/// The file the ledger opened at `path` in this process appends to now
/// (`None` when no ledger of this process has that path). Once this names
/// another file, no append reaches the previous one any more: the switch
/// is published after every append to the old file has returned.
pub(crate) fn appending_to(path: &str) -> Option<FileId> {
    let all = APPENDING.lock().unwrap_or_else(|e| e.into_inner());
    all.iter().find(|(p, _)| p == path).map(|(_, id)| *id)
}

/// An append-only JSON-lines file.
#[derive(Debug)]
pub(crate) struct Ledger {
    file: Mutex<File>,
    path: String,
    lines: AtomicU64,
    errors: AtomicU64,
    /// The last append failed (cleared by the next that succeeds).
    failing: AtomicBool,
}

impl Ledger {
    /// Opens (creating) the ledger at `path` for appending.
    pub(crate) fn open(path: &str) -> Result<Ledger, Error> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| Error::File {
                what: format!("cannot open the ledger '{path}' for appending"),
                source,
            })?;
        publish(path, file.metadata().ok().map(|m| FileId::of(&m)));
        Ok(Ledger {
            file: Mutex::new(file),
            path: path.to_owned(),
            lines: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            failing: AtomicBool::new(false),
        })
    }

    /// Appends one line (newline included) with a single write; false when
    /// it failed (logged at error level).
    pub(crate) fn append(&self, line: &[u8]) -> bool {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        match file.write_all(line) {
            Ok(()) => {
                self.lines.fetch_add(1, Ordering::Relaxed);
                self.failing.store(false, Ordering::Relaxed);
                true
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.failing.store(true, Ordering::Relaxed);
                tracing::error!(path = %self.path, error = %e, "ledger append failed");
                false
            }
        }
    }

    /// Whether the ledger can be written: the last append succeeded (or
    /// none was made) and the file is still there.
    pub(crate) fn writable(&self) -> bool {
        !self.failing.load(Ordering::Relaxed) && std::path::Path::new(&self.path).exists()
    }

    /// Opens the path again (after the operator moved the file away, on
    /// SIGHUP): lines already written are in the old file, later ones in
    /// the new. On failure the current file stays in use.
    ///
    /// The new file is created while appends wait: by the time it exists at
    /// the path, every append to the old file has returned, so a reader
    /// that sees the new file and then reads the old one to its end has
    /// all of the old one.
    pub(crate) fn reopen(&self) -> Result<(), Error> {
        let old = {
            let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
            let fresh = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|source| Error::File {
                    what: format!("cannot reopen the ledger '{}'", self.path),
                    source,
                })?;
            publish(&self.path, fresh.metadata().ok().map(|m| FileId::of(&m)));
            self.failing.store(false, Ordering::Relaxed);
            std::mem::replace(&mut *file, fresh)
        };
        // Outside the lock: appends go on into the new file meanwhile.
        let _ = old.sync_all();
        Ok(())
    }

    /// Forces the file to stable storage (at shutdown).
    pub(crate) fn sync(&self) {
        let file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.sync_all() {
            tracing::error!(path = %self.path, error = %e, "ledger sync failed");
        }
    }

    /// Lines appended and failed appends so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.lines.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        let file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let mine = file.metadata().ok().map(|m| FileId::of(&m));
        if mine.is_some() && appending_to(&self.path) == mine {
            publish(&self.path, None);
        }
    }
}
