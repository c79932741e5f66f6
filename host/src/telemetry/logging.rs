//! Logs to stderr: text (the default) or JSON lines.
//!
//! The text format is written by a small formatter of our own: one line per
//! event, `2026-11-22T10:00:00.123Z  INFO chatgate::access: request
//! request_id=req_… key=alice status=200 …`. It exists for cost: an access
//! line is written for every request, and tracing-subscriber's general
//! formatter spends several microseconds on each (field visitors through
//! `Debug`, a timestamp formatted from scratch, colour plumbing). Here the
//! date and time are formatted once per second per thread and numbers and
//! strings are written directly.
//!
//! Access lines (target `chatgate::access`, one per request) are written in
//! batches: they collect in memory and a writer thread sends them to stderr
//! at most [`ACCESS_FLUSH`] after the first of them, or at once when
//! [`ACCESS_BATCH`] bytes are waiting. Every other line (start-up, warnings,
//! errors) is written at once, after the access lines before it, so the
//! order on stderr is the order of events. A per-request `write(2)` to the
//! log was a system call on every request's path; this is one per batch.
//! The usage ledger, not the log, is the record that must survive a crash:
//! a `SIGKILL` can lose at most the last [`ACCESS_FLUSH`] of access lines,
//! and a normal exit (including `SIGTERM`/`SIGINT`) writes them all.

use std::cell::RefCell;
use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use chatgate_core::LedgerRecord;
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Sets up logging to stderr at `level`, as text or JSON lines.
pub(crate) fn init_logging(level: &str, json: bool) {
    let level: tracing::Level = level.parse().unwrap_or(tracing::Level::INFO);
    let mode = match (level >= tracing::Level::INFO, json) {
        (false, _) => ACCESS_OFF,
        (true, false) => ACCESS_TEXT,
        (true, true) => ACCESS_JSON,
    };
    ACCESS.store(mode, Ordering::Relaxed);
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(MakeSink);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.event_format(TextFormat).try_init()
    };
}

/// How long an access line may wait in memory before it is written.
pub(crate) const ACCESS_FLUSH: Duration = Duration::from_millis(100);

/// Waiting access lines are written at once past this many bytes.
pub(crate) const ACCESS_BATCH: usize = 64 * 1024;

/// The access lines waiting to be written, and the writer thread's signal.
struct Sink {
    /// Access lines not yet written.
    pending: Mutex<Vec<u8>>,
    /// Held while writing to stderr, so batches and single lines never
    /// interleave or overtake each other.
    out: Mutex<()>,
    /// Signalled when `pending` becomes non-empty.
    ready: Condvar,
}

/// The sink, started with its writer thread by the first line.
static SINK: OnceLock<&'static Sink> = OnceLock::new();

fn sink() -> &'static Sink {
    SINK.get_or_init(|| {
        let sink: &'static Sink = Box::leak(Box::new(Sink {
            pending: Mutex::new(Vec::new()),
            out: Mutex::new(()),
            ready: Condvar::new(),
        }));
        let started = std::thread::Builder::new()
            .name("chatgate-log".into())
            .spawn(move || sink.run());
        if started.is_err() {
            // No writer thread: every line is written at once instead.
            FLUSH_AT_ONCE.store(true, Ordering::Relaxed);
        }
        sink
    })
}

