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

use crate::usage::{Probe, Usage};

/// Longest key searched for, quotes included (`"finish_reason"`).
const LONGEST_KEY: usize = 15;
/// How much of the previous event is remembered for prefix skipping.
const PREFIX_MEMORY: usize = 512;

/// The bytes the gateway appends when a stream ends without `[DONE]`.
pub(crate) const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";

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
    /// The previous data payload (at most [`PREFIX_MEMORY`] bytes; longer
    /// ones are truncated), a lower bound on where its first key occurrence
    /// began, and whether it carried news: consecutive chunks share a long
    /// prefix and a long suffix, which need not be scanned again.
    prev: Vec<u8>,
    prev_truncated: bool,
    prev_first_key: usize,
    prev_news: bool,
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
        self.observe_data(event).0
    }

    /// [`StreamTracker::observe`], and the event's data as the tracker read
    /// it (`None`: no data field), for a reader that needs it too (another
    /// API's translator) without parsing the event again.
    #[inline(always)]
    pub fn observe_data<'a>(&mut self, event: &'a [u8]) -> (EventKind, Option<Cow<'a, [u8]>>) {
        let mut event = event;
        if !self.seen_event {
            self.seen_event = true;
            event = event.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(event);
        }
        let parsed = ParsedEvent::parse(event);
        let Some(data) = parsed.data else {
            return if parsed.is_error_type {
                self.error.get_or_insert_with(|| "error event".into());
                (EventKind::Error, None)
            } else {
                (EventKind::NoData, None)
            };
        };
        self.data_events += 1;
        if data.len() <= 16 && data.trim_ascii() == b"[DONE]" {
            self.done = true;
            return (EventKind::Done, Some(data));
        }
        let news = self.scan_for_news(&data);
        let wants_parse = parsed.is_error_type || news;
        if !wants_parse {
            return (EventKind::Data, Some(data));
        }
        let Some(probe) = Probe::read(&data) else {
            if parsed.is_error_type {
                self.error.get_or_insert_with(|| "error event".into());
                return (EventKind::Error, Some(data));
            }
            return (EventKind::Data, Some(data));
        };
        if let Some(reason) = probe.finish_reason {
            self.finish_reason = Some(reason);
        }
        if let Some(usage) = probe.usage {
            self.usage = Some(usage);
        }
        let kind = match probe.error.filter(|e| *e != "null") {
            Some(e) => {
                let e: serde_json::Value = serde_json::from_str(e).unwrap_or_default();
                self.error = Some(error_message(&e));
                EventKind::Error
            }
            _ if parsed.is_error_type => {
                self.error.get_or_insert_with(|| "error event".into());
                EventKind::Error
            }
            _ => EventKind::Data,
        };
        (kind, Some(data))
    }

    /// Whether a data payload may carry a finish reason, usage or an error
    /// (see the module docs), scanning only what differs from the previous
    /// payload's prefix.
    fn scan_for_news(&mut self, data: &[u8]) -> bool {
        let n = data.len();
        // The prefix. A key occurrence starting before `skip` would lie
        // entirely inside the prefix this payload shares with the previous
        // one (skip <= common - LONGEST_KEY + 1) and would have been seen in
        // the previous payload before its first occurrence
        // (skip <= prev_first_key): impossible.
        let common = common_prefix(&self.prev, data);
        let skip = (common + 1)
            .saturating_sub(LONGEST_KEY)
            .min(self.prev_first_key)
            .min(n);
        // The suffix. When the previous payload carried no news, a key
        // starting inside the suffix both share is followed by the same
        // bytes as there (its value is inside the suffix too), so it carries
        // no news either: only occurrences starting before `end` matter.
        let end = if self.prev_news || self.prev_truncated {
            n
        } else {
            let shared = common_suffix(&self.prev, data);
            n.saturating_sub(shared).max(skip)
        };
        let (news, first) = scan_keys(data, skip, end);
        self.prev.clear();
        self.prev.extend_from_slice(&data[..n.min(PREFIX_MEMORY)]);
        self.prev_truncated = n > PREFIX_MEMORY;
        // No key starts before `skip`, none was found in [skip, end): `end`
        // is a safe lower bound when nothing was found.
        self.prev_first_key = first.unwrap_or(end);
        self.prev_news = news;
        news
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
    // Inlined into the tracker's reading of every chat event (whose data a
    // translator then takes from it): outlined, it cost the tracker about
    // 3k instructions per 100-event stream.
    #[inline(always)]
    fn parse(event: &'a [u8]) -> Self {
        // The usual event is one `data:` line and its blank line.
        if let Some(rest) = event.strip_prefix(b"data:")
            && let Some(end) = memchr::memchr2(b'\r', b'\n', rest)
            && rest[end..].iter().all(|&b| b == b'\r' || b == b'\n')
        {
            let value = &rest[..end];
            return ParsedEvent {
                data: Some(Cow::Borrowed(value.strip_prefix(b" ").unwrap_or(value))),
                is_error_type: false,
            };
        }
        Self::parse_lines(event)
    }

    fn parse_lines(event: &'a [u8]) -> Self {
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

/// Looks at every `"` in `from..until` that starts `"finish_reason"`,
/// `"usage"` or `"error"` (reading past `until` as needed): whether one is
/// followed by optional whitespace, `:`, optional whitespace and a string
/// (finish reason), an object (usage) or an object or string (error); and
/// where the first of them starts. One pass over the quote characters: on
/// short payloads much cheaper than three substring searches, and it finds
/// exactly what they find.
fn scan_keys(data: &[u8], from: usize, until: usize) -> (bool, Option<usize>) {
    let mut first = None;
    for q in memchr::memchr_iter(b'"', &data[from..until.max(from)]) {
        let at = from + q;
        let rest = &data[at + 1..];
        let (len, wanted): (usize, &[u8]) = match rest.first() {
            Some(b'f') if rest.starts_with(b"finish_reason\"") => (14, b"\""),
            Some(b'u') if rest.starts_with(b"usage\"") => (6, b"{"),
            Some(b'e') if rest.starts_with(b"error\"") => (6, b"{\""),
            _ => continue,
        };
        first.get_or_insert(at);
        if let Some((b':', value)) = rest[len..].trim_ascii_start().split_first()
            && value
                .trim_ascii_start()
                .first()
                .is_some_and(|b| wanted.contains(b))
        {
            return (true, first);
        }
    }
    (false, first)
}

/// Length of the common suffix of two byte strings: sixteen bytes at a
/// time from the ends (consecutive chunks share their last fifty bytes or
/// so), the first difference found by the leading zeros of the words' xor.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut i = 0;
    while i + 16 <= n {
        let at = n - i - 16;
        if a[at..at + 16] != b[at..at + 16] {
            // Little-endian: a word's last byte is its most significant.
            let high = word(a, at + 8) ^ word(b, at + 8);
            if high != 0 {
                return i + (high.leading_zeros() / 8) as usize;
            }
            let low = word(a, at) ^ word(b, at);
            return i + 8 + (low.leading_zeros() / 8) as usize;
        }
        i += 16;
    }
    while i < n && a[n - 1 - i] == b[n - 1 - i] {
        i += 1;
    }
    i
}

/// Length of the common prefix of two byte strings: sixteen bytes at a
/// time, the first difference found by the trailing zeros of the words'
/// xor.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut i = 0;
    while i + 16 <= n {
        if a[i..i + 16] != b[i..i + 16] {
            // Little-endian: a word's first byte is its least significant.
            let low = word(a, i) ^ word(b, i);
            if low != 0 {
                return i + (low.trailing_zeros() / 8) as usize;
            }
            let high = word(a, i + 8) ^ word(b, i + 8);
            return i + 8 + (high.trailing_zeros() / 8) as usize;
        }
        i += 16;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// The eight bytes of `s` at `at`, as a little-endian word.
#[inline(always)]
fn word(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or_default())
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

    #[test]
    fn prefix_skipping_changes_nothing() {
        // Payloads sharing long prefixes, with keys just around the shared
        // part: a tracker that remembers agrees with a fresh full scan.
        let base = r#"{"id":"abcdefghij","choices":[{"delta":{"content":"X"},"finish_reason":null}],"usage":null}"#;
        let payloads = [
            base.to_owned(),
            base.replace("\"X\"", "\"Y\""),
            base.replace("null}],\"usage\":null", "\"stop\"}],\"usage\":null"),
            base.to_owned(),
            base.replace("\"usage\":null", "\"usage\":{\"prompt_tokens\":9}"),
            base.replace("\"id\":\"abcdefghij\"", "\"error\":{\"message\":\"e\"}"),
            base.replace("\"X\"", "\"\\\"finish_reason\\\":\\\"no\\\"\""),
            base.replace("abcdefghij", "abcdefghij\",\"finish_reason\":\"early"),
        ];
        let mut remembering = StreamTracker::new();
        let mut verdicts = Vec::new();
        for p in &payloads {
            let want = StreamTracker::new().scan_for_news(p.as_bytes());
            assert_eq!(remembering.scan_for_news(p.as_bytes()), want, "{p}");
            verdicts.push(want);
        }
        assert_eq!(
            verdicts,
            [false, false, true, false, true, true, false, true]
        );
    }

    #[test]
    fn common_prefixes() {
        assert_eq!(common_prefix(b"", b"abc"), 0);
        assert_eq!(
            common_prefix(b"abcdefghijklmnopqrstuvwxyz", b"abcdefghijklmnopqrstuvwxyZ"),
            25
        );
        assert_eq!(common_prefix(b"abc", b"abc"), 3);
    }

    #[test]
    fn common_suffixes() {
        assert_eq!(common_suffix(b"", b"abc"), 0);
        assert_eq!(common_suffix(b"abc", b"abc"), 3);
        assert_eq!(common_suffix(b"xbc", b"abc"), 2);
        assert_eq!(
            common_suffix(b"Abcdefghijklmnopqrstuvwxyz", b"abcdefghijklmnopqrstuvwxyz"),
            25
        );
        assert_eq!(common_suffix(b"abcdefghijklmnopqrstuvwxyz", b"z"), 1);
    }

    proptest! {
        #[test]
        fn prefix_skipping_agrees_with_full_scans(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("\"finish_reason\":null"), Just("\"finish_reason\":\"stop\""),
                    Just("\"usage\":null"), Just("\"usage\":{}"), Just("\"error\":null"),
                    Just("\"error\":\"e\""), Just("\"x\":1"), Just("\"y\":\"finish_reason\""),
                    Just("\"pad\":\"aaaaaaaaaaaaaaaaaaaaaaaaa\""), Just("\"finish_reason\" : \"len\""),
                ],
                1..8,
            ),
            edits in proptest::collection::vec((0usize..8, 0usize..10, "[a-z\"{}:, ]{0,4}"), 1..10),
        ) {
            // A stream of payloads: rotations of the same members with a
            // random member replaced by a random fragment.
            let mut remembering = StreamTracker::new();
            for (k, which, fragment) in edits {
                let mut members: Vec<String> =
                    parts.iter().cycle().skip(k).take(parts.len()).map(|m| (*m).to_owned()).collect();
                let i = which % members.len();
                members[i] = format!("\"d\":\"{}\"", fragment.replace('"', ""));
                let p = format!("{{{}}}", members.join(","));
                let want = StreamTracker::new().scan_for_news(p.as_bytes());
                prop_assert_eq!(remembering.scan_for_news(p.as_bytes()), want, "{}", p);
            }
        }

        #[test]
        fn common_suffixes_agree_with_a_byte_scan(
            shared in proptest::collection::vec(0u8..4, 0..40),
            a in proptest::collection::vec(0u8..4, 0..20),
            b in proptest::collection::vec(0u8..4, 0..20),
        ) {
            let (a, b) = ([&a[..], &shared].concat(), [&b[..], &shared].concat());
            let want = a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count();
            prop_assert_eq!(common_suffix(&a, &b), want);
        }

        #[test]
        fn common_prefixes_agree_with_a_byte_scan(
            shared in proptest::collection::vec(0u8..4, 0..40),
            a in proptest::collection::vec(0u8..4, 0..20),
            b in proptest::collection::vec(0u8..4, 0..20),
        ) {
            let (a, b) = ([&shared[..], &a].concat(), [&shared[..], &b].concat());
            let want = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            prop_assert_eq!(common_prefix(&a, &b), want);
        }

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
