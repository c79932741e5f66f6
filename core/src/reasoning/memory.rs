//! The reasoning the gateway served, remembered for the clients that drop
//! it: an answer that made tool calls leaves its reasoning here under its
//! key and each call's id, and a later request of the same key whose
//! assistant message carries those calls without reasoning gets it back
//! (`replay.rs`). Bounded in entries and bytes, each entry kept for a time
//! to live; the oldest go first. With shared limits the same entries are
//! also kept in Redis ([`shared_key`]), so any instance restores what
//! another served.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::time::Instant;

/// What an entry costs besides its text and names (the map's and the
/// queue's slots, the allocation headers): so that many tiny entries are
/// bounded by bytes too.
const ENTRY_OVERHEAD: usize = 96;

/// How much the memory holds, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// Most entries (one per tool call id).
    pub entries: usize,
    /// Most bytes, texts and names counted.
    pub bytes: usize,
    /// How long an entry is kept.
    pub ttl: Duration,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        MemoryLimits {
            entries: 100_000,
            bytes: 256 << 20,
            ttl: Duration::from_secs(3600),
        }
    }
}

/// The Redis key of `key`'s reasoning for the call `call_id`: the key's
/// name as the hash tag, as the limiter's keys have it, so that one
/// request's lookups go to one cluster slot.
pub fn shared_key(key: &str, call_id: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(24 + key.len() + call_id.len());
    k.extend_from_slice(b"chatgate:reasoning:{");
    k.extend_from_slice(key.as_bytes());
    k.extend_from_slice(b"}:");
    k.extend_from_slice(call_id);
    k
}

struct Entry {
    /// The reasoning, as a JSON string (quotes included).
    text: Arc<[u8]>,
    expires: Instant,
    /// Which insertion it is (the queue may still name an older one).
    seq: u64,
}

/// The remembered reasoning of one process. Not synchronised: the gateway
/// keeps it behind a lock.
pub struct ReasoningMemory {
    limits: MemoryLimits,
    /// By `key name \0 call id`.
    map: FxHashMap<Box<[u8]>, Entry>,
    /// Insertions, oldest first (all entries live as long: the oldest
    /// expires first).
    order: VecDeque<(Box<[u8]>, u64)>,
    bytes: usize,
    seq: u64,
}

impl std::fmt::Debug for ReasoningMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReasoningMemory")
            .field("entries", &self.map.len())
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

fn map_key(key: &str, call_id: &[u8]) -> Box<[u8]> {
    let mut k = Vec::with_capacity(key.len() + 1 + call_id.len());
    k.extend_from_slice(key.as_bytes());
    k.push(0);
    k.extend_from_slice(call_id);
    k.into_boxed_slice()
}

impl ReasoningMemory {
    /// An empty memory holding at most `limits`.
    pub fn new(limits: MemoryLimits) -> Self {
        ReasoningMemory {
            limits,
            map: FxHashMap::default(),
            order: VecDeque::new(),
            bytes: 0,
            seq: 0,
        }
    }

    /// Its limits.
    pub fn limits(&self) -> MemoryLimits {
        self.limits
    }

