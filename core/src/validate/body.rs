//! The one pass over a request body, and the order of the findings.
//!
//! The body is read as serde_json reads it into an object of raw members
//! (keys read as strings, values skipped as it skips them), so a body it
//! refuses is refused here with its error at its line and column: the
//! first syntax error in the text, then a repeated top-level key, then
//! trailing characters. Then what a provider's parser would refuse
//! (nesting deeper than [`MAX_DEPTH`](crate::json::MAX_DEPTH), a lone surrogate
//! escape: the first in the text). Then the rules, in the reference's
//! order: `model`, `messages` (checked during the pass, its finding kept),
//! `stream`, `stream_options`, `temperature`, `top_p`, `max_tokens`,
//! `stop`, `tools`, `tool_choice`.

use std::borrow::Cow;

use super::checked::{KeySet, duplicate, kind, string, syntax};
use super::messages::{self, Checked, Refused};
use super::params::{
    check_max_tokens, check_stop, check_stream, check_stream_options, check_tool_choice,
    check_tools, number_in,
};
use super::rewrite::{Edits, rewrite};
use super::{ChatRequest, Param};
use crate::catalog::KeyView;
use crate::endpoints::affinity_hash;
use crate::error::ApiError;
use crate::json::{Code, Cursor, Keys, Stop, position};
use crate::reasoning::ReplayMode;

/// The top-level members the rules read, by slot.
const TOP_KEYS: usize = 13;
const MODEL: usize = 0;
const MESSAGES: usize = 1;
const STREAM: usize = 2;
const STREAM_OPTIONS: usize = 3;
const TEMPERATURE: usize = 4;
const TOP_P: usize = 5;
const MAX_TOKENS: usize = 6;
const MAX_COMPLETION_TOKENS: usize = 7;
const STOP: usize = 8;
const TOOLS: usize = 9;
const TOOL_CHOICE: usize = 10;
const PROMPT_CACHE_KEY: usize = 11;
const USER: usize = 12;

#[inline(always)]
fn top_slot(key: &[u8]) -> Option<usize> {
    Some(match key {
        b"model" => MODEL,
        b"messages" => MESSAGES,
        b"stream" => STREAM,
        b"stream_options" => STREAM_OPTIONS,
        b"temperature" => TEMPERATURE,
        b"top_p" => TOP_P,
        b"max_tokens" => MAX_TOKENS,
        b"max_completion_tokens" => MAX_COMPLETION_TOKENS,
        b"stop" => STOP,
        b"tools" => TOOLS,
        b"tool_choice" => TOOL_CHOICE,
        b"prompt_cache_key" => PROMPT_CACHE_KEY,
        b"user" => USER,
        _ => return None,
    })
}

/// Top-level members whose checks read more than a literal.
const RARE: u16 =
    1 << STREAM_OPTIONS | 1 << MAX_COMPLETION_TOKENS | 1 << STOP | 1 << TOOLS | 1 << TOOL_CHOICE;

/// What the pass found at the top level.
pub(super) struct Top {
    /// Where the object opens and closes.
    pub(super) open: usize,
    pub(super) close: usize,
    /// The value of each slot's member (when `seen`).
    ranges: [(usize, usize); TOP_KEYS],
    seen: u16,
    /// A key repeats.
    repeated: bool,
    /// No whitespace between the top level's tokens, and no key with an
    /// escape: the body is then exactly what a rewrite writes around the
    /// values it changes.
    pub(super) compact: bool,
    /// The model is a string without escapes.
    plain_model: bool,
    /// The finding on `messages` (when checked).
    messages: Option<Result<Checked, Refused>>,
}

impl Top {
    #[inline(always)]
    fn range(&self, slot: usize) -> Option<(usize, usize)> {
        (self.seen & (1 << slot) != 0).then_some(self.ranges[slot])
    }

    /// The text of the slot's member, when there.
    #[inline(always)]
    fn raw<'t>(&self, body: &'t [u8], slot: usize) -> Option<&'t [u8]> {
        self.range(slot).map(|(a, b)| &body[a..b])
    }
}

