//! The serde_json validator the one-pass validator replaced, kept as the
//! oracle its tests compare it with (finding, error and rewritten body).
//!
//! serde_json reads the top level as an object of members whose values
//! stay raw JSON text ([`RawValue`]); only the parameters the specification
//! names are parsed and checked, in the order the errors name them; a
//! second pass ([`json_hazard`]) refuses what a provider's parser would;
//! the body is rebuilt by splicing raw member text.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::{ChatRequest, IMAGE_TOKEN_ESTIMATE, MAX_STOP, Param, ROLES};
use crate::catalog::KeyView;
use crate::error::ApiError;
use crate::json::MAX_DEPTH;

/// What a body already known to be valid JSON can still hold that a
/// provider's parser refuses: arrays and objects nested more than `limit`
/// deep, and `\u` escapes that encode a lone UTF-16 surrogate (valid JSON
/// grammar, but no string: serde_json and most parsers reject them). One
/// pass; strings are skipped with `memchr`, stopping only at backslashes.
pub(super) fn json_hazard(json: &[u8], limit: usize) -> Option<String> {
    // The usual body has neither: fewer openers than the limit (so it cannot
    // nest deeper) and no `\u` escape at all; two quick passes tell.
    let openers = memchr::memchr2_iter(b'[', b'{', json)
        .take(limit + 1)
        .count();
    let escapes_u = memchr::memchr_iter(b'\\', json).any(|i| json.get(i + 1) == Some(&b'u'));
    if openers <= limit && !escapes_u {
        return None;
    }
    let mut depth = 0usize;
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => {
                i += 1;
                loop {
                    match memchr::memchr2(b'"', b'\\', &json[i..]) {
                        Some(j) if json[i + j] == b'\\' => {
                            let at = i + j;
                            i = at + 2;
                            if json.get(at + 1) == Some(&b'u') {
                                match surrogate_at(json, at) {
                                    Surrogate::Lone => {
                                        return Some(
                                            "a \\u escape encodes a lone UTF-16 surrogate".into(),
                                        );
                                    }
                                    Surrogate::Pair => i = at + 12,
                                    Surrogate::No => {}
                                }
                            }
                        }
                        Some(j) => {
                            i += j + 1;
                            break;
                        }
                        None => return None,
                    }
                }
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Some(format!("nested more than {limit} levels deep"));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

enum Surrogate {
    No,
    Pair,
    Lone,
}

/// Reads the `\uXXXX` escape at `at` (and the one after it for a leading
/// surrogate).
fn surrogate_at(json: &[u8], at: usize) -> Surrogate {
    let hex = |from: usize| {
        let h = json.get(from..from + 4)?;
        u16::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    };
    match hex(at + 2) {
        Some(0xD800..=0xDBFF) => {
            let trail = json.get(at + 6..at + 8) == Some(b"\\u".as_slice())
                && matches!(hex(at + 8), Some(0xDC00..=0xDFFF));
            if trail {
                Surrogate::Pair
            } else {
                Surrogate::Lone
            }
        }
        Some(0xDC00..=0xDFFF) => Surrogate::Lone,
        _ => Surrogate::No,
    }
}

/// The reference validation: serde_json reads the top level, every rule
/// is checked in the order the errors name them.
pub(super) fn validate_reference<'a>(
    body: &[u8],
    models: impl Into<KeyView<'a>>,
) -> Result<ChatRequest, ApiError> {
    let models = models.into();
    // serde_json reads a `&str` without checking UTF-8 again in every
    // string and raw value; other bytes are read (and refused) as bytes.
    let top: Members<'_> = match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    }
    .map_err(ApiError::invalid_json)?;
    if let Some(hazard) = json_hazard(body, MAX_DEPTH) {
        // Valid JSON, but a provider's parser (serde_json's included) would
        // refuse it, less clearly: refused here.
        return Err(ApiError::invalid_json(hazard));
    }

    let model_raw = top.get("model").ok_or_else(|| ApiError::missing("model"))?;
    let model = string(model_raw, Param::root("model"))?;
    let entry = models
        .find(&model)
        .ok_or_else(|| ApiError::model_not_found(&model))?;

    let messages_raw = top
        .get("messages")
        .ok_or_else(|| ApiError::missing("messages"))?;
    let messages = check_messages(messages_raw)?;

    let stream = check_stream(top.get("stream"))?;
    let include_usage_already = check_stream_options(top.get("stream_options"))?;
    if let Some(raw) = top.get("temperature") {
        number_in(raw, Param::root("temperature"), 0.0, 2.0)?;
    }
    if let Some(raw) = top.get("top_p") {
        number_in(raw, Param::root("top_p"), 0.0, 1.0)?;
    }
    let max_tokens = check_max_tokens(top.get("max_tokens"), top.get("max_completion_tokens"))?;
    if let Some(raw) = top.get("stop") {
        check_stop(raw)?;
    }
    let (tool_names, tools_len) = match top.get("tools") {
        Some(raw) => check_tools(raw)?,
        None => (Vec::new(), 0),
    };
    if let Some(raw) = top.get("tool_choice") {
        check_tool_choice(raw, &tool_names)?;
    }

    let estimated_prompt_tokens = messages
        .estimate
        .saturating_add(tools_len.div_ceil(4) as u64);
    let map_model = Some(entry.provider_id()).filter(|u| *u != model);
    let force_usage = stream && !include_usage_already;
    let rewritten = (force_usage || messages.needs_strip || map_model.is_some())
        .then(|| rewrite(body.len(), &top, force_usage, &messages, map_model));

    // A conversation's name: a non-empty string's characters.
    let conversation = |name: &str| {
        let text: Option<String> = top
            .get(name)
            .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw).ok())
            .and_then(|v| v.as_str().map(str::to_owned));
        text.filter(|t| !t.is_empty())
            .map(|t| crate::endpoints::affinity_hash(t.as_bytes()))
    };
    Ok(ChatRequest {
        model: entry.id.clone(),
        stream,
        max_tokens,
        estimated_prompt_tokens,
        rewritten,
        cache_key: conversation("prompt_cache_key"),
        user: conversation("user"),
    })
}

