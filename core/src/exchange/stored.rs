//! The Responses API's state through the exchange: a request's stored
//! conversation and references read before it is translated, the response
//! kept before its last bytes go out, and the calls on a kept response
//! (`GET`, `DELETE`, `input_items`, `cancel`). What is kept and how ids
//! and items are read is `dialect::responses::stored`; the runtime only
//! reads and writes the records ([`Event::Responses`]).

use super::timers::Timer;
use super::{Connection, Event, Phase};

/// How long a read or a delete of the Responses API's store may take
/// before the request gets a `503`.
const STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
use crate::dialect::responses::stored::{
    self, Page, Stored, StoredResponse, Wants, item_not_found, not_found, owner_of,
    previous_not_found,
};
use crate::error::{ApiError, StoreError};
use crate::time::Instant;

/// What the runtime is asked to do with the Responses API's store
/// ([`Event::Responses`]); it answers with
/// [`Connection::handle_responses`], even if the client has gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreAsk {
    /// Read `key`'s responses: `chain`, with every response before it in
    /// its conversation; and `responses`. Answer [`StoreReply::Read`].
    Read {
        /// The key's name: another key's responses are not there.
        key: String,
        /// A response to read with its conversation.
        chain: Option<String>,
        /// Responses to read alone.
        responses: Vec<String>,
    },
    /// Keep this response (it replaces nothing: its id is new), and make
    /// each response its conversation holds (`ancestors`) last as long.
    /// Answer [`StoreReply::Kept`].
    Keep(Box<StoredResponse>),
    /// Keep this response only if it is still kept (a background run's
    /// later records: one deleted meanwhile stays deleted). Answer
    /// [`StoreReply::Kept`] either way.
    Replace(Box<StoredResponse>),
    /// Forget `key`'s response `id`. Answer [`StoreReply::Deleted`].
    Delete {
        /// The key's name.
        key: String,
        /// The response.
        id: String,
    },
}

/// The store's answer to a [`StoreAsk`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreReply {
    /// What [`StoreAsk::Read`] found of the key's, not expired.
    Read {
        /// The conversation asked for, oldest first, the response asked
        /// for last; those not found are missing (none when it is).
        chain: Vec<StoredResponse>,
        /// The responses asked for alone that were found.
        responses: Vec<StoredResponse>,
        /// The bytes kept for the key.
        key_bytes: u64,
    },
    /// Kept.
    Kept,
    /// Whether there was such a response to forget.
    Deleted(bool),
}

/// A Responses request with the store on: what it needs, what was read
/// for it, and what is kept of it.
#[derive(Debug, Default)]
pub(super) struct Storing {
    pub(super) wants: Wants,
    /// The conversation it continues, oldest first.
    chain: Vec<StoredResponse>,
    /// The responses its references name.
    referenced: Vec<StoredResponse>,
    /// Its input as kept (after translation).
    pub(super) input: Vec<u8>,
    /// The answer's response object, when it is kept.
    pub(super) object: Option<Vec<u8>>,
    /// A background run's events as written, kept with it.
    pub(super) events: Vec<u8>,
    /// A background run's queued response object: what is kept, failed,
    /// when the run ends without an answer.
    pub(super) queued: Option<Vec<u8>>,
}

impl Storing {
    /// The ids of the conversation it continues, oldest first.
    pub(super) fn chain_ids(&self) -> Vec<String> {
        self.chain.iter().map(|r| r.id.clone()).collect()
    }

    /// What the translation takes from the store.
    pub(super) fn stored(&self) -> Stored<'_> {
        let all = || self.chain.iter().chain(&self.referenced);
        Stored {
            context: stored::context(&self.chain),
            items: self
                .wants
                .references
                .iter()
                .filter_map(|id| Some((id.clone(), all().find_map(|r| r.item(id))?)))
                .collect(),
        }
    }

    /// Notes the request's input as kept, from its body (before it is
    /// replaced by the chat request).
    pub(super) fn note_input(&mut self, body: &[u8], request_id: &str) {
        let digits = request_id.trim_start_matches("req_");
        let input = stored::stored_input(body, digits, &self.stored());
        self.input = input;
    }

    /// A response to keep whose input alone is more than the store keeps
    /// for one response: refused before the provider is asked.
    pub(super) fn too_large(&self, max_bytes: u64) -> Option<ApiError> {
        let bytes = self.input.len() as u64;
        (self.wants.store && bytes > max_bytes).then(|| {
            ApiError::invalid_value(
                "input",
                format!(
                    "The input is {}; this gateway keeps responses of at most {}. Send \
                     'store': false, or a shorter input.",
                    bytes_shown(bytes),
                    bytes_shown(max_bytes)
                ),
            )
        })
    }
}

