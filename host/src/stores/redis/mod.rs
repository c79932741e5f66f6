//! The shared limiter's client: admissions and settlements as one Redis
//! script call each, sent to the server that holds the key (one server,
//! the Sentinels' primary, or the cluster's node for the key's slot). The
//! protocol is `chatgate_core`'s `redis_protocol` (RESP); the limiter's
//! arithmetic is the script's (`core/src/limits.lua`), which the tests
//! check against the in-process limiter.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the limiter: admissions, settlements, leases, the reasoning memory's keys, spend rebuilt from the ledger |
//! | `nodes.rs` | which server a command goes to, and each command's attempts as core's `RedisRetry` decides |
//! | `discovery.rs` | asking the Sentinels for the primary, or a cluster node for the slot map |
//! | `wire.rs` | a server's connections, their handshake, the script loaded, one command out and its reply in |

mod discovery;
mod nodes;
mod wire;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chatgate_core::KeyTable;
use chatgate_core::{
    AdmitRequest, BudgetRefusal, Limits, QuotaRefusal, REBUILD_AFTER_MS, Refusal, ScriptOp,
    ScriptOutcome, ScriptQuota, decode_script_reply, script_args, script_keys, shared_limits_error,
};
use chatgate_core::{RedisReply, SharedRedis};
use chatgate_core::{Settlement, SharedAdmission, StoreError};

use crate::error::Error;
use crate::runtime::Runtime;
use crate::stores::spend::SpendSource;
use nodes::{Command, RedisNodes};

/// How long a lease (an in-flight slot and its budget reservation) lives
/// unless its instance renews it: a killed instance's slots come back
/// within this.
pub(crate) const LEASE: Duration = Duration::from_secs(10);
/// How often an instance renews the leases of its requests in flight.
const RENEW_EVERY: Duration = Duration::from_secs(3);

/// Why `keys` cannot be shared through Redis, if they cannot: a key whose
/// limits are above what the script computes exactly
/// ([`chatgate_core::SHARED_MAX_PER_MINUTE`]), named with its limit.
pub(crate) fn check_keys(keys: &KeyTable) -> Result<(), Error> {
    for k in keys.entries() {
        if let Some(e) = shared_limits_error(k.limits) {
            return Err(Error::Config(format!(
                "key '{}': {e}; lower it or run without --redis",
                k.name
            )));
        }
    }
    Ok(())
}

/// Admissions and settlements through Redis.
pub(crate) struct SharedLimiter<R: Runtime> {
    rt: R,
    nodes: RedisNodes<R>,
    timeout: Duration,
    /// Where a key's spend is rebuilt from when Redis does not have it.
    spend: SpendSource,
    /// This instance's live leases, by client key (with its limits).
    leases: Mutex<HashMap<String, (Limits, HashSet<String>)>>,
    /// Held while a key's spend is rebuilt: a burst of first requests
    /// reads the ledger once, not once each (which could exhaust
    /// PostgreSQL's connections and leave each to the fallback). It keeps
    /// the last failed rebuild, so that the requests queued behind it do
    /// not each wait for the same failure again.
    seeding: async_lock::Mutex<Option<(std::time::Instant, StoreError)>>,
}

/// How long a failed rebuild answers for the admissions that queued
/// behind it.
const SEED_FAILURE_HOLDS: Duration = Duration::from_secs(1);

impl<R: Runtime> SharedLimiter<R> {
    /// A limiter on `redis`; `extra_ca` is trusted for `rediss://` too.
    pub(crate) fn new(
        rt: R,
        redis: SharedRedis,
        extra_ca: Option<&str>,
        timeout: Duration,
        spend: SpendSource,
    ) -> Result<Self, Error> {
        let nodes = RedisNodes::new(rt.clone(), redis, extra_ca).map_err(Error::Tls)?;
        Ok(SharedLimiter {
            rt,
            nodes,
            timeout,
            spend,
            leases: Mutex::new(HashMap::new()),
            seeding: async_lock::Mutex::new(None),
        })
    }

