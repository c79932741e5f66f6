//! The Responses API's state, pure: what a request needs from the store
//! ([`wants`]), its input as the items kept for it ([`stored_input`]), a
//! kept response ([`StoredResponse`]) and its encoding, the conversation a
//! chain of them holds ([`context`]), and the bodies of `GET`, `DELETE`
//! and `input_items`.
//!
//! Ids are the gateway's, never a provider's: a response is `resp_` and
//! the 24 hex digits of its request id; each output item is its kind's
//! prefix, those digits and its place (`msg_…_0`), and an input item the
//! client sent without an id is given one the same way (`msg_…_i0`). An
//! item's id so names the response that holds it ([`owner_of`]): an
//! `item_reference` costs one read, with no table of items.
//!
//! A kept response holds its own input items (those its request added to
//! the conversation) and its response object (the output items in it),
//! and the ids of the responses before it in its conversation, oldest
//! first: the whole conversation is read in one batch, never by walking
//! the chain link by link.

use std::borrow::Cow;

use crate::dialect::raw::{Object, array, is_null, text};
use crate::error::{ApiError, ErrorType};
use crate::json::Cursor;

/// The most responses one conversation may chain (a record names them
/// all).
pub const MAX_CHAIN: usize = 10_000;
/// The most `item_reference`s one request may carry.
pub const MAX_REFERENCES: usize = 1_000;

/// What a Responses request needs from the store before it is
/// translated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wants {
    /// `store` (true unless the client said false).
    pub store: bool,
    /// `previous_response_id`.
    pub previous: Option<String>,
    /// The ids its `item_reference` items name, in order, each once.
    pub references: Vec<String>,
    /// `background: true`.
    pub background: bool,
    /// `stream: true`: the client reads the run's events as they come.
    pub stream: bool,
}

/// What `body` (a Responses request) needs from the store. Only these
/// members are read; the translation checks the rest.
pub fn wants(body: &[u8]) -> Result<Wants, ApiError> {
    let top =
        Object::read(body).map_err(|e| e.unwrap_or_else(crate::dialect::raw::not_an_object))?;
    let mut w = Wants {
        store: true,
        ..Wants::default()
    };
    if let Some(raw) = top.get(b"store").filter(|r| !is_null(r)) {
        w.store = boolean(raw, "store")?;
    }
    if let Some(raw) = top.get(b"background").filter(|r| !is_null(r)) {
        w.background = boolean(raw, "background")?;
    }
    if let Some(raw) = top.get(b"stream").filter(|r| !is_null(r)) {
        w.stream = boolean(raw, "stream")?;
    }
    if let Some(raw) = top.get(b"previous_response_id").filter(|r| !is_null(r)) {
        let id = text(raw, &|| "previous_response_id".into())?;
        w.previous = Some(id.into_owned());
    }
    let Some(input) = top.get(b"input").filter(|r| r.starts_with(b"[")) else {
        return Ok(w);
    };
    for (i, item) in array(input, "input")?.into_iter().enumerate() {
        let Ok(it) = Object::read(item) else { continue };
        if it.get(b"type") != Some(b"\"item_reference\"".as_slice()) {
            continue;
        }
        let id = it.required_at("id", &format!("input[{i}].id"))?;
        let id = text(id, &|| format!("input[{i}].id"))?.into_owned();
        if !w.references.contains(&id) {
            if w.references.len() == MAX_REFERENCES {
                return Err(ApiError::invalid_value(
                    "input",
                    format!("At most {MAX_REFERENCES} item references are allowed in one request."),
                ));
            }
            w.references.push(id);
        }
    }
    Ok(w)
}

fn boolean(raw: &[u8], param: &str) -> Result<bool, ApiError> {
    match raw {
        b"true" => Ok(true),
        b"false" => Ok(false),
        _ => Err(ApiError::invalid_type(param, "a boolean")),
    }
}

/// The response id for the request `request_id` (`req_<24 hex>`).
pub fn response_id(request_id: &str) -> String {
    format!("resp_{}", request_id.trim_start_matches("req_"))
}

/// The response that holds the item `id` (or the response named `id`):
/// the gateway's ids carry its 24 hex digits after their kind's prefix.
/// `None` for an id of another shape (a client's own).
pub fn owner_of(id: &str) -> Option<String> {
    let (_, rest) = id.split_once('_')?;
    let digits = rest.split('_').next()?;
    (digits.len() == 24 && digits.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| format!("resp_{digits}"))
}

