//! What the console knows of each key and of recent failures: the last 24
//! hours by the hour, from ledger records (this process's, and the lines
//! of its ledger file read at start), so the console's figures are the
//! ledger's.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::ledger::LedgerRecord;
use crate::ledger::Line;

/// Hours kept per key: the last 24 and the one in progress.
const HOURS: u64 = 25;
/// Failures kept.
pub(super) const FAILURES: usize = 100;

/// One key's figures over some hours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Requests (every ledger line).
    pub requests: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens (reasoning included).
    pub completion_tokens: u64,
    /// Reasoning tokens.
    pub reasoning_tokens: u64,
    /// Cached prompt tokens.
    pub cached_tokens: u64,
    /// Cost, nano-dollars.
    pub cost_nano_usd: u64,
    /// Refused by a rate limit or the in-flight cap (429
    /// `rate_limit_exceeded`).
    pub rate_limited: u64,
    /// Refused by the budget (429 `insufficient_quota`).
    pub budget_refused: u64,
    /// Answered with a 5xx.
    pub errors: u64,
    /// Taken by a fallback of the model asked for (counted under the
    /// fallback).
    pub fallbacks: u64,
}

impl Tally {
    fn add(&mut self, r: &Line<'_>) {
        self.requests += 1;
        self.prompt_tokens += r.prompt_tokens;
        self.completion_tokens += r.completion_tokens;
        self.reasoning_tokens += r.reasoning_tokens;
        self.cached_tokens += r.cached_tokens;
        self.cost_nano_usd += r.cost_nano_usd;
        self.fallbacks += u64::from(r.served_model.is_some());
        match r.error.as_deref() {
            Some("rate_limit_exceeded") => self.rate_limited += 1,
            Some("insufficient_quota") => self.budget_refused += 1,
            _ if r.status >= 500 => self.errors += 1,
            _ => {}
        }
    }

    fn merge(&mut self, o: &Tally) {
        self.requests += o.requests;
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
        self.reasoning_tokens += o.reasoning_tokens;
        self.cached_tokens += o.cached_tokens;
        self.cost_nano_usd += o.cost_nano_usd;
        self.rate_limited += o.rate_limited;
        self.budget_refused += o.budget_refused;
        self.errors += o.errors;
        self.fallbacks += o.fallbacks;
    }
}

/// A request that did not complete, as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// When it finished (RFC 3339).
    pub ts: String,
    /// The key's name.
    pub key: String,
    /// The status the client got (499: it left first).
    pub status: u16,
    /// The error code it got, if any.
    pub error: Option<String>,
    /// The provider endpoint, when one was asked.
    pub endpoint: Option<String>,
    /// The request id, to find its ledger line.
    pub request_id: String,
    /// Streamed or not.
    pub stream: bool,
}

/// Names (keys, models) with the hours they had a request in (oldest
/// first), each as its Unix hour and tally.
type ByHour = FxHashMap<String, VecDeque<(u64, Tally)>>;

/// Per key and per model (the one that answered), the hours with a
/// request; and the newest failures.
#[derive(Debug, Default)]
pub(crate) struct Book {
    keys: ByHour,
    /// Each key's newest request (Unix ms).
    last_used: rustc_hash::FxHashMap<String, u64>,
    models: ByHour,
    failures: VecDeque<Failure>,
}

/// Adds `r`, which finished in `hour`, to `name`'s tallies in `book`.
fn add_to(book: &mut ByHour, name: &str, r: &Line<'_>, hour: u64) {
    let hours = match book.get_mut(name) {
        Some(h) => h,
        None => book.entry(name.to_owned()).or_default(),
    };
    match hours.iter_mut().rev().find(|(h, _)| *h == hour) {
        Some((_, t)) => t.add(r),
        None => {
            let at = hours.partition_point(|(h, _)| *h < hour);
            let mut t = Tally::default();
            t.add(r);
            hours.insert(at, (hour, t));
            let newest = hours.back().map_or(hour, |(h, _)| *h);
            while hours.front().is_some_and(|(h, _)| *h + HOURS <= newest) {
                hours.pop_front();
            }
        }
    }
}

/// `name`'s tally in `book` from `since_ms` on.
fn since_in(book: &ByHour, name: &str, since_ms: u64) -> Tally {
    let from = since_ms / 3_600_000;
    let mut t = Tally::default();
    if let Some(hours) = book.get(name) {
        for (_, h) in hours.iter().filter(|(h, _)| *h >= from) {
            t.merge(h);
        }
    }
    t
}