/// `stream`: absent, `null` or a boolean.
fn check_stream(raw: Option<&str>) -> Result<bool, ApiError> {
    match raw {
        None => Ok(false),
        Some(raw) => match kind(raw) {
            Kind::Null => Ok(false),
            Kind::Bool => Ok(raw == "true"),
            _ => Err(ApiError::invalid_type("stream", "a boolean")),
        },
    }
}

/// `stream_options`: absent, `null` or an object whose `include_usage`,
/// when there, is a boolean. True when it already asks for usage.
fn check_stream_options(raw: Option<&str>) -> Result<bool, ApiError> {
    let Some(raw) = raw else {
        return Ok(false);
    };
    match kind(raw) {
        Kind::Null => Ok(false),
        Kind::Object => {
            let opts = object(raw, Param::root("stream_options"))?;
            match opts.get("include_usage") {
                None => Ok(false),
                Some(v) if kind(v) == Kind::Bool => Ok(v == "true"),
                Some(_) => Err(ApiError::invalid_type(
                    "stream_options.include_usage",
                    "a boolean",
                )),
            }
        }
        _ => Err(ApiError::invalid_type("stream_options", "an object")),
    }
}

/// `max_tokens`, or else `max_completion_tokens`.
fn check_max_tokens(
    max_tokens: Option<&str>,
    max_completion_tokens: Option<&str>,
) -> Result<Option<u64>, ApiError> {
    let max_tokens = match max_tokens {
        Some(raw) => positive_integer(raw, Param::root("max_tokens"))?,
        None => None,
    };
    // `max_completion_tokens` is not validated (not in the specification),
    // but a cap is a cap.
    Ok(max_tokens.or_else(|| max_completion_tokens.and_then(|raw| raw.parse::<u64>().ok())))
}

/// For metering a request that failed validation: its `model` and `stream`
/// as far as they can be read (an empty model and `false` otherwise).
pub(super) fn peek_model_and_stream(body: &[u8]) -> (String, bool) {
    let Ok(top) = serde_json::from_slice::<Members<'_>>(body) else {
        return (String::new(), false);
    };
    let model = top
        .get("model")
        .and_then(|m| serde_json::from_str::<Key<'_>>(m).ok())
        .map(|k| k.0.chars().take(128).collect())
        .unwrap_or_default();
    let stream = top.get("stream").is_some_and(|s| s == "true");
    (model, stream)
}

