//! Reasoning through the tool loop: the request's assistant turns given
//! their reasoning back as the answering model's replay and each
//! endpoint's field want it (from the client, the memory, or an empty
//! string), and an answer's reasoning remembered for the clients that drop
//! it. The rules are `crate::reasoning`'s; this room decides when they
//! apply and carries the lookups in the shared store out as events.

use std::sync::Arc;

use super::{Connection, Event, Phase};
use crate::endpoints::Endpoint;
use crate::error::StoreError;
use crate::reasoning::{AnswerReasoning, ReplayMode, ReplayPlan};
use crate::time::Instant;

/// A request's reasoning replay: its turns, and the body they are in.
#[derive(Debug)]
pub(super) struct Replay {
    plan: ReplayPlan,
    /// The body the plan's ranges are in: the validated body for the
    /// provider (the asked model's provider id in it).
    source: Vec<u8>,
    /// The turns the local memory did not have, with their first call's
    /// id: what the shared store is asked for.
    missing: Vec<(usize, Vec<u8>)>,
    /// Counted in the metrics (once per request).
    counted: bool,
}

/// Ask the shared store (Redis) for a key's reasoning of these calls
/// ([`Event::Recall`]); answer with [`Connection::handle_recall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recall {
    /// The keys to read (each [`crate::reasoning::shared_key`]), in order.
    pub keys: Vec<Vec<u8>>,
}

/// Keep a key's reasoning of these calls in the shared store
/// ([`Event::Remember`]): set each key to `text` for `ttl_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remember {
    /// The keys to set (each [`crate::reasoning::shared_key`]).
    pub keys: Vec<Vec<u8>>,
    /// The reasoning, a JSON string.
    pub text: Arc<[u8]>,
    /// How long the store keeps it, milliseconds.
    pub ttl_ms: u64,
}

impl Connection {
    /// Whether any model that may answer the request (the one asked, its
    /// fallbacks its key may call) replays reasoning.
    fn replays(&self) -> bool {
        let req = self.req.as_ref().expect("request in progress");
        let Some(routes) = req.routes.as_ref() else {
            return false;
        };
        let catalog = routes.catalog();
        let config = &self.gw.config().reasoning;
        if !config.any_replays(catalog) {
            return false;
        }
        let key_models = req.key.as_ref().and_then(|k| k.models());
        std::iter::once(req.model)
            .chain(super::admission::fallbacks(catalog, req.model, key_models))
            .any(|m| config.replay_of(&catalog.models()[m]).replays())
    }

    /// The validated request's replay, when a model that may answer it
    /// replays reasoning: its turns read, the memory asked for those
    /// without reasoning. True when the shared store must be asked too
    /// ([`Event::Recall`] was queued and the request waits for
    /// [`Connection::handle_recall`]).
    pub(super) fn plan_replay(&mut self, now: Instant) -> bool {
        if !self.replays() {
            return false;
        }
        let gw = Arc::clone(&self.gw);
        let req = self.req.as_mut().expect("request in progress");
        let chat = req.chat.as_ref().expect("validated");
        let source = chat.upstream_body(&req.body).to_vec();
        let mut plan = ReplayPlan::read(&source);
        if plan.is_empty() {
            return false;
        }
        let key = req.key.as_ref().map_or("", |k| k.name.as_str());
        let wanting: Vec<(usize, Vec<Vec<u8>>)> = plan
            .wanting(&source)
            .map(|(i, calls)| (i, calls.to_vec()))
            .collect();
        let mut missing = Vec::new();
        {
            let mut memory = gw.reasoning_memory();
            for (i, calls) in wanting {
                let found = calls.iter().find_map(|id| memory.recall(key, id, now));
                match found {
                    Some(text) => plan.restore(i, text),
                    None => missing.push((i, calls[0].clone())),
                }
            }
        }
        let ask = gw.config().shared_limits.is_some() && !missing.is_empty();
        let keys = missing
            .iter()
            .map(|(_, id)| crate::reasoning::shared_key(key, id))
            .collect();
        req.replay = Some(Box::new(Replay {
            plan,
            source,
            missing,
            counted: false,
        }));
        if ask {
            self.phase = Phase::Recalling;
            self.events.push_back(Event::Recall(Recall { keys }));
        }
        ask
    }

