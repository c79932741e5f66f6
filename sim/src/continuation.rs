//! Continuing a final assistant message, as the servers that can do it
//! do it: the request's conversation ends with the part of an answer a
//! client already has (its reasoning, its text), and the simulator sends
//! the rest of the answer it would have given to the conversation without
//! that message — its deterministic answer, from where the part ends.
//!
//! | mode | what is continued | as |
//! |---|---|---|
//! | `prefix` | a last assistant message with `"prefix": true` | DeepSeek's and Mistral's prefix completion |
//! | `continue_final_message` | the last assistant message, with `"continue_final_message": true` and `"add_generation_prompt": false` (with the first alone: vLLM's `400`) | vLLM's and SGLang's |
//! | `final_assistant` | any last assistant message, its text sent back first (in the first delta of the rest) | llama.cpp's server, by default |
//! | `refuse` | nothing: a last assistant message is refused with llama.cpp's `400` (`Assistant response prefill is incompatible with enable_thinking.`) | a server that refuses prefill |
//! | `none` | nothing: a last assistant message is a message like another | OpenAI, and the simulator before |
//!
//! The part's reasoning is read from the simulator's reasoning field
//! (`reasoning_content`, or `reasoning`). A part with text continues the
//! text (the reasoning was whole); a part with reasoning only continues the
//! reasoning, then answers. A part that is not the start of the
//! simulator's own answer is answered as if it were empty (a model that
//! starts over). A message with tool calls is not continued. The fault a
//! continued request's question names (`[[sim:fault=…]]`) is not applied
//! again: it struck the answer being continued.

use serde_json::Value;

use crate::ReasoningName;
use crate::script::Script;

/// Which final assistant messages the simulator continues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Continuation {
    /// None: a last assistant message is answered like any message.
    #[default]
    None,
    /// One with `"prefix": true`.
    Prefix,
    /// The last, with `continue_final_message` (and
    /// `add_generation_prompt: false`).
    ContinueFinalMessage,
    /// Any last assistant message.
    FinalAssistant,
    /// None: a last assistant message is refused with a `400`.
    Refuse,
}

impl Continuation {
    /// Every value the `--continuation` flag takes.
    pub const NAMES: [&'static str; 5] = [
        "none",
        "prefix",
        "continue_final_message",
        "final_assistant",
        "refuse",
    ];

    /// The mode a flag names.
    pub fn parse(s: &str) -> Option<Continuation> {
        Some(match s {
            "none" => Continuation::None,
            "prefix" => Continuation::Prefix,
            "continue_final_message" => Continuation::ContinueFinalMessage,
            "final_assistant" => Continuation::FinalAssistant,
            "refuse" => Continuation::Refuse,
            _ => return None,
        })
    }
}

/// What a request asks of the continuation mode.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Continued {
    /// Nothing: it is answered as it is.
    No,
    /// Refused: the status and the message.
    Refused(u16, &'static str),
    /// Continued: the request without its last message (what the answer
    /// is the answer to), and the part the client has.
    Yes {
        body: Vec<u8>,
        reasoning: String,
        content: String,
        /// The part's prompt tokens, counted as the others are.
        tokens: u64,
    },
}

/// vLLM's refusal of `continue_final_message` without
/// `add_generation_prompt: false`.
const BOTH_TRUE: &str =
    "Cannot set both `continue_final_message` and `add_generation_prompt` to True.";
/// llama.cpp's refusal of a prefill with thinking on.
const PREFILL_REFUSED: &str = "Assistant response prefill is incompatible with enable_thinking.";

/// What `body` asks of `mode`, its reasoning read from `field`.
pub(crate) fn read(body: &[u8], mode: Continuation, field: ReasoningName) -> Continued {
    if mode == Continuation::None {
        return Continued::No;
    }
    let Ok(Value::Object(mut v)) = serde_json::from_slice::<Value>(body) else {
        return Continued::No;
    };
    let last_is_assistant = v
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
        .is_some_and(|m| m.get("role").and_then(Value::as_str) == Some("assistant"));
    let flag = |v: &serde_json::Map<String, Value>, k: &str| v.get(k).and_then(Value::as_bool);
    let wanted = match mode {
        Continuation::None => false,
        Continuation::Refuse => {
            if last_is_assistant {
                return Continued::Refused(400, PREFILL_REFUSED);
            }
            false
        }
        Continuation::Prefix => v
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|m| m.last())
            .is_some_and(|m| m.get("prefix").and_then(Value::as_bool) == Some(true)),
        Continuation::ContinueFinalMessage => {
            if flag(&v, "continue_final_message") != Some(true) {
                false
            } else if flag(&v, "add_generation_prompt") != Some(false) {
                return Continued::Refused(400, BOTH_TRUE);
            } else {
                true
            }
        }
        Continuation::FinalAssistant => true,
    };
    if !wanted || !last_is_assistant {
        return Continued::No;
    }
    let Some(Value::Array(messages)) = v.get_mut("messages") else {
        return Continued::No;
    };
    let last = messages.pop().unwrap_or_default();
    if last.get("tool_calls").is_some_and(|c| !c.is_null()) {
        return Continued::No;
    }
    let text = |k: &str| last.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let content = text("content");
    let reasoning = text(field.read_back());
    v.remove("continue_final_message");
    v.remove("add_generation_prompt");
    let tokens = 4 + ((content.chars().count() + reasoning.chars().count()) as u64).div_ceil(4);
    Continued::Yes {
        body: serde_json::to_vec(&Value::Object(v)).unwrap_or_default(),
        reasoning,
        content,
        tokens,
    }
}

