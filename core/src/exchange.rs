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
//! - the ledger line appended, or not → [`Connection::handle_ledger_written`];
//! - a deadline passed → [`Connection::handle_timeout`].
//!
//! Outputs: [`Connection::poll_event`] (connect or release or close the
//! provider connection, append a ledger line, close the client),
//! [`Connection::poll_client_transmit`] and
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

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::AuthFailure;
use crate::catalog::Price;
use crate::error::{ApiError, UpstreamFault};
use crate::gateway::Gateway;
use crate::http::body::BodyDecoder;
use crate::http::request::{Method, RequestHead, leading_empty_lines, parse_request_head};
use crate::http::response::{ResponseHead, parse_response_head};
use crate::http::write::{self, header, header_u64};
use crate::http::{Framing, HeadScanner, HttpError, HttpLimits};
use crate::ledger::LedgerRecord;
use crate::limits::{Admission, LimitStatus, Limits, Rejection};
use crate::metrics::{Finished, Metered};
use crate::sse::SseFramer;
use crate::stream::{DONE_EVENT, EventKind, StreamTracker};
use crate::time::{Instant, push_http_date};
use crate::usage::{Usage, parse_completion};
use crate::validate::{ChatRequest, validate_chat_request};

/// The path of the chat endpoint.
pub const CHAT_PATH: &str = "/v1/chat/completions";
/// The path of the model list.
pub const MODELS_PATH: &str = "/v1/models";
/// Most bytes of a provider's error body read to build the 502 message.
const MAX_ERROR_BODY: u64 = 64 * 1024;
/// Stop reading the provider while this much is waiting for the client.
const CLIENT_BACKLOG_HIGH: usize = 1 << 20;
/// Status recorded when the client left before any response head.
pub const STATUS_CLIENT_CLOSED: u16 = 499;
/// How long a provider connection is drained after `[DONE]` for the rest
/// of its chunked framing (see [`Drain`]). The last chunk is flushed right
/// after `[DONE]`, so it arrives within a round trip; a fixed bound, not
/// `stream_tail_timeout` (meant for a provider still generating, 30 s by
/// default), keeps a provider that never ends its body from holding a
/// connection long.
const UPSTREAM_DRAIN: Duration = Duration::from_secs(1);

/// Something the runtime must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Get a connection to the provider: an idle pooled one, unless `fresh`,
    /// or a new one. Then call [`Connection::handle_upstream_connected`] (or
    /// [`Connection::handle_upstream_failure`]).
    ConnectUpstream {
        /// A pooled connection failed before answering; use a new one.
        fresh: bool,
    },
    /// The provider's response is complete and its connection can carry
    /// another request: return it to the pool.
    ///
    /// A stream whose `[DONE]` came before the end of its chunked body is
    /// over for the client at once (ledger line, last bytes), but its
    /// connection is kept and read a moment longer for that end: this
    /// event (or [`Event::CloseUpstream`]) then comes later, possibly while
    /// the next request is read. It always comes before the next
    /// [`Event::ConnectUpstream`] and before [`Event::CloseClient`]: the
    /// runtime holds at most one provider connection per client connection.
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
    /// Ask the shared limiter (with shared limits configured) to admit one
    /// request of `key` reserving `tokens`; then call
    /// [`Connection::handle_admission`], even if the client has gone
    /// meanwhile (a granted reservation is then given back).
    Admit {
        /// Key name.
        key: String,
        /// Its limits.
        limits: Limits,
        /// Tokens to reserve.
        tokens: u64,
    },
    /// Tell the shared limiter that a request used `used` of its `reserved`
    /// tokens (nothing to report back; if the limiter cannot be reached, the
    /// runtime settles with the gateway's own, [`Gateway::limiter`]).
    Settle {
        /// Key name.
        key: String,
        /// Its limits.
        limits: Limits,
        /// Tokens reserved at admission.
        reserved: u64,
        /// Tokens metered.
        used: u64,
    },
}

/// The shared limiter's answer to [`Event::Admit`].
pub type SharedAdmission = Result<Result<Admission, Rejection>, String>;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request head (idle when no byte of it has arrived).
    Head,
    /// Reading a chat request's body.
    Body,
    /// Waiting for the shared limiter's verdict.
    Admitting,
    /// Talking to the provider.
    Upstream,
    /// A response is queued; next request (or close) once it is written.
    Respond,
    /// Closed, or closing as soon as output is written.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpState {
    Connecting,
    AwaitingHead,
    Body,
    ErrorBody,
    Streaming,
}

#[derive(Debug)]
struct KeyRef {
    name: String,
    limits: Limits,
}

/// The request being served.
#[derive(Debug)]
struct Request {
    id: String,
    started: Instant,
    method: Method,
    path: String,
    keep_alive: bool,
    http10: bool,
    key: Option<KeyRef>,
    body: Vec<u8>,
    decoder: Option<BodyDecoder>,
    chat: Option<ChatRequest>,
    /// `model` and `stream` read from a body that failed validation.
    peeked: Option<(String, bool)>,
    reserved: u64,
    limit_status: Option<LimitStatus>,
    upstream_request: Vec<u8>,
    attempts: u8,
    committed: bool,
    first_byte: Option<Instant>,
    upstream_status: Option<u16>,
    /// When the provider was first asked (for the overhead metric).
    up_started: Option<Instant>,
    /// Admitted by the shared limiter (so settled there too).
    shared: bool,
}

/// The provider side of the current request.
#[derive(Debug)]
struct Upstream {
    state: UpState,
    deadline: Instant,
    tail_deadline: Option<Instant>,
    out_pos: usize,
    reused: bool,
    received: bool,
    inbuf: Vec<u8>,
    scanner: HeadScanner,
    head: Option<ResponseHead>,
    decoder: Option<BodyDecoder>,
    body: Vec<u8>,
    framer: SseFramer,
    tracker: StreamTracker,
    /// Bytes beyond the end of the response: the connection is not reusable.
    trailing_garbage: bool,
    /// `[DONE]` was forwarded: later data is ignored.
    done_forwarded: bool,
}

/// A provider connection whose stream is over for the client (`[DONE]` was
/// forwarded) but whose chunked body has not ended yet: the last chunk (and
/// any trailers) often comes in a later read, flushed separately behind
/// TLS. It is read until the body ends cleanly (then pooled), and closed if
/// anything else arrives, after [`UPSTREAM_DRAIN`], when the client's next
/// request needs the provider, or when the client connection closes.
#[derive(Debug)]
struct Drain {
    decoder: BodyDecoder,
    deadline: Instant,
}

/// What becomes of the provider connection when a stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamConnection {
    /// The body ended cleanly: back to the pool.
    Release,
    /// `[DONE]` came before the end of the chunked body: read the rest.
    Drain,
    /// Not reusable.
    Close,
}

/// How a stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StreamEnd {
    /// `[DONE]`, or the body ended.
    Ended,
    /// `finish_reason` arrived and the provider did not end in time.
    Tail,
    /// The provider failed; the partial event is dropped.
    Failed(UpstreamFault, &'static str),
    /// The drain timeout passed while streaming.
    Shutdown,
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
    send_deadline: Option<Instant>,
    idle_since: Instant,
    head_started: Option<Instant>,
    body_deadline: Option<Instant>,
    scanner: HeadScanner,
    req: Option<Box<Request>>,
    up: Option<Box<Upstream>>,
    /// The previous stream's provider connection, still being read for the
    /// end of its body. Never at the same time as `up`: the runtime holds
    /// one provider connection per client connection.
    drain: Option<Drain>,
    events: VecDeque<Event>,
    /// The last `Authorization` value that authenticated on this connection,
    /// the key table it was checked against and the key it named: the next
    /// request on a keep-alive connection usually sends the same one.
    auth_cache: Option<(String, Arc<crate::auth::KeyTable>, usize)>,
    /// The key of an [`Event::Admit`] not answered yet: a reservation the
    /// shared limiter grants after the client left is given back under it,
    /// so the client connection is not closed before the answer.
    admitting: Option<(String, Limits)>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.gw.connection_closed();
    }
}

