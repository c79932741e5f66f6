//! Rate limits: admitting a validated request (by this process's limiter,
//! or by the shared one through [`Event::Admit`]), refusing with 429, and
//! settling the reservation with what was metered.
//!
//! Every decision about the shared limiter is made here, once, for every
//! driver: what an unreachable limiter means at admission (the configured
//! fallback), what a granted reservation for a client that left becomes (a
//! settlement of nothing), and what a failed settlement becomes
//! ([`Settlement::finish`]: settled by this process instead).

use std::sync::Arc;

use super::{Connection, Event, Phase};
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::limits::{Admission, LimitKind, Limits, Rejection};
use crate::time::Instant;
use crate::usage::Usage;
use crate::validate::{ChatRequest, validate_chat_request};

/// The shared limiter's answer to [`Event::Admit`]: its verdict, or why it
/// could not be asked.
pub type SharedAdmission = Result<Result<Admission, Rejection>, String>;

/// A request for the shared limiter ([`Event::Admit`]): admit one request
/// of `key`, reserving `tokens`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmitRequest {
    /// Key name.
    pub key: String,
    /// Its limits.
    pub limits: Limits,
    /// Tokens to reserve.
    pub tokens: u64,
}

/// A finished request's reservation, to be replaced by what it used
/// ([`Event::Settle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// Key name.
    pub key: String,
    /// Its limits.
    pub limits: Limits,
    /// Tokens reserved at admission.
    pub reserved: u64,
    /// Tokens metered.
    pub used: u64,
}

impl Settlement {
    /// The shared limiter settled it (`Ok`), or could not be reached
    /// (`Err`, why): then this process's own limiter settles it, so this
    /// instance's limits stay right; the shared bucket refills in time.
    pub fn finish(self, gw: &Gateway, now: Instant, outcome: Result<(), String>) {
        if let Err(why) = outcome {
            tracing::warn!(error = why.as_str(), "shared settlement failed");
            gw.limiter()
                .settle(&self.key, self.limits, self.reserved, self.used, now);
        }
    }
}

impl Connection {
    /// The shared limiter answered [`Event::Admit`] (`Err`: it could not be
    /// reached).
    pub fn handle_admission(&mut self, now: Instant, verdict: SharedAdmission) {
        let asked = self.admitting.take();
        if self.phase != Phase::Admitting {
            // The client left meanwhile: give the reservation back, then
            // close.
            if let (Ok(Ok(a)), Some((key, limits))) = (&verdict, asked) {
                self.events.push_back(Event::Settle(Settlement {
                    key,
                    limits,
                    reserved: a.reserved_tokens,
                    used: 0,
                }));
            }
            self.after(now);
            return;
        }
        let gw = Arc::clone(&self.gw);
        let fail_closed = gw.config().shared_limits.is_some_and(|s| s.fail_closed);
        let verdict = match verdict {
            Ok(v) => {
                if let Some(req) = self.req.as_mut() {
                    req.shared = true;
                }
                v
            }
            Err(why) => {
                gw.metrics().shared_limits_unavailable();
                tracing::warn!(
                    error = why.as_str(),
                    fallback = if fail_closed {
                        "refuse (503)"
                    } else {
                        "local limits"
                    },
                    "shared rate limiter unreachable"
                );
                if fail_closed {
                    let e = ApiError::overloaded(
                        "The shared rate limiter is unreachable; retry shortly.",
                    );
                    return self.respond_error(now, e, false);
                }
                let req = self.req.as_ref().expect("request in progress");
                let key = req.key.as_ref().expect("authenticated");
                let tokens = req.chat.as_ref().map_or(0, ChatRequest::reservation);
                gw.limiter().admit(&key.name, key.limits, tokens, now)
            }
        };
        self.admitted(now, verdict);
        self.after(now);
    }

