//! The admin listener's answers: `/metrics` (Prometheus text), `/healthz`
//! (the process answers), `/readyz` (it can serve: keys loaded, ledger
//! writable, a provider endpoint not ejected and reachable), `/upstreams`
//! (each provider endpoint's state, as JSON), the console: its page, login
//! and JSON (`console.rs`), from what [`crate::console`] records, and the
//! admin API: the keys and their audit trail (`api.rs`). Pure: the runtime
//! reads a request head (and a small body), gathers a [`Readiness`] when
//! asked, makes the key store's changes [`admin_step`] hands it, and writes
//! the bytes returned here.

mod api;
mod console;

use crate::gateway::Gateway;
use crate::http::write::{self, header, header_u64};
use crate::http::{Framing, HttpLimits, Method, header_value, parse_request_head};
use crate::time::Instant;
pub use api::{ApiChange, ApiRoute, ApiStep, StoreFailure, api_audit, api_changed};
use console::{Asking, console_response, console_route};
pub use console::{ConsoleRoute, sso_finish, sso_unavailable};

/// What `/readyz` checks, gathered by the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Client keys in force.
    pub keys: usize,
    /// The ledger's last append succeeded and its file exists.
    pub ledger_writable: bool,
    /// A provider endpoint is not ejected, and the provider answered
    /// recently or a connection to such an endpoint just opened; otherwise
    /// why not.
    pub upstream: Result<(), String>,
}

impl Readiness {
    /// All checks pass.
    pub fn ready(&self) -> bool {
        self.keys > 0 && self.ledger_writable && self.upstream.is_ok()
    }
}

/// What a request to the admin listener asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminRoute {
    /// `GET /metrics`.
    Metrics,
    /// `GET /healthz`.
    Health,
    /// `GET /readyz` (the runtime gathers a [`Readiness`]).
    Ready,
    /// `GET /upstreams`.
    Upstreams,
    /// The console's page, files, login and data.
    Console(ConsoleRoute),
    /// The admin API (`api.rs`): keys and the audit trail.
    Api(ApiRoute),
    /// Anything else: answered at once.
    Other,
}

/// Largest body read on the admin listener (the console's login form, the
/// admin API's JSON).
pub const MAX_ADMIN_BODY: usize = 16 * 1024;

/// A request head on the admin listener, routed.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminRequest {
    /// What it asks for.
    pub route: AdminRoute,
    /// `HEAD`: answered like `GET`, without a body.
    pub head_only: bool,
    /// Body bytes to read before answering: the console's login form and
    /// the admin API's changes (`Content-Length`, at most
    /// [`MAX_ADMIN_BODY`]; a longer or chunked one is answered `413`
    /// without being read). Other routes read none, so a probe that
    /// announces a body it never sends is answered at once.
    pub body_len: usize,
    /// The body announced is longer than [`MAX_ADMIN_BODY`], or chunked.
    body_refused: bool,
    authorization: Option<String>,
    cookie: Option<String>,
    /// `X-CSRF-Token`.
    csrf: Option<String>,
    /// `Host`: single sign-on's callback URL, unless configured.
    host: Option<String>,
    /// It came over TLS: the callback URL is `https`, and cookies are
    /// `Secure` ([`secure_cookies`]).
    tls: bool,
}

impl std::fmt::Debug for AdminRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the token or the session: they open the console.
        let redacted = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("AdminRequest")
            .field("route", &self.route)
            .field("head_only", &self.head_only)
            .field("body_len", &self.body_len)
            .field("authorization", &redacted(&self.authorization))
            .field("cookie", &redacted(&self.cookie))
            .finish()
    }
}

impl AdminRequest {
    /// Marks the request as one that came over TLS.
    pub fn over_tls(&mut self) {
        self.tls = true;
    }

    /// The request logs in to the console: the answer needs a fresh
    /// random session id.
    pub fn logs_in(&self) -> bool {
        self.route == AdminRoute::Console(ConsoleRoute::Login)
    }

