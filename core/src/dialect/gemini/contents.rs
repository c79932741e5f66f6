//! A request's `systemInstruction` and `contents` as chat messages.
//!
//! Read in two passes. The first reads each turn's parts and refuses what
//! is malformed, naming the Gemini field (`contents[2].parts[0].inlineData`);
//! the second pairs each `functionResponse` with the call it answers (by
//! `id`, else by name, in order), and the third writes the messages,
//! borrowing what the first two made. Gemini's calls and responses need
//! not carry ids, and chat's must: a call without one gets `call_{i}_{k}`
//! (turn `i`, its `k`-th call), which its response then names.

use std::borrow::Cow;
use std::fmt::Display;

use crate::dialect::chat::{Call, Message, Part};
use crate::dialect::raw::{At, array, is_null, object, string, text};
use crate::error::ApiError;
use crate::json::Cursor;
use crate::reasoning::ReasoningSeal;

/// What stands in a translated message for a part the provider cannot
/// read (a PDF, a file by URI, audio).
pub(super) const LEFT_OUT: &[u8] =
    b"\"[A part was left out here: the provider reads only text and images.]\"";

/// One part, read.
#[derive(Debug)]
enum Piece<'a> {
    /// A JSON string as written.
    Text(&'a [u8]),
    /// An image as a `data:` URL (a JSON string).
    Image(Vec<u8>),
    /// What the provider cannot read, in an older turn.
    Note,
    Call {
        /// A JSON string: the client's, or made up.
        id: Vec<u8>,
        /// Whether the client gave the id.
        given: bool,
        name: String,
        /// The arguments' JSON text, as a JSON string.
        arguments: Vec<u8>,
    },
    Response {
        /// The client's id (a JSON string), then the call's it answers.
        id: Option<Vec<u8>>,
        name: String,
        /// The response's JSON text, as a JSON string.
        content: Vec<u8>,
    },
}

/// One turn of `contents`, read.
#[derive(Debug)]
struct Turn<'a> {
    model: bool,
    pieces: Vec<Piece<'a>>,
    /// The reasoning a `thoughtSignature` this gateway gave out carries
    /// (a JSON string).
    reasoning: Option<Vec<u8>>,
}

/// The turns of `contents` (the raw array), read and paired; what the
/// newest user turn holds that the provider cannot read is refused.
pub(super) struct Turns<'a>(Vec<Turn<'a>>);

impl<'a> Turns<'a> {
    pub(super) fn read(raw: &'a [u8], replay: Option<&ReasoningSeal>) -> Result<Self, ApiError> {
        let mut turns = Vec::new();
        let mut newest_refused = None;
        for (i, content) in array(raw, "contents")?.into_iter().enumerate() {
            let (turn, refused) = turn(content, i, replay)?;
            if !turn.model {
                newest_refused = refused;
            }
            turns.push(turn);
        }
        if let Some(e) = newest_refused {
            return Err(e);
        }
        pair(&mut turns);
        Ok(Turns(turns))
    }

    /// The chat messages, appended to `out`: a user turn's responses as
    /// `tool` messages first (chat wants them right after the calls), then
    /// the rest as one user message; a model turn as one assistant message.
    pub(super) fn messages<'b>(&'b self, out: &mut Vec<Message<'b>>) {
        for t in &self.0 {
            let mut parts = Vec::new();
            let mut text = Vec::new();
            let mut calls = Vec::new();
            for p in &t.pieces {
                match p {
                    Piece::Text(s) if t.model => text.push(*s),
                    Piece::Note if t.model => text.push(LEFT_OUT),
                    Piece::Text(s) => parts.push(Part::Text(s)),
                    Piece::Note => parts.push(Part::Text(LEFT_OUT)),
                    Piece::Image(url) => parts.push(Part::Image(Cow::Borrowed(url), None)),
                    Piece::Call {
                        id,
                        name,
                        arguments,
                        ..
                    } => calls.push(Call {
                        id,
                        name: name.clone(),
                        arguments: Cow::Borrowed(arguments),
                    }),
                    Piece::Response { id, content, .. } => out.push(Message::Tool {
                        call_id: id.as_deref().unwrap_or(b"\"\""),
                        text: vec![content],
                    }),
                }
            }
            if t.model {
                if !text.is_empty() || !calls.is_empty() {
                    let reasoning = t.reasoning.iter().map(|r| Cow::Borrowed(&r[..]));
                    out.push(Message::Assistant {
                        text,
                        calls,
                        reasoning: reasoning.collect(),
                    });
                }
            } else if !parts.is_empty() {
                out.push(Message::User(parts));
            }
        }
    }
}

