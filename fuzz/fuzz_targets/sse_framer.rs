//! `SseFramer`: the same events and error however the input is split; no
//! byte lost or added; every range inside the buffer and contiguous.
#![no_main]

use chatgate_core::{SseError, SseFramer};
use chatgate_core::StreamTracker;
use chatgate_fuzz::{bytewise, split};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, PartialEq, Eq)]
struct Framed {
    events: Vec<Vec<u8>>,
    error: Option<SseError>,
    /// Bytes not part of any event (meaningful without an error).
    tail: Vec<u8>,
}

/// Frames `pieces` as a runtime does; with `drain`, forwarded bytes are
/// dropped from the buffer after every read.
fn frame(pieces: &[&[u8]], max: usize, drain: bool) -> Framed {
    let mut framer = SseFramer::new(max);
    let mut buf: Vec<u8> = Vec::new();
    let mut events = Vec::new();
    // Where the next event must start.
    let mut start = 0;
    let mut take = |r: std::ops::Range<usize>, buf: &[u8], start: &mut usize| {
        assert_eq!(r.start, *start, "events are contiguous");
        assert!(
            r.start < r.end && r.end <= buf.len(),
            "{r:?} in {}",
            buf.len()
        );
        assert!(r.len() <= max, "event over the cap");
        assert!(
            matches!(buf[r.end - 1], b'\n' | b'\r'),
            "ends with a line ending"
        );
        *start = r.end;
        events.push(buf[r].to_vec());
    };
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match framer.next_event(&buf) {
                Ok(Some(r)) => take(r, &buf, &mut start),
                Ok(None) => break,
                Err(error) => {
                    return Framed {
                        events,
                        error: Some(error),
                        tail: Vec::new(),
                    };
                }
            }
        }
        assert_eq!(framer.complete_prefix(), start);
        assert_eq!(framer.partial_len(buf.len()), buf.len() - start);
        if drain {
            let n = framer.complete_prefix();
            buf.drain(..n);
            framer.consume(n);
            start = 0;
        }
    }
    match framer.finish() {
        Ok(Some(r)) => take(r, &buf, &mut start),
        Ok(None) => {}
        Err(error) => {
            return Framed {
                events,
                error: Some(error),
                tail: Vec::new(),
            };
        }
    }
    Framed {
        events,
        error: None,
        tail: buf[start..].to_vec(),
    }
}

fuzz_target!(|data: &[u8]| {
    // A cap large enough to rarely matter, and a small one from the input.
    let small = 1 + usize::from(data.first().copied().unwrap_or(0)) % 128;
    for max in [1 << 20, small] {
        let want = frame(&[data], max, true);
        if want.error.is_none() {
            let mut again = want.events.concat();
            again.extend_from_slice(&want.tail);
            assert_eq!(again, data, "events + tail == input");
        }
        assert_eq!(frame(&[data], max, false), want, "kept buffer");
        assert_eq!(frame(&bytewise(data), max, true), want, "byte by byte");
        let pieces = split(data);
        assert_eq!(frame(&pieces, max, true), want, "split {pieces:?}");
        assert_eq!(frame(&pieces, max, false), want, "split, kept buffer");

        // The tracker reads any event without panicking.
        let mut tracker = StreamTracker::new();
        for event in &want.events {
            tracker.observe(event);
        }
        assert!(tracker.data_events() <= want.events.len() as u64);
    }
});
