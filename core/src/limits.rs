//! Per-key rate limits: requests and tokens per minute, refilled continuously.
//!
//! Each key has two [`TokenBucket`]s. A bucket holds up to one minute's worth
//! (`per_minute`) and refills at `per_minute` per 60 seconds, continuously, so
//! there are no window edges to burst across. The arithmetic is integers only
//! (milliseconds and "units" where one token is 60,000 units and one
//! millisecond refills `per_minute` units), so it gives the same answers in
//! any process, or in a server-side script, for the same inputs.
//!
//! Admission takes one request and reserves a token estimate (prompt estimate
//! plus `max_tokens` when given, capped at the bucket's size so one large
//! request can always run when the bucket is full). When the request ends,
//! [`RateLimiter::settle`] replaces the reservation by the metered tokens;
//! a bucket may go into debt (down to minus one minute's worth), which delays
//! the key's next requests until the refill has paid it back.

use rustc_hash::FxHashMap;
use std::sync::Mutex;

use crate::quota::{Period, Quota};
use crate::time::Instant;

/// Milliseconds per minute: the unit scale of a bucket.
const UNITS_PER_TOKEN: i64 = 60_000;

/// Default requests per minute per key.
pub(crate) const DEFAULT_RPM: u64 = 60;
/// Default tokens per minute per key.
pub(crate) const DEFAULT_TPM: u64 = 100_000;

/// The limits of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Requests per minute.
    pub requests_per_minute: u64,
    /// Tokens (prompt + completion) per minute.
    pub tokens_per_minute: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            requests_per_minute: DEFAULT_RPM,
            tokens_per_minute: DEFAULT_TPM,
        }
    }
}

/// A continuously refilled bucket of `per_minute` tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenBucket {
    per_minute: u64,
    /// Current content in units (may be negative: debt).
    level: i64,
    /// Time of the last refill, milliseconds.
    updated_ms: u64,
}

impl TokenBucket {
    /// A full bucket.
    pub(crate) fn full(per_minute: u64, now_ms: u64) -> Self {
        let per_minute = per_minute.clamp(1, i64::MAX as u64 / UNITS_PER_TOKEN as u64 / 2);
        TokenBucket {
            per_minute,
            level: per_minute as i64 * UNITS_PER_TOKEN,
            updated_ms: now_ms,
        }
    }

    /// Capacity (and refill per minute).
    pub(crate) fn per_minute(&self) -> u64 {
        self.per_minute
    }

    fn capacity_units(&self) -> i64 {
        self.per_minute as i64 * UNITS_PER_TOKEN
    }

    /// Adds what the time since the last refill earned, up to capacity.
    pub(crate) fn refill(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.updated_ms);
        if elapsed == 0 {
            return;
        }
        let earned = (elapsed as i128 * self.per_minute as i128).min(i64::MAX as i128) as i64;
        self.level = self.level.saturating_add(earned).min(self.capacity_units());
        self.updated_ms = now_ms;
    }

    /// Changes the capacity (a key's limits were edited), keeping the level
    /// within the new capacity.
    pub(crate) fn set_per_minute(&mut self, per_minute: u64) {
        let fresh = TokenBucket::full(per_minute, self.updated_ms);
        self.per_minute = fresh.per_minute;
        self.level = self.level.min(fresh.level);
    }

    /// Whole tokens available now (0 when in debt).
    pub(crate) fn available(&self) -> u64 {
        (self.level.max(0) / UNITS_PER_TOKEN) as u64
    }

    /// Milliseconds until `n` tokens are available (0 if they are).
    pub(crate) fn wait_ms(&self, n: u64) -> u64 {
        let need = (n.min(self.per_minute) as i64) * UNITS_PER_TOKEN - self.level;
        if need <= 0 {
            0
        } else {
            (need as u64).div_ceil(self.per_minute)
        }
    }

    /// Milliseconds until the bucket is full again.
    pub(crate) fn ms_until_full(&self) -> u64 {
        let need = self.capacity_units() - self.level;
        if need <= 0 {
            0
        } else {
            (need as u64).div_ceil(self.per_minute)
        }
    }

    /// Removes `n` tokens (which must be available; see [`TokenBucket::wait_ms`]).
    fn take(&mut self, n: u64) {
        self.level -= n.min(self.per_minute) as i64 * UNITS_PER_TOKEN;
    }

    /// Adds (positive) or removes (negative) tokens, without exceeding
    /// capacity or going below one minute of debt.
    pub(crate) fn adjust(&mut self, delta_tokens: i64) {
        let delta = delta_tokens.saturating_mul(UNITS_PER_TOKEN);
        self.level = self
            .level
            .saturating_add(delta)
            .clamp(-self.capacity_units(), self.capacity_units());
    }
}

