//! How many prompt tokens an endpoint counts beyond the gateway's estimate:
//! learned from the usage it reports, so that a request's reservation is an
//! upper bound on what it will be billed for its prompt.
//!
//! The gateway estimates a prompt from its bytes (about four per token,
//! plus allowances per message and image). A provider adds what the
//! estimate cannot see: its chat template's system prompt and role markers
//! (tens of tokens, the same for every request), and, for text its
//! tokenizer splits finely, a share of the prompt's size. So an endpoint's
//! allowance has two parts, each only ever raised:
//!
//! - `extra` tokens on every request: the largest excess seen on a *small*
//!   prompt (estimate below [`LARGE_PROMPT`]), where the excess is mostly
//!   the template's; it is never below `--prompt-overhead-tokens` (the
//!   `floor` passed in);
//! - a `ratio` (thousandths, at least 1000) on the estimate: the largest
//!   `(reported − extra) / estimate` seen on a *large* prompt.
//!
//! The bound `estimate × ratio + extra` covers every report the endpoint
//! ever made (a small one through `extra`, a large one through `ratio`),
//! and one large prompt of unusual text does not add its whole excess to
//! every small request's reservation (which would starve a key's tokens
//! per minute). Both parts are capped, so a provider that reports nonsense
//! cannot make every request unaffordable.

use std::sync::atomic::{AtomicU64, Ordering};

/// Estimates at or above this are *large*: their excess teaches the ratio.
pub(super) const LARGE_PROMPT: u64 = 2048;
/// The most `extra` tokens learned.
pub(super) const MAX_EXTRA: u64 = 4096;
/// The largest ratio learned, thousandths (four times the estimate: about
/// one token per byte, the most a byte-level tokenizer can count).
pub(super) const MAX_RATIO: u64 = 4000;

/// One endpoint's learned prompt allowance.
#[derive(Debug)]
pub struct PromptAllowance {
    extra: AtomicU64,
    ratio: AtomicU64,
}

impl Default for PromptAllowance {
    fn default() -> Self {
        PromptAllowance {
            extra: AtomicU64::new(0),
            ratio: AtomicU64::new(1000),
        }
    }
}

impl PromptAllowance {
    /// The prompt tokens to reserve for an `estimate`, with at least
    /// `floor` extra tokens.
    pub fn bound(&self, estimate: u64, floor: u64) -> u64 {
        let ratio = self.ratio.load(Ordering::Relaxed);
        let scaled = if ratio == 1000 {
            estimate
        } else {
            let scaled = (u128::from(estimate) * u128::from(ratio)).div_ceil(1000);
            u64::try_from(scaled).unwrap_or(u64::MAX)
        };
        let extra = self.extra.load(Ordering::Relaxed).max(floor.min(MAX_EXTRA));
        scaled.saturating_add(extra)
    }

    /// The endpoint reported `reported` prompt tokens for a request the
    /// gateway estimated at `estimate` (`floor` as for [`Self::bound`]).
    pub fn learn(&self, estimate: u64, reported: u64, floor: u64) {
        if reported <= self.bound(estimate, floor) {
            return;
        }
        if estimate < LARGE_PROMPT {
            let excess = (reported - estimate.min(reported)).min(MAX_EXTRA);
            self.extra.fetch_max(excess, Ordering::Relaxed);
        } else {
            let extra = self.extra.load(Ordering::Relaxed).max(floor.min(MAX_EXTRA));
            let ratio = reported
                .saturating_sub(extra)
                .saturating_mul(1000)
                .div_ceil(estimate)
                .min(MAX_RATIO);
            self.ratio.fetch_max(ratio, Ordering::Relaxed);
        }
    }

    /// The two parts, for `GET /upstreams`: extra tokens and the ratio in
    /// thousandths.
    pub fn parts(&self) -> (u64, u64) {
        (
            self.extra.load(Ordering::Relaxed),
            self.ratio.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_is_learned_as_extra_tokens() {
        let a = PromptAllowance::default();
        assert_eq!(a.bound(10, 0), 10);
        assert_eq!(a.bound(10, 64), 74, "the floor until reports say more");
        // SmolLM2's template: a system prompt of ~30 tokens.
        a.learn(6, 36, 0);
        assert_eq!(a.bound(6, 0), 36);
        assert_eq!(a.bound(500, 0), 530);
        assert_eq!(a.bound(500, 64), 564);
        // Smaller reports teach nothing.
        a.learn(6, 20, 0);
        assert_eq!(a.parts(), (30, 1000));
    }

    #[test]
    fn large_prompts_teach_a_ratio_and_every_report_stays_covered() {
        let a = PromptAllowance::default();
        let reports = [
            (6, 36),
            (3000, 4500),
            (100, 190),
            (10_000, 12_000),
            (2048, 4000),
        ];
        for (e, p) in reports {
            a.learn(e, p, 64);
        }
        for (e, p) in reports {
            assert!(a.bound(e, 64) >= p, "{e} -> {p}: bound {}", a.bound(e, 64));
        }
        let (_, ratio) = a.parts();
        assert!(ratio > 1000 && ratio <= MAX_RATIO, "{ratio}");
        // A small request does not carry a large one's whole excess.
        assert!(a.bound(10, 64) < 1000, "{}", a.bound(10, 64));
    }

    #[test]
    fn nonsense_is_capped() {
        let a = PromptAllowance::default();
        assert_eq!(a.bound(0, 1 << 40), MAX_EXTRA);
        a.learn(1, u64::MAX, 0);
        a.learn(1 << 20, u64::MAX, 0);
        assert_eq!(a.parts(), (MAX_EXTRA, MAX_RATIO));
        assert_eq!(a.bound(u64::MAX, 0), u64::MAX);
    }
}