/// A kept response: the conversation it adds to and what it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// `resp_…`.
    pub id: String,
    /// The name of the key that made it: only that key reads it.
    pub key: String,
    /// Unix seconds.
    pub created_at: u64,
    /// When it is forgotten, Unix seconds.
    pub expires_at: u64,
    /// The response it continued (`previous_response_id`).
    pub previous: Option<String>,
    /// Every response before it in its conversation, oldest first (the
    /// previous one last).
    pub ancestors: Vec<String>,
    /// Its own input items, each with an id: a JSON array.
    pub input: Vec<u8>,
    /// The response object, as `GET` answers it: a JSON object.
    pub object: Vec<u8>,
    /// A background run's events, as its stream wrote them (what a client
    /// re-attaching reads); empty for other responses.
    pub events: Vec<u8>,
}

/// Why a stored record could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a stored response that cannot be read: {}", self.0)
    }
}

/// The first bytes of an encoded record (and its version).
const MAGIC: &[u8; 4] = b"cgr1";

impl StoredResponse {
    /// The record as bytes: a versioned, length-prefixed layout.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes() as usize);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.created_at.to_le_bytes());
        out.extend_from_slice(&self.expires_at.to_le_bytes());
        for s in [&self.id, &self.key] {
            put(&mut out, s.as_bytes());
        }
        put(&mut out, self.previous.as_deref().unwrap_or("").as_bytes());
        out.extend_from_slice(&(self.ancestors.len() as u32).to_le_bytes());
        for a in &self.ancestors {
            put(&mut out, a.as_bytes());
        }
        put(&mut out, &self.input);
        put(&mut out, &self.object);
        put(&mut out, &self.events);
        out
    }

    /// The record `bytes` encode, checked: its ids of the gateway's shape,
    /// its input a JSON array and its object a JSON object.
    pub fn decode(bytes: &[u8]) -> Result<StoredResponse, DecodeError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4)? != MAGIC {
            return Err(DecodeError("not a record of this version"));
        }
        let created_at = r.u64()?;
        let expires_at = r.u64()?;
        let id = r.id()?;
        let key = r.string()?;
        let previous = r.string()?;
        let previous = if previous.is_empty() {
            None
        } else {
            Some(checked_id(previous)?)
        };
        let n = r.u32()? as usize;
        if n > MAX_CHAIN {
            return Err(DecodeError("too many responses before it"));
        }
        let mut ancestors = Vec::with_capacity(n);
        for _ in 0..n {
            ancestors.push(r.id()?);
        }
        let input = r.field()?.to_vec();
        let object = r.field()?.to_vec();
        let events = r.field()?.to_vec();
        if r.at != bytes.len() {
            return Err(DecodeError("bytes after the record"));
        }
        if !input.starts_with(b"[") || array(&input, "").is_err() {
            return Err(DecodeError("its input is not a JSON array"));
        }
        if !matches!(Object::read(&object), Ok(o) if o.get(b"output").is_some_and(|v| v.starts_with(b"[")))
        {
            return Err(DecodeError("its object is not a response"));
        }
        Ok(StoredResponse {
            id,
            key,
            created_at,
            expires_at,
            previous,
            ancestors,
            input,
            object,
            events,
        })
    }

    /// The bytes it takes (what the caps count).
    pub fn bytes(&self) -> u64 {
        let ids: usize = self.ancestors.iter().map(|a| a.len() + 4).sum();
        // The magic, the two times, six lengths and the count.
        (4 + 16
            + 28
            + self.id.len()
            + self.key.len()
            + self.previous.as_ref().map_or(0, String::len)
            + ids
            + self.input.len()
            + self.object.len()
            + self.events.len()) as u64
    }

    /// Its input items, each as written.
    pub fn input_items(&self) -> Vec<&[u8]> {
        array(&self.input, "").unwrap_or_default()
    }

    /// Its output items, each as written.
    pub fn output_items(&self) -> Vec<&[u8]> {
        Object::read(&self.object)
            .ok()
            .and_then(|o| o.get(b"output"))
            .and_then(|v| array(v, "").ok())
            .unwrap_or_default()
    }

    /// The item named `id` among its input and output items.
    pub fn item(&self, id: &str) -> Option<&[u8]> {
        self.input_items()
            .into_iter()
            .chain(self.output_items())
            .find(|it| item_id(it).as_deref() == Some(id))
    }

    /// Whether it is a background run's (its object says so).
    pub fn is_background(&self) -> bool {
        Object::read(&self.object)
            .ok()
            .and_then(|o| o.get(b"background"))
            .is_some_and(|b| b == b"true")
    }

    /// Its status, as its object says.
    pub fn status(&self) -> String {
        Object::read(&self.object)
            .ok()
            .and_then(|o| o.get(b"status"))
            .and_then(|s| Cursor::whole(s, Cursor::str).ok())
            .map(|s| String::from_utf8_lossy(&s).into_owned())
            .unwrap_or_default()
    }
}

