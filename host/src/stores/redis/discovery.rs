//! Asking where commands go: the Sentinels in turn for the primary they
//! name (checked to be one), or any cluster node for the slot map.

use chatgate_core::{
    NodeAddr, RedisReply, RedisReplyLimits, SlotMap, StoreError, sentinel_primary,
};

use super::nodes::{Known, RedisNodes, SENTINEL_WAIT};
use super::wire::{roundtrip, roundtrip_with};
use crate::runtime::Runtime;

impl<R: Runtime> RedisNodes<R> {
    /// Asks the Sentinels in turn for the primary, and checks that it is
    /// one (a Sentinel that has not yet seen a failover may name the old
    /// primary, which may be back as a replica).
    pub(super) async fn ask_sentinels(
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
        if let RedisReply::Error(e) = &reply
            && (e.starts_with("NOAUTH") || e.starts_with("WRONGPASS") || e.starts_with("NOPERM"))
        {
            return Err(StoreError::Refused(format!("the Sentinel refused: {e}")));
        }
        sentinel_primary(&reply).map_err(StoreError::Protocol)
    }

    /// Reads the slot map from the first node that gives one.
    pub(super) async fn read_slots(&self, nodes: &[NodeAddr]) -> Result<SlotMap, StoreError> {
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
}
