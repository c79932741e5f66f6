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

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chatgate_core::Gateway;
use chatgate_core::LedgerRecord;

use crate::error::Error;
use crate::stores::ledger::FileId;

/// The table's schema (created when missing).
pub(crate) const SCHEMA: &str = include_str!("../../ledger.sql");
/// The advisory lock taken while creating the schema ("chatgate" in ASCII).
const SCHEMA_LOCK: i64 = 0x0063_6861_7467_6174;
/// Most lines per insert.
const BATCH: usize = 500;
/// Most bytes read per pass.
const READ: u64 = 4 << 20;
/// Pause when there is nothing to ship, and how often the path is looked
/// at for a new file during longer pauses.
const IDLE: Duration = Duration::from_millis(100);
/// Longest pause between attempts while PostgreSQL is down.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

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

/// The files still to ship, oldest first: the last is normally the one at
/// the ledger's path.
#[derive(Debug)]
struct Spool {
    path: String,
    files: VecDeque<Tracked>,
}

impl Spool {
    /// The files named by the checkpoint, then the one at the path.
    fn recover(path: &str) -> Spool {
        let mut spool = Spool {
            path: path.to_owned(),
            files: VecDeque::new(),
        };
        let text = std::fs::read_to_string(checkpoint_path(path)).unwrap_or_default();
        for line in text.lines() {
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

    fn save(&self) -> std::io::Result<()> {
        let mut text = String::new();
        for t in &self.files {
            text.push_str(&format!("{} {} {}\n", t.id.dev, t.id.ino, t.offset));
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
    /// `insert` commits a batch (or fails).
    fn ship_once(
        &mut self,
        insert: &mut dyn FnMut(&[LedgerRecord]) -> Result<(), Error>,
        state: &ShipperState,
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
                insert(&records)?;
                head.offset += used as u64;
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
            self.files.pop_front();
            self.save().map_err(checkpoint_unwritable)?;
        }
    }
}

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
            match connect(url) {
                Ok(c) => {
                    if warned {
                        tracing::info!("ledger: PostgreSQL is back; replaying the spooled lines");
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
                            "ledger: PostgreSQL unreachable ({e}); lines are kept in the local ledger and shipped when it returns"
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
        match spool.ship_once(&mut |records| insert(c, records), state) {
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

fn connect(url: &str) -> Result<postgres::Client, Error> {
    open(url, SCHEMA, SCHEMA_LOCK)
}

/// A connection to `url`, with `schema` created if missing under the
/// advisory lock `lock`.
pub(crate) fn open(url: &str, schema: &str, lock: i64) -> Result<postgres::Client, Error> {
    let mut config: postgres::Config = url
        .parse()
        .map_err(|e| Error::Config(format!("bad URL: {e}")))?;
    config.connect_timeout(Duration::from_secs(3));
    let mut c = config.connect(postgres::NoTls).map_err(failed)?;
    // Several instances starting together would race on CREATE TABLE IF
    // NOT EXISTS (PostgreSQL can fail one with a duplicate-type error): an
    // advisory lock makes them take turns.
    c.batch_execute(&format!(
        "BEGIN; SELECT pg_advisory_xact_lock({lock}); {schema} COMMIT;"
    ))
    .map_err(failed)?;
    Ok(c)
}

/// What PostgreSQL (or the driver) said.
fn failed(e: postgres::Error) -> Error {
    Error::Postgres(e.to_string())
}

const COLUMNS: usize = 25;
/// The insert's head: its `COLUMNS` columns, in the order of the
/// parameters.
const INSERT: &str = "INSERT INTO chatgate_ledger (request_id, ts, key, model, stream, status, \
    prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens, cost_nano_usd, \
    finish_reason, complete, client_disconnected, upstream_status, endpoint, attempts, error, \
    duration_ms, ttfb_ms, provider_request_id, usage_missing, charged_nano_usd, api, \
    served_model) VALUES ";
/// The columns whose parameter is cast (1-based), and how.
const CASTS: [(usize, &str); 3] = [
    (2, "::text::timestamptz"),
    (6, "::int::smallint"),
    (15, "::int::smallint"),
];

/// The `VALUES` tuples of `rows` rows: `COLUMNS` numbered parameters each,
/// cast where the column needs it.
fn push_values(sql: &mut String, rows: usize) {
    use std::fmt::Write as _;
    for i in 0..rows {
        sql.push_str(if i == 0 { "(" } else { ",(" });
        for k in 1..=COLUMNS {
            if k > 1 {
                sql.push_str(", ");
            }
            let _ = write!(sql, "${}", i * COLUMNS + k);
            if let Some((_, cast)) = CASTS.iter().find(|(at, _)| *at == k) {
                sql.push_str(cast);
            }
        }
        sql.push(')');
    }
}

fn insert(c: &mut postgres::Client, records: &[LedgerRecord]) -> Result<(), Error> {
    if records.is_empty() {
        return Ok(());
    }
    let mut sql = String::from(INSERT);
    push_values(&mut sql, records.len());
    sql.push_str(" ON CONFLICT (request_id) DO NOTHING");
    struct Row {
        status: i32,
        prompt: i64,
        completion: i64,
        reasoning: i64,
        cached: i64,
        cost: i64,
        charged: i64,
        upstream: Option<i32>,
        attempts: i32,
        duration: i64,
        ttfb: Option<i64>,
    }
    let num = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let rows: Vec<Row> = records
        .iter()
        .map(|r| Row {
            status: i32::from(r.status),
            prompt: num(r.prompt_tokens),
            completion: num(r.completion_tokens),
            reasoning: num(r.reasoning_tokens),
            cached: num(r.cached_tokens),
            cost: num(r.cost_nano_usd),
            charged: num(r.charged_nano_usd),
            upstream: r.upstream_status.map(i32::from),
            attempts: i32::try_from(r.attempts).unwrap_or(i32::MAX),
            duration: num(r.duration_ms),
            ttfb: r.ttfb_ms.map(num),
        })
        .collect();
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> =
        Vec::with_capacity(records.len() * COLUMNS);
    for (r, n) in records.iter().zip(&rows) {
        params.extend_from_slice(&[
            &r.request_id,
            &r.ts,
            &r.key,
            &r.model,
            &r.stream,
            &n.status,
            &n.prompt,
            &n.completion,
            &n.reasoning,
            &n.cached,
            &n.cost,
            &r.finish_reason,
            &r.complete,
            &r.client_disconnected,
            &n.upstream,
            &r.endpoint,
            &n.attempts,
            &r.error,
            &n.duration,
            &n.ttfb,
            &r.provider_request_id,
            &r.usage_missing,
            &n.charged,
            &r.api,
            &r.served_model,
        ]);
    }
    debug_assert_eq!(
        params.len(),
        records.len() * COLUMNS,
        "a parameter per column"
    );
    let mut tx = c.transaction().map_err(failed)?;
    tx.execute(sql.as_str(), &params).map_err(failed)?;
    tx.commit().map_err(failed)
}

/// `usage --postgres URL`: feeds the table's rows, in the filter's time
/// range, to `report` (streamed with a server-side cursor).
pub(crate) fn report_from_postgres(
    url: &str,
    report: &mut chatgate_core::report::Report,
    since: Option<u64>,
    until: Option<u64>,
) -> Result<(), Error> {
    let mut c = connect(url)?;
    let mut tx = c.transaction().map_err(failed)?;
    let since = since.map_or(i64::MIN / 1000, |s| s as i64);
    let until = until.map_or(i64::MAX / 1000, |u| u as i64);
    let portal = tx
        .bind(
            "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), key, stream, complete, status::int, \
             prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens, cost_nano_usd \
             FROM chatgate_ledger WHERE ts >= to_timestamp($1::bigint) AND ts < to_timestamp($2::bigint)",
            &[&since.max(-62_135_596_800), &until.min(253_402_300_799)],
        )
        .map_err(failed)?;
    loop {
        let rows = tx.query_portal(&portal, 10_000).map_err(failed)?;
        if rows.is_empty() {
            break;
        }
        for r in rows {
            let n = |i: usize| -> u64 { r.get::<_, i64>(i).max(0) as u64 };
            report.add_row(
                r.get::<_, String>(0).as_str(),
                r.get::<_, String>(1).as_str(),
                r.get(2),
                r.get(3),
                r.get::<_, i32>(4) as u16,
                [n(5), n(6), n(7), n(8), n(9)],
            );
        }
    }
    Ok(())
}

/// A connection to the shared ledger (its table created when missing).
pub(crate) fn connect_ledger(url: &str) -> Result<postgres::Client, Error> {
    connect(url)
}

/// Each key's tally since `since_ms` (midnight UTC: the console's "today"),
/// summed by PostgreSQL over the shared ledger, every instance's lines.
pub(crate) fn tallies_since(
    c: &mut postgres::Client,
    since_ms: u64,
) -> Result<std::collections::HashMap<String, chatgate_core::console::Tally>, Error> {
    let rows = c
        .query(
            "SELECT key, count(*), \
               COALESCE(SUM(prompt_tokens), 0)::bigint, COALESCE(SUM(completion_tokens), 0)::bigint, \
               COALESCE(SUM(reasoning_tokens), 0)::bigint, COALESCE(SUM(cached_tokens), 0)::bigint, \
               COALESCE(SUM(cost_nano_usd), 0)::bigint, \
               count(*) FILTER (WHERE error = 'rate_limit_exceeded'), \
               count(*) FILTER (WHERE error = 'insufficient_quota'), \
               count(*) FILTER (WHERE status >= 500 AND error IS DISTINCT FROM 'rate_limit_exceeded' \
                                AND error IS DISTINCT FROM 'insufficient_quota'), \
               count(*) FILTER (WHERE served_model IS NOT NULL) \
             FROM chatgate_ledger WHERE ts >= to_timestamp($1::bigint / 1000.0) GROUP BY key",
            &[&i64::try_from(since_ms).unwrap_or(i64::MAX)],
        )
        .map_err(failed)?;
    Ok(rows
        .iter()
        .map(|r| {
            let n = |i: usize| r.get::<_, i64>(i).max(0) as u64;
            let tally = chatgate_core::console::Tally {
                requests: n(1),
                prompt_tokens: n(2),
                completion_tokens: n(3),
                reasoning_tokens: n(4),
                cached_tokens: n(5),
                cost_nano_usd: n(6),
                rate_limited: n(7),
                budget_refused: n(8),
                errors: n(9),
                fallbacks: n(10),
            };
            (r.get::<_, String>(0), tally)
        })
        .collect())
}

/// Every key's spend in the periods that hold `unix_ms`, summed by
/// PostgreSQL over the shared ledger (one query).
pub(crate) fn tally_postgres(
    url: &str,
    unix_ms: u64,
    before: Option<u64>,
) -> Result<chatgate_core::SpendTally, Error> {
    let unreadable = |e: &dyn std::fmt::Display| {
        Error::Postgres(format!("cannot read the ledger from PostgreSQL: {e}"))
    };
    let mut tally = chatgate_core::SpendTally::new(unix_ms);
    let [day, week, month, _] = tally.starts().map(|ms| (ms / 1000) as i64);
    // Lines before the cut-off only (a rebuild after a failover), to the
    // millisecond as the ledger's `ts`; none: all of them.
    let before = before.map_or(i64::MAX, |b| b.min(i64::MAX as u64) as i64);
    let mut c = connect(url).map_err(|e| unreadable(&e))?;
    let rows = c
        .query(
            "SELECT key, \
               COALESCE(SUM(GREATEST(cost_nano_usd, charged_nano_usd)) FILTER (WHERE ts >= to_timestamp($1::bigint)), 0)::bigint, \
               COALESCE(SUM(GREATEST(cost_nano_usd, charged_nano_usd)) FILTER (WHERE ts >= to_timestamp($2::bigint)), 0)::bigint, \
               COALESCE(SUM(GREATEST(cost_nano_usd, charged_nano_usd)) FILTER (WHERE ts >= to_timestamp($3::bigint)), 0)::bigint, \
               COALESCE(SUM(GREATEST(cost_nano_usd, charged_nano_usd)), 0)::bigint \
             FROM chatgate_ledger \
             WHERE $4::bigint = 9223372036854775807 OR ts < to_timestamp($4::bigint::float8 / 1000) \
             GROUP BY key",
            &[&day, &week, &month, &before],
        )
        .map_err(|e| unreadable(&e))?;
    for r in rows {
        let key: String = r.get(0);
        let n = |i: usize| r.get::<_, i64>(i).max(0) as u64;
        tally.keys.insert(key, [n(1), n(2), n(3), n(4)]);
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::ledger::Ledger;

    #[test]
    fn every_column_has_its_parameter() {
        let columns = INSERT[INSERT.find('(').unwrap() + 1..INSERT.find(')').unwrap()]
            .split(',')
            .count();
        assert_eq!(columns, COLUMNS);
        let mut sql = String::new();
        push_values(&mut sql, 2);
        assert_eq!(sql.matches('$').count(), 2 * COLUMNS);
        assert!(sql.starts_with("($1, $2::text::timestamptz, $3"), "{sql}");
        assert!(sql.ends_with(&format!(", ${})", 2 * COLUMNS)), "{sql}");
        assert!(sql.contains(&format!(",(${}, ", COLUMNS + 1)), "{sql}");
    }

    fn line(id: &str) -> Vec<u8> {
        LedgerRecord::new(1_795_000_000_000, id, "k").to_line()
    }

    /// Ships until nothing is left; the request ids, in order.
    fn ship_all(spool: &mut Spool) -> Vec<String> {
        let state = ShipperState::default();
        let mut got = Vec::new();
        let mut sink = |r: &[LedgerRecord]| -> Result<(), Error> {
            got.extend(r.iter().map(|r| r.request_id.clone()));
            Ok(())
        };
        while spool.ship_once(&mut sink, &state).unwrap() > 0 {}
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
        // The checkpoint names only the live file now.
        let text = std::fs::read_to_string(checkpoint_path(&path)).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
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
        assert_eq!(ship_all(&mut Spool::recover(&path)), ids(&["a2"]));
        std::fs::remove_file(checkpoint_path(&path)).unwrap();
        assert_eq!(ship_all(&mut Spool::recover(&path)), ids(&["a1", "a2"]));
        // A checkpoint past the file's end is not this file's: from 0.
        let text = std::fs::read_to_string(checkpoint_path(&path)).unwrap();
        let (id, _) = text.trim().rsplit_once(' ').unwrap();
        std::fs::write(checkpoint_path(&path), format!("{id} 999999\n")).unwrap();
        assert_eq!(ship_all(&mut Spool::recover(&path)), ids(&["a1", "a2"]));
    }

    #[test]
    fn a_failed_insert_moves_nothing() {
        let (_dir, path, ledger) = setup();
        let mut spool = Spool::recover(&path);
        assert!(ledger.append(&line("a1")));
        let state = ShipperState::default();
        let mut failing =
            |_: &[LedgerRecord]| -> Result<(), Error> { Err(Error::Postgres("down".into())) };
        assert!(spool.ship_once(&mut failing, &state).is_err());
        assert_eq!(spool.backlog(), line("a1").len() as u64);
        assert_eq!(ship_all(&mut spool), ids(&["a1"]));
        assert_eq!(spool.backlog(), 0);
    }
}
