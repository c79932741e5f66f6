//! Spend budgets and in-flight caps per key.
//!
//! A budget is a limit in nano-dollars over a [`Period`]. At admission a
//! request reserves its worst-case cost (the prompt estimate the token
//! limiter makes, plus `max_tokens` output tokens, or the configured
//! reserve when `max_tokens` is unset); it is refused when what the key
//! spent in the period, plus what its requests in flight reserved, plus
//! this reservation exceed the budget. When the request ends its
//! reservation is replaced by the metered cost, exactly as the ledger
//! records it. So when every request sets `max_tokens` (and the provider
//! counts the prompt within the estimate), spend never exceeds the budget;
//! otherwise the excess of each request over its reservation is its
//! *overshoot*, returned by [`QuotaBook::release`] to be counted.
//!
//! An in-flight cap bounds a key's requests open at once, from admission
//! to the response's last byte. Over the cap a request is refused, or waits
//! its turn in the key's first-in-first-out queue ([`QuotaBook::enqueue`]).
//!
//! [`QuotaBook`] is this process's book of every key's spend (per period
//! kind, so that a budget set or changed later is right at once), its
//! reservations and its requests in flight. The same rules run as part of
//! the shared limiter's Redis script for several instances
//! (`limits.lua`).
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | [`QuotaBook`], reservations, the in-flight queue, the spend tally |
//! | `period.rs` | budget periods (day, ISO week, month, total) and their resets, in UTC |

mod period;
#[cfg(test)]
mod tests;

use rustc_hash::FxHashMap;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::catalog::{Price, format_usd};
use crate::time::rfc3339_ms;

pub use period::Period;

/// The largest budget accepted, in USD: a million dollars. Budgets,
/// spend and reservations stay far below 2^53 nano-dollars, which the
/// shared limiter's script (Lua numbers are doubles) computes exactly.
pub const MAX_BUDGET_USD: f64 = 1e6;

/// Output tokens reserved for a request that does not set `max_tokens`
/// (`--budget-reserve-tokens`). A reasoning model's answer, reasoning
/// included, is most often a few thousand tokens; 8,192 covers most of
/// them, so overshoot stays rare, while it costs 0.12 USD at the
/// specification's prices: a key is refused only within that of its
/// budget.
pub const DEFAULT_RESERVE_TOKENS: u64 = 8192;

/// A spend limit over a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The limit, nano-dollars.
    pub limit_nano: u64,
    /// The period it applies to.
    pub period: Period,
}

/// A key's budget and in-flight cap (each optional).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    /// Its spend budget, if any.
    pub budget: Option<Budget>,
    /// Most requests open at once, if capped.
    pub max_in_flight: Option<u32>,
}

/// A USD amount (a budget) in nano-dollars: finite, not negative, at most
/// [`MAX_BUDGET_USD`].
pub fn usd_to_nano(usd: f64) -> Result<u64, String> {
    if !usd.is_finite() {
        return Err(format!("{usd} is not a number of dollars"));
    }
    if usd < 0.0 {
        return Err(format!("{usd} is negative"));
    }
    if usd > MAX_BUDGET_USD {
        return Err(format!(
            "{usd} is above the largest budget, {MAX_BUDGET_USD} USD"
        ));
    }
    Ok((usd * 1e9).round() as u64)
}

/// The worst-case cost of a request: `prompt_estimate` input tokens and
/// `max_tokens` (or `reserve_tokens` when unset) output tokens.
pub fn worst_case_cost(
    price: &Price,
    prompt_estimate: u64,
    max_tokens: Option<u64>,
    reserve_tokens: u64,
) -> u64 {
    price.cost_nano(prompt_estimate, max_tokens.unwrap_or(reserve_tokens))
}

/// Why a request was not admitted by its key's quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaRefusal {
    /// Its budget cannot cover it.
    Budget(BudgetRefusal),
    /// Its key has `limit` requests open already (or others waiting
    /// before it).
    InFlight {
        /// The key's in-flight cap.
        limit: u32,
    },
}

/// A request its key's budget cannot cover: the figures the 429 states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetRefusal {
    /// The budget.
    pub budget: Budget,
    /// Spent in the current period, nano-dollars.
    pub spent: u64,
    /// Reserved by the key's requests in flight.
    pub reserved: u64,
    /// This request's worst-case cost.
    pub cost: u64,
    /// When the period resets (Unix ms), unless it never does.
    pub resets_at: Option<u64>,
}

impl BudgetRefusal {
    /// The 429's message: what was spent, the budget, when it resets, and
    /// what this request would have needed.
    pub fn message(&self, key: &str) -> String {
        let b = self.budget;
        let reset = match self.resets_at {
            Some(at) => format!("The budget resets at {}.", rfc3339_ms(at)),
            None => "The budget does not reset (period 'total').".to_owned(),
        };
        let held = if self.reserved > 0 {
            format!(
                ", and requests in flight hold {} USD",
                format_usd(self.reserved)
            )
        } else {
            String::new()
        };
        format!(
            "Budget exceeded for key '{key}': spent {} USD of its {} USD budget {}{held}; \
             this request could cost up to {} USD (set a lower max_tokens to need less). {reset}",
            format_usd(self.spent),
            format_usd(b.limit_nano),
            b.period.phrase(),
            format_usd(self.cost),
        )
    }
}

