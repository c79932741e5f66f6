//! A Gemini request (`POST /v1beta/models/{model}:generateContent`,
//! `:streamGenerateContent`, `:countTokens`) as one chat-completions
//! request for the provider.
//!
//! Read once with the crate's JSON cursor, as the other translators read
//! theirs: strings, numbers and schemas are copied into the chat body as
//! the client wrote them. What the translator refuses, it refuses naming
//! the Gemini field (`contents[2].parts[0].inlineData`); what it copies
//! unread, the chat validator checks next and [`param_name`] names back.
//! Field names are read as the REST API spells them, in camelCase (what
//! Gemini CLI and both SDKs send on the wire); of the snake_case names
//! Google's parser also takes, only the two JSON Schemas the Python SDK
//! passes through unconverted are read (`parameters_json_schema`,
//! `response_json_schema`).
//!
//! | Gemini | chat completions |
//! |---|---|
//! | the model in the path | `model` |
//! | `systemInstruction` (a string, or a Content of text parts) | a `system` message |
//! | `contents`: `user` (or no role) and `model` turns | `user` and `assistant` messages |
//! | `text` parts; parts with `thought: true` | text; left out (the model's shown reasoning) |
//! | `inlineData` images (`image/*`) | `image_url` parts with `data:` URLs |
//! | other `inlineData`, `fileData`, parts of unknown kinds | refused in the newest user turn; in older turns a short note in their place |
//! | `functionCall` (model turns) | the assistant message's `tool_calls` (`args` as the arguments' JSON text; no `id`: `call_{turn}_{k}`) |
//! | `functionResponse` (user turns) | `tool` messages, before the turn's other parts (`response` as JSON text; paired with its call by `id`, else by name, in order) |
//! | `thoughtSignature` on a model turn's part | with reasoning replay on, one this gateway gave out: the assistant message's `reasoning_content`; any other (Google's, `skip_thought_signature_validator`) ignored |
//! | `executableCode`, `codeExecutionResult` | left out: the provider did not run that code |
//! | `tools[].functionDeclarations` (`parameters` as Google's Schema, or `parametersJsonSchema`, also read as `parameters_json_schema`: the Python SDK passes it through under its proto name) | function tools (the Schema's `type` values lower-cased; JSON Schema as it is) |
//! | `googleSearch`, `codeExecution`, `urlContext` and other tools | left out: the provider cannot run them |
//! | `toolConfig.functionCallingConfig.mode` `AUTO` / `ANY` / `VALIDATED` / `NONE` (`allowedFunctionNames`) | `tool_choice` `auto` / `required` (one allowed name: that function; several: `required`, only those tools sent) / `auto` / `none` |
//! | `generationConfig.temperature`, `topP`, `topK`, `maxOutputTokens`, `seed`, `presencePenalty`, `frequencyPenalty` | `temperature`, `top_p`, `top_k`, `max_tokens`, `seed`, `presence_penalty`, `frequency_penalty` |
//! | `generationConfig.stopSequences` (at most 4) | `stop` |
//! | `generationConfig.candidateCount` | 1 only (more refused) |
//! | `generationConfig.responseMimeType: "application/json"` (with `responseSchema` or `responseJsonSchema`) | `response_format` `json_object` (`json_schema` named `output`, the Schema's types lower-cased) |
//! | `generationConfig.thinkingConfig.thinkingLevel`; else `thinkingBudget` | `reasoning_effort` (`MINIMAL` and `LOW` as `low`; a budget of 1 to 4095 as `low`, under 16384 `medium`, else `high`; `-1`, dynamic, and 0, no thinking, as none) |
//! | `generationConfig.thinkingConfig.includeThoughts` | the answer shows reasoning as `thought` parts |
//! | `safetySettings`, `cachedContent`, `labels`, `generationConfig.responseModalities`, `speechConfig`, `mediaResolution`, `responseLogprobs`, any other | read and left out (not applied) |
//!
//! A stream asks the provider for its usage: the chat validator adds
//! `stream_options.include_usage` to every stream it sends on.

use crate::dialect::chat::{Message, write_messages, write_tools};
use crate::dialect::raw::{Object, array, is_null, member, not_an_object, object, text};
use crate::error::ApiError;
use crate::reasoning::ReasoningSeal;

use super::contents::{Turns, system};
use super::schema::lower_types;

/// At most this many `stopSequences` (chat's `stop` takes four).
pub const MAX_STOP_SEQUENCES: usize = 4;

