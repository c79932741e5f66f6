//! Which Redis server a command goes to, and following it when that
//! changes: one server (`--redis`), the primary a set of Sentinels name
//! (`--redis-sentinels`), or the primary serving the key's slot in a
//! Redis Cluster (`--redis-cluster`). Core's `redis_topology` says what
//! each answer means (slots, `MOVED`/`ASK`, `READONLY`, a failover under
//! way) and, through its `RedisRetry`, whether and where a command is sent
//! again; this file follows it: the servers met, what is known of the
//! topology, and each command's attempts within the caller's deadline.
//! Asking the Sentinels or the cluster is `discovery.rs`; the connections,
//! their handshake and the wire are `wire.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chatgate_core::{
    NodeAddr, RedisAttempt, RedisReply, RedisRetry, RedisTopology, RedisUrl, SlotMap, Target,
    TopologyUpdate, key_slot,
};
use chatgate_core::{SharedRedis, StoreError};

use crate::provider::connector::Connector;
use crate::runtime::Runtime;

/// The longest wait for one Sentinel, so that a dead one leaves time to ask
/// the next.
pub(super) const SENTINEL_WAIT: Duration = Duration::from_millis(500);

/// A command for one key's slot.
pub(crate) enum Command<'a> {
    /// The limiter's script (`EVALSHA`, loading it on `NOSCRIPT`) with
    /// these keys and the arguments made for the server's replication
    /// history (`ARGV[17]`).
    Script {
        keys: &'a [String; 4],
        args: &'a (dyn Fn(&str) -> Vec<String> + Sync),
        /// Whether running it twice is the same as once. An admission or
        /// a settlement is not: one whose answer was lost after it was
        /// sent is not sent again (the caller's fallback applies).
        idempotent: bool,
    },
    /// Any other command.
    Plain(&'a [&'a [u8]]),
}

/// One Redis server: its connections and what its last handshake said.
pub(super) struct Node<R: Runtime> {
    pub(super) addr: NodeAddr,
    pub(super) connector: Connector<R>,
    /// `master_replid` at the last handshake.
    pub(super) history: Mutex<String>,
    /// Read the history again before the next script: the node may have
    /// been promoted since its pooled connections' handshakes (a cluster
    /// does not close them), so it is set whenever a map or a Sentinel
    /// names it a primary anew.
    pub(super) recheck: std::sync::atomic::AtomicBool,
}

/// Why one sending of a command failed.
pub(super) enum Failed {
    /// The command did not run: it may be sent again.
    Before(StoreError),
    /// It may have run (its answer was lost).
    After(StoreError),
}

/// What the topology knows now.
pub(super) enum Known {
    /// One server.
    Server(NodeAddr),
    /// The primary the Sentinels last named (none: ask them).
    Sentinel {
        sentinels: Vec<NodeAddr>,
        name: String,
        primary: Option<NodeAddr>,
        /// The Sentinel that answered last, asked first next time.
        first: usize,
    },
    /// The slot map (none: read it again).
    Cluster {
        seeds: Vec<NodeAddr>,
        map: Option<SlotMap>,
    },
}

/// The servers of the shared limiter's Redis.
pub(crate) struct RedisNodes<R: Runtime> {
    rt: R,
    pub(super) url: RedisUrl,
    extra_ca: Option<String>,
    pub(super) known: Mutex<Known>,
    pub(super) nodes: Mutex<HashMap<NodeAddr, Arc<Node<R>>>>,
    /// Held while the Sentinels or the cluster are asked, so that a burst
    /// of commands after a failover asks once, not once each.
    asking: async_lock::Mutex<()>,
    pub(super) sha: Mutex<Option<Vec<u8>>>,
}