static FLUSH_AT_ONCE: AtomicBool = AtomicBool::new(false);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Sink {
    /// The writer thread: waits for a first pending line, lets the batch
    /// fill for [`ACCESS_FLUSH`], writes it.
    fn run(&self) {
        let mut spare = Vec::new();
        loop {
            {
                let mut pending = lock(&self.pending);
                while pending.is_empty() {
                    pending = self
                        .ready
                        .wait(pending)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
            std::thread::sleep(ACCESS_FLUSH);
            self.flush_with(&mut spare, &[]);
        }
    }

    /// Writes what is pending, then `line`, in order. `spare` is swapped
    /// with the pending buffer so request threads can keep appending while
    /// the bytes go out.
    fn flush_with(&self, spare: &mut Vec<u8>, line: &[u8]) {
        let _out = lock(&self.out);
        std::mem::swap(&mut *lock(&self.pending), spare);
        let mut err = io::stderr().lock();
        let _ = err.write_all(spare);
        let _ = err.write_all(line);
        spare.clear();
        if spare.capacity() > 4 * ACCESS_BATCH {
            *spare = Vec::new();
        }
    }

    /// Adds an access line to the batch; writes the batch when it is full,
    /// or at once when there is no writer thread.
    fn batch(&self, line: &[u8]) {
        if FLUSH_AT_ONCE.load(Ordering::Relaxed) {
            return self.flush_with(&mut Vec::new(), line);
        }
        let full = {
            let mut pending = lock(&self.pending);
            let first = pending.is_empty();
            pending.extend_from_slice(line);
            if first {
                self.ready.notify_one();
            }
            pending.len() >= ACCESS_BATCH
        };
        if full {
            self.flush_with(&mut Vec::new(), &[]);
        }
    }
}

/// Writes every access line still waiting. Called before the process
/// exits.
pub(crate) fn flush() {
    if let Some(sink) = SINK.get() {
        sink.flush_with(&mut Vec::new(), &[]);
    }
}

/// tracing-subscriber's writer factory: access lines to the batch, the
/// rest straight out.
struct MakeSink;

/// One formatted line (tracing-subscriber writes each event with a single
/// `write_all`).
struct SinkWriter {
    batched: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for MakeSink {
    type Writer = SinkWriter;

    fn make_writer(&'a self) -> SinkWriter {
        SinkWriter { batched: false }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> SinkWriter {
        SinkWriter {
            batched: meta.target() == "chatgate::access",
        }
    }
}

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let sink = sink();
        if self.batched {
            sink.batch(buf);
        } else {
            sink.flush_with(&mut Vec::new(), buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

const ACCESS_OFF: u8 = 0;
const ACCESS_TEXT: u8 = 1;
const ACCESS_JSON: u8 = 2;

/// Whether metered requests' access lines are logged, and how.
static ACCESS: AtomicU8 = AtomicU8::new(ACCESS_OFF);

thread_local! {
    /// The access line being written on this thread.
    static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Logs the access line of a metered request from its ledger record, in
/// the configured format (the same line `tracing` would write for an
/// `INFO` event of target `chatgate::access`, without its per-field
/// dispatch: this is one line per request).
pub(crate) fn access(rec: &LedgerRecord) {
    let mode = ACCESS.load(Ordering::Relaxed);
    if mode == ACCESS_OFF {
        return;
    }
    let json = mode == ACCESS_JSON;
    LINE.with(|line| {
        let mut line = line.borrow_mut();
        line.clear();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let (secs, micros) = (now.as_secs(), now.subsec_micros());
        if json {
            line.extend_from_slice(b"{\"timestamp\":\"");
            push_second(&mut line, secs);
            push_fraction(&mut line, micros, 6);
            line.extend_from_slice(b"Z\",\"level\":\"INFO\",\"fields\":{");
            rec.access_fields(&mut line, true);
            line.extend_from_slice(b"},\"target\":\"chatgate::access\"}\n");
        } else {
            push_second(&mut line, secs);
            push_fraction(&mut line, micros / 1000, 3);
            line.extend_from_slice(b"Z  INFO chatgate::access: ");
            rec.access_fields(&mut line, false);
            line.push(b'\n');
        }
        sink().batch(&line);
    });
}

/// `YYYY-MM-DDTHH:MM:SS` of `secs`, formatted once per second per thread.
fn with_second<T>(secs: u64, f: impl FnOnce(&str) -> T) -> T {
    SECOND.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            let stamp = chatgate_core::rfc3339_ms(secs * 1000);
            cached.1 = stamp[..19].to_owned();
            cached.0 = secs;
        }
        f(&cached.1)
    })
}

fn push_second(out: &mut Vec<u8>, secs: u64) {
    with_second(secs, |s| out.extend_from_slice(s.as_bytes()));
}

/// `.` and `value` as exactly `digits` decimal digits.
fn push_fraction(out: &mut Vec<u8>, value: u32, digits: u32) {
    out.push(b'.');
    let mut div = 10u32.pow(digits - 1);
    while div > 0 {
        out.push(b'0' + (value / div % 10) as u8);
        div /= 10;
    }
}

/// The text line format.
struct TextFormat;

thread_local! {
    /// (Unix second, "YYYY-MM-DDTHH:MM:SS") of the last line on this thread.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

impl<S, N> FormatEvent<S, N> for TextFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let (secs, millis) = (now.as_secs(), now.subsec_millis());
        with_second(secs, |s| w.write_str(s))?;
        let meta = event.metadata();
        // `.mmmZ LEVEL target: `, the level right-aligned in five columns,
        // written without `core::fmt` (its padding and arguments cost more
        // than the line).
        let ms = [
            b'.',
            b'0' + (millis / 100) as u8,
            b'0' + (millis / 10 % 10) as u8,
            b'0' + (millis % 10) as u8,
            b'Z',
            b' ',
        ];
        // ASCII digits and punctuation.
        w.write_str(std::str::from_utf8(&ms).unwrap_or(".000Z "))?;
        let level = meta.level().as_str();
        w.write_str(&"     "[level.len().min(5)..])?;
        w.write_str(level)?;
        w.write_char(' ')?;
        w.write_str(meta.target())?;
        w.write_str(": ")?;
        let mut visitor = Fields {
            w: &mut w,
            result: Ok(()),
        };
        event.record(&mut visitor);
        visitor.result?;
        w.write_char('\n')
    }
}

/// Writes `message` first as it is, then ` name=value` for every field.
struct Fields<'a, 'b> {
    w: &'a mut Writer<'b>,
    result: fmt::Result,
}

impl Fields<'_, '_> {
    fn field(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        self.result = if field.name() == "message" {
            value(self.w)
        } else {
            self.w
                .write_char(' ')
                .and_then(|()| self.w.write_str(field.name()))
                .and_then(|()| self.w.write_char('='))
                .and_then(|()| value(self.w))
        };
    }
}

impl Visit for Fields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field, |w| w.write_str(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(field, |w| {
            let mut digits = [0u8; 20];
            let mut i = digits.len();
            let mut v = value;
            loop {
                i -= 1;
                digits[i] = b'0' + (v % 10) as u8;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            // Decimal digits are ASCII.
            w.write_str(std::str::from_utf8(&digits[i..]).unwrap_or("?"))
        });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.field(field, |w| write!(w, "{value}"));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.field(field, |w| w.write_str(if value { "true" } else { "false" }));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.field(field, |w| write!(w, "{value:?}"));
    }
}
