//! A chat request's trace: the context it continues (the client's
//! `traceparent`) or starts, the `traceparent` each provider attempt is
//! sent, and at the end its spans — the server span with the GenAI
//! attributes and one client span per attempt — handed to the tracer's
//! queue. Nothing here runs without a tracer; no span is built for a trace
//! that is not sampled.

use super::Connection;
use super::request::Request;
use crate::error::ApiError;
use crate::http::RequestHead;
use crate::ledger::LedgerRecord;
use crate::time::Instant;
use crate::trace::{
    Attribute, Span, SpanContext, SpanEvent, SpanId, SpanKind, Status, TraceId, Value,
    format_traceparent,
};

/// What the gateway keeps of a chat request's trace.
#[derive(Debug)]
pub(super) struct RequestTrace {
    pub(super) trace_id: TraceId,
    /// The server span's id.
    pub(super) span_id: SpanId,
    pub(super) parent: Option<SpanContext>,
    pub(super) state: Option<String>,
    pub(super) sampled: bool,
    pub(super) attempts: Vec<AttemptTrace>,
    /// The answer's `id` and `model`, once read (sampled traces only).
    pub(super) response: Option<ResponseIds>,
    /// The request's `temperature` and `top_p` (sampled traces only).
    pub(super) sampling: Sampling,
    /// Where its turns' replayed reasoning came from.
    pub(super) replay: Option<crate::reasoning::Sources>,
}

/// The sampling parameters a request set.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct Sampling {
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
}

/// What the provider's answer says it is.
#[derive(Debug, Default)]
pub(super) struct ResponseIds {
    id: Option<String>,
    model: Option<String>,
}

impl ResponseIds {
    /// `id` and `model` from the members before `choices` (where every
    /// OpenAI-compatible provider writes them), without parsing the rest:
    /// a string member's value, read to its closing quote. An escaped
    /// value, or one not found there, is left out.
    fn read(json: &[u8]) -> ResponseIds {
        let head = match memchr::memmem::find(json, b"\"choices\"") {
            Some(i) => &json[..i],
            None => json,
        };
        let member = |name: &[u8]| -> Option<String> {
            let at = memchr::memmem::find(head, name)? + name.len();
            let rest = head[at..].trim_ascii_start().strip_prefix(b":")?;
            let rest = rest.trim_ascii_start().strip_prefix(b"\"")?;
            let end = memchr::memchr2(b'"', b'\\', rest)?;
            if rest[end] != b'"' || end > 256 {
                return None;
            }
            std::str::from_utf8(&rest[..end]).ok().map(str::to_owned)
        };
        ResponseIds {
            id: member(b"\"id\""),
            model: member(b"\"model\""),
        }
    }
}

/// One provider attempt.
#[derive(Debug)]
pub(super) struct AttemptTrace {
    pub(super) span_id: SpanId,
    pub(super) endpoint: std::sync::Arc<crate::endpoints::Endpoint>,
    /// The model id the endpoint was sent.
    pub(super) model: String,
    pub(super) started: Instant,
    /// When and how it failed (a later attempt followed, or none could).
    pub(super) failed: Option<(Instant, String, Option<u16>)>,
    /// It continues a stream cut mid-answer: how (the endpoint's
    /// `continuation`, or `restart`).
    pub(super) continues: Option<&'static str>,
}

impl RequestTrace {
    /// Reads the answer's `id` and `model` from a completion or the first
    /// data event of a stream (once, and only for a sampled trace).
    pub(super) fn note_response(&mut self, json: &[u8]) {
        if !self.sampled || self.response.is_some() {
            return;
        }
        self.response = Some(ResponseIds::read(json));
    }

    /// Notes where the turns' replayed reasoning came from.
    pub(super) fn note_replay(&mut self, sources: crate::reasoning::Sources) {
        self.replay = Some(sources);
    }

    /// Reads the validated body's `temperature` and `top_p` (only for a
    /// sampled trace: the rest of the body is skimmed, not kept).
    pub(super) fn note_request(&mut self, body: &[u8]) {
        if self.sampled {
            self.sampling = serde_json::from_slice(body).unwrap_or_default();
        }
    }

    /// The `traceparent` for the provider: the current attempt's span.
    pub(super) fn provider_traceparent(&self) -> Option<String> {
        let a = self.attempts.last()?;
        Some(format_traceparent(&self.trace_id, &a.span_id, self.sampled))
    }
}

/// What a finished request's server span says, beyond the ledger line.
pub(super) struct Ending<'a> {
    pub(super) status: u16,
    pub(super) error: Option<&'a str>,
    pub(super) record: Option<&'a LedgerRecord>,
}

