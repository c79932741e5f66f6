//! Attempts: which provider endpoint a request goes to, the request as that
//! endpoint is sent it, and whether a failed attempt is tried again on
//! another endpoint.
//!
//! A request is sent again only while the client has received nothing
//! (the response head waits for the provider's first event), only for a
//! failure that is the endpoint's rather than the request's (never for a
//! 4xx other than 408 and 429), at most `--upstream-attempts` times per
//! model, and only while the first-byte timeout, counted from the model's
//! first attempt, has not passed. Then the model's fallbacks, if it has
//! any, each with attempts and a first-byte timeout of its own (also after
//! a refusal that says the request is too long for the model's context).
//! Failed attempts are not metered; the ledger line names the endpoint
//! that served (or was tried last), the model it went to in the end when
//! that is a fallback, and how many attempts there were.

use std::borrow::Cow;
use std::sync::Arc;

use super::timers::Timer;
use super::{Connection, Event};
use crate::endpoints::{Attempt, Endpoint, FailureKind, Outcome};
use crate::error::{ApiError, UpstreamFault};
use crate::http::write::{self, header, header_u64};
use crate::time::Instant;
use crate::validate::with_model;

use super::admission::fallbacks;
use super::request::KeyRef;

impl Connection {
    /// Starts the request's next attempt on an endpoint it has not tried:
    /// builds the request as that endpoint is sent it and asks the runtime
    /// for a connection. False when no endpoint is left.
    pub(super) fn begin_attempt(&mut self, now: Instant) -> bool {
        self.timers.stop(Timer::Retry);
        let req = self.req.as_mut().expect("request in progress");
        let endpoints = req.routes.clone().unwrap_or_else(|| self.gw.endpoints());
        // The endpoints tried before this attempt: the list grows (and
        // allocates) only when a request is tried again.
        if let Some(previous) = &req.endpoint {
            req.tried.push(previous.id());
        }
        req.endpoint_before_retry = None;
        let Some(attempt) = endpoints.choose(now, &req.tried, req.model, req.affinity) else {
            return false;
        };
        let mut attempt = attempt;
        if req.retries > 0 {
            attempt.mark_repeat();
        }
        let endpoint = Arc::clone(attempt.endpoint());
        req.attempts += 1;
        req.model_attempts += 1;
        req.model_started.get_or_insert(now);
        req.provider_id = crate::gateway::provider_request_id(&req.id, req.attempts);
        req.upstream_status = None;
        req.endpoint = Some(Arc::clone(&endpoint));
        self.trace_attempt(now);
        let req = self.req.as_mut().expect("request in progress");
        if req.attempts == 1 {
            self.arm_resume();
            self.first_request(&endpoint);
        } else {
            self.next_request(&endpoint);
        }
        self.connect_upstream(now, false, Some(attempt));
        self.arm_first_event_keepalive(now);
        true
    }

    /// A later attempt's request: the body the previous endpoint was sent,
    /// with the model id this one expects for the model answering (which
    /// a fallback may have changed).
    fn next_request(&mut self, endpoint: &Endpoint) {
        let replayed = self.replayed_body(endpoint);
        let req = self.req.as_mut().expect("request in progress");
        let chat = req.chat.as_ref().expect("validated");
        let routes = req.routes.as_ref().expect("routed");
        let model = &routes.catalog().models()[req.model];
        let name = endpoint.config().model_name(model);
        let body = match replayed {
            // Written anew for this endpoint's field and model's replay,
            // from the body that names the model asked for.
            Some(body) => Cow::Owned(with_model(&body, name)),
            None => {
                let body = &req.upstream_request[req.body_at..];
                if req.body_model || name != model.provider_id() {
                    Cow::Owned(with_model(body, name))
                } else {
                    Cow::Borrowed(body)
                }
            }
        };
        let (out, body_at) = provider_request(endpoint, &body, chat.stream, req);
        req.body_model = name != model.provider_id();
        req.upstream_request = out;
        req.body_at = body_at;
    }

    /// The first attempt's request, from the validated body (which names
    /// the model by its provider id).
    fn first_request(&mut self, endpoint: &Endpoint) {
        let replayed = self.replayed_body(endpoint);
        let req = self.req.as_mut().expect("request in progress");
        if let Some(t) = req.trace.as_mut() {
            t.note_request(&req.body);
        }
        let chat = req.chat.as_ref().expect("validated");
        let routes = req.routes.as_ref().expect("routed");
        let model = &routes.catalog().models()[req.model];
        let name = endpoint.config().model_name(model);
        let body = replayed
            .as_deref()
            .unwrap_or_else(|| chat.upstream_body(&req.body));
        req.body_model = name != model.provider_id();
        let (out, body_at) = if req.body_model {
            provider_request(endpoint, &with_model(body, name), chat.stream, req)
        } else {
            provider_request(endpoint, body, chat.stream, req)
        };
        req.upstream_request = out;
        req.body_at = body_at;
        req.body = Vec::new();
    }

