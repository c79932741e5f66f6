//! A Messages request (`POST /v1/messages`) as one chat-completions
//! request for the provider.
//!
//! Read once with the crate's JSON cursor, as the Responses translator
//! reads its requests: strings, numbers and schemas are copied into the
//! chat body as the client wrote them. What the translator refuses, it
//! refuses naming the Messages field (`messages[2].content[0].source`);
//! what it copies unread, the chat validator checks next and
//! [`param_name`] names back.
//!
//! | Messages | chat completions |
//! |---|---|
//! | `system` (a string or text blocks), `system`-role messages | `system` messages |
//! | `user` and `assistant` messages; `text`, `image` (base64 or URL), `document` with a text source | the same roles; `text` and `image_url` parts |
//! | `tool_use` blocks | the assistant message's `tool_calls` (`input` as the arguments' JSON text) |
//! | `tool_result` blocks (a string or blocks; `is_error`) | `tool` messages, before the user's other blocks; an error's text after `Error:`; its images in a user message after them |
//! | `thinking` blocks | with reasoning replay on for some model, a block whose `signature` the gateway made for its text: the assistant message's `reasoning_content` (the validator then keeps or strips it as the model says); any other block left out, as with replay off |
//! | `redacted_thinking` blocks | left out |
//! | `server_tool_use`, `web_search_tool_result` and other server blocks | left out: the provider did not run those tools |
//! | tools with `input_schema` (`type` absent or `custom`) | function tools |
//! | Anthropic-defined and server tools (`bash_…`, `web_search_…`, …) | left out: the provider cannot know them |
//! | `tool_choice` `auto` / `any` / `tool` / `none`; `disable_parallel_tool_use` | `auto` / `required` / the function / `none`; `parallel_tool_calls: false` |
//! | `stop_sequences` (at most 4) | `stop` |
//! | `max_tokens`, `temperature`, `top_p`, `top_k`, `stream` | the same (`top_k` as the provider's own parameter) |
//! | `output_config.effort`; else `thinking.budget_tokens` | `reasoning_effort` (`max` as `high`; a budget under 4096 as `low`, under 16384 `medium`, else `high`) |
//! | `output_config.format` (`json_schema`) | `response_format` (`json_schema`, named `output`) |
//! | `metadata.user_id` | `user` |
//! | `cache_control`, `context_management`, `container`, `mcp_servers`, `service_tier`, any other | read and left out (documented as not applied) |

use std::borrow::Cow;
use std::fmt::Display;

use crate::dialect::chat::{Call, Message, Part, write_messages, write_tools};
use crate::dialect::raw::{
    At, Object, array, is_null, member, not_an_object, object, string, text,
};
use crate::error::ApiError;
use crate::json::Cursor;
use crate::reasoning::ReasoningSeal;

/// At most this many `stop_sequences` (chat's `stop` takes four).
pub const MAX_STOP_SEQUENCES: usize = 4;

/// What the answer's translation needs to know of the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    /// `stream`.
    pub stream: bool,
    /// Whether the answer carries `thinking` blocks: `thinking` was
    /// `enabled` or `adaptive`.
    pub thinking: bool,
    /// `thinking.display: "omitted"`: thinking blocks carry only their
    /// signature, not the text.
    pub omit_thinking: bool,
    /// `model` as the client wrote it (a JSON string), for an answer whose
    /// provider did not name its model.
    pub model: Vec<u8>,
}

/// The chat request for `body`, and what the answer's translation needs.
/// With `replay` (some model replays reasoning), a thinking block that
/// `replay` signed goes to the provider as its message's reasoning.
pub fn translate(
    body: &[u8],
    replay: Option<&ReasoningSeal>,
) -> Result<(Vec<u8>, Asked), ApiError> {
    translate_with(body, true, replay)
}

/// The same for a token count (`POST /v1/messages/count_tokens`), whose
/// body has no `max_tokens`.
pub fn translate_count(body: &[u8]) -> Result<(Vec<u8>, Asked), ApiError> {
    translate_with(body, false, None)
}

fn translate_with(
    body: &[u8],
    answer: bool,
    replay: Option<&ReasoningSeal>,
) -> Result<(Vec<u8>, Asked), ApiError> {
    crate::dialect::tape::indexed(body, || translate_body(body, answer, replay))
}