/// What the answer's translation needs to know of the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    /// The model the path named, as a JSON string (quoted, escaped), for
    /// an answer whose provider did not name its model and for
    /// `modelVersion`.
    pub model: Vec<u8>,
    /// streamGenerateContent (true) or generateContent (false).
    pub stream: bool,
    /// Streamed with `?alt=sse` (SSE `data:` events); streamed without it
    /// answers a JSON array, as Google's does.
    pub sse: bool,
    /// `generationConfig.thinkingConfig.includeThoughts`: reasoning shown
    /// as `{text, thought: true}` parts (never otherwise).
    pub thoughts: bool,
}

/// The chat request for `body` (a GenerateContentRequest) asked of `model`
/// (the path's model, percent-decoded; it may hold `/`), streamed or not;
/// with `replay` (some model replays reasoning), a `thoughtSignature` this
/// gateway gave out gives its assistant message the reasoning it carries.
pub fn translate(
    body: &[u8],
    model: &str,
    stream: bool,
    sse: bool,
    replay: Option<&ReasoningSeal>,
) -> Result<(Vec<u8>, Asked), ApiError> {
    crate::dialect::tape::indexed(body, || translate_body(body, model, stream, sse, replay))
}

/// [`translate`], the body indexed where it is long.
fn translate_body(
    body: &[u8],
    model: &str,
    stream: bool,
    sse: bool,
    replay: Option<&ReasoningSeal>,
) -> Result<(Vec<u8>, Asked), ApiError> {
    let top = Object::read(body).map_err(|e| e.unwrap_or_else(not_an_object))?;
    let mut asked = asked(model)?;
    asked.stream = stream;
    asked.sse = stream && sse;
    translate_with(&top, asked, true, replay)
}

/// The same for `:countTokens`, whose body is `{contents, …}` or
/// `{generateContentRequest: {…}}` (then a refused field is named inside
/// it); the chat body carries no `max_tokens` and no `stream`.
pub fn translate_count(body: &[u8], model: &str) -> Result<(Vec<u8>, Asked), ApiError> {
    crate::dialect::tape::indexed(body, || translate_count_body(body, model))
}

/// [`translate_count`], the body indexed where it is long.
fn translate_count_body(body: &[u8], model: &str) -> Result<(Vec<u8>, Asked), ApiError> {
    const INNER: &str = "generateContentRequest";
    let top = Object::read(body).map_err(|e| e.unwrap_or_else(not_an_object))?;
    let asked = asked(model)?;
    match top.get(INNER.as_bytes()).filter(|r| !is_null(r)) {
        None => translate_with(&top, asked, false, None),
        Some(inner) => {
            let inner = object(inner, INNER)?;
            translate_with(&inner, asked, false, None).map_err(|mut e| {
                if let Some(p) = e.param.take() {
                    e.param = Some(format!("{INNER}.{p}"));
                }
                e
            })
        }
    }
}

/// What is asked of `model`, before the body is read.
fn asked(model: &str) -> Result<Asked, ApiError> {
    if model.is_empty() {
        return Err(ApiError::missing("model"));
    }
    let mut json = Vec::with_capacity(model.len() + 2);
    crate::json::write::string(&mut json, model);
    Ok(Asked {
        model: json,
        ..Asked::default()
    })
}

fn translate_with(
    top: &Object<'_>,
    mut asked: Asked,
    answer: bool,
    replay: Option<&ReasoningSeal>,
) -> Result<(Vec<u8>, Asked), ApiError> {
    if let Some(name) = duplicate(top) {
        return Err(ApiError::invalid_json(format!("duplicate field `{name}`")));
    }
    let mut out = Vec::with_capacity(top.0.iter().map(|(_, v)| v.len()).sum::<usize>() + 256);
    out.extend_from_slice(b"{\"model\":");
    out.extend_from_slice(&asked.model);

    let mut messages = Vec::new();
    if let Some(raw) = top.get(b"systemInstruction").filter(|r| !is_null(r)) {
        let parts = system(raw)?;
        if !parts.is_empty() {
            messages.push(Message::System(parts));
        }
    }
    let contents = top.required_at("contents", "contents")?;
    let turns = Turns::read(contents, replay)?;
    turns.messages(&mut messages);
    out.extend_from_slice(b",\"messages\":");
    write_messages(&mut out, &messages);

    if let Some(raw) = top.get(b"tools").filter(|r| !is_null(r)) {
        let mut tools = tools(raw)?;
        let choice = match top.get(b"toolConfig").filter(|r| !is_null(r)) {
            Some(config) => tool_choice(config, &mut tools)?,
            None => None,
        };
        if !tools.is_empty() {
            let tools: Vec<Vec<u8>> = tools.into_iter().map(|(_, t)| t).collect();
            write_tools(&mut out, &tools);
            if let Some(choice) = choice {
                out.extend_from_slice(b",\"tool_choice\":");
                out.extend_from_slice(&choice);
            }
        }
    }
    if let Some(raw) = top.get(b"generationConfig").filter(|r| !is_null(r)) {
        generation(&mut out, raw, &mut asked, answer)?;
    }
    if answer && asked.stream {
        out.extend_from_slice(b",\"stream\":true");
    }
    out.push(b'}');
    Ok((out, asked))
}

