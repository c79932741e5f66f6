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
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the thread: connect, reconcile, ship, pause; the figures it reports |
//! | `spool.rs` | the files still to ship and the recent commits: the checkpoint read and written, a batch read and shipped, a failover's losses found and rewound to |
//! | `tests.rs` | rotation, restarts, failovers and failed inserts, against a real ledger file |

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use chatgate_core::Gateway;

use super::connection::{failed, open};
use super::rows::{Inserted, SCHEMA, insert};
use crate::error::Error;

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

mod spool;

use spool::{Spool, now_ms};
#[cfg(test)]
mod tests;

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