/// Members kept inline when split from already-checked text (more, or
/// keys with escapes, go through serde_json).
const FEW: usize = 8;

/// A JSON object's members in order, values unparsed (their raw text).
struct Members<'a> {
    /// Split from already-checked text ([`split_object`]): keys without
    /// escapes, no duplicates, at most [`FEW`].
    few: [(&'a str, &'a str); FEW],
    len: usize,
    /// Read by serde_json (the top level, and objects `few` cannot hold).
    items: Vec<(Cow<'a, str>, &'a str)>,
}

impl<'a> Members<'a> {
    fn get(&self, key: &str) -> Option<&'a str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &'a str)> + '_ {
        self.few[..self.len]
            .iter()
            .map(|&(k, v)| (k, v))
            .chain(self.items.iter().map(|(k, v)| (k.as_ref(), *v)))
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut items: Vec<(Cow<'de, str>, &'de str)> = Vec::with_capacity(FEW);
                while let Some(Key(k)) = map.next_key()? {
                    let v: &'de RawValue = map.next_value()?;
                    items.push((k, v.get()));
                }
                if let Some(dup) = first_duplicate(&items) {
                    return Err(de::Error::custom(format_args!("duplicate key '{dup}'")));
                }
                Ok(Members {
                    few: [("", ""); FEW],
                    len: 0,
                    items,
                })
            }
        }
        d.deserialize_map(V)
    }
}

/// Splitting values the top-level parse already accepted (so valid JSON,
/// nested at most [`MAX_DEPTH`] deep) without parsing them again: strings
/// are skipped with `memchr`, containers by counting brackets. Anything
/// unexpected gives `None`, and the caller asks serde_json instead, whose
/// answer (or error) is the reference.
mod split {
    /// After the whitespace at `i`.
    pub(super) fn ws(s: &[u8], mut i: usize) -> usize {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = s.get(i) {
            i += 1;
        }
        i
    }

    /// After the string whose opening quote is at `i`.
    pub(super) fn string_end(s: &[u8], i: usize) -> Option<usize> {
        let mut j = i + 1;
        loop {
            j += memchr::memchr2(b'"', b'\\', s.get(j..)?)?;
            if s[j] == b'"' {
                return Some(j + 1);
            }
            j += 2;
        }
    }