/// The first member the body names twice, among those read.
fn duplicate(top: &Object<'_>) -> Option<String> {
    const READ: [&[u8]; 5] = [
        b"contents",
        b"systemInstruction",
        b"tools",
        b"toolConfig",
        b"generationConfig",
    ];
    READ.iter()
        .find(|name| top.0.iter().filter(|(n, _)| &**n == **name).count() > 1)
        .map(|name| String::from_utf8_lossy(name).into_owned())
}

/// `generationConfig`'s sampling, length, stop, format and thinking
/// members, in chat's words; notes in `asked` whether thoughts are shown.
fn generation(
    out: &mut Vec<u8>,
    raw: &[u8],
    asked: &mut Asked,
    answer: bool,
) -> Result<(), ApiError> {
    const AT: &str = "generationConfig";
    let g = object(raw, AT)?;
    let at = |field: &str| format!("{AT}.{field}");
    for (gemini, chat) in [
        ("maxOutputTokens", "max_tokens"),
        ("temperature", "temperature"),
        ("topP", "top_p"),
        ("topK", "top_k"),
        ("seed", "seed"),
        ("presencePenalty", "presence_penalty"),
        ("frequencyPenalty", "frequency_penalty"),
    ] {
        if chat == "max_tokens" && !answer {
            continue;
        }
        if let Some(v) = g.get(gemini.as_bytes()).filter(|r| !is_null(r)) {
            member(out, chat, v);
        }
    }
    if let Some(n) = g.get(b"candidateCount").filter(|r| !is_null(r)) {
        let n: u64 =
            integer(n).ok_or_else(|| ApiError::invalid_type(at("candidateCount"), "an integer"))?;
        if n > 1 {
            return Err(ApiError::invalid_value(
                at("candidateCount"),
                format!("'candidateCount' may be 1 here (one answer a request); got {n}."),
            ));
        }
    }
    if let Some(raw) = g.get(b"stopSequences").filter(|r| !is_null(r)) {
        let n = array(raw, at("stopSequences"))?.len();
        if n > MAX_STOP_SEQUENCES {
            return Err(ApiError::invalid_value(
                at("stopSequences"),
                format!(
                    "'stopSequences' may hold at most {MAX_STOP_SEQUENCES} sequences here \
                     (the provider's limit); got {n}."
                ),
            ));
        }
        if n > 0 {
            member(out, "stop", raw);
        }
    }
    if let Some(mime) = g.get(b"responseMimeType").filter(|r| !is_null(r)) {
        match &*text(mime, &|| at("responseMimeType"))? {
            "" | "text/plain" => {}
            "application/json" => response_format(out, &g)?,
            other => {
                return Err(ApiError::invalid_value(
                    at("responseMimeType"),
                    format!(
                        "Unsupported responseMimeType '{other}': expected text/plain or \
                         application/json."
                    ),
                ));
            }
        }
    }
    if let Some(raw) = g.get(b"thinkingConfig").filter(|r| !is_null(r))
        && let Some(effort) = thinking(raw, asked)?
    {
        out.extend_from_slice(b",\"reasoning_effort\":\"");
        out.extend_from_slice(effort.as_bytes());
        out.push(b'"');
    }
    Ok(())
}

/// A non-negative integer as written (an integral float too).
fn integer(raw: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(raw).ok()?;
    s.parse::<u64>().ok().or_else(|| {
        let f: f64 = s.parse().ok()?;
        (f >= 0.0 && f.fract() == 0.0 && f < 1e15).then_some(f as u64)
    })
}

