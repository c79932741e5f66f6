//! The admin listener (`--admin-listen`): `/metrics`, `/healthz`, `/readyz`,
//! `/upstreams` and the console on their own socket, one request per
//! connection. The answers come from `chatgate_core::admin`; this only
//! moves bytes, gathers readiness, supplies randomness for console
//! sessions and samples the console's gauges once a second.

use std::sync::Arc;
use std::time::Duration;

use chatgate_core::http::HeadScanner;
use chatgate_core::{AdminRoute, ApiChange, ApiStep, AuditRecord, Readiness, StoreFailure};
use chatgate_core::{
    admin_route, admin_step, api_audit, api_changed, secure_cookies, sso_finish, sso_unavailable,
};

/// How often the console's gauges (requests in flight, streams) are
/// sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
use futures_lite::{AsyncReadExt, AsyncWriteExt, future};

use crate::runtime::Runtime;
use crate::serving::driver::{Shared, linger_close, open_client};
use crate::stores::keys::{Actor, ChangeError};

/// Largest request head read on the admin listener.
const MAX_ADMIN_HEAD: usize = 16 * 1024;
/// Longest an admin exchange may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);
/// A provider response within this long counts as reachable for `/readyz`.
const RECENT_CONTACT_MS: u64 = 60_000;

/// Serves the admin listener until the process exits.
pub(crate) async fn run_admin<R: Runtime>(shared: Arc<Shared<R>>, listener: R::Listener) {
    if shared.gateway.console().is_on() {
        if let (Some(url), Some(access)) =
            (sessions_url(&shared), shared.gateway.console().access())
        {
            // Sessions outlive a restart and work on every instance: the
            // ones in the store are loaded before the first request.
            access.persist();
            sync_sessions(&shared, &url).await;
            shared.rt.spawn(keep_sessions(Arc::clone(&shared), url));
        }
        shared.rt.spawn(sample_console(Arc::clone(&shared)));
        if shared.shared_limits.is_some() || shared.ledger_postgres.is_some() {
            let url = shared.ledger_postgres.clone();
            shared
                .rt
                .spawn(crate::serving::cluster::gather(Arc::clone(&shared), url));
        }
    }
    loop {
        match shared.rt.accept(&listener).await {
            Ok(tcp) => shared.rt.spawn(serve_admin(Arc::clone(&shared), tcp)),
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                shared
                    .rt
                    .timer(std::time::Instant::now() + Duration::from_millis(50))
                    .await;
            }
        }
    }
}

/// How often the console's sessions are read from PostgreSQL (those
/// opened or closed on other instances).
const SESSIONS_EVERY: Duration = Duration::from_secs(5);

/// Where the console's sessions are kept: the keys' PostgreSQL, else the
/// shared ledger's.
fn sessions_url<R: Runtime>(shared: &Shared<R>) -> Option<String> {
    match shared.keys.as_ref().map(|k| &k.store) {
        Some(crate::stores::keys::KeyStore::Postgres(url)) => Some(url.clone()),
        _ => shared.ledger_postgres.clone(),
    }
}

/// Writes this instance's session changes to PostgreSQL and takes in every
/// instance's sessions; a failure is logged and the sessions here stay.
async fn sync_sessions<R: Runtime>(shared: &Arc<Shared<R>>, url: &str) {
    let Some(access) = shared.gateway.console().access() else {
        return;
    };
    // One sync at a time: a read taken before another sync's write must
    // not bring back a session that write closed.
    static SYNCING: async_lock::Mutex<()> = async_lock::Mutex::new(());
    let _turn = SYNCING.lock().await;
    let changes = access.take_changes();
    let now_ms = shared.gateway.wall().unix_ms(crate::runtime::now());
    let url = url.to_owned();
    let (changes, read) = shared
        .rt
        .unblock(move || {
            let read = crate::stores::postgres::sessions::connect(&url).and_then(|mut c| {
                crate::stores::postgres::sessions::sync(&mut c, &changes, now_ms)
            });
            (changes, read)
        })
        .await;
    match read {
        Ok(stored) => access.sync_sessions(&stored, now_ms),
        Err(e) => {
            // Written at the next sync; a session closed here stays closed.
            access.requeue(changes);
            tracing::warn!("console: {e}; sessions are kept in this process meanwhile");
        }
    }
}

