//! The planned response to one request: status, framing, and the pieces
//! the server sends when they are due.

use std::time::Duration;

use serde_json::Value;

use crate::ask::{Ask, parse_ask};
use crate::continuation::{self, Continued};
use crate::script::{Script, script};
use crate::{Fault, ReasoningName, ReplayCheck, SimOptions};

/// One planned piece of a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Bytes of the body (chunk framing is added when sending).
    Event(Vec<u8>),
    /// Raw bytes on the wire, no framing (garbage, broken chunks).
    Raw(Vec<u8>),
    /// Reset the connection.
    Reset,
    /// Stop sending; keep the connection open.
    Stall,
    /// A comment, repeated forever.
    Heartbeat(&'static [u8]),
}

/// The whole planned response to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub status: u16,
    pub content_type: &'static str,
    pub retry_after: Option<u64>,
    /// Send a head at all (`false` for garbage and stalls before headers).
    pub send_head: bool,
    pub framing: PlanFraming,
    pub pieces: Vec<Piece>,
    pub ttft: Duration,
    pub interval: Duration,
    /// Non-zero: each event of a stream goes out in two writes this far
    /// apart (`split_ms`).
    pub split: Duration,
    /// Summary for the journal.
    pub stream: bool,
    /// The fingerprints of the request's prefixes, for the server's prompt
    /// cache to remember: empty unless the request was answered (a
    /// rejected request's prompt was never read).
    pub prefixes: Vec<u64>,
    /// The tool calls the answer makes and the reasoning it produced for
    /// them, for the server to remember (its replay check).
    pub produced: Option<(Vec<String>, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlanFraming {
    Length,
    Chunked,
    Close,
}

/// Error body in the OpenAI shape.
fn error_body(message: &str, kind: &str, code: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "error": {"message": message, "type": kind, "param": null, "code": code}
    }))
    .unwrap_or_default()
}

impl Plan {
    /// A JSON body with `Content-Length`, sent whole at `ttft`.
    pub(crate) fn json(status: u16, body: Vec<u8>, ttft: Duration) -> Plan {
        Plan {
            status,
            content_type: "application/json",
            retry_after: None,
            send_head: true,
            framing: PlanFraming::Length,
            pieces: vec![Piece::Event(body)],
            ttft,
            interval: Duration::ZERO,
            split: Duration::ZERO,
            stream: false,
            prefixes: Vec::new(),
            produced: None,
        }
    }
}

/// When a response's pieces are due.
#[derive(Debug, Clone, Copy)]
struct Timing {
    ttft: Duration,
    interval: Duration,
    split: Duration,
}

/// The identity and usage an answer carries, whichever shape it takes.
struct Answer<'a> {
    ask: &'a Ask,
    script: Script,
    id: String,
    created: u64,
    /// Prompt tokens read from the prompt cache.
    cached: u64,
}

impl Answer<'_> {
    /// The usage object after `completion` tokens, `reasoning` of them
    /// reasoning.
    fn usage_at(&self, completion: u64, reasoning: u64) -> String {
        let p = self.ask.prompt_tokens;
        let cached = self.cached.min(p);
        format!(
            "{{\"prompt_tokens\":{p},\"completion_tokens\":{completion},\"total_tokens\":{t},\"prompt_tokens_details\":{{\"cached_tokens\":{cached}}},\"completion_tokens_details\":{{\"reasoning_tokens\":{reasoning}}},\"cache_read_input_tokens\":{cached},\"cache_created_input_tokens\":0}}",
            t = p + completion,
        )
    }

    /// The final usage object.
    fn usage(&self) -> String {
        let s = &self.script;
        self.usage_at(s.completion_tokens, s.reasoning.len() as u64)
    }
}

