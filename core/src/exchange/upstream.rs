//! The provider connection: connecting (and the one retry on a fresh
//! connection), its response head, its failures and timeouts, a client that
//! leaves meanwhile, and the leftover framing read after `[DONE]` (the
//! request each attempt sends is built in `failover.rs`).

use std::time::Duration;

use super::ending::StreamEnd;
use super::timers::Timer;
use super::{Connection, Event, Phase, UpstreamFailure};
use crate::endpoints::Attempt;
use crate::error::{ApiError, UpstreamFault};
use crate::http::BodyDecoder;
use crate::http::{Framing, HeadScanner, HttpLimits};
use crate::http::{ResponseHead, parse_response_head};
use crate::ledger::STATUS_CLIENT_CLOSED;
use crate::sse::SseFramer;
use crate::stream::StreamTracker;
use crate::time::Instant;

/// Most bytes of a provider's error body read to build the 502 message.
const MAX_ERROR_BODY: u64 = 64 * 1024;
/// How long a provider connection is read for its leftover after `[DONE]`
/// (see [`Leftover`]). The last chunk is flushed right after `[DONE]`, so
/// it arrives within a round trip; a fixed bound, not
/// `stream_tail_timeout` (meant for a provider still generating, 30 s by
/// default), keeps a provider that never ends its body from holding a
/// connection long.
const LEFTOVER_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the provider's response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UpState {
    Connecting,
    AwaitingHead,
    Body,
    ErrorBody,
    Streaming,
}

/// The provider side of the current request.
#[derive(Debug)]
pub(super) struct Upstream {
    pub(super) state: UpState,
    pub(super) out_pos: usize,
    reused: bool,
    received: bool,
    inbuf: Vec<u8>,
    scanner: HeadScanner,
    pub(super) head: Option<ResponseHead>,
    pub(super) decoder: Option<BodyDecoder>,
    pub(super) body: Vec<u8>,
    pub(super) framer: SseFramer,
    pub(super) tracker: StreamTracker,
    /// Another API's events translated from one batch of chat events,
    /// before they are framed for the client: kept between batches, so a
    /// stream's translation grows it once, not once per batch.
    pub(super) translated: Vec<u8>,
    /// Bytes beyond the end of the response: the connection is not reusable.
    pub(super) trailing_garbage: bool,
    /// `[DONE]` was forwarded: later data is ignored.
    pub(super) done_forwarded: bool,
    /// The provider's `[DONE]` ended an answer without `finish_reason`
    /// and was held back, for a continuation to finish the answer: the
    /// stream's end writes one if none does.
    pub(super) done_held: bool,
    /// The attempt this connection serves, until its outcome is known.
    pub(super) attempt: Option<Attempt>,
    /// When the client's first byte is due from this attempt (set once
    /// connected).
    first_byte_by: Option<Instant>,
    /// A chat answer's reasoning and calls, read for the memory when its
    /// model replays reasoning (a translator keeps its own).
    pub(super) answer: Option<Box<crate::dialect::AnswerRecorder>>,
    /// A chat stream's comments before its first event (a provider's
    /// keep-alives while it queues the request), held to go out with that
    /// event: the client's stream is the provider's bytes.
    pub(super) comments: Vec<u8>,
}

impl Upstream {
    fn new(
        max_sse: usize,
        attempt: Option<Attempt>,
        answer: Option<Box<crate::dialect::AnswerRecorder>>,
    ) -> Self {
        Upstream {
            state: UpState::Connecting,
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
            translated: Vec::new(),
            comments: Vec::new(),
            trailing_garbage: false,
            done_forwarded: false,
            done_held: false,
            attempt,
            first_byte_by: None,
            answer,
        }
    }
}

/// A provider connection whose stream is over for the client (`[DONE]` was
/// forwarded) but whose chunked body has not ended yet: the last chunk (and
/// any trailers) often comes in a later read, flushed separately behind
/// TLS. This leftover is read until the body ends cleanly (then the
/// connection is pooled), and the connection is closed if anything else
/// arrives, after [`LEFTOVER_TIMEOUT`], when the client's next request
/// needs the provider, or when the client connection closes.
#[derive(Debug)]
pub(super) struct Leftover {
    decoder: BodyDecoder,
}