impl Connection {
    /// The current request's trace id (sampled or not), for its access line.
    pub(super) fn trace_id(&self) -> Option<String> {
        let t = self.req.as_ref()?.trace.as_ref()?;
        Some(t.trace_id.hex())
    }

    /// The trace of a chat request that just arrived, when tracing is on.
    pub(super) fn open_trace(&self, head: &RequestHead) -> Option<Box<RequestTrace>> {
        let tracer = self.gw.tracer()?;
        let (parent, state) = crate::trace::client_context(head);
        let trace_id = parent.map_or_else(|| tracer.trace_id(), |p| p.trace_id);
        let sampled = tracer.settings().sampler.sample(parent.as_ref(), &trace_id);
        Some(Box::new(RequestTrace {
            trace_id,
            span_id: tracer.span_id(),
            parent,
            state,
            sampled,
            attempts: Vec::new(),
            response: None,
            sampling: Sampling::default(),
            replay: None,
        }))
    }

    /// A provider attempt starts on `endpoint`.
    pub(super) fn trace_attempt(&mut self, now: Instant) {
        let Some(tracer) = self.gw.tracer() else {
            return;
        };
        let Some(req) = self.req.as_mut() else { return };
        let (Some(t), Some(endpoint)) = (req.trace.as_mut(), req.endpoint.as_ref()) else {
            return;
        };
        let model = req
            .routes
            .as_ref()
            .map(|r| {
                endpoint
                    .config()
                    .model_name(&r.catalog().models()[req.model])
            })
            .unwrap_or_default()
            .to_owned();
        t.attempts.push(AttemptTrace {
            span_id: tracer.span_id(),
            endpoint: std::sync::Arc::clone(endpoint),
            model,
            started: now,
            failed: None,
            continues: None,
        });
    }

    /// The attempt just started continues a cut stream, `how`.
    pub(super) fn trace_continuation(&mut self, how: &'static str) {
        if let Some(a) = self
            .req
            .as_mut()
            .and_then(|r| r.trace.as_mut())
            .and_then(|t| t.attempts.last_mut())
        {
            a.continues = Some(how);
        }
    }

    /// The current attempt failed with `err` (the provider's status, if it
    /// answered).
    pub(super) fn trace_attempt_failed(
        &mut self,
        now: Instant,
        err: &ApiError,
        status: Option<u16>,
    ) {
        let Some(a) = self
            .req
            .as_mut()
            .and_then(|r| r.trace.as_mut())
            .and_then(|t| t.attempts.last_mut())
        else {
            return;
        };
        if a.failed.is_none() {
            let code = err.fault.map_or(err.code, |f| f.as_str());
            a.failed = Some((now, code.to_owned(), status));
        }
    }

    /// The request is over: its spans go to the tracer's queue (when
    /// sampled): the server span first, then one client span per attempt.
    pub(super) fn finish_trace(&mut self, now: Instant, end: Ending<'_>) {
        let Some(tracer) = self.gw.tracer() else {
            return;
        };
        let Some(req) = self.req.as_mut() else { return };
        let Some(t) = req.trace.take() else { return };
        if !t.sampled {
            return;
        }
        let wall = self.gw.wall();
        let ns = |i: Instant| wall.unix_ns(i);
        let model = req
            .chat
            .as_ref()
            .map(|c| c.model.clone())
            .or_else(|| req.peeked.as_ref().map(|(m, _)| m.clone()))
            .unwrap_or_default();
        let name = if model.is_empty() {
            "chat".to_owned()
        } else {
            format!("chat {model}")
        };
        let mut attributes = request_attributes(req, &t, &model, end.status);
        if let Some(r) = end.record {
            usage_attributes(&mut attributes, r, t.response.as_ref());
        }
        if let Some(a) = t.attempts.last() {
            // Who answered (or was asked last).
            attributes.push((
                "gen_ai.provider.name",
                Value::Str(a.endpoint.config().provider_name().to_owned()),
            ));
        }
        let events = first_byte(req, &mut attributes, ns);
        let status = server_status(&end, &mut attributes);
        let state = t.state.clone().unwrap_or_default();
        let mut spans = Vec::with_capacity(1 + t.attempts.len());
        let last = t.attempts.len().saturating_sub(1);
        for (i, a) in t.attempts.iter().enumerate() {
            let (end_at, status) = match &a.failed {
                Some((at, code, _)) => (*at, Status::Error(code.clone())),
                // The attempt that served lasts as long as the answer.
                None if i == last => (now, status.clone()),
                None => (now, Status::Unset),
            };
            let attrs = attempt_attributes(a, i, &req.id, &end, &status);
            spans.push(Span {
                trace_id: t.trace_id,
                span_id: a.span_id,
                parent: Some(t.span_id),
                parent_remote: false,
                trace_state: state.clone(),
                name: name.clone(),
                kind: SpanKind::Client,
                start_ns: ns(a.started),
                end_ns: ns(end_at),
                attributes: attrs,
                events: Vec::new(),
                status,
            });
        }
        spans.insert(
            0,
            Span {
                trace_id: t.trace_id,
                span_id: t.span_id,
                parent: t.parent.map(|p| p.span_id),
                parent_remote: t.parent.is_some(),
                trace_state: state,
                name,
                kind: SpanKind::Server,
                start_ns: ns(req.started),
                end_ns: ns(now),
                attributes,
                events,
                status,
            },
        );
        tracer.finish(spans);
    }
}

