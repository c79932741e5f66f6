//! The simulated provider: an OpenAI-compatible reasoning model imitation.
//!
//! Deterministic: the same request gives the same answer. It thinks first
//! (`reasoning_content` deltas), then answers (`content` deltas) with words
//! derived from the prompt, then sends a finish chunk, a usage chunk when
//! `stream_options.include_usage` is set, and `[DONE]`. Given `tools` it calls
//! one (finish `tool_calls`) unless the last message is a tool result, which
//! it then answers from. A `max_tokens` below its reasoning length yields
//! `length` with empty content.
//!
//! Timing and faults are chosen per request, either by an `x_sim` object in
//! the body (the gateway forwards unknown parameters unchanged) or by a
//! `[[sim:key=value,…]]` marker in the last user message (for clients that
//! cannot add parameters), falling back to the server's [`SimOptions`]:
//!
//! | key | meaning |
//! |---|---|
//! | `fault` | `reject`, `reset`, `omit_done`, `stall_headers`, `stall`, `garbage`, `bad_chunk`, `huge_event`, `data_after_done`, `heartbeat_after_finish`, `keepalive_after_usage`, `error_event`, `no_usage`, `close_after_headers`, `json_for_stream` |
//! | `after` | events sent before `reset`, `stall`, `bad_chunk`, `error_event`, `huge_event` (default 2) |
//! | `status`, `message`, `retry_after` | for `reject` (default 500; `Retry-After` for 429) |
//! | `bytes` | size of the `huge_event` event |
//! | `ttft_ms`, `token_ms` | time to first token, time per token |
//! | `reasoning_tokens`, `answer_tokens` | lengths |
//! | `framing` | `chunked` (default for streams) or `close` |
//! | `usage_every` | `true`: cumulative usage on every chunk (with `include_usage`), as some providers do |
//! | `split_ms` | stream events go out in two writes this many milliseconds apart, split alternately in the middle and before the last byte (a provider whose events straddle reads) |

mod server;

use std::time::Duration;

use serde_json::Value;

pub use server::{JournalEntry, Outcome, SimAction, SimConnection, SimServer};

/// Server-wide defaults (the `sim` subcommand's flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimOptions {
    /// Time to first token.
    pub ttft: Duration,
    /// Time per token after the first.
    pub token_interval: Duration,
    /// Reasoning tokens; `None` derives 24–40 from the prompt.
    pub reasoning_tokens: Option<u32>,
    /// Answer tokens; `None` derives 12–24 from the prompt.
    pub answer_tokens: Option<u32>,
    /// A fault applied to every request that does not choose its own.
    pub fault: Option<Fault>,
    /// The API key the simulator requires, if any.
    pub api_key: Option<String>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            ttft: Duration::ZERO,
            token_interval: Duration::ZERO,
            reasoning_tokens: None,
            answer_tokens: None,
            fault: None,
            api_key: None,
        }
    }
}

/// A misbehaviour to imitate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with an error status and an OpenAI-style error body.
    Reject {
        /// Status code.
        status: u16,
        /// Error message.
        message: String,
        /// `Retry-After` seconds (sent with 429 and 503).
        retry_after: Option<u64>,
    },
    /// Reset the connection after `after` events.
    Reset {
        /// Events first.
        after: u32,
    },
    /// End the stream without `[DONE]`.
    OmitDone,
    /// Send nothing at all.
    StallHeaders,
    /// Stop sending after `after` events, keeping the connection open.
    Stall {
        /// Events first.
        after: u32,
    },
    /// Answer with bytes that are not HTTP, then close.
    Garbage,
    /// Break the chunked framing after `after` events.
    BadChunk {
        /// Events first.
        after: u32,
    },
    /// Send one event of `bytes` bytes after `after` events.
    HugeEvent {
        /// Events first.
        after: u32,
        /// Size of the event.
        bytes: usize,
    },
    /// Keep sending events after `[DONE]`.
    DataAfterDone,
    /// After the finish chunk, send comment heartbeats forever.
    HeartbeatAfterFinish,
    /// After the usage chunk, send `: keep-alive` comments forever (no
    /// `[DONE]`).
    KeepaliveAfterUsage,
    /// After `after` events, an error event, then end without `[DONE]`.
    ErrorEvent {
        /// Events first.
        after: u32,
    },
    /// Leave out the usage chunk.
    NoUsage,
    /// Send the response head of a stream, then close.
    CloseAfterHeaders,
    /// Answer a streaming request with a JSON body.
    JsonForStream,
}

