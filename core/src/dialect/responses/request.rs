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

use std::borrow::Cow;

use super::stored::{Stored, item_not_found};
use crate::dialect::chat::{Call, Message, Part, push_call, write_messages, write_tools};
use crate::dialect::raw::{
    Field, Object, array, is_null, member, not_an_object, object, string, text,
};
use crate::error::ApiError;
use crate::json::Cursor;
use crate::reasoning::ReasoningSeal;

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

/// `instructions`, the stored conversation and `input` as chat messages.
fn messages<'a>(
    top: &Top<'a>,
    replay: Option<&ReasoningSeal>,
    stored: Option<&Stored<'a>>,
) -> Result<Vec<Message<'a>>, ApiError> {
    let mut out = Vec::new();
    // Reasoning items read, for the next assistant message.
    let mut reasoning: Vec<Cow<'a, [u8]>> = Vec::new();
    if let Some(raw) = top.instructions.filter(|r| !is_null(r)) {
        out.push(Message::System(vec![string(raw, &|| {
            "instructions".into()
        })?]));
    }
    let input = top.input.ok_or_else(|| ApiError::missing("input"))?;
    let text_input = input.starts_with(b"\"");
    if !text_input && !input.starts_with(b"[") {
        return Err(ApiError::invalid_type("input", "a string or an array"));
    }
    // The items in order, each with its place for errors: the stored
    // conversation's, then the input's (a reference as the item it names).
    let mut items: Vec<(Place, &'a [u8])> = Vec::new();
    if let Some(stored) = stored {
        items.extend(stored.context.iter().map(|it| (Place::Stored, *it)));
    }
    if !text_input {
        let referenced = stored.filter(|s| !s.items.is_empty());
        for (i, item) in array(input, "input")?.into_iter().enumerate() {
            let named = referenced.and_then(|s| {
                let it = Object::read(item).ok()?;
                (it.get(b"type")? == b"\"item_reference\"").then_some(())?;
                s.item(&super::stored::item_id(item)?)
            });
            items.push((Place::Input(i), named.unwrap_or(item)));
        }
    }
    // Images a tool returned, sent after the tool messages as the user's.
    let mut images: Vec<Part<'a>> = Vec::new();
    for (place, item) in items {
        let at = |field: &str| format!("{place}.{field}");
        let it = object(item, place)?;
        let kind = match it.get(b"type") {
            Some(k) => text(k, &|| at("type"))?,
            None if it.get(b"role").is_some() => Cow::Borrowed("message"),
            None => return Err(ApiError::missing(at("type"))),
        };
        if kind != "function_call_output" && !images.is_empty() {
            out.push(Message::User(std::mem::take(&mut images)));
        }
        match &*kind {
            "message" => message(&it, &at, &mut out, &mut reasoning)?,
            "function_call" => {
                let id = it.required("call_id", &at)?;
                let id = string(id, &|| at("call_id"))?;
                let name = it.required("name", &at)?;
                let name = text(name, &|| at("name"))?;
                let name = match it.get(b"namespace").filter(|r| !is_null(r)) {
                    Some(ns) => format!(
                        "{}{NAMESPACE_SEPARATOR}{name}",
                        text(ns, &|| at("namespace"))?
                    ),
                    None => name.into_owned(),
                };
                let arguments = it.required("arguments", &at)?;
                let arguments = Cow::Borrowed(string(arguments, &|| at("arguments"))?);
                let call = Call {
                    id,
                    name,
                    arguments,
                };
                push_call(&mut out, call, &mut reasoning);
            }
            "custom_tool_call" => {
                let id = it.required("call_id", &at)?;
                let id = string(id, &|| at("call_id"))?;
                let name = it.required("name", &at)?;
                let name = text(name, &|| at("name"))?.into_owned();
                let input = it.required("input", &at)?;
                let input = string(input, &|| at("input"))?;
                // The function's arguments: `{"input": …}`, as a string.
                let mut arguments = Vec::with_capacity(input.len() + 16);
                let object = format!("{{\"input\":{}}}", String::from_utf8_lossy(input));
                crate::json::write::string(&mut arguments, &object);
                let call = Call {
                    id,
                    name,
                    arguments: Cow::Owned(arguments),
                };
                push_call(&mut out, call, &mut reasoning);
            }
            "function_call_output" | "custom_tool_call_output" => {
                let id = it.required("call_id", &at)?;
                let call_id = string(id, &|| at("call_id"))?;
                let output = it.required("output", &at)?;
                let mut text = Vec::new();
                if output.starts_with(b"\"") {
                    text.push(output);
                } else {
                    for part in parts(output, &Field(&at, "output"))? {
                        match part {
                            Part::Text(t) => text.push(t),
                            image @ Part::Image(..) => images.push(image),
                        }
                    }
                }
                out.push(Message::Tool { call_id, text });
            }
            "reasoning" => {
                if let Some(seal) = replay {
                    reasoning.extend(reasoning_item(&it, seal));
                }
            }
            // Hosted tools' calls were run by a server that is not the
            // provider.
            "web_search_call"
            | "file_search_call"
            | "computer_call"
            | "computer_call_output"
            | "code_interpreter_call"
            | "image_generation_call"
            | "local_shell_call"
            | "local_shell_call_output"
            | "mcp_list_tools"
            | "mcp_approval_request"
            | "mcp_approval_response"
            | "mcp_call" => {}
            "item_reference" if stored.is_some() => {
                let id = it.required("id", &at)?;
                return Err(item_not_found(&text(id, &|| at("id"))?));
            }
            "item_reference" => {
                return Err(ApiError::invalid_value(
                    at("type"),
                    "Item references are not supported: this gateway stores no items. \
                     Send the items themselves.",
                ));
            }
            other => {
                return Err(ApiError::invalid_value(
                    at("type"),
                    format!("Unsupported input item type '{other}'."),
                ));
            }
        }
    }
    if !images.is_empty() {
        out.push(Message::User(images));
    }
    if text_input {
        out.push(Message::User(vec![Part::Text(input)]));
    }
    Ok(out)
}

