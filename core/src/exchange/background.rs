//! Background runs (`background: true`, with the store on). The request is
//! read, resolved, translated, validated and admitted on its client's
//! connection as any other; then it leaves it: a connection of its own
//! (a run, [`Event::Background`]) carries the admitted request — its
//! reservation, its in-flight place, its ledger line and its kept response
//! go with it — and the runtime drives that run with no client but a
//! recorder of its events. The client's connection answers the `queued`
//! response at once (kept before it is sent), or, asked to stream, follows
//! the run's events ([`Event::Follow`]) as any client re-attaching with
//! `GET /v1/responses/{id}?stream=true&starting_after=N` does.
//!
//! A run's client going away is its cancellation: the runtime cancels a
//! run by closing the recorder's end, and the run keeps its response as
//! `cancelled` with the items it had.

use std::sync::Arc;

use super::request::Request;
use super::respond::common_headers;
use super::stored::{StoreAsk, StoredCall};
use super::timers::Timer;
use super::{Connection, Event, Phase};
use crate::dialect::responses::events;
use crate::dialect::responses::stored::{self, StoredResponse};
use crate::dialect::{Carry, Opening};
use crate::error::ApiError;
use crate::http::write::{self, header};
use crate::time::Instant;

/// A run handed to the runtime ([`Event::Background`]): drive `conn` as a
/// connection whose client is a recorder of what it writes (an HTTP
/// response: a stream of Responses events), then call
/// [`Connection::start_run`].
#[derive(Debug)]
pub struct Run {
    /// The response it answers (`resp_…`).
    pub id: String,
    /// The name of the key that made it.
    pub key: String,
    /// The connection that carries it.
    pub conn: Box<Connection>,
}

/// Follow a run's events ([`Event::Follow`]): hand them to
/// [`Connection::handle_run_events`] as they come, each after `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Follow {
    /// The response (`resp_…`).
    pub id: String,
    /// The name of the key asking: another key's run is not there.
    pub key: String,
    /// The last sequence number the client has (`None`: from the first).
    pub after: Option<u64>,
}

/// What the runtime has of a run a connection follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEvents {
    /// Events after the last ones handed over, each an SSE event as the
    /// run wrote it (`event: …\ndata: {…}\n\n`), and whether the run
    /// ended with them.
    Events(Vec<u8>, bool),
    /// No run of that id and key is running here.
    NotHere,
}

impl Connection {
    /// Whether the admitted request is a background run.
    pub(super) fn is_background(&self) -> bool {
        self.req
            .as_ref()
            .and_then(|r| r.storing.as_ref())
            .is_some_and(|s| s.wants.background)
    }

    /// The admitted background request leaves this connection for a run of
    /// its own; its `queued` response is kept first, then answered (or
    /// followed).
    pub(super) fn detach_run(&mut self, now: Instant) {
        let gw = Arc::clone(&self.gw);
        let mut req = self.req.take().expect("request in progress");
        let unix = gw.wall().unix_secs(now);
        let carry = Carry::new(Arc::clone(gw.reasoning_seal()));
        let Some(responses) = req.dialect.as_deref_mut().and_then(|d| d.responses()) else {
            unreachable!("a background request is a Responses request");
        };
        let queued = events::queued(responses.asked.clone(), &req.id, unix, carry);
        let storing = req.storing.as_mut().expect("a background request is kept");
        let follow = storing.wants.stream;
        storing.queued = Some(queued.clone());
        let record = run_record(&gw, &req, unix, queued.clone());
        // What this connection still answers with: the request without
        // what went to the run (not metered here: the run is).
        let mut answer = Box::new(Request::answering(&req));
        answer.call = Some(StoredCall::Queued {
            object: queued,
            follow,
        });
        req.keep_alive = false;
        self.runs_to_start = Some(Box::new(Run {
            id: record.id.clone(),
            key: record.key.clone(),
            conn: Connection::run(&gw, req, now),
        }));
        self.req = Some(answer);
        self.phase = Phase::Resolving;
        self.events
            .push_back(Event::Responses(Box::new(StoreAsk::Keep(Box::new(record)))));
    }

    /// The queued response is kept: the run starts, and the client gets
    /// the queued response, or the run's events.
    pub(super) fn queued_kept(&mut self, now: Instant, object: &[u8], follow: bool) {
        if let Some(run) = self.runs_to_start.take() {
            self.events.push_back(Event::Background(run));
        }
        if !follow {
            return self.respond_json(now, object);
        }
        let req = self.req.as_ref().expect("request in progress");
        let id = stored::response_id(&req.id);
        let key = req.key.as_ref().map_or(String::new(), |k| k.name.clone());
        self.follow_run(
            now,
            Follow {
                id,
                key,
                after: None,
            },
        );
    }