/// Which limit a request ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Requests per minute.
    Requests,
    /// Tokens per minute.
    Tokens,
}

/// The state of a key's limits, for the `x-ratelimit-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitStatus {
    /// `x-ratelimit-limit-requests`.
    pub limit_requests: u64,
    /// `x-ratelimit-remaining-requests`.
    pub remaining_requests: u64,
    /// Milliseconds until the request bucket is full.
    pub reset_requests_ms: u64,
    /// `x-ratelimit-limit-tokens`.
    pub limit_tokens: u64,
    /// `x-ratelimit-remaining-tokens`.
    pub remaining_tokens: u64,
    /// Milliseconds until the token bucket is full.
    pub reset_tokens_ms: u64,
}

impl LimitStatus {
    /// The six `x-ratelimit-*` header fields.
    pub fn headers(&self) -> [(&'static str, String); 6] {
        [
            (
                "x-ratelimit-limit-requests",
                self.limit_requests.to_string(),
            ),
            ("x-ratelimit-limit-tokens", self.limit_tokens.to_string()),
            (
                "x-ratelimit-remaining-requests",
                self.remaining_requests.to_string(),
            ),
            (
                "x-ratelimit-remaining-tokens",
                self.remaining_tokens.to_string(),
            ),
            (
                "x-ratelimit-reset-requests",
                format_reset(self.reset_requests_ms),
            ),
            (
                "x-ratelimit-reset-tokens",
                format_reset(self.reset_tokens_ms),
            ),
        ]
    }
}

/// A duration as OpenAI writes its reset headers: `20ms`, `1.5s`, `6m0s`.
pub(crate) fn format_reset(ms: u64) -> String {
    let mut out = Vec::with_capacity(12);
    push_reset(&mut out, ms);
    String::from_utf8(out).unwrap_or_default()
}

/// [`format_reset`] appended to `out` (response heads are built without
/// `core::fmt`).
pub(crate) fn push_reset(out: &mut Vec<u8>, ms: u64) {
    use crate::http::write::push_decimal;
    if ms < 1000 {
        push_decimal(out, ms);
        out.extend_from_slice(b"ms");
    } else if ms < 60_000 {
        push_decimal(out, ms / 1000);
        // The milliseconds without trailing zeros: 1.5s, 1.25s, 1.125s, 1s.
        let frac = ms % 1000;
        if frac != 0 {
            let digits = [
                b'0' + (frac / 100) as u8,
                b'0' + (frac / 10 % 10) as u8,
                b'0' + (frac % 10) as u8,
            ];
            let len = if frac.is_multiple_of(100) {
                1
            } else if frac.is_multiple_of(10) {
                2
            } else {
                3
            };
            out.push(b'.');
            out.extend_from_slice(&digits[..len]);
        }
        out.push(b's');
    } else {
        push_decimal(out, ms / 60_000);
        out.push(b'm');
        push_decimal(out, (ms % 60_000) / 1000);
        out.push(b's');
    }
}

/// An admitted request: what to give back or charge when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Tokens reserved at admission.
    pub reserved_tokens: u64,
    /// The key's limits after admission.
    pub status: LimitStatus,
}

/// A refused request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    /// Which limit.
    pub kind: LimitKind,
    /// Whole seconds until a retry can succeed (at least 1): `Retry-After`.
    pub retry_after_secs: u64,
    /// The key's limits now.
    pub status: LimitStatus,
}

#[derive(Debug, Clone)]
struct KeyBuckets {
    requests: TokenBucket,
    tokens: TokenBucket,
}

impl KeyBuckets {
    fn new(limits: Limits, now_ms: u64) -> Self {
        KeyBuckets {
            requests: TokenBucket::full(limits.requests_per_minute, now_ms),
            tokens: TokenBucket::full(limits.tokens_per_minute, now_ms),
        }
    }

    fn refresh(&mut self, limits: Limits, now_ms: u64) {
        if self.requests.per_minute() != limits.requests_per_minute {
            self.requests.set_per_minute(limits.requests_per_minute);
        }
        if self.tokens.per_minute() != limits.tokens_per_minute {
            self.tokens.set_per_minute(limits.tokens_per_minute);
        }
        self.requests.refill(now_ms);
        self.tokens.refill(now_ms);
    }

