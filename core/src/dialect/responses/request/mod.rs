//! A Responses request (`POST /v1/responses`) as one chat-completions
//! request for the provider.
//!
//! The request is read once with the crate's JSON cursor; strings, numbers
//! and schemas are copied into the chat body as the client wrote them
//! (escapes and all), so nothing is unescaped and written again. What the
//! translator refuses, it refuses naming the Responses field (`input[2].
//! call_id`); what it copies unread (`temperature`, `max_output_tokens`…)
//! the chat validator checks next, and [`param_name`] names it back.
//!
//! | Responses | chat completions |
//! |---|---|
//! | `instructions`, `system` and `developer` messages | `system` messages |
//! | `user` and `assistant` messages; `input_text`, `output_text`, `input_image` | the same roles; `text` and `image_url` parts |
//! | `function_call` items | the assistant message's `tool_calls` |
//! | `function_call_output` items | `tool` messages |
//! | `custom` (freeform) tools, `custom_tool_call` and its output | a function of one string argument `input`, its tool call, a `tool` message |
//! | `reasoning` items | with reasoning replay on for some model: the next assistant message's `reasoning_content` — the text of an `encrypted_content` this gateway sealed, else the item's `summary` texts; an item whose `encrypted_content` is another's (or changed) is left out. With replay off, left out |
//! | hosted tools' calls | left out |
//! | `function` tools, a `namespace`'s functions | function tools (`namespace__name`) |
//! | hosted tools (`web_search`, `file_search`, …) | left out: the provider cannot run them |
//! | `max_output_tokens`, `reasoning.effort`, `text.format` | `max_tokens`, `reasoning_effort`, `response_format` |
//! | `temperature`, `top_p`, `parallel_tool_calls`, `tool_choice`, `stream`, `prompt_cache_key`, `user`, `safety_identifier` | the same |
//! | `include: ["reasoning.encrypted_content"]` | the answer's reasoning items carry the reasoning sealed (`encrypted_content`) |
//! | `store`, `metadata`, `client_metadata`, `truncation`, `service_tier`, `text.verbosity`, any other | read and left out |
//! | `previous_response_id`, `item_reference` | with the store on: the conversation it continues comes first, the item it names stands in its place (`stored.rs`); with it off, refused |
//! | `background: true` | with the store on: a streamed run (`exchange/background.rs`); with it off, refused |
//! | `conversation`, `prompt` | refused |
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the request's top level, its tools, tool choice and text format, and the Responses name of a chat parameter |
//! | `input.rs` | `instructions`, the stored conversation and the `input` items as chat messages |

mod input;

use super::stored::Stored;
use crate::dialect::chat::{write_messages, write_tools};
use crate::dialect::raw::{Object, array, is_null, member, not_an_object, object, string, text};
use crate::error::ApiError;
use crate::json::Cursor;
use crate::reasoning::ReasoningSeal;
use input::messages;

/// What the answer's translation needs to know of the request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asked {
    /// `stream`.
    pub stream: bool,
    /// The chat names that stand for a namespace's functions.
    pub namespaced: Vec<Namespaced>,
    /// `max_output_tokens`, echoed in the response object.
    pub max_output_tokens: Option<u64>,
    /// `parallel_tool_calls` (true unless the client said false).
    pub parallel_tool_calls: bool,
    /// The names of the client's freeform (`custom`) tools, which the
    /// provider sees as functions of one string argument, `input`.
    pub custom: Vec<String>,
    /// `include` names `reasoning.encrypted_content`: reasoning items carry
    /// the reasoning sealed.
    pub encrypted_reasoning: bool,
    /// The gateway keeps responses: the response object says whether this
    /// one is kept (`store`) and the one it continued.
    pub kept: Option<Kept>,
}

/// What a response object says of the store, with the store on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Kept {
    /// It is kept (`store` was not false).
    pub store: bool,
    /// `previous_response_id`, as written (a JSON string).
    pub previous: Option<Vec<u8>>,
    /// `background: true`: run in the gateway, whether or not a client
    /// stays.
    pub background: bool,
}

/// A namespace's function, as the provider knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Namespaced {
    /// The chat tool's name: `{namespace}__{name}`.
    pub chat: String,
    /// The namespace.
    pub namespace: String,
    /// The function's own name.
    pub name: String,
}