impl Connection {
    /// A connection accepted at `now` (see [`Gateway::accept`]).
    pub(crate) fn new(gw: Arc<Gateway>, now: Instant) -> Self {
        Connection {
            gw,
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
            send_deadline: None,
            idle_since: now,
            head_started: None,
            body_deadline: None,
            scanner: HeadScanner::new(),
            req: None,
            up: None,
            drain: None,
            events: VecDeque::new(),
            auth_cache: None,
            admitting: None,
        }
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
        let t = &self.gw.config().timeouts;
        let phase_deadline = match self.phase {
            Phase::Head if self.cout_pos == self.cout.len() && !self.awaiting_ledger => {
                Some(match self.head_started {
                    Some(started) => started + t.client_header,
                    None => self.idle_since + t.client_idle,
                })
            }
            Phase::Body => self.body_deadline,
            Phase::Upstream => self.up.as_ref().map(|u| {
                let d = match u.tail_deadline {
                    Some(tail) => tail.min(u.deadline),
                    None => u.deadline,
                };
                self.cut_at.map_or(d, |c| c.min(d))
            }),
            _ => None,
        };
        [
            phase_deadline,
            self.send_deadline,
            self.drain.as_ref().map(|d| d.deadline),
        ]
        .into_iter()
        .flatten()
        .min()
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
    /// being drained after `[DONE]` is always read: nothing it sends goes
    /// to the client.
    #[must_use]
    pub fn wants_upstream_read(&self) -> bool {
        if self.drain.is_some() {
            return true;
        }
        self.up
            .as_ref()
            .is_some_and(|u| u.state != UpState::Connecting)
            && !self.awaiting_ledger
            && self.cout.len() - self.cout_pos < CLIENT_BACKLOG_HIGH
    }

    /// Bytes of memory held for client input (tests watch it stay bounded).
    #[doc(hidden)]
    pub fn client_input_capacity(&self) -> usize {
        self.cin.capacity()
    }

    /// The connection is finished; drop it.
    pub fn is_closed(&self) -> bool {
        self.close_emitted
    }

    // ------------------------------------------------------------------
    // Client inputs

    /// Bytes arrived from the client.
    pub fn handle_client_data(&mut self, now: Instant, data: &[u8]) {
        if self.phase == Phase::Closed || data.is_empty() {
            return;
        }
        self.compact_client_input();
        self.cin.extend_from_slice(data);
        self.process_client(now);
        self.after(now);
    }

    /// Drops the consumed part of the client input once it is at least as
    /// long as what is still unread. Pipelined writes that end a byte into
    /// the next request never leave the buffer fully consumed, so waiting
    /// for that would let it grow by a request per request; moving only
    /// when the consumed part dominates keeps the copying O(bytes read).
    /// No parser keeps offsets into the buffer: the head scanner and the
    /// body decoder work on `cin[cin_pos..]`, which this does not change.
    fn compact_client_input(&mut self) {
        let unread = self.cin.len() - self.cin_pos;
        if unread == 0 {
            self.cin.clear();
            self.cin_pos = 0;
        } else if self.cin_pos >= unread {
            self.cin.drain(..self.cin_pos);
            self.cin_pos = 0;
        }
    }

    /// The client closed its side or the connection broke: abort whatever is
    /// in progress (the provider request included) and close.
    pub fn handle_client_eof(&mut self, now: Instant) {
        if self.close_emitted {
            return;
        }
        if self.phase == Phase::Upstream {
            self.client_gone(now);
        } else if matches!(self.phase, Phase::Body | Phase::Admitting) {
            // An authenticated request abandoned before the provider was
            // asked is still metered.
            self.record_abandoned(now);
        }
        self.phase = Phase::Closed;
        self.cout.clear();
        self.cout_pos = 0;
        self.held.clear();
        self.send_deadline = None;
        self.after(now);
    }

    /// `n` bytes of [`Connection::poll_client_transmit`] were written.
    pub fn handle_client_written(&mut self, now: Instant, n: usize) {
        self.cout_pos = (self.cout_pos + n).min(self.cout.len());
        if self.cout_pos == self.cout.len() {
            self.cout.clear();
            self.cout_pos = 0;
            self.send_deadline = None;
        } else if n > 0 {
            self.send_deadline = Some(now + self.gw.config().timeouts.client_send);
        }
        self.after(now);
    }

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
        if !self.awaiting_ledger {
            return;
        }
        self.awaiting_ledger = false;
        if !appended {
            if self.phase != Phase::Closed {
                tracing::error!(
                    request_id = self.req.as_ref().map_or("", |r| r.id.as_str()),
                    "the ledger line could not be appended: the response is cut and the connection closed"
                );
            }
            self.held.clear();
            self.phase = Phase::Closed;
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
        let drain = self.gw.config().timeouts.drain;
        self.cut_at.get_or_insert(now + drain);
        if self.phase == Phase::Head && self.head_started.is_none() {
            self.phase = Phase::Closed;
        }
        self.after(now);
    }

    /// A deadline from [`Connection::poll_timeout`] passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        let t = self.gw.config().timeouts;
        if self.drain.as_ref().is_some_and(|d| now >= d.deadline) {
            self.end_drain(false, "its body did not end in time");
        }
        if self.send_deadline.is_some_and(|d| now >= d) {
            // The client stopped reading: give up on it.
            self.handle_client_eof(now);
            return;
        }
        match self.phase {
            Phase::Head if self.cout_pos == self.cout.len() && !self.awaiting_ledger => {
                match self.head_started {
                    Some(started) if now >= started + t.client_header => {
                        self.respond_error(now, ApiError::request_timeout(), true);
                    }
                    None if now >= self.idle_since + t.client_idle => self.phase = Phase::Closed,
                    _ => {}
                }
            }
            Phase::Body if self.body_deadline.is_some_and(|d| now >= d) => {
                self.respond_error(now, ApiError::request_timeout(), true);
            }
            Phase::Upstream if self.cut_at.is_some_and(|c| now >= c) => self.cut_for_shutdown(now),
            Phase::Upstream => self.upstream_timeout(now),
            _ => {}
        }
        self.after(now);
    }

    /// The drain timeout passed with this request still waiting on the
    /// provider: end it now, metered, instead of dropping it unrecorded
    /// when the process exits.
    fn cut_for_shutdown(&mut self, now: Instant) {
        let Some(up) = self.up.as_ref() else { return };
        let committed = self.req.as_ref().is_some_and(|r| r.committed);
        if up.state == UpState::Streaming && committed {
            self.end_stream(now, StreamEnd::Shutdown, Vec::new());
        } else {
            self.close_upstream();
            let e = ApiError::overloaded(
                "The gateway is shutting down and could not finish this request in time.",
            );
            self.respond_error(now, e, true);
        }
    }

    // ------------------------------------------------------------------
    // Provider inputs

    /// The provider connection asked for with [`Event::ConnectUpstream`] is
    /// ready; `reused` when it came from the pool.
    pub fn handle_upstream_connected(&mut self, now: Instant, reused: bool) {
        let first_byte = self.gw.config().timeouts.upstream_first_byte;
        if let Some(up) = self.up.as_mut().filter(|u| u.state == UpState::Connecting) {
            self.gw.metrics().upstream_connection(reused);
            up.state = UpState::AwaitingHead;
            up.reused = reused;
            up.deadline = now + first_byte;
        }
        self.after(now);
    }

    /// `n` bytes of [`Connection::poll_upstream_transmit`] were written.
    pub fn handle_upstream_written(&mut self, now: Instant, n: usize) {
        if let Some(up) = self.up.as_mut() {
            up.out_pos += n;
        }
        self.after(now);
    }