/// `systemInstruction`: a string, or a Content of text parts, as JSON
/// strings as written (parts marked `thought` left out).
pub(super) fn system(raw: &[u8]) -> Result<Vec<&[u8]>, ApiError> {
    const AT: &str = "systemInstruction";
    if raw.starts_with(b"\"") {
        return Ok(vec![raw]);
    }
    let content = object(raw, AT)?;
    let Some(parts) = content.get(b"parts").filter(|r| !is_null(r)) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (j, part) in array(parts, "systemInstruction.parts")?
        .into_iter()
        .enumerate()
    {
        let at = |field: &str| format!("{AT}.parts[{j}].{field}");
        let p = object(part, format_args!("{AT}.parts[{j}]"))?;
        match p.get(b"text").filter(|r| !is_null(r)) {
            Some(_) if p.get(b"thought") == Some(b"true".as_slice()) => {}
            Some(t) => out.push(string(t, &|| at("text"))?),
            None => {
                return Err(ApiError::invalid_value(
                    format!("{AT}.parts[{j}]"),
                    "A system instruction holds text parts only.",
                ));
            }
        }
    }
    Ok(out)
}

/// `contents[i]`, read; for a user turn, what in it the provider cannot
/// read (the refusal it gets as the newest).
fn turn<'a>(
    raw: &'a [u8],
    i: usize,
    replay: Option<&ReasoningSeal>,
) -> Result<(Turn<'a>, Option<ApiError>), ApiError> {
    let c = object(raw, format_args!("contents[{i}]"))?;
    let model = match c.get(b"role").filter(|r| !is_null(r)) {
        None => false,
        Some(r) => match &*text(r, &|| format!("contents[{i}].role"))? {
            // `function` is the role older clients gave function responses.
            "user" | "function" | "" => false,
            "model" => true,
            other => {
                return Err(ApiError::invalid_value(
                    format!("contents[{i}].role"),
                    format!("Unsupported role '{other}': expected user or model."),
                ));
            }
        },
    };
    let parts = c
        .get(b"parts")
        .filter(|r| !is_null(r))
        .ok_or_else(|| ApiError::missing(format!("contents[{i}].parts")))?;
    let mut turn = Turn {
        model,
        pieces: Vec::new(),
        reasoning: None,
    };
    let mut refused = None;
    let mut calls = 0;
    for (j, part) in array(parts, format_args!("contents[{i}].parts"))?
        .into_iter()
        .enumerate()
    {
        let parts_at = At {
            base: &"contents",
            index: i,
            field: ".parts",
        };
        let param = At {
            base: &parts_at,
            index: j,
            field: "",
        };
        let p = object(part, param)?;
        let at = |field: &str| format!("{param}.{field}");
        if model
            && turn.reasoning.is_none()
            && let Some(seal) = replay
        {
            turn.reasoning = p
                .get(b"thoughtSignature")
                .and_then(|s| Cursor::whole(s, Cursor::str).ok())
                .and_then(|s| super::signature::take(seal, &s))
                .map(|t| {
                    let mut json = Vec::with_capacity(t.len() + 16);
                    crate::json::write::string(&mut json, &String::from_utf8_lossy(&t));
                    json
                });
        }
        let thought = p.get(b"thought") == Some(b"true".as_slice());
        let unreadable = |field: &str, why: &str| ApiError::invalid_value(at(field), why);
        let piece = if let Some(t) = p.get(b"text").filter(|r| !is_null(r)) {
            let t = string(t, &|| at("text"))?;
            // Shown reasoning is the model's, never sent back as text.
            (!thought).then_some(Piece::Text(t))
        } else if let Some(f) = p.get(b"functionCall").filter(|r| !is_null(r)) {
            if !model {
                return Err(unreadable(
                    "functionCall",
                    "A function call belongs in a model turn.",
                ));
            }
            calls += 1;
            Some(function_call(f, &at("functionCall"), i, calls - 1)?)
        } else if let Some(f) = p.get(b"functionResponse").filter(|r| !is_null(r)) {
            if model {
                return Err(unreadable(
                    "functionResponse",
                    "A function response belongs in a user turn.",
                ));
            }
            Some(function_response(f, &at("functionResponse"))?)
        } else if let Some(d) = p.get(b"inlineData").filter(|r| !is_null(r)) {
            match inline_image(d, &at("inlineData"))? {
                // An image the model made: the provider cannot be sent it.
                Some(_) if model => Some(Piece::Note),
                Some(url) => Some(Piece::Image(url)),
                None => {
                    if !model {
                        refused.get_or_insert(unreadable(
                            "inlineData",
                            "Only images (image/*) are supported as inline data: the \
                             provider reads text and images.",
                        ));
                    }
                    Some(Piece::Note)
                }
            }
        } else if p.get(b"fileData").is_some_and(|r| !is_null(r)) {
            if !model {
                refused.get_or_insert(unreadable(
                    "fileData",
                    "Files by URI are not supported: this gateway keeps no files; \
                     send images as inlineData.",
                ));
            }
            Some(Piece::Note)
        } else if ["executableCode", "codeExecutionResult", "thoughtSignature"]
            .iter()
            .any(|k| p.get(k.as_bytes()).is_some())
            || thought
        {
            // Code the provider did not run; a signature alone.
            None
        } else {
            if !model {
                refused.get_or_insert(ApiError::invalid_value(
                    param.to_string(),
                    "Unsupported part: expected text, inlineData, functionCall or \
                     functionResponse.",
                ));
            }
            Some(Piece::Note).filter(|_| !model)
        };
        turn.pieces.extend(piece);
    }
    Ok((turn, refused))
}