    /// An attempt failed before the client got anything (`err` is what the
    /// client gets if it is the last): its endpoint hears how, and the
    /// request goes to another endpoint if it may. True when it does.
    pub(super) fn failed_attempt(
        &mut self,
        now: Instant,
        err: &ApiError,
        attempt: Option<Attempt>,
    ) -> bool {
        let status = self.req.as_ref().and_then(|r| r.upstream_status);
        self.trace_attempt_failed(now, err, status);
        let (outcome, retry) = classify(err, status);
        if let Some(attempt) = attempt {
            attempt.finish(outcome, now);
        }
        if self.req.is_none() || self.cut_at.is_some_and(|c| now >= c) {
            return false;
        }
        let overflow = err
            .provider
            .as_deref()
            .is_some_and(|p| p.is_context_overflow());
        // A timed-out attempt is not waited for again on the same endpoint
        // when a fallback may answer: its other endpoints, then the
        // fallback (a slow provider is likely slow again; the wait is the
        // client's).
        let retry = match retry {
            Retry::Anywhere
                if err.fault == Some(UpstreamFault::Timeout) && self.next_fallback().is_some() =>
            {
                Retry::Elsewhere
            }
            r => r,
        };
        match retry {
            // A context overflow: a model with a larger context may take it.
            Retry::No => overflow && self.fall_back(now, err),
            _ => self.try_again(now, err, retry) || self.fall_back(now, err),
        }
    }

    /// The fallback the request goes to next if the model answering cannot
    /// (the next of the asked model's fallbacks its key may call).
    fn next_fallback(&self) -> Option<usize> {
        let req = self.req.as_ref()?;
        let routes = req.routes.as_ref()?;
        let catalog = routes.catalog();
        let key_models = req.key.as_ref().and_then(KeyRef::models);
        let asked = catalog.index(&req.chat.as_ref()?.model)?;
        let mut later = fallbacks(catalog, asked, key_models);
        if req.model == asked {
            later.next()
        } else {
            later.skip_while(|&m| m != req.model).nth(1)
        }
    }

    /// After a failure of the endpoint's (or one that may be the
    /// request's, `Retry::Elsewhere`): another attempt on the model
    /// answering, on an endpoint not tried yet, or on the best one again
    /// after a pause. True when one is started or waits for its pause.
    fn try_again(&mut self, now: Instant, err: &ApiError, retry: Retry) -> bool {
        let gw = Arc::clone(&self.gw);
        let config = gw.config();
        let Some(req) = self.req.as_ref() else {
            return false;
        };
        let deadline = req
            .model_started
            .map_or(now, |s| s + config.timeouts.upstream_first_byte);
        if now >= deadline || req.model_attempts as usize >= config.max_attempts() {
            return false;
        }
        let from = req.endpoint.as_ref().map_or("", |e| e.name());
        tracing::debug!(
            request_id = req.id.as_str(),
            endpoint = from,
            error = err.fault.map_or(err.code, UpstreamFault::as_str),
            "provider endpoint failed before the first byte; trying again"
        );
        if self.begin_attempt(now) {
            return true;
        }
        // Every endpoint was tried: the best one again, after a pause, if
        // the failure may be the endpoint's passing state, the drain has
        // not begun, and the first-byte timeout leaves room for it.
        if retry != Retry::Anywhere || self.cut_at.is_some() {
            return false;
        }
        let req = self.req.as_mut().expect("request in progress");
        let Some(pause) = retry_pause(err.retry_after, req.retries, &req.id) else {
            return false;
        };
        if now + pause >= deadline {
            return false;
        }
        req.retries += 1;
        // The next attempt chooses among all endpoints again.
        req.tried.clear();
        req.endpoint_before_retry = req.endpoint.take();
        self.timers.set(Timer::Retry, now + pause);
        true
    }

