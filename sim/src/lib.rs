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
//! | `fault` | `reject`, `reset`, `omit_done`, `stall_headers`, `stall`, `garbage`, `bad_chunk`, `huge_event`, `data_after_done`, `heartbeat_after_finish`, `keepalive_after_usage`, `error_event`, `no_usage`, `close_after_headers`, `json_for_stream`, `pings` (with `count`, `die`) |
//! | `template_tokens` | prompt tokens added to the reported count (a chat template) |
//! | `after` | events sent before `reset`, `stall`, `bad_chunk`, `error_event`, `huge_event` (default 2) |
//! | `status`, `message`, `retry_after` | for `reject` (default 500; `Retry-After` for 429) |
//! | `bytes` | size of the `huge_event` event |
//! | `ttft_ms`, `token_ms` | time to first token, time per token |
//! | `reasoning_tokens`, `answer_tokens` | lengths |
//! | `framing` | `chunked` (default for streams) or `close` |
//! | `tools`, `tool` | `tools=none`: answer in words even when given tools; `tool=NAME`: the tool to call (else `tool_choice`'s, else the first) |
//! | `input` | the value of the called tool's first parameter (default: the start of the last message; the last message that is not a system message is the one answered) |
//! | `usage_every` | `true`: cumulative usage on every chunk (with `include_usage`), as some providers do |
//! | `split_ms` | stream events go out in two writes this many milliseconds apart, split alternately in the middle and before the last byte (a provider whose events straddle reads) |
//! | `finish_reason` | the finish reason said instead of the answer's own, whatever it is (`"\u0000"` included) |
//! | `calls` | tool rounds in a row (default 1): the tool is called again while the messages since the last user message hold fewer tool-call turns; `{n}` in `input` is the round's number |
//!
//! With [`SimOptions::require_reasoning_replay`] it refuses, as Kimi or
//! DeepSeek do, a request whose assistant tool-call message carries no
//! reasoning, and one whose reasoning for calls it made is not the
//! reasoning it produced then (a `400` the real providers do not send:
//! a test tells a restored reasoning from a filled one by it). It
//! remembers the reasoning of the latest 65,536 tool calls it made.
//!
//! | file | job |
//! |---|---|
//! | `ask.rs` | what the simulator understood of a request |
//! | `script.rs` | the deterministic answer: reasoning, words, a tool call |
//! | `plan/` | the response planned for a request: status, framing, pieces, timing (`mod.rs`), and its tests (`tests.rs`) |
//! | `fault.rs` | the misbehaviours it can imitate |
//! | `continuation.rs` | continuing a final assistant message (`--continuation`: `prefix`, `continue_final_message`, `final_assistant`, `refuse`, `none`), as DeepSeek, vLLM and llama.cpp do or refuse |
//! | `server/` | the server state machine (`mod.rs`) and each connection's (`connection.rs`), the runtime fault, journal and totals, and the prompt cache: each `SimServer` remembers the fingerprints of the latest 65,536 message prefixes it answered (a prefix is the first 1, 2, … messages: role, text, image URLs, tool calls), and a request's `cached_tokens` (and `cache_read_input_tokens`) are the prompt tokens of its longest remembered prefix, the base 3 included and `template_tokens` never |

mod ask;
mod continuation;
mod fault;
mod plan;
mod script;
mod server;

use std::time::Duration;

pub use continuation::Continuation;
pub use fault::Fault;
pub use server::{ExchangeEnd, JournalEntry, SimAction, SimConnection, SimServer};

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
    /// Refuse a chat request whose `X-Request-Id` is not a UUID with a 400
    /// and an empty body, as llama-cpp-python's server does.
    pub strict_request_id: bool,
    /// Prompt tokens a chat template adds to every request's count (as a
    /// real server's template adds a system prompt the gateway cannot see).
    pub template_tokens: u64,
    /// Call a tool only when the request names one (`tool=NAME`), else
    /// answer in words: the demo's, so that a coding agent pointed at it
    /// gets an answer rather than a call of whichever tool it listed first.
    pub tools_on_request: bool,
    /// Refuse, as this provider refuses it, a request whose assistant
    /// tool-call message lacks its reasoning (or carries another than the
    /// simulator produced for those calls).
    pub require_reasoning_replay: Option<ReplayCheck>,
    /// The name the simulator gives its reasoning (and reads it back by).
    pub reasoning_field: ReasoningName,
    /// Which final assistant messages it continues (`continuation.rs`).
    pub continuation: Continuation,
}

/// Whose check of replayed reasoning the simulator imitates: its status,
/// body and wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayCheck {
    /// Moonshot's Kimi: `400`, `thinking is enabled but reasoning_content
    /// is missing in assistant tool call message at index N`.
    Kimi,
    /// DeepSeek's thinking mode: `400`, ``The `reasoning_content` in the
    /// thinking mode must be passed back to the API.``
    DeepSeek,
}

impl ReplayCheck {
    /// The check a flag names.
    pub fn parse(s: &str) -> Option<ReplayCheck> {
        match s {
            "kimi" => Some(ReplayCheck::Kimi),
            "deepseek" => Some(ReplayCheck::DeepSeek),
            _ => None,
        }
    }
}

/// How a provider names reasoning in its answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReasoningName {
    /// `reasoning_content` (DeepSeek, Kimi, llama.cpp); read back by the
    /// same name.
    #[default]
    ReasoningContent,
    /// `reasoning` (vLLM); read back by the same name.
    Reasoning,
    /// `reasoning_details` blocks (OpenRouter); read back as
    /// `reasoning_content`.
    ReasoningDetails,
}

impl ReasoningName {
    /// The name a flag gives.
    pub fn parse(s: &str) -> Option<ReasoningName> {
        match s {
            "reasoning_content" => Some(ReasoningName::ReasoningContent),
            "reasoning" => Some(ReasoningName::Reasoning),
            "reasoning_details" => Some(ReasoningName::ReasoningDetails),
            _ => None,
        }
    }

    /// The member an assistant message's reasoning is read back from.
    pub(crate) fn read_back(self) -> &'static str {
        match self {
            ReasoningName::Reasoning => "reasoning",
            _ => "reasoning_content",
        }
    }
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
            strict_request_id: false,
            template_tokens: 0,
            tools_on_request: false,
            require_reasoning_replay: None,
            reasoning_field: ReasoningName::ReasoningContent,
            continuation: Continuation::None,
        }
    }
}
