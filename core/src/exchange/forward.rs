//! The provider's answer, to the client: a non-streamed body whole, a
//! stream event by event as its events complete (how it ends is
//! `ending.rs`).

use std::time::Duration;

use super::Connection;
use super::ending::{StreamEnd, cut_stream_event};
use super::respond::{client_body, common_headers, limit_headers, provider_error_message};
use super::resume::{Resume, Take};
use super::timers::Timer;
use super::upstream::UpState;
use crate::dialect::{Carry, Dialect, End, Opening, OverBudget, record_chunk};
use crate::endpoints::Outcome;
use crate::error::{ApiError, UpstreamFault};
use crate::http::BodyDecoder;
use crate::http::HttpError;
use crate::http::write::{self, header, header_u64};
use crate::reasoning::AnswerReasoning;
use crate::stream::{EventKind, StreamTracker};
use crate::time::Instant;
use crate::usage::parse_completion;
use std::sync::Arc;

/// A Messages stream whose provider sends nothing for this long gets a
/// `ping` event, as the Anthropic API sends them: the client's idle watch
/// sees the stream is alive while a reasoning model thinks in silence.
pub(super) const PING_INTERVAL: Duration = Duration::from_secs(10);

/// The most of a chat stream's comments before its first event held to
/// go out with it (a provider's keep-alives: a few dozen bytes every few
/// seconds); later ones are read and dropped.
const MAX_HELD_COMMENTS: usize = 16 << 10;

/// Stop reading the provider while this much is waiting for the client.
pub(super) const CLIENT_BACKLOG_HIGH: usize = 1 << 20;

/// After `finish_reason` and the usage chunk — the last event the
/// specification allows before `[DONE]` — a provider that sends only
/// comments (keep-alives) gets this long to end the stream; the client
/// already has its whole answer. (A provider that sent `finish_reason` but
/// no usage yet keeps the whole `stream_tail` timeout.)
const USAGE_TAIL: Duration = Duration::from_secs(2);

impl Connection {
    /// Bytes of the provider's response body.
    pub(super) fn upstream_body(&mut self, now: Instant, data: &[u8]) {
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
    pub(super) fn upstream_body_complete(&mut self, now: Instant) {
        let up = self.up.as_mut().expect("upstream in progress");
        let head = up.head.as_ref().expect("body follows head");
        if up.state == UpState::ErrorBody {
            // The provider's error body, read once: its fields for
            // `error.provider`, its message for ours.
            let provider = crate::error::ProviderError::read(head.status, &up.body);
            let mut e = ApiError::upstream(
                UpstreamFault::Rejected,
                provider_error_message(&provider, &up.body),
            );
            e.retry_after = head.retry_after_secs().map(|s| s.max(1));
            e.provider = Some(Box::new(provider));
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
        let reusable = head.keep_alive && !up.trailing_garbage;
        let mut up = if reusable {
            self.release_upstream()
        } else {
            self.close_upstream()
        };
        if let Some(attempt) = up.attempt.take() {
            attempt.first_byte(now);
            attempt.finish(Outcome::Answered, now);
        }
        let close = self.closing_after_this();
        let unix = self.gw.wall().unix_secs(now);
        let req = self.req.as_mut().expect("request in progress");
        req.first_byte.get_or_insert(now);
        if let Some(t) = req.trace.as_mut() {
            t.note_response(&up.body);
        }
        // Another API's answer: the completion in its shape.
        let carry = Carry::new(Arc::clone(self.gw.reasoning_seal()));
        let opening = Opening {
            request_id: &req.id,
            unix,
            carry: &carry,
        };
        let translated = req
            .dialect
            .as_deref()
            .map(|d| d.body(&opening, &up.body, summary.usage.as_ref()));
        if let (Some(t), Some(s)) = (&translated, req.storing.as_mut()) {
            s.object = Some(t.clone());
        }
        let (body, content_type) = match &translated {
            Some(t) => (t.as_slice(), "application/json"),
            None => (up.body.as_slice(), content_type.as_str()),
        };
        let mut out = Vec::with_capacity(512 + body.len());
        write::status_line(&mut out, 200);
        common_headers(&mut out, &req.id, unix, close);
        header(&mut out, "Content-Type", content_type);
        header_u64(&mut out, "Content-Length", body.len() as u64);
        if let Some(s) = &req.limit_status {
            limit_headers(&mut out, s);
        }
        write::end_head(&mut out);
        out.extend_from_slice(body);
        if self.remembers() {
            let mut answer = AnswerReasoning::new();
            record_chunk(&up.body, &mut answer);
            self.remember_answer(now, Some(answer));
        }
        let mut rec = self.record(now, 200);
        rec.complete = true;
        rec.finish_reason = summary.finish_reason;
        self.meter(&mut rec, summary.usage, true);
        self.emit_ledger(now, rec, out);
        self.end_response(close);
    }

    /// Bytes of a streamed body.
    fn stream_data(&mut self, now: Instant, data: &[u8]) {
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
                let why = "the provider's stream framing is invalid";
                return self
                    .forward_events(now, Some(StreamEnd::Failed(UpstreamFault::Invalid, why)));
            }
        };
        up.trailing_garbage |= used < data.len();
        let end = up
            .decoder
            .as_ref()
            .is_some_and(BodyDecoder::is_done)
            .then_some(StreamEnd::Ended);
        self.forward_events(now, end);
    }

