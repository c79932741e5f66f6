//! A stream cut mid-answer, finished (`--stream-resume`): when a
//! committed stream breaks (a reset, a stall, an invalid event, an end
//! without `finish_reason`) and an endpoint of the model, or of one of
//! its fallbacks, continues final assistant messages (`continuation` on
//! `[[upstream]]`), that endpoint is asked for the rest of the answer and
//! its chunks go to the client in the same stream, rewritten to be one
//! stream (`dialect/splice/`).
//!
//! Bounded: at most `--stream-resume-attempts` continuations, each an
//! attempt with the first-byte budget of its own counted from the cut;
//! never during the drain, never once the client left (the exchange is
//! over then). An endpoint that refuses the prefix (a 4xx) is asked once
//! for the answer from its start, which is spliced only where it repeats,
//! byte for byte, what the client has. Otherwise the stream ends as the
//! cut ended it. The ledger line meters every attempt's usage together
//! and says how many continuations there were.

use std::sync::Arc;

use super::Connection;
use super::admission::fallbacks;
use super::ending::StreamEnd;
use super::failover::{classify, provider_request};
use super::request::KeyRef;
use crate::dialect::splice::{Plan, Rewriter, Rewritten, Transcript};
use crate::endpoints::{Attempt, Outcome};
use crate::error::{ApiError, UpstreamFault};
use crate::json::{Cursor, Keys};
use crate::ledger::LedgerRecord;
use crate::metrics::ResumeOutcome;
use crate::time::Instant;
use crate::usage::Usage;
use crate::validate::with_model;

/// A streamed request's resumption: what its client has, and the
/// continuation in progress.
#[derive(Debug, Default)]
pub(super) struct Resume {
    /// What the client has of the answer.
    part: Transcript,
    /// The continuation in progress: how its chunks are rewritten.
    rewriter: Option<Rewriter>,
    /// It is the answer asked from its start.
    restarting: bool,
    /// Continuations begun (a restart is part of the one it replaced).
    begun: u32,
    /// Endpoints a continuation failed on (by id).
    tried: Vec<u64>,
    /// The conversation as the cut attempt was sent it.
    original: Option<Vec<u8>>,
    /// What the earlier attempts' providers reported, and what it cost.
    earlier: Option<Usage>,
    earlier_cost: u64,
    /// How the stream was first cut: how it ends if nothing finishes it.
    cut: Option<StreamEnd>,
    given_up: bool,
    diverged: bool,
}

/// What the exchange does with one of the provider's chunks.
pub(super) enum Take {
    /// Forward it as it is.
    Forward,
    /// Nothing for the client.
    Drop,
    /// Forward this instead.
    Rewritten(Vec<u8>),
    /// A restart said something else than the client has.
    Diverged,
}

impl Resume {
    /// One chunk of the stream: noted as what the client has, rewritten
    /// first when it comes from a continuation.
    pub(super) fn take(&mut self, data: &[u8]) -> Take {
        let Some(rewriter) = self.rewriter.as_mut() else {
            self.part.record(data);
            return Take::Forward;
        };
        match rewriter.rewrite(&self.part, data, self.earlier.as_ref()) {
            Rewritten::Drop => Take::Drop,
            Rewritten::Chunk(chunk) => {
                self.part.record(&chunk);
                Take::Rewritten(chunk)
            }
            Rewritten::Diverged => {
                self.diverged = true;
                self.given_up = true;
                Take::Diverged
            }
        }
    }

    /// How the stream was first cut.
    pub(super) fn cut(&self) -> Option<StreamEnd> {
        self.cut.clone()
    }

    /// A continuation was begun.
    pub(super) fn continued(&self) -> bool {
        self.begun > 0
    }

    /// A restart said something else than the client has: the stream
    /// ends as it was cut, whatever the restart's tracker saw.
    pub(super) fn diverged(&self) -> bool {
        self.diverged
    }

    /// Nothing more will finish the stream (an answer over what a
    /// translation keeps: a continuation would hit it again).
    pub(super) fn give_up(&mut self) {
        self.given_up = true;
    }