impl Fault {
    /// Parses a fault from its name and parameters (`get` looks one up).
    pub fn parse(name: &str, get: &dyn Fn(&str) -> Option<String>) -> Result<Fault, String> {
        let num = |k: &str, d: u64| -> Result<u64, String> {
            match get(k) {
                Some(v) => v
                    .parse()
                    .map_err(|_| format!("sim option '{k}' must be a number")),
                None => Ok(d),
            }
        };
        let after = num("after", 2)? as u32;
        Ok(match name {
            "reject" => {
                let status = num("status", 500)? as u16;
                Fault::Reject {
                    status,
                    message: get("message")
                        .unwrap_or_else(|| format!("simulated rejection ({status})")),
                    retry_after: match get("retry_after") {
                        Some(v) => Some(
                            v.parse()
                                .map_err(|_| "retry_after must be a number".to_string())?,
                        ),
                        None if status == 429 || status == 503 => Some(2),
                        None => None,
                    },
                }
            }
            "reset" => Fault::Reset { after },
            "omit_done" => Fault::OmitDone,
            "stall_headers" => Fault::StallHeaders,
            "stall" => Fault::Stall { after },
            "garbage" => Fault::Garbage,
            "bad_chunk" => Fault::BadChunk { after },
            "huge_event" => Fault::HugeEvent {
                after,
                bytes: num("bytes", 2 << 20)? as usize,
            },
            "data_after_done" => Fault::DataAfterDone,
            "heartbeat_after_finish" => Fault::HeartbeatAfterFinish,
            "keepalive_after_usage" => Fault::KeepaliveAfterUsage,
            "error_event" => Fault::ErrorEvent { after },
            "no_usage" => Fault::NoUsage,
            "close_after_headers" => Fault::CloseAfterHeaders,
            "json_for_stream" => Fault::JsonForStream,
            other => return Err(format!("unknown sim fault '{other}'")),
        })
    }
}

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlanFraming {
    Length,
    Chunked,
    Close,
}

/// What the simulator understood of a request.
struct Ask {
    model: String,
    stream: bool,
    include_usage: bool,
    max_tokens: Option<u64>,
    tools: Vec<(String, Option<String>)>,
    tool_choice: Option<Value>,
    last_role: String,
    last_text: String,
    prompt_tokens: u64,
    seed: u64,
    params: std::collections::HashMap<String, String>,
}

const WORDS: [&str; 48] = [
    "consider",
    "the",
    "question",
    "carefully",
    "first",
    "then",
    "weigh",
    "each",
    "option",
    "against",
    "what",
    "is",
    "known",
    "so",
    "far",
    "and",
    "check",
    "assumptions",
    "before",
    "settling",
    "on",
    "an",
    "answer",
    "that",
    "holds",
    "up",
    "under",
    "scrutiny",
    "perhaps",
    "a",
    "simpler",
    "view",
    "helps",
    "here",
    "since",
    "details",
    "matter",
    "less",
    "than",
    "structure",
    "now",
    "combine",
    "these",
    "steps",
    "into",
    "one",
    "clear",
    "reply",
];

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// Reads `[[sim:k=v,k=v]]` from a text.
fn marker_params(text: &str, into: &mut std::collections::HashMap<String, String>) {
    if let Some(start) = text.find("[[sim:") {
        if let Some(len) = text[start + 6..].find("]]") {
            for kv in text[start + 6..start + 6 + len].split(',') {
                if let Some((k, v)) = kv.split_once('=') {
                    into.insert(k.trim().to_owned(), v.trim().to_owned());
                }
            }
        }
    }
}