/// Plans the response to a chat completion request: the request is read,
/// its fault chosen, and then either a response without an answer (a
/// rejection, garbage, silence), a whole completion, or a stream.
///
/// `seen` is the prompt cache, asked once and only for an answer: given
/// the fingerprints of the request's prefixes (its first 1, 2, … all
/// messages), how many messages the longest prefix seen before has (0:
/// none). Those messages' tokens are reported cached; template tokens
/// never are. The plan's `prefixes` are for the cache to remember.
///
/// `produced` gives the reasoning the simulator produced for a tool call
/// it made (by id), for the replay check.
pub(crate) fn plan_chat(
    body: &[u8],
    opts: &SimOptions,
    created: u64,
    seq: u64,
    seen: impl FnOnce(&[u64]) -> usize,
    produced: impl Fn(&str) -> Option<String>,
) -> Plan {
    // A final assistant message to continue: the answer is to the
    // conversation before it, from where it ends.
    let continued = continuation::read(body, opts.continuation, opts.reasoning_field);
    let (body, part) = match continued {
        Continued::No => (body.to_vec(), None),
        Continued::Refused(status, msg) => {
            return plan_error(
                status,
                msg,
                None,
                "invalid_request_error",
                "invalid_request",
            );
        }
        Continued::Yes {
            body,
            reasoning,
            content,
            tokens,
        } => (body, Some((reasoning, content, tokens))),
    };
    let body = body.as_slice();
    let mut ask = match parse_ask(body) {
        Ok(a) => a,
        Err(msg) => return plan_error(400, &msg, None, "invalid_request_error", "invalid_request"),
    };
    if let Some((_, _, tokens)) = &part {
        ask.prompt_tokens += tokens;
    }
    if let Some(check) = opts.require_reasoning_replay
        && let Some(refusal) = replay_refusal(&ask, check, opts.reasoning_field, produced)
    {
        return refusal;
    }
    // A continued answer is a new request: the fault its question names
    // struck the answer it continues (a runtime fault still applies).
    let fault = match chosen_fault(&ask, opts).map(|f| {
        if part.is_some() {
            opts.fault.clone()
        } else {
            f
        }
    }) {
        Ok(f) => f,
        Err(msg) => {
            return plan_error(
                400,
                &msg,
                None,
                "invalid_request_error",
                "invalid_sim_option",
            );
        }
    };
    ask.prompt_tokens += ask
        .params
        .get("template_tokens")
        .and_then(|v| v.parse().ok())
        .unwrap_or(opts.template_tokens);
    let ms = |k: &str, d: Duration| {
        ask.params
            .get(k)
            .and_then(|v| v.parse().ok())
            .map_or(d, Duration::from_millis)
    };
    let timing = Timing {
        ttft: ms("ttft_ms", opts.ttft),
        interval: ms("token_ms", opts.token_interval),
        split: ms("split_ms", Duration::ZERO),
    };
    if let Some(plan) = plan_without_answer(&ask, fault.as_ref(), timing) {
        return plan;
    }
    let cached = match seen(&ask.prefix_fingerprints).min(ask.prefix_tokens.len()) {
        0 => 0,
        k => ask.prefix_tokens[k - 1],
    };
    let mut script = script(&ask, opts);
    if let Some((reasoning, content, _)) = &part {
        continuation::rest(&mut script, reasoning, content, opts.continuation);
    }
    let answer = Answer {
        ask: &ask,
        script,
        id: format!("chatcmpl-{:016x}{:08x}", ask.seed, seq),
        created,
        cached,
    };
    let name = opts.reasoning_field;
    let plan = if !ask.stream || fault == Some(Fault::JsonForStream) {
        plan_completion(&answer, timing, name)
    } else {
        plan_stream(&answer, fault, timing, name)
    };
    let produced = answer
        .script
        .tool_call
        .as_ref()
        .map(|(id, _, _)| (vec![id.clone()], answer.script.reasoning.concat()));
    Plan {
        prefixes: std::mem::take(&mut ask.prefix_fingerprints),
        produced,
        ..plan
    }
}