    /// Frames complete events out of the decoded body, forwards them in one
    /// client write, and ends the stream when `[DONE]` arrived or `end` says
    /// the body is over.
    pub(super) fn forward_events(&mut self, now: Instant, mut end: Option<StreamEnd>) {
        let tail = self.gw.config().timeouts.stream_tail;
        // What a translator starting with this batch carries.
        let dialect = self.req.as_ref().is_some_and(|r| r.dialect.is_some());
        let carry = dialect.then(|| Carry {
            seal: Arc::clone(self.gw.reasoning_seal()),
            remember: self.remembers(),
        });
        // A stream that may be finished after a cut: each chunk is noted
        // (a continuation's rewritten), and an answer's `[DONE]` without
        // `finish_reason` is held back while a continuation may follow.
        let resume = self.req.as_ref().and_then(|r| r.resume.as_deref());
        let resuming = resume.is_some();
        let splicing = resume.is_some_and(Resume::splicing);
        let may_resume = resuming && self.may_resume();
        let up = self.up.as_mut().expect("upstream in progress");
        let too_large = || {
            StreamEnd::Failed(
                UpstreamFault::EventTooLarge,
                "a provider event is larger than the limit",
            )
        };
        let mut batch: Option<std::ops::Range<usize>> = None;
        // Another API's events, translated from the chat events as they
        // are framed.
        let mut translated = dialect.then(|| {
            let mut t = std::mem::take(&mut up.translated);
            t.clear();
            // Another API's events are longer than the chat events they
            // stand for (the Responses stream's about twice): reserved once.
            t.reserve(up.body.len() * 2 + 1024);
            t
        });
        // Or a continuation's chat events, rewritten.
        let mut spliced = (splicing && translated.is_none()).then(Vec::new);
        // A data event went to the client in this batch.
        let mut data_sent = false;
        // Or a chat answer, read for the memory as it passes.
        let recording = up.answer.is_some();
        // Whether the client has the response head (it goes out after the
        // loop), and the request is traced: the same for every event.
        let (committed, traced) = self
            .req
            .as_ref()
            .map_or((false, false), |r| (r.committed, r.trace.is_some()));
        // Whether the client has a provider event: before it, a failure is
        // still answered as one (another attempt, or an error), even when
        // the first-event keep-alive sent the head already.
        let answering = self.req.as_ref().is_some_and(|r| r.has_answer());
        let unix = self.gw.wall().unix_secs(now);
        // Where a `[DONE]` that ends an incomplete stream starts: the cut
        // stream's error event (when asked for) goes before it.
        let mut done_at: Option<usize> = None;
        loop {
            let next = match up.framer.next_event(&up.body) {
                Ok(Some(r)) => Some(r),
                Ok(None) if end == Some(StreamEnd::Ended) => {
                    up.framer.finish().unwrap_or_else(|_| {
                        end = Some(too_large());
                        None
                    })
                }
                Ok(None) => None,
                Err(_) => {
                    end = Some(too_large());
                    None
                }
            };
            let Some(r) = next else { break };
            let (kind, data) = up.tracker.observe_data(&up.body[r.clone()]);
            if traced
                && kind == EventKind::Data
                && let Some(t) = self.req.as_mut().and_then(|q| q.trace.as_mut())
            {
                t.note_response(&up.body[r.clone()]);
            }
            if !answering && batch.is_none() && kind == EventKind::NoData {
                // A comment (a provider's keep-alive while the request
                // waits in its queue) is not the first event: it does not
                // commit the response, so a provider that dies after only
                // comments is still failed over or answered with a JSON
                // error. A chat stream's are held (up to a bound) and go
                // out with the first event, as the provider sent them;
                // another API's stream has keep-alives of its own.
                if translated.is_none() && up.comments.len() + r.len() <= MAX_HELD_COMMENTS {
                    up.comments.extend_from_slice(&up.body[r]);
                }
                continue;
            }
            if !answering && batch.is_none() && kind == EventKind::Done {
                // `[DONE]` with no event before it (comments at most): no
                // answer, so a JSON error and another attempt, never an
                // empty 200.
                end = Some(StreamEnd::Ended);
                break;
            }
            if !answering && batch.is_none() && kind == EventKind::Error {
                // An error before anything was sent: a normal JSON error.
                let msg = format!(
                    "The provider reported an error before streaming: {}",
                    up.tracker.error().unwrap_or("unknown error")
                );
                let e = ApiError::upstream(UpstreamFault::ErrorEvent, msg);
                return self.upstream_error_response(now, e);
            }
            let mut chunk = None;
            if resuming
                && kind == EventKind::Data
                && let Some(d) = data.as_deref()
                && let Some(resume) = self.req.as_mut().and_then(|q| q.resume.as_deref_mut())
            {
                match resume.take(d) {
                    Take::Forward => {}
                    Take::Drop => continue,
                    Take::Rewritten(c) => chunk = Some(c),
                    Take::Diverged => {
                        // Not spliced: the stream ends as it was cut.
                        end = Some(resume.cut().unwrap_or(StreamEnd::Failed(
                            UpstreamFault::Invalid,
                            "the answer asked again differs from what the client has",
                        )));
                        break;
                    }
                }
            }
            // An answer's `[DONE]` without `finish_reason`, held back
            // (always in a continuation: its stream is written anew, and
            // its end writes the cut's ending).
            let held = (may_resume || splicing)
                && kind == EventKind::Done
                && !up.tracker.is_complete()
                && up.tracker.error().is_none();
            up.done_held |= held;
            batch = Some(batch.map_or(r.clone(), |b| b.start..r.end));
            let data = chunk.as_deref().or(data.as_deref());
            data_sent |= kind == EventKind::Data;
            if let Some(out) = spliced.as_mut() {
                match (kind, chunk.as_deref()) {
                    (EventKind::Data, Some(c)) => {
                        out.extend_from_slice(b"data: ");
                        out.extend_from_slice(c);
                        out.extend_from_slice(b"\n\n");
                        if let Some(answer) = up.answer.as_mut() {
                            answer.chunk(c);
                        }
                    }
                    _ if held => {}
                    _ => out.extend_from_slice(&up.body[r.clone()]),
                }
            } else if let Some(out) = translated.as_mut().filter(|_| !held) {
                let req = self.req.as_mut().expect("request in progress");
                let dialect = req
                    .dialect
                    .as_deref_mut()
                    .expect("translated for a dialect");
                let opening = Opening {
                    request_id: &req.id,
                    unix,
                    carry: carry.as_ref().expect("made for a translation"),
                };
                // The usage is the end's alone: not copied for every delta.
                let resume = req.resume.as_deref();
                let tracker = &up.tracker;
                let usage = || resume.map_or(tracker.usage(), |r| r.total(tracker.usage()));
                let event = translate_event(dialect, &opening, kind, data, tracker, usage, out);
                if event.is_err() {
                    // More than a translation keeps: the stream is over,
                    // as any invalid provider stream (and not continued:
                    // a continuation would keep more still).
                    if let Some(r) = req.resume.as_deref_mut() {
                        r.give_up();
                    }
                    end = Some(StreamEnd::Failed(
                        UpstreamFault::Invalid,
                        "the provider's answer holds more than a translation keeps",
                    ));
                    break;
                }
            } else if recording
                && let (Some(answer), Some(data), EventKind::Data) =
                    (up.answer.as_mut(), data, kind)
            {
                answer.chunk(data);
            }
            if up.tracker.is_complete() {
                if !self.timers.is_set(Timer::StreamTail) {
                    self.timers.set(Timer::StreamTail, now + tail);
                }
                // Each data event from the usage chunk on starts the short
                // tail; comments do not.
                if kind == EventKind::Data && up.tracker.usage().is_some() {
                    self.timers.set(Timer::UsageTail, now + USAGE_TAIL);
                }
            }
            if kind == EventKind::Error && translated.is_some() {
                // Another API's stream ended with its failure event: the
                // client has its last event, so the stream is over.
                end = Some(StreamEnd::Ended);
                break;
            }
            if kind == EventKind::Done {
                up.done_forwarded = true;
                end = Some(StreamEnd::Ended);
                if !up.tracker.is_complete() && up.tracker.error().is_none() {
                    done_at = Some(r.start);
                }
                break;
            }
        }
        if end.is_some() && batch.is_none() && !answering {
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
        if !answering && batch.is_some() {
            self.first_event(now);
            if !committed {
                self.stream_head(now, &mut bytes);
            }
        } else if data_sent && let Some(attempt) = self.up.as_mut().and_then(|u| u.attempt.take()) {
            // A continuation's first chunk: its attempt answered.
            attempt.first_byte(now);
            attempt.finish(Outcome::Answered, now);
        }
        let up = self.up.as_mut().expect("upstream in progress");
        let chunked = !self.req.as_ref().expect("request").http10;
        let sent = batch.is_some();
        if let Some(t) = translated {
            if batch.is_some() {
                client_body(&mut bytes, &t, chunked);
                if self.is_run {
                    // A run's events are kept with its response.
                    if let Some(s) = self.req.as_mut().and_then(|r| r.storing.as_mut()) {
                        s.events.extend_from_slice(&t);
                    }
                }
            }
            up.translated = t;
        } else if let Some(s) = spliced {
            client_body(&mut bytes, &s, chunked);
        } else if let Some(r) = batch {
            if !up.comments.is_empty() {
                client_body(&mut bytes, &up.comments, chunked);
                up.comments = Vec::new();
            }
            if up.done_held {
                // Held back: the stream's end writes it if no continuation
                // finishes the answer.
                client_body(
                    &mut bytes,
                    &up.body[r.start..done_at.unwrap_or(r.end)],
                    chunked,
                );
            } else {
                match done_at.filter(|_| self.gw.config().stream_error_event) {
                    Some(at) => {
                        client_body(&mut bytes, &up.body[r.start..at], chunked);
                        let cut = cut_stream_event(
                            None,
                            "the provider ended the stream without a finish_reason",
                        );
                        client_body(&mut bytes, &cut, chunked);
                        client_body(&mut bytes, &up.body[at..r.end], chunked);
                    }
                    None => client_body(&mut bytes, &up.body[r], chunked),
                }
            }
        }
        let n = up.framer.complete_prefix();
        up.body.drain(..n);
        up.framer.consume(n);
        if end.is_none() && sent {
            self.arm_ping(now);
        }
        match end {
            Some(end) => self.end_stream(now, end, bytes),
            None => self.put_client_out(now, bytes),
        }
    }

    /// The event the request's API writes when its provider is silent
    /// (the Messages API's `ping`).
    fn ping_event(&self) -> Option<&'static [u8]> {
        self.req.as_ref()?.dialect.as_deref()?.ping()
    }

