//! What a streamed completion says about itself, event by event.
//!
//! [`StreamTracker`] looks at each complete event (as framed by
//! [`crate::sse::SseFramer`]) and keeps what the gateway must know: whether
//! `[DONE]` arrived, the `finish_reason`, the last `usage` object and any error
//! event. It never changes the bytes. JSON is parsed only for events that can
//! carry one of those: a cheap scan for `"finish_reason":"`, `"usage":{` and
//! `"error":` (unescaped quotes cannot occur inside JSON strings, so content
//! that merely mentions these words does not trigger a parse). The usual
//! `"finish_reason":null` and `"usage":null` of every OpenAI chunk are skipped
//! by the same scan.

use std::borrow::Cow;
use std::sync::LazyLock;

use memchr::memmem::Finder;

use crate::usage::{Probe, Usage};

/// The bytes the gateway appends when a stream ends without `[DONE]`.
pub const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";

static FINISH_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"finish_reason\""));
static USAGE_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\""));
static ERROR_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"error\""));

/// What one event was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// No data: a comment, a blank event, or only other fields.
    NoData,
    /// A data event (a chunk).
    Data,
    /// `data: [DONE]`.
    Done,
    /// An error event (`event: error`, or data with an `error` member).
    Error,
}

/// Follows one streamed completion.
#[derive(Debug, Clone, Default)]
pub struct StreamTracker {
    seen_event: bool,
    done: bool,
    data_events: u64,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    error: Option<String>,
}

impl StreamTracker {
    /// A tracker for a new stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records what the event (its exact bytes, blank line included) says.
    pub fn observe(&mut self, event: &[u8]) -> EventKind {
        let mut event = event;
        if !self.seen_event {
            self.seen_event = true;
            event = event.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(event);
        }
        let parsed = ParsedEvent::parse(event);
        let Some(data) = parsed.data else {
            return if parsed.is_error_type {
                self.error.get_or_insert_with(|| "error event".into());
                EventKind::Error
            } else {
                EventKind::NoData
            };
        };
        self.data_events += 1;
        if data.trim_ascii() == b"[DONE]" {
            self.done = true;
            return EventKind::Done;
        }
        let wants_parse = parsed.is_error_type
            || key_followed_by(&FINISH_KEY, &data, |b| b == b'"')
            || key_followed_by(&USAGE_KEY, &data, |b| b == b'{')
            || key_followed_by(&ERROR_KEY, &data, |b| b == b'{' || b == b'"');
        if !wants_parse {
            return EventKind::Data;
        }
        let Ok(mut probe) = serde_json::from_slice::<Probe<'_>>(&data) else {
            if parsed.is_error_type {
                self.error.get_or_insert_with(|| "error event".into());
                return EventKind::Error;
            }
            return EventKind::Data;
        };
        if let Some(reason) = probe.finish_reason() {
            self.finish_reason = Some(reason);
        }
        if let Some(usage) = probe.usage() {
            self.usage = Some(usage);
        }
        match probe.error.filter(|e| e.get() != "null") {
            Some(e) => {
                let e: serde_json::Value = serde_json::from_str(e.get()).unwrap_or_default();
                self.error = Some(error_message(&e));
                EventKind::Error
            }
            _ if parsed.is_error_type => {
                self.error.get_or_insert_with(|| "error event".into());
                EventKind::Error
            }
            _ => EventKind::Data,
        }
    }

    /// `[DONE]` has been seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The stream carried a `finish_reason`: the completion is complete.
    pub fn is_complete(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// The last `finish_reason` seen.
    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    /// The last `usage` object seen: what is metered.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The message of the last error event.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Data events seen, `[DONE]` included.
    pub fn data_events(&self) -> u64 {
        self.data_events
    }
}

/// The fields of one event the tracker cares about.
struct ParsedEvent<'a> {
    data: Option<Cow<'a, [u8]>>,
    is_error_type: bool,
}

impl<'a> ParsedEvent<'a> {
    fn parse(event: &'a [u8]) -> Self {
        let mut data: Option<Cow<'a, [u8]>> = None;
        let mut is_error_type = false;
        for line in lines(event) {
            if line.is_empty() || line[0] == b':' {
                continue;
            }
            let (name, value) = match memchr::memchr(b':', line) {
                Some(i) => {
                    let v = &line[i + 1..];
                    (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
                }
                None => (line, &b""[..]),
            };
            match name {
                b"data" => {
                    data = Some(match data {
                        None => Cow::Borrowed(value),
                        Some(prev) => {
                            let mut joined = prev.into_owned();
                            joined.push(b'\n');
                            joined.extend_from_slice(value);
                            Cow::Owned(joined)
                        }
                    });
                }
                b"event" => is_error_type = value == b"error",
                _ => {}
            }
        }
        ParsedEvent {
            data,
            is_error_type,
        }
    }
}

/// Splits at CRLF, LF or CR.
fn lines(mut s: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if s.is_empty() {
            return None;
        }
        match memchr::memchr2(b'\r', b'\n', s) {
            Some(i) => {
                let line = &s[..i];
                let skip = if s[i] == b'\r' && s.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                s = &s[i + skip..];
                Some(line)
            }
            None => {
                let line = s;
                s = &[];
                Some(line)
            }
        }
    })
}