/// Where an item came from, for the errors that name it.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// The stored conversation `previous_response_id` continues.
    Stored,
    /// `input[i]`.
    Input(usize),
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Stored => f.write_str("previous_response_id"),
            Place::Input(i) => write!(f, "input[{i}]"),
        }
    }
}

/// The reasoning a `reasoning` item carries back, as a JSON string: the
/// text of its `encrypted_content` when `seal` sealed it, else its
/// `summary` texts joined (its `content`'s `reasoning_text` parts when it
/// has no summary). `None` for an item whose `encrypted_content` this
/// gateway did not seal (another's, or changed), one that holds no text,
/// and one not shaped as a reasoning item: left out, never refused (with
/// reasoning replay off every reasoning item is left out unread; turning
/// it on refuses nothing more).
fn reasoning_item<'a>(it: &Object<'a>, seal: &ReasoningSeal) -> Option<Cow<'a, [u8]>> {
    if let Some(sealed) = it.get(b"encrypted_content").filter(|r| !is_null(r)) {
        let sealed = Cursor::whole(sealed, Cursor::str).ok()?;
        let text = seal.open(&sealed).filter(|t| !t.is_empty())?;
        let mut json = Vec::with_capacity(text.len() + 16);
        crate::json::write::string(&mut json, &String::from_utf8_lossy(&text));
        return Some(Cow::Owned(json));
    }
    let mut joined: Vec<&'a [u8]> = Vec::new();
    for field in [&b"summary"[..], b"content"] {
        let Some(raw) = it.get(field).filter(|r| !is_null(r)) else {
            continue;
        };
        for part in array(raw, "").ok()? {
            let text = Object::read(part).ok()?.get(b"text");
            if let Some(t) = text.filter(|t| t.starts_with(b"\"")) {
                joined.push(t);
            }
        }
        if !joined.is_empty() {
            break;
        }
    }
    let mut json = b"\"".to_vec();
    for (k, t) in joined.iter().enumerate() {
        if k > 0 {
            json.extend_from_slice(b"\\n\\n");
        }
        json.extend_from_slice(&t[1..t.len() - 1]);
    }
    json.push(b'"');
    (json.len() > 2).then_some(Cow::Owned(json))
}

/// A `message` item; an assistant's takes the reasoning read before it.
fn message<'a>(
    it: &Object<'a>,
    at: &dyn Fn(&str) -> String,
    out: &mut Vec<Message<'a>>,
    reasoning: &mut Vec<Cow<'a, [u8]>>,
) -> Result<(), ApiError> {
    let role = it.required("role", &at)?;
    let role = text(role, &|| at("role"))?;
    let content = it.required("content", &at)?;
    let parts = if content.starts_with(b"\"") {
        vec![Part::Text(content)]
    } else {
        parts(content, &Field(at, "content"))?
    };
    let texts = |parts: Vec<Part<'a>>, role: &str| -> Result<Vec<&'a [u8]>, ApiError> {
        parts
            .into_iter()
            .map(|p| match p {
                Part::Text(t) => Ok(t),
                Part::Image(..) => Err(ApiError::invalid_value(
                    at("content"),
                    format!("A '{role}' message cannot carry an image."),
                )),
            })
            .collect()
    };
    match &*role {
        "user" => out.push(Message::User(parts)),
        "system" | "developer" => out.push(Message::System(texts(parts, &role)?)),
        "assistant" => out.push(Message::Assistant {
            text: texts(parts, &role)?,
            calls: Vec::new(),
            reasoning: std::mem::take(reasoning),
        }),
        other => {
            return Err(ApiError::invalid_value(
                at("role"),
                format!(
                    "Unsupported role '{other}': expected user, assistant, system or developer."
                ),
            ));
        }
    }
    Ok(())
}

/// A content array's parts; `param` names the array.
fn parts<'a>(raw: &'a [u8], param: &dyn std::fmt::Display) -> Result<Vec<Part<'a>>, ApiError> {
    let mut out = Vec::new();
    for (j, part) in array(raw, param)?.into_iter().enumerate() {
        let at = |field: &str| format!("{param}[{j}].{field}");
        let p = object(part, format_args!("{param}[{j}]"))?;
        let kind = p.required("type", &at)?;
        match &*text(kind, &|| at("type"))? {
            "input_text" | "output_text" | "text" => {
                let t = p.required("text", &at)?;
                out.push(Part::Text(string(t, &|| at("text"))?));
            }
            "refusal" => {
                let t = p.required("refusal", &at)?;
                out.push(Part::Text(string(t, &|| at("refusal"))?));
            }
            "input_image" => {
                let Some(url) = p.get(b"image_url").filter(|r| !is_null(r)) else {
                    return Err(ApiError::invalid_value(
                        at("image_url"),
                        "Images are sent by 'image_url' (a URL or a data: URL); \
                         file ids need stored files, which this gateway does not keep.",
                    ));
                };
                let url = string(url, &|| at("image_url"))?;
                let detail = p.get(b"detail").filter(|r| !is_null(r));
                out.push(Part::Image(Cow::Borrowed(url), detail));
            }
            other => {
                return Err(ApiError::invalid_value(
                    at("type"),
                    format!(
                        "Unsupported content part '{other}': expected input_text, output_text \
                         or input_image."
                    ),
                ));
            }
        }
    }
    Ok(out)
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