    fn status(&self) -> LimitStatus {
        LimitStatus {
            limit_requests: self.requests.per_minute(),
            remaining_requests: self.requests.available(),
            reset_requests_ms: self.requests.ms_until_full(),
            limit_tokens: self.tokens.per_minute(),
            remaining_tokens: self.tokens.available(),
            reset_tokens_ms: self.tokens.ms_until_full(),
        }
    }

    /// Both buckets must have room; then both are charged.
    fn admit(&mut self, tokens: u64) -> Result<Admission, Rejection> {
        let wait_requests = self.requests.wait_ms(1);
        let wait_tokens = self.tokens.wait_ms(tokens);
        if wait_requests > 0 || wait_tokens > 0 {
            let (kind, wait) = if wait_requests >= wait_tokens {
                (LimitKind::Requests, wait_requests)
            } else {
                (LimitKind::Tokens, wait_tokens)
            };
            return Err(Rejection {
                kind,
                retry_after_secs: wait.div_ceil(1000).max(1),
                status: self.status(),
            });
        }
        self.requests.take(1);
        let reserved = tokens.min(self.tokens.per_minute());
        self.tokens.take(reserved);
        Ok(Admission {
            reserved_tokens: reserved,
            status: self.status(),
        })
    }
}

/// The limits of every key, shared by all connections of a process.
#[derive(Debug, Default)]
pub struct RateLimiter {
    keys: Mutex<FxHashMap<String, KeyBuckets>>,
}

impl RateLimiter {
    /// An empty limiter: keys get full buckets on first use.
    pub fn new() -> Self {
        Self::default()
    }

    fn with_key<R>(
        &self,
        key: &str,
        limits: Limits,
        now: Instant,
        f: impl FnOnce(&mut KeyBuckets) -> R,
    ) -> R {
        let now_ms = now.as_millis();
        // A poisoned lock means a panic elsewhere while holding it; the map
        // itself is still consistent (every update is a single assignment).
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let buckets = match keys.get_mut(key) {
            Some(b) => b,
            None => keys
                .entry(key.to_owned())
                .or_insert_with(|| KeyBuckets::new(limits, now_ms)),
        };
        buckets.refresh(limits, now_ms);
        f(buckets)
    }

    /// Admits one request of `key` reserving `tokens`, or says when to retry.
    pub fn admit(
        &self,
        key: &str,
        limits: Limits,
        tokens: u64,
        now: Instant,
    ) -> Result<Admission, Rejection> {
        self.with_key(key, limits, now, |b| b.admit(tokens))
    }

    /// Replaces a reservation by the tokens actually metered.
    pub fn settle(
        &self,
        key: &str,
        limits: Limits,
        reserved: u64,
        used: u64,
        now: Instant,
    ) -> LimitStatus {
        self.with_key(key, limits, now, |b| {
            let delta = reserved as i128 - used as i128;
            b.tokens
                .adjust(delta.clamp(i64::MIN as i128, i64::MAX as i128) as i64);
            b.status()
        })
    }

    /// The key's limits now, without charging anything.
    pub fn status(&self, key: &str, limits: Limits, now: Instant) -> LimitStatus {
        self.with_key(key, limits, now, |b| b.status())
    }

    /// Drops keys that are no longer configured.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.retain(|k, _| keep(k));
    }
}

/// The same limiter as one atomic Redis script (Lua), for limits shared by
/// several gateway instances: integer arithmetic identical to
/// `TokenBucket`, time from the Redis server, idle keys expiring.
pub const REDIS_SCRIPT: &str = include_str!("limits.lua");

/// The largest per-minute limit (requests or tokens) the Redis script
/// computes exactly. Lua numbers are doubles, exact for integers up to
/// 2^53; a bucket's level, in units of 1/60,000, ranges from minus to plus
/// its capacity (`per_minute` × 60,000), and the differences the script
/// takes span twice that. Above this bound the script and the in-process
/// limiter would disagree, so `serve --redis` refuses such limits.
pub const SHARED_MAX_PER_MINUTE: u64 = (1u64 << 53) / (2 * UNITS_PER_TOKEN as u64);

