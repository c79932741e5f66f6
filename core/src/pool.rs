//! The policy of the provider keep-alive pool.
//!
//! The runtime owns the connections; [`Pool`] decides which idle one to hand
//! out (the most recently used: its peer is least likely to have closed it),
//! when an idle one is too old to trust, and how many to keep.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Instant;

/// Idle connections of type `C`, most recently released last.
#[derive(Debug)]
pub struct Pool<C> {
    idle: VecDeque<(C, Instant)>,
    max_idle: usize,
    idle_timeout: Duration,
    reused: u64,
    opened: u64,
}

impl<C> Pool<C> {
    /// A pool keeping at most `max_idle` connections for `idle_timeout` each.
    pub fn new(max_idle: usize, idle_timeout: Duration) -> Self {
        Pool {
            idle: VecDeque::new(),
            max_idle,
            idle_timeout,
            reused: 0,
            opened: 0,
        }
    }

    /// An idle connection to reuse, if a fresh-enough one exists. Older ones
    /// met on the way are returned in `expired` for the caller to close.
    pub fn take(&mut self, now: Instant, expired: &mut Vec<C>) -> Option<C> {
        self.expire(now, expired);
        let (c, _) = self.idle.pop_back()?;
        self.reused += 1;
        Some(c)
    }

    /// Counts a newly opened connection (for statistics).
    pub fn note_opened(&mut self) {
        self.opened += 1;
    }

    /// Returns a connection to the pool; gives back the connection that must
    /// be closed instead when the pool is full (the oldest idle one).
    pub fn put(&mut self, conn: C, now: Instant) -> Option<C> {
        if self.max_idle == 0 {
            return Some(conn);
        }
        self.idle.push_back((conn, now));
        if self.idle.len() > self.max_idle {
            return self.idle.pop_front().map(|(c, _)| c);
        }
        None
    }

    /// Moves connections idle for longer than the timeout to `expired`.
    pub fn expire(&mut self, now: Instant, expired: &mut Vec<C>) {
        while let Some((_, since)) = self.idle.front() {
            if now.saturating_duration_since(*since) < self.idle_timeout {
                break;
            }
            if let Some((c, _)) = self.idle.pop_front() {
                expired.push(c);
            }
        }
    }

    /// When the oldest idle connection expires: the host sleeps until then
    /// and calls [`Pool::expire`], so idle connections are closed on time even
    /// when no request comes to take one. `None` while the pool is empty.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.idle
            .front()
            .map(|(_, since)| *since + self.idle_timeout)
    }

    /// Idle connections now.
    pub fn idle_len(&self) -> usize {
        self.idle.len()
    }

    /// Connections handed out from the pool, and opened new, so far.
    pub fn stats(&self) -> (u64, u64) {
        (self.reused, self.opened)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Instant {
        Instant::ZERO + Duration::from_secs(s)
    }

    #[test]
    fn lifo_reuse_expiry_and_bound() {
        let mut p = Pool::new(2, Duration::from_secs(10));
        let mut expired = Vec::new();
        assert_eq!(p.take(at(0), &mut expired), None);
        assert_eq!(p.put("a", at(0)), None);
        assert_eq!(p.put("b", at(1)), None);
        assert_eq!(p.put("c", at(2)), Some("a"));
        assert_eq!(p.take(at(3), &mut expired), Some("c"));
        assert_eq!(p.poll_timeout(), Some(at(11)));
        assert_eq!(p.take(at(11), &mut expired), None);
        assert_eq!(expired, ["b"]);
        assert_eq!(p.stats().0, 1);
        let mut none = Pool::new(0, Duration::from_secs(1));
        assert_eq!(none.put(1, at(0)), Some(1));
    }

    #[test]
    fn a_reaper_following_poll_timeout_empties_the_pool_on_time() {
        let mut p = Pool::new(4, Duration::from_secs(10));
        let mut expired = Vec::new();
        assert_eq!(p.poll_timeout(), None);
        p.put("a", at(0));
        p.put("b", at(5));
        // Nothing is due before the deadline.
        p.expire(at(9), &mut expired);
        assert!(expired.is_empty());
        assert_eq!(p.poll_timeout(), Some(at(10)));
        p.expire(at(10), &mut expired);
        assert_eq!(expired, ["a"]);
        assert_eq!(p.poll_timeout(), Some(at(15)));
        p.expire(at(15), &mut expired);
        assert_eq!(expired, ["a", "b"]);
        assert_eq!((p.idle_len(), p.poll_timeout()), (0, None));
    }

    #[test]
    fn only_max_idle_are_kept_oldest_closed_first() {
        let mut p = Pool::new(1, Duration::from_secs(10));
        assert_eq!(p.put(1, at(0)), None);
        assert_eq!(p.put(2, at(1)), Some(1));
        assert_eq!(p.put(3, at(2)), Some(2));
        assert_eq!(p.idle_len(), 1);
        assert_eq!(p.poll_timeout(), Some(at(12)));
    }
}