/// [`translate_with`], the body indexed where it is long.
fn translate_body(
    body: &[u8],
    answer: bool,
    replay: Option<&ReasoningSeal>,
) -> Result<(Vec<u8>, Asked), ApiError> {
    let top = Object::read(body).map_err(|e| e.unwrap_or_else(not_an_object))?;
    if let Some(name) = duplicate(&top) {
        return Err(ApiError::invalid_json(format!("duplicate field `{name}`")));
    }
    let model = top.required_at("model", "model")?;
    if !model.starts_with(b"\"") {
        return Err(ApiError::invalid_type("model", "a string"));
    }
    let mut asked = Asked {
        model: model.to_vec(),
        ..Asked::default()
    };
    let mut out = Vec::with_capacity(body.len() + 256);
    out.extend_from_slice(b"{\"model\":");
    out.extend_from_slice(model);

    let mut messages = Vec::new();
    if let Some(raw) = top.get(b"system").filter(|r| !is_null(r)) {
        let parts = system(raw, &"system")?;
        if !parts.is_empty() {
            messages.push(Message::System(parts));
        }
    }
    let list = top.required_at("messages", "messages")?;
    // What the newest user message holds that the provider cannot read is
    // refused; the same in an older message (where the client cannot take
    // it back) is left out with a note in its place.
    let mut newest_refused = None;
    for (i, m) in array(list, "messages")?.into_iter().enumerate() {
        if let Some(refused) = message(m, i, &mut messages, replay)? {
            newest_refused = refused;
        }
    }
    if let Some(e) = newest_refused {
        return Err(e);
    }
    out.extend_from_slice(b",\"messages\":");
    write_messages(&mut out, &messages);

    if answer {
        let max_tokens = top.required_at("max_tokens", "max_tokens")?;
        member(&mut out, "max_tokens", max_tokens);
    }

    let tools = match top.get(b"tools").filter(|r| !is_null(r)) {
        Some(raw) => tools(raw)?,
        None => Vec::new(),
    };
    if !tools.is_empty() {
        write_tools(&mut out, &tools);
        if let Some(raw) = top.get(b"tool_choice").filter(|r| !is_null(r)) {
            tool_choice(&mut out, raw)?;
        }
    }
    if let Some(raw) = top.get(b"stop_sequences").filter(|r| !is_null(r)) {
        let n = array(raw, "stop_sequences")?.len();
        if n > MAX_STOP_SEQUENCES {
            return Err(ApiError::invalid_value(
                "stop_sequences",
                format!(
                    "'stop_sequences' may hold at most {MAX_STOP_SEQUENCES} sequences here \
                     (the provider's limit); got {n}."
                ),
            ));
        }
        if n > 0 {
            member(&mut out, "stop", raw);
        }
    }
    for name in ["temperature", "top_p", "top_k"] {
        if let Some(raw) = top.get(name.as_bytes()).filter(|r| !is_null(r)) {
            member(&mut out, name, raw);
        }
    }
    let effort = reasoning(&top, &mut asked)?;
    if let Some(effort) = effort {
        out.extend_from_slice(b",\"reasoning_effort\":\"");
        out.extend_from_slice(effort.as_bytes());
        out.push(b'"');
    }
    if let Some(format) = top
        .get(b"output_config")
        .and_then(|c| Object::read(c).ok())
        .and_then(|c| c.get(b"format"))
        .filter(|r| !is_null(r))
    {
        response_format(&mut out, format)?;
    }
    if let Some(raw) = top.get(b"metadata").filter(|r| !is_null(r)) {
        let user = object(raw, "metadata")?.get(b"user_id");
        if let Some(user) = user.filter(|r| !is_null(r)) {
            member(
                &mut out,
                "user",
                string(user, &|| "metadata.user_id".into())?,
            );
        }
    }
    if let Some(raw) = top.get(b"stream").filter(|r| !is_null(r)) {
        asked.stream = raw == b"true";
        member(&mut out, "stream", raw);
    }
    out.push(b'}');
    Ok((out, asked))
}

/// The first member the body names twice, among those read.
fn duplicate(top: &Object<'_>) -> Option<String> {
    const READ: [&[u8]; 14] = [
        b"model",
        b"system",
        b"messages",
        b"max_tokens",
        b"tools",
        b"tool_choice",
        b"stop_sequences",
        b"temperature",
        b"top_p",
        b"top_k",
        b"thinking",
        b"output_config",
        b"metadata",
        b"stream",
    ];
    READ.iter()
        .find(|name| top.0.iter().filter(|(n, _)| &**n == **name).count() > 1)
        .map(|name| String::from_utf8_lossy(name).into_owned())
}