/// Why `limits` cannot be shared through Redis, if they cannot: a limit
/// above [`SHARED_MAX_PER_MINUTE`].
pub fn shared_limits_error(limits: Limits) -> Option<String> {
    let (what, n) = if limits.requests_per_minute > SHARED_MAX_PER_MINUTE {
        ("requests", limits.requests_per_minute)
    } else if limits.tokens_per_minute > SHARED_MAX_PER_MINUTE {
        ("tokens", limits.tokens_per_minute)
    } else {
        return None;
    };
    Some(format!(
        "{n} {what} per minute is above {SHARED_MAX_PER_MINUTE}, the largest limit the shared (Redis) limiter computes exactly"
    ))
}

/// What the script is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptOp {
    /// Admit one request reserving this many tokens.
    Admit {
        /// Tokens to reserve.
        tokens: u64,
    },
    /// Replace a reservation by the tokens used.
    Settle {
        /// Tokens reserved at admission.
        reserved: u64,
        /// Tokens metered.
        used: u64,
    },
    /// Read the status only.
    Status,
    /// Set the key's spend, unless it is set already: what the ledger
    /// says it spent per period kind ([`crate::Period::ALL`] order).
    /// With `before`, the rebuild a changed history asked for
    /// ([`ScriptOutcome::Unseeded`]): what the ledger holds of the lines
    /// before that time, to which the script adds what was settled since.
    Seed {
        /// Nano-dollars per period kind.
        spent: [u64; 4],
        /// The rebuild's cut-off (Unix ms), as the script gave it.
        before: Option<u64>,
    },
    /// Extend these leases (names separated by spaces) by the lease's
    /// length.
    Renew,
}

/// The budget, in-flight and lease part of a script call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScriptQuota<'a> {
    /// The key's budget and in-flight cap.
    pub quota: Quota,
    /// Admit: the worst-case cost to reserve. Settle: nothing (the lease
    /// knows its reservation).
    pub cost: u64,
    /// Settle: the metered cost.
    pub metered: u64,
    /// The lease's name (the request id), or names for `Renew`; empty for
    /// none.
    pub lease: &'a str,
    /// The lease's length, milliseconds.
    pub lease_ms: u64,
    /// The wall clock (Unix ms): which periods are current. For a
    /// settlement, the ledger line's time.
    pub unix_ms: u64,
    /// The replication history of the server asked (`master_replid`),
    /// empty when unknown: a spend kept under another history is rebuilt
    /// from the ledger.
    pub history: &'a str,
    /// Admit: how long after a history changed the spend is rebuilt from
    /// the ledger ([`REBUILD_AFTER_MS`]); `None` never asks (a rebuild
    /// that could not read the ledger admits on the spend as it is).
    pub rebuild_after_ms: Option<u64>,
}

/// How long after a key's spend is first used under a new replication
/// history (a failover; Redis's clock) it is rebuilt from the ledger: long enough for
/// every line that finished before then to have reached the shared ledger
/// (shipped within about 100 ms while PostgreSQL is up). Until then
/// admissions decide on the spend the new primary holds plus what was
/// settled since.
pub const REBUILD_AFTER_MS: u64 = 5_000;

/// The script's `KEYS` for client key `name`: its buckets, spend, leases
/// and the leases' reservations, all four in one hash tag (`{name}`), so
/// in one cluster slot: a script's keys must be.
pub fn script_keys(name: &str) -> [String; 4] {
    [
        format!("chatgate:limits:{{{name}}}"),
        format!("chatgate:spend:{{{name}}}"),
        format!("chatgate:leases:{{{name}}}"),
        format!("chatgate:lease-costs:{{{name}}}"),
    ]
}