    /// Admits one request (`Err`: Redis could not be reached or answered
    /// wrongly within the timeout). A key whose spend Redis does not have
    /// is seeded from the ledger first.
    pub(crate) async fn admit(&self, ask: &AdmitRequest) -> SharedAdmission {
        match self.verdict(ask).await {
            Ok(v) => v,
            Err(e) => SharedAdmission::Unavailable(e),
        }
    }

    async fn verdict(&self, ask: &AdmitRequest) -> Result<SharedAdmission, StoreError> {
        let mut quota = ScriptQuota {
            quota: ask.quota,
            cost: ask.cost,
            metered: 0,
            lease: &ask.lease,
            lease_ms: LEASE.as_millis() as u64,
            unix_ms: ask.unix_ms,
            history: "",
            rebuild_after_ms: Some(REBUILD_AFTER_MS),
        };
        let op = ScriptOp::Admit { tokens: ask.tokens };
        let mut out = self.call(op, &ask.key, ask.limits, &quota).await?;
        if let ScriptOutcome::Unseeded { .. } = out {
            let mut last_failure = self.seeding.lock().await;
            // Whoever held the lock may have seeded this key meanwhile.
            out = self.call(op, &ask.key, ask.limits, &quota).await?;
            if let ScriptOutcome::Unseeded { before } = out {
                let failed = match last_failure.as_ref() {
                    Some((at, e)) if at.elapsed() < SEED_FAILURE_HOLDS => Some(e.clone()),
                    _ => match self.seed(&ask.key, ask.limits, ask.unix_ms, before).await {
                        Ok(()) => None,
                        Err(e) => {
                            *last_failure = Some((std::time::Instant::now(), e.clone()));
                            Some(e)
                        }
                    },
                };
                if failed.is_none() {
                    *last_failure = None;
                }
                match (failed, before) {
                    (None, _) => {}
                    // A rebuild after a failover that cannot read the
                    // ledger now: the spend the new primary holds is
                    // close, so decide on it and rebuild at a later
                    // request.
                    (Some(e), Some(_)) => {
                        tracing::warn!(key = ask.key, error = %e, "the key's spend could not be rebuilt from the ledger after Redis changed primary; admitting on the spend Redis holds");
                        quota.rebuild_after_ms = None;
                    }
                    (Some(e), None) => return Err(e),
                }
                out = self.call(op, &ask.key, ask.limits, &quota).await?;
            }
        }
        let refusal = match out {
            ScriptOutcome::Admitted(a) => {
                if ask.quota.budget.is_some() || ask.quota.max_in_flight.is_some() {
                    let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
                    leases
                        .entry(ask.key.clone())
                        .or_insert_with(|| (ask.limits, HashSet::new()))
                        .1
                        .insert(ask.lease.clone());
                }
                return Ok(SharedAdmission::Admitted(a));
            }
            ScriptOutcome::Refused(r) => Refusal::Rate(r),
            ScriptOutcome::OverBudget { spent, reserved } => {
                let budget = ask.quota.budget.ok_or_else(|| {
                    StoreError::Protocol("the script refused a budget the key has not".into())
                })?;
                Refusal::Quota(QuotaRefusal::Budget(BudgetRefusal {
                    budget,
                    spent,
                    reserved,
                    cost: ask.cost,
                    resets_at: budget.period.reset(ask.unix_ms),
                }))
            }
            ScriptOutcome::InFlight => Refusal::Quota(QuotaRefusal::InFlight {
                limit: ask.quota.max_in_flight.unwrap_or(0),
            }),
            ScriptOutcome::Unseeded { .. } | ScriptOutcome::Status(_) => {
                return Err(StoreError::Protocol(format!(
                    "the limiter script answered {out:?} to an admission"
                )));
            }
        };
        Ok(SharedAdmission::Refused(refusal))
    }

