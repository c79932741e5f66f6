//! One endpoint's passive health: what the answers to real requests say
//! about it, as a state machine with time passed in.
//!
//! - **Healthy**: every request may go. [`EJECT_AFTER`] failures in a row
//!   eject it.
//! - **Ejected** until an instant: no request goes (unless every endpoint
//!   is ejected: then the one that comes back soonest is tried anyway).
//!   The cool-down starts at [`FIRST_COOLDOWN`] and doubles with every
//!   failed trial, up to [`MAX_COOLDOWN`]. A 429 with `Retry-After` ejects
//!   it for that long instead.
//! - **Trial**: the cool-down passed and one request is on its way. Its
//!   success readmits the endpoint (and the cool-down starts over); its
//!   failure ejects it again for twice as long.
//!
//! An ejected endpoint is also **probed** on a timer (`--upstream-probe-
//! interval`, counted from its ejection): a cheap request of the runtime's
//! (`GET {upstream}/models`) that it answers readmits it, so a recovered
//! endpoint serves again within one interval whatever the traffic (trial
//! requests alone depend on a request arriving just after the cool-down,
//! and each failed one doubles it).

use std::time::Duration;

use crate::time::Instant;

/// Failures in a row that eject a healthy endpoint.
pub(super) const EJECT_AFTER: u32 = 3;
/// The first cool-down.
pub(super) const FIRST_COOLDOWN: Duration = Duration::from_secs(1);
/// The longest cool-down.
pub(super) const MAX_COOLDOWN: Duration = Duration::from_secs(60);
/// The longest a `Retry-After` ejects for (a provider's hour-long value
/// would otherwise take the endpoint out of the pool for good).
pub(super) const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// How an attempt on an endpoint ended, for its health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It answered: the client got its response head (or, for a 4xx other
    /// than 408 and 429, its error: the request's fault, not the
    /// endpoint's).
    Answered,
    /// It failed in this way before the client got anything.
    Failed(FailureKind),
    /// It answered 429 and said when to come back.
    RetryAfter(Duration),
    /// The attempt ended without a verdict (the client left, the gateway
    /// is shutting down, the provider failed after the client's first
    /// byte).
    Abandoned,
}

/// What went wrong with an attempt, as the metrics name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// No connection: the name did not resolve, the connection was refused
    /// or timed out, or TLS failed.
    Connect,
    /// No response head, or no first event, in time.
    Timeout,
    /// A 5xx (or 408) answer.
    Status5xx,
    /// A 429 answer without `Retry-After`.
    Status429,
    /// The connection broke, or the stream ended, before the first byte for
    /// the client.
    Reset,
    /// Not HTTP, not JSON, the wrong content type, an error event instead
    /// of a first event.
    Invalid,
}

impl FailureKind {
    /// Every kind, in a stable order.
    pub const ALL: [FailureKind; 6] = [
        FailureKind::Connect,
        FailureKind::Timeout,
        FailureKind::Status5xx,
        FailureKind::Status429,
        FailureKind::Reset,
        FailureKind::Invalid,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Connect => "connect",
            FailureKind::Timeout => "timeout",
            FailureKind::Status5xx => "status_5xx",
            FailureKind::Status429 => "status_429",
            FailureKind::Reset => "reset",
            FailureKind::Invalid => "invalid",
        }
    }
}

/// Where an endpoint stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Requests go to it.
    Healthy,
    /// No request goes to it before `until`.
    Ejected {
        /// When it may be tried again.
        until: Instant,
    },
    /// One request is trying it.
    Trial,
}

impl State {
    /// The metric and admin label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            State::Healthy => "healthy",
            State::Ejected { .. } => "ejected",
            State::Trial => "trial",
        }
    }
}

/// A change worth a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Ejected until `until` (for `cooldown`).
    Ejected {
        /// When it may be tried again.
        until: Instant,
    },
    /// A trial succeeded: back in the pool.
    Readmitted,
}

/// One endpoint's health.
#[derive(Debug, Clone)]
pub(crate) struct Health {
    state: State,
    failures: u32,
    cooldown: Duration,
    /// Why it was last ejected (a failure kind, or `retry_after`).
    reason: Option<&'static str>,
    /// When it was last probed (or ejected): the next probe is an interval
    /// later.
    probed_at: Option<Instant>,
    /// A probe is on its way.
    probing: bool,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            state: State::Healthy,
            failures: 0,
            cooldown: FIRST_COOLDOWN,
            reason: None,
            probed_at: None,
            probing: false,
        }
    }
}

