//! The console's last hour, in ten-second slots: requests, errors, the
//! most requests and streams in flight, and the gateway's overhead and time
//! to first byte as log-bucketed histograms (so a slot's p50 and p99 are
//! within an eighth of the true value, where the Prometheus buckets are
//! too coarse below a millisecond).

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

/// Seconds per slot.
pub const SLOT_SECS: u64 = 10;
/// Slots kept: one hour.
pub const SLOTS: usize = 360;

/// Buckets of a [`LogHistogram`]: 8 exact microsecond values, then four per
/// power of two up to 2^28 µs (about 4.5 minutes; longer lands in the last).
const BUCKETS: usize = 8 + 26 * 4;

/// Counts of durations in buckets a quarter of a power of two wide.
#[derive(Debug, Clone)]
pub(crate) struct LogHistogram {
    counts: Box<[u32; BUCKETS]>,
    total: u32,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram {
            counts: Box::new([0; BUCKETS]),
            total: 0,
        }
    }
}

impl LogHistogram {
    fn index(us: u64) -> usize {
        if us < 8 {
            return us as usize;
        }
        let msb = 63 - us.leading_zeros() as usize;
        if msb > 28 {
            return BUCKETS - 1;
        }
        let sub = ((us >> (msb - 2)) & 3) as usize;
        8 + (msb - 3) * 4 + sub
    }

    /// The bucket's lower bound and width, microseconds.
    fn bounds(i: usize) -> (u64, u64) {
        if i < 8 {
            return (i as u64, 1);
        }
        let msb = (i - 8) / 4 + 3;
        let sub = ((i - 8) % 4) as u64;
        let width = 1u64 << (msb - 2);
        ((1u64 << msb) + sub * width, width)
    }

    /// Records one duration.
    pub(crate) fn observe(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.counts[Self::index(us)] = self.counts[Self::index(us)].saturating_add(1);
        self.total = self.total.saturating_add(1);
    }

    /// The `q` quantile (0–1) in milliseconds: the middle of its bucket;
    /// `None` without observations.
    pub(crate) fn quantile_ms(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: p99 of 100 is the 99th.
        let rank = ((q * f64::from(self.total)).ceil() as u32).clamp(1, self.total);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (low, width) = Self::bounds(i);
                return Some((low as f64 + width as f64 / 2.0) / 1000.0);
            }
        }
        None
    }
}

/// One ten-second slot.
#[derive(Debug, Clone, Default)]
struct Slot {
    /// Unix second it starts at (a multiple of [`SLOT_SECS`]).
    start: u64,
    requests: u32,
    /// Answered with a 5xx (the gateway or the provider failed).
    errors: u32,
    in_flight: u32,
    streams: u32,
    overhead: LogHistogram,
    ttfb: LogHistogram,
}

/// One slot as the console's charts read it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Point {
    /// Unix second the slot starts at.
    pub t: u64,
    /// Requests finished per second (in the slot in progress, per second
    /// of it so far).
    pub rps: f64,
    /// Share of them answered with a 5xx, percent.
    pub error_pct: f64,
    /// Most requests in flight (admitted, not finished) at a one-second
    /// sample.
    pub in_flight: u32,
    /// Most streams open at a one-second sample.
    pub streams: u32,
    /// The gateway's own time (total minus waiting on the provider), ms.
    pub overhead_p50_ms: Option<f64>,
    /// Its 99th percentile, ms.
    pub overhead_p99_ms: Option<f64>,
    /// Time to the first response byte, ms.
    pub ttfb_p50_ms: Option<f64>,
    /// Its 99th percentile, ms.
    pub ttfb_p99_ms: Option<f64>,
}

/// The last hour of slots.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    slots: VecDeque<Slot>,
}

impl Timeline {
    /// The slot holding `unix_ms`, created when missing; `None` for a time
    /// before the newest slot's hour (a clock that went back far).
    fn slot(&mut self, unix_ms: u64) -> Option<&mut Slot> {
        let start = unix_ms / 1000 / SLOT_SECS * SLOT_SECS;
        let newest = self.slots.back().map_or(0, |s| s.start);
        if start > newest {
            self.slots.push_back(Slot {
                start,
                ..Slot::default()
            });
            let horizon = start.saturating_sub(SLOT_SECS * SLOTS as u64);
            while self.slots.front().is_some_and(|s| s.start <= horizon) {
                self.slots.pop_front();
            }
            return self.slots.back_mut();
        }
        // A request that finished a moment before another thread opened the
        // next slot: its slot, made if it was empty until now.
        if start + SLOT_SECS * SLOTS as u64 <= newest {
            return None;
        }
        let at = self.slots.partition_point(|s| s.start < start);
        if self.slots.get(at).is_none_or(|s| s.start != start) {
            self.slots.insert(
                at,
                Slot {
                    start,
                    ..Slot::default()
                },
            );
        }
        self.slots.get_mut(at)
    }

    /// A request finished at `unix_ms`.
    pub(crate) fn finished(
        &mut self,
        unix_ms: u64,
        status: u16,
        overhead: Duration,
        ttfb: Option<Duration>,
    ) {
        let Some(s) = self.slot(unix_ms) else { return };
        s.requests = s.requests.saturating_add(1);
        if status >= 500 {
            s.errors = s.errors.saturating_add(1);
        }
        s.overhead.observe(overhead);
        if let Some(t) = ttfb {
            s.ttfb.observe(t);
        }
    }

