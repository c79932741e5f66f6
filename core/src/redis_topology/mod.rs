//! Where a Redis command goes when Redis is more than one server: the
//! cluster's key slots (CRC16 with hash tags), its slot map and
//! redirections (`MOVED`, `ASK`), the errors after which a command is
//! sent again (a failover in progress, a replica written to), what a
//! Sentinel answers about its primary, and what `INFO replication` says
//! of a server's role and history; and how one command is sent again
//! (`retry.rs`: after a redirection, a failover step or a lost
//! connection, with pauses, never twice where it may have run). Pure: the
//! runtimes' client does the I/O and asks this module what each answer
//! means and what to do next.

mod retry;

pub use retry::{RedisAttempt, RedisNext, RedisRetry, TopologyUpdate};

use crate::redis_protocol::RedisReply;

/// How many slots a Redis Cluster has.
pub const CLUSTER_SLOTS: u16 = 16384;

/// CRC16-XMODEM (polynomial 0x1021, initial 0), the cluster's key hash.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of `key`: the hash of its first non-empty `{…}` hash tag if
/// it has one, else of the whole key, as every cluster client computes it.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) % CLUSTER_SLOTS
}

/// A node's address as Redis names it.
pub type NodeAddr = (String, u16);

/// What an error reply means for where the command goes next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisErrorKind {
    /// `MOVED slot host:port`: the slot lives there now (the map is stale).
    Moved {
        /// The slot.
        slot: u16,
        /// Where it is served.
        to: NodeAddr,
    },
    /// `ASK slot host:port`: this one command goes there, after `ASKING`
    /// (the slot is being migrated).
    Ask {
        /// The slot.
        slot: u16,
        /// Where this command goes.
        to: NodeAddr,
    },
    /// A failover or a migration is under way (`TRYAGAIN`, `CLUSTERDOWN`,
    /// `LOADING`, `MASTERDOWN`): send it again shortly.
    Transient,
    /// The server is a replica (`READONLY`), or lost its role: ask again
    /// which server is the primary.
    NotPrimary,
    /// The server does not have the script (`NOSCRIPT`): load it there.
    NoScript,
    /// Anything else: the command's own failure.
    Other,
}

/// Classifies an error reply's text (`MOVED 3999 10.0.0.2:6379`);
/// `answered_by` is the host of the node that said it, for a redirection
/// that names only a port (`MOVED 3999 :6380`).
pub fn classify_error(text: &str, answered_by: &str) -> RedisErrorKind {
    let mut words = text.split_ascii_whitespace();
    let first = words.next().unwrap_or("");
    match first {
        "MOVED" | "ASK" => {
            let slot = words.next().and_then(|s| s.parse::<u16>().ok());
            let to = words.next().and_then(|a| parse_node_addr(a, answered_by));
            match (slot, to) {
                (Some(slot), Some(to)) if slot < CLUSTER_SLOTS => {
                    if first == "MOVED" {
                        RedisErrorKind::Moved { slot, to }
                    } else {
                        RedisErrorKind::Ask { slot, to }
                    }
                }
                _ => RedisErrorKind::Other,
            }
        }
        "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" | "MASTERDOWN" => RedisErrorKind::Transient,
        "READONLY" => RedisErrorKind::NotPrimary,
        "NOSCRIPT" => RedisErrorKind::NoScript,
        _ => RedisErrorKind::Other,
    }
}

/// `host:port` as a redirection or `CLUSTER SLOTS` names it (an IPv6
/// address without brackets, `::1:7000`, splits at its last colon); an
/// empty host is `default_host`.
pub fn parse_node_addr(addr: &str, default_host: &str) -> Option<NodeAddr> {
    let (host, port) = addr.rsplit_once(':')?;
    let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { default_host } else { host };
    Some((host.to_owned(), port))
}

/// Which primary serves each slot, from `CLUSTER SLOTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    /// Per slot, an index into `nodes` (`u16::MAX`: not served).
    owner: Vec<u16>,
    nodes: Vec<NodeAddr>,
}