    /// A continuation's chunks are being spliced in.
    pub(super) fn splicing(&self) -> bool {
        self.rewriter.is_some()
    }

    /// `usage` (the attempt answering now) with what the earlier ones
    /// reported.
    pub(super) fn total(&self, usage: Option<Usage>) -> Option<Usage> {
        match (self.earlier, usage) {
            (Some(e), Some(u)) => Some(e.plus(&u)),
            (e, u) => u.or(e),
        }
    }
}

impl Connection {
    /// `usage` (the attempt answering now) with what the earlier
    /// attempts of a continued stream reported.
    pub(super) fn total_usage(&self, usage: Option<Usage>) -> Option<Usage> {
        match self.req.as_ref().and_then(|r| r.resume.as_deref()) {
            Some(r) => r.total(usage),
            None => usage,
        }
    }

    /// At a streamed request's first attempt: its stream may be finished
    /// after a cut when resumption is on and an endpoint continues.
    pub(super) fn arm_resume(&mut self) {
        if !self.gw.config().stream_resume {
            return;
        }
        let Some(req) = self.req.as_mut() else { return };
        let continues = req.routes.as_ref().is_some_and(|r| {
            r.endpoints()
                .iter()
                .any(|e| e.config().continuation.continues())
        });
        if continues && req.resume.is_none() && req.chat.as_ref().is_some_and(|c| c.stream) {
            req.resume = Some(Box::default());
        }
    }

    /// Whether a cut of the stream now could be sent to be finished (what
    /// holds back the provider's `[DONE]` of an answer without
    /// `finish_reason`).
    pub(super) fn may_resume(&self) -> bool {
        let most = self.gw.config().stream_resume_attempts;
        self.cut_at.is_none()
            && self
                .req
                .as_ref()
                .and_then(|r| r.resume.as_deref())
                .is_some_and(|r| !r.given_up && r.begun < most && !r.part.has_calls())
    }

    /// The stream ended `end` with `bytes` still for the client: when it
    /// was cut and may be finished, they go out and a continuation starts.
    /// True when one did.
    pub(super) fn resume_stream(
        &mut self,
        now: Instant,
        end: &StreamEnd,
        bytes: &mut Vec<u8>,
    ) -> bool {
        // An answer whose finish arrived (a provider that broke after
        // it), or that the provider's error event ended, is not cut.
        let cut = matches!(end, StreamEnd::Failed(..) | StreamEnd::Ended)
            && self
                .up
                .as_ref()
                .is_some_and(|u| !u.tracker.is_complete() && u.tracker.error().is_none());
        if !cut {
            return false;
        }
        // A continuation that broke before it gave the client anything:
        // its endpoint hears how, and is not asked again.
        self.fail_open_attempt(now, end);
        if !self.may_resume() || !self.req.as_ref().is_some_and(|r| r.has_answer()) {
            return false;
        }
        if !self.one_choice() {
            return self.give_up_resuming();
        }
        let Some((model, attempt)) = self.continuer(now) else {
            return self.give_up_resuming();
        };
        let mode = attempt.endpoint().config().continuation;
        let req = self.req.as_mut().expect("request in progress");
        let resume = req.resume.as_deref_mut().expect("armed");
        let plan = resume.part.plan(mode);
        if let Plan::No(why) = plan {
            tracing::debug!(request_id = req.id.as_str(), why, "cut stream not resumed");
            attempt.finish(Outcome::Abandoned, now);
            return self.give_up_resuming();
        }
        if resume.original.is_none() {
            resume.original = Some(req.upstream_request[req.body_at..].to_vec());
        }
        let Some(body) = self.continuation_request(model, &attempt, plan == Plan::Restart) else {
            attempt.finish(Outcome::Abandoned, now);
            return self.give_up_resuming();
        };
        // What the cut attempt sent goes out; the attempt is over.
        if !bytes.is_empty() {
            let out = std::mem::take(bytes);
            self.push_client(now, &out);
        }
        // The cut attempt's span says how it broke.
        let status = self.req.as_ref().and_then(|r| r.upstream_status);
        self.trace_attempt_failed(now, &broke(end), status);
        let price = self.price();
        let mut up = self.close_upstream();
        let answer = up.answer.take();
        let req = self.req.as_mut().expect("request in progress");
        let resume = req.resume.as_deref_mut().expect("armed");
        if let Some(u) = up.tracker.usage() {
            resume.earlier = resume.total(Some(u));
            resume.earlier_cost += price.cost_nano(u.prompt_tokens, u.completion_tokens);
        }
        resume.cut.get_or_insert_with(|| end.clone());
        resume.begun += 1;
        tracing::info!(
            request_id = req.id.as_str(),
            endpoint = attempt.endpoint().name(),
            continuation = mode.as_str(),
            restart = plan == Plan::Restart,
            "stream cut mid-answer; asking for the rest"
        );
        self.begin_continuation(now, model, attempt, plan == Plan::Restart, body, answer);
        true
    }