    /// The gauges sampled at `unix_ms`.
    pub(crate) fn sample(&mut self, unix_ms: u64, in_flight: u32, streams: u32) {
        let Some(s) = self.slot(unix_ms) else { return };
        s.in_flight = s.in_flight.max(in_flight);
        s.streams = s.streams.max(streams);
    }

    /// The hour before `unix_ms`, one point per slot, oldest first; slots
    /// without anything recorded are zeros.
    pub(crate) fn points(&self, unix_ms: u64) -> Vec<Point> {
        let last = unix_ms / 1000 / SLOT_SECS * SLOT_SECS;
        let first = last.saturating_sub(SLOT_SECS * (SLOTS as u64 - 1));
        let mut recorded = self.slots.iter().filter(|s| s.start >= first).peekable();
        let mut out = Vec::with_capacity(SLOTS);
        let mut t = first;
        while t <= last {
            while recorded.peek().is_some_and(|s| s.start < t) {
                recorded.next();
            }
            let slot = recorded.peek().filter(|s| s.start == t);
            // The slot in progress: per second of it so far, so the live
            // end of the line does not dip.
            let secs = if t == last {
                (unix_ms / 1000 - t + 1).min(SLOT_SECS)
            } else {
                SLOT_SECS
            };
            out.push(match slot {
                Some(s) => Point {
                    t,
                    rps: f64::from(s.requests) / secs as f64,
                    error_pct: if s.requests == 0 {
                        0.0
                    } else {
                        100.0 * f64::from(s.errors) / f64::from(s.requests)
                    },
                    in_flight: s.in_flight,
                    streams: s.streams,
                    overhead_p50_ms: s.overhead.quantile_ms(0.5),
                    overhead_p99_ms: s.overhead.quantile_ms(0.99),
                    ttfb_p50_ms: s.ttfb.quantile_ms(0.5),
                    ttfb_p99_ms: s.ttfb.quantile_ms(0.99),
                },
                None => Point {
                    t,
                    rps: 0.0,
                    error_pct: 0.0,
                    in_flight: 0,
                    streams: 0,
                    overhead_p50_ms: None,
                    overhead_p99_ms: None,
                    ttfb_p50_ms: None,
                    ttfb_p99_ms: None,
                },
            });
            t += SLOT_SECS;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_hold_their_values() {
        let mut next = 0;
        for i in 0..BUCKETS {
            let (low, width) = LogHistogram::bounds(i);
            assert_eq!(low, next, "bucket {i}");
            next = low + width;
        }
        for us in [0u64, 1, 7, 8, 9, 15, 16, 100, 999, 1000, 123_456, 1 << 28] {
            let (low, width) = LogHistogram::bounds(LogHistogram::index(us));
            assert!((low..low + width).contains(&us), "{us}");
        }
        assert_eq!(LogHistogram::index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_within_an_eighth() {
        let mut h = LogHistogram::default();
        assert_eq!(h.quantile_ms(0.5), None);
        for us in 1..=1000u64 {
            h.observe(Duration::from_micros(us * 10));
        }
        let p50 = h.quantile_ms(0.5).unwrap();
        let p99 = h.quantile_ms(0.99).unwrap();
        assert!((p50 - 5.0).abs() / 5.0 < 0.125, "{p50}");
        assert!((p99 - 9.9).abs() / 9.9 < 0.125, "{p99}");
        // One slow request in a hundred is the p99.
        let mut h = LogHistogram::default();
        for _ in 0..99 {
            h.observe(Duration::from_micros(200));
        }
        h.observe(Duration::from_millis(40));
        assert!(h.quantile_ms(0.99).unwrap() < 0.25);
        h.observe(Duration::from_millis(40));
        assert!(h.quantile_ms(0.99).unwrap() > 35.0);
    }

    #[test]
    fn an_hour_of_slots_with_gaps_as_zeros() {
        let mut t = Timeline::default();
        let base = 1_800_000_000_000u64;
        for i in 0..20 {
            t.finished(base + i * 100, 200, Duration::from_micros(300), None);
        }
        t.finished(base + 5_000, 502, Duration::from_micros(300), None);
        t.sample(base, 3, 1);
        t.sample(base + 1000, 5, 0);
        t.finished(
            base + 30_000,
            200,
            Duration::from_micros(100),
            Some(Duration::from_millis(2)),
        );
        let p = t.points(base + 39_999);
        assert_eq!(p.len(), SLOTS);
        let first = &p[SLOTS - 4];
        assert_eq!(first.t, base / 1000);
        assert!((first.rps - 2.1).abs() < 1e-9);
        assert!((first.error_pct - 100.0 / 21.0).abs() < 1e-9);
        assert_eq!((first.in_flight, first.streams), (5, 1));
        assert_eq!(p[SLOTS - 3].rps, 0.0);
        assert_eq!(p[SLOTS - 1].rps, 0.1);
        // Two seconds into the slot: one request is half a request a second.
        assert_eq!(t.points(base + 31_000)[SLOTS - 1].rps, 0.5);
        assert!(p[SLOTS - 1].ttfb_p50_ms.unwrap() > 1.75);
        // An hour later everything has aged out.
        t.finished(base + 3_700_000, 200, Duration::ZERO, None);
        assert_eq!(t.slots.len(), 1);
        assert!(
            t.points(base + 3_700_000)[..SLOTS - 1]
                .iter()
                .all(|p| p.rps == 0.0)
        );
    }
}
