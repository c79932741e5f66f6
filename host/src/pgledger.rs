//! The shared ledger (`--ledger-postgres URL`): a thread that ships the
//! local JSONL ledger's lines to a PostgreSQL table in batches.
//!
//! The JSONL file stays the first place every record is written (one
//! `write(2)` before the response's last bytes, surviving SIGKILL); it is
//! also the spool. The shipper reads it from a checkpoint (the byte offset
//! of the first line not yet in PostgreSQL, kept in `<ledger>.pg-offset`),
//! inserts complete lines in one transaction per batch with
//! `ON CONFLICT (request_id) DO NOTHING`, then moves the checkpoint. While
//! PostgreSQL is down it retries with a growing pause and the lines wait in
//! the file; when it returns, they are replayed from the checkpoint. A crash
//! between a commit and the checkpoint's write replays lines PostgreSQL
//! already has: the primary key makes that a no-op, so nothing is billed
//! twice and nothing is lost.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use chatgate_core::gateway::Gateway;
use chatgate_core::ledger::LedgerRecord;

/// The table's schema (created when missing).
pub const SCHEMA: &str = include_str!("../ledger.sql");
/// The advisory lock taken while creating the schema ("chatgate" in ASCII).
const SCHEMA_LOCK: i64 = 0x0063_6861_7467_6174;
/// Most lines per insert.
const BATCH: usize = 500;
/// Pause when there is nothing to ship.
const IDLE: Duration = Duration::from_millis(100);
/// Longest pause between attempts while PostgreSQL is down.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Figures shared with the metrics and the shutdown.
#[derive(Debug, Default)]
pub struct ShipperState {
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
pub fn start(
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

fn checkpoint_path(ledger: &str) -> String {
    format!("{ledger}.pg-offset")
}

fn read_checkpoint(ledger: &str) -> u64 {
    std::fs::read_to_string(checkpoint_path(ledger))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn write_checkpoint(ledger: &str, offset: u64) -> std::io::Result<()> {
    let path = checkpoint_path(ledger);
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, format!("{offset}\n"))?;
    std::fs::rename(&tmp, &path)
}

fn run(url: &str, ledger: &str, state: &ShipperState) {
    let mut client: Option<postgres::Client> = None;
    let mut backoff = Duration::from_millis(100);
    let mut offset = read_checkpoint(ledger);
    let mut warned = false;
    loop {
        let stopping = state.stop.load(Ordering::Relaxed);
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
                    if !warned {
                        tracing::error!(
                            "ledger: PostgreSQL unreachable ({e}); lines are kept in the local ledger and shipped when it returns"
                        );
                        warned = true;
                    }
                    if stopping {
                        return;
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        let c = client.as_mut().expect("connected");
        match ship_once(c, ledger, &mut offset, state) {
            Ok(0) => {
                if stopping {
                    return;
                }
                std::thread::sleep(IDLE);
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
                std::thread::sleep(backoff);
            }
        }
    }
}

fn connect(url: &str) -> Result<postgres::Client, String> {
    let mut config: postgres::Config = url.parse().map_err(|e| format!("bad URL: {e}"))?;
    config.connect_timeout(Duration::from_secs(3));
    let mut c = config.connect(postgres::NoTls).map_err(|e| e.to_string())?;
    // Several instances starting together would race on CREATE TABLE IF
    // NOT EXISTS (PostgreSQL can fail one with a duplicate-type error): an
    // advisory lock makes them take turns.
    c.batch_execute(&format!(
        "BEGIN; SELECT pg_advisory_xact_lock({SCHEMA_LOCK}); {SCHEMA} COMMIT;"
    ))
    .map_err(|e| e.to_string())?;
    Ok(c)
}

/// Ships up to one batch from `offset`; returns the lines shipped.
fn ship_once(
    c: &mut postgres::Client,
    ledger: &str,
    offset: &mut u64,
    state: &ShipperState,
) -> Result<usize, String> {
    let mut f = match std::fs::File::open(ledger) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(format!("cannot read the ledger: {e}")),
    };
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    if len < *offset {
        // A new file at the path (rotated): start it from its beginning.
        *offset = 0;
    }
    state.backlog(len - *offset);
    if len == *offset {
        return Ok(0);
    }
    f.seek(SeekFrom::Start(*offset))
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    f.take((len - *offset).min(4 << 20))
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
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
            Err(e) => tracing::error!("ledger: a line that does not parse is not shipped: {e}"),
        }
    }
    if used == 0 {
        return Ok(0);
    }
    insert(c, &records)?;
    *offset += used as u64;
    write_checkpoint(ledger, *offset).map_err(|e| format!("cannot write the checkpoint: {e}"))?;
    state
        .shipped
        .fetch_add(records.len() as u64, Ordering::Relaxed);
    if let Some(g) = &state.gateway {
        g.metrics().ledger_shipped(records.len() as u64);
    }
    state.backlog(len - *offset);
    Ok(records.len().max(1))
}

const COLUMNS: usize = 18;

fn insert(c: &mut postgres::Client, records: &[LedgerRecord]) -> Result<(), String> {
    if records.is_empty() {
        return Ok(());
    }
    let mut sql = String::from(
        "INSERT INTO chatgate_ledger (request_id, ts, key, model, stream, status, prompt_tokens, \
         completion_tokens, reasoning_tokens, cached_tokens, cost_nano_usd, finish_reason, complete, \
         client_disconnected, upstream_status, error, duration_ms, ttfb_ms) VALUES ",
    );
    for i in 0..records.len() {
        let p = |k: usize| i * COLUMNS + k;
        if i > 0 {
            sql.push(',');
        }
        sql.push_str(&format!(
            "(${}, ${}::text::timestamptz, ${}, ${}, ${}, ${}::int::smallint, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}::int::smallint, ${}, ${}, ${})",
            p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9), p(10), p(11), p(12), p(13), p(14), p(15), p(16), p(17), p(18)
        ));
    }
    sql.push_str(" ON CONFLICT (request_id) DO NOTHING");
    struct Row {
        status: i32,
        prompt: i64,
        completion: i64,
        reasoning: i64,
        cached: i64,
        cost: i64,
        upstream: Option<i32>,
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
            upstream: r.upstream_status.map(i32::from),
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
            &r.error,
            &n.duration,
            &n.ttfb,
        ]);
    }
    let mut tx = c.transaction().map_err(|e| e.to_string())?;
    tx.execute(sql.as_str(), &params)
        .map_err(|e| e.to_string())?;
    tx.commit().map_err(|e| e.to_string())
}

/// `usage --postgres URL`: feeds the table's rows, in the filter's time
/// range, to `report` (streamed with a server-side cursor).
pub fn report_from_postgres(
    url: &str,
    report: &mut chatgate_core::report::Report,
    since: Option<u64>,
    until: Option<u64>,
) -> Result<(), String> {
    let mut c = connect(url)?;
    let mut tx = c.transaction().map_err(|e| e.to_string())?;
    let since = since.map_or(i64::MIN / 1000, |s| s as i64);
    let until = until.map_or(i64::MAX / 1000, |u| u as i64);
    let portal = tx
        .bind(
            "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), key, stream, complete, status::int, \
             prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens, cost_nano_usd \
             FROM chatgate_ledger WHERE ts >= to_timestamp($1::bigint) AND ts < to_timestamp($2::bigint)",
            &[&since.max(-62_135_596_800), &until.min(253_402_300_799)],
        )
        .map_err(|e| e.to_string())?;
    loop {
        let rows = tx
            .query_portal(&portal, 10_000)
            .map_err(|e| e.to_string())?;
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