    /// Bytes arrived from the provider.
    pub fn handle_upstream_data(&mut self, now: Instant, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.up.is_none() {
            return self.drain_data(data);
        }
        let idle = self.gw.config().timeouts.upstream_idle;
        let up = self.up.as_mut().expect("checked above");
        up.received = true;
        match up.state {
            UpState::Connecting => {}
            UpState::AwaitingHead => {
                up.inbuf.extend_from_slice(data);
                self.upstream_head(now);
            }
            _ => {
                up.deadline = now + idle;
                self.upstream_body(now, data);
            }
        }
        self.after(now);
    }

    /// The provider closed the connection.
    pub fn handle_upstream_eof(&mut self, now: Instant) {
        let Some(up) = self.up.as_mut() else {
            return self.end_drain(false, "the provider closed it");
        };
        match up.state {
            UpState::Connecting | UpState::AwaitingHead => {
                self.upstream_failed_early(
                    now,
                    UpstreamFault::Reset,
                    "the provider closed the connection without answering".into(),
                );
            }
            UpState::Body | UpState::ErrorBody => {
                let ok = up.decoder.as_mut().is_some_and(|d| d.finish().is_ok());
                if ok || up.state == UpState::ErrorBody {
                    self.upstream_body_complete(now);
                } else {
                    self.upstream_error_response(
                        now,
                        ApiError::upstream(
                            UpstreamFault::Reset,
                            "The provider's response ended early.",
                        ),
                    );
                }
            }
            UpState::Streaming => {
                let ended = up.decoder.as_mut().is_some_and(|d| d.finish().is_ok());
                if ended {
                    self.finish_stream(now, StreamEnd::Ended);
                } else {
                    self.finish_stream(
                        now,
                        StreamEnd::Failed(
                            UpstreamFault::Reset,
                            "the provider's stream ended early",
                        ),
                    );
                }
            }
        }
        self.after(now);
    }

    /// The provider connection failed (to connect, or while in use).
    pub fn handle_upstream_failure(&mut self, now: Instant, failure: UpstreamFailure) {
        let Some(up) = self.up.as_ref() else {
            return self.end_drain(false, "it failed");
        };
        match up.state {
            UpState::Connecting | UpState::AwaitingHead => {
                self.upstream_failed_early(now, failure.fault(), failure.to_string())
            }
            UpState::Body | UpState::ErrorBody => {
                let e = ApiError::upstream(failure.fault(), format!("{failure}."));
                self.upstream_error_response(now, e);
            }
            UpState::Streaming => self.finish_stream(
                now,
                StreamEnd::Failed(failure.fault(), "the provider connection failed"),
            ),
        }
        self.after(now);
    }

    // ------------------------------------------------------------------
    // Requests

    fn process_client(&mut self, now: Instant) {
        loop {
            let progressed = match self.phase {
                Phase::Head => self.read_head(now),
                Phase::Body => self.read_body(now),
                _ => false,
            };
            if !progressed {
                break;
            }
        }
    }

    fn limits(&self) -> HttpLimits {
        self.gw.config().http
    }

    /// The key index when `authorization` is the value that last
    /// authenticated on this connection against the same key table. The
    /// comparison is constant-time: a balancer may carry several users'
    /// requests on one connection, and a timing difference must not tell
    /// one of them how much of another's key they guessed.
    fn cached_key(
        &self,
        keys: &Arc<crate::auth::KeyTable>,
        authorization: Option<&str>,
    ) -> Option<usize> {
        use subtle::ConstantTimeEq;
        let (value, table, i) = self.auth_cache.as_ref()?;
        let presented = authorization?.as_bytes();
        let same = Arc::ptr_eq(table, keys)
            && value.len() == presented.len()
            && bool::from(value.as_bytes().ct_eq(presented));
        same.then_some(*i)
    }

    /// Returns true when a request started (more input may be processed).
    fn read_head(&mut self, now: Instant) -> bool {
        if self.head_started.is_none() {
            self.cin_pos += leading_empty_lines(&self.cin[self.cin_pos..]);
            if self.cin_pos == self.cin.len() {
                return false;
            }
            self.head_started = Some(now);
            self.scanner.reset();
        }
        let limits = self.limits();
        let head = match self
            .scanner
            .scan(&self.cin[self.cin_pos..], limits.max_head)
        {
            Ok(None) => return false,
            Ok(Some(len)) => {
                parse_request_head(&self.cin[self.cin_pos..self.cin_pos + len], &limits)
            }
            Err(e) => Err(e),
        };
        match head {
            Ok(head) => {
                self.cin_pos += head.head_len;
                self.start_request(now, head);
                true
            }
            Err(e) => {
                self.respond_error(now, http_error(&e, &limits), true);
                false
            }
        }
    }