    /// After the value that starts at `i`.
    pub(super) fn value_end(s: &[u8], i: usize) -> Option<usize> {
        match *s.get(i)? {
            b'"' => string_end(s, i),
            b'{' | b'[' => {
                let (mut depth, mut j) = (0usize, i);
                loop {
                    match *s.get(j)? {
                        b'"' => {
                            j = string_end(s, j)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                return Some(j + 1);
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
            }
            _ => {
                let rest = s.get(i..)?;
                let n = rest
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                    .unwrap_or(rest.len());
                (n > 0).then_some(i + n)
            }
        }
    }
}

/// An object's members from already-checked text (see [`split`]): `None`
/// for more than [`FEW`] members, a key with an escape or a duplicate key,
/// which serde_json then reads (or refuses, with its message).
fn split_object(text: &str) -> Option<Members<'_>> {
    let s = text.as_bytes();
    let mut m = Members {
        few: [("", ""); FEW],
        len: 0,
        items: Vec::new(),
    };
    let mut i = split::ws(s, 0);
    if s.get(i) != Some(&b'{') {
        return None;
    }
    i = split::ws(s, i + 1);
    if s.get(i) == Some(&b'}') {
        return (split::ws(s, i + 1) == s.len()).then_some(m);
    }
    loop {
        if s.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = split::string_end(s, i)?;
        let key = text.get(i + 1..key_end - 1)?;
        if key.contains('\\') || m.len == FEW || m.few[..m.len].iter().any(|(k, _)| *k == key) {
            return None;
        }
        i = split::ws(s, key_end);
        if s.get(i) != Some(&b':') {
            return None;
        }
        i = split::ws(s, i + 1);
        let end = split::value_end(s, i)?;
        m.few[m.len] = (key, text.get(i..end)?);
        m.len += 1;
        i = split::ws(s, end);
        match s.get(i) {
            Some(b',') => i = split::ws(s, i + 1),
            Some(b'}') => return (split::ws(s, i + 1) == s.len()).then_some(m),
            _ => return None,
        }
    }
}

/// An array's elements from already-checked text (see [`split`]).
fn split_array(text: &str) -> Option<Vec<&str>> {
    let s = text.as_bytes();
    let mut i = split::ws(s, 0);
    if s.get(i) != Some(&b'[') {
        return None;
    }
    let mut items = Vec::new();
    i = split::ws(s, i + 1);
    if s.get(i) == Some(&b']') {
        return (split::ws(s, i + 1) == s.len()).then_some(items);
    }
    loop {
        let end = split::value_end(s, i)?;
        items.push(text.get(i..end)?);
        i = split::ws(s, end);
        match s.get(i) {
            Some(b',') => i = split::ws(s, i + 1),
            Some(b']') => return (split::ws(s, i + 1) == s.len()).then_some(items),
            _ => return None,
        }
    }
}

/// The first key that occurs twice; O(n log n) for large objects.
fn first_duplicate<'a>(items: &'a [(Cow<'_, str>, &str)]) -> Option<&'a str> {
    if items.len() <= 16 {
        return items
            .iter()
            .enumerate()
            .find(|(i, (k, _))| items[..*i].iter().any(|(o, _)| o == k))
            .map(|(_, (k, _))| k.as_ref());
    }
    let mut keys: Vec<&str> = items.iter().map(|(k, _)| k.as_ref()).collect();
    keys.sort_unstable();
    keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// A string, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
    String,
    Number,
    Bool,
    Null,
}

fn kind(raw: &str) -> Kind {
    match raw.as_bytes().first() {
        Some(b'{') => Kind::Object,
        Some(b'[') => Kind::Array,
        Some(b'"') => Kind::String,
        Some(b't' | b'f') => Kind::Bool,
        Some(b'n') => Kind::Null,
        _ => Kind::Number,
    }
}

fn string<'a>(raw: &'a str, param: Param<'_>) -> Result<Cow<'a, str>, ApiError> {
    if kind(raw) != Kind::String {
        return Err(ApiError::invalid_type(param.to_string(), "a string"));
    }
    // Already-checked text: a string without escapes is its inside.
    if let Some(inside) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"'))
        && !inside.contains('\\')
    {
        return Ok(Cow::Borrowed(inside));
    }
    serde_json::from_str::<Key<'a>>(raw)
        .map(|k| k.0)
        .map_err(|_| ApiError::invalid_type(param.to_string(), "a string"))
}

/// A member that must be there.
fn required<'a>(m: &Members<'a>, param: Param<'_>, key: &str) -> Result<&'a str, ApiError> {
    m.get(key)
        .ok_or_else(|| ApiError::missing(param.to_string()))
}

fn object<'a>(raw: &'a str, param: Param<'_>) -> Result<Members<'a>, ApiError> {
    if kind(raw) != Kind::Object {
        return Err(ApiError::invalid_type(param.to_string(), "an object"));
    }
    if let Some(m) = split_object(raw) {
        return Ok(m);
    }
    serde_json::from_str(raw).map_err(|e| {
        ApiError::invalid_value(
            param.to_string(),
            format!("Invalid object for '{param}': {e}."),
        )
    })
}

fn array<'a>(raw: &'a str, param: Param<'_>) -> Result<Vec<&'a str>, ApiError> {
    if kind(raw) != Kind::Array {
        return Err(ApiError::invalid_type(param.to_string(), "an array"));
    }
    if let Some(items) = split_array(raw) {
        return Ok(items);
    }
    serde_json::from_str::<Vec<&RawValue>>(raw)
        .map(|items| items.into_iter().map(RawValue::get).collect())
        .map_err(|e| {
            ApiError::invalid_value(
                param.to_string(),
                format!("Invalid array for '{param}': {e}."),
            )
        })
}

fn number_in(raw: &str, param: Param<'_>, min: f64, max: f64) -> Result<(), ApiError> {
    match kind(raw) {
        Kind::Null => Ok(()),
        Kind::Number => {
            let v: f64 = serde_json::from_str(raw).map_err(|_| {
                ApiError::invalid_value(
                    param.to_string(),
                    format!("'{param}' is not a representable number."),
                )
            })?;
            if (min..=max).contains(&v) {
                Ok(())
            } else {
                Err(ApiError::invalid_value(
                    param.to_string(),
                    format!("'{param}' must be between {min} and {max}; got {v}."),
                ))
            }
        }
        _ => Err(ApiError::invalid_type(param.to_string(), "a number")),
    }
}

fn positive_integer(raw: &str, param: Param<'_>) -> Result<Option<u64>, ApiError> {
    match kind(raw) {
        Kind::Null => Ok(None),
        Kind::Number => {
            let text = raw;
            if text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                return Err(ApiError::invalid_type(param.to_string(), "an integer"));
            }
            if text.starts_with('-') || text == "0" {
                return Err(ApiError::invalid_value(
                    param.to_string(),
                    format!("'{param}' must be a positive integer."),
                ));
            }
            text.parse::<u64>().map(Some).map_err(|_| {
                ApiError::invalid_value(param.to_string(), format!("'{param}' is too large."))
            })
        }
        _ => Err(ApiError::invalid_type(param.to_string(), "an integer")),
    }
}

fn check_stop(raw: &str) -> Result<(), ApiError> {
    let p = Param::root("stop");
    match kind(raw) {
        Kind::Null | Kind::String => Ok(()),
        Kind::Array => {
            let items = array(raw, p)?;
            if items.len() > MAX_STOP {
                return Err(ApiError::invalid_value(
                    "stop",
                    format!(
                        "'stop' may hold at most {MAX_STOP} sequences; got {}.",
                        items.len()
                    ),
                ));
            }
            for (i, item) in items.iter().enumerate() {
                if kind(item) != Kind::String {
                    return Err(ApiError::invalid_type(p.index(i).to_string(), "a string"));
                }
            }
            Ok(())
        }
        _ => Err(ApiError::invalid_type(
            "stop",
            "a string or an array of strings",
        )),
    }
}

/// Checks `tools`; returns the function names and the raw length (for the
/// prompt estimate).
fn check_tools(raw: &str) -> Result<(Vec<String>, usize), ApiError> {
    if kind(raw) == Kind::Null {
        return Ok((Vec::new(), 0));
    }
    let root = Param::root("tools");
    let tools = array(raw, root)?;
    let mut names = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let p = root.index(i);
        let t = object(tool, p)?;
        let type_p = p.key("type");
        if string(required(&t, type_p, "type")?, type_p)? != "function" {
            return Err(ApiError::invalid_value(
                type_p.to_string(),
                "Only tools of type 'function' are supported.",
            ));
        }
        let fp = p.key("function");
        let f = object(required(&t, fp, "function")?, fp)?;
        let name_p = fp.key("name");
        let name = string(required(&f, name_p, "name")?, name_p)?;
        if !is_function_name(&name) {
            return Err(ApiError::invalid_value(
                name_p.to_string(),
                "Function names are 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'.",
            ));
        }
        if let Some(params) = f.get("parameters")
            && kind(params) != Kind::Object
        {
            return Err(ApiError::invalid_type(
                fp.key("parameters").to_string(),
                "an object",
            ));
        }
        names.push(name.into_owned());
    }
    Ok((names, raw.len()))
}

fn is_function_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn check_tool_choice(raw: &str, tools: &[String]) -> Result<(), ApiError> {
    let p = Param::root("tool_choice");
    match kind(raw) {
        Kind::Null => Ok(()),
        Kind::String => match string(raw, p)?.as_ref() {
            "auto" | "none" => Ok(()),
            "required" if !tools.is_empty() => Ok(()),
            "required" => Err(ApiError::invalid_value(
                "tool_choice",
                "'tool_choice' 'required' needs 'tools'.",
            )),
            _ => Err(ApiError::invalid_value(
                "tool_choice",
                "'tool_choice' must be 'auto', 'none', 'required' or an object naming a function.",
            )),
        },
        Kind::Object => {
            let o = object(raw, p)?;
            let type_p = p.key("type");
            match o.get("type") {
                Some(t) if string(t, type_p)? == "function" => {}
                _ => {
                    return Err(ApiError::invalid_value(
                        "tool_choice.type",
                        "'tool_choice.type' must be 'function'.",
                    ));
                }
            }
            let fp = p.key("function");
            let f = object(required(&o, fp, "function")?, fp)?;
            let name_p = fp.key("name");
            let name = string(required(&f, name_p, "name")?, name_p)?;
            if !tools.iter().any(|t| *t == name) {
                return Err(ApiError::invalid_value(
                    "tool_choice.function.name",
                    "'tool_choice' names a function that is not in 'tools'.",
                ));
            }
            Ok(())
        }
        _ => Err(ApiError::invalid_type(
            "tool_choice",
            "a string or an object",
        )),
    }
}

/// What validating `messages` found.
struct CheckedMessages<'a> {
    items: Vec<&'a str>,
    /// Indices of assistant messages carrying `reasoning_content`.
    strip: Vec<usize>,
    needs_strip: bool,
    estimate: u64,
}

fn check_messages(raw: &str) -> Result<CheckedMessages<'_>, ApiError> {
    let root = Param::root("messages");
    let items = array(raw, root)?;
    if items.is_empty() {
        return Err(ApiError::invalid_value(
            "messages",
            "'messages' must contain at least one message.",
        ));
    }
    let mut strip = Vec::new();
    let mut estimate: u64 = 3;
    for (i, msg) in items.iter().enumerate() {
        let p = root.index(i);
        let m = object(msg, p)?;
        let role_p = p.key("role");
        let role = string(required(&m, role_p, "role")?, role_p)?;
        if !ROLES.contains(&role.as_ref()) {
            return Err(ApiError::invalid_value(
                role_p.to_string(),
                format!("'{role_p}' must be one of {}.", ROLES.join(", ")),
            ));
        }
        let role = role.as_ref();
        let tool_calls = m.get("tool_calls").filter(|t| kind(t) != Kind::Null);
        if let Some(tc) = tool_calls {
            if role != "assistant" {
                return Err(ApiError::invalid_value(
                    p.key("tool_calls").to_string(),
                    "Only assistant messages may carry 'tool_calls'.",
                ));
            }
            check_tool_calls(tc, p.key("tool_calls"))?;
            estimate += (tc.len() as u64).div_ceil(4);
        }
        estimate += 4 + check_content(
            m.get("content"),
            role,
            tool_calls.is_some(),
            p.key("content"),
        )?;
        if role == "tool" {
            let id_p = p.key("tool_call_id");
            string(required(&m, id_p, "tool_call_id")?, id_p)?;
        }
        if role == "assistant" && m.get("reasoning_content").is_some() {
            strip.push(i);
        }
    }
    Ok(CheckedMessages {
        needs_strip: !strip.is_empty(),
        items,
        strip,
        estimate,
    })
}