impl Health {
    /// Where it stands.
    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// Failures in a row.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// Why it was last ejected.
    pub(crate) fn reason(&self) -> Option<&'static str> {
        self.reason
    }

    /// Whether a request may go to it at `now` without waiting for others.
    pub(crate) fn available(&self, now: Instant) -> bool {
        match self.state {
            State::Healthy => true,
            State::Ejected { until } => now >= until,
            State::Trial => false,
        }
    }

    /// When it comes back, if ejected.
    pub(crate) fn back_at(&self) -> Option<Instant> {
        match self.state {
            State::Ejected { until } => Some(until),
            _ => None,
        }
    }

    /// A request goes to it at `now`: an ejected endpoint (its cool-down
    /// over, or every endpoint ejected) is on trial from now on.
    pub(crate) fn sent(&mut self) {
        if let State::Ejected { .. } = self.state {
            self.state = State::Trial;
        }
    }

    /// How a request sent to it ended, at `now`. `trial` says whether that
    /// request was the trial (other requests that were already on their
    /// way when it was ejected do not decide its fate).
    pub(crate) fn report(&mut self, outcome: Outcome, trial: bool, now: Instant) -> Option<Change> {
        let on_trial = trial && self.state == State::Trial;
        match (self.state, outcome) {
            (_, Outcome::RetryAfter(d)) => {
                let until = now + d.min(MAX_RETRY_AFTER);
                let prolongs = self.back_at().is_none_or(|u| until > u);
                self.failures = 0;
                self.probed_at = Some(now);
                self.reason = Some("retry_after");
                if prolongs {
                    self.state = State::Ejected { until };
                    return Some(Change::Ejected { until });
                }
                None
            }
            (State::Trial, Outcome::Answered) if on_trial => {
                self.state = State::Healthy;
                self.failures = 0;
                self.cooldown = FIRST_COOLDOWN;
                Some(Change::Readmitted)
            }
            (State::Trial, Outcome::Failed(kind)) if on_trial => {
                self.cooldown = (self.cooldown * 2).min(MAX_COOLDOWN);
                self.eject(kind.as_str(), now)
            }
            (State::Trial, Outcome::Abandoned) if on_trial => {
                // No verdict: the next request tries again.
                self.state = State::Ejected { until: now };
                None
            }
            (State::Healthy, Outcome::Answered) => {
                self.failures = 0;
                None
            }
            (State::Healthy, Outcome::Failed(kind)) => {
                self.failures += 1;
                (self.failures >= EJECT_AFTER).then(|| self.eject(kind.as_str(), now))?
            }
            _ => None,
        }
    }

    /// Whether a probe is due at `now`, `interval` after the ejection or
    /// the last probe (never while one is on its way); when it is, the
    /// probe counts as sent.
    pub(crate) fn probe_due(&mut self, now: Instant, interval: Duration) -> bool {
        let ejected = matches!(self.state, State::Ejected { .. });
        let due = self.probed_at.is_none_or(|at| now >= at + interval);
        // The provider said when to come back (429 + `Retry-After`): a
        // cheap request answering meanwhile says nothing about its limit.
        let told = self.reason == Some("retry_after") && self.back_at().is_some_and(|u| now < u);
        if !ejected || self.probing || interval.is_zero() || !due || told {
            return false;
        }
        self.probing = true;
        self.probed_at = Some(now);
        true
    }

    /// A probe ended at `now`: `alive` when the endpoint answered it (an
    /// HTTP status below 500 other than 408 and 429). An answer readmits
    /// an ejected endpoint; anything else leaves it as it is, to be
    /// probed again an interval later.
    pub(crate) fn probed(&mut self, alive: bool, now: Instant) -> Option<Change> {
        self.probing = false;
        self.probed_at = Some(now);
        if alive && matches!(self.state, State::Ejected { .. }) {
            self.state = State::Healthy;
            self.failures = 0;
            self.cooldown = FIRST_COOLDOWN;
            return Some(Change::Readmitted);
        }
        None
    }

    fn eject(&mut self, reason: &'static str, now: Instant) -> Option<Change> {
        self.probed_at = Some(now);
        let until = now + self.cooldown;
        self.state = State::Ejected { until };
        self.failures = 0;
        self.reason = Some(reason);
        Some(Change::Ejected { until })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Instant = Instant::ZERO;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn fail(h: &mut Health, trial: bool, now: Instant) -> Option<Change> {
        h.report(Outcome::Failed(FailureKind::Status5xx), trial, now)
    }

    #[test]
    fn three_failures_in_a_row_eject_and_an_answer_resets_the_count() {
        let mut h = Health::default();
        assert_eq!(fail(&mut h, false, T0), None);
        assert_eq!(fail(&mut h, false, T0), None);
        assert_eq!(h.report(Outcome::Answered, false, T0), None);
        assert_eq!(h.failures(), 0);
        fail(&mut h, false, T0);
        fail(&mut h, false, T0);
        assert_eq!(
            fail(&mut h, false, T0 + s(5)),
            Some(Change::Ejected { until: T0 + s(6) })
        );
        assert_eq!(h.reason(), Some("status_5xx"));
        assert!(!h.available(T0 + s(5)));
        assert!(h.available(T0 + s(6)));
    }

    #[test]
    fn the_cool_down_doubles_with_failed_trials_up_to_a_minute_and_starts_over() {
        let mut h = Health::default();
        for _ in 0..EJECT_AFTER {
            fail(&mut h, false, T0);
        }
        let mut now = T0;
        let mut expect = 1;
        for _ in 0..8 {
            let until = h.back_at().unwrap();
            assert_eq!(until, now + s(expect));
            now = until;
            assert!(h.available(now));
            h.sent();
            assert_eq!(h.state(), State::Trial);
            assert!(!h.available(now), "one trial at a time");
            fail(&mut h, true, now);
            expect = (expect * 2).min(60);
        }
        let until = h.back_at().unwrap();
        assert_eq!(until - now, s(60));
        h.sent();
        assert_eq!(
            h.report(Outcome::Answered, true, until),
            Some(Change::Readmitted)
        );
        assert_eq!(h.state(), State::Healthy);
        for _ in 0..EJECT_AFTER {
            fail(&mut h, false, until);
        }
        assert_eq!(h.back_at(), Some(until + s(1)), "the cool-down starts over");
    }

    #[test]
    fn retry_after_ejects_for_that_long_and_late_answers_do_not_readmit() {
        let mut h = Health::default();
        assert_eq!(
            h.report(Outcome::RetryAfter(s(7)), false, T0),
            Some(Change::Ejected { until: T0 + s(7) })
        );
        assert_eq!(h.reason(), Some("retry_after"));
        // A request sent before the 429 answers meanwhile: no verdict.
        assert_eq!(h.report(Outcome::Answered, false, T0 + s(1)), None);
        assert_eq!(h.state(), State::Ejected { until: T0 + s(7) });
        // A shorter Retry-After does not shorten it.
        assert_eq!(h.report(Outcome::RetryAfter(s(2)), false, T0 + s(1)), None);
        assert_eq!(h.back_at(), Some(T0 + s(7)));
        // Capped at an hour.
        h.report(Outcome::RetryAfter(s(86_400)), false, T0);
        assert_eq!(h.back_at(), Some(T0 + MAX_RETRY_AFTER));
    }

    #[test]
    fn an_ejected_endpoint_is_probed_each_interval_and_an_answer_readmits_it() {
        let every = s(5);
        let mut h = Health::default();
        assert!(!h.probe_due(T0, every), "a healthy endpoint is not probed");
        for _ in 0..EJECT_AFTER {
            fail(&mut h, false, T0);
        }
        assert!(
            !h.probe_due(T0 + s(4), every),
            "an interval after the ejection"
        );
        assert!(h.probe_due(T0 + s(5), every));
        assert!(!h.probe_due(T0 + s(11), every), "one probe at a time");
        assert_eq!(h.probed(false, T0 + s(6)), None);
        assert!(!h.probe_due(T0 + s(10), every));
        assert!(h.probe_due(T0 + s(11), every));
        assert_eq!(h.probed(true, T0 + s(11)), Some(Change::Readmitted));
        assert_eq!(h.state(), State::Healthy);
        // A failed trial meanwhile doubled the cool-down: it starts over.
        for _ in 0..EJECT_AFTER {
            fail(&mut h, false, T0 + s(12));
        }
        assert_eq!(h.back_at(), Some(T0 + s(13)));
        assert!(!h.probe_due(T0 + s(16), s(0)), "an interval of zero: never");
        // Not before the end of a `Retry-After` the provider asked for.
        let mut h = Health::default();
        h.report(Outcome::RetryAfter(s(60)), false, T0);
        assert!(!h.probe_due(T0 + s(30), every));
        assert!(h.probe_due(T0 + s(60), every));
    }

    #[test]
    fn an_abandoned_trial_leaves_the_next_request_to_try() {
        let mut h = Health::default();
        for _ in 0..EJECT_AFTER {
            fail(&mut h, false, T0);
        }
        h.sent();
        assert_eq!(h.report(Outcome::Abandoned, true, T0 + s(2)), None);
        assert!(h.available(T0 + s(2)));
        // Reports of requests that were not the trial leave it alone.
        h.sent();
        assert_eq!(fail(&mut h, false, T0 + s(2)), None);
        assert_eq!(h.state(), State::Trial);
    }
}
