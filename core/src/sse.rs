//! Server-sent events, framed incrementally and forwarded byte for byte.
//!
//! [`SseFramer`] finds where each event ends (a blank line) in a buffer the
//! caller owns and appends to. It hands back the event as a byte range of
//! that buffer, so the gateway forwards exactly the bytes the provider sent:
//! comments, unknown fields and whatever line endings it used included.
//!
//! Line endings are CRLF, LF or a lone CR, as the SSE grammar allows. A CRLF
//! split across two reads is one line ending, not two: a CR at the end of the
//! data seen so far sets `pending_cr`, and an LF that follows is absorbed.
//! A UTF-8 byte order mark at the very start is skipped for framing even if
//! it arrives split (it stays in the first event's bytes). Every byte is
//! examined once, so an 8 MB event fed one byte at a time costs 8 MB of
//! scanning, not 8 MB × reads.

use std::ops::Range;

const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// An event grew past the configured cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SseError {
    /// The event (complete or not) is larger than `limit` bytes.
    EventTooLarge {
        /// The cap.
        limit: usize,
    },
}

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SseError::EventTooLarge { limit } => {
                write!(f, "a server-sent event is larger than {limit} bytes")
            }
        }
    }
}

impl std::error::Error for SseError {}

/// Incremental SSE event framer over a caller-owned, append-only buffer.
///
/// The driving pattern:
///
/// ```
/// use chatgate_core::SseFramer;
/// let mut buf = Vec::new();
/// let mut framer = SseFramer::new(1 << 20);
/// let mut events = Vec::new();
/// for read in [&b"data: a\n"[..], b"\ndata: b\r", b"\n\r\n: tail"] {
///     buf.extend_from_slice(read);
///     while let Some(range) = framer.next_event(&buf).unwrap() {
///         events.push(buf[range].to_vec());
///     }
///     // Forwarded bytes may be dropped from the front of the buffer.
///     let done = framer.complete_prefix();
///     buf.drain(..done);
///     framer.consume(done);
/// }
/// assert_eq!(events, [&b"data: a\n\n"[..], b"data: b\r\n\r\n"]);
/// assert_eq!(buf, b": tail");
/// ```
#[derive(Debug, Clone)]
pub struct SseFramer {
    max_event: usize,
    /// Bytes of the buffer examined so far.
    scanned: usize,
    /// Start of the event being assembled.
    event_start: usize,
    /// The last line terminator seen ended an empty line... or the stream just
    /// started: the next terminator ends an event.
    at_line_start: bool,
    /// The last byte examined was a CR; an LF right after it is part of it.
    pending_cr: bool,
    /// That CR also ended an event, which is emitted once the next byte shows
    /// whether an LF belongs to it.
    complete_pending: bool,
    /// Bytes of the BOM matched so far; `None` once decided.
    bom_matched: Option<usize>,
}

impl SseFramer {
    /// A framer for a new stream; events over `max_event` bytes are an error.
    pub fn new(max_event: usize) -> Self {
        SseFramer {
            max_event,
            scanned: 0,
            event_start: 0,
            at_line_start: true,
            pending_cr: false,
            complete_pending: false,
            bom_matched: Some(0),
        }
    }

    /// Returns the byte range of the next complete event in `buf`, if one has
    /// arrived. `buf` must hold the same bytes as at the previous call, plus
    /// whatever arrived since, minus what [`SseFramer::consume`] removed.
    ///
    /// An event whose blank line ends in a CR that is the last byte received
    /// so far waits for the next byte (an LF would belong to it) or for
    /// [`SseFramer::finish`]; that keeps the ranges identical however the
    /// bytes are split.
    pub fn next_event(&mut self, buf: &[u8]) -> Result<Option<Range<usize>>, SseError> {
        if self.bom_matched.is_some() && !self.skip_bom(buf) {
            return Ok(None);
        }
        while self.scanned < buf.len() {
            if self.pending_cr {
                self.pending_cr = false;
                if buf[self.scanned] == b'\n' {
                    self.scanned += 1;
                }
                if self.complete_pending {
                    self.complete_pending = false;
                    return self.emit().map(Some);
                }
                continue;
            }
            let Some(off) = memchr::memchr2(b'\r', b'\n', &buf[self.scanned..]) else {
                self.at_line_start = false;
                self.scanned = buf.len();
                break;
            };
            if off > 0 {
                self.at_line_start = false;
            }
            let at = self.scanned + off;
            self.scanned = at + 1;
            let ends_event = self.at_line_start;
            self.at_line_start = true;
            if buf[at] == b'\r' {
                if self.scanned == buf.len() {
                    self.pending_cr = true;
                    self.complete_pending = ends_event;
                    break;
                }
                if buf[self.scanned] == b'\n' {
                    self.scanned += 1;
                }
            }
            if ends_event {
                return self.emit().map(Some);
            }
        }
        if buf.len() - self.event_start > self.max_event {
            return Err(SseError::EventTooLarge {
                limit: self.max_event,
            });
        }
        Ok(None)
    }

