//! How a provider's stream ends for the client: what the body still
//! completes, a cut stream's ending (its API's last event or the chat
//! `[DONE]`, the opt-in error event before it), the ledger line first —
//! unless a continuation finishes the answer (`resume.rs`).

use super::Connection;
use super::respond::client_body;
use super::resume::Resume;
use super::upstream::AfterStream;
use crate::dialect::responses::Responses;
use crate::dialect::{End, Translator};
use crate::error::{ApiError, UpstreamFault};
use crate::http::write;
use crate::stream::DONE_EVENT;
use crate::time::Instant;

/// How a stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StreamEnd {
    /// `[DONE]`, or the body ended.
    Ended,
    /// `finish_reason` and usage arrived, then only comments for
    /// [`USAGE_TAIL`]: over, and complete.
    AfterUsage,
    /// `finish_reason` arrived and the provider did not end in time.
    Tail,
    /// The provider failed; the partial event is dropped.
    Failed(UpstreamFault, &'static str),
    /// The drain timeout passed while streaming.
    Shutdown,
}

impl Connection {
    /// The stream ended (`end`) without new bytes: forward what the body
    /// still completes, or end it here.
    pub(super) fn finish_stream(&mut self, now: Instant, end: StreamEnd) {
        if matches!(end, StreamEnd::Ended) {
            return self.forward_events(now, Some(end));
        }
        let req = self.req.as_ref().expect("request in progress");
        if !req.has_answer() {
            let (fault, why) = match end {
                StreamEnd::Failed(f, w) => (f, w),
                _ => (UpstreamFault::TailTimeout, "the provider stopped"),
            };
            let msg = format!("The provider failed before streaming: {why}.");
            return self.upstream_error_response(now, ApiError::upstream(fault, msg));
        }
        self.end_stream(now, end, Vec::new());
    }

    /// Ends a committed (or just committing) stream: `[DONE]` if the provider
    /// did not send it, the last chunk, the ledger line first.
    pub(super) fn end_stream(&mut self, now: Instant, end: StreamEnd, mut bytes: Vec<u8>) {
        if self.resume_stream(now, &end, &mut bytes) {
            return;
        }
        let next = self
            .up
            .as_ref()
            .map_or(AfterStream::Close, |u| u.after_stream(&end));
        let mut up = match next {
            AfterStream::Release => self.release_upstream(),
            AfterStream::Close => self.close_upstream(),
            // No event yet: the connection stays with the runtime, which
            // keeps reading it.
            AfterStream::ReadLeftover => self.keep_for_leftover(now),
        };
        // A stream without a single event was answered with an error
        // instead (see `forward_events`): the head went out.
        debug_assert!(self.req.as_ref().is_some_and(|r| r.committed));
        let chunked = !self.req.as_ref().expect("request").http10;
        let fault = match end {
            StreamEnd::Failed(fault, _) => Some(fault.as_str()),
            StreamEnd::Tail => Some(UpstreamFault::TailTimeout.as_str()),
            StreamEnd::Shutdown => Some("shutdown"),
            StreamEnd::Ended if up.tracker.error().is_some() => {
                Some(UpstreamFault::ErrorEvent.as_str())
            }
            StreamEnd::Ended | StreamEnd::AfterUsage => None,
        };
        let what = match &end {
            StreamEnd::Failed(_, why) => why,
            StreamEnd::Shutdown => "the gateway was shutting down",
            _ => "the provider ended the stream without a finish_reason",
        };
        let usage = up.tracker.usage();
        let total = self.total_usage(usage);
        // A restart that differed from what the client has ends the
        // stream as cut, whatever its own events said.
        let diverged = self
            .req
            .as_ref()
            .and_then(|r| r.resume.as_deref())
            .is_some_and(Resume::diverged);
        let complete = up.tracker.is_complete() && !diverged;
        let dialect = self.req.as_mut().and_then(|r| r.dialect.as_deref_mut());
        if let Some(dialect) = dialect {
            // Its last event, if the provider's `[DONE]` did not bring it.
            let last = if complete {
                End::Finished(up.tracker.finish_reason())
            } else {
                End::Failed(up.tracker.error().unwrap_or(what))
            };
            let mut t = Vec::new();
            if let Some(s) = dialect.started() {
                s.end(last, total.as_ref(), &mut t);
            }
            client_body(&mut bytes, &t, chunked);
            let object = dialect.responses().and_then(Responses::take_object);
            let run = self.is_run;
            if let Some(s) = self.req.as_mut().and_then(|r| r.storing.as_mut()) {
                s.object = object;
                if run {
                    s.events.extend_from_slice(&t);
                }
            }
        } else if !up.tracker.is_done() || up.done_held {
            // The cut stream's error event, unless the provider's own
            // error event already told the client.
            let cut = !complete && up.tracker.error().is_none();
            if cut && self.gw.config().stream_error_event {
                client_body(&mut bytes, &cut_stream_event(fault, what), chunked);
            }
            client_body(&mut bytes, DONE_EVENT, chunked);
        }
        if chunked {
            write::last_chunk(&mut bytes);
        }
        if complete {
            let answer = match self.req.as_mut().and_then(|r| r.dialect.as_deref_mut()) {
                Some(d) => d.started().and_then(Translator::take_reasoning),
                None => up.answer.take().map(|a| a.into_log()),
            };
            self.remember_answer(now, answer);
        }
        let mut rec = self.record(now, 200);
        rec.finish_reason = up
            .tracker
            .finish_reason()
            .filter(|_| !diverged)
            .map(str::to_owned);
        rec.complete = complete;
        rec.error = fault.map(str::to_owned);
        // An answer the provider ended (not one cut short) tells whether
        // it reports usage.
        let ended = matches!(
            end,
            StreamEnd::Ended | StreamEnd::AfterUsage | StreamEnd::Tail
        );
        self.meter(&mut rec, total, ended);
        self.settle_resumed(&mut rec, usage, false);
        self.emit_ledger(now, rec, bytes);
        let close = self.closing_after_this() || !chunked;
        self.end_response(close);
    }
}

/// The event `--stream-error-event` puts before the `[DONE]` of a stream
/// that ended without `finish_reason`: `data: {"error": …}` in the OpenAI
/// shape, so the official SDKs raise instead of returning a truncated
/// answer as if it were whole. Its `code` is what the ledger's `error`
/// names (`fault`), or `upstream_incomplete` when the provider itself ended
/// the stream early (the ledger then has no error, only `complete: false`).
pub(super) fn cut_stream_event(fault: Option<&'static str>, what: &str) -> Vec<u8> {
    let mut e = ApiError::upstream(
        UpstreamFault::Reset,
        format!(
            "The stream was cut before the answer was complete ({what}); the answer is truncated."
        ),
    );
    e.code = fault.unwrap_or("upstream_incomplete");
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&e.body());
    out.extend_from_slice(b"\n\n");
    out
}