/// Whether a response in this status may still change (a background run
/// not finished).
pub fn is_running(status: &str) -> bool {
    matches!(status, "queued" | "in_progress")
}

/// The events of `stream` (SSE events as a run wrote them) after sequence
/// number `after` (all of them for `None`).
pub fn events_after(stream: &[u8], after: Option<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    for event in split_events(stream) {
        if after.is_none_or(|a| sequence_number(event).is_some_and(|n| n > a)) {
            out.extend_from_slice(event);
        }
    }
    out
}

/// The one event a run that ended before writing any is replayed as: its
/// response object under the last event its status stands for
/// (`response.failed` for `failed` and `cancelled`), numbered `sequence`.
pub fn terminal_event(object: &[u8], status: &str, sequence: u64) -> Vec<u8> {
    let name = match status {
        "completed" => "response.completed",
        "incomplete" => "response.incomplete",
        _ => "response.failed",
    };
    let mut out = Vec::with_capacity(object.len() + 96);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: {\"type\":\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(format!("\",\"sequence_number\":{sequence},\"response\":").as_bytes());
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n\n");
    out
}

/// `stream`'s whole SSE events (each with its blank line), in order.
pub fn split_events(stream: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = stream;
    while let Some(end) = memchr::memmem::find(rest, b"\n\n") {
        out.push(&rest[..end + 2]);
        rest = &rest[end + 2..];
    }
    out
}