/// `output_config.effort`, else what `thinking` implies, as the chat
/// `reasoning_effort`; notes in `asked` whether thinking is shown.
fn reasoning(top: &Object<'_>, asked: &mut Asked) -> Result<Option<&'static str>, ApiError> {
    let mut effort = None;
    if let Some(raw) = top.get(b"thinking").filter(|r| !is_null(r)) {
        let t = object(raw, "thinking")?;
        let kind = t.required_at("type", "thinking.type")?;
        match &*text(kind, &|| "thinking.type".into())? {
            "enabled" => {
                asked.thinking = true;
                if let Some(b) = t.get(b"budget_tokens").filter(|r| !is_null(r)) {
                    let budget: u64 = std::str::from_utf8(b)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| {
                            ApiError::invalid_type("thinking.budget_tokens", "an integer")
                        })?;
                    effort = Some(match budget {
                        0..4096 => "low",
                        4096..16384 => "medium",
                        _ => "high",
                    });
                }
            }
            "adaptive" => asked.thinking = true,
            "disabled" => {}
            other => {
                return Err(ApiError::invalid_value(
                    "thinking.type",
                    format!(
                        "Unsupported thinking type '{other}': expected enabled, adaptive or disabled."
                    ),
                ));
            }
        }
        if let Some(d) = t.get(b"display").filter(|r| !is_null(r)) {
            asked.omit_thinking = &*text(d, &|| "thinking.display".into())? == "omitted";
        }
    }
    if let Some(raw) = top.get(b"output_config").filter(|r| !is_null(r)) {
        let config = object(raw, "output_config")?;
        if let Some(e) = config.get(b"effort").filter(|r| !is_null(r)) {
            effort = Some(match &*text(e, &|| "output_config.effort".into())? {
                "low" => "low",
                "medium" => "medium",
                "high" | "max" => "high",
                other => {
                    return Err(ApiError::invalid_value(
                        "output_config.effort",
                        format!("Unsupported effort '{other}': expected low, medium, high or max."),
                    ));
                }
            });
        }
    }
    Ok(effort)
}

/// `output_config.format` as `response_format`: a `json_schema` format
/// with its schema (named `output`, as chat needs a name).
fn response_format(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), ApiError> {
    let f = object(raw, "output_config.format")?;
    let kind = f.required_at("type", "output_config.format.type")?;
    match &*text(kind, &|| "output_config.format.type".into())? {
        "json_schema" => {
            let schema = f.required_at("schema", "output_config.format.schema")?;
            out.extend_from_slice(
                b",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"output\",\"strict\":true",
            );
            member(out, "schema", schema);
            out.extend_from_slice(b"}}");
            Ok(())
        }
        other => Err(ApiError::invalid_value(
            "output_config.format.type",
            format!("Unsupported output format '{other}': expected json_schema."),
        )),
    }
}

/// `system` (or a `system`-role message's content): a string, or text
/// blocks, as JSON strings as written.
fn system<'a>(raw: &'a [u8], param: &dyn Display) -> Result<Vec<&'a [u8]>, ApiError> {
    if raw.starts_with(b"\"") {
        return Ok(vec![raw]);
    }
    let mut out = Vec::new();
    for (j, block) in array(raw, param)?.into_iter().enumerate() {
        let at = |field: &str| format!("{param}[{j}].{field}");
        let b = object(block, format_args!("{param}[{j}]"))?;
        let kind = b.required("type", &at)?;
        match &*text(kind, &|| at("type"))? {
            "text" => out.push(string(b.required("text", &at)?, &|| at("text"))?),
            other => {
                return Err(ApiError::invalid_value(
                    at("type"),
                    format!("A system prompt holds text blocks only; got '{other}'."),
                ));
            }
        }
    }
    Ok(out)
}

/// `messages[i]` as chat messages, appended to `out`; for a user message,
/// what in it the provider cannot read (the refusal it would get as the
/// newest).
fn message<'a>(
    raw: &'a [u8],
    i: usize,
    out: &mut Vec<Message<'a>>,
    replay: Option<&ReasoningSeal>,
) -> Result<Option<Option<ApiError>>, ApiError> {
    let at = |field: &str| format!("messages[{i}].{field}");
    let m = object(raw, format_args!("messages[{i}]"))?;
    let role = m.required("role", &at)?;
    let role = text(role, &|| at("role"))?;
    let content = m.required("content", &at)?;
    let param = At {
        base: &"messages",
        index: i,
        field: ".content",
    };
    match &*role {
        "system" => {
            let parts = system(content, &param)?;
            if !parts.is_empty() {
                out.push(Message::System(parts));
            }
        }
        "user" => return user(content, &param, out).map(Some),
        "assistant" => assistant(content, &param, out, replay)?,
        other => {
            return Err(ApiError::invalid_value(
                at("role"),
                format!("Unsupported role '{other}': expected user or assistant."),
            ));
        }
    }
    Ok(None)
}

