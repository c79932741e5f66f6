//! `instructions`, the stored conversation a `previous_response_id`
//! continues and the `input` items, as chat messages: messages and their
//! parts, function and custom tool calls and their outputs, and reasoning
//! items (restored for the provider when replay is on).

use std::borrow::Cow;

use super::{NAMESPACE_SEPARATOR, Top};
use crate::dialect::chat::{Call, Message, Part, push_call};
use crate::dialect::raw::{Field, Object, array, is_null, object, string, text};
use crate::dialect::responses::stored::{self, Stored, item_not_found};
use crate::error::ApiError;
use crate::json::Cursor;
use crate::reasoning::ReasoningSeal;

/// `instructions`, the stored conversation and `input` as chat messages.
pub(super) fn messages<'a>(
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
                s.item(&stored::item_id(item)?)
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