/// An event's `sequence_number` (the gateway writes it right after its
/// `type`).
pub fn sequence_number(event: &[u8]) -> Option<u64> {
    const MEMBER: &[u8] = b"\"sequence_number\":";
    let at = memchr::memmem::find(event, MEMBER)? + MEMBER.len();
    let digits = event[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    std::str::from_utf8(&event[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// `object` (a response object) with `status`, and `error` as its error's
/// message when given: what a background run left unfinished by a restart
/// is kept as.
pub fn with_status(object: &[u8], status: &str, error: Option<&str>) -> Vec<u8> {
    let Ok(members) = Object::read(object) else {
        return object.to_vec();
    };
    let mut out = Vec::with_capacity(object.len() + 128);
    out.push(b'{');
    for (name, raw) in &members.0 {
        if out.len() > 1 {
            out.push(b',');
        }
        crate::json::write::string(&mut out, &String::from_utf8_lossy(name));
        out.push(b':');
        match (&**name, error) {
            (b"status", _) => crate::json::write::string(&mut out, status),
            (b"error", Some(why)) => {
                out.extend_from_slice(b"{\"code\":\"server_error\",\"message\":");
                crate::json::write::string(&mut out, why);
                out.push(b'}');
            }
            _ => out.extend_from_slice(raw),
        }
    }
    out.push(b'}');
    out
}

/// `u32` length, then the bytes.
fn put(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(DecodeError("it ends early"))?;
        let b = &self.bytes[self.at..end];
        self.at = end;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    fn field(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        let b = self.field()?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError("a name that is not UTF-8"))
    }

    fn id(&mut self) -> Result<String, DecodeError> {
        checked_id(self.string()?)
    }
}

/// `id` when it is a response id of the gateway's shape.
fn checked_id(id: String) -> Result<String, DecodeError> {
    if id.starts_with("resp_") && owner_of(&id).as_deref() == Some(id.as_str()) {
        Ok(id)
    } else {
        Err(DecodeError("a response id of another shape"))
    }
}

/// An item's `id`, when it has one.
pub fn item_id(item: &[u8]) -> Option<Cow<'_, str>> {
    let id = Object::read(item).ok()?.get(b"id")?;
    text(id, &String::new).ok()
}

/// The conversation `chain` holds (a response's ancestors, then it):
/// each response's input items, then its output items, in order.
pub fn context(chain: &[StoredResponse]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    for r in chain {
        out.extend(r.input_items());
        out.extend(r.output_items());
    }
    out
}

/// What the translation takes from the store: the conversation before the
/// request and the items its references name.
#[derive(Debug, Default)]
pub struct Stored<'a> {
    /// The items of the conversation `previous_response_id` continues.
    pub context: Vec<&'a [u8]>,
    /// The items the input's `item_reference`s name, by id.
    pub items: Vec<(String, &'a [u8])>,
}

impl<'a> Stored<'a> {
    /// The item `id` names.
    pub(super) fn item(&self, id: &str) -> Option<&'a [u8]> {
        self.items.iter().find(|(i, _)| i == id).map(|(_, it)| *it)
    }
}

/// The request's input as the items kept for it: a string input as one
/// user message; each item as written, an `item_reference` as the item it
/// names, an item without an id given `{kind}_{digits}_i{place}`
/// (`digits`: the response's 24 hex digits).
pub fn stored_input(body: &[u8], digits: &str, stored: &Stored<'_>) -> Vec<u8> {
    let Ok(top) = Object::read(body) else {
        return b"[]".to_vec();
    };
    let Some(input) = top.get(b"input") else {
        return b"[]".to_vec();
    };
    let mut out = Vec::with_capacity(input.len() + 64);
    if input.starts_with(b"\"") {
        out.extend_from_slice(b"[{\"id\":\"msg_");
        out.extend_from_slice(digits.as_bytes());
        out.extend_from_slice(
            b"_i0\",\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":",
        );
        out.extend_from_slice(input);
        out.extend_from_slice(b"}]}]");
        return out;
    }
    out.push(b'[');
    for (i, item) in array(input, "").unwrap_or_default().into_iter().enumerate() {
        if out.len() > 1 {
            out.push(b',');
        }
        let Ok(it) = Object::read(item) else {
            out.extend_from_slice(item);
            continue;
        };
        let kind = it
            .get(b"type")
            .and_then(|k| Cursor::whole(k, Cursor::str).ok())
            .map(|k| String::from_utf8_lossy(&k).into_owned());
        if kind.as_deref() == Some("item_reference") {
            let named = item_id(item).and_then(|id| stored.item(&id));
            out.extend_from_slice(named.unwrap_or(item));
            continue;
        }
        let has_id = it.get(b"id").is_some_and(|v| !is_null(v));
        // A message's text given as a string is kept as its part, as the
        // Responses API lists it.
        let role = it
            .get(b"role")
            .and_then(|r| Cursor::whole(r, Cursor::str).ok());
        let text = matches!(kind.as_deref(), None | Some("message"))
            && it.get(b"content").is_some_and(|c| c.starts_with(b"\""));
        if has_id && !text {
            out.extend_from_slice(item);
            continue;
        }
        let prefix = match kind.as_deref() {
            None | Some("message") => "msg",
            Some("function_call") => "fc",
            Some("function_call_output") => "fco",
            Some("custom_tool_call") => "ctc",
            Some("custom_tool_call_output") => "ctco",
            Some("reasoning") => "rs",
            Some(_) => "item",
        };
        out.push(b'{');
        if !has_id {
            out.extend_from_slice(b"\"id\":\"");
            out.extend_from_slice(prefix.as_bytes());
            out.push(b'_');
            out.extend_from_slice(digits.as_bytes());
            out.extend_from_slice(format!("_i{i}\",").as_bytes());
        }
        if kind.is_none() {
            out.extend_from_slice(b"\"type\":\"message\",");
        }
        let part: &[u8] = if role.as_deref() == Some(b"assistant".as_slice()) {
            b"[{\"type\":\"output_text\",\"text\":"
        } else {
            b"[{\"type\":\"input_text\",\"text\":"
        };
        for (name, raw) in &it.0 {
            crate::json::write::string(&mut out, &String::from_utf8_lossy(name));
            out.push(b':');
            if text && &**name == b"content" {
                out.extend_from_slice(part);
                out.extend_from_slice(raw);
                out.extend_from_slice(b"}]");
            } else {
                out.extend_from_slice(raw);
            }
            out.push(b',');
        }
        if out.ends_with(b",") {
            out.pop();
        }
        out.push(b'}');
    }
    out.push(b']');
    out
}

/// 404: no response `id` for this key (another key's, one that never
/// existed, one deleted or expired: the same answer).
pub fn not_found(id: &str) -> ApiError {
    ApiError::new(
        404,
        ErrorType::InvalidRequest,
        "not_found",
        format!("Response with id '{}' not found.", shown(id)),
    )
}

/// 404 for `previous_response_id`.
pub fn previous_not_found(id: &str) -> ApiError {
    ApiError::new(
        404,
        ErrorType::InvalidRequest,
        "previous_response_not_found",
        format!("Previous response with id '{}' not found.", shown(id)),
    )
    .with_param("previous_response_id")
}

/// 404 for an `item_reference` whose item is not kept for this key.
pub fn item_not_found(id: &str) -> ApiError {
    ApiError::new(
        404,
        ErrorType::InvalidRequest,
        "not_found",
        format!(
            "Item with id '{}' not found. Items are not persisted when `store` is set to false. \
             Try again with `store` set to true, or remove this item from your input.",
            shown(id)
        ),
    )
    .with_param("input")
}

/// An id as an answer may echo it: at most 128 characters.
fn shown(id: &str) -> String {
    id.chars().take(128).collect()
}

/// `DELETE /v1/responses/{id}`'s body.
pub fn deleted_body(id: &str) -> Vec<u8> {
    let mut out = b"{\"id\":".to_vec();
    crate::json::write::string(&mut out, id);
    out.extend_from_slice(b",\"object\":\"response.deleted\",\"deleted\":true}");
    out
}

/// `GET /v1/responses/{id}/input_items`'s query: `after`, `limit`
/// (1–100, 20), `order` (`asc` or `desc`, the default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// List after the item with this id.
    pub after: Option<String>,
    /// List before the item with this id.
    pub before: Option<String>,
    /// How many at most.
    pub limit: usize,
    /// Oldest first.
    pub ascending: bool,
}

