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
use std::sync::atomic::{AtomicU64, Ordering};

/// An append-only JSON-lines file.
#[derive(Debug)]
pub struct Ledger {
    file: Mutex<File>,
    path: String,
    lines: AtomicU64,
    errors: AtomicU64,
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
        })
    }

    /// Appends one line (newline included) with a single write.
    pub fn append(&self, line: &[u8]) {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        match file.write_all(line) {
            Ok(()) => {
                self.lines.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(path = %self.path, error = %e, "ledger append failed");
            }
        }
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