/// A call on a kept response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StoredCall {
    /// `GET /v1/responses/{id}`.
    Retrieve(String),
    /// `DELETE /v1/responses/{id}`.
    Delete(String),
    /// `GET /v1/responses/{id}/input_items`.
    InputItems(String, Page),
    /// `POST /v1/responses/{id}/cancel`: the run stopped where it runs,
    /// then the response read.
    Cancel(String),
    /// `GET /v1/responses/{id}?stream=true`: its events after
    /// `starting_after`, from where it runs, else from the store.
    Resume(String, Option<u64>),
    /// A background request's queued response, being kept: then answered
    /// (or, `follow`, the run's events streamed).
    Queued {
        /// The queued response object.
        object: Vec<u8>,
        /// The client asked to stream.
        follow: bool,
    },
    /// Following a run's events: its id, and the last sequence number
    /// handed to the client.
    Following(String, Option<u64>),
    /// A run being kept `in_progress` before its provider is asked.
    Starting,
}

impl Connection {
    /// Refuses the request before the provider is asked: its model and
    /// stream read for its ledger line, then the error.
    fn refuse_request(&mut self, now: Instant, e: ApiError) {
        if let Some(req) = self.req.as_mut() {
            req.peeked = Some(crate::validate::peek_model_and_stream(&req.body));
        }
        self.respond_error(now, e, false);
    }

    /// The name of the key the request authenticated with.
    pub(super) fn key_name(&self) -> String {
        self.req
            .as_ref()
            .and_then(|r| r.key.as_ref())
            .map_or(String::new(), |k| k.name.clone())
    }

    /// Asks the store for the key's response `id`, alone.
    pub(super) fn read_response(&mut self, now: Instant, id: String) {
        let key = self.key_name();
        self.ask_store(
            now,
            StoreAsk::Read {
                key,
                chain: None,
                responses: vec![id],
            },
        );
    }

    /// Asks the store a read or a delete for the request, within
    /// [`STORE_TIMEOUT`].
    fn ask_store(&mut self, now: Instant, ask: StoreAsk) {
        self.phase = Phase::Resolving;
        self.timers.set(Timer::Store, now + STORE_TIMEOUT);
        self.events.push_back(Event::Responses(Box::new(ask)));
    }

    /// The store did not answer in time: `503`, the request not sent.
    pub(super) fn store_overdue(&mut self, now: Instant) {
        let call = self.req.as_mut().and_then(|r| r.call.take());
        if matches!(
            call,
            Some(StoredCall::Queued { .. } | StoredCall::Starting | StoredCall::Following(..))
        ) {
            // Writes of runs are waited for; a follower, as long as the run.
            if let Some(r) = self.req.as_mut() {
                r.call = call;
            }
            return;
        }
        tracing::warn!("the responses store did not answer in time");
        let e = ApiError::overloaded("The responses store did not answer in time; retry shortly.");
        self.refuse_request(now, e);
    }

    /// A Responses request with the store on: what it needs read is asked
    /// for ([`Event::Responses`]; true: the request waits for
    /// [`Connection::handle_responses`], or was answered with an error).
    /// False when it goes on to its translation at once.
    pub(super) fn read_stored(&mut self, now: Instant) -> bool {
        if self.gw.config().responses_kept.is_none() {
            return false;
        }
        let req = self.req.as_mut().expect("request in progress");
        if req
            .dialect
            .as_deref_mut()
            .and_then(|d| d.responses())
            .is_none()
        {
            return false;
        }
        let wants = match stored::wants(&req.body) {
            Ok(w) => w,
            Err(e) => {
                self.refuse_request(now, e);
                return true;
            }
        };
        let mut responses = Vec::new();
        for id in &wants.references {
            match owner_of(id) {
                Some(owner) if !responses.contains(&owner) => responses.push(owner),
                Some(_) => {}
                None => {
                    let e = item_not_found(id);
                    self.refuse_request(now, e);
                    return true;
                }
            }
        }
        let ask = wants.store || wants.previous.is_some() || !responses.is_empty();
        let key = req.key.as_ref().map_or("", |k| k.name.as_str()).to_owned();
        let chain = wants.previous.clone();
        req.storing = Some(Box::new(Storing {
            wants,
            ..Storing::default()
        }));
        if !ask {
            return false;
        }
        self.ask_store(
            now,
            StoreAsk::Read {
                key,
                chain,
                responses,
            },
        );
        true
    }