impl Page {
    /// The page `query` (the request target's query string) asks for.
    pub fn read(query: &str) -> Result<Page, ApiError> {
        let mut page = Page {
            after: None,
            before: None,
            limit: 20,
            ascending: false,
        };
        for (name, value) in crate::url::query_pairs(query) {
            match name.as_str() {
                "after" => page.after = Some(value),
                "before" => page.before = Some(value),
                "limit" => {
                    page.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=100).contains(n))
                        .ok_or_else(|| {
                            ApiError::invalid_value(
                                "limit",
                                "'limit' must be an integer between 1 and 100.",
                            )
                        })?;
                }
                "order" => {
                    page.ascending = match value.as_str() {
                        "asc" => true,
                        "desc" => false,
                        _ => {
                            return Err(ApiError::invalid_value(
                                "order",
                                "'order' must be 'asc' or 'desc'.",
                            ));
                        }
                    };
                }
                _ => {}
            }
        }
        Ok(page)
    }

    /// The list object for `items` (the conversation's input items,
    /// oldest first).
    pub fn body(&self, items: &[&[u8]]) -> Vec<u8> {
        // Each id once (a reference repeats an item of the conversation):
        // a cursor then names one place.
        let mut seen = std::collections::HashSet::new();
        let unique: Vec<&[u8]> = items
            .iter()
            .copied()
            .filter(|it| item_id(it).is_none_or(|id| seen.insert(id.into_owned())))
            .collect();
        let ordered: Vec<&[u8]> = if self.ascending {
            unique
        } else {
            unique.into_iter().rev().collect()
        };
        let position = |id: &Option<String>| {
            id.as_ref().and_then(|id| {
                ordered
                    .iter()
                    .position(|it| item_id(it).as_deref() == Some(id.as_str()))
            })
        };
        let start = match (&self.after, position(&self.after)) {
            (Some(_), Some(p)) => p + 1,
            (Some(_), None) => ordered.len(),
            (None, _) => 0,
        };
        let end = match (&self.before, position(&self.before)) {
            (Some(_), Some(p)) => p,
            _ => ordered.len(),
        };
        let window = ordered.get(start..end.max(start)).unwrap_or_default();
        let shown = &window[..window.len().min(self.limit)];
        let mut out = b"{\"object\":\"list\",\"data\":[".to_vec();
        for (i, it) in shown.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(it);
        }
        out.extend_from_slice(b"],\"first_id\":");
        let id_of = |it: Option<&&[u8]>| it.and_then(|it| item_id(it)).map(|c| c.into_owned());
        for (name, id) in [
            (&b""[..], id_of(shown.first())),
            (b",\"last_id\":", id_of(shown.last())),
        ] {
            out.extend_from_slice(name);
            match id {
                Some(id) => crate::json::write::string(&mut out, &id),
                None => out.extend_from_slice(b"null"),
            }
        }
        out.extend_from_slice(if window.len() > shown.len() {
            b",\"has_more\":true}"
        } else {
            b",\"has_more\":false}"
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGITS: &str = "00000000000a00000000000b";

    fn record() -> StoredResponse {
        StoredResponse {
            id: format!("resp_{DIGITS}"),
            key: "team-a".into(),
            created_at: 1_795_000_000,
            expires_at: 1_797_592_000,
            previous: Some("resp_00000000000a000000000001".into()),
            ancestors: vec!["resp_00000000000a000000000001".into()],
            input: br#"[{"id":"msg_x_i0","type":"message","role":"user","content":"hi"}]"#.to_vec(),
            object: br#"{"id":"resp_00000000000a00000000000b","status":"completed","output":[{"id":"msg_00000000000a00000000000b_0","type":"message","role":"assistant","content":[]}]}"#.to_vec(),
            events: b"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0}\n\n".to_vec(),
        }
    }

    #[test]
    fn a_record_reads_back_as_written_and_counts_its_bytes() {
        let r = record();
        let bytes = r.encode();
        assert_eq!(r.bytes(), bytes.len() as u64);
        assert_eq!(StoredResponse::decode(&bytes), Ok(r.clone()));
        assert_eq!(r.status(), "completed");
        assert!(r.item("msg_x_i0").is_some());
        assert!(r.item("msg_00000000000a00000000000b_0").is_some());
        assert_eq!(context(&[r.clone(), r]).len(), 4);
    }

    #[test]
    fn damaged_records_are_refused_with_a_reason() {
        let bytes = record().encode();
        for cut in [0, 3, 4, 20, bytes.len() - 1] {
            assert!(StoredResponse::decode(&bytes[..cut]).is_err(), "{cut}");
        }
        let mut longer = bytes.clone();
        longer.push(b' ');
        assert!(StoredResponse::decode(&longer).is_err());
        let mut other = record();
        other.id = "resp_not-ours".into();
        assert!(StoredResponse::decode(&other.encode()).is_err());
        let mut other = record();
        other.input = b"{}".to_vec();
        assert!(StoredResponse::decode(&other.encode()).is_err());
    }

    #[test]
    fn an_item_id_names_its_response() {
        let owner = Some(format!("resp_{DIGITS}"));
        assert_eq!(owner_of(&format!("msg_{DIGITS}_0")), owner);
        assert_eq!(owner_of(&format!("rs_{DIGITS}_i3")), owner);
        assert_eq!(owner_of(&format!("resp_{DIGITS}")), owner);
        assert_eq!(owner_of("msg_abc_0"), None);
        assert_eq!(owner_of("call_1"), None);
    }

    #[test]
    fn the_input_is_kept_with_ids_and_references_resolved() {
        let answer = br#"{"id":"msg_r_0","type":"message","role":"assistant","content":"ok"}"#;
        let stored = Stored {
            context: Vec::new(),
            items: vec![("msg_r_0".into(), answer.as_slice())],
        };
        let body = br#"{"model":"m","input":[{"role":"user","content":"a"},{"type":"item_reference","id":"msg_r_0"},{"type":"function_call_output","call_id":"c","output":"x"},{"id":"mine","role":"user","content":"b"},{}]}"#;
        let kept = stored_input(body, DIGITS, &stored);
        let v: serde_json::Value = serde_json::from_slice(&kept).unwrap();
        assert_eq!(v[0]["id"], format!("msg_{DIGITS}_i0"));
        assert_eq!(v[0]["type"], "message");
        assert_eq!(v[1]["id"], "msg_r_0");
        assert_eq!(v[2]["id"], format!("fco_{DIGITS}_i2"));
        assert_eq!(v[3]["id"], "mine");
        assert_eq!(v[4]["id"], format!("msg_{DIGITS}_i4"));
        let text = stored_input(br#"{"input":"hi \"there\""}"#, DIGITS, &Stored::default());
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(v[0]["content"][0]["text"], "hi \"there\"");
    }

    #[test]
    fn what_a_request_needs_is_read() {
        let w = wants(br#"{"store":false,"previous_response_id":"resp_1","input":[{"type":"item_reference","id":"a"},{"type":"item_reference","id":"a"},{"role":"user","content":"x"}]}"#).unwrap();
        assert!(!w.store && !w.background);
        assert_eq!(w.previous.as_deref(), Some("resp_1"));
        assert_eq!(w.references, ["a"]);
        assert!(wants(br#"{"input":"x"}"#).unwrap().store);
        assert_eq!(
            wants(br#"{"store":1}"#).unwrap_err().param.as_deref(),
            Some("store")
        );
        let e = wants(br#"{"input":[{"type":"item_reference"}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0].id"));
    }

    #[test]
    fn input_items_page_both_ways() {
        let items: Vec<Vec<u8>> = (0..5)
            .map(|i| format!(r#"{{"id":"i{i}","type":"message"}}"#).into_bytes())
            .collect();
        let items: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        let page = |q: &str| -> serde_json::Value {
            serde_json::from_slice(&Page::read(q).unwrap().body(&items)).unwrap()
        };
        let first = page("limit=2");
        assert_eq!(first["first_id"], "i4");
        assert_eq!(first["last_id"], "i3");
        assert_eq!(first["has_more"], true);
        let next = page("limit=2&after=i3");
        assert_eq!(next["first_id"], "i2");
        let asc = page("order=asc&after=i2");
        assert_eq!(asc["data"].as_array().unwrap().len(), 2);
        assert_eq!(asc["has_more"], false);
        let none = page("after=nowhere");
        assert_eq!(none["data"], serde_json::json!([]));
        assert_eq!(none["first_id"], serde_json::Value::Null);
        assert_eq!(
            Page::read("limit=0").unwrap_err().param.as_deref(),
            Some("limit")
        );
        assert!(Page::read("order=up").is_err());
    }

    #[test]
    fn a_run_replays_after_a_sequence_number_and_a_restart_fails_it() {
        let stream = b"event: a\ndata: {\"type\":\"a\",\"sequence_number\":0}\n\nevent: b\ndata: {\"type\":\"b\",\"sequence_number\":1}\n\nevent: c\ndata: {\"type\":\"c\",\"sequence_number\":2}\n\n";
        assert_eq!(split_events(stream).len(), 3);
        assert_eq!(events_after(stream, None), stream.to_vec());
        let after = events_after(stream, Some(0));
        assert!(after.starts_with(b"event: b\n") && after.ends_with(b"\"sequence_number\":2}\n\n"));
        assert!(events_after(stream, Some(2)).is_empty());
        let failed = with_status(
            br#"{"id":"r","status":"queued","error":null,"output":[]}"#,
            "failed",
            Some("restarted"),
        );
        let v: serde_json::Value = serde_json::from_slice(&failed).unwrap();
        assert_eq!(v["status"], "failed");
        assert_eq!(v["error"]["message"], "restarted");
        assert_eq!(v["output"], serde_json::json!([]));
        assert!(is_running("queued") && !is_running("completed"));
    }

    #[test]
    fn a_repeated_item_is_listed_once_and_an_empty_run_replays_its_end() {
        let items: Vec<&[u8]> = vec![br#"{"id":"a"}"#, br#"{"id":"b"}"#, br#"{"id":"a"}"#];
        let v: serde_json::Value =
            serde_json::from_slice(&Page::read("order=asc").unwrap().body(&items)).unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        let e = terminal_event(br#"{"status":"cancelled"}"#, "cancelled", 4);
        assert_eq!(sequence_number(&e), Some(4));
        assert!(e.starts_with(b"event: response.failed\n"));
        assert_eq!(split_events(&e).len(), 1);
    }
}