/// The refusal a provider that requires its reasoning back gives a
/// request whose assistant tool-call message lacks it: Kimi's or
/// DeepSeek's status, body and wording. A message that carries reasoning
/// for calls the simulator made, other than what it produced then, is
/// refused too (with the simulator's own wording).
fn replay_refusal(
    ask: &Ask,
    check: ReplayCheck,
    name: ReasoningName,
    produced: impl Fn(&str) -> Option<String>,
) -> Option<Plan> {
    let field = name.read_back();
    for turn in &ask.tool_turns {
        let value = if field == "reasoning" {
            &turn.reasoning
        } else {
            &turn.reasoning_content
        };
        let text = value.as_ref().and_then(Value::as_str);
        let Some(text) = text else {
            let body = match check {
                ReplayCheck::Kimi => serde_json::json!({"error": {
                    "message": format!("thinking is enabled but {field} is missing in assistant tool call message at index {}", turn.index),
                    "type": "invalid_request_error"}}),
                ReplayCheck::DeepSeek => serde_json::json!({"error": {
                    "message": format!("The `{field}` in the thinking mode must be passed back to the API."),
                    "type": "invalid_request_error", "param": null, "code": "invalid_request_error"}}),
            };
            return Some(Plan::json(
                400,
                body.to_string().into_bytes(),
                Duration::ZERO,
            ));
        };
        let mine = turn.call_ids.iter().find_map(|id| produced(id));
        if let Some(mine) = mine.filter(|m| m != text) {
            let body = serde_json::json!({"error": {
                "message": format!(
                    "the {field} of the assistant tool call message at index {} is not the reasoning this model produced for those calls (expected {} characters, got {})",
                    turn.index, mine.chars().count(), text.chars().count()),
                "type": "invalid_request_error", "param": null, "code": "reasoning_mismatch"}});
            return Some(Plan::json(
                400,
                body.to_string().into_bytes(),
                Duration::ZERO,
            ));
        }
    }
    None
}

/// The request's own fault (`x_sim` or marker), else the server's.
fn chosen_fault(ask: &Ask, opts: &SimOptions) -> Result<Option<Fault>, String> {
    let param = |k: &str| ask.params.get(k).cloned();
    match ask.params.get("fault") {
        Some(name) => Fault::parse(name, &param).map(Some),
        None => Ok(opts.fault.clone()),
    }
}

/// The faults that answer without an answer: a rejection, bytes that are
/// not HTTP, silence.
fn plan_without_answer(ask: &Ask, fault: Option<&Fault>, timing: Timing) -> Option<Plan> {
    let raw = |pieces| Plan {
        status: 0,
        content_type: "",
        retry_after: None,
        send_head: false,
        framing: PlanFraming::Close,
        pieces,
        ttft: timing.ttft,
        interval: timing.interval,
        split: Duration::ZERO,
        stream: ask.stream,
        prefixes: Vec::new(),
        produced: None,
    };
    match fault? {
        Fault::Reject {
            status,
            message,
            retry_after,
        } => {
            let (kind, code) = match status {
                429 => ("rate_limit_error", "rate_limit_exceeded"),
                400..=499 => ("invalid_request_error", "invalid_request"),
                _ => ("server_error", "server_error"),
            };
            Some(plan_error(*status, message, *retry_after, kind, code))
        }
        Fault::Garbage => Some(raw(vec![Piece::Raw(
            b"SSH-2.0-definitely-not-http\r\n\x00\x01garbage\r\n\r\n".to_vec(),
        )])),
        Fault::StallHeaders => Some(raw(vec![Piece::Stall])),
        _ => None,
    }
}

/// A whole `chat.completion` body, sent when every token would have been
/// generated.
fn plan_completion(answer: &Answer<'_>, timing: Timing, name: ReasoningName) -> Plan {
    let (ask, s) = (answer.ask, &answer.script);
    let reasoning: String = s.reasoning.concat();
    let content: String = s.answer.concat();
    let mut message = format!(
        "{{\"role\":\"assistant\",\"content\":{},{}",
        if s.tool_call.is_some() {
            "null".to_owned()
        } else {
            json_str(&content)
        },
        reasoning_member(name, &reasoning)
    );
    if let Some((call_id, name, args)) = &s.tool_call {
        message.push_str(&format!(
            ",\"tool_calls\":[{{\"id\":{},\"type\":\"function\",\"function\":{{\"name\":{},\"arguments\":{}}}}}]",
            json_str(call_id),
            json_str(name),
            json_str(args)
        ));
    }
    message.push('}');
    let body = format!(
        "{{\"id\":\"{id}\",\"object\":\"chat.completion\",\"created\":{created},\"model\":{},\"system_fingerprint\":\"fp_sim\",\"choices\":[{{\"index\":0,\"message\":{message},\"logprobs\":null,\"finish_reason\":{}}}],\"usage\":{usage}}}",
        json_str(&ask.model),
        json_str(&s.finish),
        id = answer.id,
        created = answer.created,
        usage = answer.usage(),
    )
    .into_bytes();
    let tokens = s.completion_tokens.min(u64::from(u32::MAX)) as u32;
    Plan {
        stream: ask.stream,
        ..Plan::json(200, body, timing.ttft + timing.interval * tokens)
    }
}