    /// The store answered [`Event::Responses`].
    pub fn handle_responses(&mut self, now: Instant, reply: Result<StoreReply, StoreError>) {
        self.timers.stop(Timer::Store);
        if self.awaiting_store {
            self.awaiting_store = false;
            if let Err(e) = &reply {
                tracing::error!(
                    request_id = self.req.as_ref().map_or("", |r| r.id.as_str()),
                    error = %e,
                    "the response could not be kept: it was answered, and cannot be retrieved or continued"
                );
                self.gw.metrics().responses_store_failed();
            }
            self.release_held(now);
            return;
        }
        if self.phase == Phase::Closed && self.runs_to_start.is_some() {
            // Its client left while the queued response was being kept.
            match reply {
                Ok(StoreReply::Kept) => {
                    let run = self.runs_to_start.take().expect("checked");
                    self.events.push_back(Event::Background(run));
                }
                other => self.give_back_run(now, &format!("{other:?}")),
            }
            return self.after(now);
        }
        if self.phase != Phase::Resolving {
            self.after(now);
            return;
        }
        let call = self.req.as_mut().and_then(|r| r.call.take());
        match call {
            Some(call) => self.answer_call(now, call, reply),
            None => self.resolved(now, reply),
        }
        self.after(now);
    }

    /// A request's stored conversation and references arrived: checked,
    /// then the request goes on to its translation.
    fn resolved(&mut self, now: Instant, reply: Result<StoreReply, StoreError>) {
        let keeping = self.gw.config().responses_kept.unwrap_or_default();
        let req = self.req.as_mut().expect("request in progress");
        let key = req.key.as_ref().map_or("", |k| k.name.as_str()).to_owned();
        let storing = req.storing.as_mut().expect("asked for it");
        let (chain, responses, key_bytes) = match reply {
            Ok(StoreReply::Read {
                chain,
                responses,
                key_bytes,
            }) => (chain, responses, key_bytes),
            Ok(_) | Err(_) => {
                let why = match reply {
                    Err(e) => e.to_string(),
                    Ok(_) => "it answered something else".into(),
                };
                tracing::warn!(error = %why, "the responses store could not be read");
                let e = ApiError::overloaded("The responses store cannot be read; retry shortly.");
                return self.refuse_request(now, e);
            }
        };
        let mine = |r: &StoredResponse| r.key == key;
        let refused = if let Some(previous) = &storing.wants.previous {
            whole_chain(previous, &chain, &key).err()
        } else {
            None
        };
        storing.chain = chain.into_iter().filter(mine).collect();
        storing.referenced = responses.into_iter().filter(mine).collect();
        let missing = storing.wants.references.iter().find(|id| {
            !storing
                .chain
                .iter()
                .chain(&storing.referenced)
                .any(|r| r.item(id).is_some())
        });
        let refused = refused.or_else(|| missing.map(|id| item_not_found(id)));
        let refused = refused.or_else(|| {
            (storing.wants.store && key_bytes >= keeping.key_max_bytes).then(|| {
                ApiError::invalid_value(
                    "store",
                    format!(
                        "This key keeps {} of responses, its cap: delete some (DELETE \
                         /v1/responses/{{id}}), let them expire, or send 'store': false.",
                        bytes_shown(key_bytes)
                    ),
                )
            })
        });
        if let Some(e) = refused {
            return self.refuse_request(now, e);
        }
        self.translate_chat(now);
    }