fn check_tool_calls(raw: &str, p: Param<'_>) -> Result<(), ApiError> {
    for (j, call) in array(raw, p)?.iter().enumerate() {
        let cp = p.index(j);
        let c = object(call, cp)?;
        if let Some(f) = c.get("function") {
            let fp = cp.key("function");
            let f = object(f, fp)?;
            let np = fp.key("name");
            string(required(&f, np, "name")?, np)?;
        }
    }
    Ok(())
}

/// Checks a message's content (`p` is its path); returns its token estimate.
fn check_content(
    raw: Option<&str>,
    role: &str,
    has_tool_calls: bool,
    p: Param<'_>,
) -> Result<u64, ApiError> {
    let Some(raw) = raw else {
        return if role == "assistant" && has_tool_calls {
            Ok(0)
        } else {
            Err(ApiError::missing(p.to_string()))
        };
    };
    match kind(raw) {
        Kind::String => Ok((raw.len() as u64).saturating_sub(2).div_ceil(4)),
        Kind::Null if role == "assistant" => Ok(0),
        Kind::Array => {
            let parts = array(raw, p)?;
            if parts.is_empty() {
                return Err(ApiError::invalid_value(
                    p.to_string(),
                    format!("'{p}' must not be an empty array."),
                ));
            }
            let mut estimate = 0;
            for (j, part) in parts.iter().enumerate() {
                estimate += check_part(part, role, p.index(j))?;
            }
            Ok(estimate)
        }
        _ => Err(ApiError::invalid_type(
            p.to_string(),
            "a string or an array of content parts",
        )),
    }
}