/// Reads the top-level object at the cursor (at `{`) into `top`; with
/// `check`, checks `messages` on the way.
fn read(c: &mut Cursor<'_>, top: &mut Top, check: bool) -> Result<(), Stop> {
    top.open = c.at();
    let mut keys = KeySet::new();
    // Where the next key starts when there is no whitespace.
    let mut next = top.open + 1;
    c.members(Keys::Read, |c, key| {
        let v = c.at();
        top.compact &= !key.escaped && key.open == next && v == key.close + 2;
        let slot = if key.escaped {
            top_slot(&c.name(key))
        } else {
            top_slot(c.raw_name(key))
        };
        match slot {
            Some(slot) if top.seen & (1 << slot) == 0 => {
                top.seen |= 1 << slot;
                if slot == MESSAGES && check {
                    top.messages = Some(messages::read(c, &mut keys)?);
                } else if slot == MODEL && c.peek() == Some(b'"') {
                    top.plain_model = c.string()? == 0;
                } else {
                    c.skip()?;
                }
                top.ranges[slot] = (v, c.at());
            }
            Some(_) => {
                top.repeated = true;
                c.skip()?;
            }
            None => {
                keys.push(key);
                c.skip()?;
            }
        }
        // serde_json checks a raw value's UTF-8 once it has read it.
        if let Some(bad) = c.take_bad_utf8() {
            return Err(c.fail(Code::InvalidUnicodeCodePoint, bad + 1));
        }
        next = c.at() + 1;
        Ok(())
    })?;
    top.close = c.at() - 1;
    top.compact &= top.close + 1 == next;
    top.repeated |= keys.repeats(c, 0);
    Ok(())
}

impl Top {
    fn new() -> Self {
        Top {
            open: 0,
            close: 0,
            ranges: [(0, 0); TOP_KEYS],
            seen: 0,
            repeated: false,
            compact: true,
            plain_model: false,
            messages: None,
        }
    }
}

/// The pass, then the rules (see the module documentation).
pub(super) fn validate(
    body: &[u8],
    models: KeyView<'_>,
    replay: ReplayMode,
) -> Result<ChatRequest, ApiError> {
    let mut c = Cursor::new(body);
    match c.peek() {
        Some(b'{') => {}
        Some(_) => return Err(not_an_object(body, c.at())),
        None => {
            return Err(syntax_at(&mut c, Code::EofWhileParsingValue));
        }
    }
    let mut top = Top::new();
    read(&mut c, &mut top, true).map_err(|Stop| syntax(&c))?;
    if top.repeated {
        return Err(ApiError::invalid_json(duplicate(
            body,
            top.open,
            top.close + 1,
        )));
    }
    c.end().map_err(|Stop| syntax(&c))?;
    if let Some(hazard) = c.hazard() {
        // Valid JSON, but a provider's parser (serde_json's included) would
        // refuse it, less clearly: refused here.
        return Err(ApiError::invalid_json(hazard));
    }

    let messages = top.messages.take();
    let raw = |slot: usize| top.raw(body, slot);
    let model_raw = raw(MODEL).ok_or_else(|| ApiError::missing("model"))?;
    // The name as sent: its text when it has no escape (no copy).
    let named = if top.plain_model {
        Cow::Borrowed(std::str::from_utf8(&model_raw[1..model_raw.len() - 1]).unwrap_or(""))
    } else {
        string(model_raw, Param::root("model"))?
    };
    let Some(entry) = models.find(&named) else {
        return Err(ApiError::model_not_found(&named));
    };
    let model = &entry.id;
    let mut messages = match messages {
        None => return Err(ApiError::missing("messages")),
        Some(Err(refused)) => return Err(*refused),
        Some(Ok(messages)) => messages,
    };
    if entry.reasoning_replay.unwrap_or(replay).replays() {
        // The turns keep their reasoning: each attempt writes it as its
        // model and endpoint want it.
        messages.strip.clear();
    }
    let stream = check_stream(raw(STREAM))?;

    let counted = raw(MAX_TOKENS).map(plain_count);
    let plain = top.seen & RARE == 0
        && counted.is_none_or(|c| c.is_some())
        && raw(TEMPERATURE).is_none_or(|r| plainly_within(r, b'2'))
        && raw(TOP_P).is_none_or(|r| plainly_within(r, b'1'));
    let (max_tokens, include_usage_already, tools_len) = if plain {
        (counted.flatten(), false, 0)
    } else {
        rare_params(raw)?
    };

    // The provider is sent the model's provider id, whatever name the
    // client used.
    let map_model = Some(entry.provider_id()).filter(|u| *u != named);
    let force_usage = stream && !include_usage_already;
    let rewritten = (force_usage || !messages.strip.is_empty() || map_model.is_some()).then(|| {
        rewrite(
            body,
            &top,
            &Edits {
                model: map_model.zip(top.range(MODEL)),
                messages: top.range(MESSAGES).filter(|_| !messages.strip.is_empty()),
                strip: &messages.strip,
                force_usage,
                options: top.range(STREAM_OPTIONS),
            },
        )
    });

    Ok(ChatRequest {
        model: model.clone(),
        stream,
        max_tokens,
        estimated_prompt_tokens: messages
            .estimate
            .saturating_add(tools_len.div_ceil(4) as u64),
        rewritten,
        cache_key: conversation(raw(PROMPT_CACHE_KEY)),
        user: conversation(raw(USER)),
    })
}

