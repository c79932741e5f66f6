//! The answer's tokens, derived deterministically from the prompt: reasoning
//! words, then answer words or a tool call, cut by `max_tokens`.

use serde_json::Value;

use crate::SimOptions;
use crate::ask::Ask;

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

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The tokens of an answer, before serialization.
pub(crate) struct Script {
    pub(crate) reasoning: Vec<String>,
    pub(crate) answer: Vec<String>,
    pub(crate) tool_call: Option<(String, String, String)>,
    /// The finish reason: the answer's own, or the request's `finish_reason`
    /// (`x_sim` or marker), said as it is however odd (a provider's habit
    /// the gateway must carry through).
    pub(crate) finish: String,
    pub(crate) completion_tokens: u64,
}

pub(crate) fn script(ask: &Ask, opts: &SimOptions) -> Script {
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
    // Tool rounds in a row: another call while fewer were made since the
    // user last spoke.
    let rounds = ask
        .params
        .get("calls")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1);
    let calls_tool = !ask.tools.is_empty()
        && (ask.last_role != "tool" || ask.rounds < rounds)
        && ask.tool_choice.as_ref().and_then(Value::as_str) != Some("none")
        && ask.params.get("tools").map(String::as_str) != Some("none")
        && (!opts.tools_on_request || ask.params.contains_key("tool"));
    let mut answer: Vec<String> = Vec::new();
    let mut tool_call = None;
    if calls_tool {
        let named = ask.params.get("tool").map(String::as_str).or_else(|| {
            ask.tool_choice
                .as_ref()
                .and_then(|c| c.get("function"))
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
        });
        let (name, prop) = ask
            .tools
            .iter()
            .find(|(n, _)| Some(n.as_str()) == named)
            .unwrap_or(&ask.tools[0])
            .clone();
        let prop = prop.unwrap_or_else(|| "input".into());
        let text: String = match ask.params.get("input") {
            Some(input) => input.replace("{n}", &(ask.rounds + 1).to_string()),
            None => ask.last_text.chars().take(64).collect(),
        };
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
    let finish = ask
        .params
        .get("finish_reason")
        .cloned()
        .unwrap_or_else(|| finish.to_owned());
    Script {
        reasoning,
        answer,
        tool_call,
        finish,
        completion_tokens,
    }
}