/// The server span's attributes from the request: what was asked, by whom,
/// and the status answered.
fn request_attributes(req: &Request, t: &RequestTrace, model: &str, status: u16) -> Vec<Attribute> {
    let mut attributes: Vec<Attribute> = vec![
        ("gen_ai.operation.name", Value::Str("chat".into())),
        (
            "http.request.method",
            Value::Str(req.method.as_str().into()),
        ),
        ("url.path", Value::Str(req.path.clone())),
        ("http.response.status_code", Value::Int(i64::from(status))),
        ("chatgate.request_id", Value::Str(req.id.clone())),
    ];
    if !model.is_empty() {
        attributes.push(("gen_ai.request.model", Value::Str(model.to_owned())));
    }
    if let Some(chat) = &req.chat {
        attributes.push(("gen_ai.request.stream", Value::Bool(chat.stream)));
        if let Some(m) = chat.max_tokens {
            attributes.push(("gen_ai.request.max_tokens", Value::Int(m as i64)));
        }
        if let Some(t) = t.sampling.temperature {
            attributes.push(("gen_ai.request.temperature", Value::Double(t)));
        }
        if let Some(p) = t.sampling.top_p {
            attributes.push(("gen_ai.request.top_p", Value::Double(p)));
        }
    }
    if let Some(key) = &req.key {
        attributes.push(("chatgate.key", Value::Str(key.name.clone())));
    }
    if let Some(d) = req.dialect.as_deref() {
        // The client's API, when it is not chat completions.
        attributes.push(("chatgate.api", Value::Str(d.api().into())));
    }
    if let Some(sources) = t.replay.filter(|s| !s.is_empty()) {
        // Where the reasoning replayed to the provider came from.
        attributes.push(("chatgate.reasoning.replay", Value::Str(sources.labels())));
    }
    attributes
}

/// The server span's attributes from the metered record: tokens, cost,
/// how the answer ended, and the answer's own id and model.
fn usage_attributes(attributes: &mut Vec<Attribute>, r: &LedgerRecord, ids: Option<&ResponseIds>) {
    attributes.extend([
        (
            "gen_ai.usage.input_tokens",
            Value::Int(r.prompt_tokens as i64),
        ),
        (
            "gen_ai.usage.output_tokens",
            Value::Int(r.completion_tokens as i64),
        ),
        (
            "gen_ai.usage.reasoning.output_tokens",
            Value::Int(r.reasoning_tokens as i64),
        ),
        (
            "gen_ai.usage.cache_read.input_tokens",
            Value::Int(r.cached_tokens as i64),
        ),
        ("chatgate.cost_nano_usd", Value::Int(r.cost_nano_usd as i64)),
        (
            "chatgate.cost_usd",
            Value::Double(r.cost_nano_usd as f64 / 1e9),
        ),
        ("chatgate.complete", Value::Bool(r.complete)),
        (
            "chatgate.client_disconnected",
            Value::Bool(r.client_disconnected),
        ),
        ("chatgate.attempts", Value::Int(i64::from(r.attempts))),
    ]);
    if let Some(ids) = ids {
        if let Some(m) = &ids.model {
            attributes.push(("gen_ai.response.model", Value::Str(m.clone())));
        }
        if let Some(id) = &ids.id {
            attributes.push(("gen_ai.response.id", Value::Str(id.clone())));
        }
    }
    if let Some(f) = &r.finish_reason {
        attributes.push((
            "gen_ai.response.finish_reasons",
            Value::Strs(vec![f.clone()]),
        ));
    }
    if let Some(e) = &r.endpoint {
        attributes.push(("chatgate.endpoint", Value::Str(e.clone())));
    }
    if let Some(m) = &r.served_model {
        // A fallback answered.
        attributes.push(("chatgate.served_model", Value::Str(m.clone())));
    }
    if r.stream && r.status == 200 && !r.complete {
        attributes.push(("chatgate.incomplete_stream", Value::Bool(true)));
    }
}