fn parse_ask(body: &[u8]) -> Result<Ask, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON: {e}"))?;
    let model = v
        .get("model")
        .and_then(Value::as_str)
        .ok_or("'model' is required")?
        .to_owned();
    let messages = v
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("'messages' is required")?;
    let last = messages.last().ok_or("'messages' is empty")?;
    let mut params = std::collections::HashMap::new();
    let last_user_text = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| text_of(m.get("content").unwrap_or(&Value::Null)))
        .unwrap_or_default();
    marker_params(&last_user_text, &mut params);
    if let Some(Value::Object(o)) = v.get("x_sim") {
        for (k, val) in o {
            let s = match val {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            params.insert(k.clone(), s);
        }
    }
    let mut prompt_tokens = 3u64;
    let mut all_text = String::new();
    for m in messages {
        let t = text_of(m.get("content").unwrap_or(&Value::Null));
        let images = m.get("content").and_then(Value::as_array).map_or(0, |p| {
            p.iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("image_url"))
                .count()
        });
        prompt_tokens += 4 + (t.chars().count() as u64).div_ceil(4) + 85 * images as u64;
        all_text.push_str(&t);
        all_text.push('\n');
    }
    let tools = v
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| {
                    let f = t.get("function")?;
                    let name = f.get("name")?.as_str()?.to_owned();
                    let first_prop = f
                        .get("parameters")
                        .and_then(|p| p.get("properties"))
                        .and_then(Value::as_object)
                        .and_then(|p| p.keys().next().cloned());
                    Some((name, first_prop))
                })
                .collect()
        })
        .unwrap_or_default();
    let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    Ok(Ask {
        model,
        stream,
        include_usage: v
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        max_tokens: v
            .get("max_tokens")
            .or_else(|| v.get("max_completion_tokens"))
            .and_then(Value::as_u64),
        tools,
        tool_choice: v.get("tool_choice").cloned(),
        last_role: last
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        last_text: text_of(last.get("content").unwrap_or(&Value::Null)),
        prompt_tokens,
        seed: fnv1a(all_text.as_bytes()),
        params,
    })
}

/// Error body in the OpenAI shape.
fn error_body(message: &str, kind: &str, code: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "error": {"message": message, "type": kind, "param": null, "code": code}
    }))
    .unwrap_or_default()
}

/// The tokens of an answer, before serialization.
struct Script {
    reasoning: Vec<String>,
    answer: Vec<String>,
    tool_call: Option<(String, String, String)>,
    finish: &'static str,
    completion_tokens: u64,
}