impl<R: Runtime> RedisNodes<R> {
    /// The servers of `redis`; `extra_ca` is trusted for `rediss://`.
    pub(crate) fn new(rt: R, redis: SharedRedis, extra_ca: Option<&str>) -> Result<Self, String> {
        let known = match redis.topology {
            RedisTopology::Server => Known::Server((redis.url.host.clone(), redis.url.port)),
            RedisTopology::Sentinel { sentinels, primary } => Known::Sentinel {
                sentinels,
                name: primary,
                primary: None,
                first: 0,
            },
            RedisTopology::Cluster { seeds } => Known::Cluster { seeds, map: None },
        };
        let nodes = RedisNodes {
            rt,
            url: redis.url,
            extra_ca: extra_ca.map(str::to_owned),
            known: Mutex::new(known),
            nodes: Mutex::new(HashMap::new()),
            asking: async_lock::Mutex::new(()),
            sha: Mutex::new(None),
        };
        // TLS is set up once per server; a bad CA file is a start-up error.
        let first = (nodes.url.host.clone(), nodes.url.port);
        nodes.node(&first).map_err(|e| e.to_string())?;
        Ok(nodes)
    }

    /// Sends `cmd` to the server for `key`'s slot, following redirections
    /// and failovers until `deadline`, as core's [`RedisRetry`] decides. An
    /// error reply that is the command's own ([`RedisErrorKind::Other`])
    /// is returned as a reply.
    pub(crate) async fn run(
        &self,
        key: &str,
        cmd: &Command<'_>,
        deadline: std::time::Instant,
    ) -> Result<RedisReply, StoreError> {
        let slot = key_slot(key.as_bytes());
        let idempotent = match cmd {
            Command::Script { idempotent, .. } => *idempotent,
            Command::Plain(_) => true,
        };
        let mut retry = RedisRetry::new(idempotent);
        loop {
            if let Some(pause) = retry.pause() {
                if std::time::Instant::now() + pause >= deadline {
                    return Err(retry.give_up());
                }
                self.pause(pause).await;
            }
            let ask = retry.take_ask();
            let asking = ask.is_some();
            let node = match ask {
                Some(addr) => self.node(&addr),
                None => self.route(slot).await,
            };
            let (addr, attempt) = match node {
                Err(e) => (None, RedisAttempt::NoServer(e)),
                Ok(node) => {
                    let attempt = match self.exec(&node, cmd, asking).await {
                        Ok(reply) => RedisAttempt::Reply(reply),
                        Err(Failed::Before(e)) => RedisAttempt::FailedBefore(e),
                        Err(Failed::After(e)) => RedisAttempt::FailedAfter(e),
                    };
                    (Some(node.addr.clone()), attempt)
                }
            };
            let next = retry.judge(addr.as_ref(), attempt);
            match next.update {
                TopologyUpdate::Nothing => {}
                TopologyUpdate::Moved { slot, to } => self.moved(slot, &to),
                TopologyUpdate::Forget(addr) => self.forget(&addr),
            }
            if let Some(answer) = next.done {
                return answer;
            }
        }
    }

    async fn pause(&self, d: Duration) {
        self.rt.timer(std::time::Instant::now() + d).await;
    }

