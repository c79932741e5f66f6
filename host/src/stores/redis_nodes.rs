//! Which Redis server a command goes to, and following it when that
//! changes: one server (`--redis`), the primary a set of Sentinels name
//! (`--redis-sentinels`), or the primary serving the key's slot in a
//! Redis Cluster (`--redis-cluster`). Core's `redis_topology` says what
//! each answer means (slots, `MOVED`/`ASK`, `READONLY`, a failover under
//! way); this module does the I/O: connections pooled per server by the
//! provider's connector (DNS, TCP, TLS for `rediss://`), the handshake
//! (`AUTH`, `SELECT`, `INFO replication`: a server's role and history),
//! the script loaded where it is missing, and each command sent again,
//! within the caller's deadline, where the topology says it now goes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chatgate_core::{
    NodeAddr, REDIS_SCRIPT, RedisErrorKind, RedisReply, RedisReplyLimits, RedisTopology, RedisUrl,
    SlotMap, Target, classify_error, encode_redis_command, key_slot, parse_redis_reply,
    parse_replication, sentinel_primary,
};
use chatgate_core::{SharedRedis, StoreError};
use futures_lite::{AsyncReadExt, AsyncWriteExt};

use crate::provider::connector::{Connector, OutboundStream};
use crate::runtime::Runtime;

/// The pause before sending again after a failover step (growing by this
/// much each time, up to [`MAX_PAUSE`]): a cluster promotes a replica, or
/// the Sentinels agree, within seconds, and meanwhile the caller's
/// deadline decides.
const STEP_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between two sendings of one command.
const MAX_PAUSE: Duration = Duration::from_millis(250);
/// The longest wait for one Sentinel, so that a dead one leaves time to ask
/// the next.
const SENTINEL_WAIT: Duration = Duration::from_millis(500);

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
struct Node<R: Runtime> {
    addr: NodeAddr,
    connector: Connector<R>,
    /// `master_replid` at the last handshake.
    history: Mutex<String>,
    /// Read the history again before the next script: the node may have
    /// been promoted since its pooled connections' handshakes (a cluster
    /// does not close them), so it is set whenever a map or a Sentinel
    /// names it a primary anew.
    recheck: std::sync::atomic::AtomicBool,
}

/// Why one sending of a command failed.
enum Failed {
    /// The command did not run: it may be sent again.
    Before(StoreError),
    /// It may have run (its answer was lost).
    After(StoreError),
}

impl Failed {
    fn error(self) -> StoreError {
        match self {
            Failed::Before(e) | Failed::After(e) => e,
        }
    }
}

/// What the topology knows now.
enum Known {
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
    url: RedisUrl,
    extra_ca: Option<String>,
    known: Mutex<Known>,
    nodes: Mutex<HashMap<NodeAddr, Arc<Node<R>>>>,
    /// Held while the Sentinels or the cluster are asked, so that a burst
    /// of commands after a failover asks once, not once each.
    asking: async_lock::Mutex<()>,
    sha: Mutex<Option<Vec<u8>>>,
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
    /// and failovers until `deadline`. An error reply that is the
    /// command's own ([`RedisErrorKind::Other`]) is returned as a reply.
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
        let mut last = StoreError::Unreachable("no answer".into());
        let mut ask: Option<NodeAddr> = None;
        for attempt in 0u32.. {
            if attempt > 0 && ask.is_none() {
                let pause = (STEP_PAUSE * attempt).min(MAX_PAUSE);
                if std::time::Instant::now() + pause >= deadline {
                    return Err(last);
                }
                self.pause(pause).await;
            }
            let node = match ask.take() {
                Some(addr) => self.node(&addr).map(|n| (n, true)),
                None => self.route(slot).await.map(|n| (n, false)),
            };
            let (node, asking) = match node {
                Ok(n) => n,
                // Credentials or TLS refused: asking again changes nothing.
                Err(e @ StoreError::Refused(_)) => return Err(e),
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            match self.exec(&node, cmd, asking).await {
                Ok(RedisReply::Error(text)) => match classify_error(&text, &node.addr.0) {
                    RedisErrorKind::Moved { slot, to } => {
                        self.moved(slot, &to);
                        last = StoreError::Protocol(format!("redis: {text}"));
                    }
                    RedisErrorKind::Ask { to, .. } => {
                        ask = Some(to);
                        last = StoreError::Protocol(format!("redis: {text}"));
                    }
                    RedisErrorKind::Transient | RedisErrorKind::NotPrimary => {
                        self.forget(&node.addr);
                        last = StoreError::Unreachable(format!(
                            "redis {}:{}: {text}",
                            node.addr.0, node.addr.1
                        ));
                    }
                    RedisErrorKind::NoScript | RedisErrorKind::Other => {
                        return Ok(RedisReply::Error(text));
                    }
                },
                Ok(reply) => return Ok(reply),
                Err(Failed::Before(e @ StoreError::Refused(_))) => return Err(e),
                Err(Failed::After(e)) if !idempotent => {
                    // Sending it again could count it twice.
                    self.forget(&node.addr);
                    return Err(e);
                }
                Err(f) => {
                    self.forget(&node.addr);
                    last = f.error();
                }
            }
        }
        Err(last)
    }