    fn start_request(&mut self, now: Instant, head: RequestHead) {
        let gw = Arc::clone(&self.gw);
        let started = self.head_started.unwrap_or(now);
        self.req = Some(Box::new(Request {
            id: gw.next_request_id(),
            started,
            method: head.method,
            path: head.path.clone(),
            keep_alive: head.keep_alive,
            http10: head.http10,
            key: None,
            body: Vec::new(),
            decoder: None,
            chat: None,
            peeked: None,
            reserved: 0,
            limit_status: None,
            upstream_request: Vec::new(),
            attempts: 0,
            committed: false,
            first_byte: None,
            up_started: None,
            shared: false,
            upstream_status: None,
        }));
        let has_body = head.framing != Framing::Empty;
        let (allowed, allow, is_chat) = match head.path.as_str() {
            MODELS_PATH => (
                matches!(head.method, Method::Get | Method::Head),
                "GET, HEAD",
                false,
            ),
            CHAT_PATH => (head.method == Method::Post, "POST", true),
            _ => {
                let e = ApiError::unknown_url(head.method.as_str(), &head.path);
                return self.respond_error(now, e, has_body);
            }
        };
        if !allowed {
            let e = ApiError::method_not_allowed(head.method.as_str(), allow);
            return self.respond_error(now, e, has_body);
        }
        let keys = gw.keys();
        let entry = match self.cached_key(&keys, head.authorization.as_deref()) {
            Some(i) => &keys.entries()[i],
            None => match keys.authenticate(head.authorization.as_deref()) {
                Ok(e) => {
                    let i = keys
                        .entries()
                        .iter()
                        .position(|k| k.sha256 == e.sha256)
                        .unwrap_or(0);
                    let value = head.authorization.clone().unwrap_or_default();
                    self.auth_cache = Some((value, Arc::clone(&keys), i));
                    e
                }
                Err(f) => {
                    return self.respond_error(
                        now,
                        ApiError::invalid_api_key(f == AuthFailure::Missing),
                        has_body,
                    );
                }
            },
        };
        if !entry.valid_at(gw.wall().unix_secs(now)) {
            // A rotated key whose grace period ended.
            self.auth_cache = None;
            return self.respond_error(now, ApiError::invalid_api_key(false), has_body);
        }
        let req = self.req.as_mut().expect("request just created");
        req.key = Some(KeyRef {
            name: entry.name.clone(),
            limits: entry.limits,
        });
        if !is_chat {
            let status = gw.limiter().status(&entry.name, entry.limits, now);
            req.limit_status = Some(status);
            return self.respond_models(now, has_body);
        }
        let limits = self.limits();
        if let Framing::Length(n) = head.framing {
            if n > limits.max_body {
                return self.respond_error(now, ApiError::request_too_large(limits.max_body), true);
            }
        }
        let json = head.content_type.as_deref().is_none_or(|ct| {
            ct.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        });
        if !json {
            return self.respond_error(now, ApiError::unsupported_content_type(), has_body);
        }
        if head.expect_continue && has_body {
            if let Some(e) = self.refuse_before_upload(now) {
                return self.respond_error(now, e, true);
            }
            self.push_client(now, b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let req = self.req.as_mut().expect("request just created");
        req.decoder = Some(BodyDecoder::new(head.framing, limits));
        self.phase = Phase::Body;
        self.body_deadline = Some(now + gw.config().timeouts.client_body);
    }

    /// A client that waits for `100 Continue` before uploading its body is
    /// refused at once when its key has no request left in the local
    /// buckets: no body, however valid, could be admitted now, and the
    /// 429 saves it the upload. Only local limits are certain enough; with
    /// shared limits the shared limiter decides after the body.
    fn refuse_before_upload(&mut self, now: Instant) -> Option<ApiError> {
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
        gw.metrics()
            .rate_limited(&key.name, crate::limits::LimitKind::Requests);
        let e = rate_limit_error(
            &key.name,
            crate::limits::LimitKind::Requests,
            wait_ms.div_ceil(1000).max(1),
        );
        req.limit_status = Some(status);
        Some(e)
    }

    /// Returns true when the body completed (more input may be processed).
    fn read_body(&mut self, now: Instant) -> bool {
        let limits = self.limits();
        let req = self.req.as_mut().expect("a body belongs to a request");
        let decoder = req
            .decoder
            .as_mut()
            .expect("set when the body phase starts");
        let input = &self.cin[self.cin_pos..];
        match decoder.decode(input, &mut req.body) {
            Ok(used) => {
                self.cin_pos += used;
                if used > 0 {
                    self.body_deadline = Some(now + self.gw.config().timeouts.client_body);
                }
            }
            Err(e) => {
                self.respond_error(now, http_error(&e, &limits), true);
                return false;
            }
        }
        if !decoder.is_done() {
            return false;
        }
        req.decoder = None;
        self.body_deadline = None;
        self.chat_request(now);
        true
    }

    fn chat_request(&mut self, now: Instant) {
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
            self.events.push_back(Event::Admit {
                key,
                limits,
                tokens,
            });
            return;
        }
        let verdict = gw.limiter().admit(&key.name, key.limits, tokens, now);
        self.admitted(now, verdict);
    }

    /// The shared limiter answered [`Event::Admit`] (`Err`: it could not be
    /// reached).
    pub fn handle_admission(&mut self, now: Instant, verdict: SharedAdmission) {
        let asked = self.admitting.take();
        if self.phase != Phase::Admitting {
            // The client left meanwhile: give the reservation back, then
            // close.
            if let (Ok(Ok(a)), Some((key, limits))) = (&verdict, asked) {
                self.events.push_back(Event::Settle {
                    key,
                    limits,
                    reserved: a.reserved_tokens,
                    used: 0,
                });
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

    /// Admitted: the provider is asked; refused: 429.
    fn admitted(&mut self, now: Instant, verdict: Result<Admission, Rejection>) {
        let gw = Arc::clone(&self.gw);
        let req = self.req.as_mut().expect("request in progress");
        let key = req.key.as_ref().expect("authenticated before the body");
        match verdict {
            Ok(admission) => {
                req.reserved = admission.reserved_tokens;
                req.limit_status = Some(admission.status);
            }
            Err(rejection) => {
                gw.metrics().rate_limited(&key.name, rejection.kind);
                req.limit_status = Some(rejection.status);
                let e = rate_limit_error(&key.name, rejection.kind, rejection.retry_after_secs);
                return self.respond_error(now, e, false);
            }
        }
        let chat = req.chat.take().expect("validated");
        // The provider's request: fixed prefix, per-request fields, body.
        let body = chat.upstream_body(&req.body);
        let mut out = Vec::with_capacity(gw.upstream_prefix().len() + 128 + body.len());
        out.extend_from_slice(gw.upstream_prefix());
        header(
            &mut out,
            "Accept",
            if chat.stream {
                "text/event-stream"
            } else {
                "application/json"
            },
        );
        header_u64(&mut out, "Content-Length", body.len() as u64);
        header(&mut out, "X-Request-Id", &req.id);
        write::end_head(&mut out);
        out.extend_from_slice(body);
        req.upstream_request = out;
        req.body = Vec::new();
        req.chat = Some(chat);
        req.attempts = 1;
        req.up_started = Some(now);
        self.phase = Phase::Upstream;
        // The previous stream's connection is not waited for: this request
        // takes another one (from the pool or new).
        self.end_drain(false, "the next request needs the provider");
        self.up = Some(Box::new(Upstream::new(
            now + gw.config().timeouts.upstream_connect,
            gw.config().max_sse_event,
        )));
        self.events
            .push_back(Event::ConnectUpstream { fresh: false });
    }

    fn respond_models(&mut self, now: Instant, has_body: bool) {
        let gw = Arc::clone(&self.gw);
        let close = has_body || self.closing_after_this();
        let req = self.req.as_ref().expect("models request");
        let mut out = Vec::with_capacity(512 + gw.config().catalog.list_body().len());
        write::status_line(&mut out, 200);
        common_headers(&mut out, &req.id, gw.wall().unix_secs(now), close);
        header(&mut out, "Content-Type", "application/json");
        header_u64(
            &mut out,
            "Content-Length",
            gw.config().catalog.list_body().len() as u64,
        );
        if let Some(s) = &req.limit_status {
            limit_headers(&mut out, s);
        }
        write::end_head(&mut out);
        if req.method != Method::Head {
            out.extend_from_slice(gw.config().catalog.list_body());
        }
        self.access_log(now, 200, None);
        self.push_client(now, &out);
        self.end_response(close);
    }

    /// Answers the current request (or a request that never parsed) with an
    /// error; `close` when the connection cannot carry another request.
    fn respond_error(&mut self, now: Instant, err: ApiError, close: bool) {
        let close = close || self.closing_after_this();
        let unix = self.gw.wall().unix_secs(now);
        let mut out = Vec::with_capacity(512);
        let id = match &self.req {
            Some(r) => r.id.clone(),
            None => self.gw.next_request_id(),
        };
        let status = self
            .req
            .as_ref()
            .and_then(|r| r.limit_status.or_else(|| self.peek_limits(now, r)));
        let head_only = self.req.as_ref().is_some_and(|r| r.method == Method::Head);
        write_error(&mut out, &err, &id, status.as_ref(), close, unix, head_only);
        self.access_log(now, err.status, Some(err.code));
        if self.is_metered() {
            let mut rec = self.record(now, err.status);
            rec.error = Some(err.fault.map_or(err.code, UpstreamFault::as_str).to_owned());
            self.settle(now, None);
            self.emit_ledger(now, rec, out);
        } else {
            self.push_client(now, &out);
        }
        self.end_response(close);
    }

    fn peek_limits(&self, now: Instant, req: &Request) -> Option<LimitStatus> {
        let key = req.key.as_ref()?;
        Some(self.gw.limiter().status(&key.name, key.limits, now))
    }

    /// Metered: an authenticated chat completion request.
    fn is_metered(&self) -> bool {
        self.req
            .as_ref()
            .is_some_and(|r| r.key.is_some() && r.path == CHAT_PATH && r.method == Method::Post)
    }

    fn closing_after_this(&self) -> bool {
        self.close_after
            || self.gw.is_draining()
            || self.req.as_ref().is_some_and(|r| !r.keep_alive)
    }

    fn end_response(&mut self, close: bool) {
        self.close_after |= close;
        self.phase = Phase::Respond;
        self.body_deadline = None;
    }

    fn record_abandoned(&mut self, now: Instant) {
        if self.is_metered() {
            let mut rec = self.record(now, STATUS_CLIENT_CLOSED);
            rec.client_disconnected = true;
            self.access_log(now, STATUS_CLIENT_CLOSED, None);
            self.emit_ledger(now, rec, Vec::new());
        }
    }

    // ------------------------------------------------------------------
    // Provider responses

    fn upstream_head(&mut self, now: Instant) {
        let limits = HttpLimits {
            max_head: 64 * 1024,
            max_headers: 128,
            ..HttpLimits::default()
        };
        let max_sse = self.gw.config().max_sse_event;
        let max_body = self.gw.config().max_upstream_body;
        let idle = self.gw.config().timeouts.upstream_idle;
        let up = self.up.as_mut().expect("upstream in progress");
        let head = loop {
            let head = match up.scanner.scan(&up.inbuf, limits.max_head) {
                Ok(None) => return,
                Ok(Some(len)) => parse_response_head(&up.inbuf[..len], &limits),
                Err(e) => Err(e),
            };
            match head {
                Ok(h) if h.is_interim() => {
                    up.inbuf.drain(..h.head_len);
                    up.scanner.reset();
                }
                Ok(h) => break h,
                Err(e) => {
                    let msg = format!("The provider answered with invalid HTTP ({e}).");
                    let e = ApiError::upstream(UpstreamFault::Invalid, msg);
                    return self.upstream_error_response(now, e);
                }
            }
        };
        let rest = up.inbuf.split_off(head.head_len);
        up.inbuf = Vec::new();
        up.deadline = now + idle;
        self.gw
            .metrics()
            .upstream_contact(self.gw.wall().unix_ms(now));
        let req = self.req.as_mut().expect("request in progress");
        req.upstream_status = Some(head.status);
        let stream = req.chat.as_ref().is_some_and(|c| c.stream);
        let (state, cap) = if !(200..300).contains(&head.status) {
            (UpState::ErrorBody, MAX_ERROR_BODY)
        } else if stream {
            if !head.is_event_stream() {
                let ct = head.content_type.clone().unwrap_or_else(|| "none".into());
                up.head = Some(head);
                let msg =
                    format!("The provider answered a streaming request with Content-Type '{ct}'.");
                let e = ApiError::upstream(UpstreamFault::Invalid, msg);
                return self.upstream_error_response(now, e);
            }
            (UpState::Streaming, u64::MAX)
        } else {
            (UpState::Body, max_body)
        };
        up.decoder = Some(BodyDecoder::new(
            head.framing,
            HttpLimits {
                max_body: cap,
                ..HttpLimits::default()
            },
        ));
        up.framer = SseFramer::new(max_sse);
        up.state = state;
        up.head = Some(head);
        if rest.is_empty() {
            // A body that is empty by its framing is already complete.
            if up.decoder.as_ref().is_some_and(BodyDecoder::is_done) {
                match state {
                    UpState::Streaming => self.finish_stream(now, StreamEnd::Ended),
                    _ => self.upstream_body_complete(now),
                }
            }
        } else {
            self.upstream_body(now, &rest);
        }
    }

    fn upstream_body(&mut self, now: Instant, data: &[u8]) {
        let up = self.up.as_mut().expect("upstream in progress");
        if up.state == UpState::Streaming {
            return self.stream_data(now, data);
        }
        let decoder = up.decoder.as_mut().expect("set with the head");
        match decoder.decode(data, &mut up.body) {
            Ok(used) => {
                up.trailing_garbage |= used < data.len();
                if decoder.is_done() {
                    self.upstream_body_complete(now);
                }
            }
            Err(HttpError::BodyTooLarge) if up.state == UpState::ErrorBody => {
                up.trailing_garbage = true;
                self.upstream_body_complete(now);
            }
            Err(e) => {
                let msg = format!("The provider's response body is invalid ({e}).");
                self.upstream_error_response(now, ApiError::upstream(UpstreamFault::Invalid, msg));
            }
        }
    }

    /// A whole non-streamed body (or error body) arrived.
    fn upstream_body_complete(&mut self, now: Instant) {
        let up = self.up.as_mut().expect("upstream in progress");
        let head = up.head.as_ref().expect("body follows head");
        if up.state == UpState::ErrorBody {
            let mut e = ApiError::upstream(
                UpstreamFault::Rejected,
                provider_error_message(head.status, &up.body),
            );
            e.retry_after = head.retry_after_secs().map(|s| s.max(1));
            return self.upstream_error_response(now, e);
        }
        let summary = match parse_completion(&up.body) {
            Ok(s) => s,
            Err(_) => {
                let e = ApiError::upstream(
                    UpstreamFault::Invalid,
                    "The provider's answer is not a JSON object.",
                );
                return self.upstream_error_response(now, e);
            }
        };
        let content_type = head
            .content_type
            .clone()
            .unwrap_or_else(|| "application/json".into());
        // Back to the pool only when nothing of this exchange is left on the
        // connection: a provider that said `close`, or sent more than its
        // body, would hand those bytes to the next request (maybe another
        // client's) as the start of its answer.
        let reusable = self
            .up
            .as_ref()
            .is_some_and(|u| u.head.as_ref().is_some_and(|h| h.keep_alive) && !u.trailing_garbage);
        let up = if reusable {
            self.release_upstream()
        } else {
            self.close_upstream()
        };
        let close = self.closing_after_this();
        let req = self.req.as_mut().expect("request in progress");
        req.first_byte.get_or_insert(now);
        let mut out = Vec::with_capacity(512 + up.body.len());
        write::status_line(&mut out, 200);
        common_headers(&mut out, &req.id, self.gw.wall().unix_secs(now), close);
        header(&mut out, "Content-Type", &content_type);
        header_u64(&mut out, "Content-Length", up.body.len() as u64);
        if let Some(s) = &req.limit_status {
            limit_headers(&mut out, s);
        }
        write::end_head(&mut out);
        out.extend_from_slice(&up.body);
        let mut rec = self.record(now, 200);
        rec.complete = true;
        rec.finish_reason = summary.finish_reason;
        let usage = summary.usage.unwrap_or_default();
        self.meter(&mut rec, &usage);
        self.settle(now, summary.usage);
        self.emit_ledger(now, rec, out);
        self.end_response(close);
    }

    fn stream_data(&mut self, now: Instant, data: &[u8]) {
        let tail = self.gw.config().timeouts.stream_tail;
        let up = self.up.as_mut().expect("upstream in progress");
        if up.done_forwarded {
            // Data after [DONE] is ignored (the stream already ended).
            return;
        }
        let decoder = up.decoder.as_mut().expect("set with the head");
        up.body.reserve(data.len());
        let used = match decoder.decode(data, &mut up.body) {
            Ok(used) => used,
            Err(_) => {
                // What was decoded before the error is valid: complete
                // events in it still go out, the partial one is dropped.
                return self.forward_events(
                    now,
                    Some(StreamEnd::Failed(
                        UpstreamFault::Invalid,
                        "the provider's stream framing is invalid",
                    )),
                    tail,
                );
            }
        };
        up.trailing_garbage |= used < data.len();
        let end = up
            .decoder
            .as_ref()
            .is_some_and(BodyDecoder::is_done)
            .then_some(StreamEnd::Ended);
        self.forward_events(now, end, tail);
    }

    /// Frames complete events out of the decoded body, forwards them in one
    /// client write, and ends the stream when `[DONE]` arrived or `end` says
    /// the body is over.
    fn forward_events(&mut self, now: Instant, mut end: Option<StreamEnd>, tail: Duration) {
        let up = self.up.as_mut().expect("upstream in progress");
        let mut batch: Option<std::ops::Range<usize>> = None;
        loop {
            let next = match up.framer.next_event(&up.body) {
                Ok(Some(r)) => Some(r),
                Ok(None) if end == Some(StreamEnd::Ended) => match up.framer.finish() {
                    Ok(r) => r,
                    Err(_) => {
                        end = Some(StreamEnd::Failed(
                            UpstreamFault::EventTooLarge,
                            "a provider event is larger than the limit",
                        ));
                        None
                    }
                },
                Ok(None) => None,
                Err(_) => {
                    end = Some(StreamEnd::Failed(
                        UpstreamFault::EventTooLarge,
                        "a provider event is larger than the limit",
                    ));
                    None
                }
            };
            let Some(r) = next else { break };
            let kind = up.tracker.observe(&up.body[r.clone()]);
            let req = self.req.as_mut().expect("request in progress");
            if !req.committed && batch.is_none() && kind == EventKind::Error {
                // An error before anything was sent: a normal JSON error.
                let msg = format!(
                    "The provider reported an error before streaming: {}",
                    up.tracker.error().unwrap_or("unknown error")
                );
                let e = ApiError::upstream(UpstreamFault::ErrorEvent, msg);
                return self.upstream_error_response(now, e);
            }
            batch = Some(batch.map_or(r.clone(), |b| b.start..r.end));
            if up.tracker.is_complete() && up.tail_deadline.is_none() {
                up.tail_deadline = Some(now + tail);
            }
            if kind == EventKind::Done {
                up.done_forwarded = true;
                end = Some(StreamEnd::Ended);
                break;
            }
        }
        if end.is_some() && batch.is_none() && !self.req.as_ref().expect("request").committed {
            // Nothing was sent yet, so however the stream ended this is
            // still a normal JSON error (specification, errors, rule 1).
            let e = match end {
                Some(StreamEnd::Failed(fault, why)) => ApiError::upstream(
                    fault,
                    format!("The provider failed before streaming: {why}."),
                ),
                _ => ApiError::upstream(
                    UpstreamFault::Invalid,
                    "The provider ended the stream without any event.",
                ),
            };
            return self.upstream_error_response(now, e);
        }
        // Frame straight into the client's output (or, when the stream ends
        // here, into the bytes held for the ledger): no intermediate copy.
        let mut bytes = match end {
            Some(_) => std::mem::take(&mut self.held),
            None => self.take_client_out(),
        };
        let committing = !self.req.as_ref().expect("request").committed && batch.is_some();
        if committing {
            self.stream_head(now, &mut bytes);
        }
        let up = self.up.as_mut().expect("upstream in progress");
        let chunked = !self.req.as_ref().expect("request").http10;
        if let Some(r) = batch {
            client_body(&mut bytes, &up.body[r], chunked);
        }
        let n = up.framer.complete_prefix();
        up.body.drain(..n);
        up.framer.consume(n);
        match end {
            Some(end) => self.end_stream(now, end, bytes),
            None => self.put_client_out(now, bytes),
        }
    }

    /// The client's response head for a stream: written once, with the first
    /// event.
    fn stream_head(&mut self, now: Instant, out: &mut Vec<u8>) {
        let close = self.closing_after_this();
        let unix = self.gw.wall().unix_secs(now);
        let up = self.up.as_ref().expect("upstream in progress");
        let req = self.req.as_mut().expect("request in progress");
        req.committed = true;
        req.first_byte = Some(now);
        if req.chat.as_ref().is_some_and(|c| c.stream) {
            self.gw.metrics().stream_open(1);
        }
        let ct = up
            .head
            .as_ref()
            .and_then(|h| h.content_type.as_deref())
            .unwrap_or("text/event-stream");
        write::status_line(out, 200);
        common_headers(out, &req.id, unix, close || req.http10);
        header(out, "Content-Type", ct);
        header(out, "Cache-Control", "no-cache");
        if !req.http10 {
            header(out, "Transfer-Encoding", "chunked");
        }
        if let Some(s) = &req.limit_status {
            limit_headers(out, s);
        }
        write::end_head(out);
    }

    fn finish_stream(&mut self, now: Instant, end: StreamEnd) {
        let tail = self.gw.config().timeouts.stream_tail;
        if matches!(end, StreamEnd::Ended) {
            self.forward_events(now, Some(end), tail);
        } else {
            let req = self.req.as_ref().expect("request in progress");
            if !req.committed {
                let (fault, why) = match end {
                    StreamEnd::Failed(f, w) => (f, w),
                    _ => (UpstreamFault::TailTimeout, "the provider stopped"),
                };
                let msg = format!("The provider failed before streaming: {why}.");
                return self.upstream_error_response(now, ApiError::upstream(fault, msg));
            }
            self.end_stream(now, end, Vec::new());
        }
    }

    /// Ends a committed (or just committing) stream: `[DONE]` if the provider
    /// did not send it, the last chunk, the ledger line first.
    fn end_stream(&mut self, now: Instant, end: StreamEnd, mut bytes: Vec<u8>) {
        let next = self
            .up
            .as_ref()
            .map_or(StreamConnection::Close, |u| u.after_stream(&end));
        let up = match next {
            StreamConnection::Release => self.release_upstream(),
            StreamConnection::Close => self.close_upstream(),
            StreamConnection::Drain => {
                // No event yet: the connection stays with the runtime,
                // which keeps reading it (see `drain_data`).
                let mut up = self.up.take().expect("upstream in progress");
                match up.decoder.take() {
                    Some(decoder) => {
                        self.drain = Some(Drain {
                            decoder,
                            deadline: now + UPSTREAM_DRAIN,
                        });
                    }
                    None => self.events.push_back(Event::CloseUpstream),
                }
                up
            }
        };
        // A stream without a single event was answered with an error
        // instead (see `forward_events`): the head went out.
        debug_assert!(self.req.as_ref().is_some_and(|r| r.committed));
        let chunked = !self.req.as_ref().expect("request").http10;
        if !up.tracker.is_done() {
            client_body(&mut bytes, DONE_EVENT, chunked);
        }
        if chunked {
            write::last_chunk(&mut bytes);
        }
        let mut rec = self.record(now, 200);
        rec.finish_reason = up.tracker.finish_reason().map(str::to_owned);
        rec.complete = up.tracker.is_complete();
        match end {
            StreamEnd::Failed(fault, _) => rec.error = Some(fault.as_str().to_owned()),
            StreamEnd::Tail => rec.error = Some(UpstreamFault::TailTimeout.as_str().to_owned()),
            StreamEnd::Shutdown => rec.error = Some("shutdown".to_owned()),
            StreamEnd::Ended if up.tracker.error().is_some() => {
                rec.error = Some(UpstreamFault::ErrorEvent.as_str().to_owned());
            }
            StreamEnd::Ended => {}
        }
        let usage = up.tracker.usage().unwrap_or_default();
        self.meter(&mut rec, &usage);
        self.settle(now, up.tracker.usage());
        self.emit_ledger(now, rec, bytes);
        let close = self.closing_after_this() || !chunked;
        self.end_response(close);
    }

    /// A 502/504 for the current request; closes (or releases) the provider
    /// connection.
    fn upstream_error_response(&mut self, now: Instant, err: ApiError) {
        let reusable = self.up.as_ref().is_some_and(|u| {
            u.state == UpState::ErrorBody
                && u.decoder.as_ref().is_some_and(BodyDecoder::is_done)
                && u.head.as_ref().is_some_and(|h| h.keep_alive)
                && !u.trailing_garbage
        });
        if reusable {
            self.release_upstream();
        } else {
            self.close_upstream();
        }
        self.respond_error(now, err, false);
    }

    /// Connect failure, or the provider closed/failed before its head.
    fn upstream_failed_early(&mut self, now: Instant, fault: UpstreamFault, why: String) {
        let up = self.up.as_mut().expect("upstream in progress");
        let req = self.req.as_mut().expect("request in progress");
        if up.reused && !up.received && up.state == UpState::AwaitingHead && req.attempts < 2 {
            // A pooled connection the provider had closed: retry once on a
            // new one. Nothing was received, so nothing was processed.
            req.attempts += 1;
            let connect = self.gw.config().timeouts.upstream_connect;
            let max_sse = self.gw.config().max_sse_event;
            self.events.push_back(Event::CloseUpstream);
            self.up = Some(Box::new(Upstream::new(now + connect, max_sse)));
            self.events
                .push_back(Event::ConnectUpstream { fresh: true });
            return;
        }
        let partial = up.state == UpState::AwaitingHead && !up.inbuf.is_empty();
        let msg = if partial {
            "The provider closed the connection in the middle of its response head.".to_owned()
        } else {
            format!("{why}.")
        };
        self.upstream_error_response(now, ApiError::upstream(fault, msg));
    }

    fn upstream_timeout(&mut self, now: Instant) {
        let Some(up) = self.up.as_ref() else { return };
        if up.tail_deadline.is_some_and(|d| now >= d) {
            return self.finish_stream(now, StreamEnd::Tail);
        }
        if now < up.deadline {
            return;
        }
        match up.state {
            UpState::Connecting => {
                let e = ApiError::upstream(
                    UpstreamFault::Connect,
                    "Timed out connecting to the provider.",
                );
                self.upstream_error_response(now, e);
            }
            UpState::AwaitingHead => {
                let e = ApiError::upstream_timeout("The provider did not answer in time.");
                self.upstream_error_response(now, e);
            }
            UpState::Body | UpState::ErrorBody => {
                let e = ApiError::upstream_timeout("The provider stopped sending its answer.");
                self.upstream_error_response(now, e);
            }
            UpState::Streaming => {
                if self.req.as_ref().is_some_and(|r| r.committed) {
                    self.finish_stream(
                        now,
                        StreamEnd::Failed(UpstreamFault::Stalled, "the provider's stream stalled"),
                    );
                } else {
                    let e =
                        ApiError::upstream_timeout("The provider did not start streaming in time.");
                    self.upstream_error_response(now, e);
                }
            }
        }
    }

    /// The client left while the provider was working: abort it, meter what
    /// was reported, close.
    fn client_gone(&mut self, now: Instant) {
        let up = self.close_upstream();
        let committed = self.req.as_ref().is_some_and(|r| r.committed);
        let status = if committed { 200 } else { STATUS_CLIENT_CLOSED };
        let mut rec = self.record(now, status);
        rec.client_disconnected = true;
        rec.finish_reason = up.tracker.finish_reason().map(str::to_owned);
        rec.complete = up.tracker.is_complete();
        let usage = up.tracker.usage();
        self.meter(&mut rec, &usage.unwrap_or_default());
        self.settle(now, usage);
        self.emit_ledger(now, rec, Vec::new());
    }

    /// Bytes from a provider connection drained after `[DONE]`: only the
    /// rest of the chunked framing may come. Its end returns the connection
    /// to the pool; a body byte (data after `[DONE]`, ignored), bytes after
    /// the end, or broken framing close it.
    fn drain_data(&mut self, data: &[u8]) {
        let Some(drain) = self.drain.as_mut() else {
            return;
        };
        // Stays empty (no allocation) unless the provider sends data.
        let mut body = Vec::new();
        match drain.decoder.decode(data, &mut body) {
            Ok(used) if used == data.len() && body.is_empty() => {
                if drain.decoder.is_done() {
                    self.end_drain(true, "");
                }
            }
            Ok(_) => self.end_drain(false, "data came after [DONE]"),
            Err(_) => self.end_drain(false, "its framing is invalid"),
        }
    }

    /// Ends a pending drain: the connection goes back to the pool when
    /// `reusable`, else it is closed (`why` says why, for the debug log).
    fn end_drain(&mut self, reusable: bool, why: &str) {
        if self.drain.take().is_none() {
            return;
        }
        if reusable {
            self.events.push_back(Event::ReleaseUpstream);
        } else {
            tracing::debug!(
                reason = why,
                "provider connection closed while draining after [DONE]"
            );
            self.events.push_back(Event::CloseUpstream);
        }
    }

    fn release_upstream(&mut self) -> Box<Upstream> {
        self.events.push_back(Event::ReleaseUpstream);
        self.up.take().expect("upstream in progress")
    }

    fn close_upstream(&mut self) -> Box<Upstream> {
        self.events.push_back(Event::CloseUpstream);
        self.up.take().expect("upstream in progress")
    }

    // ------------------------------------------------------------------
    // Metering and output

    fn record(&self, now: Instant, status: u16) -> LedgerRecord {
        let req = self.req.as_ref().expect("a record is for a request");
        let key = req.key.as_ref().map_or("", |k| k.name.as_str());
        let mut rec = LedgerRecord::new(self.gw.wall().unix_ms(now), &req.id, key);
        if let Some(chat) = &req.chat {
            rec.model = chat.model.clone();
            rec.stream = chat.stream;
        } else if let Some((model, stream)) = &req.peeked {
            rec.model = model.clone();
            rec.stream = *stream;
        }
        rec.status = status;
        rec.upstream_status = req.upstream_status;
        rec.duration_ms = (now - req.started).as_millis() as u64;
        rec.ttfb_ms = req.first_byte.map(|t| (t - req.started).as_millis() as u64);
        rec
    }

    fn price(&self) -> Price {
        let req = self.req.as_ref().expect("request");
        req.chat
            .as_ref()
            .and_then(|c| self.gw.config().catalog.get(&c.model))
            .map_or(Price::DEFAULT, |m| m.price)
    }

    fn meter(&self, rec: &mut LedgerRecord, usage: &Usage) {
        rec.meter(usage, &self.price());
    }

    /// Replaces the token reservation by what was metered.
    fn settle(&mut self, now: Instant, usage: Option<Usage>) {
        let req = self.req.as_mut().expect("request");
        let Some(key) = &req.key else { return };
        if req.reserved == 0 && usage.is_none() {
            return;
        }
        let used = usage.map_or(0, |u| u.prompt_tokens.saturating_add(u.completion_tokens));
        if req.shared {
            self.events.push_back(Event::Settle {
                key: key.name.clone(),
                limits: key.limits,
                reserved: req.reserved,
                used,
            });
        } else {
            self.gw
                .limiter()
                .settle(&key.name, key.limits, req.reserved, used, now);
        }
        req.reserved = 0;
    }

    fn emit_ledger(&mut self, now: Instant, rec: LedgerRecord, held: Vec<u8>) {
        self.observe_metered(now, &rec);
        self.events.push_back(Event::Ledger(Box::new(rec)));
        self.held = held;
        self.awaiting_ledger = true;
    }

    /// Takes the client output buffer to append to in place; give it back
    /// with [`Connection::put_client_out`].
    fn take_client_out(&mut self) -> Vec<u8> {
        if self.cout_pos == self.cout.len() {
            self.cout.clear();
            self.cout_pos = 0;
        }
        std::mem::take(&mut self.cout)
    }

    /// Gives the output buffer back; the send deadline starts when bytes
    /// are waiting and none was running.
    fn put_client_out(&mut self, now: Instant, out: Vec<u8>) {
        self.cout = out;
        if self.cout_pos < self.cout.len() && self.send_deadline.is_none() {
            self.send_deadline = Some(now + self.gw.config().timeouts.client_send);
        }
    }

    fn push_client(&mut self, now: Instant, bytes: &[u8]) {
        if bytes.is_empty() || self.phase == Phase::Closed && self.close_emitted {
            return;
        }
        if self.cout_pos == self.cout.len() {
            self.cout.clear();
            self.cout_pos = 0;
            self.send_deadline = Some(now + self.gw.config().timeouts.client_send);
        }
        self.cout.extend_from_slice(bytes);
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
                        self.phase = Phase::Closed;
                        continue;
                    }
                    self.phase = Phase::Head;
                    self.head_started = None;
                    self.idle_since = now;
                    self.process_client(now);
                }
                Phase::Head if self.close_after && self.head_started.is_none() && flushed => {
                    self.phase = Phase::Closed;
                    continue;
                }
                Phase::Closed if flushed && !self.close_emitted && self.admitting.is_none() => {
                    self.end_drain(false, "the client connection closes");
                    self.close_emitted = true;
                    self.events.push_back(Event::CloseClient);
                }
                _ => {}
            }
            break;
        }
    }