impl Asked {
    /// The namespace and name a chat tool call's `name` stands for (no
    /// namespace for a flat function).
    pub fn function<'a>(&'a self, chat: &'a str) -> (Option<&'a str>, &'a str) {
        match self.namespaced.iter().find(|n| n.chat == chat) {
            Some(n) => (Some(&n.namespace), &n.name),
            None => (None, chat),
        }
    }
}

/// The separator between a namespace and a function's name in the chat
/// tool's name (chat names allow `[A-Za-z0-9_-]`).
const NAMESPACE_SEPARATOR: &str = "__";

/// The chat request for `body`, and what the answer's translation needs.
/// With `replay` (some model replays reasoning), reasoning items go to the
/// provider as their assistant message's reasoning. With `stored` (the
/// gateway keeps responses), the conversation `previous_response_id`
/// continues comes before the input, and each `item_reference` stands for
/// the item it names.
pub fn translate<'a>(
    body: &'a [u8],
    replay: Option<&ReasoningSeal>,
    stored: Option<&Stored<'a>>,
) -> Result<(Vec<u8>, Asked), ApiError> {
    crate::dialect::tape::indexed(body, || translate_body(body, replay, stored))
}

/// [`translate`], the body indexed where it is long.
fn translate_body<'a>(
    body: &'a [u8],
    replay: Option<&ReasoningSeal>,
    stored: Option<&Stored<'a>>,
) -> Result<(Vec<u8>, Asked), ApiError> {
    let top = Top::read(body)?;
    let model = top.model.ok_or_else(|| ApiError::missing("model"))?;
    if !model.starts_with(b"\"") {
        return Err(ApiError::invalid_type("model", "a string"));
    }
    refuse_stored(&top, stored.is_some())?;
    let mut asked = Asked {
        parallel_tool_calls: true,
        ..Asked::default()
    };
    if stored.is_some() {
        asked.kept = Some(Kept {
            store: top.store != Some(b"false".as_slice()),
            background: top.background == Some(b"true".as_slice()),
            previous: top
                .previous_response_id
                .filter(|r| !is_null(r))
                .map(<[u8]>::to_vec),
        });
    }
    let mut out = Vec::with_capacity(body.len() + 256);
    out.extend_from_slice(b"{\"model\":");
    out.extend_from_slice(model);

    // The tools (their namespaced and freeform names noted for the
    // answer), then the messages.
    let tools = match top.tools {
        Some(raw) if !is_null(raw) => tools(raw, &mut asked)?,
        _ => Vec::new(),
    };
    // Read for the one name it changes; otherwise left out unchecked, as
    // before.
    if let Some(names) = top.include.and_then(|r| array(r, "include").ok()) {
        asked.encrypted_reasoning = names.iter().any(|n| {
            Cursor::whole(n, Cursor::str).is_ok_and(|n| &*n == b"reasoning.encrypted_content")
        });
    }
    let messages = messages(&top, replay, stored)?;
    out.extend_from_slice(b",\"messages\":");
    write_messages(&mut out, &messages);
    if !tools.is_empty() {
        write_tools(&mut out, &tools);
        if let Some(raw) = top.tool_choice.filter(|r| !is_null(r)) {
            out.extend_from_slice(b",\"tool_choice\":");
            tool_choice(&mut out, raw)?;
        }
        if let Some(raw) = top.parallel_tool_calls.filter(|r| !is_null(r)) {
            asked.parallel_tool_calls = raw != b"false";
            member(&mut out, "parallel_tool_calls", raw);
        }
    }
    if let Some(raw) = top.max_output_tokens.filter(|r| !is_null(r)) {
        asked.max_output_tokens = std::str::from_utf8(raw).ok().and_then(|s| s.parse().ok());
        member(&mut out, "max_tokens", raw);
    }
    for (name, raw) in [
        ("temperature", top.temperature),
        ("top_p", top.top_p),
        ("prompt_cache_key", top.prompt_cache_key),
        ("user", top.user),
        ("safety_identifier", top.safety_identifier),
    ] {
        if let Some(raw) = raw.filter(|r| !is_null(r)) {
            member(&mut out, name, raw);
        }
    }
    if let Some(raw) = top.reasoning.filter(|r| !is_null(r)) {
        let effort = object(raw, "reasoning")?.get(b"effort");
        if let Some(effort) = effort.filter(|r| !is_null(r)) {
            member(&mut out, "reasoning_effort", effort);
        }
    }
    if let Some(raw) = top.text.filter(|r| !is_null(r))
        && let Some(format) = object(raw, "text")?.get(b"format").filter(|r| !is_null(r))
    {
        response_format(&mut out, format)?;
    }
    if asked.kept.as_ref().is_some_and(|k| k.background) {
        // A background run is streamed, whatever its client asked: its
        // events are what a client re-attaching reads.
        asked.stream = true;
        member(&mut out, "stream", b"true");
    } else if let Some(raw) = top.stream.filter(|r| !is_null(r)) {
        asked.stream = raw == b"true";
        member(&mut out, "stream", raw);
    }
    out.push(b'}');
    Ok((out, asked))
}

