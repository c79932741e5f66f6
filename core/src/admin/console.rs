//! The console's routes and answers on the admin listener.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | the console; the login form (401) without a session; a page saying how to turn it on (404) when it is off |
//! | `GET /console.css`, `/console.js`, `/favicon.svg` | the embedded files (no data in them: no token needed) |
//! | `POST /login` | form field `token`: a session cookie and a redirect to `/`, or the form again (401) |
//! | `POST /logout` | the cookie removed, a redirect to `/` |
//! | `GET /api/overview` | everything the page shows, as JSON |
//!
//! The keys and the audit trail are the admin API's (`api.rs`), behind
//! the same gate ([`admitted`]).
//!
//! Every answer carries a `Content-Security-Policy` that allows nothing
//! but this origin's own files and JSON: no inline script or style, no
//! other origin, no framing.

use serde_json::{Value, json};

use crate::catalog::format_usd;
use crate::console::CSP;
use crate::console::{Console, SLOT_SECS, Tally, Who};
use crate::gateway::Gateway;
use crate::quota::Period;
use crate::time::{Instant, rfc3339_ms};

const INDEX: &str = include_str!("../../console/index.html");
const LOGIN: &str = include_str!("../../console/login.html");
/// After single sign-on: a page of this origin that opens the console, so
/// that the browser sends the new `SameSite=Strict` session cookie (it
/// would not on a redirect that began at the identity provider's site).
const SIGNED_IN: &str = include_str!("../../console/signed-in.html");
/// How long the identity provider's keys are used before they are read
/// again.
const PROVIDER_MAX_AGE_MS: u64 = 3_600_000;
const OFF: &str = include_str!("../../console/off.html");
const CSS: &str = include_str!("../../console/console.css");
const JS: &str = include_str!("../../console/console.js");
const ICON: &str = include_str!("../../console/favicon.svg");

/// What a request to the console asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsoleRoute {
    /// `GET /`.
    Page,
    /// One of the embedded files: its content type and text.
    File(&'static str, &'static str),
    /// `POST /login`.
    Login,
    /// `POST /logout`.
    Logout,
    /// `GET /api/overview`.
    Overview,
    /// `GET /sso/login`: single sign-on starts.
    SsoLogin,
    /// `GET /sso/callback?…`: the identity provider sends the browser
    /// back (the query string).
    SsoCallback(String),
}

/// The console's route for `method` (`GET` also for `HEAD`) and `path`,
/// if it is one.
pub(super) fn console_route(get: bool, path: &str, query: &str) -> Option<ConsoleRoute> {
    Some(match (get, path) {
        (true, "/") => ConsoleRoute::Page,
        (true, "/console.css") => ConsoleRoute::File("text/css; charset=utf-8", CSS),
        (true, "/console.js") => ConsoleRoute::File("text/javascript; charset=utf-8", JS),
        (true, "/favicon.svg") => ConsoleRoute::File("image/svg+xml", ICON),
        (false, "/login") => ConsoleRoute::Login,
        (false, "/logout") => ConsoleRoute::Logout,
        (true, "/api/overview") => ConsoleRoute::Overview,
        (true, "/sso/login") => ConsoleRoute::SsoLogin,
        (true, "/sso/callback") => ConsoleRoute::SsoCallback(query.to_owned()),
        _ => return None,
    })
}

/// What the console needs of a request besides its route.
#[derive(Clone, Copy, Default)]
pub(super) struct Asking<'a> {
    /// `HEAD`: the head only.
    pub head_only: bool,
    /// The `Authorization` value.
    pub authorization: Option<&'a str>,
    /// The `Cookie` value.
    pub cookie: Option<&'a str>,
    /// The body (the login form).
    pub body: &'a [u8],
    /// The address the request came from (16 bytes, IPv4 mapped), when
    /// the runtime knows it.
    pub peer: Option<crate::console::Peer>,
    /// Single sign-on is configured: the login form links to it.
    pub sso: bool,
}