    /// Metrics of a metered (ledger) request.
    fn observe_metered(&self, now: Instant, rec: &LedgerRecord) {
        let m = self.gw.metrics();
        let req = self.req.as_ref().expect("a record is for a request");
        m.finished(Finished {
            key: &rec.key,
            status: rec.status,
            stream: rec.stream,
            total: now - req.started,
            // Without a streamed head, the first byte left with the rest.
            ttfb: Some(req.first_byte.unwrap_or(now) - req.started),
            provider: req.up_started.map_or(Duration::ZERO, |s| now - s),
        });
        m.metered(
            &rec.key,
            Metered {
                prompt: rec.prompt_tokens,
                completion: rec.completion_tokens,
                reasoning: rec.reasoning_tokens,
                cached: rec.cached_tokens,
                cost_nano_usd: rec.cost_nano_usd,
            },
        );
        if let Some(fault) = rec
            .error
            .as_deref()
            .and_then(|e| UpstreamFault::ALL.into_iter().find(|f| f.as_str() == e))
        {
            m.upstream_error(fault);
        }
        if rec.stream && req.committed {
            m.stream_open(-1);
            if !rec.complete {
                m.incomplete_stream();
            }
        }
        if rec.client_disconnected {
            m.client_disconnect();
        }
    }

    /// The access line of a request that is not metered. A metered one's
    /// line is written by the runtime from its ledger record
    /// ([`LedgerRecord::access_fields`]), after the ledger append.
    fn access_log(&self, now: Instant, status: u16, error: Option<&str>) {
        if self.is_metered() {
            return;
        }
        {
            let req = self.req.as_ref();
            self.gw.metrics().finished(Finished {
                key: req
                    .and_then(|r| r.key.as_ref())
                    .map_or("", |k| k.name.as_str()),
                status,
                stream: false,
                total: req.map_or(Duration::ZERO, |r| now - r.started),
                ttfb: req.map(|r| now - r.started),
                provider: Duration::ZERO,
            });
        }
        let Some(req) = &self.req else {
            tracing::info!(target: "chatgate::access", status, error = error.unwrap_or(""), "request rejected before parsing");
            return;
        };
        tracing::info!(
            target: "chatgate::access",
            request_id = req.id.as_str(),
            key = req.key.as_ref().map_or("-", |k| k.name.as_str()),
            method = req.method.as_str(),
            path = req.path.as_str(),
            status,
            error = error.unwrap_or(""),
            duration_ms = (now - req.started).as_millis() as u64,
            "request"
        );
    }
}