impl SlotMap {
    /// Reads a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, …],
    /// replicas…], …]`. A primary named with an empty host or `?` is the
    /// host of the node asked (`asked_host`). `Err` says what is wrong.
    pub fn from_cluster_slots(reply: &RedisReply, asked_host: &str) -> Result<SlotMap, String> {
        let RedisReply::Array(Some(ranges)) = reply else {
            return Err(format!("CLUSTER SLOTS answered {reply:?}"));
        };
        let mut map = SlotMap {
            owner: vec![u16::MAX; usize::from(CLUSTER_SLOTS)],
            nodes: Vec::new(),
        };
        for range in ranges {
            let RedisReply::Array(Some(parts)) = range else {
                return Err("a CLUSTER SLOTS range is not an array".into());
            };
            let (Some(RedisReply::Integer(start)), Some(RedisReply::Integer(end))) =
                (parts.first(), parts.get(1))
            else {
                return Err("a CLUSTER SLOTS range has no bounds".into());
            };
            let (start, end) = match (u16::try_from(*start), u16::try_from(*end)) {
                (Ok(s), Ok(e)) if s <= e && e < CLUSTER_SLOTS => (s, e),
                _ => {
                    return Err(format!(
                        "a CLUSTER SLOTS range {start}-{end} is out of range"
                    ));
                }
            };
            let Some(RedisReply::Array(Some(primary))) = parts.get(2) else {
                return Err(format!("the slots {start}-{end} have no primary"));
            };
            let host = match primary.first() {
                Some(RedisReply::Bulk(Some(h))) => String::from_utf8_lossy(h).into_owned(),
                _ => return Err(format!("the slots {start}-{end} have no primary's host")),
            };
            let port = match primary.get(1) {
                Some(RedisReply::Integer(p)) => u16::try_from(*p).ok().filter(|p| *p != 0),
                _ => None,
            }
            .ok_or_else(|| format!("the slots {start}-{end} have no primary's port"))?;
            let host = if host.is_empty() || host == "?" {
                asked_host.to_owned()
            } else {
                host
            };
            let i = map.index_of(&(host, port));
            for slot in start..=end {
                map.owner[usize::from(slot)] = i;
            }
        }
        if map.nodes.is_empty() {
            return Err("CLUSTER SLOTS lists no slot (is the cluster set up?)".into());
        }
        Ok(map)
    }

    fn index_of(&mut self, addr: &NodeAddr) -> u16 {
        match self.nodes.iter().position(|n| n == addr) {
            Some(i) => i as u16,
            None => {
                self.nodes.push(addr.clone());
                (self.nodes.len() - 1) as u16
            }
        }
    }

    /// The primary serving `slot`, if the map has one.
    pub fn node_for(&self, slot: u16) -> Option<&NodeAddr> {
        let i = *self.owner.get(usize::from(slot))?;
        self.nodes.get(usize::from(i))
    }

    /// Records a `MOVED`: `slot` is served by `to` now.
    pub fn moved(&mut self, slot: u16, to: &NodeAddr) {
        if usize::from(slot) < self.owner.len() {
            let i = self.index_of(to);
            self.owner[usize::from(slot)] = i;
        }
    }

    /// Every primary the map names.
    pub fn nodes(&self) -> &[NodeAddr] {
        &self.nodes
    }
}

/// A Sentinel's answer to `SENTINEL get-master-addr-by-name`: the
/// primary's address, or `None` when it does not know the name.
pub fn sentinel_primary(reply: &RedisReply) -> Result<Option<NodeAddr>, String> {
    match reply {
        RedisReply::Array(None) | RedisReply::Bulk(None) => Ok(None),
        RedisReply::Array(Some(v)) if v.len() == 2 => {
            let text = |r: &RedisReply| match r {
                RedisReply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            };
            let host = text(&v[0]).filter(|h| !h.is_empty());
            let port = text(&v[1]).and_then(|p| p.parse::<u16>().ok().filter(|p| *p != 0));
            match (host, port) {
                (Some(h), Some(p)) => Ok(Some((h, p))),
                _ => Err(format!("the Sentinel answered {reply:?}")),
            }
        }
        RedisReply::Error(e) => Err(format!("the Sentinel answered: {e}")),
        other => Err(format!("the Sentinel answered {other:?}")),
    }
}

/// What `INFO replication` says of a server.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Replication {
    /// `role:master`.
    pub primary: bool,
    /// `role:slave`: a replica (other roles, such as KeyDB's
    /// `active-replica`, are neither).
    pub replica: bool,
    /// `master_replid`: the history of the data it holds. A replica
    /// promoted by a failover starts a new one: what was written under the
    /// old id may be partly lost. (A server restarted from its own files
    /// keeps the id it saved.)
    pub history: String,
}