/// Keeps the sessions in step with PostgreSQL until the process exits.
async fn keep_sessions<R: Runtime>(shared: Arc<Shared<R>>, url: String) {
    loop {
        shared
            .rt
            .timer(std::time::Instant::now() + SESSIONS_EVERY)
            .await;
        sync_sessions(&shared, &url).await;
    }
}

/// Samples the console's gauges until the process exits.
async fn sample_console<R: Runtime>(shared: Arc<Shared<R>>) {
    loop {
        shared.gateway.sample_console(crate::runtime::now());
        shared
            .rt
            .timer(std::time::Instant::now() + SAMPLE_EVERY)
            .await;
    }
}

async fn serve_admin<R: Runtime>(shared: Arc<Shared<R>>, tcp: R::Tcp) {
    let rt = shared.rt.clone();
    let addr = rt.peer_addr(&tcp);
    let tls = shared.admin_tls.as_deref();
    let deadline = std::time::Instant::now() + ADMIN_TIMEOUT;
    let Some(mut tcp) = open_client(&shared, tcp, tls, deadline).await else {
        return;
    };
    let work = async {
        let mut buf = Vec::new();
        let mut scanner = HeadScanner::new();
        let mut chunk = [0u8; 2048];
        let head_len = loop {
            let n = tcp.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            match scanner.scan(&buf, MAX_ADMIN_HEAD) {
                Ok(Some(len)) => break len,
                Ok(None) => {}
                // Too long or malformed: answered as not found.
                Err(_) => break buf.len(),
            }
        };
        let mut req = admin_route(&buf[..head_len]);
        if tls.is_some() {
            req.over_tls();
        }
        // The body (the console's login form), up to its small cap.
        let mut body = buf.split_off(head_len);
        while body.len() < req.body_len {
            let n = tcp.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(req.body_len);
        let ready = match req.route {
            AdminRoute::Ready => Some(readiness(&shared).await),
            _ => None,
        };
        if req.route == AdminRoute::Metrics {
            shared.gateway.metrics().pool_idle(shared.connectors.idle());
        }
        let now = crate::runtime::now();
        // A session id or a key's secret only when the answer needs one.
        let fresh = if req.needs_random() {
            crate::runtime::random_32()
        } else {
            [0; 32]
        };
        // As 16 bytes, an IPv4 address mapped into IPv6.
        let peer = addr.map(|a| match a.ip() {
            std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            std::net::IpAddr::V6(v6) => v6.octets(),
        });
        let mut step = admin_step(
            &req,
            &body,
            &shared.gateway,
            ready.as_ref(),
            now,
            fresh,
            peer,
        );
        let sso = shared.gateway.console().sso();
        if let (ApiStep::SsoDiscover, Some(sso)) = (&step, sso) {
            let now_ms = shared.gateway.wall().unix_ms(now);
            step = match crate::serving::sso::discover(&rt, sso, now_ms).await {
                Ok(()) => match admin_step(&req, &body, &shared.gateway, None, now, fresh, peer) {
                    ApiStep::SsoDiscover => {
                        ApiStep::Answer(sso_unavailable("its keys could not be used"))
                    }
                    again => again,
                },
                Err(why) => ApiStep::Answer(sso_unavailable(&why)),
            };
        }
        let out = match step {
            ApiStep::Answer(out) => out,
            ApiStep::Change(change) => {
                let address = addr.map(|a| a.ip().to_string());
                let result = store_change(&shared, &change, address).await;
                api_changed(&change, result, &shared.gateway, crate::runtime::now())
            }
            ApiStep::SsoDiscover => sso_unavailable("single sign-on is not configured"),
            ApiStep::SsoExchange(exchange) => {
                let answer = match sso {
                    Some(sso) => crate::serving::sso::exchange(&rt, sso, &exchange).await,
                    None => Err("single sign-on is not configured".into()),
                };
                // The session's id: fresh bytes, not the sign-in's.
                let session = crate::runtime::random_32();
                sso_finish(
                    &exchange,
                    answer,
                    &shared.gateway,
                    crate::runtime::now(),
                    session,
                )
            }
            ApiStep::Audit { before, limit } => {
                let result = match shared.keys.clone() {
                    None => Ok(Vec::new()),
                    Some(src) => {
                        rt.unblock(move || {
                            src.store
                                .audit(src.audit.as_deref(), before, limit)
                                .map_err(|e| e.to_string())
                        })
                        .await
                    }
                };
                api_audit(result, limit)
            }
        };
        // A session opened or closed is in the store before its answer,
        // so that the next request may go to another instance.
        let opened_or_closed = shared
            .gateway
            .console()
            .access()
            .is_some_and(|a| a.has_changes());
        if opened_or_closed && let Some(url) = sessions_url(&shared) {
            sync_sessions(&shared, &url).await;
        }
        let mut out = out;
        if tls.is_some() {
            secure_cookies(&mut out);
        }
        tcp.write_all(&out).await.ok()?;
        tcp.flush().await.ok()
    };
    future::or(work, async {
        rt.timer(deadline).await;
        None
    })
    .await;
    linger_close(&rt, tcp).await;
}

/// Makes an admin API change in the key store (off the reactor), then
/// applies the keys in this process at once: the next request on the
/// public listener sees it.
async fn store_change<R: Runtime>(
    shared: &Arc<Shared<R>>,
    change: &ApiChange,
    address: Option<String>,
) -> Result<AuditRecord, StoreFailure> {
    let Some(src) = shared.keys.clone() else {
        return Err(StoreFailure::Unavailable(
            "this gateway has no key store (the demo keeps its keys in memory)".into(),
        ));
    };
    let op = change.op.clone();
    let actor = Actor {
        name: change.actor.clone(),
        address,
    };
    let now_ms = shared.gateway.wall().unix_ms(crate::runtime::now());
    let (result, src) = shared
        .rt
        .unblock(move || {
            let r = src.store.change(&op, &actor, now_ms, src.audit.as_deref());
            (r, src)
        })
        .await;
    match result {
        Ok(record) => {
            tracing::info!(
                key = %record.key,
                action = %record.action,
                actor = %record.actor,
                "key changed through the admin API"
            );
            let reload = src.clone();
            let shared2 = Arc::clone(shared);
            shared
                .rt
                .unblock(move || crate::reload::keys::reload(&shared2, &reload, "the admin API"))
                .await;
            Ok(record)
        }
        Err(ChangeError::Refused(e)) => Err(StoreFailure::Refused(e)),
        Err(ChangeError::Store(e)) => {
            tracing::error!("admin API: {e}");
            Err(StoreFailure::Unavailable(e.to_string()))
        }
    }
}

/// Keys loaded, ledger writable, a provider endpoint not ejected and
/// reachable: the provider answered recently, or a connection to the first
/// endpoint not ejected opens now (kept in its pool).
async fn readiness<R: Runtime>(shared: &Shared<R>) -> Readiness {
    let gw = &shared.gateway;
    let now = crate::runtime::now();
    let now_ms = gw.wall().unix_ms(now);
    let recent = now_ms.saturating_sub(gw.metrics().last_upstream_contact_ms()) < RECENT_CONTACT_MS;
    let endpoints = gw.endpoints();
    let serving = endpoints
        .endpoints()
        .iter()
        .find(|e| endpoints.is_serving(e, now))
        .cloned();
    let upstream = if serving.is_none() {
        Err("every provider endpoint is ejected".to_owned())
    } else if recent {
        Ok(())
    } else {
        let timeout = gw.config().timeouts.upstream_connect;
        let rt = shared.rt.clone();
        future::or(
            async {
                let endpoint = serving.expect("checked above");
                let connector = shared
                    .connectors
                    .get(&endpoint)
                    .map_err(|e| e.to_string())?;
                let (conn, _) = connector.connect(true).await.map_err(|e| e.to_string())?;
                connector.release(conn);
                Ok(())
            },
            async move {
                rt.timer(std::time::Instant::now() + timeout).await;
                Err(format!("no connection within {timeout:?}"))
            },
        )
        .await
    };
    Readiness {
        keys: gw.keys().len(),
        ledger_writable: shared.ledger.writable(),
        upstream,
    }
}