    /// The queued response could not be kept: the run is dropped before it
    /// started (its reservation given back, a ledger line saying so), and
    /// the client told.
    pub(super) fn queued_not_kept(&mut self, now: Instant, why: &str) {
        self.give_back_run(now, why);
        let e = ApiError::overloaded("The responses store cannot be written; retry shortly.");
        self.respond_error(now, e, false);
    }

    /// The run made here will not start: it is metered as abandoned (its
    /// reservation given back), by the runtime carrying out its events as
    /// for any run.
    pub(super) fn give_back_run(&mut self, now: Instant, why: &str) {
        if let Some(mut run) = self.runs_to_start.take() {
            tracing::warn!(
                error = why,
                "a background response could not be kept: it was not started"
            );
            run.conn.abandon_run(now);
            self.events.push_back(Event::Background(run));
        }
    }

    /// Follows a run: its events as they come, in one streamed answer.
    pub(super) fn follow_run(&mut self, now: Instant, follow: Follow) {
        self.follow_head(now, follow.id.clone(), follow.after);
        self.events.push_back(Event::Follow(Box::new(follow)));
    }

    /// The head of a streamed answer of a run's events.
    pub(super) fn follow_head(&mut self, now: Instant, id: String, after: Option<u64>) {
        // An HTTP/1.0 stream ends where the connection does.
        let close = self.closing_after_this() || self.req.as_ref().is_some_and(|r| r.http10);
        let req = self.req.as_mut().expect("request in progress");
        req.call = Some(StoredCall::Following(id, after));
        let mut out = Vec::with_capacity(256);
        write::status_line(&mut out, 200);
        common_headers(&mut out, &req.id, self.gw.wall().unix_secs(now), close);
        header(&mut out, "Content-Type", "text/event-stream");
        header(&mut out, "Cache-Control", "no-cache");
        if req.http10 {
            self.close_after = true;
        } else {
            header(&mut out, "Transfer-Encoding", "chunked");
        }
        write::end_head(&mut out);
        self.push_client(now, &out);
        self.phase = Phase::Following;
    }

    /// The runtime has events of the run this connection follows (or asked
    /// for, re-attaching).
    pub fn handle_run_events(&mut self, now: Instant, events: RunEvents) {
        let resuming = match self.req.as_ref().and_then(|r| r.call.as_ref()) {
            Some(StoredCall::Resume(id, after)) if self.phase == Phase::Resolving => {
                Some((id.clone(), *after))
            }
            _ => None,
        };
        if let Some((id, after)) = resuming {
            if events == RunEvents::NotHere {
                // Not running here: the store has it, or nobody.
                self.read_response(now, id);
                return self.after(now);
            }
            self.follow_head(now, id, after);
        }
        if self.phase != Phase::Following {
            return self.after(now);
        }
        let chunked = !self.req.as_ref().is_some_and(|r| r.http10);
        let mut out = Vec::new();
        let done = match events {
            RunEvents::Events(bytes, done) => {
                if !bytes.is_empty() {
                    if chunked {
                        write::chunk(&mut out, &bytes);
                    } else {
                        out.extend_from_slice(&bytes);
                    }
                    let last = stored::split_events(&bytes)
                        .last()
                        .and_then(|e| stored::sequence_number(e));
                    if let Some(Some(StoredCall::Following(_, after))) =
                        self.req.as_mut().map(|r| r.call.as_mut())
                    {
                        *after = last.or(*after);
                    }
                }
                done
            }
            RunEvents::NotHere => true,
        };
        if done && chunked {
            write::last_chunk(&mut out);
        }
        self.push_client(now, &out);
        if done {
            self.access_log(now, 200, None);
            let close = self.closing_after_this();
            self.end_response(close);
        } else {
            // The next events, when they come.
            let req = self.req.as_ref().expect("request in progress");
            if let Some(StoredCall::Following(id, after)) = &req.call {
                let key = req.key.as_ref().map_or(String::new(), |k| k.name.clone());
                self.events.push_back(Event::Follow(Box::new(Follow {
                    id: id.clone(),
                    key,
                    after: *after,
                })));
            }
        }
        self.after(now);
    }