/// True when `key` occurs followed by optional whitespace, `:`, optional
/// whitespace and a byte accepted by `value_starts`.
fn key_followed_by(key: &Finder<'_>, data: &[u8], value_starts: impl Fn(u8) -> bool) -> bool {
    key.find_iter(data).any(|pos| {
        let rest = data[pos + key.needle().len()..].trim_ascii_start();
        match rest.split_first() {
            Some((b':', rest)) => rest
                .trim_ascii_start()
                .first()
                .is_some_and(|&b| value_starts(b)),
            _ => false,
        }
    })
}

fn error_message(e: &serde_json::Value) -> String {
    let msg = match e {
        serde_json::Value::String(s) => s.as_str(),
        serde_json::Value::Object(o) => o.get("message").and_then(|m| m.as_str()).unwrap_or(""),
        _ => "",
    };
    if msg.is_empty() {
        "error event".into()
    } else {
        msg.chars().take(500).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::SseFramer;
    use proptest::prelude::*;

    const STREAM: &[u8] = b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"Hmm \\\"usage\\\": {\"},\"finish_reason\":null}],\"usage\":null}\n\n\
: keep-alive\n\n\
data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n\
data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12,\"completion_tokens_details\":{\"reasoning_tokens\":3}}}\n\n\
data: [DONE]\n\n";

    fn track(pieces: &[&[u8]]) -> (Vec<EventKind>, StreamTracker) {
        let mut framer = SseFramer::new(1 << 20);
        let mut tracker = StreamTracker::new();
        let mut buf = Vec::new();
        let mut kinds = Vec::new();
        for p in pieces {
            buf.extend_from_slice(p);
            while let Some(r) = framer.next_event(&buf).unwrap() {
                kinds.push(tracker.observe(&buf[r]));
            }
        }
        if let Some(r) = framer.finish().unwrap() {
            kinds.push(tracker.observe(&buf[r]));
        }
        (kinds, tracker)
    }

    #[test]
    fn follows_a_reasoning_stream() {
        let (kinds, t) = track(&[STREAM]);
        use EventKind::*;
        assert_eq!(kinds, [Data, NoData, Data, Data, Data, Done]);
        assert!(t.is_done() && t.is_complete());
        assert_eq!(t.finish_reason(), Some("stop"));
        let u = t.usage().unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.reasoning_tokens),
            (5, 7, 3)
        );
        assert_eq!(t.error(), None);
    }

    #[test]
    fn byte_by_byte_is_identical() {
        let (want, wt) = track(&[STREAM]);
        let pieces: Vec<&[u8]> = STREAM.chunks(1).collect();
        let (got, gt) = track(&pieces);
        assert_eq!(got, want);
        assert_eq!(
            (gt.usage(), gt.finish_reason()),
            (wt.usage(), wt.finish_reason())
        );
    }

    #[test]
    fn keeps_the_last_usage_and_ignores_null() {
        let s = b"data: {\"usage\":{\"prompt_tokens\":1}}\n\ndata: {\"usage\":{\"prompt_tokens\":2}}\n\ndata: {\"usage\":null}\n\n";
        let (_, t) = track(&[s]);
        assert_eq!(t.usage().unwrap().prompt_tokens, 2);
    }

    #[test]
    fn error_events() {
        let (kinds, t) =
            track(&[b"data: {\"error\":{\"message\":\"overloaded\",\"type\":\"x\"}}\n\n"]);
        assert_eq!(kinds, [EventKind::Error]);
        assert_eq!(t.error(), Some("overloaded"));
        let (kinds, _) = track(&[b"event: error\ndata: oops\n\n"]);
        assert_eq!(kinds, [EventKind::Error]);
        // The word inside content is not an error.
        let (kinds, t) =
            track(&[b"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"error\\\": 1\"}}]}\n\n"]);
        assert_eq!(kinds, [EventKind::Data]);
        assert_eq!(t.error(), None);
    }

    #[test]
    fn multi_line_data_and_crlf_and_bom() {
        let s = b"\xEF\xBB\xBFdata: {\"choices\":[{\"finish_reason\":\r\ndata: \"length\"}]}\r\n\r\ndata:[DONE]\r\r";
        let (kinds, t) = track(&[s]);
        assert_eq!(kinds, [EventKind::Data, EventKind::Done]);
        assert_eq!(t.finish_reason(), Some("length"));
    }

    #[test]
    fn unparsable_json_is_forwarded_not_metered() {
        let (kinds, t) = track(&[b"data: {\"usage\":{\"prompt_tokens\":\n\n"]);
        assert_eq!(kinds, [EventKind::Data]);
        assert_eq!(t.usage(), None);
    }

    proptest! {
        #[test]
        fn random_splits_agree(cuts in proptest::collection::vec(0usize..STREAM.len(), 0..10)) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut last = 0;
            for c in cuts { pieces.push(&STREAM[last..c]); last = c; }
            pieces.push(&STREAM[last..]);
            let (want, wt) = track(&[STREAM]);
            let (got, gt) = track(&pieces);
            prop_assert_eq!(got, want);
            prop_assert_eq!(gt.usage(), wt.usage());
        }
    }
}
