//! Admission: a validated request's rate limits, its key's budget and
//! in-flight cap (by this process, or by the shared limiter through
//! [`Event::Admit`]), the 429s, the key's queue, and settling what the
//! request held with what was metered.
//!
//! Every decision about admission is made here, once, for every driver:
//! the order of the checks (budget, in-flight cap, then rate limits:
//! nothing is charged unless all pass), what an unreachable shared limiter
//! means at admission (the configured fallback), what a granted
//! reservation for a client that left becomes (a settlement of nothing),
//! and what a failed settlement becomes ([`Settlement::finish`]: settled
//! by this process instead).

use std::sync::Arc;
use std::time::Duration;

use super::request::KeyRef;
use super::timers::Timer;
use super::{Connection, Event, Phase};
use crate::dialect::Translating;
use crate::error::{ApiError, StoreError};
use crate::gateway::Gateway;
use crate::ledger::LedgerRecord;
use crate::limits::{Admission, LimitKind, Limits, Rejection};
use crate::quota::{Quota, QuotaRefusal, worst_case_cost};
use crate::time::Instant;
use crate::validate::validate_chat_request_replaying;

/// The models that answer in place of the model `asked` (an index of
/// `catalog`), in order: its fallbacks that a key with this model list
/// may call (as indices).
pub(super) fn fallbacks<'a>(
    catalog: &'a crate::catalog::Catalog,
    asked: usize,
    key_models: Option<&'a [String]>,
) -> impl Iterator<Item = usize> + 'a {
    catalog.models()[asked]
        .fallback
        .iter()
        .filter_map(|id| catalog.index(id))
        .filter(move |&m| catalog.models()[m].allowed_by(key_models))
}

/// How often a request waiting in its key's queue looks whether its turn
/// came (a slot freed on another instance is seen this late at most).
const QUEUE_TURN: Duration = Duration::from_millis(20);

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A rate limit (requests or tokens per minute).
    Rate(Rejection),
    /// Its key's budget or in-flight cap.
    Quota(QuotaRefusal),
}

/// The shared limiter's answer to [`Event::Admit`]: its verdict, or why it
/// could not give one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedAdmission {
    /// Admitted, with what was reserved.
    Admitted(Admission),
    /// Refused by a limit, the budget or the in-flight cap.
    Refused(Refusal),
    /// No verdict: the configured fallback applies.
    Unavailable(StoreError),
}

/// A request for the shared limiter ([`Event::Admit`]): admit one request
/// of `key`, reserving `tokens` of its rate limit and, when it has a
/// budget, `cost` of it, and holding one of its in-flight slots under the
/// lease `lease`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmitRequest {
    /// Key name.
    pub key: String,
    /// Its limits.
    pub limits: Limits,
    /// Tokens to reserve.
    pub tokens: u64,
    /// Its budget and in-flight cap.
    pub quota: Quota,
    /// The request's worst-case cost, nano-dollars.
    pub cost: u64,
    /// The lease's name (the request id; empty when the key has neither a
    /// budget nor a cap).
    pub lease: String,
    /// The wall clock at admission (Unix ms): the periods it falls in.
    pub unix_ms: u64,
}

/// A finished request's reservations, to be replaced by what it used
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
    /// Its budget and in-flight cap.
    pub quota: Quota,
    /// Nano-dollars reserved against its budget at admission.
    pub cost_reserved: u64,
    /// Nano-dollars metered (the ledger line's `cost_nano_usd`).
    pub cost: u64,
    /// The lease it held (its in-flight slot and budget reservation), if
    /// it was admitted.
    pub lease: Option<String>,
    /// The wall clock at the end (Unix ms): the periods the cost counts in.
    pub unix_ms: u64,
}

impl Settlement {
    /// The shared limiter settled it (`Ok`), or could not (`Err`, why):
    /// then this process's own limiter settles the tokens, so this
    /// instance's limits stay right; the shared bucket refills in time,
    /// and the lease (slot and budget reservation) lapses.
    pub fn finish(self, gw: &Gateway, now: Instant, outcome: Result<(), StoreError>) {
        if let Err(why) = outcome {
            tracing::warn!(error = %why, "shared settlement failed");
            gw.limiter()
                .settle(&self.key, self.limits, self.reserved, self.used, now);
        }
    }
}

