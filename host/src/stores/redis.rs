//! The shared limiter's client: admissions and settlements as one Redis
//! script call each (`EVALSHA`, loading the script on `NOSCRIPT`), on
//! pooled connections opened by the same connector as the provider's (DNS,
//! TCP, TLS for `rediss://`). The protocol is `chatgate_core`'s `redis_protocol` (RESP); the
//! limiter's arithmetic is the script's (`core/src/limits.lua`), which the
//! tests check against the in-process limiter.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chatgate_core::KeyTable;
use chatgate_core::RedisUrl;
use chatgate_core::Target;
use chatgate_core::{
    AdmitRequest, BudgetRefusal, Limits, QuotaRefusal, REDIS_SCRIPT, Refusal, ScriptOp,
    ScriptOutcome, ScriptQuota, decode_script_reply, script_args, script_keys, shared_limits_error,
};
use chatgate_core::{RedisReply, RedisReplyLimits, encode_redis_command, parse_redis_reply};
use chatgate_core::{Settlement, SharedAdmission, StoreError};
use futures_lite::{AsyncReadExt, AsyncWriteExt, future};

use crate::error::Error;
use crate::provider::connector::{Connector, OutboundStream};
use crate::runtime::Runtime;
use crate::stores::spend::SpendSource;

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
    url: RedisUrl,
    connector: Connector<R>,
    sha: Mutex<Option<Vec<u8>>>,
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
    /// A limiter on `url`; `extra_ca` is trusted for `rediss://` too.
    pub(crate) fn new(
        rt: R,
        url: RedisUrl,
        extra_ca: Option<&str>,
        timeout: Duration,
        spend: SpendSource,
    ) -> Result<Self, Error> {
        let target = Target {
            tls: url.tls,
            host: url.host.clone(),
            port: url.port,
            base_path: String::new(),
            api_key: None,
        };
        // A connector fails only to set up TLS.
        let connector = Connector::new(rt.clone(), target, extra_ca, 64, Duration::from_secs(60))
            .map_err(|e| Error::Tls(format!("redis: {e}")))?;
        Ok(SharedLimiter {
            rt,
            url,
            connector,
            sha: Mutex::new(None),
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
        let quota = ScriptQuota {
            quota: ask.quota,
            cost: ask.cost,
            metered: 0,
            lease: &ask.lease,
            lease_ms: LEASE.as_millis() as u64,
            unix_ms: ask.unix_ms,
        };
        let op = ScriptOp::Admit { tokens: ask.tokens };
        let mut out = self.call(op, &ask.key, ask.limits, &quota).await?;
        if out == ScriptOutcome::Unseeded {
            let mut last_failure = self.seeding.lock().await;
            // Whoever held the lock may have seeded this key meanwhile.
            out = self.call(op, &ask.key, ask.limits, &quota).await?;
            if out == ScriptOutcome::Unseeded {
                if let Some((at, e)) = last_failure.as_ref()
                    && at.elapsed() < SEED_FAILURE_HOLDS
                {
                    return Err(e.clone());
                }
                if let Err(e) = self.seed(&ask.key, ask.limits, ask.unix_ms).await {
                    *last_failure = Some((std::time::Instant::now(), e.clone()));
                    return Err(e);
                }
                *last_failure = None;
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
            ScriptOutcome::Unseeded | ScriptOutcome::Status(_) => {
                return Err(StoreError::Protocol(format!(
                    "the limiter script answered {out:?} to an admission"
                )));
            }
        };
        Ok(SharedAdmission::Refused(refusal))
    }

    /// Sets `key`'s spend from the ledger, unless another instance did
    /// meanwhile.
    async fn seed(&self, key: &str, limits: Limits, unix_ms: u64) -> Result<(), StoreError> {
        let source = self.spend.clone();
        let tally = self
            .rt
            .unblock(move || source.tally(unix_ms))
            .await
            .map_err(|e| StoreError::Ledger(e.to_string()))?;
        let spent = tally.get(key);
        tracing::info!(
            key,
            spent_usd_month = chatgate_core::format_usd(spent[2]),
            "the key's spend was rebuilt from the ledger for the shared limiter"
        );
        let quota = ScriptQuota {
            unix_ms,
            ..ScriptQuota::default()
        };
        self.call(ScriptOp::Seed { spent }, key, limits, &quota)
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
        };
        self.call(op, &s.key, s.limits, &quota).await.map(drop)
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

    async fn call(
        &self,
        op: ScriptOp,
        key: &str,
        limits: Limits,
        quota: &ScriptQuota<'_>,
    ) -> Result<ScriptOutcome, StoreError> {
        let work = async {
            let mut last = StoreError::Unreachable("no connection".into());
            // A pooled connection may have been closed by the server: one
            // retry on a fresh one.
            for fresh in [false, true] {
                let (mut s, reused) = self.connection(fresh).await?;
                match self.eval(&mut s, op, key, limits, quota).await {
                    Ok(out) => {
                        self.connector.release(s);
                        return Ok(out);
                    }
                    Err(e) if reused => last = e,
                    Err(e) => return Err(e),
                }
            }
            Err(last)
        };
        let rt = self.rt.clone();
        let timeout = self.timeout;
        future::or(work, async move {
            rt.timer(std::time::Instant::now() + timeout).await;
            Err(StoreError::Timeout(timeout))
        })
        .await
    }

    /// A connection (pooled unless `fresh`) past its handshake; whether
    /// it was reused.
    async fn connection(&self, fresh: bool) -> Result<(OutboundStream<R::Tcp>, bool), StoreError> {
        let (mut s, reused) =
            self.connector.connect(fresh).await.map_err(|e| {
                StoreError::Unreachable(format!("redis {}: {e}", self.url.display()))
            })?;
        if !reused {
            self.handshake(&mut s).await?;
        }
        Ok((s, reused))
    }

    async fn handshake(&self, s: &mut OutboundStream<R::Tcp>) -> Result<(), StoreError> {
        if let Some(password) = &self.url.password {
            let reply = match &self.url.user {
                Some(user) => {
                    roundtrip(s, &[b"AUTH", user.as_bytes(), password.as_bytes()]).await?
                }
                None => roundtrip(s, &[b"AUTH", password.as_bytes()]).await?,
            };
            if let RedisReply::Error(e) = reply {
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
        Ok(())
    }

    async fn eval(
        &self,
        s: &mut OutboundStream<R::Tcp>,
        op: ScriptOp,
        key: &str,
        limits: Limits,
        quota: &ScriptQuota<'_>,
    ) -> Result<ScriptOutcome, StoreError> {
        let ints = self.eval_ints(s, op, key, limits, quota).await?;
        decode_script_reply(&ints)
            .ok_or_else(|| StoreError::Protocol(format!("unexpected script answer {ints:?}")))
    }

    /// Every key's spend in its budget's period and its requests in
    /// flight, as Redis holds them for all instances (the script's
    /// `status`, one connection, a key at a time); keys with neither a
    /// budget nor an in-flight cap hold no lease and are left out, and so
    /// are keys with a budget whose spend Redis has not seeded yet.
    pub(crate) async fn quota_figures(
        &self,
        keys: &chatgate_core::KeyTable,
        unix_ms: u64,
    ) -> Result<HashMap<String, (u64, u32)>, StoreError> {
        let work = async {
            let (mut s, _) = self.connection(true).await?;
            let mut out = HashMap::new();
            for e in keys.entries().iter().filter(|e| e.expires.is_none()) {
                if e.quota.budget.is_none() && e.quota.max_in_flight.is_none() {
                    continue;
                }
                let spend_key = &script_keys(&e.name)[1];
                let seeded = roundtrip(&mut s, &[b"HEXISTS", spend_key.as_bytes(), b"z"]).await?;
                if e.quota.budget.is_some() && seeded != RedisReply::Integer(1) {
                    continue;
                }
                let quota = ScriptQuota {
                    quota: e.quota,
                    cost: 0,
                    metered: 0,
                    lease: "",
                    lease_ms: LEASE.as_millis() as u64,
                    unix_ms,
                };
                let ints = self
                    .eval_ints(&mut s, ScriptOp::Status, &e.name, e.limits, &quota)
                    .await?;
                let n = |i: usize| ints.get(i).copied().unwrap_or(0).max(0) as u64;
                out.insert(e.name.clone(), (n(9), n(11) as u32));
            }
            self.connector.release(s);
            Ok(out)
        };
        let rt = self.rt.clone();
        let timeout = self.timeout;
        future::or(work, async move {
            rt.timer(std::time::Instant::now() + timeout * 4).await;
            Err(StoreError::Timeout(timeout * 4))
        })
        .await
    }

    /// One call of the script: its integers as they came.
    async fn eval_ints(
        &self,
        s: &mut OutboundStream<R::Tcp>,
        op: ScriptOp,
        key: &str,
        limits: Limits,
        quota: &ScriptQuota<'_>,
    ) -> Result<Vec<i64>, StoreError> {
        let redis_key = script_keys(key);
        let args = script_args(op, limits, quota, None);
        let known = self.sha.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let sha = match known {
            Some(sha) => sha,
            None => self.load(s).await?,
        };
        let mut reply = evalsha(s, &sha, &redis_key, &args).await?;
        if matches!(&reply, RedisReply::Error(e) if e.starts_with("NOSCRIPT")) {
            // The server lost its scripts (restart, SCRIPT FLUSH).
            let sha = self.load(s).await?;
            reply = evalsha(s, &sha, &redis_key, &args).await?;
        }
        match &reply {
            RedisReply::Error(e) => Err(StoreError::Protocol(format!("redis script error: {e}"))),
            r => r
                .integers()
                .ok_or_else(|| StoreError::Protocol(format!("unexpected script answer {reply:?}"))),
        }
    }

    async fn load(&self, s: &mut OutboundStream<R::Tcp>) -> Result<Vec<u8>, StoreError> {
        match roundtrip(s, &[b"SCRIPT", b"LOAD", REDIS_SCRIPT.as_bytes()]).await? {
            RedisReply::Bulk(Some(sha)) => {
                *self.sha.lock().unwrap_or_else(|e| e.into_inner()) = Some(sha.clone());
                Ok(sha)
            }
            other => Err(StoreError::Protocol(format!(
                "redis SCRIPT LOAD failed: {other:?}"
            ))),
        }
    }
}

async fn evalsha<T>(
    s: &mut OutboundStream<T>,
    sha: &[u8],
    keys: &[String; 4],
    args: &[String],
) -> Result<RedisReply, StoreError>
where
    OutboundStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let mut cmd: Vec<&[u8]> = vec![b"EVALSHA", sha, b"4"];
    cmd.extend(keys.iter().map(|k| k.as_bytes()));
    cmd.extend(args.iter().map(|a| a.as_bytes()));
    roundtrip(s, &cmd).await
}

async fn roundtrip<T>(s: &mut OutboundStream<T>, args: &[&[u8]]) -> Result<RedisReply, StoreError>
where
    OutboundStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let mut out = Vec::with_capacity(256);
    encode_redis_command(&mut out, args);
    s.write_all(&out)
        .await
        .map_err(|e| StoreError::Unreachable(format!("redis write: {e}")))?;
    s.flush()
        .await
        .map_err(|e| StoreError::Unreachable(format!("redis write: {e}")))?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    loop {
        match parse_redis_reply(&buf, &RedisReplyLimits::default()) {
            Ok(Some((r, _))) => return Ok(r),
            Ok(None) => {}
            Err(e) => return Err(StoreError::Protocol(e.to_string())),
        }
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| StoreError::Unreachable(format!("redis read: {e}")))?;
        if n == 0 {
            return Err(StoreError::Unreachable(
                "redis closed the connection".into(),
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