impl Connection {
    /// The provider connection asked for with [`Event::ConnectUpstream`] is
    /// ready; `reused` when it came from the pool.
    pub fn handle_upstream_connected(&mut self, now: Instant, reused: bool) {
        let t = self.gw.config().timeouts;
        let wait = t
            .upstream_attempt
            .map_or(t.upstream_first_byte, |a| a.min(t.upstream_first_byte));
        // Never past the first-byte timeout counted from the first attempt
        // on the model answering.
        let by = self
            .req
            .as_ref()
            .and_then(|r| r.model_started)
            .map_or(now + wait, |s| (now + wait).min(s + t.upstream_first_byte));
        if let Some(up) = self.up.as_mut().filter(|u| u.state == UpState::Connecting) {
            self.gw.metrics().upstream_connection(reused);
            up.state = UpState::AwaitingHead;
            up.reused = reused;
            up.first_byte_by = Some(by);
            self.timers.set(Timer::Upstream, by);
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
        let Some(up) = self.up.as_mut() else {
            return self.leftover_data(data);
        };
        up.received = true;
        match up.state {
            UpState::Connecting => {}
            UpState::AwaitingHead => {
                up.inbuf.extend_from_slice(data);
                self.upstream_head(now);
            }
            _ => {
                self.arm_upstream_idle(now);
                self.upstream_body(now, data);
            }
        }
        self.after(now);
    }

    /// The provider closed the connection.
    pub fn handle_upstream_eof(&mut self, now: Instant) {
        let Some(up) = self.up.as_mut() else {
            return self.end_leftover(false, "the provider closed it");
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
                let end = if up.decoder.as_mut().is_some_and(|d| d.finish().is_ok()) {
                    StreamEnd::Ended
                } else {
                    StreamEnd::Failed(UpstreamFault::Reset, "the provider's stream ended early")
                };
                self.finish_stream(now, end);
            }
        }
        self.after(now);
    }

