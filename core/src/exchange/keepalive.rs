//! The first-event keep-alive (`--first-event-keepalive`): a stream whose
//! provider has sent no event for that long is committed — its `200` head
//! and a keep-alive go out — and gets another keep-alive every
//! [`KEEPALIVE_EVERY`] until the first event, so that a load balancer with
//! an idle timeout in front of the gateway (or a client's own) does not
//! cut a reasoning model that thinks in silence.
//!
//! What it gives up: before the head went out, a failure before the first
//! event is answered with a JSON error. After it, the client has a `200`,
//! so such a failure ends the stream with its API's error event (the chat
//! API's `data: {"error": …}`, whether `--stream-error-event` is on or
//! not: the client has no answer to take for a whole one). Another
//! attempt (another endpoint, a fallback) may still answer meanwhile: the
//! client has seen keep-alives only.

use std::sync::Arc;
use std::time::Duration;

use super::Connection;
use super::respond::client_body;
use super::timers::Timer;
use crate::dialect::responses::Responses;
use crate::dialect::{Carry, End, Opening};
use crate::error::{ApiError, UpstreamFault};
use crate::http::write;
use crate::time::Instant;

/// Between keep-alives, once the first went out.
pub(super) const KEEPALIVE_EVERY: Duration = Duration::from_secs(15);

/// Whether `req` is kept alive before its first event: a stream, on an
/// API whose clients can skip a keep-alive (not the Gemini API's: an
/// early head would carry nothing).
fn keeps_alive(req: &super::request::Request) -> bool {
    req.chat.as_ref().is_some_and(|c| c.stream)
        && req
            .dialect
            .as_deref()
            .is_none_or(|d| !d.keep_alive().is_empty())
}

/// The chat stream's keep-alive: an SSE comment, as providers send.
const CHAT_KEEPALIVE: &[u8] = b": keep-alive\n\n";

impl Connection {
    /// Arms the first-event keep-alive for a streamed request's first
    /// attempt, when it is on and the request's API can carry one.
    pub(super) fn arm_first_event_keepalive(&mut self, now: Instant) {
        let Some(after) = self.gw.config().timeouts.first_event_keepalive else {
            return;
        };
        if self.is_run || self.timers.is_set(Timer::FirstEvent) {
            // A background run's client is the gateway's own recorder, with
            // no balancer in front of it.
            return;
        }
        if self
            .req
            .as_deref()
            .is_some_and(|r| !r.committed && keeps_alive(r))
        {
            self.timers.set(Timer::FirstEvent, now + after);
        }
    }

    /// The provider has sent no event for the keep-alive's delay: the
    /// response is committed (once) and a keep-alive written.
    pub(super) fn first_event_keepalive(&mut self, now: Instant) {
        let Some(req) = self.req.as_deref() else {
            return;
        };
        if req.has_answer() || !keeps_alive(req) {
            return;
        }
        let (chunked, committed) = (!req.http10, req.committed);
        let keepalive = match req.dialect.as_deref() {
            Some(d) => d.keep_alive(),
            None => CHAT_KEEPALIVE,
        };
        let mut bytes = self.take_client_out();
        if !committed {
            self.stream_head(now, &mut bytes);
            let req = self.req.as_mut().expect("request in progress");
            req.awaiting_first_event = true;
            self.gw.metrics().first_event_keepalive();
        }
        client_body(&mut bytes, keepalive, chunked);
        self.put_client_out(now, bytes);
        self.timers.set(Timer::FirstEvent, now + KEEPALIVE_EVERY);
    }

    /// A request committed by the keep-alive failed before the provider's
    /// first event, with nothing left to try: its stream ends with its
    /// API's error event (and, for chat, `[DONE]`), metered as a failed
    /// `200`.
    pub(super) fn fail_committed(&mut self, now: Instant, err: ApiError) {
        self.timers.stop(Timer::FirstEvent);
        let unix = self.gw.wall().unix_secs(now);
        let carry = Carry::new(Arc::clone(self.gw.reasoning_seal()));
        let fault = err.fault.map_or(err.code, UpstreamFault::as_str);
        let mut bytes = self.take_client_out();
        let req = self.req.as_mut().expect("request in progress");
        let chunked = !req.http10;
        match req.dialect.as_deref_mut() {
            Some(d) => {
                let opening = Opening {
                    request_id: &req.id,
                    unix,
                    carry: &carry,
                };
                let mut t = Vec::new();
                d.stream(&opening)
                    .end(End::Failed(&err.message), None, &mut t);
                client_body(&mut bytes, &t, chunked);
                // A kept response is kept failed, as one that broke later.
                let object = d.responses().and_then(Responses::take_object);
                if let Some(s) = req.storing.as_mut() {
                    s.object = object;
                }
            }
            None => {
                let mut e = err.clone();
                e.code = fault;
                let mut event = b"data: ".to_vec();
                event.extend_from_slice(&e.body());
                event.extend_from_slice(b"\n\n");
                client_body(&mut bytes, &event, chunked);
                client_body(&mut bytes, crate::stream::DONE_EVENT, chunked);
            }
        }
        if chunked {
            write::last_chunk(&mut bytes);
        }
        let mut rec = self.record(now, 200);
        rec.complete = false;
        rec.error = Some(fault.to_owned());
        self.emit_ledger(now, rec, bytes);
        let close = self.closing_after_this() || !chunked;
        self.end_response(close);
    }
}