/// What stands in a translated message for a block the provider cannot
/// read (a PDF, an image by file id, a kind this version does not know).
const LEFT_OUT: &[u8] =
    b"\"[A content block was left out here: the provider reads only text and images.]\"";

/// A content block, read.
enum Content<'a> {
    Part(Part<'a>),
    /// Nothing the provider is sent (reasoning, server results).
    Nothing,
    /// What the provider cannot read: the refusal it gets in the newest
    /// message.
    Unreadable(ApiError),
}

/// A user message: its `tool_result` blocks as `tool` messages first (chat
/// wants them right after the assistant's calls), then the rest as one
/// user message, with the images tool results returned.
fn user<'a>(
    content: &'a [u8],
    param: &dyn Display,
    out: &mut Vec<Message<'a>>,
) -> Result<Option<ApiError>, ApiError> {
    if content.starts_with(b"\"") {
        out.push(Message::User(vec![Part::Text(content)]));
        return Ok(None);
    }
    let mut refused = None;
    let mut parts = Vec::new();
    let mut images = Vec::new();
    for (j, block) in array(content, param)?.into_iter().enumerate() {
        let at = |field: &str| format!("{param}[{j}].{field}");
        let b = object(block, format_args!("{param}[{j}]"))?;
        let kind = b.required("type", &at)?;
        match &*text(kind, &|| at("type"))? {
            "tool_result" => {
                let id = b.required("tool_use_id", &at)?;
                let call_id = string(id, &|| at("tool_use_id"))?;
                let mut text = Vec::new();
                if b.get(b"is_error") == Some(b"true".as_slice()) {
                    text.push(b"\"Error:\"".as_slice());
                }
                match b.get(b"content").filter(|r| !is_null(r)) {
                    None => {}
                    Some(c) if c.starts_with(b"\"") => text.push(c),
                    Some(c) => {
                        let inner = At {
                            base: param,
                            index: j,
                            field: ".content",
                        };
                        for (k, block) in array(c, inner)?.into_iter().enumerate() {
                            // A tool's output is never refused: the client
                            // cannot change it.
                            match content_block(block, &format_args!("{inner}[{k}]"))? {
                                Content::Part(Part::Text(t)) => text.push(t),
                                Content::Part(image @ Part::Image(..)) => images.push(image),
                                Content::Unreadable(_) => text.push(LEFT_OUT),
                                Content::Nothing => {}
                            }
                        }
                    }
                }
                if text.is_empty() {
                    text.push(b"\"\"".as_slice());
                }
                out.push(Message::Tool { call_id, text });
            }
            _ => match content_block(block, &format_args!("{param}[{j}]"))? {
                Content::Part(p) => parts.push(p),
                Content::Unreadable(e) => {
                    parts.push(Part::Text(LEFT_OUT));
                    refused.get_or_insert(e);
                }
                Content::Nothing => {}
            },
        }
    }
    parts.extend(images);
    if !parts.is_empty() {
        out.push(Message::User(parts));
    }
    Ok(refused)
}

/// A user content block other than a tool result: a text or image part,
/// nothing (reasoning, server results), or what the provider cannot read.
fn content_block<'a>(raw: &'a [u8], param: &dyn Display) -> Result<Content<'a>, ApiError> {
    let at = |field: &str| format!("{param}.{field}");
    let b = object(raw, param)?;
    let kind = b.required("type", &at)?;
    Ok(match &*text(kind, &|| at("type"))? {
        "text" => Content::Part(Part::Text(string(b.required("text", &at)?, &|| {
            at("text")
        })?)),
        "image" => image(&b, &at)?,
        "document" => {
            let source = object(b.required("source", &at)?, at("source"))?;
            let kind = source.required_at("type", &at("source.type"))?;
            if &*text(kind, &|| at("source.type"))? != "text" {
                return Ok(Content::Unreadable(ApiError::invalid_value(
                    at("source.type"),
                    "Only documents with a text source are supported: the provider reads \
                     text and images.",
                )));
            }
            let data = source.required_at("data", &at("source.data"))?;
            Content::Part(Part::Text(string(data, &|| at("source.data"))?))
        }
        "thinking"
        | "redacted_thinking"
        | "tool_use"
        | "server_tool_use"
        | "web_search_tool_result"
        | "web_fetch_tool_result"
        | "code_execution_tool_result"
        | "search_result"
        | "container_upload"
        | "mcp_tool_use"
        | "mcp_tool_result" => Content::Nothing,
        other => Content::Unreadable(ApiError::invalid_value(
            at("type"),
            format!(
                "Unsupported content block '{other}': expected text, image, document, \
                 tool_use, tool_result or thinking."
            ),
        )),
    })
}