/// The time to the first byte, as an attribute and as the server span's
/// event (none when the client got nothing).
fn first_byte(
    req: &Request,
    attributes: &mut Vec<Attribute>,
    ns: impl Fn(Instant) -> u64,
) -> Vec<SpanEvent> {
    let Some(first) = req.first_byte else {
        return Vec::new();
    };
    let ttfb = first - req.started;
    attributes.push((
        "gen_ai.response.time_to_first_chunk",
        Value::Double(ttfb.as_secs_f64()),
    ));
    vec![SpanEvent {
        time_ns: ns(first),
        name: "first_byte",
        attributes: vec![("chatgate.ttfb_ms", Value::Int(ttfb.as_millis() as i64))],
    }]
}

/// The server span's status: the error code (also as `error.type`), an
/// HTTP error status, or a stream that ended without `[DONE]`.
fn server_status(end: &Ending<'_>, attributes: &mut Vec<Attribute>) -> Status {
    let error = end.error.or(end.record.and_then(|r| r.error.as_deref()));
    let incomplete = end
        .record
        .is_some_and(|r| r.stream && r.status == 200 && !r.complete && !r.client_disconnected);
    match error {
        Some(code) => {
            attributes.push(("error.type", Value::Str(code.to_owned())));
            Status::Error(code.to_owned())
        }
        None if end.status >= 400 => {
            attributes.push(("error.type", Value::Str(end.status.to_string())));
            Status::Error(format!("HTTP {}", end.status))
        }
        None if incomplete => Status::Error("incomplete_stream".into()),
        None => Status::Unset,
    }
}

/// Attempt `i`'s client span attributes: the endpoint, the id the provider
/// was sent, the status it answered, and the error.
fn attempt_attributes(
    a: &AttemptTrace,
    i: usize,
    request_id: &str,
    end: &Ending<'_>,
    status: &Status,
) -> Vec<Attribute> {
    let target = &a.endpoint.config().target;
    let mut attrs: Vec<Attribute> = vec![
        ("gen_ai.operation.name", Value::Str("chat".into())),
        (
            "chatgate.endpoint",
            Value::Str(a.endpoint.name().to_owned()),
        ),
        ("server.address", Value::Str(target.host.clone())),
        ("server.port", Value::Int(i64::from(target.port))),
        (
            "gen_ai.provider.name",
            Value::Str(a.endpoint.config().provider_name().to_owned()),
        ),
    ];
    if !a.model.is_empty() {
        attrs.push(("gen_ai.request.model", Value::Str(a.model.clone())));
    }
    if let Some(how) = a.continues {
        attrs.push(("chatgate.continuation", Value::Str(how.to_owned())));
    }
    // The id the provider was sent (its logs name the request so).
    attrs.push((
        "http.request.header.x-request-id",
        Value::Str(crate::gateway::provider_request_id(
            request_id,
            i as u32 + 1,
        )),
    ));
    let upstream = match &a.failed {
        Some((_, _, s)) => *s,
        None => end.record.and_then(|r| r.upstream_status),
    };
    if let Some(s) = upstream {
        attrs.push(("http.response.status_code", Value::Int(i64::from(s))));
    }
    if let Status::Error(code) = status {
        attrs.push(("error.type", Value::Str(code.clone())));
    }
    attrs
}

#[cfg(test)]
mod tests {
    use super::ResponseIds;

    #[test]
    fn reads_the_answers_id_and_model_before_its_choices() {
        let r = ResponseIds::read(
            br#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model" : "m-1","choices":[{"id":"x","model":"y"}]}"#,
        );
        assert_eq!(
            (r.id.as_deref(), r.model.as_deref()),
            (Some("chatcmpl-1"), Some("m-1"))
        );
        // After choices, escaped, or not a string: left out.
        let r = ResponseIds::read(br#"{"choices":[],"id":"late","model":"m"}"#);
        assert_eq!((r.id, r.model), (None, None));
        let r = ResponseIds::read(br#"{"id":"a\"b","model":7}"#);
        assert_eq!((r.id, r.model), (None, None));
        let r = ResponseIds::read(b"not json");
        assert_eq!((r.id, r.model), (None, None));
    }
}