/// The hash of a member that names a conversation (`prompt_cache_key`,
/// `user`), when it is a non-empty string: of its characters, so that
/// escapes do not make two names of one conversation.
fn conversation(raw: Option<&[u8]>) -> Option<u64> {
    let raw = raw.filter(|r| r.len() > 2 && r[0] == b'"')?;
    let inner = &raw[1..raw.len() - 1];
    if !inner.contains(&b'\\') {
        return Some(affinity_hash(inner));
    }
    let text = string(raw, Param::root("user")).ok()?;
    Some(affinity_hash(text.as_bytes()))
}

/// The checks of the top-level members other than the model, `messages`
/// and `stream`, in order: `max_tokens`, whether `stream_options` already
/// asks for usage, and the length of `tools`.
#[inline(never)]
fn rare_params<'t>(
    raw: impl Fn(usize) -> Option<&'t [u8]>,
) -> Result<(Option<u64>, bool, usize), ApiError> {
    let include_usage_already = check_stream_options(raw(STREAM_OPTIONS))?;
    if let Some(raw) = raw(TEMPERATURE) {
        number_in(raw, Param::root("temperature"), 0.0, 2.0)?;
    }
    if let Some(raw) = raw(TOP_P) {
        number_in(raw, Param::root("top_p"), 0.0, 1.0)?;
    }
    let max_tokens = check_max_tokens(raw(MAX_TOKENS), raw(MAX_COMPLETION_TOKENS))?;
    if let Some(raw) = raw(STOP) {
        check_stop(raw)?;
    }
    let (tool_names, tools_len) = match raw(TOOLS) {
        Some(raw) => check_tools(raw)?,
        None => (Vec::new(), 0),
    };
    if let Some(raw) = raw(TOOL_CHOICE) {
        check_tool_choice(raw, &tool_names)?;
    }
    Ok((max_tokens, include_usage_already, tools_len))
}

/// A `max_tokens` that the rule reads as itself: 1 to 19 digits (JSON has
/// no leading zeros), not `0`.
pub(super) fn plain_count(raw: &[u8]) -> Option<u64> {
    if raw.len() > 19 || raw == b"0" {
        return None;
    }
    raw.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
    })
}

/// A `temperature` or `top_p` that the rule accepts for the range 0 to
/// `max` (a digit): `null`, or a decimal without sign or exponent, one
/// integer digit and at most 15 digits in all, within the range. Such a
/// number parses (correctly rounded) within it too.
pub(super) fn plainly_within(raw: &[u8], max: u8) -> bool {
    let (int, frac) = match raw {
        b"null" => return true,
        [int] => (*int, &[][..]),
        [int, b'.', frac @ ..] => (*int, frac),
        _ => return false,
    };
    int.is_ascii_digit()
        && frac.len() <= 14
        && frac.iter().all(u8::is_ascii_digit)
        && (int < max || (int == max && frac.iter().all(|&d| d == b'0')))
}

