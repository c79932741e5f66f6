//! Reasoning that survives the tool loop.
//!
//! The reasoning models people run behind gateways (Kimi K2, DeepSeek V4,
//! GLM, gpt-oss on vLLM) think between tool calls and refuse the next turn
//! of a tool loop whose assistant tool-call message lacks their reasoning.
//! The specification's rule is the opposite (reasoning is never sent
//! back), and it stays the default: each model says how its reasoning is
//! replayed ([`ReplayMode`]) and each endpoint which member its provider
//! reads ([`ReasoningField`]).
//!
//! Where a turn's reasoning comes from, in order: the client sent it (a
//! chat `reasoning_content`, a Messages thinking block with a signature
//! the gateway made, a Responses reasoning item it sealed); the memory of
//! what the gateway served, by key and tool call id; else an empty
//! string.
//!
//! | file | job |
//! |---|---|
//! | `replay.rs` | a request's assistant turns, and the body with their reasoning as a mode and a field want it |
//! | `answer.rs` | what an answer said as reasoning and which calls it made, kept as it passes |
//! | `memory.rs` | the reasoning served, remembered by key and call id: bounded, with a time to live |
//! | `seal.rs` | the thinking signatures and sealed reasoning the clients carry between turns |

mod answer;
mod memory;
mod replay;
mod seal;

pub(crate) use answer::text_of;
pub use answer::{AnswerReasoning, MAX_KEPT_REASONING};
pub use memory::{MemoryLimits, ReasoningMemory, shared_key};
pub use replay::{Applied, ReplayPlan, ReplaySource, Sources};
pub use seal::{MIN_SECRET, ReasoningSeal, SEALED_PREFIX, SIGNATURE_PREFIX, Signer};

/// How a model's reasoning goes back to its provider in later turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ReplayMode {
    /// Never (the specification's rule): `reasoning_content` is removed
    /// from assistant messages.
    #[default]
    Strip,
    /// The reasoning of assistant messages that carry tool calls goes
    /// back (restored or filled when missing); the others' is removed.
    /// DeepSeek's and Kimi's documented rule.
    ToolCalls,
    /// Every assistant message keeps its reasoning; those with tool calls
    /// are restored or filled when missing.
    All,
}

impl ReplayMode {
    /// The setting's values.
    pub const NAMES: &'static str = "strip, tool_calls or all";

    /// The mode a setting names.
    pub fn parse(s: &str) -> Option<ReplayMode> {
        Some(match s.trim() {
            "strip" => ReplayMode::Strip,
            "tool_calls" => ReplayMode::ToolCalls,
            "all" => ReplayMode::All,
            _ => return None,
        })
    }

    /// Its name in the settings.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayMode::Strip => "strip",
            ReplayMode::ToolCalls => "tool_calls",
            ReplayMode::All => "all",
        }
    }

    /// Whether reasoning goes back at all.
    pub fn replays(self) -> bool {
        self != ReplayMode::Strip
    }
}

/// The member of an assistant message a provider reads reasoning from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ReasoningField {
    /// `reasoning_content`: DeepSeek, Kimi, GLM, llama.cpp.
    #[default]
    ReasoningContent,
    /// `reasoning`: vLLM's newer name.
    Reasoning,
}

impl ReasoningField {
    /// The setting's values.
    pub const NAMES: &'static str = "reasoning_content or reasoning";

    /// The field a setting names.
    pub fn parse(s: &str) -> Option<ReasoningField> {
        Some(match s.trim() {
            "reasoning_content" => ReasoningField::ReasoningContent,
            "reasoning" => ReasoningField::Reasoning,
            _ => return None,
        })
    }

    /// The member's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningField::ReasoningContent => "reasoning_content",
            ReasoningField::Reasoning => "reasoning",
        }
    }
}
