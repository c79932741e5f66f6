//! The exchange: one client connection, from its first byte to its close.
//!
//! [`Connection`] makes every protocol decision of the gateway; the runtime
//! only moves bytes and keeps time. It feeds inputs with `handle_*` and
//! obeys what `poll_*` hands back:
//!
//! - client bytes, EOF, bytes written → [`Connection::handle_client_data`],
//!   [`Connection::handle_client_eof`], [`Connection::handle_client_written`];
//! - provider connection ready, bytes, EOF, failure →
//!   [`Connection::handle_upstream_connected`], …;
//! - the shared limiter's verdict → [`Connection::handle_admission`];
//! - the ledger line appended, or not → [`Connection::handle_ledger_written`];
//! - a deadline passed → [`Connection::handle_timeout`].
//!
//! Outputs: [`Connection::poll_event`] (connect or release or close the
//! provider connection, append a ledger line, ask or settle with the shared
//! limiter, close the client), [`Connection::poll_client_transmit`] and
//! [`Connection::poll_upstream_transmit`] (bytes to write), and
//! [`Connection::poll_timeout`].
//!
//! Ordering is enforced, not documented: bytes that complete a metered
//! response are held back until the runtime confirms the ledger line was
//! appended, so a response that reached the client in full always has its
//! line (if the append fails, they are never sent); [`Event::CloseClient`]
//! is only emitted once every byte was written and the shared limiter has
//! answered any [`Event::Admit`]; the provider connection is released or
//! closed before the next one is asked for.
//!
//! # Rooms
//!
//! One file per job, all of them methods of [`Connection`]:
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the public surface: events, inputs, outputs, and moving from one request to the next |
//! | `request.rs` | client HTTP: request heads and bodies, routing, authentication, the model list |
//! | `admission.rs` | rate limits: admitting a request (locally or through the shared limiter) and settling it |
//! | `failover.rs` | attempts: the endpoint each goes to, the request as it is sent it, and whether a failed one is tried elsewhere |
//! | `upstream.rs` | the provider connection: connecting, its response head, failures, timeouts, the leftover after `[DONE]` |
//! | `forward.rs` | the provider's answer to the client: a whole body, or events as they come |
//! | `ending.rs` | how a provider's stream ends for the client: a cut stream's last event and `[DONE]`, the ledger line first, unless a continuation finishes it |
//! | `resume.rs` | a stream cut mid-answer finished by a continuation on an endpoint that continues (`--stream-resume`): when, where, a refused prefix restarted, the attempts metered together |
//! | `keepalive.rs` | the first-event keep-alive: a silent stream committed early and kept alive until its first event, and how it fails after |
//! | `metering.rs` | the ledger record, metrics and access lines |
//! | `reasoning.rs` | reasoning through the tool loop: replayed into the request, remembered from the answer |
//! | `background.rs` | background runs: the admitted request handed to a connection of its own, the queued answer, following a run's events, cancelling it |
//! | `stored.rs` | the Responses API's state: a request's conversation read, its response kept, the calls on a kept response |
//! | `spans.rs` | the request's trace: its server span and a client span per attempt |
//! | `respond.rs` | response heads and error responses |
//! | `timers.rs` | every deadline, in one table |

mod admission;
mod background;
mod ending;
mod failover;
mod forward;
mod keepalive;
mod metering;
mod reasoning;
mod request;
mod respond;
mod resume;
mod spans;
mod stored;
mod timers;
mod upstream;

use std::collections::VecDeque;
use std::sync::Arc;

use crate::auth::KeyTable;
use crate::endpoints::Endpoint;
use crate::error::{ApiError, UpstreamFault};
use crate::gateway::Gateway;
use crate::http::HeadScanner;
use crate::ledger::LedgerRecord;
use crate::time::Instant;

pub use admission::{AdmitRequest, Refusal, Settlement, SharedAdmission};
pub use background::{Follow, Run, RunEvents};
pub use reasoning::{Recall, Remember};
use request::Request;
pub use stored::{StoreAsk, StoreReply};
use timers::{Timer, TimerTable};
use upstream::{Leftover, UpState, Upstream};