    /// The model answering could not: the request goes to the next of the
    /// asked model's fallbacks that its key may call, with the attempts
    /// and first-byte timeout of a request of its own (the client has
    /// received nothing yet). True when an attempt on it started.
    fn fall_back(&mut self, now: Instant, err: &ApiError) -> bool {
        if self.cut_at.is_some() {
            return false;
        }
        let gw = Arc::clone(&self.gw);
        let Some(next) = self.next_fallback() else {
            return false;
        };
        let Some(req) = self.req.as_mut() else {
            return false;
        };
        let Some(routes) = req.routes.clone() else {
            return false;
        };
        let catalog = routes.catalog();
        let from = &catalog.models()[req.model].id;
        let to = &catalog.models()[next].id;
        tracing::info!(
            request_id = req.id.as_str(),
            from = from.as_str(),
            to = to.as_str(),
            error = err.fault.map_or(err.code, UpstreamFault::as_str),
            "model could not answer; its fallback is asked"
        );
        gw.metrics().fallback(from, to);
        req.model = next;
        req.model_attempts = 0;
        req.model_started = None;
        req.retries = 0;
        req.tried.clear();
        // The body names the previous model.
        req.body_model = true;
        // Not an endpoint it tried for this model (one endpoint may serve
        // both), but the one the record names if nothing else answers.
        req.endpoint_before_retry = req.endpoint.take();
        self.timers.stop(Timer::Retry);
        self.begin_attempt(now)
    }

    /// A retry's pause is over: the request's next attempt goes to the best
    /// endpoint, tried or not.
    pub(super) fn retry_now(&mut self, now: Instant) {
        if self.up.is_some() || self.req.as_ref().is_none_or(|r| r.endpoint.is_some()) {
            return;
        }
        let started = self.begin_attempt(now);
        debug_assert!(started, "a pool has at least one endpoint");
    }

    /// While a retry waits for its pause, the request is ended (the client
    /// left, or the gateway is shutting down): no attempt is in progress.
    pub(super) fn waiting_to_retry(&self) -> bool {
        self.up.is_none() && self.timers.is_set(Timer::Retry)
    }

    /// The error for a request whose every attempt failed: the last one's,
    /// saying how many endpoints were tried when there were several.
    pub(super) fn last_error(&self, mut err: ApiError) -> ApiError {
        let attempts = self.req.as_ref().map_or(0, |r| r.attempts);
        if attempts > 1 {
            err.message = format!("{} Tried {attempts} times.", err.message);
        }
        err
    }

    /// Asks the runtime for a connection to the current attempt's endpoint.
    pub(super) fn push_connect(&mut self, fresh: bool) {
        let endpoint = self
            .req
            .as_ref()
            .and_then(|r| r.endpoint.clone())
            .expect("an attempt has an endpoint");
        self.events
            .push_back(Event::ConnectUpstream { endpoint, fresh });
    }
}

/// The first pause before a request is sent again to an endpoint it
/// already tried; it doubles with every such retry.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);
/// The longest `Retry-After` honoured by waiting: a provider that asks for
/// a longer pause gets it, and the client its error (with that
/// `Retry-After`) rather than a request held that long.
pub(super) const MAX_RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long to wait before sending a request again to an endpoint it
/// already tried (the `retries`th time): the provider's `Retry-After` when
/// it sent one (none above [`MAX_RETRY_WAIT`]), else [`RETRY_PAUSE`]
/// doubled per retry, plus up to a quarter more, spread by the request id
/// so that requests failed together do not return together.
fn retry_pause(retry_after: Option<u64>, retries: u32, id: &str) -> Option<std::time::Duration> {
    if let Some(secs) = retry_after {
        let wait = std::time::Duration::from_secs(secs);
        return (wait <= MAX_RETRY_WAIT).then_some(wait);
    }
    let base = RETRY_PAUSE * (1u32 << retries.min(4));
    let spread = id
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
        % 256;
    Some(base + base / 4 * spread / 256)
}

/// Whether a failed attempt's request may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// No: the provider refused the request itself, or nobody is waiting.
    No,
    /// Only to an endpoint it has not tried: the failure may be the
    /// request's (an error event instead of a first event).
    Elsewhere,
    /// Anywhere, the same endpoint included after a pause: the failure is
    /// the endpoint's passing state (a 5xx, a 429, a reset, a timeout).
    Anywhere,
}