impl Upstream {
    /// What becomes of the connection when its stream ended with `end`.
    /// Only a stream that ended by `[DONE]` or by its body's end is
    /// reusable, and only without data after `[DONE]` in the same read
    /// (what is left of the decoded body once the events up to `[DONE]`
    /// were consumed) or bytes after the body's end.
    fn after_stream(&self, end: &StreamEnd) -> StreamConnection {
        let Some(head) = self.head.as_ref() else {
            return StreamConnection::Close;
        };
        // Bytes left after the `[DONE]` event in its read: data after it.
        let data_after_done = self.done_forwarded && !self.body.is_empty();
        let clean = matches!(end, StreamEnd::Ended)
            && head.keep_alive
            && !self.trailing_garbage
            && !data_after_done;
        match &self.decoder {
            Some(d) if clean && d.is_done() => StreamConnection::Release,
            // After `[DONE]`, only the last chunk (and trailers) may still
            // come; a `Content-Length` body that is not over yet holds more
            // data, which is data after `[DONE]`.
            Some(_) if clean && self.done_forwarded && head.framing == Framing::Chunked => {
                StreamConnection::Drain
            }
            _ => StreamConnection::Close,
        }
    }

    fn new(deadline: Instant, max_sse: usize) -> Self {
        Upstream {
            state: UpState::Connecting,
            deadline,
            tail_deadline: None,
            out_pos: 0,
            reused: false,
            received: false,
            inbuf: Vec::new(),
            scanner: HeadScanner::new(),
            head: None,
            decoder: None,
            body: Vec::new(),
            framer: SseFramer::new(max_sse),
            tracker: StreamTracker::new(),
            trailing_garbage: false,
            done_forwarded: false,
        }
    }
}

