//! The admin listener's answers: `/metrics` (Prometheus text), `/healthz`
//! (the process answers), `/readyz` (it can serve: keys loaded, ledger
//! writable, a provider endpoint not ejected and reachable) and
//! `/upstreams` (each provider endpoint's state, as JSON). Pure: the runtime reads a request head,
//! gathers a [`Readiness`] when asked, and writes the bytes returned here.

use crate::gateway::Gateway;
use crate::http::HttpLimits;
use crate::http::write::{self, header, header_u64};
use crate::http::{Method, parse_request_head};
use crate::time::Instant;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminRoute {
    /// `GET /metrics`.
    Metrics,
    /// `GET /healthz`.
    Health,
    /// `GET /readyz` (the runtime gathers a [`Readiness`]).
    Ready,
    /// `GET /upstreams`.
    Upstreams,
    /// Anything else: answered at once.
    Other,
}

/// Routes a complete request head (`HEAD` is answered like `GET`, without
/// a body).
pub fn admin_route(head: &[u8]) -> (AdminRoute, bool) {
    let Ok(h) = parse_request_head(head, &HttpLimits::default()) else {
        return (AdminRoute::Other, false);
    };
    let head_only = h.method == Method::Head;
    if !matches!(h.method, Method::Get | Method::Head) {
        return (AdminRoute::Other, head_only);
    }
    let route = match h.path.as_str() {
        "/metrics" => AdminRoute::Metrics,
        "/healthz" => AdminRoute::Health,
        "/readyz" => AdminRoute::Ready,
        "/upstreams" => AdminRoute::Upstreams,
        _ => AdminRoute::Other,
    };
    (route, head_only)
}

/// The whole response (with `Connection: close`) to a routed request at
/// `now`.
pub fn admin_response(
    route: AdminRoute,
    head_only: bool,
    gw: &Gateway,
    ready: Option<&Readiness>,
    now: Instant,
) -> Vec<u8> {
    match route {
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
            b"not found: the admin listener serves /metrics, /healthz, /readyz and /upstreams\n",
            head_only,
        ),
    }
}

fn respond(status: u16, content_type: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 128);
    write::status_line(&mut out, status);
    header(&mut out, "Content-Type", content_type);
    header_u64(&mut out, "Content-Length", body.len() as u64);
    header(&mut out, "Connection", "close");
    write::end_head(&mut out);
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            admin_route(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n"),
            (AdminRoute::Metrics, false)
        );
        assert_eq!(
            admin_route(b"HEAD /readyz HTTP/1.1\r\nHost: a\r\n\r\n"),
            (AdminRoute::Ready, true)
        );
        assert_eq!(
            admin_route(b"GET /upstreams HTTP/1.1\r\nHost: a\r\n\r\n"),
            (AdminRoute::Upstreams, false)
        );
        assert_eq!(
            admin_route(b"POST /healthz HTTP/1.1\r\nHost: a\r\n\r\n").0,
            AdminRoute::Other
        );
        assert_eq!(
            admin_route(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n").0,
            AdminRoute::Other
        );
        assert_eq!(admin_route(b"garbage\r\n\r\n").0, AdminRoute::Other);
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