    /// The attempt answering now, still open (a continuation that sent
    /// nothing the client got), ended `end`: finished as that failure, its
    /// endpoint not asked for a continuation again.
    fn fail_open_attempt(&mut self, now: Instant, end: &StreamEnd) {
        let Some(attempt) = self.up.as_mut().and_then(|u| u.attempt.take()) else {
            return;
        };
        let status = self.req.as_ref().and_then(|r| r.upstream_status);
        attempt.finish(classify(&broke(end), status).0, now);
        let req = self.req.as_mut().expect("request in progress");
        if let (Some(r), Some(e)) = (req.resume.as_deref_mut(), req.endpoint.as_ref()) {
            r.tried.push(e.id());
        }
    }

    /// The request a continuation (or, `restart`, the answer from its
    /// start) sends `attempt`'s endpoint for `model`: the conversation as
    /// the cut attempt was sent it, named as that endpoint names the
    /// model, with the part the client has. `None` when the body cannot
    /// carry it (never for a validated body): nothing is continued then.
    fn continuation_request(
        &self,
        model: usize,
        attempt: &Attempt,
        restart: bool,
    ) -> Option<Vec<u8>> {
        let req = self.req.as_ref()?;
        let config = attempt.endpoint().config();
        let name = config.model_name(&req.routes.as_ref()?.catalog().models()[model]);
        let resume = req.resume.as_deref()?;
        let original = with_model(resume.original.as_deref()?, name);
        if restart {
            return Some(original);
        }
        crate::dialect::splice::continuation_body(&original, config.continuation, &resume.part)
    }

    /// Nothing will finish the cut stream: it ends as it was cut.
    fn give_up_resuming(&mut self) -> bool {
        if let Some(r) = self.req.as_mut().and_then(|r| r.resume.as_deref_mut()) {
            r.given_up = true;
        }
        false
    }

    /// The request asked for one choice (a stream of several is not
    /// spliced).
    fn one_choice(&self) -> bool {
        let Some(req) = self.req.as_ref() else {
            return false;
        };
        let body = match req.resume.as_deref().and_then(|r| r.original.as_deref()) {
            Some(b) => b,
            None => &req.upstream_request[req.body_at..],
        };
        let mut one = true;
        let _ = Cursor::new(body).members(Keys::Skipped, |c, key| {
            let name = c.name(key);
            let start = c.at();
            c.skip()?;
            if &*name == b"n" {
                one = matches!(&body[start..c.at()], b"1" | b"null");
            }
            Ok(())
        });
        one
    }