impl std::fmt::Debug for Asking<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the token, the session or the login form.
        f.debug_struct("Asking")
            .field("head_only", &self.head_only)
            .field("body_len", &self.body.len())
            .finish_non_exhaustive()
    }
}

/// The whole answer (with `Connection: close`) to `route` at `now`;
/// `fresh` is 32 random bytes from the runtime, a session id if this
/// request logs in.
pub(super) fn console_response(
    route: &ConsoleRoute,
    ask: Asking<'_>,
    gw: &Gateway,
    now: Instant,
    fresh: [u8; 32],
) -> Vec<u8> {
    let console = gw.console();
    let unix_ms = gw.wall().unix_ms(now);
    let html = "text/html; charset=utf-8";
    let json_type = "application/json";
    if let ConsoleRoute::File(content_type, text) = route {
        return respond(200, content_type, text.as_bytes(), &[], ask.head_only);
    }
    let Some(access) = console.access() else {
        return match route {
            ConsoleRoute::Page => respond(404, html, OFF.as_bytes(), &[], ask.head_only),
            _ => respond(
                404,
                json_type,
                &error_body(
                    "the console is off: start chatgate with --admin-token-env NAME, NAME being \
                     the environment variable that holds the admin token",
                ),
                &[],
                ask.head_only,
            ),
        };
    };
    // Anyone may log in, or out.
    if !matches!(route, ConsoleRoute::Login | ConsoleRoute::Logout)
        && let Err(answer) = admitted(ask, console, unix_ms, route == &ConsoleRoute::Page)
    {
        return answer;
    }
    let login_form = |status: u16, message: &str| {
        respond(
            status,
            html,
            login_page(message, ask.sso).as_bytes(),
            &[("WWW-Authenticate", "Bearer realm=\"chatgate console\"")],
            ask.head_only,
        )
    };
    match route {
        ConsoleRoute::Login => {
            let peer = ask.peer;
            if let Some(wait) = peer.and_then(|p| access.throttle().check(p, unix_ms).err()) {
                return throttled(route, wait, ask.head_only);
            }
            let token = crate::console::form_value(ask.body, "token").unwrap_or_default();
            if !token.is_empty() && access.is_token(token.as_bytes()) {
                if let Some(p) = peer {
                    access.throttle().succeeded(p);
                }
                back_to_page(&access.open_session(fresh, unix_ms), ask.head_only)
            } else {
                let wait = peer.map_or(0, |p| access.throttle().failed(p, unix_ms));
                if wait > 0 {
                    return throttled(route, wait, ask.head_only);
                }
                login_form(401, "That is not the admin token.")
            }
        }
        ConsoleRoute::Logout => back_to_page(&access.close_session(ask.cookie), ask.head_only),
        ConsoleRoute::Page => respond(200, html, INDEX.as_bytes(), &[], ask.head_only),
        ConsoleRoute::Overview => {
            let body = to_vec(&overview(gw, console, now, unix_ms));
            respond(200, json_type, &body, &[], ask.head_only)
        }
        ConsoleRoute::File(..) => unreachable!("answered above"),
        ConsoleRoute::SsoLogin | ConsoleRoute::SsoCallback(_) => {
            respond(404, html, b"", &[], ask.head_only)
        }
    }
}