    /// The server a node address names, made on first use.
    pub(super) fn node(&self, addr: &NodeAddr) -> Result<Arc<Node<R>>, StoreError> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = nodes.get(addr) {
            return Ok(Arc::clone(n));
        }
        let target = Target {
            tls: self.url.tls,
            host: addr.0.clone(),
            port: addr.1,
            base_path: String::new(),
            api_key: None,
        };
        let connector = Connector::new(
            self.rt.clone(),
            target,
            self.extra_ca.as_deref(),
            64,
            Duration::from_secs(60),
        )
        .map_err(|e| StoreError::Refused(format!("redis TLS: {e}")))?;
        let node = Arc::new(Node {
            addr: addr.clone(),
            connector,
            history: Mutex::new(String::new()),
            recheck: std::sync::atomic::AtomicBool::new(false),
        });
        nodes.insert(addr.clone(), Arc::clone(&node));
        Ok(node)
    }

    /// Where `slot` goes now, asking the Sentinels or the cluster when
    /// that is not known.
    async fn route(&self, slot: u16) -> Result<Arc<Node<R>>, StoreError> {
        if let Some(addr) = self.known_route(slot) {
            return self.node(&addr);
        }
        let _asking = self.asking.lock().await;
        // Whoever asked before us may have learnt it meanwhile.
        if let Some(addr) = self.known_route(slot) {
            return self.node(&addr);
        }
        let addr = match self.what_to_ask() {
            Ask::Sentinels(sentinels, name, first) => {
                self.ask_sentinels(&sentinels, &name, first).await?
            }
            Ask::Cluster(nodes) => {
                let map = self.read_slots(&nodes).await?;
                for primary in map.nodes() {
                    if let Ok(n) = self.node(primary) {
                        n.recheck.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                let addr = map.node_for(slot).cloned();
                if let Known::Cluster { map: m, .. } =
                    &mut *self.known.lock().unwrap_or_else(|e| e.into_inner())
                {
                    *m = Some(map);
                }
                addr.ok_or_else(|| {
                    StoreError::Unreachable(format!("redis cluster: no primary serves slot {slot}"))
                })?
            }
        };
        self.node(&addr)
    }

    fn known_route(&self, slot: u16) -> Option<NodeAddr> {
        match &*self.known.lock().unwrap_or_else(|e| e.into_inner()) {
            Known::Server(addr) => Some(addr.clone()),
            Known::Sentinel { primary, .. } => primary.clone(),
            Known::Cluster { map, .. } => map.as_ref().and_then(|m| m.node_for(slot).cloned()),
        }
    }

    fn what_to_ask(&self) -> Ask {
        match &*self.known.lock().unwrap_or_else(|e| e.into_inner()) {
            Known::Server(_) => unreachable!("one server is always known"),
            Known::Sentinel {
                sentinels,
                name,
                first,
                ..
            } => Ask::Sentinels(sentinels.clone(), name.clone(), *first),
            Known::Cluster { seeds, .. } => {
                // The servers met so far first (the seeds may be gone),
                // then the seeds.
                let mut nodes: Vec<NodeAddr> = self
                    .nodes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .keys()
                    .cloned()
                    .collect();
                nodes.sort();
                for s in seeds {
                    if !nodes.contains(s) {
                        nodes.push(s.clone());
                    }
                }
                Ask::Cluster(nodes)
            }
        }
    }

    /// `work`, or [`StoreError::Timeout`] after `d`.
    pub(crate) async fn with_deadline<T>(
        &self,
        d: Duration,
        work: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let rt = self.rt.clone();
        futures_lite::future::or(work, async move {
            rt.timer(std::time::Instant::now() + d).await;
            Err(StoreError::Timeout(d))
        })
        .await
    }

    /// A `MOVED`: the slot is served elsewhere now (a failover or a
    /// migration; the next failure reads the whole map again). The node
    /// named may have been promoted since its pooled connections were
    /// made: its history is read again.
    fn moved(&self, slot: u16, to: &NodeAddr) {
        if let Known::Cluster { map: Some(m), .. } =
            &mut *self.known.lock().unwrap_or_else(|e| e.into_inner())
        {
            m.moved(slot, to);
        }
        if let Ok(n) = self.node(to) {
            n.recheck.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// `addr` failed as the primary: ask again where commands go.
    fn forget(&self, addr: &NodeAddr) {
        match &mut *self.known.lock().unwrap_or_else(|e| e.into_inner()) {
            Known::Server(_) => {}
            Known::Sentinel { primary, .. } => {
                if primary.as_ref() == Some(addr) {
                    *primary = None;
                }
            }
            Known::Cluster { map, .. } => *map = None,
        }
    }
}

pub(super) enum Ask {
    Sentinels(Vec<NodeAddr>, String, usize),
    Cluster(Vec<NodeAddr>),
}