/// The 429 for a key that ran into one of its limits.
fn rate_limit_error(key: &str, kind: crate::limits::LimitKind, retry_after_secs: u64) -> ApiError {
    let what = match kind {
        crate::limits::LimitKind::Requests => "requests",
        crate::limits::LimitKind::Tokens => "tokens",
    };
    ApiError::rate_limited(
        format!(
            "Rate limit reached for {what} per minute on key '{key}'. Retry after {retry_after_secs} s."
        ),
        retry_after_secs,
    )
}

/// Appends body bytes for the client: one chunk, or raw for HTTP/1.0.
fn client_body(out: &mut Vec<u8>, data: &[u8], chunked: bool) {
    if chunked {
        write::chunk(out, data);
    } else {
        out.extend_from_slice(data);
    }
}

fn common_headers(out: &mut Vec<u8>, request_id: &str, unix_secs: u64, close: bool) {
    out.extend_from_slice(b"Date: ");
    push_http_date(out, unix_secs);
    out.extend_from_slice(b"\r\n");
    header(out, "X-Request-Id", request_id);
    if close {
        header(out, "Connection", "close");
    }
}

fn limit_headers(out: &mut Vec<u8>, s: &LimitStatus) {
    header_u64(out, "x-ratelimit-limit-requests", s.limit_requests);
    header_u64(out, "x-ratelimit-limit-tokens", s.limit_tokens);
    header_u64(out, "x-ratelimit-remaining-requests", s.remaining_requests);
    header_u64(out, "x-ratelimit-remaining-tokens", s.remaining_tokens);
    out.extend_from_slice(b"x-ratelimit-reset-requests: ");
    crate::limits::push_reset(out, s.reset_requests_ms);
    out.extend_from_slice(b"\r\nx-ratelimit-reset-tokens: ");
    crate::limits::push_reset(out, s.reset_tokens_ms);
    out.extend_from_slice(b"\r\n");
}

