//! A Redis server's connections and what goes over them: pooled per
//! server by the provider's connector (DNS, TCP, TLS for `rediss://`),
//! the handshake (`AUTH`, `SELECT`, `INFO replication`: a server's role
//! and history), the script loaded where it is missing, and one command's
//! bytes out and its reply in, telling a failure before the command ran
//! from one after it may have.

use chatgate_core::{
    REDIS_SCRIPT, RedisErrorKind, RedisReply, RedisReplyLimits, StoreError, classify_error,
    encode_redis_command, parse_redis_reply, parse_replication,
};
use futures_lite::{AsyncReadExt, AsyncWriteExt};

use super::nodes::{Command, Failed, Known, Node, RedisNodes};
use crate::provider::connector::OutboundStream;
use crate::runtime::Runtime;

impl<R: Runtime> RedisNodes<R> {
    /// Sends `cmd` on a connection to `node` (once more on a fresh
    /// connection when a pooled one turns out closed before answering).
    pub(super) async fn exec(
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
    pub(super) async fn connection(
        &self,
        node: &Node<R>,
        fresh: bool,
    ) -> Result<OutboundStream<R::Tcp>, StoreError> {
        self.pooled(node, fresh).await.map(|(s, _)| s)
    }

    pub(super) async fn auth(
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
        if let Some(password) = &self.url.password
            && let RedisReply::Error(e) = self.auth(s, password).await?
        {
            return Err(StoreError::Refused(format!("redis AUTH failed: {e}")));
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
pub(super) async fn roundtrip<T>(
    s: &mut OutboundStream<T>,
    args: &[&[u8]],
) -> Result<RedisReply, StoreError>
where
    OutboundStream<T>: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    roundtrip_with(s, args, &RedisReplyLimits::default()).await
}

pub(super) async fn roundtrip_with<T>(
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