/// `invalid_json` for `code` about the byte at the cursor.
#[cold]
fn syntax_at(c: &mut Cursor<'_>, code: Code) -> ApiError {
    c.fail_peek(code, c.at());
    syntax(c)
}

/// The error for a body whose first value (at `at`) is not an object:
/// serde_json's `invalid type: …, expected a JSON object`, placed after the
/// value (at the bracket for an array), or the error reading the value.
#[cold]
fn not_an_object(body: &[u8], at: usize) -> ApiError {
    let mut c = Cursor::new(body);
    c.seek(at);
    let found: Result<String, Stop> = match body[at] {
        b'n' => c.literal(b"null").map(|()| "null".to_owned()),
        b't' => c.literal(b"true").map(|()| "boolean `true`".to_owned()),
        b'f' => c.literal(b"false").map(|()| "boolean `false`".to_owned()),
        b'"' => c
            .str()
            .map(|text| format!("string {:?}", String::from_utf8_lossy(&text))),
        b'[' => Ok("sequence".to_owned()),
        b'-' | b'0'..=b'9' => return not_an_object_but_a_number(body, at),
        _ => Err(c.fail_peek(Code::ExpectedSomeValue, at)),
    };
    match found {
        Ok(found) => {
            let (line, column) = position(body, c.at());
            ApiError::invalid_json(format!(
                "invalid type: {found}, expected a JSON object at line {line} column {column}"
            ))
        }
        Err(Stop) => syntax(&c),
    }
}

/// [`not_an_object`] for a number. How serde_json reads a number into a
/// value (its digits into a `u64`, an `i64` or an `f64`, or an error for
/// one out of range) is its own arithmetic, and that value is what its
/// message quotes: serde_json reads it here, and its error's place is
/// moved from the number's text to the body's.
#[cold]
fn not_an_object_but_a_number(body: &[u8], at: usize) -> ApiError {
    use serde::Deserialize;
    let (line, column) = position(body, at);
    let moved = |l: usize, col: usize| {
        if l == 1 {
            (line, column + col)
        } else {
            (line + l - 1, col)
        }
    };
    let mut de = serde_json::Deserializer::from_slice(&body[at..]);
    match serde_json::Number::deserialize(&mut de) {
        Ok(n) => {
            let mut c = Cursor::new(body);
            c.seek(at);
            // serde_json read exactly the number's text.
            let _ = c.number();
            let (l, col) = position(body, c.at());
            let what = if n.is_f64() {
                "floating point"
            } else {
                "integer"
            };
            ApiError::invalid_json(format!(
                "invalid type: {what} `{n}`, expected a JSON object at line {l} column {col}"
            ))
        }
        Err(e) => {
            let text = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            let what = text.strip_suffix(&suffix).unwrap_or(&text);
            let (l, col) = moved(e.line(), e.column());
            ApiError::invalid_json(format!("{what} at line {l} column {col}"))
        }
    }
}

/// See [`super::peek_model_and_stream`]: the pass without the rules.
pub(super) fn peek(body: &[u8]) -> Option<(String, bool)> {
    let mut c = Cursor::new(body);
    if c.peek() != Some(b'{') {
        return None;
    }
    let mut top = Top::new();
    read(&mut c, &mut top, false).ok()?;
    if top.repeated {
        return None;
    }
    c.end().ok()?;
    let model = top
        .range(MODEL)
        .filter(|&(a, _)| kind(&body[a..]) == super::checked::Kind::String)
        .and_then(|(a, _)| {
            let mut c = Cursor::new(body);
            c.seek(a);
            c.str().ok()
        })
        .map(|text| match text {
            Cow::Borrowed(text) => String::from_utf8_lossy(text).chars().take(128).collect(),
            Cow::Owned(text) => String::from_utf8_lossy(&text).chars().take(128).collect(),
        })
        .unwrap_or_default();
    let stream = top
        .range(STREAM)
        .is_some_and(|(a, b)| &body[a..b] == b"true");
    Some((model, stream))
}