/// Writes a complete error response (without its body for a HEAD request).
pub(crate) fn write_error(
    out: &mut Vec<u8>,
    err: &ApiError,
    request_id: &str,
    limits: Option<&LimitStatus>,
    close: bool,
    unix_secs: u64,
    head_only: bool,
) {
    let body = err.body();
    write::status_line(out, err.status);
    common_headers(out, request_id, unix_secs, close);
    header(out, "Content-Type", "application/json");
    header_u64(out, "Content-Length", body.len() as u64);
    if let Some(s) = err.retry_after {
        header_u64(out, "Retry-After", s);
    }
    if let Some(allow) = err.allow {
        header(out, "Allow", allow);
    }
    if let Some(s) = limits {
        limit_headers(out, s);
    }
    write::end_head(out);
    if !head_only {
        out.extend_from_slice(&body);
    }
}

fn http_error(e: &HttpError, limits: &HttpLimits) -> ApiError {
    match e {
        HttpError::HeadTooLarge => ApiError::headers_too_large(format!(
            "The request header block is larger than {} bytes.",
            limits.max_head
        )),
        HttpError::TooManyHeaders => ApiError::headers_too_large(format!(
            "The request has more than {} header fields.",
            limits.max_headers
        )),
        HttpError::BodyTooLarge => ApiError::request_too_large(limits.max_body),
        HttpError::UnsupportedVersion => ApiError::version_not_supported(),
        HttpError::UnsupportedExpectation => ApiError::expectation_failed(),
        other => ApiError::malformed(format!("Malformed HTTP request: {other}.")),
    }
}

/// "provider returned HTTP 400: <its message>" from an error body.
fn provider_error_message(status: u16, body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct E {
        error: Option<serde_json::Value>,
        message: Option<String>,
    }
    let detail = serde_json::from_slice::<E>(body).ok().and_then(|e| {
        match e.error {
            Some(serde_json::Value::Object(o)) => {
                o.get("message").and_then(|m| m.as_str()).map(str::to_owned)
            }
            Some(serde_json::Value::String(s)) => Some(s),
            _ => None,
        }
        .or(e.message)
    });
    let detail = detail.unwrap_or_else(|| {
        String::from_utf8_lossy(&body[..body.len().min(200)])
            .chars()
            .filter(|c| !c.is_control())
            .collect()
    });
    let detail: String = detail.chars().take(500).collect();
    if detail.trim().is_empty() {
        format!("The provider returned HTTP {status}.")
    } else {
        format!("The provider returned HTTP {status}: {detail}")
    }
}