/// The script's `ARGV` for `op` on a key with `limits` and `quota`;
/// `now_ms` overrides the server's clock (tests only).
pub fn script_args(
    op: ScriptOp,
    limits: Limits,
    quota: &ScriptQuota<'_>,
    now_ms: Option<u64>,
) -> Vec<String> {
    let (name, a, b) = match op {
        ScriptOp::Admit { tokens } => ("admit", tokens, 0),
        ScriptOp::Settle { reserved, used } => ("settle", reserved, used),
        ScriptOp::Status => ("status", 0, 0),
        ScriptOp::Seed { .. } => ("seed", 0, 0),
        ScriptOp::Renew => ("renew", 0, 0),
    };
    let opt = |v: Option<u64>| v.map_or_else(String::new, |n| n.to_string());
    let q = &quota.quota;
    let starts = [Period::Day, Period::Week, Period::Month].map(|p| p.start(quota.unix_ms));
    let (x12, x13, x14, x15) = match op {
        ScriptOp::Seed { spent, .. } => (
            spent[0],
            spent[1],
            spent[2].to_string(),
            spent[3].to_string(),
        ),
        _ => (
            quota.cost,
            quota.metered,
            opt(q.max_in_flight.map(u64::from)),
            quota.lease.to_owned(),
        ),
    };
    vec![
        name.to_owned(),
        limits.requests_per_minute.to_string(),
        limits.tokens_per_minute.to_string(),
        a.to_string(),
        b.to_string(),
        opt(now_ms),
        opt(q.budget.map(|b| b.limit_nano)),
        q.budget
            .map_or(4, |b| b.period.index() as u64 + 1)
            .to_string(),
        starts[0].to_string(),
        starts[1].to_string(),
        starts[2].to_string(),
        x12.to_string(),
        x13.to_string(),
        x14,
        x15,
        quota.lease_ms.to_string(),
        quota.history.to_owned(),
        match op {
            ScriptOp::Seed { before, .. } => opt(before),
            _ => quota.unix_ms.to_string(),
        },
        opt(quota.rebuild_after_ms),
    ]
}

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptOutcome {
    /// `admit` let the request through.
    Admitted(Admission),
    /// `admit` refused it on a rate limit.
    Refused(Rejection),
    /// `admit` refused it: the budget cannot cover it.
    OverBudget {
        /// Spent in the budget's period.
        spent: u64,
        /// Reserved by the key's requests in flight.
        reserved: u64,
    },
    /// `admit` refused it: the key's in-flight cap is reached.
    InFlight,
    /// `admit` could not decide a budget: the key's spend must be seeded
    /// from the ledger first ([`ScriptOp::Seed`]); with `before`, rebuilt
    /// from the ledger's lines before that time, after a history change.
    Unseeded {
        /// The rebuild's cut-off (Unix ms).
        before: Option<u64>,
    },
    /// `settle`, `status`, `seed` or `renew`: the key's limits now.
    Status(LimitStatus),
}