    /// The stream ended: returns an event that was complete but waiting to
    /// see whether an LF followed its final CR. An unterminated event is
    /// dropped, as the SSE processing model says.
    pub fn finish(&mut self) -> Result<Option<Range<usize>>, SseError> {
        self.pending_cr = false;
        if std::mem::take(&mut self.complete_pending) {
            return self.emit().map(Some);
        }
        Ok(None)
    }

    /// Decides whether the stream opens with a BOM; false while the bytes so
    /// far are a BOM prefix and nothing else.
    fn skip_bom(&mut self, buf: &[u8]) -> bool {
        let Some(matched) = self.bom_matched else {
            return true;
        };
        let mut m = matched;
        while m < BOM.len() && self.scanned < buf.len() && buf[self.scanned] == BOM[m] {
            m += 1;
            self.scanned += 1;
        }
        if m < BOM.len() && self.scanned == buf.len() {
            self.bom_matched = Some(m);
            return false;
        }
        // Either a whole BOM (skipped), or its first bytes were content.
        if m < BOM.len() && m > 0 {
            self.at_line_start = false;
        }
        self.bom_matched = None;
        true
    }

    fn emit(&mut self) -> Result<Range<usize>, SseError> {
        let range = self.event_start..self.scanned;
        if range.len() > self.max_event {
            return Err(SseError::EventTooLarge {
                limit: self.max_event,
            });
        }
        self.event_start = self.scanned;
        self.at_line_start = true;
        Ok(range)
    }

    /// Length of the prefix of the buffer made of complete events: what has
    /// been handed out and may be dropped.
    pub fn complete_prefix(&self) -> usize {
        self.event_start
    }

    /// Bytes of the buffer that belong to an event not yet complete.
    pub fn partial_len(&self, buf_len: usize) -> usize {
        buf_len.saturating_sub(self.event_start)
    }