/// Something the runtime must do, in order.
#[derive(Debug)]
pub enum Event {
    /// Get a connection to this provider endpoint: an idle one from its
    /// pool, unless `fresh`, or a new one. Then call
    /// [`Connection::handle_upstream_connected`] (or
    /// [`Connection::handle_upstream_failure`]). The release or close that
    /// follows concerns this endpoint's connection.
    ConnectUpstream {
        /// The endpoint (each has its own pool).
        endpoint: Arc<Endpoint>,
        /// A pooled connection failed before answering; use a new one.
        fresh: bool,
    },
    /// The provider's response is complete and its connection can carry
    /// another request: return it to the pool.
    ///
    /// A stream whose `[DONE]` came before the end of its chunked body is
    /// over for the client at once (ledger line, last bytes), but its
    /// connection is kept and read a moment longer for that end (its
    /// leftover): this event (or [`Event::CloseUpstream`]) then comes
    /// later, possibly while the next request is read. It always comes
    /// before the next [`Event::ConnectUpstream`] and before
    /// [`Event::CloseClient`]: the runtime holds at most one provider
    /// connection per client connection.
    ReleaseUpstream,
    /// Close the provider connection now (this aborts generation).
    CloseUpstream,
    /// Append this record's line ([`LedgerRecord::to_line`]) to the ledger,
    /// then call [`Connection::handle_ledger_written`] saying whether it
    /// was appended. The request's access log line is this record's too
    /// ([`LedgerRecord::access_fields`]): core logs none for it.
    Ledger(Box<LedgerRecord>),
    /// Everything has been written (and any admission answered); close the
    /// client connection.
    CloseClient,
    /// Ask the shared limiter (with shared limits configured) to admit this
    /// request; then call [`Connection::handle_admission`] with its answer,
    /// or with why it could not be asked, even if the client has gone
    /// meanwhile (a granted reservation is then given back). A runtime
    /// without a shared limiter answers [`SharedAdmission::Unavailable`]
    /// ([`crate::StoreError::NotConfigured`]): the configured fallback
    /// applies.
    Admit(Box<AdmitRequest>),
    /// Tell the shared limiter what a request used of its reservation, then
    /// hand its outcome to [`Settlement::finish`] (nothing goes back to the
    /// connection). A runtime without a shared limiter hands over
    /// `Err(StoreError::NotConfigured)`.
    Settle(Box<Settlement>),
    /// Read these keys of the shared reasoning memory (Redis, with shared
    /// limits only), then call [`Connection::handle_recall`] with their
    /// values, or with why they could not be read, even if the client has
    /// gone meanwhile.
    Recall(Recall),
    /// Keep this reasoning in the shared reasoning memory (with shared
    /// limits only); nothing goes back to the connection.
    Remember(Box<Remember>),
    /// Read or write the Responses API's store, then call
    /// [`Connection::handle_responses`] with its answer, even if the
    /// client has gone meanwhile. A response to keep comes before its
    /// ledger line; its last bytes wait for both.
    Responses(Box<StoreAsk>),
    /// Drive this background run as a connection of its own, its client a
    /// recorder of its events that followers read; then call
    /// [`Connection::start_run`] on it. Closing the recorder's end cancels
    /// it.
    Background(Box<Run>),
    /// Hand this connection the events of the run it follows with
    /// [`Connection::handle_run_events`] as they come, until the run ends
    /// ([`RunEvents::NotHere`] when it does not run here).
    Follow(Box<Follow>),
    /// Cancel the run it names if it runs here (closing its recorder), wait
    /// for it to end, then call [`Connection::handle_cancelled`].
    Cancel(Box<Follow>),
}

/// Why the provider connection failed (the runtime maps its I/O errors here).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamFailure {
    /// The host name did not resolve.
    Resolve(String),
    /// The TCP connection could not be made.
    Connect(String),
    /// The TLS handshake or certificate verification failed.
    Tls(String),
    /// Reading or writing failed (reset, broken pipe, …).
    Broken(String),
}

impl UpstreamFailure {
    /// Its kind, for the ledger.
    pub fn fault(&self) -> UpstreamFault {
        match self {
            UpstreamFailure::Resolve(_) => UpstreamFault::Dns,
            UpstreamFailure::Connect(_) => UpstreamFault::Connect,
            UpstreamFailure::Tls(_) => UpstreamFault::Tls,
            UpstreamFailure::Broken(_) => UpstreamFault::Reset,
        }
    }
}

impl std::fmt::Display for UpstreamFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamFailure::Resolve(m) => write!(f, "could not resolve the provider's host: {m}"),
            UpstreamFailure::Connect(m) => write!(f, "could not connect to the provider: {m}"),
            UpstreamFailure::Tls(m) => write!(f, "TLS with the provider failed: {m}"),
            UpstreamFailure::Broken(m) => write!(f, "the provider connection failed: {m}"),
        }
    }
}