/// Decodes the script's array of twelve integers.
pub fn decode_script_reply(v: &[i64]) -> Option<ScriptOutcome> {
    let n = |i: usize| v.get(i).copied().and_then(|x| u64::try_from(x).ok());
    if v.len() != 12 {
        return None;
    }
    let status = LimitStatus {
        limit_requests: n(3)?,
        remaining_requests: n(4)?,
        reset_requests_ms: n(5)?,
        limit_tokens: n(6)?,
        remaining_tokens: n(7)?,
        reset_tokens_ms: n(8)?,
    };
    Some(match v[0] {
        1 => ScriptOutcome::Admitted(Admission {
            reserved_tokens: n(1)?,
            status,
        }),
        0 => match v[1] {
            1 | 2 => ScriptOutcome::Refused(Rejection {
                kind: if v[1] == 1 {
                    LimitKind::Requests
                } else {
                    LimitKind::Tokens
                },
                retry_after_secs: n(2)?,
                status,
            }),
            3 => ScriptOutcome::OverBudget {
                spent: n(9)?,
                reserved: n(10)?,
            },
            4 => ScriptOutcome::InFlight,
            _ => return None,
        },
        2 => ScriptOutcome::Status(status),
        3 => ScriptOutcome::Unseeded {
            before: (v[1] > 0).then_some(v[1] as u64),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn the_shared_maximum_is_exact_in_doubles() {
        let span = 2 * SHARED_MAX_PER_MINUTE * UNITS_PER_TOKEN as u64;
        assert!(span <= 1 << 53);
        assert_eq!(span as f64 as u64, span);
        assert!(2 * (SHARED_MAX_PER_MINUTE + 1) * UNITS_PER_TOKEN as u64 > 1 << 53);
        let ok = Limits {
            requests_per_minute: SHARED_MAX_PER_MINUTE,
            tokens_per_minute: SHARED_MAX_PER_MINUTE,
        };
        assert_eq!(shared_limits_error(ok), None);
        let e = shared_limits_error(Limits {
            tokens_per_minute: SHARED_MAX_PER_MINUTE + 1,
            ..ok
        })
        .unwrap();
        assert!(e.contains("tokens per minute"), "{e}");
        assert!(
            shared_limits_error(Limits {
                requests_per_minute: u64::MAX,
                ..ok
            })
            .unwrap()
            .contains("requests per minute")
        );
    }

    #[test]
    fn requests_per_minute_with_continuous_refill() {
        let l = RateLimiter::new();
        let limits = Limits {
            requests_per_minute: 60,
            tokens_per_minute: 1_000_000,
        };
        for _ in 0..60 {
            l.admit("k", limits, 1, at(0)).unwrap();
        }
        let r = l.admit("k", limits, 1, at(0)).unwrap_err();
        assert_eq!(r.kind, LimitKind::Requests);
        assert_eq!(r.retry_after_secs, 1);
        assert_eq!(r.status.remaining_requests, 0);
        // One request per second refills; 999 ms is not enough.
        assert!(l.admit("k", limits, 1, at(999)).is_err());
        assert!(l.admit("k", limits, 1, at(1000)).is_ok());
        assert!(l.admit("k", limits, 1, at(1000)).is_err());
        // Other keys are independent.
        assert!(l.admit("other", limits, 1, at(1000)).is_ok());
    }

    #[test]
    fn tokens_reserve_settle_and_debt() {
        let l = RateLimiter::new();
        let limits = Limits {
            requests_per_minute: 1000,
            tokens_per_minute: 6000,
        };
        let a = l.admit("k", limits, 5000, at(0)).unwrap();
        assert_eq!(a.reserved_tokens, 5000);
        assert_eq!(a.status.remaining_tokens, 1000);
        let r = l.admit("k", limits, 2000, at(0)).unwrap_err();
        assert_eq!(r.kind, LimitKind::Tokens);
        // 1000 more tokens at 100/s: 10 s.
        assert_eq!(r.retry_after_secs, 10);
        // Settling with fewer tokens gives the rest back.
        let s = l.settle("k", limits, 5000, 100, at(0));
        assert_eq!(s.remaining_tokens, 5900);
        // Using far more than reserved puts the key in debt, at most a minute.
        l.settle("k", limits, 0, 100_000, at(0));
        let r = l.admit("k", limits, 1, at(0)).unwrap_err();
        assert_eq!(r.retry_after_secs, 61);
        assert!(l.admit("k", limits, 1, at(60_010)).is_ok());
    }

    #[test]
    fn oversized_reservation_needs_a_full_bucket() {
        let l = RateLimiter::new();
        let limits = Limits {
            requests_per_minute: 100,
            tokens_per_minute: 1000,
        };
        let a = l.admit("k", limits, 50_000, at(0)).unwrap();
        assert_eq!(a.reserved_tokens, 1000);
        let r = l.admit("k", limits, 50_000, at(0)).unwrap_err();
        assert_eq!(r.retry_after_secs, 60);
    }

    #[test]
    fn limits_can_change() {
        let l = RateLimiter::new();
        let mut limits = Limits {
            requests_per_minute: 10,
            tokens_per_minute: 1000,
        };
        l.admit("k", limits, 1, at(0)).unwrap();
        limits.requests_per_minute = 2;
        let s = l.status("k", limits, at(0));
        assert_eq!((s.limit_requests, s.remaining_requests), (2, 2));
    }

    #[test]
    fn reset_format() {
        assert_eq!(format_reset(20), "20ms");
        assert_eq!(format_reset(1000), "1s");
        assert_eq!(format_reset(1500), "1.5s");
        assert_eq!(format_reset(360_000), "6m0s");
        assert_eq!(format_reset(61_000), "1m1s");
        assert_eq!(format_reset(0), "0ms");
        assert_eq!(format_reset(999), "999ms");
        assert_eq!(format_reset(1250), "1.25s");
        assert_eq!(format_reset(1001), "1.001s");
        assert_eq!(format_reset(1010), "1.01s");
        assert_eq!(format_reset(59_999), "59.999s");
        assert_eq!(format_reset(60_000), "1m0s");
        // The same as the formatting it replaced, everywhere it matters.
        for ms in (0..200_000).step_by(7) {
            let old = if ms < 1000 {
                format!("{ms}ms")
            } else if ms < 60_000 {
                let s = format!("{}.{:03}", ms / 1000, ms % 1000);
                format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
            } else {
                format!("{}m{}s", ms / 60_000, (ms % 60_000) / 1000)
            };
            assert_eq!(format_reset(ms), old, "{ms}");
        }
    }
}