impl Book {
    /// Adds one request that finished at `unix_ms`, under its model too
    /// when `model_known` (the model that answered, or was asked, is in
    /// the catalogue: never a name a client made up, so clients cannot
    /// grow the book).
    pub(crate) fn add(&mut self, r: &Line<'_>, unix_ms: u64, model_known: bool) {
        let hour = unix_ms / 3_600_000;
        add_to(&mut self.keys, &r.key, r, hour);
        match self.last_used.get_mut(r.key.as_ref()) {
            Some(t) => *t = (*t).max(unix_ms),
            None => {
                self.last_used.insert(r.key.clone().into_owned(), unix_ms);
            }
        }
        if model_known {
            let model = r.served_model.as_deref().unwrap_or(&r.model);
            add_to(&mut self.models, model, r, hour);
        }
        if !r.complete {
            if self.failures.len() == FAILURES {
                self.failures.pop_front();
            }
            self.failures.push_back(Failure {
                ts: r.ts.to_owned(),
                key: r.key.clone().into_owned(),
                status: r.status,
                error: r.error.as_ref().map(|e| e.clone().into_owned()),
                endpoint: r.endpoint.as_ref().map(|e| e.clone().into_owned()),
                request_id: r.request_id.clone().into_owned(),
                stream: r.stream,
            });
        }
    }

    /// Adds one record of this process (filed under its own timestamp, as
    /// its ledger line will be); `model_known` as for [`Book::add`].
    pub(crate) fn add_record(&mut self, r: &LedgerRecord, model_known: bool) {
        self.add(&Line::of(r), r.unix_ms, model_known);
    }