    /// The provider connection failed (to connect, or while in use).
    pub fn handle_upstream_failure(&mut self, now: Instant, failure: UpstreamFailure) {
        let Some(up) = self.up.as_ref() else {
            return self.end_leftover(false, "it failed");
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

    /// The request was admitted: its first attempt goes to an endpoint.
    pub(super) fn start_upstream(&mut self, now: Instant) {
        let req = self.req.as_mut().expect("request in progress");
        req.up_started = Some(now);
        self.phase = Phase::Upstream;
        // The previous stream's connection is not waited for: this request
        // takes another one (from the pool or new).
        self.end_leftover(false, "the next request needs the provider");
        let started = self.begin_attempt(now);
        debug_assert!(started, "a pool has at least one endpoint");
    }

    /// A new provider side for `attempt` (or, on a fresh connection after
    /// a dead pooled one, for the current attempt), waiting for its
    /// connection.
    pub(super) fn connect_upstream(&mut self, now: Instant, fresh: bool, attempt: Option<Attempt>) {
        // A chat answer's reasoning is read for the memory only when its
        // model replays reasoning (a translator keeps its own).
        let chat = self.req.as_ref().is_some_and(|r| r.dialect.is_none());
        // A connection tried again for the same attempt keeps what its
        // record holds (a continuation's holds the client's part).
        let answer = match self.up.as_mut().and_then(|u| u.answer.take()) {
            Some(answer) => Some(answer),
            None => (chat && self.remembers()).then(Box::default),
        };
        let config = self.gw.config();
        self.up = Some(Box::new(Upstream::new(
            config.max_sse_event,
            attempt,
            answer,
        )));
        let connect = config.timeouts.upstream_connect;
        self.timers.set(Timer::Upstream, now + connect);
        if let Some(cut_at) = self.cut_at {
            self.timers.set(Timer::Cut, cut_at);
        }
        self.push_connect(fresh);
    }

    /// The provider's response head (after any interim ones).
    fn upstream_head(&mut self, now: Instant) {
        let limits = HttpLimits {
            max_head: 64 * 1024,
            max_headers: 128,
            ..HttpLimits::default()
        };
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
        self.gw
            .metrics()
            .upstream_contact(self.gw.wall().unix_ms(now));
        let req = self.req.as_mut().expect("request in progress");
        req.upstream_status = Some(head.status);
        let stream = req.chat.as_ref().is_some_and(|c| c.stream);
        let max_body = self.gw.config().max_upstream_body;
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
        up.framer = SseFramer::new(self.gw.config().max_sse_event);
        up.state = state;
        up.head = Some(head);
        if state == UpState::Streaming && self.cin_pos == self.cin.len() {
            // A stream may stay open for minutes: the request's bytes,
            // all read, need not stay with it.
            self.cin = Vec::new();
            self.cin_pos = 0;
        }
        let idle = now + self.gw.config().timeouts.upstream_idle;
        let due = match up.first_byte_by {
            // Nothing went to the client yet: the first event is due by the
            // attempt's deadline too.
            Some(by) if state == UpState::Streaming => by.min(idle),
            _ => idle,
        };
        self.timers.set(Timer::Upstream, due);
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

    /// The provider's next bytes are due within the idle timeout; before
    /// the client's first byte of a stream, also by the attempt's
    /// first-byte deadline.
    fn arm_upstream_idle(&mut self, now: Instant) {
        let idle = now + self.gw.config().timeouts.upstream_idle;
        let answering = self.req.as_ref().is_some_and(|r| r.has_answer());
        let due = match self.up.as_ref() {
            // Before the first event for the client: also a
            // continuation's, whose attempt is open until its first data.
            Some(u) if u.state == UpState::Streaming && (!answering || u.attempt.is_some()) => {
                u.first_byte_by.map_or(idle, |by| by.min(idle))
            }
            _ => idle,
        };
        self.timers.set(Timer::Upstream, due);
    }

    /// The attempt failed before the client got anything: its connection is
    /// closed (or released, when it is whole), and the request goes to
    /// another endpoint or gets `err` (502/504).
    pub(super) fn upstream_error_response(&mut self, now: Instant, err: ApiError) {
        if self.continuation_failed(now, &err) {
            return;
        }
        let reusable = self.up.as_ref().is_some_and(|u| {
            u.state == UpState::ErrorBody
                && u.decoder.as_ref().is_some_and(BodyDecoder::is_done)
                && u.head.as_ref().is_some_and(|h| h.keep_alive)
                && !u.trailing_garbage
        });
        let mut up = if reusable {
            self.release_upstream()
        } else {
            self.close_upstream()
        };
        let attempt = up.attempt.take();
        drop(up);
        if self.failed_attempt(now, &err, attempt) {
            return;
        }
        let err = self.last_error(err);
        self.respond_error(now, err, false);
    }

    /// Connect failure, or the provider closed/failed before its head.
    fn upstream_failed_early(&mut self, now: Instant, fault: UpstreamFault, why: String) {
        let up = self.up.as_mut().expect("upstream in progress");
        let req = self.req.as_mut().expect("request in progress");
        if up.reused && !up.received && up.state == UpState::AwaitingHead && req.conn_retries < 1 {
            // A pooled connection the provider had closed: retry once on a
            // new one to the same endpoint. Nothing was received, so
            // nothing was processed.
            req.conn_retries += 1;
            let attempt = up.attempt.take();
            self.events.push_back(Event::CloseUpstream);
            self.connect_upstream(now, true, attempt);
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

    /// One of the provider's deadlines passed (`timer`).
    pub(super) fn upstream_timeout(&mut self, now: Instant, timer: Timer) {
        let Some(up) = self.up.as_ref() else { return };
        match timer {
            Timer::UsageTail => return self.finish_stream(now, StreamEnd::AfterUsage),
            Timer::StreamTail => return self.finish_stream(now, StreamEnd::Tail),
            _ => {}
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
                if self.req.as_ref().is_some_and(|r| r.has_answer()) {
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

    /// The drain timeout passed with this request still waiting on the
    /// provider: end it now, metered, instead of dropping it unrecorded
    /// when the process exits.
    pub(super) fn cut_for_shutdown(&mut self, now: Instant) {
        if self.waiting_to_retry() {
            self.timers.stop(Timer::Retry);
            let e = ApiError::overloaded(
                "The gateway is shutting down and could not finish this request in time.",
            );
            return self.respond_error(now, e, true);
        }
        let Some(up) = self.up.as_ref() else { return };
        let answering = self.req.as_ref().is_some_and(|r| r.has_answer());
        // A stream the client has (a continuation may still be
        // connecting for it) ends as a stream.
        let _ = up;
        if answering {
            self.end_stream(now, StreamEnd::Shutdown, Vec::new());
        } else {
            self.close_upstream();
            let e = ApiError::overloaded(
                "The gateway is shutting down and could not finish this request in time.",
            );
            self.respond_error(now, e, true);
        }
    }

    /// The client left while the provider was working: abort it, meter what
    /// was reported, close.
    pub(super) fn client_gone(&mut self, now: Instant) {
        if self.waiting_to_retry() {
            // Between attempts: nothing to abort.
            self.timers.stop(Timer::Retry);
            // A head the first-event keep-alive sent is a 200 the client had.
            let committed = self.req.as_ref().is_some_and(|r| r.committed);
            let status = if committed { 200 } else { STATUS_CLIENT_CLOSED };
            let mut rec = self.record(now, status);
            rec.client_disconnected = true;
            return self.emit_ledger(now, rec, Vec::new());
        }
        let up = self.close_upstream();
        let committed = self.req.as_ref().is_some_and(|r| r.committed);
        let status = if committed { 200 } else { STATUS_CLIENT_CLOSED };
        let mut rec = self.record(now, status);
        rec.client_disconnected = true;
        rec.finish_reason = up.tracker.finish_reason().map(str::to_owned);
        rec.complete = up.tracker.is_complete();
        let usage = up.tracker.usage();
        let total = self.total_usage(usage);
        self.meter(&mut rec, total, false);
        self.settle_resumed(&mut rec, usage, true);
        self.emit_ledger(now, rec, Vec::new());
    }

    /// Keeps the provider connection after its stream ended for the
    /// client, to read its leftover (see [`Leftover`]).
    pub(super) fn keep_for_leftover(&mut self, now: Instant) -> Box<Upstream> {
        let mut up = self.take_upstream();
        match up.decoder.take() {
            Some(decoder) => {
                self.leftover = Some(Leftover { decoder });
                self.timers.set(Timer::Leftover, now + LEFTOVER_TIMEOUT);
            }
            None => self.events.push_back(Event::CloseUpstream),
        }
        up
    }

    /// Bytes from a provider connection read for its leftover after
    /// `[DONE]`: only the rest of the chunked framing may come. Its end
    /// returns the connection to the pool; a body byte (data after
    /// `[DONE]`, ignored), bytes after the end, or broken framing close it.
    fn leftover_data(&mut self, data: &[u8]) {
        let Some(leftover) = self.leftover.as_mut() else {
            return;
        };
        // Stays empty (no allocation) unless the provider sends data.
        let mut body = Vec::new();
        match leftover.decoder.decode(data, &mut body) {
            Ok(used) if used == data.len() && body.is_empty() => {
                if leftover.decoder.is_done() {
                    self.end_leftover(true, "");
                }
            }
            Ok(_) => self.end_leftover(false, "data came after [DONE]"),
            Err(_) => self.end_leftover(false, "its framing is invalid"),
        }
    }

    /// Stops reading a leftover: the connection goes back to the pool when
    /// `reusable`, else it is closed (`why` says why, for the debug log).
    pub(super) fn end_leftover(&mut self, reusable: bool, why: &str) {
        if self.leftover.take().is_none() {
            return;
        }
        self.timers.stop(Timer::Leftover);
        if reusable {
            self.events.push_back(Event::ReleaseUpstream);
        } else {
            tracing::debug!(
                reason = why,
                "provider connection closed while reading its leftover after [DONE]"
            );
            self.events.push_back(Event::CloseUpstream);
        }
    }

    /// The provider side is over for this request: its deadlines stop.
    fn take_upstream(&mut self) -> Box<Upstream> {
        for timer in [
            Timer::Upstream,
            Timer::StreamTail,
            Timer::UsageTail,
            Timer::Cut,
            Timer::Ping,
        ] {
            self.timers.stop(timer);
        }
        self.up.take().expect("upstream in progress")
    }

    /// Back to the pool.
    pub(super) fn release_upstream(&mut self) -> Box<Upstream> {
        self.events.push_back(Event::ReleaseUpstream);
        self.take_upstream()
    }

    /// Closed (this aborts generation).
    pub(super) fn close_upstream(&mut self) -> Box<Upstream> {
        self.events.push_back(Event::CloseUpstream);
        self.take_upstream()
    }
}

impl Upstream {
    /// Whether the response's connection can carry another request once
    /// its stream ended with `end`: only a stream that ended by `[DONE]` or
    /// by its body's end, without data after `[DONE]` in the same read
    /// (what is left of the decoded body once the events up to `[DONE]`
    /// were consumed) or bytes after the body's end.
    pub(super) fn after_stream(&self, end: &StreamEnd) -> AfterStream {
        let Some(head) = self.head.as_ref() else {
            return AfterStream::Close;
        };
        // Bytes left after the `[DONE]` event in its read: data after it.
        let data_after_done = self.done_forwarded && !self.body.is_empty();
        let clean = matches!(end, StreamEnd::Ended)
            && head.keep_alive
            && !self.trailing_garbage
            && !data_after_done;
        match &self.decoder {
            Some(d) if clean && d.is_done() => AfterStream::Release,
            // After `[DONE]`, only the last chunk (and trailers) may still
            // come; a `Content-Length` body that is not over yet holds more
            // data, which is data after `[DONE]`.
            Some(_) if clean && self.done_forwarded && head.framing == Framing::Chunked => {
                AfterStream::ReadLeftover
            }
            _ => AfterStream::Close,
        }
    }
}

/// What becomes of the provider connection when a stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterStream {
    /// The body ended cleanly: back to the pool.
    Release,
    /// `[DONE]` came before the end of the chunked body: read the leftover.
    ReadLeftover,
    /// Not reusable.
    Close,
}