    /// The next ping of a stream whose API pings, [`PING_INTERVAL`] from
    /// `now`.
    pub(super) fn arm_ping(&mut self, now: Instant) {
        if self.ping_event().is_some() {
            self.timers.set(Timer::Ping, now + PING_INTERVAL);
        }
    }

    /// The provider of a committed stream whose API pings was silent for
    /// [`PING_INTERVAL`]: a ping, and the next in as long.
    pub(super) fn ping(&mut self, now: Instant) {
        let req = self.req.as_ref().expect("request in progress");
        let Some(ping) = self.ping_event().filter(|_| req.committed) else {
            return;
        };
        let chunked = !req.http10;
        let mut bytes = self.take_client_out();
        client_body(&mut bytes, ping, chunked);
        self.put_client_out(now, bytes);
        self.timers.set(Timer::Ping, now + PING_INTERVAL);
    }

    /// The provider's first event reached the client: the attempt
    /// answered.
    fn first_event(&mut self, now: Instant) {
        let up = self.up.as_mut().expect("upstream in progress");
        if let Some(attempt) = up.attempt.take() {
            attempt.first_byte(now);
            attempt.finish(Outcome::Answered, now);
        }
        self.timers.stop(Timer::FirstEvent);
        let req = self.req.as_mut().expect("request in progress");
        req.first_byte = Some(now);
        req.awaiting_first_event = false;
    }

