//! Failed logins, by address: after [`FREE_FAILURES`] wrong tokens in a
//! row from one address (an IPv6 address counts as its /64, what one host
//! is usually given), every further try from it waits a delay that doubles
//! from [`FIRST_DELAY_MS`] up to [`MAX_DELAY_MS`]; a right token clears the
//! address. A try during the delay is refused without its token being
//! looked at, so guessing runs at most one token per delay.
//!
//! At most [`MAX_ADDRESSES`] addresses are remembered: when full, those
//! that failed longest ago are forgotten first.

use std::sync::Mutex;

use rustc_hash::FxHashMap;

/// Wrong tokens from an address before it waits.
pub(super) const FREE_FAILURES: u32 = 3;
/// The first wait, then doubled at each further failure.
pub(super) const FIRST_DELAY_MS: u64 = 1_000;
/// The longest wait.
pub(super) const MAX_DELAY_MS: u64 = 300_000;
/// A client's address as the runtime hands it over: 16 bytes, an IPv4
/// address mapped into IPv6 (`::ffff:a.b.c.d`).
pub type Peer = [u8; 16];

/// Addresses remembered.
pub(super) const MAX_ADDRESSES: usize = 4096;
/// An address with no failure for this long starts over.
const FORGET_AFTER_MS: u64 = 3_600_000;

/// An address's failures in a row, when it may try again, and its last
/// failure (Unix ms).
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    until_ms: u64,
    last_ms: u64,
}

/// The failed logins of every address.
#[derive(Debug, Default)]
pub struct Throttle {
    by_address: Mutex<FxHashMap<Peer, Failures>>,
}

/// What counts as one address: an IPv4 address itself, an IPv6 one its
/// /64.
fn who(addr: Peer) -> Peer {
    let mapped = addr[..10].iter().all(|&b| b == 0) && addr[10..12] == [0xff, 0xff];
    let mut key = addr;
    if !mapped {
        key[8..].fill(0);
    }
    key
}

impl Throttle {
    /// `Err(seconds)` while `addr` must wait at `now_ms`.
    pub fn check(&self, addr: Peer, now_ms: u64) -> Result<(), u64> {
        let map = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(&who(addr)) {
            Some(f) if f.until_ms > now_ms => Err((f.until_ms - now_ms).div_ceil(1000)),
            _ => Ok(()),
        }
    }

    /// A wrong token from `addr` at `now_ms`: the seconds it now waits (0
    /// while it has free tries left).
    pub fn failed(&self, addr: Peer, now_ms: u64) -> u64 {
        let mut map = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        let key = who(addr);
        if !map.contains_key(&key) && map.len() >= MAX_ADDRESSES {
            map.retain(|_, f| f.last_ms + FORGET_AFTER_MS > now_ms && f.until_ms > now_ms);
            if map.len() >= MAX_ADDRESSES {
                let oldest = map.iter().min_by_key(|(_, f)| f.last_ms).map(|(a, _)| *a);
                if let Some(a) = oldest {
                    map.remove(&a);
                }
            }
        }
        let f = map.entry(key).or_insert(Failures {
            count: 0,
            until_ms: 0,
            last_ms: now_ms,
        });
        if f.last_ms + FORGET_AFTER_MS <= now_ms {
            f.count = 0;
        }
        f.count += 1;
        f.last_ms = now_ms;
        let waits = f.count.saturating_sub(FREE_FAILURES);
        if waits == 0 {
            return 0;
        }
        let delay = (FIRST_DELAY_MS << (waits - 1).min(20)).min(MAX_DELAY_MS);
        f.until_ms = now_ms + delay;
        delay / 1000
    }

    /// A right token from `addr`: it starts over.
    pub fn succeeded(&self, addr: Peer) {
        let mut map = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&who(addr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_800_000_000_000;

    fn v4(a: [u8; 4]) -> Peer {
        let mut p = [0; 16];
        p[10..12].copy_from_slice(&[0xff, 0xff]);
        p[12..].copy_from_slice(&a);
        p
    }

    fn v6(segments: [u16; 8]) -> Peer {
        let mut p = [0; 16];
        for (i, s) in segments.iter().enumerate() {
            p[2 * i..2 * i + 2].copy_from_slice(&s.to_be_bytes());
        }
        p
    }

    #[test]
    fn three_free_failures_then_a_doubling_wait_and_a_success_clears() {
        let t = Throttle::default();
        let a = v4([192, 0, 2, 7]);
        for _ in 0..FREE_FAILURES {
            assert_eq!(t.check(a, T), Ok(()));
            assert_eq!(t.failed(a, T), 0);
        }
        assert_eq!(t.failed(a, T), 1);
        assert_eq!(t.check(a, T), Err(1));
        assert_eq!(t.check(a, T + 999), Err(1));
        assert_eq!(t.check(a, T + 1000), Ok(()));
        assert_eq!(t.failed(a, T + 1000), 2);
        assert_eq!(t.failed(a, T + 3000), 4);
        // Another address is not concerned.
        assert_eq!(t.check(v4([192, 0, 2, 8]), T + 3000), Ok(()));
        // The wait stops growing.
        let mut s = 0;
        for i in 0..30 {
            s = t.failed(a, T + 10_000 + i);
        }
        assert_eq!(s, MAX_DELAY_MS / 1000);
        t.succeeded(a);
        assert_eq!(t.check(a, T + 20_000), Ok(()));
        assert_eq!(t.failed(a, T + 20_000), 0);
    }

    #[test]
    fn an_ipv6_host_is_its_64_and_the_book_is_bounded() {
        let t = Throttle::default();
        for i in 0..=FREE_FAILURES {
            let a = v6([0x2001, 0xdb8, 1, 2, 0, 0, 0, i as u16]);
            t.failed(a, T);
        }
        assert!(
            t.check(v6([0x2001, 0xdb8, 1, 2, 0xffff, 0, 0, 1]), T)
                .is_err()
        );
        assert!(t.check(v6([0x2001, 0xdb8, 1, 3, 0, 0, 0, 1]), T).is_ok());
        for i in 0..(MAX_ADDRESSES as u32 + 100) {
            t.failed(v4(i.to_be_bytes()), T + u64::from(i));
        }
        let n = t.by_address.lock().unwrap().len();
        assert!(n <= MAX_ADDRESSES, "{n}");
    }
}