/// Single sign-on's steps: its start (the browser sent to the identity
/// provider, once its discovery document and keys are known) and its
/// callback (the code handed to the runtime to exchange).
pub(super) fn sso_step(
    route: &ConsoleRoute,
    host: Option<&str>,
    tls: bool,
    cookie: Option<&str>,
    gw: &Gateway,
    now: Instant,
    fresh: [u8; 32],
) -> super::ApiStep {
    use super::ApiStep;
    let html = "text/html; charset=utf-8";
    let Some(sso) = gw.console().sso() else {
        return ApiStep::Answer(respond(
            404,
            html,
            login_page("Single sign-on is not configured (sso_issuer).", false).as_bytes(),
            &[],
            false,
        ));
    };
    let unix_ms = gw.wall().unix_ms(now);
    match route {
        ConsoleRoute::SsoLogin => {
            if !sso.has_provider(unix_ms, PROVIDER_MAX_AGE_MS) {
                return ApiStep::SsoDiscover;
            }
            let redirect = sso.redirect_uri(host.unwrap_or("localhost"), tls);
            match sso.begin(&fresh, &redirect, unix_ms) {
                Some((url, cookie)) => ApiStep::Answer(respond(
                    303,
                    html,
                    b"",
                    &[("Location", &url), ("Set-Cookie", &cookie)],
                    false,
                )),
                None => ApiStep::SsoDiscover,
            }
        }
        ConsoleRoute::SsoCallback(query) => match sso.callback(query, cookie, unix_ms) {
            Ok(exchange) => ApiStep::SsoExchange(exchange),
            Err(why) => {
                tracing::warn!("single sign-on refused: {why}");
                ApiStep::Answer(respond(
                    400,
                    html,
                    login_page(&format!("Single sign-on failed: {why}."), true).as_bytes(),
                    &[("Set-Cookie", &clear_state())],
                    false,
                ))
            }
        },
        _ => ApiStep::Answer(respond(404, html, b"", &[], false)),
    }
}

/// The answer when the identity provider cannot be asked: the login page
/// saying why.
pub fn sso_unavailable(why: &str) -> Vec<u8> {
    tracing::warn!("single sign-on: the identity provider cannot be asked: {why}");
    respond(
        503,
        "text/html; charset=utf-8",
        login_page(
            &format!("The identity provider cannot be reached ({why}); try again, or use the admin token."),
            true,
        )
        .as_bytes(),
        &[("Retry-After", "5")],
        false,
    )
}

fn clear_state() -> String {
    format!(
        "{}=; Path=/sso; Max-Age=0; HttpOnly; SameSite=Lax",
        crate::console::STATE_COOKIE
    )
}

/// The answer to a single sign-on whose code the runtime exchanged at the
/// identity provider's token endpoint: `answer` is its status and body, or
/// why there was none; `fresh` is 32 random bytes, the new session's id.
pub fn sso_finish(
    exchange: &crate::console::Exchange,
    answer: Result<(u16, Vec<u8>), String>,
    gw: &Gateway,
    now: Instant,
    fresh: [u8; 32],
) -> Vec<u8> {
    let html = "text/html; charset=utf-8";
    let console = gw.console();
    let (Some(sso), Some(access)) = (console.sso(), console.access()) else {
        return respond(404, html, b"", &[], false);
    };
    let unix_ms = gw.wall().unix_ms(now);
    let signed_in = answer.and_then(|(status, body)| sso.finish(exchange, status, &body, unix_ms));
    match signed_in {
        Ok(who) => {
            tracing::info!(email = %who.email, admin = who.admin, "signed in to the console");
            let session =
                access.open_session_for(fresh, unix_ms, format!("user:{}", who.email), who.admin);
            respond(
                200,
                html,
                SIGNED_IN.as_bytes(),
                &[("Set-Cookie", &session), ("Set-Cookie", &clear_state())],
                false,
            )
        }
        Err(why) => {
            tracing::warn!("single sign-on refused: {why}");
            respond(
                403,
                html,
                login_page(&format!("Single sign-on failed: {why}."), true).as_bytes(),
                &[("Set-Cookie", &clear_state())],
                false,
            )
        }
    }
}