/// `script` made the rest of itself after the part the client has: its
/// reasoning after `reasoning`, or (with `content`) its answer after
/// `content`.
///
/// A `final_assistant` server (llama.cpp's) sends the part's text back
/// first, in the same delta as the first of the rest, as llama.cpp's
/// server streams the message it continues.
pub(crate) fn rest(script: &mut Script, reasoning: &str, content: &str, mode: Continuation) {
    // What the call costs: the tokens that are neither reasoning nor text.
    let call = script
        .completion_tokens
        .saturating_sub((script.reasoning.len() + script.answer.len()) as u64);
    if !content.is_empty() {
        // Only a part that is the start of the answer had its reasoning
        // whole; any other is answered as if it were empty.
        if script.answer.concat().starts_with(content) {
            script.reasoning.clear();
        }
        script.answer = after(&script.answer, content);
        if mode == Continuation::FinalAssistant
            && let Some(first) = script.answer.first_mut()
        {
            *first = format!("{content}{first}");
        }
    } else if !reasoning.is_empty() {
        script.reasoning = after(&script.reasoning, reasoning);
    }
    script.completion_tokens = (script.reasoning.len() + script.answer.len()) as u64 + call;
}

/// The tokens of `tokens` after the text `done` (a token cut in two keeps
/// its second half); all of them when `done` is not their start.
fn after(tokens: &[String], done: &str) -> Vec<String> {
    if !tokens.concat().starts_with(done) {
        return tokens.to_vec();
    }
    let mut at = 0;
    let mut out = Vec::new();
    for t in tokens {
        let end = at + t.len();
        if end <= done.len() {
            // Sent whole.
        } else if at >= done.len() {
            out.push(t.clone());
        } else {
            out.push(t[done.len() - at..].to_owned());
        }
        at = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn the_rest_starts_where_the_part_ends() {
        let t = tokens(&["You ", "said: ", "hi"]);
        assert_eq!(after(&t, ""), t);
        assert_eq!(after(&t, "You "), tokens(&["said: ", "hi"]));
        assert_eq!(after(&t, "You sa"), tokens(&["id: ", "hi"]));
        assert_eq!(after(&t, "You said: hi"), tokens(&[]));
        // Not the start of the answer: the whole answer.
        assert_eq!(after(&t, "Bonjour"), t);
    }

    #[test]
    fn each_mode_continues_what_its_server_continues() {
        let conv = r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"You ","reasoning_content":"think "%EXTRA%}]%TOP%}"#;
        let body = |extra: &str, top: &str| {
            conv.replace("%EXTRA%", extra)
                .replace("%TOP%", top)
                .into_bytes()
        };
        let field = ReasoningName::ReasoningContent;
        let yes = |c: &Continued| matches!(c, Continued::Yes { .. });
        assert_eq!(
            read(&body("", ""), Continuation::None, field),
            Continued::No
        );
        assert!(!yes(&read(&body("", ""), Continuation::Prefix, field)));
        assert!(yes(&read(
            &body(",\"prefix\":true", ""),
            Continuation::Prefix,
            field
        )));
        assert_eq!(
            read(
                &body("", ",\"continue_final_message\":true"),
                Continuation::ContinueFinalMessage,
                field
            ),
            Continued::Refused(400, BOTH_TRUE)
        );
        let vllm = body(
            "",
            ",\"continue_final_message\":true,\"add_generation_prompt\":false",
        );
        let Continued::Yes {
            body: rest,
            reasoning,
            content,
            ..
        } = read(&vllm, Continuation::ContinueFinalMessage, field)
        else {
            panic!("continued");
        };
        assert_eq!((reasoning.as_str(), content.as_str()), ("think ", "You "));
        let rest: Value = serde_json::from_slice(&rest).unwrap();
        assert_eq!(rest["messages"].as_array().unwrap().len(), 1);
        assert!(rest.get("continue_final_message").is_none());
        assert!(yes(&read(
            &body("", ""),
            Continuation::FinalAssistant,
            field
        )));
        assert_eq!(
            read(&body("", ""), Continuation::Refuse, field),
            Continued::Refused(400, PREFILL_REFUSED)
        );
        // A conversation that ends with the user's turn is answered.
        let asked = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        for mode in [Continuation::FinalAssistant, Continuation::Refuse] {
            assert_eq!(read(asked, mode, field), Continued::No);
        }
        // A message with tool calls is not continued.
        let calls = body(",\"tool_calls\":[{\"id\":\"c\"}]", "");
        assert_eq!(
            read(&calls, Continuation::FinalAssistant, field),
            Continued::No
        );
    }
}