    /// The answer needs 32 fresh random bytes: a session id (a login) or
    /// a key's secret (the API mints one).
    pub fn needs_random(&self) -> bool {
        match &self.route {
            AdminRoute::Api(r) => r.mints(),
            // A sign-in's state, nonce and PKCE verifier; then its session.
            AdminRoute::Console(ConsoleRoute::SsoLogin | ConsoleRoute::SsoCallback(_)) => true,
            _ => self.logs_in(),
        }
    }
}

/// Routes a complete request head.
pub fn admin_route(head: &[u8]) -> AdminRequest {
    let other = |head_only| AdminRequest {
        route: AdminRoute::Other,
        head_only,
        body_len: 0,
        body_refused: false,
        authorization: None,
        cookie: None,
        csrf: None,
        host: None,
        tls: false,
    };
    let Ok(h) = parse_request_head(head, &HttpLimits::default()) else {
        return other(false);
    };
    let head_only = h.method == Method::Head;
    let get = matches!(h.method, Method::Get | Method::Head);
    let route = match (get, h.path.as_str()) {
        (true, "/metrics") => AdminRoute::Metrics,
        (true, "/healthz") => AdminRoute::Health,
        (true, "/readyz") => AdminRoute::Ready,
        (true, "/upstreams") => AdminRoute::Upstreams,
        (_, path) => match ApiRoute::of(&h.method, path, query(head)) {
            Some(r) => AdminRoute::Api(r),
            None if get || h.method == Method::Post => {
                match console_route(get, path, query(head)) {
                    Some(r) => AdminRoute::Console(r),
                    None => AdminRoute::Other,
                }
            }
            None => AdminRoute::Other,
        },
    };
    let reads_body = match &route {
        AdminRoute::Console(ConsoleRoute::Login) => true,
        AdminRoute::Api(r) => matches!(
            r,
            ApiRoute::Create | ApiRoute::Update(_) | ApiRoute::Rotate(_)
        ),
        _ => false,
    };
    let (body_len, body_refused) = match h.framing {
        _ if !reads_body => (0, false),
        Framing::Length(n) if n <= MAX_ADMIN_BODY as u64 => (n as usize, false),
        Framing::Empty => (0, false),
        _ => (0, true),
    };
    let text = |name| header_value(head, name).map(|v| String::from_utf8_lossy(v).into_owned());
    AdminRequest {
        route,
        head_only,
        body_len,
        body_refused,
        authorization: h.authorization,
        cookie: text("cookie"),
        csrf: text("x-csrf-token"),
        host: text("host"),
        tls: false,
    }
}