/// Who asks, when they may go on past the login: the admin token as a
/// `Bearer`, or an open session. Otherwise the answer: `429` while the
/// address waits after wrong tokens (its guess not even looked at), `401`
/// (the login form when `page`, else JSON).
pub(super) fn admitted(
    ask: Asking<'_>,
    console: &Console,
    unix_ms: u64,
    page: bool,
) -> Result<Who, Vec<u8>> {
    let Some(access) = console.access() else {
        return Err(respond(404, "application/json", b"", &[], ask.head_only));
    };
    let route = if page {
        &ConsoleRoute::Page
    } else {
        &ConsoleRoute::Overview
    };
    // A bearer token is a guess of the token: an address that guessed
    // wrong too often waits.
    let peer = ask
        .peer
        .filter(|_| crate::console::Access::presents_token(ask.authorization));
    if let Some(wait) = peer.and_then(|p| access.throttle().check(p, unix_ms).err()) {
        return Err(throttled(route, wait, ask.head_only));
    }
    // A signed-in person may do what the lists in force say now: removed
    // from them (or single sign-on turned off), their session ends.
    let who = access
        .who(ask.authorization, ask.cookie, unix_ms)
        .and_then(|w| match (w.actor.strip_prefix("user:"), console.sso()) {
            (Some(email), Some(sso)) => sso.role_of(email).map(|admin| Who { admin, ..w }),
            (Some(_), None) => None,
            (None, _) => Some(w),
        });
    if let Some(p) = peer {
        if who.is_some() {
            access.throttle().succeeded(p);
        } else {
            access.throttle().failed(p, unix_ms);
        }
    }
    who.ok_or_else(|| {
        if page {
            respond(
                401,
                "text/html; charset=utf-8",
                login_page("", ask.sso).as_bytes(),
                &[("WWW-Authenticate", "Bearer realm=\"chatgate console\"")],
                ask.head_only,
            )
        } else {
            respond(
                401,
                "application/json",
                &error_body(
                    "the console needs the admin token: log in at / or send Authorization: Bearer",
                ),
                &[("WWW-Authenticate", "Bearer realm=\"chatgate console\"")],
                ask.head_only,
            )
        }
    })
}

