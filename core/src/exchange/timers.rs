//! Every deadline of a connection in one table, indexed by [`Timer`].
//!
//! Whatever sets a state sets its timer in the same place, and whatever
//! leaves the state stops it; [`TimerTable::next`] is the connection's
//! `poll_timeout`, and [`TimerTable::take_expired`] hands `handle_timeout`
//! each timer that passed, once (a timer that fired is no longer armed, so
//! an expired entry can never make the runtime spin).

use crate::time::Instant;

/// One deadline of a connection. The order is the order in which timers
/// that expire together are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// The provider connection read for its leftover framing after
    /// `[DONE]` gets this long (then it is closed, not pooled).
    Leftover,
    /// The client left response bytes unread this long: it is given up.
    ClientSend,
    /// A keep-alive connection waited this long for a request.
    ClientIdle,
    /// A request head took this long (slowloris): 408.
    ClientHead,
    /// A request body paused this long: 408.
    ClientBody,
    /// The drain timeout: a request still waiting on the provider is cut.
    Cut,
    /// A request waiting in its key's queue looks whether its turn came.
    QueueTurn,
    /// A request waited in its key's queue as long as it may: 429.
    QueueDeadline,
    /// The provider's connect, response head or next bytes are overdue.
    Upstream,
    /// A failed attempt's pause is over: the request is sent again.
    Retry,
    /// `finish_reason` and usage arrived and only comments followed: the
    /// stream is over for the client.
    UsageTail,
    /// `finish_reason` arrived and the provider did not end the stream.
    StreamTail,
    /// A Messages stream's provider was silent this long: a `ping` event
    /// tells the client the stream is alive.
    Ping,
    /// The Responses API's store did not answer a read or a delete this
    /// long: 503.
    Store,
    /// A stream's provider has sent no event this long: the response is
    /// committed and a keep-alive written (`--first-event-keepalive`).
    FirstEvent,
}

impl Timer {
    const ALL: [Timer; 15] = [
        Timer::Leftover,
        Timer::ClientSend,
        Timer::ClientIdle,
        Timer::ClientHead,
        Timer::ClientBody,
        Timer::Cut,
        Timer::QueueTurn,
        Timer::QueueDeadline,
        Timer::Upstream,
        Timer::Retry,
        Timer::UsageTail,
        Timer::StreamTail,
        Timer::Ping,
        Timer::Store,
        Timer::FirstEvent,
    ];
}

/// The armed deadlines.
#[derive(Debug, Clone, Default)]
pub(super) struct TimerTable {
    at: [Option<Instant>; Timer::ALL.len()],
}

impl TimerTable {
    /// Arms `timer` for `at` (moving it if it was armed).
    pub(super) fn set(&mut self, timer: Timer, at: Instant) {
        self.at[timer as usize] = Some(at);
    }

    /// Disarms `timer`.
    pub(super) fn stop(&mut self, timer: Timer) {
        self.at[timer as usize] = None;
    }

    /// Whether `timer` is armed.
    pub(super) fn is_set(&self, timer: Timer) -> bool {
        self.at[timer as usize].is_some()
    }

    /// The earliest armed deadline.
    pub(super) fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// Disarms and returns the first timer (in [`Timer`] order) that has
    /// passed at `now`.
    pub(super) fn take_expired(&mut self, now: Instant) -> Option<Timer> {
        let timer = Timer::ALL
            .into_iter()
            .find(|&t| self.at[t as usize].is_some_and(|at| at <= now))?;
        self.stop(timer);
        Some(timer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn next_is_the_earliest_and_expired_timers_fire_once_in_order() {
        let t0 = Instant::ZERO;
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(Timer::StreamTail, t0 + Duration::from_secs(30));
        t.set(Timer::Upstream, t0 + Duration::from_secs(5));
        t.set(Timer::ClientSend, t0 + Duration::from_secs(5));
        assert_eq!(t.next(), Some(t0 + Duration::from_secs(5)));
        assert_eq!(t.take_expired(t0 + Duration::from_secs(4)), None);
        let at = t0 + Duration::from_secs(5);
        assert_eq!(t.take_expired(at), Some(Timer::ClientSend));
        assert_eq!(t.take_expired(at), Some(Timer::Upstream));
        assert_eq!(t.take_expired(at), None);
        assert!(!t.is_set(Timer::Upstream));
        assert_eq!(t.next(), Some(t0 + Duration::from_secs(30)));
        t.set(Timer::StreamTail, t0 + Duration::from_secs(2));
        assert_eq!(t.next(), Some(t0 + Duration::from_secs(2)));
        t.stop(Timer::StreamTail);
        assert_eq!(t.next(), None);
    }
}