/// Whether a new client connection may be served ([`Connection::accept`]).
#[derive(Debug)]
pub enum Accept {
    /// Serve it with this state machine.
    Serve(Box<Connection>),
    /// Too many connections (or shutting down): write these bytes (a 503)
    /// and close.
    Refuse(Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request head (idle when no byte of it has arrived).
    Head,
    /// Reading a chat request's body.
    Body,
    /// Waiting for the shared reasoning memory's answer.
    Recalling,
    /// Waiting for the Responses API's store (or the runtime's runs).
    Resolving,
    /// Streaming a background run's events to the client.
    Following,
    /// Waiting for the shared limiter's verdict.
    Admitting,
    /// Waiting in its key's queue for an in-flight slot.
    Queued,
    /// Talking to the provider.
    Upstream,
    /// A response is queued; next request (or close) once it is written.
    Respond,
    /// Closed, or closing as soon as output is written.
    Closed,
}

/// One client connection's state machine. See the module docs.
#[derive(Debug)]
pub struct Connection {
    gw: Arc<Gateway>,
    phase: Phase,
    close_after: bool,
    /// Set when draining starts: a request still waiting on the provider at
    /// this instant is cut (streams end with `[DONE]`, others get 503), so
    /// that it is metered before the process exits.
    cut_at: Option<Instant>,
    close_emitted: bool,
    cin: Vec<u8>,
    cin_pos: usize,
    cout: Vec<u8>,
    cout_pos: usize,
    held: Vec<u8>,
    awaiting_ledger: bool,
    /// The held bytes also wait for the response to be kept.
    awaiting_store: bool,
    /// The ledger line was appended while the response was being kept.
    ledger_appended: bool,
    timers: TimerTable,
    /// When the current request's head began (its first byte).
    head_started: Option<Instant>,
    scanner: HeadScanner,
    req: Option<Box<Request>>,
    up: Option<Box<Upstream>>,
    /// The previous stream's provider connection, still being read for its
    /// leftover framing. Never at the same time as `up`: the runtime holds
    /// one provider connection per client connection.
    leftover: Option<Leftover>,
    events: VecDeque<Event>,
    /// The last `Authorization` value that authenticated on this connection,
    /// the key table it was checked against and the key it named: the next
    /// request on a keep-alive connection usually sends the same one.
    auth_cache: Option<(String, Arc<KeyTable>, usize)>,
    /// The key of an [`Event::Admit`] not answered yet: a reservation the
    /// shared limiter grants after the client left is given back under it,
    /// so the client connection is not closed before the answer.
    admitting: Option<Settlement>,
    /// A background run made here, started once its queued response is
    /// kept.
    runs_to_start: Option<Box<Run>>,
    /// This connection carries a background run (its client is the run's
    /// recorder).
    is_run: bool,
    /// The run was cancelled (its ledger line says so).
    cancelled: bool,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.gw.connection_closed();
    }
}

impl Connection {
    /// The answer to plain HTTP sent to a TLS listener (its first byte was
    /// not a TLS handshake's): `400 malformed_request` saying to use
    /// `https://`, written in plain HTTP so the client can read it; the
    /// runtime closes the connection after it.
    pub fn plain_http_on_tls(gw: &Gateway, now: Instant) -> Vec<u8> {
        respond::plain_http_on_tls(gw, now)
    }

    /// A new client connection arrived at `now`: serve it, or refuse it
    /// (too many open, or shutting down).
    pub fn accept(gw: &Arc<Gateway>, now: Instant) -> Accept {
        if gw.is_draining() {
            return Accept::Refuse(respond::refusal(gw, now, "The gateway is shutting down."));
        }
        if !gw.connection_opened() {
            let why = "Too many connections; retry shortly.";
            return Accept::Refuse(respond::refusal(gw, now, why));
        }
        let mut c = Connection::blank(gw);
        c.timers
            .set(Timer::ClientIdle, now + gw.config().timeouts.client_idle);
        Accept::Serve(c)
    }

    /// A connection's state before its first byte.
    fn blank(gw: &Arc<Gateway>) -> Box<Connection> {
        Box::new(Connection {
            gw: Arc::clone(gw),
            phase: Phase::Head,
            close_after: false,
            cut_at: None,
            close_emitted: false,
            cin: Vec::new(),
            cin_pos: 0,
            cout: Vec::new(),
            cout_pos: 0,
            held: Vec::new(),
            awaiting_ledger: false,
            awaiting_store: false,
            ledger_appended: false,
            timers: TimerTable::default(),
            head_started: None,
            scanner: HeadScanner::new(),
            req: None,
            up: None,
            leftover: None,
            events: VecDeque::new(),
            auth_cache: None,
            admitting: None,
            runs_to_start: None,
            is_run: false,
            cancelled: false,
        })
    }