/// An `image` block: a URL source as it is, a base64 source as a `data:`
/// URL.
fn image<'a>(b: &Object<'a>, at: &dyn Fn(&str) -> String) -> Result<Content<'a>, ApiError> {
    let source = object(b.required("source", &at)?, at("source"))?;
    let kind = source.required_at("type", &at("source.type"))?;
    match &*text(kind, &|| at("source.type"))? {
        "url" => {
            let url = source.required_at("url", &at("source.url"))?;
            Ok(Content::Part(Part::Image(
                Cow::Borrowed(string(url, &|| at("source.url"))?),
                None,
            )))
        }
        "base64" => {
            let media = source.required_at("media_type", &at("source.media_type"))?;
            let media = string(media, &|| at("source.media_type"))?;
            let data = source.required_at("data", &at("source.data"))?;
            let data = string(data, &|| at("source.data"))?;
            // `"data:` + the media type's and the data's insides + `"`.
            let mut url = Vec::with_capacity(media.len() + data.len() + 16);
            url.extend_from_slice(b"\"data:");
            url.extend_from_slice(&media[1..media.len() - 1]);
            url.extend_from_slice(b";base64,");
            url.extend_from_slice(&data[1..data.len() - 1]);
            url.push(b'"');
            Ok(Content::Part(Part::Image(Cow::Owned(url), None)))
        }
        other => Ok(Content::Unreadable(ApiError::invalid_value(
            at("source.type"),
            format!(
                "Unsupported image source '{other}': expected base64 or url (file ids need stored files, which this gateway does not keep)."
            ),
        ))),
    }
}

/// An assistant message: its text and its `tool_use` blocks as one chat
/// assistant message; with `replay`, the thinking it signed as the
/// message's reasoning, any other thinking left out.
fn assistant<'a>(
    content: &'a [u8],
    param: &dyn Display,
    out: &mut Vec<Message<'a>>,
    replay: Option<&ReasoningSeal>,
) -> Result<(), ApiError> {
    if content.starts_with(b"\"") {
        out.push(Message::Assistant {
            text: vec![content],
            calls: Vec::new(),
            reasoning: Vec::new(),
        });
        return Ok(());
    }
    let mut text_parts = Vec::new();
    let mut calls = Vec::new();
    let mut reasoning = Vec::new();
    for (j, block) in array(content, param)?.into_iter().enumerate() {
        let at = |field: &str| format!("{param}[{j}].{field}");
        let b = object(block, format_args!("{param}[{j}]"))?;
        let kind = b.required("type", &at)?;
        match &*text(kind, &|| at("type"))? {
            "text" => text_parts.push(string(b.required("text", &at)?, &|| at("text"))?),
            "tool_use" => {
                let id = string(b.required("id", &at)?, &|| at("id"))?;
                let name = text(b.required("name", &at)?, &|| at("name"))?.into_owned();
                let input = b.required("input", &at)?;
                if !input.starts_with(b"{") {
                    return Err(ApiError::invalid_type(at("input"), "an object"));
                }
                // The arguments: the input's JSON text, as a JSON string.
                let mut arguments = Vec::with_capacity(input.len() + 16);
                crate::json::write::string(&mut arguments, &String::from_utf8_lossy(input));
                calls.push(Call {
                    id,
                    name,
                    arguments: Cow::Owned(arguments),
                });
            }
            "thinking" => {
                if let Some(thinking) = replay.and_then(|seal| signed_thinking(&b, seal)) {
                    reasoning.push(Cow::Borrowed(thinking));
                }
            }
            // Redacted thinking is the provider's secret, never this
            // gateway's; server tools were run by a server that is not the
            // provider.
            "redacted_thinking"
            | "server_tool_use"
            | "web_search_tool_result"
            | "web_fetch_tool_result"
            | "code_execution_tool_result"
            | "mcp_tool_use"
            | "mcp_tool_result"
            | "container_upload" => {}
            other => {
                return Err(ApiError::invalid_value(
                    at("type"),
                    format!(
                        "Unsupported assistant content block '{other}': expected text, \
                         tool_use or thinking."
                    ),
                ));
            }
        }
    }
    // Only thinking: nothing the provider is sent.
    if !text_parts.is_empty() || !calls.is_empty() {
        out.push(Message::Assistant {
            text: text_parts,
            calls,
            reasoning,
        });
    }
    Ok(())
}