    async fn pause(&self, d: Duration) {
        self.rt.timer(std::time::Instant::now() + d).await;
    }

    /// The server a node address names, made on first use.
    fn node(&self, addr: &NodeAddr) -> Result<Arc<Node<R>>, StoreError> {
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

    /// Asks the Sentinels in turn for the primary, and checks that it is
    /// one (a Sentinel that has not yet seen a failover may name the old
    /// primary, which may be back as a replica).
    async fn ask_sentinels(
        &self,
        sentinels: &[NodeAddr],
        name: &str,
        first: usize,
    ) -> Result<NodeAddr, StoreError> {
        let mut why = Vec::new();
        let mut refused = 0;
        for i in 0..sentinels.len() {
            let at = (first + i) % sentinels.len();
            let sentinel = &sentinels[at];
            // Whatever this one answers, the next asking starts after it
            // unless it gives the primary: a dead Sentinel must not take
            // every asking's time before a live one is reached.
            if let Known::Sentinel { first, .. } =
                &mut *self.known.lock().unwrap_or_else(|e| e.into_inner())
            {
                *first = (at + 1) % sentinels.len();
            }
            let named = self.with_deadline(SENTINEL_WAIT, self.primary_of(sentinel, name));
            let addr = match named.await {
                Ok(Some(addr)) => addr,
                Ok(None) => {
                    why.push(format!(
                        "{}:{} does not know '{name}'",
                        sentinel.0, sentinel.1
                    ));
                    continue;
                }
                Err(e) => {
                    refused += usize::from(matches!(e, StoreError::Refused(_)));
                    why.push(format!("{}:{}: {e}", sentinel.0, sentinel.1));
                    continue;
                }
            };
            // The primary's handshake checks its role.
            let node = self.node(&addr)?;
            node.recheck
                .store(true, std::sync::atomic::Ordering::Relaxed);
            match self.connection(&node, true).await {
                Ok(s) => {
                    node.connector.release(s);
                    if let Known::Sentinel { primary, first, .. } =
                        &mut *self.known.lock().unwrap_or_else(|e| e.into_inner())
                    {
                        if primary.as_ref() != Some(&addr) {
                            tracing::info!(
                                primary = format!("{}:{}", addr.0, addr.1),
                                name,
                                "redis: the Sentinels name this primary"
                            );
                        }
                        *primary = Some(addr.clone());
                        *first = at;
                    }
                    return Ok(addr);
                }
                Err(e) => {
                    refused += usize::from(matches!(e, StoreError::Refused(_)));
                    why.push(format!(
                        "{}:{} named {}:{}, which {e}",
                        sentinel.0, sentinel.1, addr.0, addr.1
                    ));
                }
            }
        }
        let why = format!(
            "redis: no primary for '{name}' from the Sentinels ({})",
            why.join("; ")
        );
        // Every Sentinel refused the credentials: say so, at once.
        Err(if refused == sentinels.len() {
            StoreError::Refused(why)
        } else {
            StoreError::Unreachable(why)
        })
    }

    /// What one Sentinel says the primary is.
    async fn primary_of(
        &self,
        sentinel: &NodeAddr,
        name: &str,
    ) -> Result<Option<NodeAddr>, StoreError> {
        let node = self.node(sentinel)?;
        let (mut s, _) = node
            .connector
            .connect(true)
            .await
            .map_err(|e| StoreError::Unreachable(e.to_string()))?;
        if let Some(password) = &self.url.password {
            // Sentinels are sent the primary's credentials; one that has
            // no password set refuses them, and answers all the same.
            let _ = self.auth(&mut s, password).await?;
        }
        let reply = roundtrip(
            &mut s,
            &[b"SENTINEL", b"get-master-addr-by-name", name.as_bytes()],
        )
        .await?;
        if let RedisReply::Error(e) = &reply {
            if e.starts_with("NOAUTH") || e.starts_with("WRONGPASS") || e.starts_with("NOPERM") {
                return Err(StoreError::Refused(format!("the Sentinel refused: {e}")));
            }
        }
        sentinel_primary(&reply).map_err(StoreError::Protocol)
    }

    /// Reads the slot map from the first node that gives one.
    async fn read_slots(&self, nodes: &[NodeAddr]) -> Result<SlotMap, StoreError> {
        let mut why = Vec::new();
        let mut refused = 0;
        for addr in nodes {
            let asked = async {
                let node = self.node(addr)?;
                // Not pooled: it may be a replica's, whose handshake told a
                // history that is not a primary's.
                let mut s = self.connection(&node, true).await?;
                // A fragmented cluster may list more ranges than a reply
                // to the limiter's own commands ever holds.
                let limits = RedisReplyLimits {
                    max_elements: usize::from(chatgate_core::CLUSTER_SLOTS),
                    ..RedisReplyLimits::default()
                };
                let reply = roundtrip_with(&mut s, &[b"CLUSTER", b"SLOTS"], &limits).await?;
                SlotMap::from_cluster_slots(&reply, &addr.0).map_err(StoreError::Protocol)
            };
            match self.with_deadline(SENTINEL_WAIT, asked).await {
                Ok(map) => return Ok(map),
                Err(e) => {
                    refused += usize::from(matches!(e, StoreError::Refused(_)));
                    why.push(format!("{}:{}: {e}", addr.0, addr.1));
                    // Asked last next time (it stays among the seeds if it
                    // is one): a dead node must not take every asking's
                    // time before a live one is reached.
                    self.nodes
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(addr);
                }
            }
        }
        let why = format!(
            "redis cluster: no node gave the slot map ({})",
            why.join("; ")
        );
        // Every node refused the credentials: say so, at once.
        Err(if refused == nodes.len() {
            StoreError::Refused(why)
        } else {
            StoreError::Unreachable(why)
        })
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

    /// Sends `cmd` on a connection to `node` (once more on a fresh
    /// connection when a pooled one turns out closed before answering).
    async fn exec(
        &self,
        node: &Node<R>,
        cmd: &Command<'_>,
        asking: bool,
    ) -> Result<RedisReply, Failed> {
        let mut last = Failed::Before(StoreError::Unreachable("no connection".into()));
        for fresh in [false, true] {
            let (mut s, reused) = self.pooled(node, fresh).await.map_err(Failed::Before)?;
            match self.send(node, &mut s, cmd, asking, reused).await {
                Ok(reply) => {
                    node.connector.release(s);
                    return Ok(reply);
                }
                Err(Failed::Before(e)) if reused => last = Failed::Before(e),
                Err(f) => return Err(f),
            }
        }
        Err(last)
    }

    async fn send(
        &self,
        node: &Node<R>,
        s: &mut OutboundStream<R::Tcp>,
        cmd: &Command<'_>,
        asking: bool,
        reused: bool,
    ) -> Result<RedisReply, Failed> {
        match cmd {
            Command::Plain(args) => {
                if asking {
                    roundtrip(s, &[b"ASKING"]).await.map_err(Failed::Before)?;
                }
                command(s, args, reused).await
            }
            Command::Script { keys, args, .. } => {
                if node
                    .recheck
                    .swap(false, std::sync::atomic::Ordering::Relaxed)
                {
                    self.read_history(node, s).await.map_err(Failed::Before)?;
                }
                let args = args(&node.history.lock().unwrap_or_else(|e| e.into_inner()));
                let known = self.sha.lock().unwrap_or_else(|e| e.into_inner()).clone();
                // Loaded before ASKING, which holds for the next command
                // only.
                let sha = match known {
                    Some(sha) => sha,
                    None => self.load(s).await.map_err(Failed::Before)?,
                };
                if asking {
                    roundtrip(s, &[b"ASKING"]).await.map_err(Failed::Before)?;
                }
                let reply = evalsha(s, &sha, keys, &args, reused).await?;
                if matches!(&reply, RedisReply::Error(e) if e.starts_with("NOSCRIPT")) {
                    // This server lost its scripts (restart, SCRIPT FLUSH,
                    // a replica promoted): load it here. NOSCRIPT ran
                    // nothing.
                    let sha = self.load(s).await.map_err(Failed::Before)?;
                    if asking {
                        roundtrip(s, &[b"ASKING"]).await.map_err(Failed::Before)?;
                    }
                    return evalsha(s, &sha, keys, &args, false).await;
                }
                Ok(reply)
            }
        }
    }

    async fn load(&self, s: &mut OutboundStream<R::Tcp>) -> Result<Vec<u8>, StoreError> {
        match roundtrip(s, &[b"SCRIPT", b"LOAD", REDIS_SCRIPT.as_bytes()]).await? {
            RedisReply::Bulk(Some(sha)) => {
                *self.sha.lock().unwrap_or_else(|e| e.into_inner()) = Some(sha.clone());
                Ok(sha)
            }
            RedisReply::Error(e) if classify_error(&e, "") == RedisErrorKind::NotPrimary => {
                Err(StoreError::Unreachable(format!("redis: {e}")))
            }
            other => Err(StoreError::Protocol(format!(
                "redis SCRIPT LOAD failed: {other:?}"
            ))),
        }
    }

    /// A connection to `node` past its handshake (pooled unless `fresh`);
    /// whether it was reused.
    async fn pooled(
        &self,
        node: &Node<R>,
        fresh: bool,
    ) -> Result<(OutboundStream<R::Tcp>, bool), StoreError> {
        let (mut s, reused) = node.connector.connect(fresh).await.map_err(|e| {
            let why = format!("redis {}:{}: {e}", node.addr.0, node.addr.1);
            // A certificate refused is refused again a moment later.
            if matches!(e, chatgate_core::UpstreamFailure::Tls(_)) {
                StoreError::Refused(why)
            } else {
                StoreError::Unreachable(why)
            }
        })?;
        if !reused {
            self.handshake(node, &mut s).await?;
        }
        Ok((s, reused))
    }

    /// A connection to `node`, past its handshake.
    async fn connection(
        &self,
        node: &Node<R>,
        fresh: bool,
    ) -> Result<OutboundStream<R::Tcp>, StoreError> {
        self.pooled(node, fresh).await.map(|(s, _)| s)
    }

    async fn auth(
        &self,
        s: &mut OutboundStream<R::Tcp>,
        password: &str,
    ) -> Result<RedisReply, StoreError> {
        match &self.url.user {
            Some(user) => roundtrip(s, &[b"AUTH", user.as_bytes(), password.as_bytes()]).await,
            None => roundtrip(s, &[b"AUTH", password.as_bytes()]).await,
        }
    }

    /// `AUTH`, `SELECT`, then `INFO replication`: a server that is not a
    /// primary is not written to (with Sentinel, the primary is asked for
    /// again), and its history is what the script is told.
    async fn handshake(
        &self,
        node: &Node<R>,
        s: &mut OutboundStream<R::Tcp>,
    ) -> Result<(), StoreError> {
        if let Some(password) = &self.url.password {
            if let RedisReply::Error(e) = self.auth(s, password).await? {
                return Err(StoreError::Refused(format!("redis AUTH failed: {e}")));
            }
        }
        if self.url.db != 0 {
            let db = self.url.db.to_string();
            if let RedisReply::Error(e) = roundtrip(s, &[b"SELECT", db.as_bytes()]).await? {
                return Err(StoreError::Refused(format!(
                    "redis SELECT {db} failed: {e}"
                )));
            }
        }
        self.read_history(node, s).await
    }

    /// `INFO replication`: the server's history, for the script, and its
    /// role. Through Sentinel only a primary is written to (the Sentinels
    /// are asked again); one server named by `--redis` is refused only
    /// when it says it is a replica, and one that will not answer `INFO`
    /// (an ACL user without it, a proxy) has no history to follow; a
    /// cluster's replica redirects writes to its primary.
    async fn read_history(
        &self,
        node: &Node<R>,
        s: &mut OutboundStream<R::Tcp>,
    ) -> Result<(), StoreError> {
        let (one_server, sentinel) = match &*self.known.lock().unwrap_or_else(|e| e.into_inner()) {
            Known::Server(_) => (true, false),
            Known::Sentinel { .. } => (false, true),
            Known::Cluster { .. } => (false, false),
        };
        let replication = match roundtrip(s, &[b"INFO", b"replication"]).await? {
            RedisReply::Bulk(Some(text)) => parse_replication(&String::from_utf8_lossy(&text)),
            // Credentials wanted (none given) or refused.
            RedisReply::Error(e) if e.starts_with("NOAUTH") || e.starts_with("WRONGPASS") => {
                return Err(StoreError::Refused(format!(
                    "redis {}:{} refused: {e}",
                    node.addr.0, node.addr.1
                )));
            }
            RedisReply::Error(e) if !sentinel || e.starts_with("NOPERM") => {
                tracing::debug!(
                    error = e,
                    "redis: no INFO replication; no history to follow"
                );
                *node.history.lock().unwrap_or_else(|e| e.into_inner()) = String::new();
                return Ok(());
            }
            other => {
                return Err(StoreError::Protocol(format!(
                    "redis INFO replication answered {other:?}"
                )));
            }
        };
        let refused = (one_server && replication.replica) || (sentinel && !replication.primary);
        if refused {
            return Err(StoreError::Unreachable(format!(
                "redis {}:{} is a replica, not a primary",
                node.addr.0, node.addr.1
            )));
        }
        *node.history.lock().unwrap_or_else(|e| e.into_inner()) = replication.history;
        Ok(())
    }
}

enum Ask {
    Sentinels(Vec<NodeAddr>, String, usize),
    Cluster(Vec<NodeAddr>),
}

async fn evalsha<T>(
    s: &mut OutboundStream<T>,
    sha: &[u8],
    keys: &[String; 4],
    args: &[String],
    reused: bool,
) -> Result<RedisReply, Failed>
where
    OutboundStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let mut cmd: Vec<&[u8]> = vec![b"EVALSHA", sha, b"4"];
    cmd.extend(keys.iter().map(|k| k.as_bytes()));
    cmd.extend(args.iter().map(|a| a.as_bytes()));
    command(s, &cmd, reused).await
}

/// Sends one command and reads its reply, telling whether a failure
/// happened before the command could run: while writing, or on a pooled
/// connection (`reused`) the server had closed (nothing at all came
/// back). Any other failure after the write may have let it run.
async fn command<T>(
    s: &mut OutboundStream<T>,
    args: &[&[u8]],
    reused: bool,
) -> Result<RedisReply, Failed>
where
    OutboundStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    write_command(s, args).await.map_err(Failed::Before)?;
    read_reply(s, &RedisReplyLimits::default())
        .await
        .map_err(|(e, got_any)| {
            if reused && !got_any {
                Failed::Before(e)
            } else {
                Failed::After(e)
            }
        })
}