    // ------------------------------------------------------------------
    // Outputs

    /// The next thing to do, in order. Call until `None` after every input.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Bytes to write to the client, if any.
    #[must_use]
    pub fn poll_client_transmit(&self) -> Option<&[u8]> {
        (self.cout_pos < self.cout.len()).then(|| &self.cout[self.cout_pos..])
    }

    /// Bytes to write to the provider, if any.
    #[must_use]
    pub fn poll_upstream_transmit(&self) -> Option<&[u8]> {
        let up = self.up.as_ref()?;
        let req = self.req.as_ref()?;
        if up.state == UpState::Connecting {
            return None;
        }
        (up.out_pos < req.upstream_request.len()).then(|| &req.upstream_request[up.out_pos..])
    }

    /// The earliest instant at which [`Connection::handle_timeout`] must be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Whether the runtime should read from the client now. It stays true
    /// while a response is in progress so a disconnect is seen at once; it
    /// turns false only when too many pipelined bytes are waiting.
    #[must_use]
    pub fn wants_client_read(&self) -> bool {
        let cap = self.gw.config().http.max_head + self.gw.config().http.max_body as usize;
        self.phase != Phase::Closed && self.cin.len() - self.cin_pos <= cap
    }

    /// Whether the runtime should read from the provider now. A connection
    /// read for its leftover after `[DONE]` is always read: nothing it
    /// sends goes to the client.
    #[must_use]
    pub fn wants_upstream_read(&self) -> bool {
        if self.leftover.is_some() {
            return true;
        }
        self.up
            .as_ref()
            .is_some_and(|u| u.state != UpState::Connecting)
            && !self.awaiting_ledger
            && self.cout.len() - self.cout_pos < forward::CLIENT_BACKLOG_HIGH
    }

    /// Bytes of memory held for client input (tests watch it stay bounded).
    #[doc(hidden)]
    pub fn client_input_capacity(&self) -> usize {
        self.cin.capacity()
    }

    // ------------------------------------------------------------------
    // Inputs that concern the whole connection (the client's and the
    // provider's own are in `request.rs` and `upstream.rs`)

    /// The runtime tried to append the line of the last [`Event::Ledger`]:
    /// `appended` when it is in the ledger.
    ///
    /// A response that reached the client in full has its ledger line, so
    /// when the append failed the bytes held back for it are never sent:
    /// the connection closes instead. A stream ends without its last
    /// bytes (no `[DONE]`, no final chunk), and a response that was held
    /// whole (a non-streamed answer, an error) is not sent at all; either
    /// way the client sees a connection that broke, not an answer.
    pub fn handle_ledger_written(&mut self, now: Instant, appended: bool) {
        if !self.awaiting_ledger || self.ledger_appended {
            return;
        }
        if appended && self.awaiting_store {
            // Sent once the response is kept too.
            self.ledger_appended = true;
            self.after(now);
            return;
        }
        self.release_held_or_close(now, appended);
    }

    /// The held bytes once their ledger line (and their kept response)
    /// are written: sent, or never when the line was not appended.
    fn release_held(&mut self, now: Instant) {
        if self.awaiting_ledger && self.ledger_appended {
            self.release_held_or_close(now, true);
        } else {
            self.after(now);
        }
    }

    fn release_held_or_close(&mut self, now: Instant, appended: bool) {
        self.awaiting_ledger = false;
        self.ledger_appended = false;
        if !appended {
            if self.phase != Phase::Closed {
                tracing::error!(
                    request_id = self.req.as_ref().map_or("", |r| r.id.as_str()),
                    "the ledger line could not be appended: the response is cut and the connection closed"
                );
            }
            self.held.clear();
            self.close();
            self.after(now);
            return;
        }
        if self.phase != Phase::Closed && !self.held.is_empty() {
            let mut out = self.take_client_out();
            if out.is_empty() {
                // The usual case: hand the held bytes over without copying.
                std::mem::swap(&mut out, &mut self.held);
            } else {
                out.append(&mut self.held);
            }
            self.put_client_out(now, out);
        }
        self.after(now);
    }