    /// Entries held.
    pub fn entries(&self) -> usize {
        self.map.len()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Remembers `text` (a JSON string) as `key`'s reasoning for each of
    /// `call_ids` from `now`. A text that alone is over the byte limit is
    /// not kept.
    pub fn remember(&mut self, key: &str, call_ids: &[Vec<u8>], text: &Arc<[u8]>, now: Instant) {
        self.expire(now);
        for id in call_ids {
            let k = map_key(key, id);
            let cost = cost(&k, text);
            if cost > self.limits.bytes || self.limits.entries == 0 {
                return;
            }
            self.forget(&k);
            while self.map.len() >= self.limits.entries || self.bytes + cost > self.limits.bytes {
                if !self.evict_oldest() {
                    break;
                }
            }
            self.seq += 1;
            self.bytes += cost;
            self.order.push_back((k.clone(), self.seq));
            self.map.insert(
                k,
                Entry {
                    text: Arc::clone(text),
                    expires: now + self.limits.ttl,
                    seq: self.seq,
                },
            );
        }
    }

    /// `key`'s reasoning for the call `call_id`, if it is remembered and
    /// has not expired at `now`.
    pub fn recall(&mut self, key: &str, call_id: &[u8], now: Instant) -> Option<Arc<[u8]>> {
        self.expire(now);
        self.map
            .get(&map_key(key, call_id))
            .map(|e| Arc::clone(&e.text))
    }

    /// Drops the entries that expired by `now` (the oldest first, until
    /// one that has not).
    fn expire(&mut self, now: Instant) {
        while let Some((k, seq)) = self.order.front() {
            match self.map.get(k) {
                Some(e) if e.seq == *seq && e.expires > now => break,
                _ => {
                    self.evict_oldest();
                }
            }
        }
    }

    /// Drops the oldest insertion (if it still stands); false when there
    /// is none.
    fn evict_oldest(&mut self) -> bool {
        let Some((k, seq)) = self.order.pop_front() else {
            return false;
        };
        if self.map.get(&k).is_some_and(|e| e.seq == seq) {
            self.forget(&k);
        }
        true
    }

    /// Drops the entry `k`, if any (its queue slot goes when it comes up).
    fn forget(&mut self, k: &[u8]) {
        if let Some(e) = self.map.remove(k) {
            self.bytes -= cost(k, &e.text);
        }
    }
}

fn cost(k: &[u8], text: &[u8]) -> usize {
    k.len() + text.len() + ENTRY_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Instant {
        Instant::from_start(Duration::from_secs(s))
    }

    fn text(s: &str) -> Arc<[u8]> {
        Arc::from(format!("\"{s}\"").into_bytes())
    }

    #[test]
    fn an_entry_is_the_keys_own_and_lives_its_ttl() {
        let mut m = ReasoningMemory::new(MemoryLimits {
            ttl: Duration::from_secs(60),
            ..MemoryLimits::default()
        });
        m.remember(
            "alice",
            &[b"call_1".to_vec(), b"call_2".to_vec()],
            &text("r"),
            at(0),
        );
        assert_eq!(m.entries(), 2);
        assert_eq!(
            m.recall("alice", b"call_2", at(59)).as_deref(),
            Some(&b"\"r\""[..])
        );
        assert_eq!(m.recall("bob", b"call_2", at(1)), None, "another key's");
        assert_eq!(m.recall("alice", b"call_3", at(1)), None);
        assert_eq!(m.recall("alice", b"call_1", at(60)), None, "expired");
        assert_eq!((m.entries(), m.bytes()), (0, 0));
    }

    #[test]
    fn the_oldest_go_first_when_entries_or_bytes_run_out() {
        let mut m = ReasoningMemory::new(MemoryLimits {
            entries: 3,
            bytes: 1 << 20,
            ttl: Duration::from_secs(60),
        });
        for i in 0..5 {
            m.remember("k", &[format!("c{i}").into_bytes()], &text("x"), at(i));
        }
        assert_eq!(m.entries(), 3);
        assert!(m.recall("k", b"c1", at(5)).is_none());
        assert!(m.recall("k", b"c2", at(5)).is_some());
        // Again under the same id: replaced, not counted twice.
        m.remember("k", &[b"c2".to_vec()], &text("yy"), at(6));
        assert_eq!(m.entries(), 3);
        assert_eq!(m.recall("k", b"c2", at(6)).as_deref(), Some(&b"\"yy\""[..]));

        let one = cost(&map_key("k", b"c0"), &text("0123456789"));
        let mut m = ReasoningMemory::new(MemoryLimits {
            entries: 100,
            bytes: one * 2,
            ttl: Duration::from_secs(60),
        });
        for i in 0..4 {
            m.remember(
                "k",
                &[format!("c{i}").into_bytes()],
                &text("0123456789"),
                at(0),
            );
        }
        assert_eq!(m.entries(), 2);
        assert!(m.bytes() <= one * 2);
        // A text larger than the whole memory is not kept.
        let big = text(&"x".repeat(one * 2));
        m.remember("k", &[b"big".to_vec()], &big, at(0));
        assert!(m.recall("k", b"big", at(0)).is_none());
        assert_eq!(m.entries(), 2);
    }

    #[test]
    fn the_shared_key_tags_the_keys_slot() {
        assert_eq!(
            shared_key("alice", b"call_9"),
            b"chatgate:reasoning:{alice}:call_9"
        );
        assert_eq!(
            crate::redis_topology::key_slot(&shared_key("alice", b"a")),
            crate::redis_topology::key_slot(&shared_key("alice", b"b"))
        );
    }
}
