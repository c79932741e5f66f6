//! The ledger file: one line appended per metered request.
//!
//! Each line is one `write(2)` on a file opened with `O_APPEND`, completed
//! before the exchange lets the response's last bytes go to the client. Once
//! `write` returns, the line is in the kernel's page cache: a process killed
//! with SIGKILL right after loses nothing (only a machine crash could, and
//! `sync_all` at shutdown narrows that window).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// An append-only JSON-lines file.
#[derive(Debug)]
pub struct Ledger {
    file: Mutex<File>,
    path: String,
    lines: AtomicU64,
    errors: AtomicU64,
    /// The last append failed (cleared by the next that succeeds).
    failing: AtomicBool,
}

impl Ledger {
    /// Opens (creating) the ledger at `path` for appending.
    pub fn open(path: &str) -> Result<Ledger, String> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open the ledger '{path}' for appending: {e}"))?;
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
    pub fn append(&self, line: &[u8]) -> bool {
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
    pub fn writable(&self) -> bool {
        !self.failing.load(Ordering::Relaxed) && std::path::Path::new(&self.path).exists()
    }

    /// Opens the path again (after the operator moved the file away, on
    /// SIGHUP): lines already written are in the old file, later ones in
    /// the new. On failure the current file stays in use.
    pub fn reopen(&self) -> Result<(), String> {
        let fresh = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| format!("cannot reopen the ledger '{}': {e}", self.path))?;
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let _ = file.sync_all();
        *file = fresh;
        self.failing.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Forces the file to stable storage (at shutdown).
    pub fn sync(&self) {
        let file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.sync_all() {
            tracing::error!(path = %self.path, error = %e, "ledger sync failed");
        }
    }

    /// Lines appended and failed appends so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.lines.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}