/// The login form with `message`, and a link to single sign-on when it
/// is configured.
fn login_page(message: &str, sso: bool) -> String {
    let link = if sso {
        "<p><a class=\"sso\" href=\"/sso/login\">Sign in with single sign-on</a></p>\n<p class=\"hint\">Or with the admin token:</p>\n"
    } else {
        ""
    };
    LOGIN
        .replace("{{sso}}", link)
        .replace("{{message}}", &html_escape(message))
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn to_vec(v: &Value) -> Vec<u8> {
    let mut body = serde_json::to_vec(v).unwrap_or_default();
    body.push(b'\n');
    body
}

fn error_body(message: &str) -> Vec<u8> {
    to_vec(&json!({ "error": message }))
}

pub(super) fn tally_json(t: &Tally) -> Value {
    let mut v = serde_json::to_value(t).unwrap_or_default();
    v["cost_usd"] = json!(format_usd(t.cost_nano_usd));
    v
}

/// Everything the page shows.
fn overview(gw: &Gateway, console: &Console, now: Instant, unix_ms: u64) -> Value {
    let points = console.points(unix_ms);
    let day_start = Period::Day.start(unix_ms);
    let table = gw.keys();
    let quota: rustc_hash::FxHashMap<String, crate::quota::QuotaStatus> =
        gw.quota().all(unix_ms).into_iter().collect();
    // A name is in the keys file twice while a rotated key's grace runs:
    // one row (its entries share limits and budget).
    let entries: rustc_hash::FxHashMap<&str, &crate::auth::KeyEntry> = table
        .entries()
        .iter()
        .map(|e| (e.name.as_str(), e))
        .collect();
    // The keys file's keys in its order, then others with requests in the
    // last day; their tallies copied out, so that requests finishing meanwhile
    // wait on the book's lock for as little as possible.
    console.looked(unix_ms);
    let cluster = console.cluster(unix_ms);
    let shared_quota = cluster.as_ref().and_then(|c| c.quota.as_ref());
    let (rows, model_rows, failures) = {
        let book = console.book();
        let mut seen = rustc_hash::FxHashSet::default();
        let mut names: Vec<String> = table
            .entries()
            .iter()
            .filter(|e| seen.insert(e.name.as_str()))
            .map(|e| e.name.clone())
            .collect();
        let mut others: Vec<String> = book
            .keys(unix_ms)
            .filter(|k| !k.is_empty() && !entries.contains_key(k))
            .map(str::to_owned)
            .collect();
        others.sort_unstable();
        names.extend(others);
        if let Some(today) = cluster.as_ref().and_then(|c| c.today.as_ref()) {
            let mut more: Vec<String> = today
                .keys()
                .filter(|k| !k.is_empty() && !names.contains(k))
                .cloned()
                .collect();
            more.sort_unstable();
            names.extend(more);
        }
        let rows: Vec<(String, Tally)> = names
            .into_iter()
            .map(|n| {
                // The shared ledger's tally when it was read (every
                // instance's), else this instance's.
                let t = match cluster.as_ref().and_then(|c| c.today.as_ref()) {
                    Some(today) => today.get(&n).copied().unwrap_or_default(),
                    None => book.since(&n, day_start),
                };
                (n, t)
            })
            .collect();
        let models = book.models_since(day_start);
        (rows, models, book.failures())
    };
    let keys: Vec<Value> = rows
        .iter()
        .map(|(name, today)| {
            let name = name.as_str();
            let entry = entries.get(name).copied();
            let status = quota.get(name);
            let shared = shared_quota.and_then(|q| q.get(name));
            let budget = entry.and_then(|e| e.quota.budget).map(|b| {
                let spent =
                    shared.map_or_else(|| status.map_or(0, |s| s.spent_in(b.period)), |s| s.0);
                json!({
                    "limit_usd": format_usd(b.limit_nano),
                    "limit_nano_usd": b.limit_nano,
                    "period": b.period.as_str(),
                    "spent_usd": format_usd(spent),
                    "spent_nano_usd": spent,
                    "resets_at": b.period.reset(unix_ms).map(rfc3339_ms),
                })
            });
            let mut v = tally_json(today);
            v["name"] = json!(name);
            v["configured"] = json!(entry.is_some());
            v["budget"] = budget.unwrap_or(Value::Null);
            v["max_in_flight"] = json!(entry.and_then(|e| e.quota.max_in_flight));
            v["in_flight"] =
                json!(shared.map_or_else(|| status.map_or(0, |s| s.in_flight), |s| s.1));
            v["queued"] = json!(status.map_or(0, |s| s.queued));
            v
        })
        .collect();
    let endpoints = gw.endpoints();
    // The catalogue's models in its order, then models a reload removed
    // that answered earlier today.
    let catalog = endpoints.catalog();
    let mut model_rows = model_rows;
    model_rows.sort_by_key(|(m, _)| (catalog.index(m).unwrap_or(usize::MAX), m.clone()));
    let models: Vec<Value> = model_rows
        .iter()
        .map(|(model, today)| {
            let mut v = tally_json(today);
            v["model"] = json!(model);
            v["configured"] = json!(catalog.get(model).is_some());
            v
        })
        .collect();
    let providers: Vec<Value> = endpoints
        .status(now, gw.wall())
        .into_iter()
        .zip(endpoints.endpoints())
        .map(|(s, e)| {
            let mut v = serde_json::to_value(&s).unwrap_or_default();
            v["ttfb_p50_ms"] = json!(e.ttfb_quantile_ms(0.5));
            v["ttfb_p99_ms"] = json!(e.ttfb_quantile_ms(0.99));
            v
        })
        .collect();
    json!({
        "now": rfc3339_ms(unix_ms),
        "scope": scope(cluster.as_ref(), gw.config().shared_limits.is_some()),
        "cluster": {
            "today": cluster.as_ref().is_some_and(|c| c.today.is_some()),
            "budgets_and_in_flight": shared_quota.is_some(),
        },
        "slot_secs": SLOT_SECS,
        "points": points,
        "gauges": {
            "in_flight": gw.requests_in_flight(unix_ms),
            "streams": gw.metrics().streams_open(),
            "connections": gw.open_connections(),
        },
        "keys": keys,
        "models": models,
        "providers": providers,
        "failures": failures,
    })
}

/// Which figures the page shows are every instance's, in words.
fn scope(cluster: Option<&crate::console::ClusterFigures>, redis: bool) -> String {
    let today = cluster.is_some_and(|c| c.today.is_some());
    let quota = cluster.is_some_and(|c| c.quota.is_some());
    match (today, quota) {
        (true, true) => "all instances for each key's requests, tokens and cost today (the shared ledger in PostgreSQL, a second or so behind), spend in its budget period and requests in flight (Redis); this instance for the charts, models, providers and failures".into(),
        (true, false) => "all instances for each key's requests, tokens and cost today (the shared ledger in PostgreSQL, a second or so behind); this instance for spend, requests in flight, the charts, models, providers and failures".into(),
        (false, true) => "all instances for each key's spend in its budget period and requests in flight (Redis); this instance for requests, tokens and cost today (with --ledger-postgres they are every instance's), the charts, models, providers and failures".into(),
        (false, false) if redis => "this instance (the figures of every instance are gathered from Redis and PostgreSQL while the page is open: they will appear shortly, or the shared stores cannot be read)".into(),
        (false, false) => "this instance".into(),
    }
}

/// The answer to a guess from an address that must wait `secs` seconds:
/// `429` with `Retry-After`, the login form again for the page and the
/// form, a JSON error for the API.
fn throttled(route: &ConsoleRoute, secs: u64, head_only: bool) -> Vec<u8> {
    let message = format!(
        "Too many wrong admin tokens from this address: try again in {secs} second{}.",
        if secs == 1 { "" } else { "s" }
    );
    let retry = secs.to_string();
    let headers = [("Retry-After", retry.as_str())];
    match route {
        ConsoleRoute::Page | ConsoleRoute::Login => respond(
            429,
            "text/html; charset=utf-8",
            login_page(&message, false).as_bytes(),
            &headers,
            head_only,
        ),
        _ => respond(
            429,
            "application/json",
            &error_body(&message),
            &headers,
            head_only,
        ),
    }
}

/// 303 to `/`, setting the session cookie to `set_cookie`.
fn back_to_page(set_cookie: &str, head_only: bool) -> Vec<u8> {
    respond(
        303,
        "text/html; charset=utf-8",
        b"",
        &[("Set-Cookie", set_cookie), ("Location", "/")],
        head_only,
    )
}

/// Headers on every console answer.
const SECURITY: [(&str, &str); 5] = [
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
];

fn respond(
    status: u16,
    content_type: &str,
    body: &[u8],
    extra: &[(&str, &str)],
    head_only: bool,
) -> Vec<u8> {
    let headers = SECURITY.iter().chain(extra).copied();
    super::respond_with(status, content_type, body, headers, head_only)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(console_route(true, "/", ""), Some(ConsoleRoute::Page));
        assert_eq!(console_route(false, "/", ""), None);
        assert_eq!(
            console_route(false, "/login", ""),
            Some(ConsoleRoute::Login)
        );
        // The keys are the API's.
        assert_eq!(console_route(true, "/api/keys/team%40a.b", ""), None);
        assert!(matches!(
            console_route(true, "/console.js", ""),
            Some(ConsoleRoute::File("text/javascript; charset=utf-8", _))
        ));
        assert_eq!(console_route(true, "/metrics", ""), None);
        assert_eq!(
            console_route(true, "/sso/callback", "code=c&state=s"),
            Some(ConsoleRoute::SsoCallback("code=c&state=s".into()))
        );
    }

    #[test]
    fn the_files_load_nothing_from_elsewhere() {
        for f in [INDEX, LOGIN, OFF, CSS, JS, SIGNED_IN] {
            // The SVG namespace is a name, not a place.
            let f = f.replace("http://www.w3.org/2000/svg", "");
            assert!(!f.contains("http://") && !f.contains("https://"));
            assert!(!f.contains("style=\""), "no inline style");
            assert!(!f.contains("<script>"), "no inline script");
        }
        assert!(LOGIN.contains("{{message}}") && LOGIN.contains("{{sso}}"));
        assert!(!login_page("<b>", true).contains("<b>"));
    }
}