fn script(ask: &Ask, opts: &SimOptions) -> Script {
    let mut rng = ask.seed;
    let get_u32 = |k: &str| ask.params.get(k).and_then(|v| v.parse::<u32>().ok());
    let n_reason = get_u32("reasoning_tokens")
        .or(opts.reasoning_tokens)
        .unwrap_or(24 + (ask.seed % 17) as u32) as usize;
    let n_answer = get_u32("answer_tokens")
        .or(opts.answer_tokens)
        .unwrap_or(12 + (ask.seed / 17 % 13) as u32) as usize;
    let mut reasoning: Vec<String> = (0..n_reason)
        .map(|_| {
            format!(
                "{} ",
                WORDS[(splitmix(&mut rng) % WORDS.len() as u64) as usize]
            )
        })
        .collect();
    let calls_tool = !ask.tools.is_empty()
        && ask.last_role != "tool"
        && ask.tool_choice.as_ref().and_then(Value::as_str) != Some("none");
    let mut answer: Vec<String> = Vec::new();
    let mut tool_call = None;
    if calls_tool {
        let named = ask
            .tool_choice
            .as_ref()
            .and_then(|c| c.get("function"))
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str);
        let (name, prop) = ask
            .tools
            .iter()
            .find(|(n, _)| Some(n.as_str()) == named)
            .unwrap_or(&ask.tools[0])
            .clone();
        let prop = prop.unwrap_or_else(|| "input".into());
        let text: String = ask.last_text.chars().take(64).collect();
        let args = serde_json::to_string(&serde_json::json!({ prop: text })).unwrap_or_default();
        tool_call = Some((format!("call_{:016x}", splitmix(&mut rng)), name, args));
    } else {
        let source = if ask.last_role == "tool" {
            format!("The tool returned: {}", ask.last_text)
        } else {
            format!("You said: {}", ask.last_text)
        };
        let mut words = source
            .split_whitespace()
            .map(|w| format!("{w} "))
            .collect::<Vec<_>>();
        while words.len() < n_answer {
            words.push(format!(
                "{} ",
                WORDS[(splitmix(&mut rng) % WORDS.len() as u64) as usize]
            ));
        }
        words.truncate(n_answer.max(1));
        if let Some(last) = words.last_mut() {
            let trimmed = last.trim_end().to_owned();
            *last = trimmed;
        }
        answer = words;
    }
    let tool_tokens = tool_call
        .as_ref()
        .map_or(0, |(_, _, a)| (a.len() as u64).div_ceil(4) + 4);
    let mut finish = if tool_call.is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    if let Some(cap) = ask.max_tokens {
        let cap = cap as usize;
        if cap < reasoning.len() {
            reasoning.truncate(cap);
            answer.clear();
            tool_call = None;
            finish = "length";
        } else if cap < reasoning.len() + answer.len() {
            answer.truncate(cap - reasoning.len());
            finish = "length";
        }
    }
    let completion_tokens =
        (reasoning.len() + answer.len()) as u64 + if tool_call.is_some() { tool_tokens } else { 0 };
    Script {
        reasoning,
        answer,
        tool_call,
        finish,
        completion_tokens,
    }
}