/// The `thinking` text (a JSON string as written) of the block `b` when
/// its `signature` is the one `seal` gives that text: the model's own
/// reasoning, given out by this gateway. `None` for another's block (a
/// conversation begun with another model), a changed one, or one without
/// a text or signature: such a block is left out, never refused.
fn signed_thinking<'a>(b: &Object<'a>, seal: &ReasoningSeal) -> Option<&'a [u8]> {
    let thinking = b.get(b"thinking").filter(|t| t.starts_with(b"\""))?;
    let signature = b.get(b"signature").filter(|s| s.starts_with(b"\""))?;
    let text = Cursor::whole(thinking, Cursor::str).ok()?;
    let signature = Cursor::whole(signature, Cursor::str).ok()?;
    (!text.is_empty() && seal.verify(&text, &signature)).then_some(thinking)
}

/// The chat function tools for `tools`: the client's own (with an
/// `input_schema`); Anthropic-defined and server tools left out.
fn tools(raw: &[u8]) -> Result<Vec<Vec<u8>>, ApiError> {
    let mut out = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (i, tool) in array(raw, "tools")?.into_iter().enumerate() {
        let at = |field: &str| format!("tools[{i}].{field}");
        let t = object(tool, format_args!("tools[{i}]"))?;
        if let Some(kind) = t.get(b"type").filter(|r| !is_null(r))
            && &*text(kind, &|| at("type"))? != "custom"
        {
            continue;
        }
        let name = text(t.required("name", &at)?, &|| at("name"))?;
        if !names.insert(name.clone().into_owned()) {
            return Err(ApiError::invalid_value(
                "tools",
                format!("Two tools are named '{name}'."),
            ));
        }
        let schema = t.required("input_schema", &at)?;
        let mut chat = b"{\"type\":\"function\",\"function\":{\"name\":".to_vec();
        crate::json::write::string(&mut chat, &name);
        if let Some(d) = t.get(b"description").filter(|r| !is_null(r)) {
            member(&mut chat, "description", string(d, &|| at("description"))?);
        }
        member(&mut chat, "parameters", schema);
        chat.extend_from_slice(b"}}");
        out.push(chat);
    }
    Ok(out)
}

/// `tool_choice` in chat's words, and `parallel_tool_calls: false` for
/// `disable_parallel_tool_use`.
fn tool_choice(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), ApiError> {
    let choice = object(raw, "tool_choice")?;
    let kind = choice.required_at("type", "tool_choice.type")?;
    out.extend_from_slice(b",\"tool_choice\":");
    match &*text(kind, &|| "tool_choice.type".into())? {
        "auto" => out.extend_from_slice(b"\"auto\""),
        "any" => out.extend_from_slice(b"\"required\""),
        "none" => out.extend_from_slice(b"\"none\""),
        "tool" => {
            let name = choice.required_at("name", "tool_choice.name")?;
            let name = string(name, &|| "tool_choice.name".into())?;
            out.extend_from_slice(b"{\"type\":\"function\",\"function\":{\"name\":");
            out.extend_from_slice(name);
            out.extend_from_slice(b"}}");
        }
        other => {
            return Err(ApiError::invalid_value(
                "tool_choice.type",
                format!("Unsupported tool choice '{other}': expected auto, any, tool or none."),
            ));
        }
    }
    if choice.get(b"disable_parallel_tool_use") == Some(b"true".as_slice()) {
        out.extend_from_slice(b",\"parallel_tool_calls\":false");
    }
    Ok(())
}

/// The Messages name of a chat parameter the chat validator refused, so
/// the client reads the field it sent.
pub fn param_name(chat: &str) -> String {
    let (head, _) = chat.split_at(chat.find(['.', '[']).unwrap_or(chat.len()));
    match head {
        "stop" => "stop_sequences".into(),
        "reasoning_effort" => "output_config.effort".into(),
        "user" => "metadata.user_id".into(),
        "messages" | "tools" | "tool_choice" | "parallel_tool_calls" => head.into(),
        _ => chat.into(),
    }
}