fn check_part(raw: &str, role: &str, p: Param<'_>) -> Result<u64, ApiError> {
    let part = object(raw, p)?;
    let type_p = p.key("type");
    let ty = string(required(&part, type_p, "type")?, type_p)?;
    match ty.as_ref() {
        "text" => {
            let tp = p.key("text");
            let text = required(&part, tp, "text")?;
            if kind(text) != Kind::String {
                return Err(ApiError::invalid_type(tp.to_string(), "a string"));
            }
            Ok((text.len() as u64).saturating_sub(2).div_ceil(4))
        }
        "image_url" if role == "user" => {
            let ip = p.key("image_url");
            let image = object(required(&part, ip, "image_url")?, ip)?;
            let up = ip.key("url");
            let url = string(required(&image, up, "url")?, up)?;
            check_image_url(&url, up)?;
            Ok(IMAGE_TOKEN_ESTIMATE)
        }
        "image_url" => Err(ApiError::invalid_value(
            type_p.to_string(),
            "Image parts are only allowed in user messages.",
        )),
        _ => Err(ApiError::invalid_value(
            type_p.to_string(),
            format!("'{type_p}' must be 'text' or 'image_url'."),
        )),
    }
}

/// An image URL is `http(s)://…` or `data:image/<type>;base64,<data>`.
fn check_image_url(url: &str, param: Param<'_>) -> Result<(), ApiError> {
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(());
    }
    let bad = || {
        ApiError::invalid_value(
            param.to_string(),
            "An image URL must be http(s):// or a data:image/...;base64,... URI.",
        )
    };
    let rest = url.strip_prefix("data:").ok_or_else(bad)?;
    let (meta, data) = rest.split_once(',').ok_or_else(bad)?;
    let mime = meta.split(';').next().unwrap_or("");
    let is_base64 = meta
        .split(';')
        .skip(1)
        .any(|p| p.eq_ignore_ascii_case("base64"));
    // Compared as bytes: a multi-byte character may straddle byte 6.
    let mime_ok = mime.len() > 6 && mime.as_bytes()[..6].eq_ignore_ascii_case(b"image/");
    if !mime_ok || !is_base64 || data.is_empty() {
        return Err(bad());
    }
    let valid = data.bytes().all(|b| {
        b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_' | b'\r' | b'\n')
    });
    if valid { Ok(()) } else { Err(bad()) }
}