/// Plans the response to a chat completion request.
pub(crate) fn plan_chat(body: &[u8], opts: &SimOptions, created: u64, seq: u64) -> Plan {
    let ask = match parse_ask(body) {
        Ok(a) => a,
        Err(msg) => return plan_error(400, &msg, None, "invalid_request_error", "invalid_request"),
    };
    let param = |k: &str| ask.params.get(k).cloned();
    let fault = match ask.params.get("fault") {
        Some(name) => match Fault::parse(name, &param) {
            Ok(f) => Some(f),
            Err(msg) => {
                return plan_error(
                    400,
                    &msg,
                    None,
                    "invalid_request_error",
                    "invalid_sim_option",
                );
            }
        },
        None => opts.fault.clone(),
    };
    let ms = |k: &str, d: Duration| {
        param(k)
            .and_then(|v| v.parse().ok())
            .map_or(d, Duration::from_millis)
    };
    let ttft = ms("ttft_ms", opts.ttft);
    let interval = ms("token_ms", opts.token_interval);
    match &fault {
        Some(Fault::Reject {
            status,
            message,
            retry_after,
        }) => {
            let (kind, code) = match status {
                429 => ("rate_limit_error", "rate_limit_exceeded"),
                400..=499 => ("invalid_request_error", "invalid_request"),
                _ => ("server_error", "server_error"),
            };
            return plan_error(*status, message, *retry_after, kind, code);
        }
        Some(Fault::Garbage) => {
            return Plan {
                status: 0,
                content_type: "",
                retry_after: None,
                send_head: false,
                framing: PlanFraming::Close,
                pieces: vec![Piece::Raw(
                    b"SSH-2.0-definitely-not-http\r\n\x00\x01garbage\r\n\r\n".to_vec(),
                )],
                ttft,
                interval,
                split: Duration::ZERO,
                stream: ask.stream,
            };
        }
        Some(Fault::StallHeaders) => {
            return Plan {
                status: 0,
                content_type: "",
                retry_after: None,
                send_head: false,
                framing: PlanFraming::Close,
                pieces: vec![Piece::Stall],
                ttft,
                interval,
                split: Duration::ZERO,
                stream: ask.stream,
            };
        }
        _ => {}
    }
    let s = script(&ask, opts);
    let id = format!("chatcmpl-{:016x}{:08x}", ask.seed, seq);
    let cached = if ask.prompt_tokens >= 128 {
        ask.prompt_tokens / 128 * 64
    } else {
        0
    };
    let usage_at = |completion: u64, reasoning: u64| {
        format!(
            "{{\"prompt_tokens\":{p},\"completion_tokens\":{completion},\"total_tokens\":{t},\"prompt_tokens_details\":{{\"cached_tokens\":{cached}}},\"completion_tokens_details\":{{\"reasoning_tokens\":{reasoning}}},\"cache_read_input_tokens\":{cached},\"cache_created_input_tokens\":0}}",
            p = ask.prompt_tokens,
            t = ask.prompt_tokens + completion,
        )
    };
    let usage = usage_at(s.completion_tokens, s.reasoning.len() as u64);
    if !ask.stream || fault == Some(Fault::JsonForStream) {
        let reasoning: String = s.reasoning.concat();
        let content: String = s.answer.concat();
        let mut message = format!(
            "{{\"role\":\"assistant\",\"content\":{},\"reasoning_content\":{}",
            if s.tool_call.is_some() {
                "null".to_owned()
            } else {
                json_str(&content)
            },
            json_str(&reasoning)
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
            "{{\"id\":\"{id}\",\"object\":\"chat.completion\",\"created\":{created},\"model\":{},\"system_fingerprint\":\"fp_sim\",\"choices\":[{{\"index\":0,\"message\":{message},\"logprobs\":null,\"finish_reason\":\"{}\"}}],\"usage\":{usage}}}",
            json_str(&ask.model),
            s.finish
        )
        .into_bytes();
        let tokens = s.completion_tokens.min(u64::from(u32::MAX)) as u32;
        return Plan {
            status: 200,
            content_type: "application/json",
            retry_after: None,
            send_head: true,
            framing: PlanFraming::Length,
            pieces: vec![Piece::Event(body)],
            ttft: ttft + interval * tokens,
            interval: Duration::ZERO,
            split: Duration::ZERO,
            stream: ask.stream,
        };
    }

    // A stream.
    let model = json_str(&ask.model);
    let head = format!(
        "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":{created},\"model\":{model},\"system_fingerprint\":\"fp_sim\",\"choices\":["
    );
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
                usage_at(done, done.min(n_reasoning))
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
                "{{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":{}}}",
                json_str(word)
            )
        } else {
            format!("{{\"reasoning_content\":{}}}", json_str(word))
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
    events.push(chunk("{}".to_owned(), Some(s.finish)));
    if ask.include_usage && fault != Some(Fault::NoUsage) {
        events.push(format!("{head}],\"usage\":{usage}}}\n\n").into_bytes());
    }
    let mut pieces: Vec<Piece> = events.into_iter().map(Piece::Event).collect();
    let mut done = true;
    let mut framing = if param("framing").as_deref() == Some("close") {
        PlanFraming::Close
    } else {
        PlanFraming::Chunked
    };
    let at = |after: u32, len: usize| (after as usize).min(len);
    match fault {
        Some(Fault::Reset { after }) => {
            pieces.truncate(at(after, pieces.len()));
            pieces.push(Piece::Reset);
            done = false;
        }
        Some(Fault::Stall { after }) => {
            pieces.truncate(at(after, pieces.len()));
            pieces.push(Piece::Stall);
            done = false;
        }
        Some(Fault::BadChunk { after }) => {
            pieces.truncate(at(after, pieces.len()));
            pieces.push(Piece::Raw(b"zz-not-a-chunk-size\r\n".to_vec()));
            pieces.push(Piece::Reset);
            framing = PlanFraming::Chunked;
            done = false;
        }
        Some(Fault::HugeEvent { after, bytes }) => {
            let mut big = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec();
            big.resize(big.len() + bytes, b'x');
            big.extend_from_slice(b"\"}}]}\n\n");
            pieces.insert(at(after, pieces.len()), Piece::Event(big));
        }
        Some(Fault::OmitDone) => done = false,
        Some(Fault::ErrorEvent { after }) => {
            pieces.truncate(at(after, pieces.len()));
            pieces.push(Piece::Event(event(&serde_json::json!({"error": {
                "message": "simulated provider error mid-stream", "type": "server_error", "code": "server_error"}}))));
            done = false;
        }
        Some(Fault::HeartbeatAfterFinish) => {
            pieces.truncate(before_finish + 1);
            pieces.push(Piece::Heartbeat(b": heartbeat\n\n"));
            done = false;
        }
        Some(Fault::KeepaliveAfterUsage) => {
            pieces.push(Piece::Heartbeat(b": keep-alive\n\n"));
            done = false;
        }
        Some(Fault::CloseAfterHeaders) => {
            pieces.clear();
            pieces.push(Piece::Reset);
            done = false;
        }
        _ => {}
    }
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
        ttft,
        interval,
        split: ms("split_ms", Duration::ZERO),
        stream: true,
    }
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
        status,
        content_type: "application/json",
        retry_after,
        send_head: true,
        framing: PlanFraming::Length,
        pieces: vec![Piece::Event(error_body(message, kind, code))],
        ttft: Duration::ZERO,
        interval: Duration::ZERO,
        split: Duration::ZERO,
        stream: false,
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
            if let Some(json) = ev.strip_prefix(b"data: ") {
                if let Ok(v) = serde_json::from_slice::<Value>(json) {
                    if let Some(d) = v["choices"].get(0).map(|c| &c["delta"]) {
                        reasoning.push_str(d["reasoning_content"].as_str().unwrap_or(""));
                        content.push_str(d["content"].as_str().unwrap_or(""));
                    }
                }
            }
        }
        (kinds, t, reasoning, content)
    }

    const ASK: &str = r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"What is two plus two?"}],"stream":true,"stream_options":{"include_usage":true}}"#;

    #[test]
    fn stream_shape_follows_the_spec() {
        let plan = plan_chat(ASK.as_bytes(), &SimOptions::default(), 1000, 1);
        assert_eq!(
            plan,
            plan_chat(ASK.as_bytes(), &SimOptions::default(), 1000, 1),
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
        let (_, t, reasoning, content) =
            track(&plan_chat(body.as_bytes(), &SimOptions::default(), 0, 1));
        assert_eq!(t.finish_reason(), Some("length"));
        assert_eq!(content, "");
        assert_eq!(reasoning.split_whitespace().count(), 5);
        assert_eq!(t.usage().unwrap().completion_tokens, 5);
    }

    #[test]
    fn tool_round_trip() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"weather in Paris"}],
            "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}"#;
        let plan = plan_chat(body.as_bytes(), &SimOptions::default(), 0, 1);
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
        let plan = plan_chat(body2.as_bytes(), &SimOptions::default(), 0, 1);
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
    fn faults_from_marker_and_param() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi [[sim:fault=reject,status=429]]"}]}"#;
        let plan = plan_chat(body.as_bytes(), &SimOptions::default(), 0, 1);
        assert_eq!((plan.status, plan.retry_after), (429, Some(2)));
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x_sim":{"fault":"reset","after":3}}"#;
        let plan = plan_chat(body.as_bytes(), &SimOptions::default(), 0, 1);
        assert_eq!(plan.pieces.len(), 4);
        assert_eq!(plan.pieces[3], Piece::Reset);
        let body =
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"x_sim":{"fault":"nope"}}"#;
        assert_eq!(
            plan_chat(body.as_bytes(), &SimOptions::default(), 0, 1).status,
            400
        );
    }
}
