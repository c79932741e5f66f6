//! The shared limiter's client: admissions and settlements as one Redis
//! script call each (`EVALSHA`, loading the script on `NOSCRIPT`), on
//! pooled connections opened by the same connector as the provider's (DNS,
//! TCP, TLS for `rediss://`). The protocol is `chatgate_core::resp`; the
//! limiter's arithmetic is the script's (`core/src/limits.lua`), which the
//! tests check against the in-process limiter.

use std::sync::Mutex;
use std::time::Duration;

use chatgate_core::KeyTable;
use chatgate_core::RedisUrl;
use chatgate_core::UpstreamTarget;
use chatgate_core::{
    Limits, REDIS_SCRIPT, ScriptOp, ScriptOutcome, decode_script_reply, script_args,
    shared_limits_error,
};
use chatgate_core::{RedisReply, RedisReplyLimits, encode_redis_command, parse_redis_reply};
use chatgate_core::{Settlement, SharedAdmission};
use futures_lite::{AsyncReadExt, AsyncWriteExt, future};

use crate::runtime::Runtime;
use crate::upstream::{Connector, UpstreamStream};

/// Prefix of the Redis keys holding each client key's buckets.
pub const KEY_PREFIX: &str = "chatgate:limits:";

/// Why `keys` cannot be shared through Redis, if they cannot: a key whose
/// limits are above what the script computes exactly
/// ([`chatgate_core::SHARED_MAX_PER_MINUTE`]), named with its limit.
pub fn check_keys(keys: &KeyTable) -> Result<(), String> {
    for k in keys.entries() {
        if let Some(e) = shared_limits_error(k.limits) {
            return Err(format!(
                "key '{}': {e}; lower it or run without --redis",
                k.name
            ));
        }
    }
    Ok(())
}

/// Admissions and settlements through Redis.
pub struct SharedLimiter<R: Runtime> {
    rt: R,
    url: RedisUrl,
    connector: Connector<R>,
    sha: Mutex<Option<Vec<u8>>>,
    timeout: Duration,
}

impl<R: Runtime> SharedLimiter<R> {
    /// A limiter on `url`; `extra_ca` is trusted for `rediss://` too.
    pub fn new(
        rt: R,
        url: RedisUrl,
        extra_ca: Option<&str>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let target = UpstreamTarget {
            tls: url.tls,
            host: url.host.clone(),
            port: url.port,
            base_path: String::new(),
            api_key: None,
        };
        let connector = Connector::new(rt.clone(), target, extra_ca, 64, Duration::from_secs(60))
            .map_err(|e| format!("redis: {e}"))?;
        Ok(SharedLimiter {
            rt,
            url,
            connector,
            sha: Mutex::new(None),
            timeout,
        })
    }

    /// Admits one request of `key` reserving `tokens` (`Err`: Redis could
    /// not be reached or answered wrongly within the timeout).
    pub async fn admit(&self, key: &str, limits: Limits, tokens: u64) -> SharedAdmission {
        match self.call(ScriptOp::Admit { tokens }, key, limits).await? {
            ScriptOutcome::Admitted(a) => Ok(Ok(a)),
            ScriptOutcome::Refused(r) => Ok(Err(r)),
            ScriptOutcome::Status(_) => Err("the limiter script answered a status".into()),
        }
    }

    /// Replaces a reservation by the tokens used.
    pub async fn settle(&self, s: &Settlement) -> Result<(), String> {
        let op = ScriptOp::Settle {
            reserved: s.reserved,
            used: s.used,
        };
        self.call(op, &s.key, s.limits).await.map(drop)
    }

    async fn call(&self, op: ScriptOp, key: &str, limits: Limits) -> Result<ScriptOutcome, String> {
        let work = async {
            let mut last = String::new();
            // A pooled connection may have been closed by the server: one
            // retry on a fresh one.
            for fresh in [false, true] {
                let (mut s, reused) = self
                    .connector
                    .connect(fresh)
                    .await
                    .map_err(|e| format!("redis {}: {e}", self.url.display()))?;
                if !reused {
                    self.handshake(&mut s).await?;
                }
                match self.eval(&mut s, op, key, limits).await {
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
            Err(format!("redis: no answer within {timeout:?}"))
        })
        .await
    }

    async fn handshake(&self, s: &mut UpstreamStream<R::Tcp>) -> Result<(), String> {
        if let Some(password) = &self.url.password {
            let reply = match &self.url.user {
                Some(user) => {
                    roundtrip(s, &[b"AUTH", user.as_bytes(), password.as_bytes()]).await?
                }
                None => roundtrip(s, &[b"AUTH", password.as_bytes()]).await?,
            };
            if let RedisReply::Error(e) = reply {
                return Err(format!("redis AUTH failed: {e}"));
            }
        }
        if self.url.db != 0 {
            let db = self.url.db.to_string();
            if let RedisReply::Error(e) = roundtrip(s, &[b"SELECT", db.as_bytes()]).await? {
                return Err(format!("redis SELECT {db} failed: {e}"));
            }
        }
        Ok(())
    }

    async fn eval(
        &self,
        s: &mut UpstreamStream<R::Tcp>,
        op: ScriptOp,
        key: &str,
        limits: Limits,
    ) -> Result<ScriptOutcome, String> {
        let redis_key = format!("{KEY_PREFIX}{key}");
        let args = script_args(op, limits, None);
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
        let ints = match &reply {
            RedisReply::Error(e) => return Err(format!("redis script error: {e}")),
            r => r.integers(),
        };
        ints.as_deref()
            .and_then(decode_script_reply)
            .ok_or_else(|| format!("redis: unexpected script answer {reply:?}"))
    }

    async fn load(&self, s: &mut UpstreamStream<R::Tcp>) -> Result<Vec<u8>, String> {
        match roundtrip(s, &[b"SCRIPT", b"LOAD", REDIS_SCRIPT.as_bytes()]).await? {
            RedisReply::Bulk(Some(sha)) => {
                *self.sha.lock().unwrap_or_else(|e| e.into_inner()) = Some(sha.clone());
                Ok(sha)
            }
            other => Err(format!("redis SCRIPT LOAD failed: {other:?}")),
        }
    }
}

async fn evalsha<T>(
    s: &mut UpstreamStream<T>,
    sha: &[u8],
    key: &str,
    args: &[String],
) -> Result<RedisReply, String>
where
    UpstreamStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let mut cmd: Vec<&[u8]> = vec![b"EVALSHA", sha, b"1", key.as_bytes()];
    cmd.extend(args.iter().map(|a| a.as_bytes()));
    roundtrip(s, &cmd).await
}

async fn roundtrip<T>(s: &mut UpstreamStream<T>, args: &[&[u8]]) -> Result<RedisReply, String>
where
    UpstreamStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let mut out = Vec::with_capacity(256);
    encode_redis_command(&mut out, args);
    s.write_all(&out)
        .await
        .map_err(|e| format!("redis write: {e}"))?;
    s.flush().await.map_err(|e| format!("redis write: {e}"))?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    loop {
        match parse_redis_reply(&buf, &RedisReplyLimits::default()) {
            Ok(Some((r, _))) => return Ok(r),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| format!("redis read: {e}"))?;
        if n == 0 {
            return Err("redis closed the connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