/// A `functionCall` part: the `k`-th call of turn `i`.
fn function_call<'a>(
    raw: &'a [u8],
    param: &dyn Display,
    i: usize,
    k: usize,
) -> Result<Piece<'a>, ApiError> {
    let at = |field: &str| format!("{param}.{field}");
    let f = object(raw, param)?;
    let name = text(f.required("name", &at)?, &|| at("name"))?.into_owned();
    let (id, given) = match f.get(b"id").filter(|r| !is_null(r) && r.len() > 2) {
        Some(id) => (string(id, &|| at("id"))?.to_vec(), true),
        None => (format!("\"call_{i}_{k}\"").into_bytes(), false),
    };
    let arguments = match f.get(b"args").filter(|r| !is_null(r)) {
        Some(a) if a.starts_with(b"{") => json_text(a),
        Some(_) => return Err(ApiError::invalid_type(at("args"), "an object")),
        None => b"\"{}\"".to_vec(),
    };
    Ok(Piece::Call {
        id,
        given,
        name,
        arguments,
    })
}

/// A `functionResponse` part.
fn function_response<'a>(raw: &'a [u8], param: &dyn Display) -> Result<Piece<'a>, ApiError> {
    let at = |field: &str| format!("{param}.{field}");
    let f = object(raw, param)?;
    let name = text(f.required("name", &at)?, &|| at("name"))?.into_owned();
    let id = match f.get(b"id").filter(|r| !is_null(r) && r.len() > 2) {
        Some(id) => Some(string(id, &|| at("id"))?.to_vec()),
        None => None,
    };
    let response = f.required("response", &at)?;
    if !response.starts_with(b"{") {
        return Err(ApiError::invalid_type(at("response"), "an object"));
    }
    Ok(Piece::Response {
        id,
        name,
        content: json_text(response),
    })
}

/// `raw` (a JSON value as written) as a JSON string of its text.
fn json_text(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + 16);
    crate::json::write::string(&mut out, &String::from_utf8_lossy(raw));
    out
}

/// An `inlineData` blob: a `data:` URL (a JSON string) when it is an
/// image, `None` for any other kind.
fn inline_image(raw: &[u8], param: &dyn Display) -> Result<Option<Vec<u8>>, ApiError> {
    let at = |field: &str| format!("{param}.{field}");
    let d = object(raw, param)?;
    let mime = string(d.required("mimeType", &at)?, &|| at("mimeType"))?;
    let data = string(d.required("data", &at)?, &|| at("data"))?;
    let mime = &mime[1..mime.len() - 1];
    if !mime.starts_with(b"image/") {
        return Ok(None);
    }
    let mut url = Vec::with_capacity(mime.len() + data.len() + 16);
    url.extend_from_slice(b"\"data:");
    url.extend_from_slice(mime);
    url.extend_from_slice(b";base64,");
    url.extend_from_slice(&data[1..data.len() - 1]);
    url.push(b'"');
    Ok(Some(url))
}

/// Gives each response the id of the call it answers: among the calls of
/// the model turn before it not answered yet, the one with its id, else
/// the first with its name (a call whose id was made up, when the
/// response has an id); a response that answers none keeps its own id, or
/// gets one made up (the provider then says what it makes of it).
fn pair(turns: &mut [Turn<'_>]) {
    // The open calls: id, name, whether the client gave the id.
    let mut open: Vec<(Vec<u8>, String, bool)> = Vec::new();
    for (i, t) in turns.iter_mut().enumerate() {
        if t.model {
            let calls = t.pieces.iter().filter_map(|p| match p {
                Piece::Call {
                    id, name, given, ..
                } => Some((id.clone(), name.clone(), *given)),
                _ => None,
            });
            let calls: Vec<_> = calls.collect();
            if !calls.is_empty() {
                open = calls;
            }
            continue;
        }
        for (j, p) in t.pieces.iter_mut().enumerate() {
            let Piece::Response { id, name, .. } = p else {
                continue;
            };
            let by_id = id
                .as_ref()
                .and_then(|id| open.iter().position(|c| c.0 == *id));
            let by_name = || {
                open.iter()
                    .position(|c| c.1 == *name && (id.is_none() || !c.2))
            };
            match by_id.or_else(by_name) {
                Some(k) => *id = Some(open.remove(k).0),
                None if id.is_some() => {}
                None => *id = Some(format!("\"call_{i}_r{j}\"").into_bytes()),
            }
        }
    }
}