/// Marks every cookie an admin answer sets `Secure`, for an answer that
/// goes over TLS: a browser then never sends the console's session (nor a
/// sign-in's state) over plain HTTP. The cookies are the console's own,
/// in the head this crate wrote; each `Set-Cookie` line gains `; Secure`.
pub fn secure_cookies(answer: &mut Vec<u8>) {
    const NAME: &[u8] = b"\r\nset-cookie:";
    let Some(head_end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let mut out = Vec::with_capacity(answer.len() + 64);
    let mut i = 0;
    while i < head_end {
        let line_end = answer[i + 2..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map_or(head_end, |p| i + 2 + p);
        let line = &answer[i..line_end];
        out.extend_from_slice(line);
        if line.len() >= NAME.len() && line[..NAME.len()].eq_ignore_ascii_case(NAME) {
            out.extend_from_slice(b"; Secure");
        }
        i = line_end;
    }
    out.extend_from_slice(&answer[head_end..]);
    *answer = out;
}

/// The query string of a request head's target (after `?`), or `""`.
fn query(head: &[u8]) -> &str {
    let line = head
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or_default();
    let target = line.split(|&b| b == b' ').nth(1).unwrap_or_default();
    let q = target
        .iter()
        .position(|&b| b == b'?')
        .map_or(&[][..], |i| &target[i + 1..]);
    std::str::from_utf8(q).unwrap_or_default()
}

/// What the runtime does for a request: most are answered at once
/// ([`ApiStep::Answer`], from [`admin_response`]); a change to the keys or
/// a read of the audit trail is made by the runtime against the key store,
/// then answered by [`api_changed`] or [`api_audit`].
pub fn admin_step(
    req: &AdminRequest,
    body: &[u8],
    gw: &Gateway,
    ready: Option<&Readiness>,
    now: Instant,
    fresh: [u8; 32],
    peer: Option<crate::console::Peer>,
) -> ApiStep {
    if let AdminRoute::Console(r @ (ConsoleRoute::SsoLogin | ConsoleRoute::SsoCallback(_))) =
        &req.route
    {
        return console::sso_step(
            r,
            req.host.as_deref(),
            req.tls,
            req.cookie.as_deref(),
            gw,
            now,
            fresh,
        );
    }
    let AdminRoute::Api(route) = &req.route else {
        return ApiStep::Answer(admin_response(req, body, gw, ready, now, fresh, peer));
    };
    if gw.console().access().is_none() {
        return ApiStep::Answer(api::error(
            404,
            "off",
            None,
            "the admin API is off: start chatgate with --admin-token-env NAME, NAME being the \
             environment variable that holds the admin token",
            &[],
        ));
    }
    let ask = Asking {
        head_only: req.head_only,
        authorization: req.authorization.as_deref(),
        cookie: req.cookie.as_deref(),
        body,
        peer,
        sso: gw.console().sso().is_some(),
    };
    let who = match console::admitted(ask, gw.console(), gw.wall().unix_ms(now), false) {
        Ok(who) => who,
        Err(answer) => return ApiStep::Answer(answer),
    };
    if req.body_refused {
        return ApiStep::Answer(api::error(
            413,
            "too_large",
            Some("body"),
            &format!(
                "the body must be JSON of at most {MAX_ADMIN_BODY} bytes, with Content-Length"
            ),
            &[],
        ));
    }
    api::api_step(route, &who, body, req.csrf.as_deref(), gw, now, fresh)
}

/// The whole response (with `Connection: close`) to a routed request at
/// `now`; `body` is its body as read, `fresh` 32 random bytes (a session
/// id, if the request logs in to the console).
pub fn admin_response(
    req: &AdminRequest,
    body: &[u8],
    gw: &Gateway,
    ready: Option<&Readiness>,
    now: Instant,
    fresh: [u8; 32],
    peer: Option<crate::console::Peer>,
) -> Vec<u8> {
    let head_only = req.head_only;
    match &req.route {
        AdminRoute::Console(route) => console_response(
            route,
            Asking {
                head_only,
                authorization: req.authorization.as_deref(),
                cookie: req.cookie.as_deref(),
                body,
                peer,
                sso: gw.console().sso().is_some(),
            },
            gw,
            now,
            fresh,
        ),
        AdminRoute::Api(_) => match admin_step(req, body, gw, ready, now, fresh, peer) {
            ApiStep::Answer(a) => a,
            // Only a runtime with a key store makes these.
            _ => api::error(
                503,
                "store_unavailable",
                None,
                "this gateway has no key store (the demo keeps its keys in memory)",
                &[],
            ),
        },
        AdminRoute::Upstreams => {
            let status = gw.endpoints().status(now, gw.wall());
            let mut body =
                serde_json::to_vec(&serde_json::json!({ "upstreams": status })).unwrap_or_default();
            body.push(b'\n');
            respond(200, "application/json", &body, head_only)
        }
        AdminRoute::Metrics => respond(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            gw.render_metrics(now).as_bytes(),
            head_only,
        ),
        AdminRoute::Health => respond(200, "text/plain; charset=utf-8", b"ok\n", head_only),
        AdminRoute::Ready => {
            let Some(r) = ready else {
                return respond(
                    500,
                    "text/plain; charset=utf-8",
                    b"not checked\n",
                    head_only,
                );
            };
            let mut body = String::new();
            body.push_str(&format!(
                "keys: {}\n",
                if r.keys > 0 {
                    format!("ok ({} loaded)", r.keys)
                } else {
                    "none loaded".into()
                }
            ));
            body.push_str(&format!(
                "ledger: {}\n",
                if r.ledger_writable {
                    "ok"
                } else {
                    "not writable"
                }
            ));
            body.push_str(&format!(
                "upstream: {}\n",
                match &r.upstream {
                    Ok(()) => "ok".to_owned(),
                    Err(e) => format!("unreachable ({e})"),
                }
            ));
            let status = if r.ready() { 200 } else { 503 };
            respond(
                status,
                "text/plain; charset=utf-8",
                body.as_bytes(),
                head_only,
            )
        }
        AdminRoute::Other => respond(
            404,
            "text/plain; charset=utf-8",
            b"not found: the admin listener serves /metrics, /healthz, /readyz, /upstreams and the console at /\n",
            head_only,
        ),
    }
}

fn respond(status: u16, content_type: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    respond_with(status, content_type, body, [], head_only)
}

/// A whole answer with `Connection: close`, `headers` after the content
/// type and length (the console adds its security headers here).
pub(crate) fn respond_with<'h>(
    status: u16,
    content_type: &str,
    body: &[u8],
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    head_only: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 512);
    write::status_line(&mut out, status);
    header(&mut out, "Content-Type", content_type);
    header_u64(&mut out, "Content-Length", body.len() as u64);
    for (name, value) in headers {
        header(&mut out, name, value);
    }
    header(&mut out, "Connection", "close");
    write::end_head(&mut out);
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn cookies_over_tls_are_secure() {
        let mut a = b"HTTP/1.1 303 See Other\r\nSet-Cookie: a=1; HttpOnly\r\nLocation: /\r\nset-cookie: b=; Max-Age=0\r\n\r\nSet-Cookie: in the body".to_vec();
        super::secure_cookies(&mut a);
        assert_eq!(
            String::from_utf8(a).unwrap(),
            "HTTP/1.1 303 See Other\r\nSet-Cookie: a=1; HttpOnly; Secure\r\nLocation: /\r\nset-cookie: b=; Max-Age=0; Secure\r\n\r\nSet-Cookie: in the body"
        );
        // None set, or no head at all: unchanged.
        for plain in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"[..],
            b"HTTP/1.1 200",
        ] {
            let mut a = plain.to_vec();
            super::secure_cookies(&mut a);
            assert_eq!(a, plain);
        }
    }

    use super::*;

    #[test]
    fn routes() {
        let r = |h: &[u8]| {
            let a = admin_route(h);
            (a.route, a.head_only)
        };
        assert_eq!(
            r(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n"),
            (AdminRoute::Metrics, false)
        );
        assert_eq!(
            r(b"HEAD /readyz HTTP/1.1\r\nHost: a\r\n\r\n"),
            (AdminRoute::Ready, true)
        );
        assert_eq!(
            r(b"GET /upstreams HTTP/1.1\r\nHost: a\r\n\r\n"),
            (AdminRoute::Upstreams, false)
        );
        assert_eq!(
            r(b"POST /healthz HTTP/1.1\r\nHost: a\r\n\r\n").0,
            AdminRoute::Other
        );
        assert_eq!(
            r(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n").0,
            AdminRoute::Other
        );
        assert_eq!(r(b"garbage\r\n\r\n").0, AdminRoute::Other);
        let login = admin_route(
            b"POST /login HTTP/1.1\r\nHost: a\r\nCookie: x=1\r\nContent-Length: 12\r\n\r\n",
        );
        assert_eq!(login.route, AdminRoute::Console(ConsoleRoute::Login));
        assert_eq!((login.body_len, login.cookie.as_deref()), (12, Some("x=1")));
        assert!(login.logs_in());
        assert!(!format!("{login:?}").contains("x=1"));
        let big = admin_route(b"POST /login HTTP/1.1\r\nHost: a\r\nContent-Length: 99999\r\n\r\n");
        assert_eq!(big.body_len, 0);
        let probe = admin_route(b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n");
        assert_eq!((probe.route, probe.body_len), (AdminRoute::Health, 0));
    }

    #[test]
    fn readiness_says_what_fails() {
        let r = Readiness {
            keys: 2,
            ledger_writable: true,
            upstream: Err("connection refused".into()),
        };
        assert!(!r.ready());
        let ok = Readiness {
            upstream: Ok(()),
            ..r.clone()
        };
        assert!(ok.ready());
        assert!(
            !Readiness {
                keys: 0,
                ..ok.clone()
            }
            .ready()
        );
        assert!(
            !Readiness {
                ledger_writable: false,
                ..ok
            }
            .ready()
        );
    }
}