/// Rebuilds the body by splicing raw member text.
fn rewrite(
    len: usize,
    top: &Members<'_>,
    force_usage: bool,
    messages: &CheckedMessages<'_>,
    map_model: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 40);
    out.push(b'{');
    let mut first = true;
    let mut saw_options = false;
    for (key, raw) in top.iter() {
        match key {
            "model" if map_model.is_some() => {
                let mapped = serde_json::to_string(&map_model).unwrap_or_default();
                member(&mut out, &mut first, key, mapped.as_bytes());
            }
            "messages" if messages.needs_strip => {
                let mut arr = Vec::with_capacity(raw.len());
                arr.push(b'[');
                for (i, msg) in messages.items.iter().enumerate() {
                    if i > 0 {
                        arr.push(b',');
                    }
                    if messages.strip.binary_search(&i).is_ok() {
                        // Validated as an object above.
                        let m: Members<'_> =
                            serde_json::from_str(msg).expect("message is an object");
                        object_without(&mut arr, &m, "reasoning_content");
                    } else {
                        arr.extend_from_slice(msg.as_bytes());
                    }
                }
                arr.push(b']');
                member(&mut out, &mut first, key, &arr);
            }
            "stream_options" if force_usage => {
                saw_options = true;
                member(&mut out, &mut first, key, &forced_options(raw));
            }
            _ => member(&mut out, &mut first, key, raw.as_bytes()),
        }
    }
    if force_usage && !saw_options {
        member(
            &mut out,
            &mut first,
            "stream_options",
            b"{\"include_usage\":true}",
        );
    }
    out.push(b'}');
    out
}