/// A key's spend and requests in flight, as one process sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaStatus {
    /// Spent in each period kind's current period ([`Period::ALL`] order).
    pub spent: [u64; 4],
    /// Reserved by requests in flight.
    pub reserved: u64,
    /// Requests open.
    pub in_flight: u32,
    /// Requests waiting in its queue.
    pub queued: usize,
}

impl QuotaStatus {
    /// Spent in `period`'s current period.
    pub fn spent_in(&self, period: Period) -> u64 {
        self.spent[period.index()]
    }
}

/// One key's book.
#[derive(Debug, Clone, Default)]
struct KeyBook {
    /// Spent per period kind, and the start of the period it counts.
    spent: [u64; 4],
    starts: [u64; 4],
    reserved: u64,
    in_flight: u32,
    /// Tickets waiting for an in-flight slot, oldest first.
    queue: VecDeque<u64>,
}

impl KeyBook {
    /// Moves every period kind to the period that holds `unix_ms` (a
    /// rollover empties it; a clock that went back does not).
    fn roll(&mut self, unix_ms: u64) {
        // Every period starts at a midnight: within the day already rolled
        // to, nothing can roll (the usual case, without calendar math).
        let day = self.starts[Period::Day.index()];
        if (day..day + 86_400_000).contains(&unix_ms) {
            return;
        }
        for p in Period::ALL {
            let i = p.index();
            let start = p.start(unix_ms);
            if start > self.starts[i] {
                self.starts[i] = start;
                self.spent[i] = 0;
            }
        }
    }

    /// `cost` spent now: it counts in every period kind.
    fn add_spent(&mut self, cost: u64) {
        for s in &mut self.spent {
            *s = s.saturating_add(cost);
        }
    }

    fn status(&self) -> QuotaStatus {
        QuotaStatus {
            spent: self.spent,
            reserved: self.reserved,
            in_flight: self.in_flight,
            queued: self.queue.len(),
        }
    }
}

/// Every key's spend, reservations and requests in flight in this process.
#[derive(Debug, Default)]
pub struct QuotaBook {
    keys: Mutex<FxHashMap<String, KeyBook>>,
    tickets: std::sync::atomic::AtomicU64,
}