    /// The record of a kept response for the ledger's request: queued
    /// ([`StoreAsk::Keep`]) before its ledger line, its last bytes held
    /// until both are written. The record names it.
    pub(super) fn keep_response(&mut self, now: Instant, rec: &mut crate::ledger::LedgerRecord) {
        let Some(keeping) = self.gw.config().responses_kept else {
            return;
        };
        let wall = self.gw.wall();
        let Some(req) = self.req.as_mut() else { return };
        let Some(storing) = req.storing.as_mut() else {
            return;
        };
        let object = storing.object.take().or_else(|| {
            // A run that ended without an answer (the provider refused, or
            // failed before streaming): its queued response, failed.
            let queued = storing.queued.as_ref()?;
            let why = format!(
                "The background response failed before it was answered ({}).",
                rec.error.as_deref().unwrap_or("no answer")
            );
            Some(stored::with_status(queued, "failed", Some(&why)))
        });
        let Some(object) = object.filter(|_| storing.wants.store) else {
            return;
        };
        let ancestors = storing.chain.iter().map(|r| r.id.clone()).collect();
        let record = StoredResponse {
            id: stored::response_id(&req.id),
            key: rec.key.clone(),
            created_at: wall.unix_secs(req.started),
            expires_at: wall.unix_secs(now).saturating_add(keeping.ttl.as_secs()),
            previous: storing.wants.previous.clone(),
            ancestors,
            input: std::mem::take(&mut storing.input),
            object,
            events: std::mem::take(&mut storing.events),
        };
        let mut record = record;
        let run = storing.queued.is_some();
        if record.bytes() > keeping.max_bytes {
            tracing::warn!(
                request_id = %req.id,
                bytes = record.bytes(),
                cap = keeping.max_bytes,
                "the response is larger than the responses store keeps (--responses-max-bytes): answered, not kept"
            );
            self.gw.metrics().responses_store_failed();
            let Some(queued) = storing.queued.as_ref() else {
                return;
            };
            // A run's record must say it ended: failed, without its output.
            let why = "The background response was larger than this gateway keeps; it was \
                       answered to the clients that followed it, and not kept.";
            record.object = stored::with_status(queued, "failed", Some(why));
            record.events.clear();
        }
        rec.response_id = Some(record.id.clone());
        // A run's later records replace its queued one, and never bring
        // back one that was deleted meanwhile.
        let ask = if run {
            StoreAsk::Replace(Box::new(record))
        } else {
            StoreAsk::Keep(Box::new(record))
        };
        self.events.push_back(Event::Responses(Box::new(ask)));
        self.awaiting_store = true;
    }

    /// A call on a kept response, authenticated: what it needs is asked of
    /// the store.
    pub(super) fn start_stored_call(&mut self, now: Instant, call: StoredCall) {
        let req = self.req.as_mut().expect("request in progress");
        let key = req.key.as_ref().map_or("", |k| k.name.as_str()).to_owned();
        let ask = match &call {
            StoredCall::Cancel(id) => {
                // Stopped where it runs first; then read.
                let id = id.clone();
                req.call = Some(call);
                self.phase = Phase::Resolving;
                self.events
                    .push_back(Event::Cancel(Box::new(super::background::Follow {
                        id,
                        key,
                        after: None,
                    })));
                return;
            }
            StoredCall::Resume(id, after) => {
                let follow = super::background::Follow {
                    id: id.clone(),
                    key,
                    after: *after,
                };
                req.call = Some(call);
                self.phase = Phase::Resolving;
                self.events.push_back(Event::Follow(Box::new(follow)));
                return;
            }
            StoredCall::Retrieve(id) => StoreAsk::Read {
                key,
                chain: None,
                responses: vec![id.clone()],
            },
            StoredCall::InputItems(id, _) => StoreAsk::Read {
                key,
                chain: Some(id.clone()),
                responses: Vec::new(),
            },
            StoredCall::Delete(id) => StoreAsk::Delete {
                key,
                id: id.clone(),
            },
            StoredCall::Queued { .. } | StoredCall::Following(..) | StoredCall::Starting => {
                unreachable!("not a call a client makes")
            }
        };
        req.call = Some(call);
        self.ask_store(now, ask);
    }