    /// The caller removed the first `n` bytes from the buffer (`n` must not
    /// exceed [`SseFramer::complete_prefix`]).
    pub fn consume(&mut self, n: usize) {
        assert!(
            n <= self.event_start,
            "consumed bytes of an incomplete event"
        );
        self.event_start -= n;
        self.scanned -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Frames `input` delivered in the given pieces; returns the events and
    /// the error if any, dropping consumed bytes as a runtime would.
    fn frame(pieces: &[&[u8]], max: usize) -> (Vec<Vec<u8>>, Option<SseError>, Vec<u8>) {
        let mut f = SseFramer::new(max);
        let mut buf = Vec::new();
        let mut events = Vec::new();
        for p in pieces {
            buf.extend_from_slice(p);
            loop {
                match f.next_event(&buf) {
                    Ok(Some(r)) => events.push(buf[r].to_vec()),
                    Ok(None) => break,
                    Err(e) => return (events, Some(e), buf),
                }
            }
            let n = f.complete_prefix();
            buf.drain(..n);
            f.consume(n);
        }
        match f.finish() {
            Ok(Some(r)) => {
                events.push(buf[r.clone()].to_vec());
                buf.drain(..r.end);
            }
            Ok(None) => {}
            Err(e) => return (events, Some(e), buf),
        }
        (events, None, buf)
    }

    fn whole(input: &[u8], max: usize) -> (Vec<Vec<u8>>, Option<SseError>) {
        let (e, err, _) = frame(&[input], max);
        (e, err)
    }

    fn bytewise(input: &[u8], max: usize) -> (Vec<Vec<u8>>, Option<SseError>) {
        let pieces: Vec<&[u8]> = input.chunks(1).collect();
        let (e, err, _) = frame(&pieces, max);
        (e, err)
    }

    #[test]
    fn lf_crlf_and_cr_endings() {
        let input = b"data: a\n\ndata: b\r\n\r\ndata: c\r\rdata: d\ndata: e\n\n";
        let (events, err) = whole(input, 1024);
        assert_eq!(err, None);
        assert_eq!(
            events,
            [
                &b"data: a\n\n"[..],
                b"data: b\r\n\r\n",
                b"data: c\r\r",
                b"data: d\ndata: e\n\n"
            ]
        );
        assert_eq!(bytewise(input, 1024), (events, None));
    }

    #[test]
    fn crlf_split_across_reads_is_one_ending() {
        // "data: x\r" | "\n" | "data: y\r\n\r\n": the LF belongs to the CR, so
        // there is no blank line after "data: x" and one event results.
        let (events, err, _) = frame(&[b"data: x\r", b"\n", b"data: y\r\n\r\n"], 1024);
        assert_eq!(err, None);
        assert_eq!(events, [&b"data: x\r\ndata: y\r\n\r\n"[..]]);
    }

    #[test]
    fn blank_line_ending_in_cr_waits_for_the_next_byte() {
        // Split right after the final CR: the event waits to see whether an LF
        // follows, so the ranges equal those of the unsplit input.
        let (events, err, rest) = frame(&[b"data: x\r\n\r", b"\ndata: y\n\n"], 1024);
        assert_eq!(err, None);
        assert_eq!(events, [&b"data: x\r\n\r\n"[..], b"data: y\n\n"]);
        assert!(rest.is_empty());
        // A CR-only stream: the last event is released by the next byte or EOF.
        let mut f = SseFramer::new(1024);
        let buf = b"data: z\r\r";
        assert_eq!(f.next_event(buf), Ok(None));
        assert_eq!(f.finish(), Ok(Some(0..buf.len())));
        let mut f = SseFramer::new(1024);
        assert_eq!(f.next_event(b"data: z\r\rd"), Ok(Some(0..9)));
    }

    #[test]
    fn comments_and_unknown_fields_pass() {
        let input = b": keep-alive\n\nevent: ping\nid: 7\nretry: 10\n\n";
        let (events, _) = whole(input, 1024);
        assert_eq!(events.concat(), input);
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn bom_is_skipped_even_when_split() {
        let input = b"\xEF\xBB\xBF\ndata: a\n\n";
        // The BOM is not content: the LF after it ends the (empty) first line,
        // so it is a blank line that completes an empty event.
        let (events, err) = whole(input, 1024);
        assert_eq!(err, None);
        assert_eq!(events, [&b"\xEF\xBB\xBF\n"[..], b"data: a\n\n"]);
        assert_eq!(bytewise(input, 1024), (events, None));
        // A partial BOM followed by other bytes is content.
        let input = b"\xEF\xBBx\n\n";
        assert_eq!(whole(input, 1024).0, [&input[..]]);
        assert_eq!(bytewise(input, 1024).0, [&input[..]]);
    }

    #[test]
    fn cap_applies_to_partial_and_complete_events() {
        let input = b"data: 0123456789\n\n";
        assert_eq!(whole(input, 18).1, None);
        assert_eq!(
            whole(input, 17).1,
            Some(SseError::EventTooLarge { limit: 17 })
        );
        assert_eq!(
            bytewise(input, 17).1,
            Some(SseError::EventTooLarge { limit: 17 })
        );
        // Events before the oversized one are still delivered.
        let input = b"data: a\n\ndata: 0123456789\n\n";
        let (events, err) = bytewise(input, 12);
        assert_eq!(events, [&b"data: a\n\n"[..]]);
        assert!(err.is_some());
    }

    #[test]
    fn long_event_dribbled_is_linear() {
        // 4 MB fed a byte at a time: quadratic rescanning would take minutes.
        let mut input = b"data: ".to_vec();
        input.resize(4 << 20, b'x');
        input.extend_from_slice(b"\n\n");
        let mut f = SseFramer::new(8 << 20);
        let mut found = None;
        for n in 1..=input.len() {
            if let Some(r) = f.next_event(&input[..n]).unwrap() {
                found = Some(r);
            }
        }
        assert_eq!(found, Some(0..input.len()));
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_events(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just(&b"data: {\"x\":1}"[..]), Just(&b"\n"[..]), Just(&b"\r"[..]),
                    Just(&b"\r\n"[..]), Just(&b": c"[..]), Just(&b"data: [DONE]"[..]),
                    Just(&b"\xEF\xBB\xBF"[..]), Just(&b"event: e"[..]),
                ],
                0..40,
            ),
            cuts in proptest::collection::vec(0usize..400, 0..8),
            max in 8usize..64,
        ) {
            let input: Vec<u8> = parts.concat();
            let (want_events, want_err) = whole(&input, max);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(input.len())).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut last = 0;
            for c in cuts { pieces.push(&input[last..c]); last = c; }
            pieces.push(&input[last..]);
            let (events, err, rest) = frame(&pieces, max);
            prop_assert_eq!(&events, &want_events);
            prop_assert_eq!(err, want_err);
            if err.is_none() {
                // Forwarded events plus the unfinished tail are the input.
                let mut again = events.concat();
                again.extend_from_slice(&rest);
                prop_assert_eq!(again, input);
            }
        }
    }
}
