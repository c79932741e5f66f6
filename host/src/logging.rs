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

use std::cell::RefCell;
use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Sets up logging to stderr at `level`, as text or JSON lines.
pub fn init_logging(level: &str, json: bool) {
    let level: tracing::Level = level.parse().unwrap_or(tracing::Level::INFO);
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.event_format(TextFormat).try_init()
    };
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
        SECOND.with(|cell| {
            let mut cached = cell.borrow_mut();
            if cached.0 != secs {
                let stamp = chatgate_core::time::rfc3339_ms(secs * 1000);
                cached.1 = stamp[..19].to_owned();
                cached.0 = secs;
            }
            w.write_str(&cached.1)
        })?;
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