    /// The client's response head for a stream: written once, with the first
    /// event (or before it, by the first-event keep-alive).
    pub(super) fn stream_head(&mut self, now: Instant, out: &mut Vec<u8>) {
        let close = self.closing_after_this();
        let unix = self.gw.wall().unix_secs(now);
        let provider_type = self
            .up
            .as_ref()
            .and_then(|u| u.head.as_ref())
            .and_then(|h| h.content_type.clone());
        let req = self.req.as_mut().expect("request in progress");
        req.committed = true;
        if req.chat.as_ref().is_some_and(|c| c.stream) {
            self.gw.metrics().stream_open(1);
        }
        let ct = match req.dialect.as_deref() {
            Some(d) => d.stream_content_type(),
            None => provider_type.as_deref().unwrap_or("text/event-stream"),
        };
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
}

/// One chat event as the events of the request's API it stands for: a
/// chunk's deltas; `[DONE]` (or a provider's error event) as the last
/// event; a comment as the API's keep-alive, so the client's connection
/// stays alive. The stream's translator starts with its first event, as
/// `opening` says. `Err` when the answer holds more than a translation
/// keeps.
fn translate_event(
    dialect: &mut dyn Dialect,
    opening: &Opening<'_>,
    kind: EventKind,
    data: Option<&[u8]>,
    tracker: &StreamTracker,
    usage: impl FnOnce() -> Option<crate::usage::Usage>,
    out: &mut Vec<u8>,
) -> Result<(), OverBudget> {
    let end = match kind {
        EventKind::Data => None,
        EventKind::Done if tracker.is_complete() => Some(End::Finished(tracker.finish_reason())),
        EventKind::Done => Some(End::Failed(
            "the provider ended the stream without a finish_reason",
        )),
        EventKind::Error => Some(End::Failed(
            tracker.error().unwrap_or("the provider reported an error"),
        )),
        EventKind::NoData => {
            out.extend_from_slice(dialect.keep_alive());
            return Ok(());
        }
    };
    let s = dialect.stream(opening);
    match (end, data) {
        (Some(end), _) => s.end(end, usage().as_ref(), out),
        (None, Some(data)) => return s.chunk(data, out),
        (None, None) => {}
    }
    Ok(())
}