    /// The runtime stopped the run a cancel names where it ran (or it was
    /// not running here): the response is read, as it is now.
    pub fn handle_cancelled(&mut self, now: Instant) {
        let id = match self.req.as_ref().and_then(|r| r.call.as_ref()) {
            Some(StoredCall::Cancel(id)) if self.phase == Phase::Resolving => id.clone(),
            _ => return self.after(now),
        };
        self.read_response(now, id);
        self.after(now);
    }

    /// A run: the admitted request `req`, on a connection of its own.
    fn run(gw: &Arc<crate::gateway::Gateway>, req: Box<Request>, now: Instant) -> Box<Connection> {
        let mut c = Connection::blank(gw);
        gw.connection_opened_anyway();
        c.req = Some(req);
        c.close_after = true;
        c.is_run = true;
        c.phase = Phase::Admitting;
        c.timers.stop(Timer::ClientIdle);
        let _ = now;
        c
    }

    /// The runtime drives this run now (after [`Event::Background`]): it is
    /// kept `in_progress` (what a poll reads while it runs), then the
    /// provider is asked.
    pub fn start_run(&mut self, now: Instant) {
        if !self.is_run || self.phase != Phase::Admitting {
            return self.after(now);
        }
        let gw = Arc::clone(&self.gw);
        let req = self.req.as_mut().expect("a run's request");
        let queued = req.storing.as_ref().and_then(|s| s.queued.clone());
        let Some(queued) = queued else {
            return self.start_upstream(now);
        };
        let object = stored::with_status(&queued, "in_progress", None);
        let record = run_record(&gw, req, gw.wall().unix_secs(now), object);
        req.call = Some(StoredCall::Starting);
        self.phase = Phase::Resolving;
        self.events
            .push_back(Event::Responses(Box::new(StoreAsk::Replace(Box::new(
                record,
            )))));
        self.after(now);
    }

    /// The run is kept `in_progress` (or could not be: it runs anyway, its
    /// end is kept as usual): the provider is asked.
    pub(super) fn run_started(&mut self, now: Instant) {
        self.start_upstream(now);
    }

    /// A run that will not start: its admission given back and metered as
    /// abandoned.
    fn abandon_run(&mut self, now: Instant) {
        self.record_abandoned(now);
        self.close();
    }

    /// A run's recorder closed before the provider was asked: kept
    /// `cancelled`, metered as abandoned.
    pub(super) fn cancel_run_before_start(&mut self, now: Instant) {
        let object = self
            .req
            .as_ref()
            .and_then(|r| r.storing.as_ref())
            .and_then(|s| s.queued.as_deref())
            .map(|q| stored::with_status(q, "cancelled", None));
        if let Some(s) = self.req.as_mut().and_then(|r| r.storing.as_mut()) {
            s.object = object;
        }
        self.cancelled = true;
        self.record_abandoned(now);
    }

    /// A run's recorder closed: the run is cancelled. The provider is
    /// aborted; the response is kept `cancelled`, with what it had.
    pub(super) fn cancel_run(&mut self, now: Instant) {
        let usage = self.up.as_ref().and_then(|u| u.tracker.usage());
        let carry = Carry::new(Arc::clone(self.gw.reasoning_seal()));
        let unix = self
            .req
            .as_ref()
            .map_or(0, |r| self.gw.wall().unix_secs(r.started));
        let object = self.req.as_mut().and_then(|req| {
            let opening = Opening {
                request_id: &req.id,
                unix,
                carry: &carry,
            };
            let responses = req.dialect.as_deref_mut()?.responses()?;
            Some(responses.cancelled(&opening, usage.as_ref()))
        });
        if let Some(s) = self.req.as_mut().and_then(|r| r.storing.as_mut()) {
            s.object = object;
        }
        self.cancelled = true;
        self.client_gone(now);
    }
}

/// A run's record with `object` at `unix`: its id, key, conversation and
/// input as the request has them.
fn run_record(
    gw: &crate::gateway::Gateway,
    req: &Request,
    unix: u64,
    object: Vec<u8>,
) -> StoredResponse {
    let keeping = gw.config().responses_kept.unwrap_or_default();
    let storing = req.storing.as_ref().expect("a background request is kept");
    StoredResponse {
        id: stored::response_id(&req.id),
        key: req.key.as_ref().map_or(String::new(), |k| k.name.clone()),
        created_at: gw.wall().unix_secs(req.started),
        expires_at: unix.saturating_add(keeping.ttl.as_secs()),
        previous: storing.wants.previous.clone(),
        ancestors: storing.chain_ids(),
        input: storing.input.clone(),
        object,
        events: Vec::new(),
    }
}