/// Sends one command and reads its reply.
async fn roundtrip<T>(s: &mut OutboundStream<T>, args: &[&[u8]]) -> Result<RedisReply, StoreError>
where
    OutboundStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    roundtrip_with(s, args, &RedisReplyLimits::default()).await
}

async fn roundtrip_with<T>(
    s: &mut OutboundStream<T>,
    args: &[&[u8]],
    limits: &RedisReplyLimits,
) -> Result<RedisReply, StoreError>
where
    OutboundStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    write_command(s, args).await?;
    read_reply(s, limits).await.map_err(|(e, _)| e)
}

/// Encodes one command and writes it out.
async fn write_command<T>(s: &mut OutboundStream<T>, args: &[&[u8]]) -> Result<(), StoreError>
where
    OutboundStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let mut out = Vec::with_capacity(256);
    encode_redis_command(&mut out, args);
    let write = async {
        s.write_all(&out).await?;
        s.flush().await
    };
    write
        .await
        .map_err(|e| StoreError::Unreachable(format!("redis write: {e}")))
}

/// Reads one reply; on failure, whether any byte of it had come.
async fn read_reply<T>(
    s: &mut OutboundStream<T>,
    limits: &RedisReplyLimits,
) -> Result<RedisReply, (StoreError, bool)>
where
    OutboundStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    loop {
        match parse_redis_reply(&buf, limits) {
            Ok(Some((r, _))) => return Ok(r),
            Ok(None) => {}
            Err(e) => return Err((StoreError::Protocol(e.to_string()), true)),
        }
        let n = s.read(&mut chunk).await.map_err(|e| {
            (
                StoreError::Unreachable(format!("redis read: {e}")),
                !buf.is_empty(),
            )
        })?;
        if n == 0 {
            return Err((
                StoreError::Unreachable("redis closed the connection".into()),
                !buf.is_empty(),
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