/// A stream: its events, then what the fault does to them, then `[DONE]`
/// when the stream ends normally.
fn plan_stream(
    answer: &Answer<'_>,
    fault: Option<Fault>,
    timing: Timing,
    name: ReasoningName,
) -> Plan {
    let ask = answer.ask;
    let (mut events, before_finish) = stream_events(answer, name);
    if ask.include_usage && fault != Some(Fault::NoUsage) {
        events.push(
            format!("{}],\"usage\":{}}}\n\n", chunk_head(answer), answer.usage()).into_bytes(),
        );
    }
    let mut pieces: Vec<Piece> = events.into_iter().map(Piece::Event).collect();
    let mut framing = if ask.params.get("framing").map(String::as_str) == Some("close") {
        PlanFraming::Close
    } else {
        PlanFraming::Chunked
    };
    let done = apply_stream_fault(&mut pieces, &mut framing, fault.as_ref(), before_finish);
    if done {
        pieces.push(Piece::Event(b"data: [DONE]\n\n".to_vec()));
        if fault == Some(Fault::DataAfterDone) {
            pieces.push(Piece::Event(
                b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"}}]}\n\n"
                    .to_vec(),
            ));
            pieces.push(Piece::Event(b"data: [DONE]\n\n".to_vec()));
        }
    }
    Plan {
        status: 200,
        content_type: "text/event-stream; charset=utf-8",
        retry_after: None,
        send_head: true,
        framing,
        pieces,
        ttft: timing.ttft,
        interval: timing.interval,
        split: timing.split,
        stream: true,
        prefixes: Vec::new(),
        produced: None,
    }
}

/// `"reasoning_content":…` (or the provider's other name for it) for the
/// reasoning `text`.
fn reasoning_member(name: ReasoningName, text: &str) -> String {
    match name {
        ReasoningName::ReasoningContent => format!("\"reasoning_content\":{}", json_str(text)),
        ReasoningName::Reasoning => format!("\"reasoning\":{}", json_str(text)),
        ReasoningName::ReasoningDetails => format!(
            "\"reasoning_details\":[{{\"type\":\"reasoning.text\",\"text\":{},\"format\":\"unknown\",\"index\":0}}]",
            json_str(text)
        ),
    }
}

/// `data: {…"choices":[`, the start every chunk of the stream shares.
fn chunk_head(answer: &Answer<'_>) -> String {
    format!(
        "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"system_fingerprint\":\"fp_sim\",\"choices\":[",
        answer.id,
        answer.created,
        json_str(&answer.ask.model)
    )
}

/// Reasoning deltas, answer deltas (or a tool call), and the finish chunk;
/// also the index of the finish chunk.
fn stream_events(answer: &Answer<'_>, name: ReasoningName) -> (Vec<Vec<u8>>, usize) {
    let (ask, s) = (answer.ask, &answer.script);
    let head = chunk_head(answer);
    // Some providers report cumulative usage on every chunk instead of null.
    let usage_every = ask.include_usage
        && ask
            .params
            .get("usage_every")
            .is_some_and(|v| v == "true" || v == "1");
    let n_reasoning = s.reasoning.len() as u64;
    let sent = std::cell::Cell::new(0u64);
    let chunk = |delta: String, finish: Option<&str>| -> Vec<u8> {
        let finish = finish.map_or_else(|| "null".to_owned(), json_str);
        sent.set((sent.get() + 1).min(s.completion_tokens));
        let tail = if usage_every {
            let done = sent.get();
            format!(
                "],\"usage\":{}}}\n\n",
                answer.usage_at(done, done.min(n_reasoning))
            )
        } else if ask.include_usage {
            "],\"usage\":null}\n\n".to_owned()
        } else {
            "]}\n\n".to_owned()
        };
        format!("{head}{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}{tail}").into_bytes()
    };
    let mut events: Vec<Vec<u8>> = Vec::new();
    for (i, word) in s.reasoning.iter().enumerate() {
        let delta = if i == 0 {
            format!(
                "{{\"role\":\"assistant\",\"content\":null,{}}}",
                reasoning_member(name, word)
            )
        } else {
            format!("{{{}}}", reasoning_member(name, word))
        };
        events.push(chunk(delta, None));
    }
    let role_sent = !s.reasoning.is_empty();
    for (i, word) in s.answer.iter().enumerate() {
        let delta = if i == 0 && !role_sent {
            format!("{{\"role\":\"assistant\",\"content\":{}}}", json_str(word))
        } else {
            format!("{{\"content\":{}}}", json_str(word))
        };
        events.push(chunk(delta, None));
    }
    if let Some((call_id, name, args)) = &s.tool_call {
        let role = if role_sent {
            ""
        } else {
            "\"role\":\"assistant\",\"content\":null,"
        };
        events.push(chunk(
            format!(
                "{{{role}\"tool_calls\":[{{\"index\":0,\"id\":{},\"type\":\"function\",\"function\":{{\"name\":{},\"arguments\":\"\"}}}}]}}",
                json_str(call_id),
                json_str(name)
            ),
            None,
        ));
        let chars: Vec<char> = args.chars().collect();
        for piece in chars.chunks(8) {
            let piece: String = piece.iter().collect();
            events.push(chunk(
                format!(
                    "{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":{}}}}}]}}",
                    json_str(&piece)
                ),
                None,
            ));
        }
    }
    let before_finish = events.len();
    events.push(chunk("{}".to_owned(), Some(&s.finish)));
    (events, before_finish)
}