    /// Sets `key`'s spend from the ledger, unless another instance did
    /// meanwhile; with `before`, rebuilds it from the ledger's lines
    /// before that time (the script adds what was settled since).
    async fn seed(
        &self,
        key: &str,
        limits: Limits,
        unix_ms: u64,
        before: Option<u64>,
    ) -> Result<(), StoreError> {
        let source = self.spend.clone();
        let name = key.to_owned();
        let tally = self
            .rt
            .unblock(move || source.tally(unix_ms, before, Some(&name)))
            .await
            .map_err(|e| StoreError::Ledger(e.to_string()))?;
        let spent = tally.get(key);
        match before {
            None => tracing::info!(
                key,
                spent_usd_month = chatgate_core::format_usd(spent[2]),
                "the key's spend was rebuilt from the ledger for the shared limiter"
            ),
            Some(before) => tracing::warn!(
                key,
                before_unix_ms = before,
                spent_usd_month_before = chatgate_core::format_usd(spent[2]),
                "Redis changed primary (a failover, or a restart): the key's spend was rebuilt from the ledger's lines before then, plus what was settled since"
            ),
        }
        let quota = ScriptQuota {
            unix_ms,
            ..ScriptQuota::default()
        };
        self.call(ScriptOp::Seed { spent, before }, key, limits, &quota)
            .await
            .map(drop)
    }