    /// A client that waits for `100 Continue` before uploading its body is
    /// refused at once when its key has no request left in the local
    /// buckets: no body, however valid, could be admitted now, and the
    /// 429 saves it the upload. Only local limits are certain enough; with
    /// shared limits the shared limiter decides after the body.
    pub(super) fn refuse_before_upload(&mut self, now: Instant) -> Option<ApiError> {
        let gw = Arc::clone(&self.gw);
        if gw.config().shared_limits.is_some() {
            return None;
        }
        let req = self.req.as_mut().expect("request in progress");
        let key = req.key.as_ref().expect("authenticated");
        let status = gw.limiter().status(&key.name, key.limits, now);
        if status.remaining_requests > 0 {
            return None;
        }
        // Time until one request token: the time until the bucket is full
        // less the time the other `per_minute - 1` take (rounded so that
        // the wait is never understated).
        let per_minute = status.limit_requests.max(1);
        let wait_ms = status
            .reset_requests_ms
            .saturating_sub(60_000 * (per_minute - 1) / per_minute);
        gw.metrics().rate_limited(&key.name, LimitKind::Requests);
        let e = rate_limit_error(
            &key.name,
            LimitKind::Requests,
            wait_ms.div_ceil(1000).max(1),
        );
        req.limit_status = Some(status);
        Some(e)
    }

    /// The whole body arrived: validate it, then admit it (here, or by
    /// asking the shared limiter).
    pub(super) fn chat_request(&mut self, now: Instant) {
        let gw = Arc::clone(&self.gw);
        let req = self.req.as_mut().expect("chat request in progress");
        let chat = match validate_chat_request(&req.body, &gw.config().catalog) {
            Ok(c) => c,
            Err(e) => {
                req.peeked = Some(crate::validate::peek_model_and_stream(&req.body));
                return self.respond_error(now, e, false);
            }
        };
        let key = req.key.as_ref().expect("authenticated before the body");
        let tokens = chat.reservation();
        req.chat = Some(chat);
        if gw.config().shared_limits.is_some() {
            let (key, limits) = (key.name.clone(), key.limits);
            self.admitting = Some((key.clone(), limits));
            self.phase = Phase::Admitting;
            self.events.push_back(Event::Admit(AdmitRequest {
                key,
                limits,
                tokens,
            }));
            return;
        }
        let verdict = gw.limiter().admit(&key.name, key.limits, tokens, now);
        self.admitted(now, verdict);
    }

    /// Admitted: the provider is asked; refused: 429.
    fn admitted(&mut self, now: Instant, verdict: Result<Admission, Rejection>) {
        let gw = Arc::clone(&self.gw);
        let req = self.req.as_mut().expect("request in progress");
        let key = req.key.as_ref().expect("authenticated before the body");
        match verdict {
            Ok(admission) => {
                req.reserved = admission.reserved_tokens;
                req.limit_status = Some(admission.status);
                self.start_upstream(now);
            }
            Err(rejection) => {
                gw.metrics().rate_limited(&key.name, rejection.kind);
                req.limit_status = Some(rejection.status);
                let e = rate_limit_error(&key.name, rejection.kind, rejection.retry_after_secs);
                self.respond_error(now, e, false);
            }
        }
    }

    /// Replaces the token reservation by what was metered: here, or by the
    /// shared limiter that admitted the request.
    pub(super) fn settle(&mut self, now: Instant, usage: Option<Usage>) {
        let req = self.req.as_mut().expect("request");
        let Some(key) = &req.key else { return };
        if req.reserved == 0 && usage.is_none() {
            return;
        }
        let used = usage.map_or(0, |u| u.prompt_tokens.saturating_add(u.completion_tokens));
        let reserved = std::mem::take(&mut req.reserved);
        if req.shared {
            self.events.push_back(Event::Settle(Settlement {
                key: key.name.clone(),
                limits: key.limits,
                reserved,
                used,
            }));
        } else {
            self.gw
                .limiter()
                .settle(&key.name, key.limits, reserved, used, now);
        }
    }
}

/// The 429 for a key that ran into one of its limits.
fn rate_limit_error(key: &str, kind: LimitKind, retry_after_secs: u64) -> ApiError {
    let what = match kind {
        LimitKind::Requests => "requests",
        LimitKind::Tokens => "tokens",
    };
    ApiError::rate_limited(
        format!(
            "Rate limit reached for {what} per minute on key '{key}'. Retry after {retry_after_secs} s."
        ),
        retry_after_secs,
    )
}