/// JSON output: `json_schema` with the schema given (Google's Schema with
/// its types lower-cased, or JSON Schema as it is), else `json_object`.
fn response_format(out: &mut Vec<u8>, g: &Object<'_>) -> Result<(), ApiError> {
    let json_schema = g
        .get(b"responseJsonSchema")
        .or_else(|| g.get(b"response_json_schema"))
        .filter(|r| !is_null(r));
    let schema = g.get(b"responseSchema").filter(|r| !is_null(r));
    let schema = match (json_schema, schema) {
        (Some(s), _) => Some(s.to_vec()),
        (None, Some(s)) if s.starts_with(b"{") => Some(lower_types(s)),
        (None, Some(_)) => {
            return Err(ApiError::invalid_type(
                "generationConfig.responseSchema",
                "an object",
            ));
        }
        (None, None) => None,
    };
    match schema {
        Some(schema) => {
            out.extend_from_slice(
                b",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"output\"",
            );
            member(out, "schema", &schema);
            out.extend_from_slice(b"}}");
        }
        None => out.extend_from_slice(b",\"response_format\":{\"type\":\"json_object\"}"),
    }
    Ok(())
}

/// `thinkingConfig` as the chat `reasoning_effort`: `thinkingLevel`, else
/// what `thinkingBudget` implies; notes `includeThoughts` in `asked`.
fn thinking(raw: &[u8], asked: &mut Asked) -> Result<Option<&'static str>, ApiError> {
    const AT: &str = "generationConfig.thinkingConfig";
    let t = object(raw, AT)?;
    asked.thoughts = t.get(b"includeThoughts") == Some(b"true".as_slice());
    if let Some(level) = t.get(b"thinkingLevel").filter(|r| !is_null(r)) {
        let param = format!("{AT}.thinkingLevel");
        return match text(level, &|| param.clone())?
            .to_ascii_uppercase()
            .as_str()
        {
            "MINIMAL" | "LOW" => Ok(Some("low")),
            "MEDIUM" => Ok(Some("medium")),
            "HIGH" => Ok(Some("high")),
            "THINKING_LEVEL_UNSPECIFIED" => Ok(None),
            other => Err(ApiError::invalid_value(
                param,
                format!(
                    "Unsupported thinkingLevel '{other}': expected MINIMAL, LOW, MEDIUM or HIGH."
                ),
            )),
        };
    }
    let Some(budget) = t.get(b"thinkingBudget").filter(|r| !is_null(r)) else {
        return Ok(None);
    };
    let budget: i64 = std::str::from_utf8(budget)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ApiError::invalid_type(format!("{AT}.thinkingBudget"), "an integer"))?;
    Ok(match budget {
        // Dynamic (the model decides), or none: Gemini CLI's utility calls
        // ask for no thinking with 0, which chat has no word for.
        ..=0 => None,
        1..4096 => Some("low"),
        4096..16384 => Some("medium"),
        _ => Some("high"),
    })
}

/// The chat function tools for `tools` (each with its name): the client's
/// function declarations; Google's own tools left out.
fn tools(raw: &[u8]) -> Result<Vec<(String, Vec<u8>)>, ApiError> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, tool) in array(raw, "tools")?.into_iter().enumerate() {
        let t = object(tool, format_args!("tools[{i}]"))?;
        let Some(decls) = t.get(b"functionDeclarations").filter(|r| !is_null(r)) else {
            continue;
        };
        let param = format!("tools[{i}].functionDeclarations");
        for (k, decl) in array(decls, &param)?.into_iter().enumerate() {
            let at = |field: &str| format!("{param}[{k}].{field}");
            let d = object(decl, format_args!("{param}[{k}]"))?;
            let name = text(d.required("name", &at)?, &|| at("name"))?.into_owned();
            if out.iter().any(|(n, _)| *n == name) {
                return Err(ApiError::invalid_value(
                    "tools",
                    format!("Two functions are named '{name}'."),
                ));
            }
            let mut chat = b"{\"type\":\"function\",\"function\":{\"name\":".to_vec();
            crate::json::write::string(&mut chat, &name);
            if let Some(desc) = d.get(b"description").filter(|r| !is_null(r)) {
                let desc = crate::dialect::raw::string(desc, &|| at("description"))?;
                member(&mut chat, "description", desc);
            }
            // The Python SDK passes a declaration's JSON Schema through
            // under its proto name, which Google's parser takes too.
            let json_schema = d
                .get(b"parametersJsonSchema")
                .or_else(|| d.get(b"parameters_json_schema"))
                .filter(|r| !is_null(r));
            let schema = d.get(b"parameters").filter(|r| !is_null(r));
            match (json_schema, schema) {
                (Some(s), _) => member(&mut chat, "parameters", s),
                (None, Some(s)) if s.starts_with(b"{") => {
                    member(&mut chat, "parameters", &lower_types(s))
                }
                (None, Some(_)) => {
                    return Err(ApiError::invalid_type(at("parameters"), "an object"));
                }
                // Chat providers want an object schema even for no arguments.
                (None, None) => member(
                    &mut chat,
                    "parameters",
                    b"{\"type\":\"object\",\"properties\":{}}",
                ),
            }
            chat.extend_from_slice(b"}}");
            out.push((name, chat));
        }
    }
    Ok(out)
}