/// Reads `INFO replication`'s text.
pub fn parse_replication(info: &str) -> Replication {
    let mut r = Replication::default();
    for line in info.lines() {
        if let Some(role) = line.trim().strip_prefix("role:") {
            r.primary = role == "master";
            r.replica = role == "slave";
        } else if let Some(id) = line.trim().strip_prefix("master_replid:") {
            r.history = id.to_owned();
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> RedisReply {
        RedisReply::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn slots_are_the_clusters() {
        // The specification's test vector, and keys whose slots redis-cli
        // (`CLUSTER KEYSLOT`) gives.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"user1000"));
        // An empty tag, or none closed, hashes the whole key.
        assert_eq!(
            key_slot(b"foo{}{bar}"),
            crc16(b"foo{}{bar}") % CLUSTER_SLOTS
        );
        assert_eq!(key_slot(b"foo{bar"), crc16(b"foo{bar") % CLUSTER_SLOTS);
        // Only the first tag counts.
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"a{b}c{d}"), key_slot(b"b"));
    }

    #[test]
    fn errors_say_where_to_go() {
        assert_eq!(
            classify_error("MOVED 3999 127.0.0.1:6381", "10.0.0.1"),
            RedisErrorKind::Moved {
                slot: 3999,
                to: ("127.0.0.1".into(), 6381)
            }
        );
        assert_eq!(
            classify_error("ASK 3999 :6381", "10.0.0.1"),
            RedisErrorKind::Ask {
                slot: 3999,
                to: ("10.0.0.1".into(), 6381)
            }
        );
        assert_eq!(
            classify_error("MOVED 3999 ::1:7000", "x"),
            RedisErrorKind::Moved {
                slot: 3999,
                to: ("::1".into(), 7000)
            }
        );
        for bad in [
            "MOVED",
            "MOVED 99999 a:1",
            "MOVED 1 a",
            "MOVED 1 a:0",
            "ASK x a:1",
        ] {
            assert_eq!(classify_error(bad, "h"), RedisErrorKind::Other, "{bad}");
        }
        for t in [
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
            "LOADING Redis is loading the dataset in memory",
            "MASTERDOWN Link with MASTER is down",
        ] {
            assert_eq!(classify_error(t, "h"), RedisErrorKind::Transient, "{t}");
        }
        assert_eq!(
            classify_error("READONLY You can't write against a read only replica.", "h"),
            RedisErrorKind::NotPrimary
        );
        assert_eq!(
            classify_error("NOSCRIPT No matching script.", "h"),
            RedisErrorKind::NoScript
        );
        assert_eq!(classify_error("ERR wrong", "h"), RedisErrorKind::Other);
    }

    #[test]
    fn slot_maps() {
        let node = |h: &str, p: i64| {
            RedisReply::Array(Some(vec![
                bulk(h),
                RedisReply::Integer(p),
                bulk("0123abcd"),
            ]))
        };
        let range = |s: i64, e: i64, primary: RedisReply| {
            RedisReply::Array(Some(vec![
                RedisReply::Integer(s),
                RedisReply::Integer(e),
                primary,
                node("127.0.0.1", 7005),
            ]))
        };
        let reply = RedisReply::Array(Some(vec![
            range(0, 5460, node("127.0.0.1", 7000)),
            range(5461, 10922, node("", 7001)),
            range(10923, 16383, node("127.0.0.1", 7002)),
        ]));
        let mut map = SlotMap::from_cluster_slots(&reply, "10.1.1.1").unwrap();
        assert_eq!(map.node_for(0), Some(&("127.0.0.1".to_owned(), 7000)));
        assert_eq!(map.node_for(5461), Some(&("10.1.1.1".to_owned(), 7001)));
        assert_eq!(map.node_for(16383), Some(&("127.0.0.1".to_owned(), 7002)));
        assert_eq!(map.node_for(16384), None);
        assert_eq!(map.nodes().len(), 3);
        map.moved(0, &("127.0.0.1".to_owned(), 7003));
        assert_eq!(map.node_for(0), Some(&("127.0.0.1".to_owned(), 7003)));
        assert_eq!(map.node_for(1), Some(&("127.0.0.1".to_owned(), 7000)));
        // A partial map leaves the rest unserved.
        let partial = RedisReply::Array(Some(vec![range(0, 10, node("h", 1))]));
        let map = SlotMap::from_cluster_slots(&partial, "x").unwrap();
        assert_eq!(map.node_for(11), None);
        for bad in [
            RedisReply::Array(Some(vec![])),
            RedisReply::Error("ERR This instance has cluster support disabled".into()),
            RedisReply::Array(Some(vec![range(10, 5, node("h", 1))])),
            RedisReply::Array(Some(vec![range(0, 16384, node("h", 1))])),
            RedisReply::Array(Some(vec![range(0, 1, node("h", 0))])),
            RedisReply::Array(Some(vec![RedisReply::Integer(1)])),
        ] {
            assert!(SlotMap::from_cluster_slots(&bad, "x").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sentinels_and_roles() {
        let reply = RedisReply::Array(Some(vec![bulk("10.0.0.5"), bulk("6380")]));
        assert_eq!(
            sentinel_primary(&reply),
            Ok(Some(("10.0.0.5".to_owned(), 6380)))
        );
        assert_eq!(sentinel_primary(&RedisReply::Array(None)), Ok(None));
        assert!(sentinel_primary(&RedisReply::Error("ERR no".into())).is_err());
        assert!(sentinel_primary(&RedisReply::Array(Some(vec![bulk("h"), bulk("x")]))).is_err());
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nmaster_replid:8e2b\r\nmaster_replid2:0000\r\n";
        assert_eq!(
            parse_replication(info),
            Replication {
                primary: true,
                replica: false,
                history: "8e2b".into()
            }
        );
        let replica = parse_replication("role:slave\r\nmaster_replid:8e2b\r\n");
        assert!(!replica.primary && replica.replica);
        let active = parse_replication("role:active-replica\r\n");
        assert!(!active.primary && !active.replica);
    }
}