    /// The shared store answered [`Event::Recall`]: each key's value in
    /// order (`None`: not there), or why it could not. What it had is
    /// restored (a value that is not one JSON string is ignored); either
    /// way the request goes on to admission.
    pub fn handle_recall(&mut self, now: Instant, found: Result<Vec<Option<Vec<u8>>>, StoreError>) {
        if self.phase != Phase::Recalling {
            self.after(now);
            return;
        }
        match found {
            Ok(values) => {
                let req = self.req.as_mut().expect("request in progress");
                let key = req.key.as_ref().map_or("", |k| k.name.as_str()).to_owned();
                let ttl = self.gw.config().reasoning.memory.ttl;
                if let Some(replay) = req.replay.as_mut() {
                    let missing = std::mem::take(&mut replay.missing);
                    let mut memory = self.gw.reasoning_memory();
                    for ((i, id), value) in missing.into_iter().zip(values) {
                        let Some(value) = value.filter(|v| is_json_string(v)) else {
                            continue;
                        };
                        let text: Arc<[u8]> = Arc::from(value);
                        // Kept here too: the conversation's next turn
                        // finds it without asking again.
                        if !ttl.is_zero() {
                            memory.remember(&key, &[id], &text, now);
                        }
                        replay.plan.restore(i, text);
                    }
                }
            }
            Err(why) => {
                tracing::warn!(error = %why, "the shared reasoning memory could not be read; turns it would have restored are filled empty");
            }
        }
        self.admit_chat(now);
        self.after(now);
    }

    /// The prompt tokens the memory restored: their bytes over four, a
    /// bound as the prompt's estimate is.
    pub(super) fn restored_tokens(&self) -> u64 {
        match self.req.as_ref().and_then(|r| r.replay.as_ref()) {
            None => 0,
            Some(r) => (r.plan.restored_bytes() as u64).div_ceil(4),
        }
    }

    /// The body an attempt on `endpoint` sends, when the request replays
    /// reasoning: the turns written as the answering model's replay and
    /// the endpoint's field want them (the caller maps the model name).
    /// `None` when the request has no replay.
    #[inline(always)]
    pub(super) fn replayed_body(&mut self, endpoint: &Endpoint) -> Option<Vec<u8>> {
        self.req
            .as_ref()
            .expect("request in progress")
            .replay
            .as_ref()?;
        self.replay_for(endpoint)
    }

    /// [`Connection::replayed_body`] for a request that replays.
    fn replay_for(&mut self, endpoint: &Endpoint) -> Option<Vec<u8>> {
        let gw = Arc::clone(&self.gw);
        let req = self.req.as_mut().expect("request in progress");
        let replay = req.replay.as_mut()?;
        let routes = req.routes.as_ref().expect("routed");
        let model = &routes.catalog().models()[req.model];
        let config = &gw.config().reasoning;
        let mode = config.replay_of(model);
        let applied = replay
            .plan
            .apply(&replay.source, mode, config.field_of(endpoint.config()));
        if !replay.counted && mode != ReplayMode::Strip {
            replay.counted = true;
            gw.metrics().reasoning_replayed(&model.id, applied.sources);
            if let Some(t) = req.trace.as_mut() {
                t.note_replay(applied.sources);
            }
        }
        Some(applied.body.unwrap_or_else(|| replay.source.clone()))
    }

    /// Whether the model answering the request replays reasoning: its
    /// answer's reasoning and calls are then kept for the memory.
    pub(super) fn remembers(&self) -> bool {
        let Some(req) = self.req.as_ref() else {
            return false;
        };
        let (Some(routes), Some(_)) = (req.routes.as_ref(), req.key.as_ref()) else {
            return false;
        };
        let config = &self.gw.config().reasoning;
        config
            .replay_of(&routes.catalog().models()[req.model])
            .replays()
            && config.memory.entries > 0
            && !config.memory.ttl.is_zero()
    }

    /// A complete answer's reasoning and calls: remembered under the
    /// request's key and each call's id, here and (with shared limits) in
    /// the shared store.
    pub(super) fn remember_answer(&mut self, now: Instant, answer: Option<AnswerReasoning>) {
        let Some(text) = answer.as_ref().and_then(AnswerReasoning::to_remember) else {
            return;
        };
        if !self.remembers() {
            return;
        }
        let answer = answer.expect("it had a text");
        let req = self.req.as_ref().expect("request in progress");
        let key = req.key.as_ref().map_or("", |k| k.name.as_str());
        let config = &self.gw.config().reasoning;
        self.gw
            .reasoning_memory()
            .remember(key, answer.calls(), &text, now);
        if self.gw.config().shared_limits.is_some() {
            let keys = answer
                .calls()
                .iter()
                .map(|id| crate::reasoning::shared_key(key, id))
                .collect();
            let ttl_ms = config.memory.ttl.as_millis() as u64;
            self.events
                .push_back(Event::Remember(Box::new(Remember { keys, text, ttl_ms })));
        }
    }
}

/// Whether `v` is one JSON string (what the shared store keeps): a value
/// that is not is never spliced into a request.
fn is_json_string(v: &[u8]) -> bool {
    v.first() == Some(&b'"')
        && v.len() <= crate::reasoning::MAX_KEPT_REASONING * 6 + 2
        && crate::json::Cursor::whole(v, crate::json::Cursor::str).is_ok()
}
