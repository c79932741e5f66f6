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
    let fault = match chosen_fault(&ask, opts) {
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
        continuation::rest(&mut script, reasoning, content);
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
mod tests {
    use super::*;
    use chatgate_core::SseFramer;
    use chatgate_core::{EventKind, StreamTracker};

    fn events_of(plan: &Plan) -> Vec<Vec<u8>> {
        plan.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Event(e) => Some(e.clone()),
                _ => None,
            })
            .collect()
    }

    fn track(plan: &Plan) -> (Vec<EventKind>, StreamTracker, String, String) {
        let all: Vec<u8> = events_of(plan).concat();
        let mut f = SseFramer::new(1 << 22);
        let mut t = StreamTracker::new();
        let mut kinds = Vec::new();
        let mut reasoning = String::new();
        let mut content = String::new();
        while let Some(r) = f.next_event(&all).unwrap() {
            let ev = &all[r];
            kinds.push(t.observe(ev));
            if let Some(json) = ev.strip_prefix(b"data: ")
                && let Ok(v) = serde_json::from_slice::<Value>(json)
                && let Some(d) = v["choices"].get(0).map(|c| &c["delta"])
            {
                reasoning.push_str(d["reasoning_content"].as_str().unwrap_or(""));
                content.push_str(d["content"].as_str().unwrap_or(""));
            }
        }
        (kinds, t, reasoning, content)
    }

    /// A prompt cache that has seen nothing.
    fn no_cache(_: &[u64]) -> usize {
        0
    }

    /// [`plan_chat`] by a simulator that made no tool call before.
    fn chat_plan(
        body: &[u8],
        opts: &SimOptions,
        created: u64,
        seq: u64,
        seen: impl FnOnce(&[u64]) -> usize,
    ) -> Plan {
        plan_chat(body, opts, created, seq, seen, |_| None)
    }

    const ASK: &str = r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"What is two plus two?"}],"stream":true,"stream_options":{"include_usage":true}}"#;

    #[test]
    fn stream_shape_follows_the_spec() {
        let plan = chat_plan(ASK.as_bytes(), &SimOptions::default(), 1000, 1, no_cache);
        assert_eq!(
            plan,
            chat_plan(ASK.as_bytes(), &SimOptions::default(), 1000, 1, no_cache),
            "deterministic"
        );
        let evs = events_of(&plan);
        let first: Value = serde_json::from_slice(&evs[0][6..]).unwrap();
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert!(first["choices"][0]["delta"]["reasoning_content"].is_string());
        let (kinds, t, reasoning, content) = track(&plan);
        assert_eq!(kinds.last(), Some(&EventKind::Done));
        assert_eq!(t.finish_reason(), Some("stop"));
        assert!(
            content.starts_with("You said: What is two plus two?"),
            "{content}"
        );
        assert!(!reasoning.is_empty());
        let u = t.usage().unwrap();
        assert_eq!(
            u.completion_tokens,
            u.reasoning_tokens + content.split_whitespace().count() as u64
        );
        // The usage chunk is the event before [DONE] and has empty choices.
        let usage_chunk: Value = serde_json::from_slice(&evs[evs.len() - 2][6..]).unwrap();
        assert_eq!(usage_chunk["choices"], serde_json::json!([]));
        let finish_chunk: Value = serde_json::from_slice(&evs[evs.len() - 3][6..]).unwrap();
        assert_eq!(finish_chunk["choices"][0]["delta"], serde_json::json!({}));
    }

    #[test]
    fn length_with_empty_content() {
        let body = ASK.replace("\"stream\":true", "\"stream\":true,\"max_tokens\":5");
        let (_, t, reasoning, content) = track(&chat_plan(
            body.as_bytes(),
            &SimOptions::default(),
            0,
            1,
            no_cache,
        ));
        assert_eq!(t.finish_reason(), Some("length"));
        assert_eq!(content, "");
        assert_eq!(reasoning.split_whitespace().count(), 5);
        assert_eq!(t.usage().unwrap().completion_tokens, 5);
    }

    #[test]
    fn tool_round_trip() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"weather in Paris"}],
            "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}"#;
        let plan = chat_plan(body.as_bytes(), &SimOptions::default(), 0, 1, no_cache);
        let v: Value = serde_json::from_slice(&events_of(&plan)[0]).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "get_weather");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args["city"], "weather in Paris");
        let body2 = r#"{"model":"m","messages":[{"role":"user","content":"weather in Paris"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c","content":"sunny 21C"}],
            "tools":[{"type":"function","function":{"name":"get_weather"}}]}"#;
        let plan = chat_plan(body2.as_bytes(), &SimOptions::default(), 0, 1, no_cache);
        let v: Value = serde_json::from_slice(&events_of(&plan)[0]).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert!(
            v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .starts_with("The tool returned: sunny 21C")
        );
    }

    #[test]
    fn cached_tokens_are_the_seen_prefix_tokens_never_the_template() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"abcdefgh"},{"role":"assistant","content":"ok"},{"role":"user","content":"more"}]}"#;
        let opts = SimOptions {
            template_tokens: 40,
            ..SimOptions::default()
        };
        let usage = |seen: usize| {
            let mut asked = Vec::new();
            let plan = chat_plan(body.as_bytes(), &opts, 0, 1, |p: &[u64]| {
                asked = p.to_vec();
                seen
            });
            assert_eq!(asked.len(), 3, "one fingerprint per prefix");
            assert_eq!(plan.prefixes, asked, "all of them to remember");
            let v: Value = serde_json::from_slice(&events_of(&plan)[0]).unwrap();
            let u = &v["usage"];
            assert_eq!(
                u["prompt_tokens_details"]["cached_tokens"],
                u["cache_read_input_tokens"]
            );
            (
                u["prompt_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .unwrap(),
                u["prompt_tokens"].as_u64().unwrap(),
            )
        };
        // 3 + (4 + 2), + (4 + 1), + (4 + 1), + the template's 40.
        assert_eq!(usage(0), (0, 59));
        assert_eq!(usage(1), (9, 59));
        assert_eq!(usage(2), (14, 59));
        assert_eq!(usage(3), (19, 59));
        assert_eq!(usage(7), (19, 59), "never more than the messages");
        // A rejection is not answered: nothing to remember, nothing asked.
        let rejected = body.replace("]}", r#"],"x_sim":{"fault":"reject"}}"#);
        let plan = chat_plan(rejected.as_bytes(), &opts, 0, 1, |_: &[u64]| {
            panic!("a rejection asks no cache")
        });
        assert_eq!((plan.status, plan.prefixes.len()), (500, 0));
    }

    #[test]
    fn faults_from_marker_and_param() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi [[sim:fault=reject,status=429]]"}]}"#;
        let plan = chat_plan(body.as_bytes(), &SimOptions::default(), 0, 1, no_cache);
        assert_eq!((plan.status, plan.retry_after), (429, Some(2)));
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x_sim":{"fault":"reset","after":3}}"#;
        let plan = chat_plan(body.as_bytes(), &SimOptions::default(), 0, 1, no_cache);
        assert_eq!(plan.pieces.len(), 4);
        assert_eq!(plan.pieces[3], Piece::Reset);
        let body =
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"x_sim":{"fault":"nope"}}"#;
        assert_eq!(
            chat_plan(body.as_bytes(), &SimOptions::default(), 0, 1, no_cache).status,
            400
        );
    }

    /// A tool loop's request: the user, then `turns` assistant tool-call
    /// messages (each `(call id, its extra members)`) with their results.
    fn tool_loop(turns: &[(&str, &str)]) -> String {
        let mut messages = vec![r#"{"role":"system","content":"s"},{"role":"user","content":"go [[sim:calls=3,input=run {n}]]"}"#.to_owned()];
        for (id, extra) in turns {
            messages.push(format!(
                r#"{{"role":"assistant","content":null{extra},"tool_calls":[{{"id":"{id}","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}}"#
            ));
            messages.push(format!(
                r#"{{"role":"tool","tool_call_id":"{id}","content":"ok {id}"}}"#
            ));
        }
        format!(
            r#"{{"model":"m","messages":[{}],"tools":[{{"type":"function","function":{{"name":"f","parameters":{{"type":"object","properties":{{"cmd":{{"type":"string"}}}}}}}}}}]}}"#,
            messages.join(",")
        )
    }

    fn error_of(plan: &Plan) -> (u16, Value) {
        let body = match &plan.pieces[0] {
            Piece::Event(b) => serde_json::from_slice(b).unwrap(),
            other => panic!("{other:?}"),
        };
        (plan.status, body)
    }

    #[test]
    fn a_tool_turn_without_its_reasoning_is_refused_as_kimi_and_deepseek_refuse_it() {
        let body = tool_loop(&[("call_a", "")]);
        let kimi = SimOptions {
            require_reasoning_replay: Some(ReplayCheck::Kimi),
            ..SimOptions::default()
        };
        let plan = plan_chat(body.as_bytes(), &kimi, 0, 1, no_cache, |_| None);
        let (status, e) = error_of(&plan);
        assert_eq!(status, 400);
        assert_eq!(
            e,
            serde_json::json!({"error": {"message": "thinking is enabled but reasoning_content is missing in assistant tool call message at index 2", "type": "invalid_request_error"}})
        );
        let deepseek = SimOptions {
            require_reasoning_replay: Some(ReplayCheck::DeepSeek),
            ..SimOptions::default()
        };
        let plan = plan_chat(body.as_bytes(), &deepseek, 0, 1, no_cache, |_| None);
        let (status, e) = error_of(&plan);
        assert_eq!(status, 400);
        assert_eq!(
            e,
            serde_json::json!({"error": {"message": "The `reasoning_content` in the thinking mode must be passed back to the API.", "type": "invalid_request_error", "param": null, "code": "invalid_request_error"}})
        );
        // Present (even empty) for a call it does not know: answered.
        let body = tool_loop(&[("call_a", r#","reasoning_content":"""#)]);
        let plan = plan_chat(body.as_bytes(), &kimi, 0, 1, no_cache, |_| None);
        assert_eq!(plan.status, 200);
        // For a call it made: only what it produced then.
        let mine = |id: &str| (id == "call_a").then(|| "my thoughts".to_owned());
        let plan = plan_chat(body.as_bytes(), &kimi, 0, 1, no_cache, mine);
        let (status, e) = error_of(&plan);
        assert_eq!(
            (status, e["error"]["code"].as_str()),
            (400, Some("reasoning_mismatch"))
        );
        let body = tool_loop(&[("call_a", r#","reasoning_content":"my thoughts""#)]);
        assert_eq!(
            plan_chat(body.as_bytes(), &kimi, 0, 1, no_cache, mine).status,
            200
        );
        // A vLLM-like provider reads `reasoning`.
        let vllm = SimOptions {
            reasoning_field: ReasoningName::Reasoning,
            ..kimi.clone()
        };
        let plan = plan_chat(body.as_bytes(), &vllm, 0, 1, no_cache, mine);
        let (_, e) = error_of(&plan);
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("reasoning is missing")
        );
        let body = tool_loop(&[("call_a", r#","reasoning":"my thoughts""#)]);
        assert_eq!(
            plan_chat(body.as_bytes(), &vllm, 0, 1, no_cache, mine).status,
            200
        );
    }

    #[test]
    fn it_calls_tools_as_many_rounds_as_asked_and_says_what_it_produced() {
        let given = |id: &str| (id.to_owned(), r#","reasoning_content":"""#);
        let mut ids: Vec<String> = Vec::new();
        for round in 0..4 {
            let turns: Vec<(String, &str)> = ids.iter().map(|id| given(id)).collect();
            let turns: Vec<(&str, &str)> = turns.iter().map(|(a, b)| (a.as_str(), *b)).collect();
            let body = tool_loop(&turns);
            let plan = plan_chat(
                body.as_bytes(),
                &SimOptions::default(),
                0,
                1,
                no_cache,
                |_| None,
            );
            let v: Value = match &plan.pieces[0] {
                Piece::Event(b) => serde_json::from_slice(b).unwrap(),
                other => panic!("{other:?}"),
            };
            let choice = &v["choices"][0];
            if round < 3 {
                assert_eq!(choice["finish_reason"], "tool_calls", "round {round}");
                let call = &choice["message"]["tool_calls"][0];
                let args: Value =
                    serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
                assert_eq!(args["cmd"], format!("run {}", round + 1));
                let (produced_ids, reasoning) = plan.produced.clone().unwrap();
                assert_eq!(produced_ids, [call["id"].as_str().unwrap()]);
                assert_eq!(
                    reasoning,
                    choice["message"]["reasoning_content"].as_str().unwrap()
                );
                ids.push(produced_ids[0].clone());
            } else {
                assert_eq!(choice["finish_reason"], "stop");
                assert!(plan.produced.is_none());
            }
        }
        assert_eq!(ids.len(), 3);
        assert!(ids[0] != ids[1] && ids[1] != ids[2]);
    }

    #[test]
    fn reasoning_goes_out_under_the_providers_name() {
        for (name, member) in [
            (ReasoningName::Reasoning, "\"reasoning\":"),
            (
                ReasoningName::ReasoningDetails,
                "\"reasoning_details\":[{\"type\":\"reasoning.text\",\"text\":",
            ),
        ] {
            let opts = SimOptions {
                reasoning_field: name,
                ..SimOptions::default()
            };
            let plan = chat_plan(ASK.as_bytes(), &opts, 0, 1, no_cache);
            let first = String::from_utf8(events_of(&plan)[0].clone()).unwrap();
            assert!(first.contains(member), "{first}");
            assert!(!first.contains("reasoning_content"), "{first}");
            let whole = ASK.replace("\"stream\":true", "\"stream\":false");
            let plan = chat_plan(whole.as_bytes(), &opts, 0, 1, no_cache);
            let body = String::from_utf8(events_of(&plan)[0].clone()).unwrap();
            assert!(body.contains(member), "{body}");
        }
    }

    #[test]
    fn a_final_assistant_message_is_continued_with_the_rest_of_the_answer() {
        let opts = SimOptions {
            continuation: crate::Continuation::FinalAssistant,
            ..SimOptions::default()
        };
        let (_, whole, reasoning, content) =
            track(&chat_plan(ASK.as_bytes(), &opts, 0, 1, no_cache));
        let with_part = |part: Value| {
            let mut v: Value = serde_json::from_str(ASK).unwrap();
            v["messages"].as_array_mut().unwrap().push(part);
            v.to_string().into_bytes()
        };
        let whole_tokens = whole.usage().unwrap().completion_tokens;
        // Cut inside the answer (mid-word): the rest of the text, no
        // reasoning again.
        let cut = content.len() / 2;
        let part = serde_json::json!({"role": "assistant", "reasoning_content": reasoning, "content": &content[..cut]});
        let plan = chat_plan(&with_part(part), &opts, 0, 1, no_cache);
        let (kinds, t, r, c) = track(&plan);
        assert_eq!(kinds.last(), Some(&EventKind::Done));
        assert_eq!((r.as_str(), t.finish_reason()), ("", Some("stop")));
        assert_eq!(format!("{}{c}", &content[..cut]), content);
        let rest = t.usage().unwrap();
        assert!(rest.completion_tokens < whole_tokens, "{rest:?}");
        assert_eq!(rest.reasoning_tokens, 0);
        // Cut inside the reasoning: the rest of it, then the whole answer.
        let rcut = reasoning.len() / 3;
        let part =
            serde_json::json!({"role": "assistant", "reasoning_content": &reasoning[..rcut]});
        let (_, t, r, c) = track(&chat_plan(&with_part(part), &opts, 0, 1, no_cache));
        assert_eq!(format!("{}{r}", &reasoning[..rcut]), reasoning);
        assert_eq!(c, content);
        assert_eq!(t.finish_reason(), Some("stop"));
        // A server that refuses prefill: llama.cpp's 400.
        let refusing = SimOptions {
            continuation: crate::Continuation::Refuse,
            ..SimOptions::default()
        };
        let part = serde_json::json!({"role": "assistant", "content": &content[..cut]});
        let plan = chat_plan(&with_part(part), &refusing, 0, 1, no_cache);
        assert_eq!(plan.status, 400);
        // Without a mode, the same request is answered as before: the
        // part is a message like another.
        let part = serde_json::json!({"role": "assistant", "content": &content[..cut]});
        let plan = chat_plan(&with_part(part), &SimOptions::default(), 0, 1, no_cache);
        assert_eq!(plan.status, 200);
        let (_, _, _, c) = track(&plan);
        assert_ne!(format!("{}{c}", &content[..cut]), content);
    }
}
