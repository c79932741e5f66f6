//! Which requests are traced: the samplers `OTEL_TRACES_SAMPLER` names.
//! The ratio is decided from the trace id alone (the last 8 bytes, as the
//! reference SDKs do), so every participant of a trace that samples by the
//! same ratio makes the same choice, and a higher ratio keeps a superset
//! of what a lower one keeps.

use super::context::{SpanContext, TraceId};

/// What decides for a trace with no parent (and, when not parent-based,
/// for every trace).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Root {
    Always,
    Never,
    /// Kept when the trace id's last 8 bytes, shifted right by one, are
    /// below this (ratio × 2^63).
    Ratio(u64),
}

/// A sampler: a root decision, and whether a parent's decision wins.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    root: Root,
    parent_based: bool,
}

impl Default for Sampler {
    /// `parentbased_always_on`, the OpenTelemetry default.
    fn default() -> Self {
        Sampler {
            root: Root::Always,
            parent_based: true,
        }
    }
}

impl Sampler {
    /// The sampler `name` (`always_on`, `always_off`, `traceidratio`,
    /// `parentbased_always_on`, `parentbased_always_off`,
    /// `parentbased_traceidratio`) with `arg` (the ratio, 0 to 1, for the
    /// ratio samplers; 1 when absent).
    pub fn parse(name: &str, arg: Option<&str>) -> Result<Sampler, String> {
        let ratio = || -> Result<Root, String> {
            let r = match arg.map(str::trim) {
                None | Some("") => 1.0,
                Some(a) => a
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| format!("'{a}' is not a ratio from 0 to 1"))?,
            };
            Ok(Root::Ratio(ratio_bound(r)))
        };
        let (root, parent_based) = match name.trim() {
            "always_on" => (Root::Always, false),
            "always_off" => (Root::Never, false),
            "traceidratio" => (ratio()?, false),
            "parentbased_always_on" => (Root::Always, true),
            "parentbased_always_off" => (Root::Never, true),
            "parentbased_traceidratio" => (ratio()?, true),
            other => {
                return Err(format!(
                    "'{other}' is not one of always_on, always_off, traceidratio, \
                     parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
                ));
            }
        };
        Ok(Sampler { root, parent_based })
    }

    /// Whether a request in `trace` (continued from `parent`, if any) is
    /// recorded and exported.
    pub fn sample(&self, parent: Option<&SpanContext>, trace: &TraceId) -> bool {
        if self.parent_based
            && let Some(p) = parent
        {
            return p.sampled();
        }
        match self.root {
            Root::Always => true,
            Root::Never => false,
            Root::Ratio(bound) => {
                let mut low = [0u8; 8];
                low.copy_from_slice(&trace.0[8..]);
                (u64::from_be_bytes(low) >> 1) < bound
            }
        }
    }

    /// Whether nothing can ever be sampled (tracing can stay off).
    pub fn never(&self) -> bool {
        !self.parent_based && matches!(self.root, Root::Never | Root::Ratio(0))
    }
}

/// ratio × 2^63, with 1 keeping everything.
fn ratio_bound(r: f64) -> u64 {
    if r >= 1.0 {
        u64::MAX
    } else {
        (r * (1u64 << 63) as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::context::{SAMPLED, SpanId};

    fn ids(n: u64) -> impl Iterator<Item = TraceId> {
        // A fixed, well-mixed sequence (splitmix64).
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        (0..n).map(move |_| {
            let mut next = || {
                s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            };
            TraceId::from_random(next(), next())
        })
    }

    #[test]
    fn a_ratio_keeps_its_share_and_a_higher_one_a_superset() {
        let quarter = Sampler::parse("traceidratio", Some("0.25")).unwrap();
        let half = Sampler::parse("traceidratio", Some("0.5")).unwrap();
        let (mut q, mut h) = (0, 0);
        for id in ids(20_000) {
            let (a, b) = (quarter.sample(None, &id), half.sample(None, &id));
            assert!(!a || b, "kept at 0.25 but not at 0.5");
            q += u32::from(a);
            h += u32::from(b);
        }
        assert!((4_700..=5_300).contains(&q), "{q}");
        assert!((9_700..=10_300).contains(&h), "{h}");
        let all = Sampler::parse("traceidratio", Some("1")).unwrap();
        let none = Sampler::parse("traceidratio", Some("0")).unwrap();
        assert!(ids(1000).all(|id| all.sample(None, &id)));
        assert!(ids(1000).all(|id| !none.sample(None, &id)));
        assert!(none.never() && !all.never());
    }

    #[test]
    fn a_parent_decides_when_parent_based() {
        let id = TraceId::from_random(1, 2);
        let parent = |flags| SpanContext {
            trace_id: id,
            span_id: SpanId::from_random(3),
            flags,
        };
        let pb = Sampler::parse("parentbased_always_off", None).unwrap();
        assert!(pb.sample(Some(&parent(SAMPLED)), &id));
        assert!(!pb.sample(Some(&parent(0)), &id));
        assert!(!pb.sample(None, &id));
        assert!(!pb.never(), "a sampled parent still records");
        let on = Sampler::parse("always_on", None).unwrap();
        assert!(on.sample(Some(&parent(0)), &id), "not parent-based");
        assert!(Sampler::default().sample(None, &id));
        assert!(!Sampler::default().sample(Some(&parent(0)), &id));
    }

    #[test]
    fn refuses_unknown_samplers_and_ratios() {
        assert!(
            Sampler::parse("sometimes", None)
                .unwrap_err()
                .contains("'sometimes'")
        );
        for bad in ["1.5", "-0.1", "half", "NaN"] {
            let e = Sampler::parse("traceidratio", Some(bad)).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        assert_eq!(
            Sampler::parse("parentbased_traceidratio", None).unwrap(),
            Sampler::parse("parentbased_traceidratio", Some("1")).unwrap()
        );
    }
}