/// What a request holds of its key's quota.
#[derive(Debug, Default)]
pub(super) struct QuotaHold {
    /// Its worst-case cost (nano-dollars).
    cost: u64,
    /// Tokens reserved against its tokens per minute: the prompt's bound
    /// plus `max_tokens`.
    tokens: u64,
    /// Its worst case in tokens (the prompt's bound plus `max_tokens`, or
    /// the budget's reserve without one): what a request whose usage the
    /// provider did not report is charged.
    worst_tokens: u64,
    /// Reserved against the budget (0 without one).
    reserved: u64,
    /// Admitted: it holds an in-flight slot.
    held: bool,
    /// Its place in the key's queue, and since when, while it waits.
    ticket: Option<(u64, Instant)>,
}

impl Connection {
    /// The shared limiter answered [`Event::Admit`].
    pub fn handle_admission(&mut self, now: Instant, verdict: SharedAdmission) {
        let asked = self.admitting.take();
        if self.phase != Phase::Admitting {
            // The client left meanwhile: give the reservation back, then
            // close.
            if let (SharedAdmission::Admitted(a), Some(mut give_back)) = (&verdict, asked) {
                give_back.reserved = a.reserved_tokens;
                self.events.push_back(Event::Settle(Box::new(give_back)));
            }
            self.after(now);
            return;
        }
        let gw = Arc::clone(&self.gw);
        let fail_closed = gw.config().shared_limits.is_some_and(|s| s.fail_closed);
        let shared_verdict = !matches!(verdict, SharedAdmission::Unavailable(_));
        let verdict = match verdict {
            SharedAdmission::Admitted(a) => Ok(a),
            SharedAdmission::Refused(r) => Err(r),
            SharedAdmission::Unavailable(why) => {
                gw.metrics().shared_limits_unavailable();
                tracing::warn!(
                    error = %why,
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
                self.admit_here(now)
            }
        };
        if shared_verdict && let Some(req) = self.req.as_mut() {
            req.shared = true;
        }
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

    /// The whole body arrived: validate it, give its turns their
    /// reasoning (asking the shared memory first, if it must), then admit
    /// it.
    pub(super) fn chat_request(&mut self, now: Instant) {
        if self.read_stored(now) {
            // Translated once the store answered.
            return;
        }
        self.translate_chat(now);
    }

    /// The whole body (and what the store had for it) as the chat request
    /// it stands for, validated; then its reasoning and admission.
    pub(super) fn translate_chat(&mut self, now: Instant) {
        let gw = Arc::clone(&self.gw);
        let routes = gw.endpoints();
        let catalog = routes.catalog();
        let config = gw.config();
        let replay_default = config.reasoning.replay;
        let req = self.req.as_mut().expect("chat request in progress");
        if let Some(dialect) = req.dialect.as_deref_mut() {
            // Another API's request, as the one chat request it stands for;
            // the reasoning its client carried back is read only when a
            // model replays it.
            let replay = config
                .reasoning
                .any_replays(catalog)
                .then(|| &**gw.reasoning_seal());
            let body = &req.body;
            let stored = req.storing.as_deref().map(|s| s.stored());
            let cx = Translating {
                replay,
                stored: stored.as_ref(),
            };
            let translated = dialect.translate(body, cx);
            drop(stored);
            if let (Ok(_), Some(s)) = (&translated, req.storing.as_deref_mut()) {
                s.note_input(body, &req.id);
            }
            let too_large = match (req.storing.as_deref(), config.responses_kept) {
                (Some(s), Some(k)) => s.too_large(k.max_bytes),
                _ => None,
            };
            let translated = match (translated, too_large) {
                (Ok(_), Some(e)) => Err(e),
                (t, _) => t,
            };
            match translated {
                Ok(chat) => req.body = chat,
                Err(e) => {
                    // What the ledger names: the model and streaming the
                    // request asked for, where its API says them.
                    let said = req.dialect.as_deref().and_then(|d| d.asked_in_path());
                    let peeked =
                        said.unwrap_or_else(|| crate::validate::peek_model_and_stream(&req.body));
                    req.peeked = Some(peeked);
                    return self.respond_error(now, e, false);
                }
            }
        }
        let key_models = req.key.as_ref().and_then(KeyRef::models);
        let seen = catalog.seen_by(key_models);
        let chat = match validate_chat_request_replaying(&req.body, seen, replay_default) {
            Ok(c) => c,
            Err(mut e) => {
                req.peeked = Some(crate::validate::peek_model_and_stream(&req.body));
                // Named as the client wrote it.
                if let Some(d) = req.dialect.as_deref() {
                    e.param = e.param.map(|p| d.param_name(&p));
                }
                return self.respond_error(now, e, false);
            }
        };
        let asked = catalog.index(&chat.model).unwrap_or(0);
        req.model = asked;
        req.affinity = chat.cache_key.or(req.session).or(chat.user);
        req.routes = Some(Arc::clone(&routes));
        let count = req.count_tokens;
        req.chat = Some(chat);
        if !count && self.plan_replay(now) {
            // Admitted once the shared memory answered.
            return;
        }
        self.admit_chat(now);
    }

    /// The validated request (its turns' reasoning restored) held against
    /// its key's limits: its reservation, then admission.
    #[inline(always)]
    pub(super) fn admit_chat(&mut self, now: Instant) {
        let (overhead, reserve) = {
            let c = self.gw.config();
            (c.prompt_overhead_tokens, c.budget_reserve_tokens)
        };
        let restored = self.restored_tokens();
        let req = self.req.as_mut().expect("chat request in progress");
        // Taken for the reckoning and put back: no count of references
        // changes for it.
        let routes = req.routes.take().expect("routed");
        let catalog = routes.catalog();
        let key_models = req.key.as_ref().and_then(KeyRef::models);
        let chat = req.chat.as_ref().expect("validated");
        // The models that may answer: the one asked for, then its
        // fallbacks the key may call. Its reservation covers the worst of
        // them: the prompt as the providers of any of them will count it
        // (the estimate, with the reasoning the memory restored, plus what
        // they were seen to add, their chat templates: an upper bound), at
        // the dearest of their prices.
        let asked = req.model;
        // Most models have no fallback: their own figures, without a walk.
        let alone = catalog.models()[asked].fallback.is_empty();
        let mut serving = routes.serving(asked);
        if !alone {
            serving = fallbacks(catalog, asked, key_models)
                .fold(serving, |set, m| set | routes.serving(m));
        }
        let prompt = routes.prompt_bound(
            chat.estimated_prompt_tokens.saturating_add(restored),
            overhead,
            serving,
        );
        if req.count_tokens {
            req.routes = Some(routes);
            return self.respond_count_tokens(now, prompt);
        }
        req.hold.tokens = prompt.saturating_add(chat.max_tokens.unwrap_or(0)).max(1);
        req.hold.worst_tokens = prompt.saturating_add(chat.max_tokens.unwrap_or(reserve));
        let worst = |m: usize| {
            worst_case_cost(&catalog.models()[m].price, prompt, chat.max_tokens, reserve)
        };
        req.hold.cost = worst(asked);
        if !alone {
            req.hold.cost =
                fallbacks(catalog, asked, key_models).fold(req.hold.cost, |w, m| w.max(worst(m)));
        }
        req.routes = Some(routes);
        self.admit(now);
    }

    /// Admits the request: here, or by asking the shared limiter.
    fn admit(&mut self, now: Instant) {
        let gw = Arc::clone(&self.gw);
        if gw.config().shared_limits.is_none() {
            let verdict = self.admit_here(now);
            return self.admitted(now, verdict);
        }
        let req = self.req.as_ref().expect("chat request in progress");
        let key = req.key.as_ref().expect("authenticated before the body");
        let unix_ms = gw.wall().unix_ms(now);
        let ask = AdmitRequest {
            key: key.name.clone(),
            limits: key.limits,
            tokens: req.hold.tokens,
            quota: key.quota,
            cost: req.hold.cost,
            // Only a key with a budget or a cap holds a lease.
            lease: if key.quota == Quota::default() {
                String::new()
            } else {
                req.id.clone()
            },
            unix_ms,
        };
        // What is given back if the client leaves before the answer.
        self.admitting = Some(Settlement {
            key: ask.key.clone(),
            limits: ask.limits,
            reserved: 0,
            used: 0,
            quota: ask.quota,
            cost_reserved: if ask.quota.budget.is_some() {
                ask.cost
            } else {
                0
            },
            cost: 0,
            lease: (!ask.lease.is_empty()).then(|| ask.lease.clone()),
            unix_ms,
        });
        self.phase = Phase::Admitting;
        self.events.push_back(Event::Admit(Box::new(ask)));
    }

    /// This process's verdict: the key's budget and in-flight cap, then its
    /// rate limits; nothing is charged unless all pass.
    fn admit_here(&mut self, now: Instant) -> Result<Admission, Refusal> {
        let gw = Arc::clone(&self.gw);
        let unix_ms = gw.wall().unix_ms(now);
        let req = self.req.as_mut().expect("chat request in progress");
        let key = req.key.as_ref().expect("authenticated before the body");
        let ticket = req.hold.ticket.map(|(t, _)| t);
        let reserved = gw
            .quota()
            .admit(&key.name, &key.quota, req.hold.cost, ticket, unix_ms)
            .map_err(Refusal::Quota)?;
        match gw
            .limiter()
            .admit(&key.name, key.limits, req.hold.tokens, now)
        {
            Ok(a) => {
                req.hold.reserved = reserved;
                Ok(a)
            }
            Err(r) => {
                gw.quota().release(&key.name, false, reserved, 0, unix_ms);
                Err(Refusal::Rate(r))
            }
        }
    }

    /// Admitted: the provider is asked; refused: 429 (or, over the
    /// in-flight cap with a queue, a wait for a slot).
    fn admitted(&mut self, now: Instant, verdict: Result<Admission, Refusal>) {
        let gw = Arc::clone(&self.gw);
        let req = self.req.as_mut().expect("request in progress");
        let key = req.key.as_ref().expect("authenticated before the body");
        let e = match verdict {
            Ok(admission) => {
                req.reserved = admission.reserved_tokens;
                req.limit_status = Some(admission.status);
                req.hold.held = true;
                if req.shared {
                    gw.quota()
                        .count_in_flight(&key.name, true, gw.wall().unix_ms(now));
                }
                self.leave_queue(now, true);
                if self.is_background() {
                    return self.detach_run(now);
                }
                return self.start_upstream(now);
            }
            Err(Refusal::Rate(rejection)) => {
                gw.metrics().rate_limited(&key.name, rejection.kind);
                req.limit_status = Some(rejection.status);
                rate_limit_error(&key.name, rejection.kind, rejection.retry_after_secs)
            }
            Err(Refusal::Quota(QuotaRefusal::Budget(b))) => {
                gw.metrics().budget_refused(&key.name);
                ApiError::insufficient_quota(b.message(&key.name))
            }
            Err(Refusal::Quota(QuotaRefusal::InFlight { limit })) => {
                let timeout = gw.config().queue_timeout;
                if !timeout.is_zero() && !gw.is_draining() {
                    return self.wait_in_queue(now, timeout);
                }
                gw.metrics().in_flight_refused(&key.name);
                in_flight_error(&key.name, limit, None)
            }
        };
        self.leave_queue(now, false);
        self.respond_error(now, e, false);
    }

    /// Over the in-flight cap: wait in the key's queue (joining it at the
    /// back the first time) and look again shortly.
    fn wait_in_queue(&mut self, now: Instant, timeout: Duration) {
        let gw = Arc::clone(&self.gw);
        let req = self.req.as_mut().expect("request in progress");
        if req.hold.ticket.is_none() {
            let key = req.key.as_ref().expect("authenticated");
            let ticket = gw.quota().enqueue(&key.name, gw.wall().unix_ms(now));
            req.hold.ticket = Some((ticket, now));
            self.timers.set(Timer::QueueDeadline, now + timeout);
        }
        self.phase = Phase::Queued;
        self.timers.set(Timer::QueueTurn, now + QUEUE_TURN);
    }

    /// A queued request looks whether its turn came: first in the queue,
    /// it asks for admission again.
    pub(super) fn queue_turn(&mut self, now: Instant) {
        let gw = Arc::clone(&self.gw);
        let req = self.req.as_ref().expect("request in progress");
        let key = req.key.as_ref().expect("authenticated");
        let Some((ticket, _)) = req.hold.ticket else {
            return;
        };
        if gw
            .quota()
            .is_first(&key.name, ticket, gw.wall().unix_ms(now))
        {
            self.admit(now);
        } else {
            self.timers.set(Timer::QueueTurn, now + QUEUE_TURN);
        }
    }

    /// A queued request waited as long as it may: 429.
    pub(super) fn queue_expired(&mut self, now: Instant) {
        let req = self.req.as_ref().expect("request in progress");
        let key = req.key.as_ref().expect("authenticated");
        let limit = key.quota.max_in_flight.unwrap_or(0);
        let waited = req.hold.ticket.map(|(_, since)| now - since);
        let e = in_flight_error(&key.name, limit, waited);
        self.gw.metrics().in_flight_refused(&key.name);
        self.leave_queue(now, false);
        self.respond_error(now, e, false);
    }

    /// Leaves the key's queue, if the request waits in it (admitted:
    /// `served`).
    pub(super) fn leave_queue(&mut self, now: Instant, served: bool) {
        self.timers.stop(Timer::QueueTurn);
        self.timers.stop(Timer::QueueDeadline);
        let Some(req) = self.req.as_mut() else { return };
        let Some((ticket, since)) = req.hold.ticket.take() else {
            return;
        };
        let Some(key) = &req.key else { return };
        self.gw
            .quota()
            .dequeue(&key.name, ticket, self.gw.wall().unix_ms(now));
        self.gw.metrics().queue_left(&key.name, now - since, served);
    }

    /// The request ended with this record: its token reservation and its
    /// budget reservation are replaced by what was metered, and its
    /// in-flight slot freed, here or by the shared limiter that admitted
    /// it. A request that cost more than its budget reservation is marked
    /// in the record (`budget_overshoot_nano_usd`) and counted.
    pub(super) fn settle(&mut self, now: Instant, rec: &mut LedgerRecord) {
        let gw = Arc::clone(&self.gw);
        let req = self.req.as_mut().expect("request");
        let Some(key) = &req.key else { return };
        let hold = std::mem::take(&mut req.hold);
        let mut used = rec.prompt_tokens.saturating_add(rec.completion_tokens);
        if rec.usage_missing {
            // The provider answered without reporting usage: the ledger
            // keeps what it reported (nothing), the key's limits and budget
            // are charged the request's worst case, never zero.
            used = used.max(hold.worst_tokens);
            rec.charged_nano_usd = rec.cost_nano_usd.max(hold.cost);
        }
        let spent = rec.cost_nano_usd.max(rec.charged_nano_usd);
        let reserved = std::mem::take(&mut req.reserved);
        // The ledger line's time: the periods the cost counts in are the
        // ones a rebuild from the ledger puts it in.
        let unix_ms = match rec.unix_ms {
            0 => gw.wall().unix_ms(now),
            t => t,
        };
        let budgeted = key.quota.budget.is_some();
        if req.shared {
            if !hold.held && reserved == 0 && used == 0 {
                // Refused by the shared limiter: nothing to settle.
                return;
            }
            self.events.push_back(Event::Settle(Box::new(Settlement {
                key: key.name.clone(),
                limits: key.limits,
                reserved,
                used,
                quota: key.quota,
                cost_reserved: hold.reserved,
                cost: spent,
                lease: (hold.held && key.quota != Quota::default()).then(|| req.id.clone()),
                unix_ms,
            })));
            if hold.held {
                gw.quota().count_in_flight(&key.name, false, unix_ms);
            }
            gw.quota().spend(&key.name, spent, unix_ms);
            if budgeted && spent > hold.cost {
                rec.budget_overshoot_nano_usd = spent - hold.cost;
            }
        } else {
            if reserved > 0 || used > 0 {
                gw.limiter()
                    .settle(&key.name, key.limits, reserved, used, now);
            }
            if hold.held {
                rec.budget_overshoot_nano_usd =
                    gw.quota()
                        .release(&key.name, budgeted, hold.reserved, spent, unix_ms);
            } else if spent > 0 {
                gw.quota().spend(&key.name, spent, unix_ms);
            }
            if gw.config().shared_limits.is_some() && spent > 0 {
                // Admitted here while the shared limiter was away
                // (fail-open): its cost still belongs in the shared spend
                // the other instances decide on. Only the cost: its tokens
                // and its slot were this instance's.
                self.events.push_back(Event::Settle(Box::new(Settlement {
                    key: key.name.clone(),
                    limits: key.limits,
                    reserved: 0,
                    used: 0,
                    quota: key.quota,
                    cost_reserved: 0,
                    cost: spent,
                    lease: None,
                    unix_ms,
                })));
            }
        }
        if rec.budget_overshoot_nano_usd > 0 {
            gw.metrics()
                .budget_overshoot(&key.name, rec.budget_overshoot_nano_usd);
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

/// The 429 for a key with its in-flight cap open (after waiting `waited`
/// in its queue, if it did).
fn in_flight_error(key: &str, limit: u32, waited: Option<Duration>) -> ApiError {
    let waited = match waited {
        Some(w) => format!(" (waited {} ms in its queue)", w.as_millis()),
        None => String::new(),
    };
    ApiError::rate_limited(
        format!(
            "Too many requests in flight for key '{key}': its in-flight limit is {limit} at once{waited}. Retry after 1 s."
        ),
        1,
    )
}