    /// Replaces a reservation by what was used, and ends its lease.
    pub(crate) async fn settle(&self, s: &Settlement) -> Result<(), StoreError> {
        let op = ScriptOp::Settle {
            reserved: s.reserved,
            used: s.used,
        };
        let lease = s.lease.as_deref().unwrap_or("");
        if !lease.is_empty() {
            let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, set)) = leases.get_mut(&s.key) {
                set.remove(lease);
                if set.is_empty() {
                    leases.remove(&s.key);
                }
            }
        }
        let quota = ScriptQuota {
            quota: s.quota,
            cost: s.cost_reserved,
            metered: s.cost,
            lease,
            lease_ms: LEASE.as_millis() as u64,
            unix_ms: s.unix_ms,
            history: "",
            rebuild_after_ms: None,
        };
        self.call(op, &s.key, s.limits, &quota).await.map(drop)
    }

    /// The shared reasoning memory's values for `keys` (each
    /// `chatgate_core::reasoning::shared_key`, all in one key's slot),
    /// within the timeout.
    pub(crate) async fn recall(
        &self,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let Some(first) = keys.first() else {
            return Ok(Vec::new());
        };
        let mut args: Vec<&[u8]> = Vec::with_capacity(keys.len() + 1);
        args.push(b"MGET");
        args.extend(keys.iter().map(Vec::as_slice));
        let slot = String::from_utf8_lossy(first).into_owned();
        let reply = self
            .within_timeout(
                self.nodes
                    .run(&slot, &Command::Plain(&args), self.deadline()),
            )
            .await?;
        match reply {
            RedisReply::Array(Some(values)) if values.len() == keys.len() => Ok(values
                .into_iter()
                .map(|v| match v {
                    RedisReply::Bulk(Some(b)) => Some(b),
                    _ => None,
                })
                .collect()),
            other => Err(StoreError::Protocol(format!(
                "unexpected answer to MGET: {other:?}"
            ))),
        }
    }

    /// Keeps `r`'s reasoning in the shared reasoning memory under each of
    /// its keys, for its time to live.
    pub(crate) async fn remember(&self, r: &chatgate_core::Remember) -> Result<(), StoreError> {
        let ttl = r.ttl_ms.max(1).to_string();
        for key in &r.keys {
            let args: [&[u8]; 5] = [b"SET", key, &r.text, b"PX", ttl.as_bytes()];
            let slot = String::from_utf8_lossy(key).into_owned();
            let reply = self
                .within_timeout(
                    self.nodes
                        .run(&slot, &Command::Plain(&args), self.deadline()),
                )
                .await?;
            if let RedisReply::Error(e) = reply {
                return Err(StoreError::Protocol(format!("redis SET: {e}")));
            }
        }
        Ok(())
    }

    /// Renews this instance's leases for as long as it runs.
    pub(crate) async fn renew_leases(self: Arc<Self>) {
        loop {
            self.rt.timer(std::time::Instant::now() + RENEW_EVERY).await;
            let batch: Vec<(String, Limits, String)> = {
                let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
                leases
                    .iter()
                    .map(|(k, (limits, set))| {
                        let names: Vec<&str> = set.iter().map(String::as_str).collect();
                        (k.clone(), *limits, names.join(" "))
                    })
                    .collect()
            };
            for (key, limits, names) in batch {
                let quota = ScriptQuota {
                    lease: &names,
                    lease_ms: LEASE.as_millis() as u64,
                    ..ScriptQuota::default()
                };
                if let Err(e) = self.call(ScriptOp::Renew, &key, limits, &quota).await {
                    tracing::warn!(key, error = %e, "could not renew leases");
                }
            }
        }
    }

    /// One call of the script for `key`, within the timeout.
    async fn call(
        &self,
        op: ScriptOp,
        key: &str,
        limits: Limits,
        quota: &ScriptQuota<'_>,
    ) -> Result<ScriptOutcome, StoreError> {
        let ints = self.script(op, key, limits, quota).await?;
        decode_script_reply(&ints)
            .ok_or_else(|| StoreError::Protocol(format!("unexpected script answer {ints:?}")))
    }

    /// One call of the script: its integers as they came.
    async fn script(
        &self,
        op: ScriptOp,
        key: &str,
        limits: Limits,
        quota: &ScriptQuota<'_>,
    ) -> Result<Vec<i64>, StoreError> {
        let keys = script_keys(key);
        let args = |history: &str| {
            let quota = ScriptQuota { history, ..*quota };
            script_args(op, limits, &quota, None)
        };
        let cmd = Command::Script {
            keys: &keys,
            args: &args,
            idempotent: !matches!(op, ScriptOp::Admit { .. } | ScriptOp::Settle { .. }),
        };
        let reply = self
            .within_timeout(self.nodes.run(&keys[0], &cmd, self.deadline()))
            .await?;
        match &reply {
            RedisReply::Error(e) => Err(StoreError::Protocol(format!("redis script error: {e}"))),
            r => r
                .integers()
                .ok_or_else(|| StoreError::Protocol(format!("unexpected script answer {reply:?}"))),
        }
    }

    /// When a command sent now must have its answer.
    fn deadline(&self) -> std::time::Instant {
        std::time::Instant::now() + self.timeout
    }

    async fn within_timeout<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.nodes.with_deadline(self.timeout, work).await
    }

    /// Every key's spend in its budget's period and its requests in
    /// flight, as Redis holds them for all instances (the script's
    /// `status`, a key at a time, each on its server); keys with neither
    /// a budget nor an in-flight cap hold no lease and are left out, and
    /// so are keys with a budget whose spend Redis has not seeded yet.
    pub(crate) async fn quota_figures(
        &self,
        keys: &chatgate_core::KeyTable,
        unix_ms: u64,
    ) -> Result<HashMap<String, (u64, u32)>, StoreError> {
        let mut out = HashMap::new();
        for e in keys.entries().iter().filter(|e| e.expires.is_none()) {
            if e.quota.budget.is_none() && e.quota.max_in_flight.is_none() {
                continue;
            }
            let script_keys = script_keys(&e.name);
            let exists: [&[u8]; 3] = [b"HEXISTS", script_keys[1].as_bytes(), b"z"];
            let seeded = self
                .within_timeout(self.nodes.run(
                    &script_keys[0],
                    &Command::Plain(&exists),
                    self.deadline(),
                ))
                .await?;
            if e.quota.budget.is_some() && seeded != RedisReply::Integer(1) {
                continue;
            }
            let quota = ScriptQuota {
                quota: e.quota,
                lease_ms: LEASE.as_millis() as u64,
                unix_ms,
                ..ScriptQuota::default()
            };
            let ints = self
                .script(ScriptOp::Status, &e.name, e.limits, &quota)
                .await?;
            let n = |i: usize| ints.get(i).copied().unwrap_or(0).max(0) as u64;
            out.insert(e.name.clone(), (n(9), n(11) as u32));
        }
        Ok(out)
    }
}