    /// Adds one line of a ledger file read at start, when it finished in
    /// the 24 hours before `now_ms`, under its model when `known` says the
    /// catalogue has it; `false` when it cannot be read.
    pub(crate) fn add_line(
        &mut self,
        line: &[u8],
        now_ms: u64,
        known: impl Fn(&str) -> bool,
    ) -> bool {
        // Most of a long ledger is older than a day: its timestamp, the
        // first member the gateway writes, tells without parsing the rest.
        const TS: &[u8] = b"{\"ts\":\"";
        let oldest = (now_ms / 3_600_000).saturating_sub(HOURS - 1) * 3_600_000;
        if let Some(ts) = line
            .strip_prefix(TS)
            .and_then(|rest| rest.get(..rest.iter().position(|&c| c == b'"')?))
            .and_then(|ts| std::str::from_utf8(ts).ok())
            .and_then(crate::time::parse_rfc3339)
            && ts * 1000 + 999 < oldest
        {
            return true;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return true;
        }
        let Ok(e) = serde_json::from_slice::<Line<'_>>(line) else {
            return false;
        };
        let Some(ms) = crate::time::parse_rfc3339_ms(e.ts) else {
            return false;
        };
        if ms >= oldest {
            let model = e.served_model.as_deref().unwrap_or(&e.model);
            let known = !model.is_empty() && known(model);
            self.add(&e, ms, known);
        }
        true
    }

    /// `key`'s tally from `since_ms` on.
    pub(crate) fn since(&self, key: &str, since_ms: u64) -> Tally {
        since_in(&self.keys, key, since_ms)
    }

    /// Every model with a request from `since_ms` on (the one that
    /// answered), with its tally there.
    pub(crate) fn models_since(&self, since_ms: u64) -> Vec<(String, Tally)> {
        self.models
            .keys()
            .map(|m| (m.clone(), since_in(&self.models, m, since_ms)))
            .filter(|(_, t)| t.requests > 0)
            .collect()
    }

    /// `key`'s 24 hours up to the one holding `now_ms`, oldest first, each
    /// with its Unix hour (hours without requests are zeros).
    pub(crate) fn hours(&self, key: &str, now_ms: u64) -> Vec<(u64, Tally)> {
        let last = now_ms / 3_600_000;
        let hours = self.keys.get(key);
        (last - 23..=last)
            .map(|h| {
                let t = hours
                    .and_then(|hs| hs.iter().find(|(x, _)| *x == h))
                    .map_or_else(Tally::default, |(_, t)| *t);
                (h, t)
            })
            .collect()
    }

    /// Every key with a request in the 24 hours up to `now_ms`.
    pub(crate) fn keys(&self, now_ms: u64) -> impl Iterator<Item = &str> {
        let from = (now_ms / 3_600_000).saturating_sub(23);
        self.keys
            .iter()
            .filter(move |(_, hours)| hours.back().is_some_and(|(h, _)| *h >= from))
            .map(|(k, _)| k.as_str())
    }

    /// `key`'s newest request this process saw (its requests, and its
    /// ledger's lines of the last 24 hours read at start).
    pub(crate) fn last_used(&self, key: &str) -> Option<u64> {
        self.last_used.get(key).copied()
    }

    /// The newest failures, newest first.
    pub(crate) fn failures(&self) -> Vec<Failure> {
        self.failures.iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &str, unix_ms: u64, status: u16, cost: u64, error: Option<&str>) -> LedgerRecord {
        let mut r = LedgerRecord::new(unix_ms, "req_1", key);
        r.status = status;
        r.complete = status == 200;
        r.prompt_tokens = 10;
        r.completion_tokens = 5;
        r.cost_nano_usd = cost;
        r.error = error.map(Into::into);
        r
    }

    #[test]
    fn models_are_tallied_under_the_one_that_answered_and_bounded() {
        let mut b = Book::default();
        let t = 1_800_000_000_000;
        let mut small = rec("a", t, 200, 10, None);
        small.model = "small".into();
        b.add_record(&small, true);
        let mut fell = rec("a", t, 200, 40, None);
        fell.model = "small".into();
        fell.served_model = Some("big".into());
        b.add_record(&fell, true);
        let mut models = b.models_since(t - 1);
        models.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(models.len(), 2);
        assert_eq!((models[0].0.as_str(), models[0].1.fallbacks), ("big", 1));
        assert_eq!(
            (models[1].0.as_str(), models[1].1.cost_nano_usd),
            ("small", 10)
        );
        // Names a client made up are not models: its key's tally only.
        for n in 0..200 {
            let mut r = rec("a", t, 404, 0, Some("model_not_found"));
            r.model = format!("made-up-{n}");
            b.add_record(&r, false);
        }
        assert_eq!(b.models_since(t - 1).len(), 2);
        assert_eq!(b.since("a", t - 1).requests, 202);
        // Read back from the ledger, only the catalogue's names count.
        let mut seeded = Book::default();
        for r in [&small, &fell] {
            let line = r.to_line();
            assert!(seeded.add_line(&line[..line.len() - 1], t, |m| m == "small"));
        }
        let models = seeded.models_since(t - 1);
        assert_eq!(models.len(), 1);
        assert_eq!((models[0].0.as_str(), models[0].1.requests), ("small", 1));
    }

    #[test]
    fn tallies_by_hour_and_keeps_a_day() {
        let mut b = Book::default();
        let t0 = 1_800_000_000_000u64 / 3_600_000 * 3_600_000;
        b.add(&Line::of(&rec("a", t0 + 1, 200, 100, None)), t0 + 1, true);
        b.add(&Line::of(&rec("a", t0 + 2, 200, 100, None)), t0 + 2, true);
        let r = rec("a", t0 + 3_600_000, 429, 0, Some("insufficient_quota"));
        b.add(&Line::of(&r), t0 + 3_600_000, true);
        let r = rec("a", t0 + 3_600_001, 502, 0, Some("upstream_error"));
        b.add(&Line::of(&r), t0 + 3_600_001, true);
        let all = b.since("a", t0);
        assert_eq!(all.requests, 4);
        assert_eq!(all.cost_nano_usd, 200);
        assert_eq!(all.prompt_tokens, 40);
        assert_eq!((all.budget_refused, all.errors), (1, 1));
        assert_eq!(b.since("a", t0 + 3_600_000).requests, 2);
        let hours = b.hours("a", t0 + 3_600_000);
        assert_eq!(hours.len(), 24);
        assert_eq!(hours[22], (t0 / 3_600_000, b.since("a", t0).minus_last()));
        assert_eq!(hours[23].1.requests, 2);
        let f = b.failures();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].error.as_deref(), Some("upstream_error"));
        assert_eq!(b.keys(t0).collect::<Vec<_>>(), ["a"]);
        assert_eq!(b.keys(t0 + 30 * 3_600_000).count(), 0);
        // A day later the old hours are gone.
        b.add(
            &Line::of(&rec("a", t0, 200, 1, None)),
            t0 + 30 * 3_600_000,
            true,
        );
        assert_eq!(b.since("a", 0).requests, 1);
    }

    impl Tally {
        fn minus_last(mut self) -> Tally {
            self.requests -= 2;
            self.budget_refused -= 1;
            self.errors -= 1;
            self.prompt_tokens -= 20;
            self.completion_tokens -= 10;
            self
        }
    }

    #[test]
    fn reads_ledger_lines_of_the_last_day_only() {
        let now = 1_800_000_000_000u64;
        let mut b = Book::default();
        let line = |ms: u64| {
            let mut r = rec("k", ms, 200, 7, None);
            r.request_id = "req_x".into();
            serde_json::to_vec(&r).unwrap()
        };
        assert!(b.add_line(&line(now - 1000), now, |_| true));
        assert!(b.add_line(&line(now - 2 * 86_400_000), now, |_| true));
        assert!(b.add_line(b"   ", now, |_| true));
        assert!(!b.add_line(b"{not json", now, |_| true));
        // An old line is skipped on its timestamp alone, unread.
        assert!(b.add_line(
            b"{\"ts\":\"2020-01-01T00:00:00.000Z\", garbage",
            now,
            |_| true
        ));
        let t = b.since("k", 0);
        assert_eq!((t.requests, t.cost_nano_usd), (1, 7));
        let at = |s: &str| crate::time::parse_rfc3339_ms(s).unwrap() % 1000;
        assert_eq!(at("2027-01-15T08:00:05.123Z"), 123);
        assert_eq!(at("2027-01-15T08:00:05.1Z"), 100);
        assert_eq!(at("2027-01-15T08:00:05.123456Z"), 123);
        assert_eq!(at("2027-01-15T08:00:05Z"), 0);
    }

    #[test]
    fn keeps_the_newest_hundred_failures() {
        let mut b = Book::default();
        for i in 0..150u64 {
            let mut r = rec("k", 1000 + i, 502, 0, Some("upstream_error"));
            r.request_id = format!("req_{i}");
            b.add(&Line::of(&r), 1000 + i, true);
        }
        let f = b.failures();
        assert_eq!(f.len(), FAILURES);
        assert_eq!(f[0].request_id, "req_149");
        assert_eq!(f[99].request_id, "req_50");
    }
}