/// What a stream fault does to the pieces; false when the stream does not
/// end with `[DONE]`.
fn apply_stream_fault(
    pieces: &mut Vec<Piece>,
    framing: &mut PlanFraming,
    fault: Option<&Fault>,
    before_finish: usize,
) -> bool {
    let at = |after: u32, len: usize| (after as usize).min(len);
    match fault {
        Some(Fault::Pings { count, die }) => {
            let pings = (0..*count).map(|i| {
                Piece::Event(
                    format!(": ping - 2026-11-25 00:00:{:02}.000000\n\n", i % 60).into_bytes(),
                )
            });
            if *die {
                pieces.clear();
                pieces.extend(pings);
                pieces.push(Piece::Reset);
                return false;
            }
            pieces.splice(0..0, pings);
        }
        Some(Fault::Reset { after }) => {
            pieces.truncate(at(*after, pieces.len()));
            pieces.push(Piece::Reset);
        }
        Some(Fault::Stall { after }) => {
            pieces.truncate(at(*after, pieces.len()));
            pieces.push(Piece::Stall);
        }
        Some(Fault::BadChunk { after }) => {
            pieces.truncate(at(*after, pieces.len()));
            pieces.push(Piece::Raw(b"zz-not-a-chunk-size\r\n".to_vec()));
            pieces.push(Piece::Reset);
            *framing = PlanFraming::Chunked;
        }
        Some(Fault::HugeEvent { after, bytes }) => {
            let mut big = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec();
            big.resize(big.len() + bytes, b'x');
            big.extend_from_slice(b"\"}}]}\n\n");
            pieces.insert(at(*after, pieces.len()), Piece::Event(big));
            return true;
        }
        Some(Fault::OmitDone) => {}
        Some(Fault::EndEarly { after }) => {
            pieces.truncate(at(*after, pieces.len()));
            return true;
        }
        Some(Fault::ErrorEvent { after }) => {
            pieces.truncate(at(*after, pieces.len()));
            pieces.push(Piece::Event(event(&serde_json::json!({"error": {
                "message": "simulated provider error mid-stream", "type": "server_error", "code": "server_error"}}))));
        }
        Some(Fault::HeartbeatAfterFinish) => {
            pieces.truncate(before_finish + 1);
            pieces.push(Piece::Heartbeat(b": heartbeat\n\n"));
        }
        Some(Fault::KeepaliveAfterUsage) => pieces.push(Piece::Heartbeat(b": keep-alive\n\n")),
        Some(Fault::CloseAfterHeaders) => {
            pieces.clear();
            pieces.push(Piece::Reset);
        }
        _ => return true,
    }
    false
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    // Serializing a str cannot fail.
    serde_json::to_string(s).expect("string serializes")
}

fn event(v: &Value) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    // A Value always serializes.
    serde_json::to_writer(&mut out, v).expect("chunk serializes");
    out.extend_from_slice(b"\n\n");
    out
}

pub(crate) fn plan_error(
    status: u16,
    message: &str,
    retry_after: Option<u64>,
    kind: &str,
    code: &str,
) -> Plan {
    Plan {
        retry_after,
        ..Plan::json(status, error_body(message, kind, code), Duration::ZERO)
    }
}

#[cfg(test)]
mod tests;
