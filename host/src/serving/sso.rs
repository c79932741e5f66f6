//! Single sign-on's requests to the identity provider: its discovery
//! document and keys, and the code exchanged for an ID token. What they
//! mean is decided in core (`chatgate_core::console::Sso`); this only
//! moves the bytes, over a fresh connection each (TLS with the usual
//! roots for an `https` provider), within [`TIMEOUT`].

use std::time::Duration;

use chatgate_core::Target;
use chatgate_core::console::{Exchange, Sso};
use futures_lite::{AsyncWriteExt, future};

use crate::provider::connector::{Connector, read_response};
use crate::runtime::Runtime;

/// Longest a request to the identity provider may take: a sign-in's
/// start makes two (the discovery document, the keys), and both fit in the
/// admin listener's 10 s per exchange with room for the answer.
const TIMEOUT: Duration = Duration::from_secs(4);
/// Largest answer read from it.
const MAX_BODY: usize = 1 << 20;

/// One request: `GET url`, or a form `POST` with its `Authorization`.
async fn fetch<R: Runtime>(
    rt: &R,
    url: &str,
    form: Option<(&str, &str)>,
) -> Result<(u16, Vec<u8>), String> {
    let target = Target::parse(url)?;
    let connector = Connector::new(rt.clone(), target.clone(), None, 0, Duration::ZERO)
        .map_err(|e| e.to_string())?;
    let work = async {
        let (mut s, _) = connector
            .connect(true)
            .await
            .map_err(|e| format!("cannot connect to {url}: {e}"))?;
        let mut req = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: chatgate/{}\r\nConnection: close\r\n",
            if form.is_some() { "POST" } else { "GET" },
            if target.base_path.is_empty() {
                "/"
            } else {
                &target.base_path
            },
            target.host_header(),
            env!("CARGO_PKG_VERSION"),
        );
        if let Some((authorization, body)) = form {
            req.push_str(&format!(
                "Authorization: {authorization}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ));
        } else {
            req.push_str("\r\n");
        }
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("cannot send to {url}: {e}"))?;
        s.flush()
            .await
            .map_err(|e| format!("cannot send to {url}: {e}"))?;
        let (head, body, _) = read_response(&mut s, Some(MAX_BODY))
            .await
            .map_err(|e| format!("no answer from {url}: {e}"))?;
        Ok((head.status, body))
    };
    let limit = async {
        rt.timer(std::time::Instant::now() + TIMEOUT).await;
        Err(format!("no answer from {url} within {TIMEOUT:?}"))
    };
    future::or(work, limit).await
}

/// After a failed discovery, how long sign-ins are refused without asking
/// the provider again (a flood of sign-ins makes one request, not one
/// each).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// Reads the provider's discovery document and keys into `sso`, one
/// reading at a time.
pub(crate) async fn discover<R: Runtime>(rt: &R, sso: &Sso, now_ms: u64) -> Result<(), String> {
    static TURN: async_lock::Mutex<Option<(std::time::Instant, String)>> =
        async_lock::Mutex::new(None);
    let mut last_failure = TURN.lock().await;
    if sso.has_provider(now_ms, 60_000) {
        // Read meanwhile by the request this one waited for.
        return Ok(());
    }
    if let Some((_, why)) = last_failure
        .as_ref()
        .filter(|(at, _)| at.elapsed() < RETRY_AFTER_FAILURE)
    {
        return Err(why.clone());
    }
    let read = read_provider(rt, sso, now_ms).await;
    *last_failure = read
        .as_ref()
        .err()
        .map(|e| (std::time::Instant::now(), e.clone()));
    read
}

async fn read_provider<R: Runtime>(rt: &R, sso: &Sso, now_ms: u64) -> Result<(), String> {
    let url = sso.discovery_url();
    let (status, body) = fetch(rt, &url, None).await?;
    if status != 200 {
        return Err(format!("{url} answered {status}"));
    }
    let (authorize, token, jwks) = sso.read_discovery(&body)?;
    let (status, keys) = fetch(rt, &jwks, None).await?;
    if status != 200 {
        return Err(format!("{jwks} answered {status}"));
    }
    sso.set_provider(authorize, token, &keys, now_ms)
}

/// Posts the code to the token endpoint: its status and body.
pub(crate) async fn exchange<R: Runtime>(
    rt: &R,
    sso: &Sso,
    exchange: &Exchange,
) -> Result<(u16, Vec<u8>), String> {
    let (url, authorization, body) = sso
        .token_request(exchange)
        .ok_or("the identity provider is not known")?;
    fetch(rt, &url, Some((&authorization, &body))).await
}
