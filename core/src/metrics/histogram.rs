//! The latency histograms: cumulative counts over fixed buckets, their
//! quantiles (for the console) and their Prometheus series.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::render::header;

/// Upper bounds of the latency histograms, in seconds.
const LATENCY_BUCKETS: [f64; 18] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0,
];

/// A cumulative histogram over [`LATENCY_BUCKETS`].
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    /// Per bucket (not cumulative; the last slot is +Inf).
    counts: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub(crate) fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// The family with one series labelled `labels` (`k="v"`, or empty),
    /// its header first when `with_header`.
    pub(crate) fn render_labelled(
        &self,
        out: &mut String,
        name: &str,
        help: &str,
        labels: &str,
        with_header: bool,
    ) {
        if with_header {
            header(out, name, "histogram", help);
        }
        let (open, sep) = if labels.is_empty() {
            ("", "")
        } else {
            ("{", ",")
        };
        let close = if labels.is_empty() { "" } else { "}" };
        let mut cumulative = 0;
        let bucket = |out: &mut String, le: &dyn std::fmt::Display, n: u64| {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {n}");
        };
        for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            bucket(out, bound, cumulative);
        }
        cumulative += self.counts[LATENCY_BUCKETS.len()].load(Ordering::Relaxed);
        bucket(out, &"+Inf", cumulative);
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{open}{labels}{close} {sum}");
        let _ = writeln!(out, "{name}_count{open}{labels}{close} {cumulative}");
    }

    /// The `q` quantile (0–1) in milliseconds, interpolated within its
    /// bucket (the last bucket's lower bound past the largest); `None`
    /// without observations.
    pub(crate) fn quantile_ms(&self, q: f64) -> Option<f64> {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).ceil().clamp(1.0, total as f64);
        let mut seen = 0u64;
        for (i, &n) in counts.iter().enumerate() {
            if n > 0 && (seen + n) as f64 >= rank {
                let low = if i == 0 { 0.0 } else { LATENCY_BUCKETS[i - 1] };
                let Some(&high) = LATENCY_BUCKETS.get(i) else {
                    return Some(low * 1000.0);
                };
                let within = (rank - seen as f64) / n as f64;
                return Some((low + (high - low) * within) * 1000.0);
            }
            seen += n;
        }
        None
    }

    pub(super) fn render(&self, out: &mut String, name: &str, help: &str) {
        self.render_labelled(out, name, help, "", true);
    }
}