    /// The store answered a call on a kept response.
    fn answer_call(
        &mut self,
        now: Instant,
        call: StoredCall,
        reply: Result<StoreReply, StoreError>,
    ) {
        let key = self
            .req
            .as_ref()
            .and_then(|r| r.key.as_ref())
            .map_or(String::new(), |k| k.name.clone());
        if call == StoredCall::Starting {
            if let Err(e) = &reply {
                tracing::warn!(error = %e, "a background run could not be kept in progress; it runs");
            }
            return self.run_started(now);
        }
        if let StoredCall::Queued { object, follow } = &call {
            return match reply {
                Ok(StoreReply::Kept) => self.queued_kept(now, object, *follow),
                Ok(other) => self.queued_not_kept(now, &format!("{other:?}")),
                Err(e) => self.queued_not_kept(now, &e.to_string()),
            };
        }
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "the responses store could not be read");
                let e = ApiError::overloaded("The responses store cannot be read; retry shortly.");
                return self.respond_error(now, e, true);
            }
        };
        let found = |list: Vec<StoredResponse>, id: &str| {
            list.into_iter().find(|r| r.id == id && r.key == key)
        };
        let answer = match (call, reply) {
            (StoredCall::Retrieve(id), StoreReply::Read { responses, .. }) => found(responses, &id)
                .map(|r| r.object)
                .ok_or_else(|| not_found(&id)),
            (StoredCall::Cancel(id), StoreReply::Read { responses, .. }) => {
                match found(responses, &id) {
                    // Cancelled here (it ended before the answer), or ended
                    // before: as it is.
                    Some(r) if !r.events.is_empty() || r.is_background() => {
                        if stored::is_running(&r.status()) {
                            Err(running_elsewhere(&id))
                        } else {
                            Ok(r.object)
                        }
                    }
                    Some(_) => Err(ApiError::invalid_value(
                        "response_id",
                        "Only responses created with background=true can be cancelled.",
                    )),
                    None => Err(not_found(&id)),
                }
            }
            (StoredCall::Resume(id, after), StoreReply::Read { responses, .. }) => {
                match found(responses, &id) {
                    Some(r)
                        if (!r.events.is_empty() || r.is_background())
                            && !stored::is_running(&r.status()) =>
                    {
                        // Ended: the store has all of it (a run that ended
                        // before any event, its last event alone).
                        let events = if r.events.is_empty() {
                            stored::terminal_event(
                                &r.object,
                                &r.status(),
                                after.map_or(0, |a| a + 1),
                            )
                        } else {
                            stored::events_after(&r.events, after)
                        };
                        self.follow_head(now, id, after);
                        return self.handle_run_events(
                            now,
                            super::background::RunEvents::Events(events, true),
                        );
                    }
                    Some(r) if r.is_background() => Err(running_elsewhere(&id)),
                    Some(_) => Err(ApiError::invalid_value(
                        "stream",
                        "Only responses created with background=true can be streamed again.",
                    )),
                    None => Err(not_found(&id)),
                }
            }
            (StoredCall::InputItems(id, page), StoreReply::Read { chain, .. }) => {
                match whole_chain(&id, &chain, &key) {
                    Ok(()) => {
                        let (last, before) = chain.split_last().expect("checked whole");
                        let mut items = stored::context(before);
                        items.extend(last.input_items());
                        Ok(page.body(&items))
                    }
                    Err(_) if chain.last().is_some_and(|r| r.id == id && r.key == key) => {
                        // Its conversation is gone in part: what it has.
                        let last = chain.last().expect("checked");
                        Ok(page.body(&last.input_items()))
                    }
                    Err(_) => Err(not_found(&id)),
                }
            }
            (StoredCall::Delete(id), StoreReply::Deleted(true)) => Ok(stored::deleted_body(&id)),
            (StoredCall::Delete(id), StoreReply::Deleted(false)) => Err(not_found(&id)),
            (call, _) => {
                tracing::error!(?call, "the responses store answered another question");
                Err(ApiError::overloaded(
                    "The responses store answered wrongly; retry shortly.",
                ))
            }
        };
        match answer {
            Ok(body) => self.respond_json(now, &body),
            Err(e) => self.respond_error(now, e, true),
        }
    }
}

/// Whether `chain` is the whole conversation of `id` (oldest first, `id`
/// last, every response before it there, all `key`'s); the error says
/// what is missing.
fn whole_chain(id: &str, chain: &[StoredResponse], key: &str) -> Result<(), ApiError> {
    let Some(last) = chain.last().filter(|r| r.id == id && r.key == key) else {
        return Err(previous_not_found(id));
    };
    let before = &chain[..chain.len() - 1];
    let whole = before.len() == last.ancestors.len()
        && before
            .iter()
            .zip(&last.ancestors)
            .all(|(r, a)| &r.id == a && r.key == key);
    if whole {
        return Ok(());
    }
    let gone = last
        .ancestors
        .iter()
        .find(|a| !before.iter().any(|r| &r.id == *a))
        .cloned()
        .unwrap_or_default();
    let mut e = previous_not_found(id);
    let id: String = id.chars().take(128).collect();
    e.message = format!(
        "Previous response with id '{id}' cannot be continued: response '{gone}' of its \
         conversation was deleted or has expired."
    );
    Err(e)
}

/// A background run that is not running here and has not ended.
fn running_elsewhere(id: &str) -> ApiError {
    let id: String = id.chars().take(128).collect();
    ApiError::invalid_value(
        "response_id",
        format!(
            "Response '{id}' is running on another instance of the gateway: poll it (GET without \
             stream) until it ends, or send this request to the instance running it."
        ),
    )
}

/// Bytes as a person reads them.
fn bytes_shown(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30)),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20)),
        n => format!("{n} bytes"),
    }
}