/// `toolConfig.functionCallingConfig` as chat's `tool_choice` (its JSON);
/// `allowedFunctionNames` with `ANY` keeps only those tools.
fn tool_choice(
    raw: &[u8],
    tools: &mut Vec<(String, Vec<u8>)>,
) -> Result<Option<Vec<u8>>, ApiError> {
    const AT: &str = "toolConfig.functionCallingConfig";
    let config = object(raw, "toolConfig")?;
    let Some(calling) = config.get(b"functionCallingConfig").filter(|r| !is_null(r)) else {
        return Ok(None);
    };
    let calling = object(calling, AT)?;
    let mut allowed = Vec::new();
    if let Some(names) = calling.get(b"allowedFunctionNames").filter(|r| !is_null(r)) {
        let param = format!("{AT}.allowedFunctionNames");
        for (k, n) in array(names, &param)?.into_iter().enumerate() {
            allowed.push(text(n, &|| format!("{param}[{k}]"))?.into_owned());
        }
    }
    let Some(mode) = calling.get(b"mode").filter(|r| !is_null(r)) else {
        return Ok(None);
    };
    let mode = text(mode, &|| format!("{AT}.mode"))?;
    Ok(Some(match mode.to_ascii_uppercase().as_str() {
        "AUTO" | "VALIDATED" | "MODE_UNSPECIFIED" => b"\"auto\"".to_vec(),
        "NONE" => b"\"none\"".to_vec(),
        "ANY" => {
            if !allowed.is_empty() {
                tools.retain(|(name, _)| allowed.contains(name));
                if tools.is_empty() {
                    // A call forced among functions that are not there.
                    return Err(ApiError::invalid_value(
                        format!("{AT}.allowedFunctionNames"),
                        "None of 'allowedFunctionNames' is a declared function.",
                    ));
                }
            }
            match allowed.as_slice() {
                [one] if !tools.is_empty() => {
                    let mut choice = b"{\"type\":\"function\",\"function\":{\"name\":".to_vec();
                    crate::json::write::string(&mut choice, one);
                    choice.extend_from_slice(b"}}");
                    choice
                }
                _ => b"\"required\"".to_vec(),
            }
        }
        other => {
            return Err(ApiError::invalid_value(
                format!("{AT}.mode"),
                format!(
                    "Unsupported function calling mode '{other}': expected AUTO, ANY, NONE or VALIDATED."
                ),
            ));
        }
    }))
}

/// The Gemini name of a chat parameter the chat validator refused, so the
/// client reads the field it sent. A message's or a tool's index in the
/// chat request is not its index in `contents` or `tools` (a turn may make
/// several messages, a tool several functions), so those are named whole.
pub fn param_name(chat: &str) -> String {
    let (head, _) = chat.split_at(chat.find(['.', '[']).unwrap_or(chat.len()));
    let config = |field: &str| format!("generationConfig.{field}");
    match head {
        "messages" => "contents".into(),
        "tools" => "tools".into(),
        "tool_choice" | "parallel_tool_calls" => "toolConfig.functionCallingConfig".into(),
        "max_tokens" | "max_completion_tokens" => config("maxOutputTokens"),
        "temperature" => config("temperature"),
        "top_p" => config("topP"),
        "top_k" => config("topK"),
        "stop" => config("stopSequences"),
        "seed" => config("seed"),
        "presence_penalty" => config("presencePenalty"),
        "frequency_penalty" => config("frequencyPenalty"),
        "response_format" => config("responseMimeType"),
        "reasoning_effort" => config("thinkingConfig"),
        "n" => config("candidateCount"),
        _ => chat.into(),
    }
}