fn member(out: &mut Vec<u8>, first: &mut bool, key: &str, value: &[u8]) {
    if !std::mem::take(first) {
        out.push(b',');
    }
    // Writing a string into a Vec cannot fail.
    serde_json::to_writer(&mut *out, key).expect("key serializes");
    out.push(b':');
    out.extend_from_slice(value);
}

fn object_without(out: &mut Vec<u8>, m: &Members<'_>, skip: &str) {
    out.push(b'{');
    let mut first = true;
    for (k, v) in m.iter() {
        if k != skip {
            member(out, &mut first, k, v.as_bytes());
        }
    }
    out.push(b'}');
}

/// `stream_options` with `include_usage: true`, other members kept in place.
fn forced_options(raw: &str) -> Vec<u8> {
    let mut out = Vec::new();
    match serde_json::from_str::<Members<'_>>(raw) {
        Ok(m) => {
            out.push(b'{');
            let mut first = true;
            let mut set = false;
            for (k, v) in m.iter() {
                if k == "include_usage" {
                    member(&mut out, &mut first, k, b"true");
                    set = true;
                } else {
                    member(&mut out, &mut first, k, v.as_bytes());
                }
            }
            if !set {
                member(&mut out, &mut first, "include_usage", b"true");
            }
            out.push(b'}');
        }
        // `null` (validated: an object or null).
        Err(_) => out.extend_from_slice(b"{\"include_usage\":true}"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            (-1e6f64..1e6).prop_map(serde_json::Value::from),
            "[a-z\"\\\\{}\\[\\]:, \n\u{e9}]{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::from),
                proptest::collection::btree_map("[a-z\"\\\\]{0,4}", inner, 0..10)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Splitting checked text agrees with serde_json whenever it answers.
        #[test]
        fn splitting_agrees_with_serde(v in json_value(), pretty in proptest::bool::ANY) {
            let text = if pretty { serde_json::to_string_pretty(&v).unwrap() } else { v.to_string() };
            if let Some(m) = split_object(&text) {
                let parsed: Members<'_> = serde_json::from_str(&text).unwrap();
                let a: Vec<(&str, &str)> = m.iter().collect();
                let b: Vec<(&str, &str)> = parsed.iter().collect();
                proptest::prop_assert_eq!(a, b);
            } else if let serde_json::Value::Object(o) = &v {
                // Only escapes in keys or more than FEW members go to serde_json.
                proptest::prop_assert!(o.len() > FEW || o.keys().any(|k| k.contains(['"', '\\'])));
            }
            if let Some(items) = split_array(&text) {
                let parsed: Vec<&RawValue> = serde_json::from_str(&text).unwrap();
                let b: Vec<&str> = parsed.into_iter().map(RawValue::get).collect();
                proptest::prop_assert_eq!(items, b);
            } else {
                proptest::prop_assert!(!v.is_array());
            }
            if let serde_json::Value::String(st) = &v {
                let got = string(&text, Param::root("x")).ok().map(Cow::into_owned);
                proptest::prop_assert_eq!(got.as_deref(), Some(st.as_str()));
            }
        }
    }

    #[test]
    fn split_object_leaves_duplicates_to_serde() {
        assert!(split_object(r#"{"a":1,"b":[2,{"a":3}],"a":4}"#).is_none());
        assert!(split_object(r#"{"a\u0062":1}"#).is_none());
        let m = split_object(r#" { "a" : "x\"}" , "b":[1, "]"] } "#).unwrap();
        assert_eq!(m.get("a"), Some(r#""x\"}""#));
        assert_eq!(m.get("b"), Some(r#"[1, "]"]"#));
    }
}