    /// The endpoint a continuation goes to, and the model it answers:
    /// another endpoint of the model answering that continues, else one of
    /// its fallbacks' (the key may call), else the endpoint that was cut;
    /// never one a continuation failed on.
    fn continuer(&self, now: Instant) -> Option<(usize, Attempt)> {
        let req = self.req.as_ref()?;
        let routes = Arc::clone(req.routes.as_ref()?);
        let catalog = routes.catalog();
        let resume = req.resume.as_deref()?;
        let cut = req.endpoint.as_ref().map(|e| e.id());
        let excluded = |cut_too: bool| -> Vec<u64> {
            routes
                .endpoints()
                .iter()
                .filter(|e| {
                    !e.config().continuation.continues()
                        || resume.tried.contains(&e.id())
                        || cut_too && Some(e.id()) == cut
                })
                .map(|e| e.id())
                .collect()
        };
        let asked = catalog.index(&req.chat.as_ref()?.model)?;
        let key_models = req.key.as_ref().and_then(KeyRef::models);
        let chain: Vec<usize> = std::iter::once(asked)
            .chain(fallbacks(catalog, asked, key_models))
            .collect();
        let from = chain.iter().position(|&m| m == req.model).unwrap_or(0);
        let others = excluded(true);
        for &m in &chain[from..] {
            if let Some(a) = routes.choose(now, &others, m, req.affinity) {
                return Some((m, a));
            }
        }
        routes
            .choose(now, &excluded(false), req.model, req.affinity)
            .map(|a| (req.model, a))
    }

    /// Starts a continuation (or, `restart`, the answer from its start) on
    /// `attempt`'s endpoint, for `model`: the conversation as the cut
    /// attempt was sent it, with the part the client has.
    fn begin_continuation(
        &mut self,
        now: Instant,
        model: usize,
        attempt: Attempt,
        restart: bool,
        body: Vec<u8>,
        answer: Option<Box<crate::dialect::AnswerRecorder>>,
    ) {
        let endpoint = Arc::clone(attempt.endpoint());
        let req = self.req.as_mut().expect("request in progress");
        if model != req.model {
            if let Some(routes) = req.routes.as_ref() {
                let models = routes.catalog().models();
                self.gw
                    .metrics()
                    .fallback(&models[req.model].id, &models[model].id);
            }
            req.model = model;
        }
        req.body_model = true;
        req.attempts += 1;
        req.model_attempts += 1;
        // The continuation's first event is due within the first-byte
        // timeout, counted from the cut (a restart after a refusal keeps
        // the continuation's).
        if !restart || req.model_started.is_none() {
            req.model_started = Some(now);
        }
        req.provider_id = crate::gateway::provider_request_id(&req.id, req.attempts);
        req.upstream_status = None;
        req.endpoint = Some(Arc::clone(&endpoint));
        self.trace_attempt(now);
        self.trace_continuation(if restart {
            "restart"
        } else {
            endpoint.config().continuation.as_str()
        });
        let req = self.req.as_mut().expect("request in progress");
        let resume = req.resume.as_deref_mut().expect("armed");
        resume.rewriter = Some(if restart {
            Rewriter::restart(&resume.part)
        } else {
            Rewriter::continuation(
                &resume.part,
                endpoint.config().continuation
                    == crate::dialect::splice::Continuation::FinalAssistant,
            )
        });
        resume.restarting = restart;
        let (out, body_at) = provider_request(&endpoint, &body, true, req);
        req.upstream_request = out;
        req.body_at = body_at;
        self.connect_upstream(now, false, Some(attempt));
        // The memory's record of the answer goes on with it.
        if let (Some(up), Some(answer)) = (self.up.as_mut(), answer) {
            up.answer = Some(answer);
        }
        // A Messages client hears its pings while the continuation
        // connects and thinks.
        self.arm_ping(now);
    }