impl QuotaBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    fn with_key<R>(&self, key: &str, unix_ms: u64, f: impl FnOnce(&mut KeyBook) -> R) -> R {
        // A poisoned lock means a panic elsewhere while holding it; every
        // update below leaves the book consistent.
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let book = match keys.get_mut(key) {
            Some(b) => b,
            None => keys.entry(key.to_owned()).or_default(),
        };
        book.roll(unix_ms);
        f(book)
    }

    /// Admits one request of `key` costing at most `cost` nano-dollars:
    /// reserves `cost` when the key has a budget (the reservation is
    /// returned; 0 without a budget) and counts it in flight. `ticket` is
    /// the caller's place in the key's queue, if it waits in it: a request
    /// does not pass others waiting before it, and leaves the queue when
    /// admitted.
    pub fn admit(
        &self,
        key: &str,
        quota: &Quota,
        cost: u64,
        ticket: Option<u64>,
        unix_ms: u64,
    ) -> Result<u64, QuotaRefusal> {
        self.with_key(key, unix_ms, |b| {
            if let Some(budget) = quota.budget {
                let spent = b.spent[budget.period.index()];
                if spent.saturating_add(b.reserved).saturating_add(cost) > budget.limit_nano {
                    return Err(QuotaRefusal::Budget(BudgetRefusal {
                        budget,
                        spent,
                        reserved: b.reserved,
                        cost,
                        resets_at: budget.period.reset(unix_ms),
                    }));
                }
            }
            if let Some(limit) = quota.max_in_flight {
                let first = b.queue.front().copied();
                let my_turn = first.is_none() || first == ticket;
                if b.in_flight >= limit || !my_turn {
                    return Err(QuotaRefusal::InFlight { limit });
                }
            }
            if let Some(t) = ticket {
                b.queue.retain(|&x| x != t);
            }
            let reserved = if quota.budget.is_some() { cost } else { 0 };
            b.reserved += reserved;
            b.in_flight += 1;
            Ok(reserved)
        })
    }

    /// A request admitted with [`QuotaBook::admit`] (`reserved` as it
    /// returned) ended having cost `cost`: the reservation is replaced by
    /// the cost, the in-flight slot freed. Returns the overshoot: what the
    /// request cost beyond its reservation when its key has a budget.
    pub fn release(
        &self,
        key: &str,
        budgeted: bool,
        reserved: u64,
        cost: u64,
        unix_ms: u64,
    ) -> u64 {
        self.with_key(key, unix_ms, |b| {
            b.reserved = b.reserved.saturating_sub(reserved);
            b.in_flight = b.in_flight.saturating_sub(1);
            b.add_spent(cost);
            if budgeted {
                cost.saturating_sub(reserved)
            } else {
                0
            }
        })
    }

    /// A request of `key` that was not admitted here (another store
    /// admitted it, or it was refused before) cost `cost`: counted as
    /// spent.
    pub fn spend(&self, key: &str, cost: u64, unix_ms: u64) {
        self.with_key(key, unix_ms, |b| b.add_spent(cost));
    }

    /// Counts a request admitted elsewhere (the shared limiter) in or out
    /// of this process's in-flight figure.
    pub fn count_in_flight(&self, key: &str, open: bool, unix_ms: u64) {
        self.with_key(key, unix_ms, |b| {
            if open {
                b.in_flight += 1;
            } else {
                b.in_flight = b.in_flight.saturating_sub(1);
            }
        });
    }

    /// Sets what `key` spent, per period kind, from the ledger: `spent[i]`
    /// in the period of kind `Period::ALL[i]` that holds `unix_ms`.
    /// Settlements since are kept on top only when they are newer than the
    /// ledger that was read, which the caller guarantees by seeding before
    /// serving.
    pub fn seed(&self, key: &str, spent: [u64; 4], unix_ms: u64) {
        self.with_key(key, unix_ms, |b| b.spent = spent);
    }

    /// The key's place at the back of its queue.
    pub fn enqueue(&self, key: &str, unix_ms: u64) -> u64 {
        let ticket = self
            .tickets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        self.with_key(key, unix_ms, |b| b.queue.push_back(ticket));
        ticket
    }

    /// Whether `ticket` is first in the key's queue.
    pub fn is_first(&self, key: &str, ticket: u64, unix_ms: u64) -> bool {
        self.with_key(key, unix_ms, |b| b.queue.front() == Some(&ticket))
    }

    /// Takes `ticket` out of the key's queue (it gave up or was served).
    pub fn dequeue(&self, key: &str, ticket: u64, unix_ms: u64) {
        self.with_key(key, unix_ms, |b| b.queue.retain(|&t| t != ticket));
    }

    /// The key's figures now.
    pub fn status(&self, key: &str, unix_ms: u64) -> QuotaStatus {
        self.with_key(key, unix_ms, |b| b.status())
    }

    /// Every key's figures now, by name.
    pub fn all(&self, unix_ms: u64) -> Vec<(String, QuotaStatus)> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = keys
            .iter_mut()
            .map(|(k, b)| {
                b.roll(unix_ms);
                (k.clone(), b.status())
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// Sums of the ledger's costs per key and period kind, for the periods
/// that hold `unix_ms`: what [`QuotaBook::seed`] and the shared store are
/// rebuilt from. Feed it every record (`ts` in Unix ms, key, cost).
#[derive(Debug, Clone)]
pub struct SpendTally {
    starts: [u64; 4],
    ends: [u64; 4],
    /// Per key: spent per period kind.
    pub keys: HashMap<String, [u64; 4]>,
}

impl SpendTally {
    /// An empty tally of the periods that hold `unix_ms`.
    pub fn new(unix_ms: u64) -> Self {
        let starts = Period::ALL.map(|p| p.start(unix_ms));
        let ends = Period::ALL.map(|p| p.reset(unix_ms).unwrap_or(u64::MAX));
        SpendTally {
            starts,
            ends,
            keys: HashMap::new(),
        }
    }

    /// Adds one ledger record's cost.
    pub fn add(&mut self, key: &str, ts_unix_ms: u64, cost_nano: u64) {
        if cost_nano == 0 {
            return;
        }
        let entry = match self.keys.get_mut(key) {
            Some(e) => e,
            None => self.keys.entry(key.to_owned()).or_default(),
        };
        for ((spent, start), end) in entry.iter_mut().zip(self.starts).zip(self.ends) {
            if (start..end).contains(&ts_unix_ms) {
                *spent = spent.saturating_add(cost_nano);
            }
        }
    }

    /// Adds one ledger line (without its newline); `false` when it cannot
    /// be read (blank lines are skipped and read fine).
    pub fn add_line(&mut self, line: &[u8]) -> bool {
        if line.iter().all(u8::is_ascii_whitespace) {
            return true;
        }
        let Ok(l) = serde_json::from_slice::<crate::ledger::Line<'_>>(line) else {
            return false;
        };
        // Periods begin on whole seconds: seconds place a line exactly.
        let Some(secs) = crate::time::parse_rfc3339(l.ts) else {
            return false;
        };
        self.add(&l.key, secs * 1000, l.spend_nano_usd());
        true
    }

    /// What `key` spent per period kind.
    pub fn get(&self, key: &str) -> [u64; 4] {
        self.keys.get(key).copied().unwrap_or_default()
    }

    /// The start of each period kind's current period (Unix ms).
    pub fn starts(&self) -> [u64; 4] {
        self.starts
    }

    /// Counts only records before `unix_ms` from now on: a rebuild after a
    /// failover takes the ledger up to a cut-off, and what was settled
    /// since from the shared store.
    pub fn cut_off(&mut self, unix_ms: u64) {
        for end in &mut self.ends {
            *end = (*end).min(unix_ms);
        }
    }
}