    /// The gateway is shutting down: close now if idle, otherwise after the
    /// current response.
    pub fn handle_shutdown(&mut self, now: Instant) {
        self.close_after = true;
        let cut_at = *self
            .cut_at
            .get_or_insert(now + self.gw.config().timeouts.drain);
        if self.phase == Phase::Upstream {
            self.timers.set(Timer::Cut, cut_at);
        }
        if self.phase == Phase::Queued {
            self.leave_queue(now, false);
            let e = ApiError::overloaded("The gateway is shutting down.");
            self.respond_error(now, e, true);
        }
        if self.phase == Phase::Head && self.head_started.is_none() {
            self.close();
        }
        self.after(now);
    }

    /// A deadline from [`Connection::poll_timeout`] passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(timer) = self.timers.take_expired(now) {
            match timer {
                Timer::Leftover => self.end_leftover(false, "its body did not end in time"),
                Timer::ClientSend => {
                    // The client stopped reading: give up on it.
                    self.handle_client_eof(now);
                    return;
                }
                Timer::ClientIdle if self.phase == Phase::Head => self.close(),
                Timer::ClientHead if self.phase == Phase::Head => {
                    self.respond_error(now, ApiError::request_timeout(), true);
                }
                Timer::ClientBody if self.phase == Phase::Body => {
                    self.respond_error(now, ApiError::request_timeout(), true);
                }
                Timer::Cut if self.phase == Phase::Upstream => self.cut_for_shutdown(now),
                Timer::QueueTurn if self.phase == Phase::Queued => self.queue_turn(now),
                Timer::QueueDeadline if self.phase == Phase::Queued => self.queue_expired(now),
                Timer::Retry if self.phase == Phase::Upstream => self.retry_now(now),
                Timer::Ping if self.phase == Phase::Upstream => self.ping(now),
                Timer::FirstEvent if self.phase == Phase::Upstream => {
                    self.first_event_keepalive(now);
                }
                Timer::Store if self.phase == Phase::Resolving => self.store_overdue(now),
                Timer::UsageTail | Timer::StreamTail | Timer::Upstream
                    if self.phase == Phase::Upstream =>
                {
                    self.upstream_timeout(now, timer);
                }
                _ => {}
            }
        }
        self.after(now);
    }

    // ------------------------------------------------------------------
    // From one request to the next

    /// Closed, or closing once the output is written.
    fn close(&mut self) {
        self.phase = Phase::Closed;
        self.timers.stop(Timer::ClientIdle);
        self.timers.stop(Timer::ClientHead);
        self.timers.stop(Timer::ClientBody);
    }

    /// The current request's response is queued; `close` when the
    /// connection cannot carry another request.
    fn end_response(&mut self, close: bool) {
        self.close_after |= close;
        self.phase = Phase::Respond;
        self.timers.stop(Timer::ClientHead);
        self.timers.stop(Timer::ClientBody);
        // The request's own: never the next request's on this connection.
        self.timers.stop(Timer::FirstEvent);
    }

    /// Whether this response is the connection's last.
    fn closing_after_this(&self) -> bool {
        self.close_after
            || self.gw.is_draining()
            || self.req.as_ref().is_some_and(|r| !r.keep_alive)
    }

    /// After every input: move to the next request, or close, once the
    /// current response is fully written.
    fn after(&mut self, now: Instant) {
        loop {
            let flushed = self.cout_pos == self.cout.len() && !self.awaiting_ledger;
            match self.phase {
                Phase::Respond if flushed => {
                    self.req = None;
                    if self.close_after {
                        self.close();
                        continue;
                    }
                    self.phase = Phase::Head;
                    self.head_started = None;
                    self.timers.set(
                        Timer::ClientIdle,
                        now + self.gw.config().timeouts.client_idle,
                    );
                    self.process_client(now);
                }
                Phase::Head if self.close_after && self.head_started.is_none() && flushed => {
                    self.close();
                    continue;
                }
                // A background run waiting for its queued response to be
                // kept starts (or is given back) whether or not its client
                // stays: the connection waits for that answer.
                Phase::Closed
                    if flushed
                        && !self.close_emitted
                        && self.admitting.is_none()
                        && self.runs_to_start.is_none() =>
                {
                    self.end_leftover(false, "the client connection closes");
                    self.close_emitted = true;
                    self.events.push_back(Event::CloseClient);
                }
                _ => {}
            }
            break;
        }
    }
}
#[cfg(test)]
mod size_tests {
    /// Every connection keeps a queue of events: a large rare variant
    /// inline would make every open stream pay for it (boxed, a queue of
    /// four is 96 bytes instead of 512).
    #[test]
    fn an_event_is_small() {
        assert!(std::mem::size_of::<super::Event>() <= 32);
    }
}