    /// A continuation failed before its first event (`err`): a refusal
    /// of the prefix asks the same endpoint for the answer from its start
    /// (once); another failure goes to the next continuation if one is
    /// left; else the stream ends as it was cut. False when the request
    /// is not continuing.
    pub(super) fn continuation_failed(&mut self, now: Instant, err: &ApiError) -> bool {
        let continuing = self.up.is_some()
            && self.req.as_ref().is_some_and(|r| {
                r.has_answer() && r.resume.as_deref().is_some_and(Resume::splicing)
            });
        if !continuing {
            return false;
        }
        let status = self.req.as_ref().and_then(|r| r.upstream_status);
        self.trace_attempt_failed(now, err, status);
        let (outcome, _) = classify(err, status);
        if let Some(a) = self.up.as_mut().and_then(|u| u.attempt.take()) {
            a.finish(outcome, now);
        }
        let refused = err.fault == Some(UpstreamFault::Rejected)
            && status.is_some_and(|s| (400..500).contains(&s) && s != 408 && s != 429);
        let req = self.req.as_mut().expect("request in progress");
        let endpoint = req.endpoint.clone();
        let resume = req.resume.as_deref_mut().expect("armed");
        tracing::info!(
            request_id = req.id.as_str(),
            endpoint = endpoint.as_ref().map_or("", |e| e.name()),
            error = err.fault.map_or(err.code, UpstreamFault::as_str),
            "continuation of a cut stream failed"
        );
        if refused && !resume.restarting && self.cut_at.is_none() {
            // It refused the prefix, not the request: the answer from
            // its start, there.
            let model = req.model;
            let except: Vec<u64> = req
                .routes
                .as_ref()
                .map(|r| {
                    r.endpoints()
                        .iter()
                        .map(|e| e.id())
                        .filter(|&id| endpoint.as_ref().is_none_or(|e| e.id() != id))
                        .collect()
                })
                .unwrap_or_default();
            let attempt = req
                .routes
                .as_ref()
                .and_then(|r| r.choose(now, &except, model, None));
            if let Some(attempt) = attempt {
                match self.continuation_request(model, &attempt, true) {
                    Some(body) => {
                        let answer = self.close_upstream().answer.take();
                        self.begin_continuation(now, model, attempt, true, body, answer);
                        return true;
                    }
                    None => attempt.finish(Outcome::Abandoned, now),
                }
            }
        }
        let req = self.req.as_mut().expect("request in progress");
        let resume = req.resume.as_deref_mut().expect("armed");
        if let Some(e) = &endpoint {
            resume.tried.push(e.id());
        }
        let end = resume.cut.clone().unwrap_or(StreamEnd::Failed(
            UpstreamFault::Reset,
            "the provider's stream was cut",
        ));
        // The next continuation, if one is left; else the cut's ending.
        self.end_stream(now, end, Vec::new());
        true
    }

    /// The record of a request whose stream was continued: every
    /// attempt's usage metered together (`usage` is the attempt answering
    /// now, `total` with the earlier ones'), the earlier ones at the prices
    /// of the model that answered them, how many continuations there were,
    /// and how the resumption ended (`gone`: the client left).
    pub(super) fn settle_resumed(&self, rec: &mut LedgerRecord, usage: Option<Usage>, gone: bool) {
        let Some(resume) = self.req.as_ref().and_then(|r| r.resume.as_deref()) else {
            return;
        };
        if resume.begun == 0 {
            return;
        }
        rec.continued = resume.begun;
        if resume.earlier.is_some() {
            let now = usage.map_or(0, |u| {
                self.price().cost_nano(u.prompt_tokens, u.completion_tokens)
            });
            rec.cost_nano_usd = resume.earlier_cost + now;
            rec.cost_usd = rec.cost_nano_usd;
        }
        let outcome = if gone {
            ResumeOutcome::Abandoned
        } else if resume.diverged {
            ResumeOutcome::Diverged
        } else if !rec.complete {
            ResumeOutcome::Failed
        } else if resume.restarting {
            ResumeOutcome::Restarted
        } else {
            ResumeOutcome::Continued
        };
        self.gw.metrics().stream_resume(outcome);
    }
}

/// How a cut broke, as an error (an end without `finish_reason` as the
/// cut stream's error event names it).
fn broke(end: &StreamEnd) -> ApiError {
    match end {
        StreamEnd::Failed(f, w) => ApiError::upstream(*f, *w),
        _ => {
            let mut e = ApiError::upstream(UpstreamFault::Reset, "no finish_reason");
            e.fault = None;
            e.code = "upstream_incomplete";
            e
        }
    }
}