/// What a failure says about the endpoint, and whether the request may be
/// sent again.
pub(super) fn classify(err: &ApiError, status: Option<u16>) -> (Outcome, Retry) {
    let failed = |kind| (Outcome::Failed(kind), Retry::Anywhere);
    match err.fault {
        Some(UpstreamFault::Rejected) => match status {
            Some(429) => match err.retry_after {
                Some(s) => (
                    Outcome::RetryAfter(std::time::Duration::from_secs(s)),
                    Retry::Anywhere,
                ),
                None => failed(FailureKind::Status429),
            },
            Some(408) | Some(500..) => failed(FailureKind::Status5xx),
            // The provider refused the request: another would too.
            _ => (Outcome::Answered, Retry::No),
        },
        Some(UpstreamFault::Dns | UpstreamFault::Connect | UpstreamFault::Tls) => {
            failed(FailureKind::Connect)
        }
        Some(UpstreamFault::Timeout | UpstreamFault::Stalled | UpstreamFault::TailTimeout) => {
            failed(FailureKind::Timeout)
        }
        Some(UpstreamFault::Reset) => failed(FailureKind::Reset),
        Some(UpstreamFault::Invalid | UpstreamFault::EventTooLarge) => failed(FailureKind::Invalid),
        // An error event before the first: perhaps the request's fault (a
        // context overflow said that way), so not sent to it again.
        Some(UpstreamFault::ErrorEvent) => {
            (Outcome::Failed(FailureKind::Invalid), Retry::Elsewhere)
        }
        None => (Outcome::Abandoned, Retry::No),
    }
}

/// The request as `endpoint` is sent it: its fixed prefix, the
/// per-request headers, the body; and where the body starts.
pub(super) fn provider_request(
    endpoint: &Endpoint,
    body: &[u8],
    stream: bool,
    req: &super::request::Request,
) -> (Vec<u8>, usize) {
    let prefix = endpoint.prefix();
    let mut out = Vec::with_capacity(prefix.len() + 128 + body.len());
    out.extend_from_slice(prefix);
    let accept = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    header(&mut out, "Accept", accept);
    header_u64(&mut out, "Content-Length", body.len() as u64);
    header(&mut out, "X-Request-Id", &req.provider_id);
    if let Some(tp) = req.trace.as_ref().and_then(|t| t.provider_traceparent()) {
        header(&mut out, "traceparent", &tp);
        if let Some(state) = req.trace.as_ref().and_then(|t| t.state.as_deref()) {
            header(&mut out, "tracestate", state);
        }
    }
    write::end_head(&mut out);
    let body_at = out.len();
    out.extend_from_slice(body);
    (out, body_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_pause_longer_each_time_and_honour_a_short_retry_after() {
        let ms = |d: Option<std::time::Duration>| d.map(|d| d.as_millis());
        let first = ms(retry_pause(None, 0, "req_1")).unwrap();
        assert!((250..=312).contains(&first), "{first}");
        let second = ms(retry_pause(None, 1, "req_1")).unwrap();
        assert!((500..=625).contains(&second), "{second}");
        assert_ne!(
            retry_pause(None, 0, "req_1"),
            retry_pause(None, 0, "req_2"),
            "spread by the request"
        );
        assert_eq!(ms(retry_pause(Some(2), 0, "r")), Some(2000));
        assert_eq!(ms(retry_pause(Some(5), 3, "r")), Some(5000));
        assert_eq!(
            retry_pause(Some(6), 0, "r"),
            None,
            "too long to hold the client"
        );
    }

    #[test]
    fn only_the_endpoints_failures_are_tried_again() {
        let rejected = |status: u16, retry_after: Option<u64>| {
            let mut e = ApiError::upstream(UpstreamFault::Rejected, "x");
            e.retry_after = retry_after;
            classify(&e, Some(status))
        };
        assert_eq!(rejected(400, None), (Outcome::Answered, Retry::No));
        assert_eq!(rejected(404, None), (Outcome::Answered, Retry::No));
        assert_eq!(rejected(413, None), (Outcome::Answered, Retry::No));
        assert_eq!(
            rejected(408, None),
            (Outcome::Failed(FailureKind::Status5xx), Retry::Anywhere)
        );
        assert_eq!(
            rejected(503, Some(4)),
            (Outcome::Failed(FailureKind::Status5xx), Retry::Anywhere)
        );
        assert_eq!(
            rejected(429, None),
            (Outcome::Failed(FailureKind::Status429), Retry::Anywhere)
        );
        assert_eq!(
            rejected(429, Some(7)),
            (
                Outcome::RetryAfter(std::time::Duration::from_secs(7)),
                Retry::Anywhere
            )
        );
        assert_eq!(
            classify(&ApiError::upstream_timeout("x"), None),
            (Outcome::Failed(FailureKind::Timeout), Retry::Anywhere)
        );
        assert_eq!(
            classify(&ApiError::upstream(UpstreamFault::Tls, "x"), None),
            (Outcome::Failed(FailureKind::Connect), Retry::Anywhere)
        );
        assert_eq!(
            classify(&ApiError::upstream(UpstreamFault::ErrorEvent, "x"), None),
            (Outcome::Failed(FailureKind::Invalid), Retry::Elsewhere)
        );
        assert_eq!(
            classify(&ApiError::overloaded("x"), None),
            (Outcome::Abandoned, Retry::No)
        );
    }
}