/// The members this translator reads, each as written (`None`: absent).
#[derive(Default)]
struct Top<'a> {
    model: Option<&'a [u8]>,
    input: Option<&'a [u8]>,
    instructions: Option<&'a [u8]>,
    tools: Option<&'a [u8]>,
    tool_choice: Option<&'a [u8]>,
    parallel_tool_calls: Option<&'a [u8]>,
    max_output_tokens: Option<&'a [u8]>,
    temperature: Option<&'a [u8]>,
    top_p: Option<&'a [u8]>,
    reasoning: Option<&'a [u8]>,
    text: Option<&'a [u8]>,
    stream: Option<&'a [u8]>,
    prompt_cache_key: Option<&'a [u8]>,
    user: Option<&'a [u8]>,
    safety_identifier: Option<&'a [u8]>,
    previous_response_id: Option<&'a [u8]>,
    conversation: Option<&'a [u8]>,
    prompt: Option<&'a [u8]>,
    background: Option<&'a [u8]>,
    include: Option<&'a [u8]>,
    store: Option<&'a [u8]>,
}

impl<'a> Top<'a> {
    /// The top-level object of `body`: every member's syntax checked (as
    /// the chat validator checks a body), the known ones kept.
    fn read(body: &'a [u8]) -> Result<Top<'a>, ApiError> {
        let members = Object::read(body).map_err(|e| e.unwrap_or_else(not_an_object))?;
        let mut top = Top::default();
        for (name, raw) in &members.0 {
            let slot = match &**name {
                b"model" => &mut top.model,
                b"input" => &mut top.input,
                b"instructions" => &mut top.instructions,
                b"tools" => &mut top.tools,
                b"tool_choice" => &mut top.tool_choice,
                b"parallel_tool_calls" => &mut top.parallel_tool_calls,
                b"max_output_tokens" => &mut top.max_output_tokens,
                b"temperature" => &mut top.temperature,
                b"top_p" => &mut top.top_p,
                b"reasoning" => &mut top.reasoning,
                b"text" => &mut top.text,
                b"stream" => &mut top.stream,
                b"prompt_cache_key" => &mut top.prompt_cache_key,
                b"user" => &mut top.user,
                b"safety_identifier" => &mut top.safety_identifier,
                b"previous_response_id" => &mut top.previous_response_id,
                b"conversation" => &mut top.conversation,
                b"prompt" => &mut top.prompt,
                b"background" => &mut top.background,
                b"include" => &mut top.include,
                b"store" => &mut top.store,
                _ => continue,
            };
            if slot.replace(raw).is_some() {
                return Err(ApiError::invalid_json(format!(
                    "duplicate field `{}`",
                    String::from_utf8_lossy(name)
                )));
            }
        }
        Ok(top)
    }
}

/// What needs a stored response (unless the gateway keeps them: `kept`),
/// conversation or prompt: refused, with what to do instead.
fn refuse_stored(top: &Top<'_>, kept: bool) -> Result<(), ApiError> {
    let stored = [
        (
            "previous_response_id",
            top.previous_response_id.filter(|_| !kept),
        ),
        ("conversation", top.conversation),
        ("prompt", top.prompt),
    ];
    for (name, raw) in stored {
        if kept && raw.is_some_and(|r| !is_null(r)) {
            return Err(ApiError::invalid_value(
                name,
                format!(
                    "'{name}' is not supported: this gateway keeps responses, not conversations \
                     or prompts. Continue a conversation with 'previous_response_id'."
                ),
            ));
        }
        if raw.is_some_and(|r| !is_null(r)) {
            return Err(ApiError::invalid_value(
                name,
                format!(
                    "'{name}' is not supported: this gateway stores no responses, conversations \
                     or prompts. Send the whole conversation in 'input' (with 'store': false)."
                ),
            ));
        }
    }
    let background = top.background == Some(b"true".as_slice());
    if background && !kept {
        return Err(ApiError::invalid_value(
            "background",
            "Background responses are not supported: this gateway stores no responses.",
        ));
    }
    if background && top.store == Some(b"false".as_slice()) {
        return Err(ApiError::invalid_value(
            "background",
            "Background responses must be stored: send 'store': true (the default) with \
             'background': true.",
        ));
    }
    Ok(())
}

/// The chat tools for `tools`, the namespaced names noted in `asked`.
fn tools(raw: &[u8], asked: &mut Asked) -> Result<Vec<Vec<u8>>, ApiError> {
    let mut out = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (i, tool) in array(raw, "tools")?.into_iter().enumerate() {
        let at = |field: &str| format!("tools[{i}].{field}");
        let t = object(tool, format_args!("tools[{i}]"))?;
        let kind = t.required("type", &at)?;
        let kind = text(kind, &|| at("type"))?;
        match &*kind {
            "function" => {
                let (name, chat) = function_tool(&t, None, &|f| at(f))?;
                names.push(name);
                out.push(chat);
            }
            "namespace" => {
                let ns_raw = t.required("name", &at)?;
                let ns = text(ns_raw, &|| at("name"))?.into_owned();
                let inner = t.required("tools", &at)?;
                for (j, f) in array(inner, at("tools"))?.into_iter().enumerate() {
                    let inner_at = |field: &str| format!("tools[{i}].tools[{j}].{field}");
                    let f = object(f, format_args!("tools[{i}].tools[{j}]"))?;
                    match f
                        .get(b"type")
                        .map(|k| text(k, &|| inner_at("type")))
                        .transpose()?
                    {
                        Some(k) if k == "function" => {}
                        // Only functions are translated; others are hosted.
                        _ => continue,
                    }
                    let (name, chat) = function_tool(&f, Some(&ns), &inner_at)?;
                    asked.namespaced.push(Namespaced {
                        chat: name.clone(),
                        namespace: ns.clone(),
                        name: name[ns.len() + NAMESPACE_SEPARATOR.len()..].to_owned(),
                    });
                    names.push(name);
                    out.push(chat);
                }
            }
            "custom" => {
                let name = t.required("name", &at)?;
                let name = text(name, &|| at("name"))?.into_owned();
                out.push(custom_tool(&t, &name));
                asked.custom.push(name.clone());
                names.push(name);
            }
            // Hosted tools (`web_search`, `file_search`, `computer_use…`,
            // `code_interpreter`, `image_generation`, `mcp`, `local_shell`):
            // the provider cannot run them.
            _ => {}
        }
    }
    let mut seen = std::collections::HashSet::with_capacity(names.len());
    if let Some(name) = names.iter().find(|n| !seen.insert(n.as_str())) {
        return Err(ApiError::invalid_value(
            "tools",
            format!("Two tools are named '{name}' once namespaces are flattened."),
        ));
    }
    Ok(out)
}

/// One chat function tool from a Responses function tool; its chat name
/// (`namespace__name` inside a namespace).
fn function_tool(
    t: &Object<'_>,
    namespace: Option<&str>,
    at: &dyn Fn(&str) -> String,
) -> Result<(String, Vec<u8>), ApiError> {
    let name_raw = t.required("name", &at)?;
    let name = text(name_raw, &|| at("name"))?;
    let name = match namespace {
        Some(ns) => format!("{ns}{NAMESPACE_SEPARATOR}{name}"),
        None => name.into_owned(),
    };
    let mut chat = b"{\"type\":\"function\",\"function\":{\"name\":".to_vec();
    crate::json::write::string(&mut chat, &name);
    for field in ["description", "parameters", "strict"] {
        if let Some(raw) = t.get(field.as_bytes()).filter(|r| !is_null(r)) {
            member(&mut chat, field, raw);
        }
    }
    chat.extend_from_slice(b"}}");
    Ok((name, chat))
}

/// A freeform (`custom`) tool as a chat function of one string argument,
/// `input`, described by the tool's description and its format (a grammar
/// the input follows, when it has one).
fn custom_tool(t: &Object<'_>, name: &str) -> Vec<u8> {
    let mut chat = b"{\"type\":\"function\",\"function\":{\"name\":".to_vec();
    crate::json::write::string(&mut chat, name);
    if let Some(d) = t.get(b"description").filter(|r| r.starts_with(b"\"")) {
        member(&mut chat, "description", d);
    }
    chat.extend_from_slice(
        b",\"parameters\":{\"type\":\"object\",\"properties\":{\"input\":{\"type\":\"string\"",
    );
    let definition = t
        .get(b"format")
        .and_then(|f| Object::read(f).ok())
        .and_then(|f| f.get(b"definition"))
        .filter(|d| d.starts_with(b"\""));
    if let Some(d) = definition {
        chat.extend_from_slice(b",\"description\":\"The whole input, following this grammar:\\n");
        chat.extend_from_slice(&d[1..d.len() - 1]);
        chat.push(b'"');
    }
    chat.extend_from_slice(b"}},\"required\":[\"input\"],\"additionalProperties\":false}}}");
    chat
}

/// `tool_choice`: a mode as it is; a function by name in chat's shape;
/// a hosted tool's choice (which the provider cannot honour) as `auto`.
fn tool_choice(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), ApiError> {
    if raw.starts_with(b"\"") {
        out.extend_from_slice(raw);
        return Ok(());
    }
    let choice = object(raw, "tool_choice")?;
    let kind = choice
        .get(b"type")
        .map(|k| text(k, &|| "tool_choice.type".into()))
        .transpose()?;
    if kind.as_deref() != Some("function") {
        out.extend_from_slice(b"\"auto\"");
        return Ok(());
    }
    let name = choice.required_at("name", "tool_choice.name")?;
    let name = text(name, &|| "tool_choice.name".into())?;
    let namespace = choice
        .get(b"namespace")
        .map(|n| text(n, &|| "tool_choice.namespace".into()))
        .transpose()?;
    let chat = match namespace {
        Some(ns) => format!("{ns}{NAMESPACE_SEPARATOR}{name}"),
        None => name.into_owned(),
    };
    out.extend_from_slice(b"{\"type\":\"function\",\"function\":{\"name\":");
    crate::json::write::string(out, &chat);
    out.extend_from_slice(b"}}");
    Ok(())
}

/// `text.format` as `response_format`: `json_schema` with its schema,
/// `json_object`; `text` is the default and writes nothing.
fn response_format(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), ApiError> {
    let f = object(raw, "text.format")?;
    let kind = f.required_at("type", "text.format.type")?;
    match &*text(kind, &|| "text.format.type".into())? {
        "text" => {}
        "json_object" => out.extend_from_slice(b",\"response_format\":{\"type\":\"json_object\"}"),
        "json_schema" => {
            let name = f.required_at("name", "text.format.name")?;
            string(name, &|| "text.format.name".into())?;
            let schema = f.required_at("schema", "text.format.schema")?;
            out.extend_from_slice(
                b",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":",
            );
            out.extend_from_slice(name);
            member(out, "schema", schema);
            for field in ["description", "strict"] {
                if let Some(raw) = f.get(field.as_bytes()).filter(|r| !is_null(r)) {
                    member(out, field, raw);
                }
            }
            out.extend_from_slice(b"}}");
        }
        other => {
            return Err(ApiError::invalid_value(
                "text.format.type",
                format!(
                    "Unsupported text format '{other}': expected text, json_object or json_schema."
                ),
            ));
        }
    }
    Ok(())
}

/// The Responses name of a chat parameter the chat validator refused, so
/// the client reads the field it sent.
pub fn param_name(chat: &str) -> String {
    let (head, rest) = chat.split_at(chat.find(['.', '[']).unwrap_or(chat.len()));
    match head {
        "max_tokens" => "max_output_tokens".into(),
        "reasoning_effort" => "reasoning.effort".into(),
        "response_format" => format!("text.format{rest}"),
        "messages" => "input".into(),
        "tools" | "tool_choice" => head.into(),
        _ => chat.into(),
    }
}
