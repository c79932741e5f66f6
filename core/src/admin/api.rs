//! The admin API: the client keys and the audit trail of their changes,
//! as JSON, behind the admin token (`Authorization: Bearer`) or a console
//! session (whose state-changing requests carry `X-CSRF-Token`).
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/keys` | every key: limits, budget and spend this period, in-flight cap and count, models, created, last used, state |
//! | `POST /api/keys` | a new key: `201` with its secret, shown this once |
//! | `GET /api/keys/{name}` | one key, with its last 24 hours by the hour |
//! | `PATCH /api/keys/{name}` | new settings (`null` removes one: the default applies) |
//! | `DELETE /api/keys/{name}` | `204`: refused at once |
//! | `POST /api/keys/{name}/rotate` | a new secret; the old one valid for `grace` (default 24h) |
//! | `GET /api/audit?limit=N&before=ID` | the audit trail, newest first |
//! | `GET /api/session` | who is asking, whether they may change keys, the CSRF token |
//!
//! Pure, like the rest of the admin listener: [`api_step`] answers what it
//! can from the gateway's state and hands the runtime a change or an audit
//! query to make against the store; [`api_changed`] and [`api_audit`]
//! answer with what the store said. Nothing here is ever a secret but the
//! new key in the answer that minted it, and nothing is a key's digest.

use serde_json::{Map, Value, json};

use crate::auth::{KeyEntry, is_valid_name, mint_key};
use crate::catalog::format_usd;
use crate::console::{Console, Who};
use crate::gateway::Gateway;
use crate::http::Method;
use crate::keyops::{AuditRecord, KeyChanges, KeyOp, OpError, state_of};
use crate::time::{Instant, rfc3339_ms};

/// How long a rotated key's previous secret stays valid unless `grace`
/// says otherwise (as `keys rotate`).
pub(super) const DEFAULT_GRACE_MS: u64 = 24 * 3_600_000;
/// Most audit records in one page, and how many when `limit` is not given.
pub(super) const AUDIT_PAGE: (usize, usize) = (500, 50);

/// What a request to the API asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiRoute {
    /// `GET /api/keys`.
    List,
    /// `POST /api/keys`.
    Create,
    /// `GET /api/keys/{name}` (`None`: not a key name).
    Get(Option<String>),
    /// `PATCH /api/keys/{name}`.
    Update(Option<String>),
    /// `DELETE /api/keys/{name}`.
    Revoke(Option<String>),
    /// `POST /api/keys/{name}/rotate`.
    Rotate(Option<String>),
    /// `GET /api/audit`: its query string.
    Audit(String),
    /// `GET /api/session`.
    Session,
    /// A path of the API with a method it does not take: the methods it
    /// takes.
    Method(&'static str),
}

impl ApiRoute {
    /// The route of `method` on `path` (`query` after its `?`), if the path
    /// is the API's.
    pub(super) fn of(method: &Method, path: &str, query: &str) -> Option<ApiRoute> {
        let get = matches!(method, Method::Get | Method::Head);
        let name = |n: &str| crate::url::percent_decode(n).filter(|n| is_valid_name(n));
        Some(match path {
            "/api/keys" => match method {
                _ if get => ApiRoute::List,
                Method::Post => ApiRoute::Create,
                _ => ApiRoute::Method("GET, POST"),
            },
            "/api/audit" if get => ApiRoute::Audit(query.to_owned()),
            "/api/audit" => ApiRoute::Method("GET"),
            "/api/session" if get => ApiRoute::Session,
            "/api/session" => ApiRoute::Method("GET"),
            p => {
                let rest = p.strip_prefix("/api/keys/")?;
                if let Some(n) = rest.strip_suffix("/rotate") {
                    return Some(match method {
                        Method::Post => ApiRoute::Rotate(name(n)),
                        _ => ApiRoute::Method("POST"),
                    });
                }
                match method {
                    _ if get => ApiRoute::Get(name(rest)),
                    Method::Patch => ApiRoute::Update(name(rest)),
                    Method::Delete => ApiRoute::Revoke(name(rest)),
                    _ => ApiRoute::Method("GET, PATCH, DELETE"),
                }
            }
        })
    }

    /// It changes something: admins only, and a session's CSRF token.
    fn changes(&self) -> bool {
        matches!(
            self,
            ApiRoute::Create | ApiRoute::Update(_) | ApiRoute::Revoke(_) | ApiRoute::Rotate(_)
        )
    }

    /// It mints a secret: the runtime supplies 32 random bytes.
    pub(super) fn mints(&self) -> bool {
        matches!(self, ApiRoute::Create | ApiRoute::Rotate(_))
    }
}

/// What the runtime does for a request to the API.
#[derive(Debug)]
pub enum ApiStep {
    /// Write this answer.
    Answer(Vec<u8>),
    /// Make this change in the key store on behalf of `actor`, then
    /// answer with [`api_changed`].
    Change(ApiChange),
    /// Fetch the identity provider's discovery document
    /// ([`crate::console::Sso::discovery_url`]) and the keys it names, give
    /// them to [`crate::console::Sso::set_provider`], and ask again (once).
    SsoDiscover,
    /// Post this code to the identity provider's token endpoint
    /// ([`crate::console::Sso::token_request`]), then answer with
    /// [`super::sso_finish`].
    SsoExchange(crate::console::Exchange),
    /// Read a page of the audit trail: up to `limit` records with ids below
    /// `before`, newest first; then answer with [`api_audit`].
    Audit {
        /// Ids below this one (none: from the newest).
        before: Option<u64>,
        /// How many at most.
        limit: usize,
    },
}

/// A change to make, with what its answer needs.
pub struct ApiChange {
    /// The change.
    pub op: KeyOp,
    /// Who makes it: the audit trail's `actor`.
    pub actor: String,
    /// The secret it mints, shown once in the answer.
    secret: Option<String>,
}

impl std::fmt::Debug for ApiChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the secret.
        f.debug_struct("ApiChange")
            .field("op", &self.op.action())
            .field("key", &self.op.name())
            .field("actor", &self.actor)
            .finish_non_exhaustive()
    }
}

/// A store that could not make a change or read the trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreFailure {
    /// The change is refused; nothing changed.
    Refused(OpError),
    /// The store could not be reached or written: why.
    Unavailable(String),
}

/// What the API answers `route` asked by `who` (already allowed in),
/// with `body` and `csrf` (the `X-CSRF-Token` header) at `now`; `fresh`
/// is 32 random bytes, the secret of a key this request mints.
pub(super) fn api_step(
    route: &ApiRoute,
    who: &Who,
    body: &[u8],
    csrf: Option<&str>,
    gw: &Gateway,
    now: Instant,
    fresh: [u8; 32],
) -> ApiStep {
    let answer = ApiStep::Answer;
    if let ApiRoute::Method(allowed) = route {
        return answer(error(
            405,
            "method_not_allowed",
            None,
            &format!("this path takes {allowed}"),
            &[("Allow", allowed)],
        ));
    }
    if route.changes() {
        if !who.admin {
            return answer(error(
                403,
                "forbidden",
                None,
                &format!(
                    "{} may look but not change keys (administrators are set by --sso-admins)",
                    who.actor
                ),
                &[],
            ));
        }
        if !who.may_submit(csrf) {
            return answer(error(
                403,
                "csrf",
                None,
                "a signed-in request that changes something needs the session's X-CSRF-Token header (GET /api/session has it)",
                &[],
            ));
        }
    }
    let unix_ms = gw.wall().unix_ms(now);
    let not_a_name = || {
        answer(error(
            404,
            "not_found",
            Some("name"),
            "not a key name: 1 to 64 letters, digits, '-', '_', '.' or '@'",
            &[],
        ))
    };
    match route {
        ApiRoute::Method(_) => unreachable!("answered above"),
        ApiRoute::Session => answer(ok(
            200,
            &json!({ "actor": who.actor, "admin": who.admin, "csrf": who.csrf }),
        )),
        ApiRoute::List => {
            let keys = gw.keys();
            let console = gw.console();
            let mut names: Vec<&str> = Vec::new();
            for e in keys.entries() {
                if !names.contains(&e.name.as_str()) {
                    names.push(&e.name);
                }
            }
            let list: Vec<Value> = names
                .iter()
                .map(|n| key_view(gw, console, &keys.entries_of(n), unix_ms))
                .collect();
            answer(ok(200, &json!({ "keys": list })))
        }
        ApiRoute::Get(None)
        | ApiRoute::Update(None)
        | ApiRoute::Revoke(None)
        | ApiRoute::Rotate(None) => not_a_name(),
        ApiRoute::Get(Some(name)) => {
            let keys = gw.keys();
            let entries = keys.entries_of(name);
            let console = gw.console();
            // A name that is not a key but had requests today (a key
            // revoked since) still has its hours.
            let hours: Vec<Value> = console
                .book()
                .hours(name, unix_ms)
                .into_iter()
                .map(|(h, t)| {
                    let mut v = super::console::tally_json(&t);
                    v["hour"] = json!(rfc3339_ms(h * 3_600_000));
                    v
                })
                .collect();
            let mut v = if entries.is_empty() {
                if hours.iter().all(|h| h["requests"] == 0) {
                    return answer(error(
                        404,
                        "not_found",
                        Some("name"),
                        &format!("no key is named '{name}'"),
                        &[],
                    ));
                }
                json!({ "name": name, "state": "revoked" })
            } else {
                key_view(gw, console, &entries, unix_ms)
            };
            v["key"] = json!(name);
            v["hours"] = Value::Array(hours);
            answer(ok(200, &v))
        }
        ApiRoute::Audit(query) => match audit_query(query) {
            Ok((before, limit)) => ApiStep::Audit { before, limit },
            Err((field, message)) => {
                answer(error(400, "invalid_request", Some(field), &message, &[]))
            }
        },
        ApiRoute::Create
        | ApiRoute::Update(Some(_))
        | ApiRoute::Revoke(Some(_))
        | ApiRoute::Rotate(Some(_)) => match change_of(route, body, gw, fresh) {
            Ok((op, secret)) => ApiStep::Change(ApiChange {
                op,
                actor: who.actor.clone(),
                secret,
            }),
            Err(e) => answer(op_error(&e)),
        },
    }
}

/// The change a request asks for, and the secret it mints.
fn change_of(
    route: &ApiRoute,
    body: &[u8],
    gw: &Gateway,
    fresh: [u8; 32],
) -> Result<(KeyOp, Option<String>), OpError> {
    let invalid = |field: &str, message: &str| OpError::Invalid {
        field: field.to_owned(),
        message: message.to_owned(),
    };
    let object = |required: bool| -> Result<Map<String, Value>, OpError> {
        if body.iter().all(u8::is_ascii_whitespace) && !required {
            return Ok(Map::new());
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(o)) => Ok(o),
            Ok(_) => Err(invalid("body", "must be a JSON object")),
            Err(e) => Err(invalid("body", &format!("is not JSON: {e}"))),
        }
    };
    let models_known = |c: &KeyChanges| -> Result<(), OpError> {
        let catalog = gw.endpoints();
        let catalog = catalog.catalog();
        if let Some(Some(list)) = &c.models
            && let Some(m) = list.iter().find(|m| catalog.get(m).is_none())
        {
            let ids: Vec<&str> = catalog.models().iter().map(|m| m.id.as_str()).collect();
            return Err(invalid(
                "models",
                &format!(
                    "'{m}' is not a model of this gateway (they are {})",
                    ids.join(", ")
                ),
            ));
        }
        Ok(())
    };
    // With Redis, a limit above what its script computes exactly would make
    // every instance refuse the whole table: refused here instead.
    let within_shared = |c: &KeyChanges| -> Result<(), OpError> {
        if gw.config().shared_limits.is_none() {
            return Ok(());
        }
        let max = crate::limits::SHARED_MAX_PER_MINUTE;
        for (field, v) in [("rpm", c.rpm), ("tpm", c.tpm)] {
            if let Some(Some(n)) = v.filter(|v| v.is_some_and(|n| n > max)) {
                return Err(invalid(
                    field,
                    &format!("{n} is above {max}, the most limits shared through Redis can be"),
                ));
            }
        }
        Ok(())
    };
    let secret = mint_key(&fresh);
    let sha256 = crate::auth::key_hash_hex(&secret);
    Ok(match route {
        ApiRoute::Create => {
            let o = object(true)?;
            let name = match o.get("name") {
                Some(Value::String(n)) => n.clone(),
                Some(_) => return Err(invalid("name", "must be a string")),
                None => return Err(invalid("name", "is required")),
            };
            let changes = KeyChanges::from_json(&o, &["name"])?;
            models_known(&changes)?;
            within_shared(&changes)?;
            (
                KeyOp::Create {
                    name,
                    changes,
                    sha256,
                },
                Some(secret),
            )
        }
        ApiRoute::Update(Some(name)) => {
            let changes = KeyChanges::from_json(&object(true)?, &[])?;
            models_known(&changes)?;
            within_shared(&changes)?;
            (
                KeyOp::Update {
                    name: name.clone(),
                    changes,
                },
                None,
            )
        }
        ApiRoute::Revoke(Some(name)) => (KeyOp::Revoke { name: name.clone() }, None),
        ApiRoute::Rotate(Some(name)) => {
            let o = object(false)?;
            if let Some(k) = o.keys().find(|k| *k != "grace") {
                return Err(invalid(k, "is not a field of a rotation (it takes grace)"));
            }
            let grace_ms = match o.get("grace") {
                None | Some(Value::Null) => DEFAULT_GRACE_MS,
                Some(Value::String(g)) => crate::config::parse_duration(g)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .ok_or_else(|| {
                        invalid("grace", &format!("'{g}' is not a duration like 30m or 24h"))
                    })?,
                Some(_) => {
                    return Err(invalid(
                        "grace",
                        "must be a duration like \"30m\" or \"24h\"",
                    ));
                }
            };
            (
                KeyOp::Rotate {
                    name: name.clone(),
                    grace_ms,
                    sha256,
                },
                Some(secret),
            )
        }
        _ => unreachable!("only changes"),
    })
}

/// `limit` and `before` of the audit trail's query string.
fn audit_query(query: &str) -> Result<(Option<u64>, usize), (&'static str, String)> {
    let (max, default) = AUDIT_PAGE;
    let (mut before, mut limit) = (None, default);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let number = |field: &'static str| {
            v.parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or((field, format!("'{v}' is not a positive whole number")))
        };
        match k {
            "limit" => limit = (number("limit")? as usize).min(max),
            "before" => before = Some(number("before")?),
            _ => {
                return Err((
                    "query",
                    format!("'{k}' is not a parameter (they are limit, before)"),
                ));
            }
        }
    }
    Ok((before, limit))
}

/// The answer to a change the store made (or did not).
pub fn api_changed(
    change: &ApiChange,
    result: Result<AuditRecord, StoreFailure>,
    gw: &Gateway,
    now: Instant,
) -> Vec<u8> {
    let record = match result {
        Ok(r) => r,
        Err(StoreFailure::Refused(e)) => return op_error(&e),
        Err(StoreFailure::Unavailable(why)) => return unavailable(&why),
    };
    let unix_ms = gw.wall().unix_ms(now);
    let name = change.op.name();
    let keys = gw.keys();
    let mut view = key_view(gw, gw.console(), &keys.entries_of(name), unix_ms);
    if let Some(id) = record.id {
        view["audit_id"] = json!(id);
    }
    match &change.op {
        KeyOp::Revoke { .. } => super::respond_with(
            204,
            "application/json",
            b"",
            SECURITY.iter().copied(),
            false,
        ),
        KeyOp::Create { .. } | KeyOp::Rotate { .. } => {
            view["secret"] = json!(change.secret);
            view["secret_note"] = json!("This is the only time the secret is shown: keep it now.");
            if let KeyOp::Rotate { .. } = change.op {
                view["previous_secret_expires"] = record
                    .changes
                    .first()
                    .map_or(Value::Null, |c| c.after.clone());
            }
            let status = if matches!(change.op, KeyOp::Create { .. }) {
                201
            } else {
                200
            };
            ok(status, &view)
        }
        _ => ok(200, &view),
    }
}

/// The answer to a page of the audit trail.
pub fn api_audit(result: Result<Vec<AuditRecord>, String>, limit: usize) -> Vec<u8> {
    match result {
        Ok(records) => {
            let next = (records.len() == limit)
                .then(|| records.last().and_then(|r| r.id))
                .flatten()
                .filter(|id| *id > 1);
            ok(200, &json!({ "records": records, "next_before": next }))
        }
        Err(why) => unavailable(&why),
    }
}

/// One key (its entries: a rotated key has two while the grace runs).
fn key_view(gw: &Gateway, console: &Console, entries: &[&KeyEntry], unix_ms: u64) -> Value {
    let Some(e) = entries
        .iter()
        .find(|e| e.expires.is_none())
        .or(entries.first())
        .copied()
    else {
        return Value::Null;
    };
    let status = gw.quota().status(&e.name, unix_ms);
    let budget = e.quota.budget.map(|b| {
        let spent = status.spent_in(b.period);
        json!({
            "usd": format_usd(b.limit_nano),
            "period": b.period.as_str(),
            "spent_usd": format_usd(spent),
            "remaining_usd": format_usd(b.limit_nano.saturating_sub(spent)),
            "resets_at": b.period.reset(unix_ms).map(rfc3339_ms),
        })
    });
    let (state, until) = state_of(
        entries.iter().map(|e| (&e.expires, e.expires_unix)),
        unix_ms / 1000,
    );
    json!({
        "name": e.name,
        "state": state,
        "previous_secret_expires": if state == "rotating" { until } else { None },
        "expires": if state == "expiring" { until } else { None },
        "rpm": e.limits.requests_per_minute,
        "tpm": e.limits.tokens_per_minute,
        "budget": budget,
        "max_in_flight": e.quota.max_in_flight,
        "in_flight": status.in_flight,
        "models": e.models.as_deref(),
        "created": e.created,
        "last_used": console.book().last_used(&e.name).map(rfc3339_ms),
    })
}

fn op_error(e: &OpError) -> Vec<u8> {
    match e {
        OpError::NotFound(_) => error(404, "not_found", Some("name"), &e.to_string(), &[]),
        OpError::Conflict(m) => error(409, "conflict", Some("name"), m, &[]),
        OpError::Invalid { field, message } => error(
            400,
            "invalid_request",
            Some(field),
            &format!("{field}: {message}"),
            &[],
        ),
    }
}

fn unavailable(why: &str) -> Vec<u8> {
    error(
        503,
        "store_unavailable",
        None,
        &format!("the key store could not be used: {why}; nothing was changed"),
        &[("Retry-After", "5")],
    )
}

/// Headers on every API answer.
const SECURITY: [(&str, &str); 3] = [
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-store"),
    (
        "Content-Security-Policy",
        "default-src 'none'; frame-ancestors 'none'",
    ),
];

fn ok(status: u16, v: &Value) -> Vec<u8> {
    let mut body = serde_json::to_vec(v).unwrap_or_default();
    body.push(b'\n');
    super::respond_with(
        status,
        "application/json",
        &body,
        SECURITY.iter().copied(),
        false,
    )
}

/// An error answer: `{"error": {"type", "message", "field"}}`.
pub(super) fn error(
    status: u16,
    kind: &str,
    field: Option<&str>,
    message: &str,
    extra: &[(&str, &str)],
) -> Vec<u8> {
    let mut body = serde_json::to_vec(&json!({
        "error": { "type": kind, "message": message, "field": field }
    }))
    .unwrap_or_default();
    body.push(b'\n');
    super::respond_with(
        status,
        "application/json",
        &body,
        SECURITY.iter().chain(extra).copied(),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let r = |m: Method, p: &str| ApiRoute::of(&m, p, "");
        assert_eq!(r(Method::Get, "/api/keys"), Some(ApiRoute::List));
        assert_eq!(r(Method::Post, "/api/keys"), Some(ApiRoute::Create));
        assert_eq!(
            r(Method::Put, "/api/keys"),
            Some(ApiRoute::Method("GET, POST"))
        );
        assert_eq!(
            r(Method::Patch, "/api/keys/team%40a.b"),
            Some(ApiRoute::Update(Some("team@a.b".into())))
        );
        assert_eq!(
            r(Method::Delete, "/api/keys/a%2Fb"),
            Some(ApiRoute::Revoke(None))
        );
        assert_eq!(
            r(Method::Post, "/api/keys/t/rotate"),
            Some(ApiRoute::Rotate(Some("t".into())))
        );
        assert_eq!(
            r(Method::Get, "/api/keys/t/rotate"),
            Some(ApiRoute::Method("POST"))
        );
        assert_eq!(
            r(Method::Post, "/api/keys/t"),
            Some(ApiRoute::Method("GET, PATCH, DELETE"))
        );
        assert_eq!(
            ApiRoute::of(&Method::Get, "/api/audit", "limit=5"),
            Some(ApiRoute::Audit("limit=5".into()))
        );
        assert_eq!(r(Method::Get, "/api/overview"), None);
    }

    #[test]
    fn audit_queries() {
        assert_eq!(audit_query(""), Ok((None, 50)));
        assert_eq!(audit_query("limit=5&before=9"), Ok((Some(9), 5)));
        assert_eq!(audit_query("limit=100000"), Ok((None, 500)));
        assert_eq!(audit_query("limit=0").unwrap_err().0, "limit");
        assert_eq!(audit_query("before=x").unwrap_err().0, "before");
        assert_eq!(audit_query("page=2").unwrap_err().0, "query");
    }
}
