//! The usual request in one pass, without serde_json.
//!
//! [`validate`] reads the body byte by byte as the reference reads it
//! (serde_json's grammar, [`json_hazard`](super::json_hazard)'s depth and
//! surrogate rules, duplicate keys refused where the reference refuses
//! them) and checks `messages` while it goes: no member list is built, no
//! string is unescaped or copied (but the model id the answer carries),
//! UTF-8 is checked only inside strings that are not ASCII, and a
//! rewrite copies the body's own bytes around the values it changes. The
//! parameters most requests leave out (`stream_options`, `stop`, `tools`,
//! …) go to the reference's own checks, on their text.
//!
//! It answers only for a request it accepts, and only when sure: anything
//! refused or unusual (a key with an escape, a duplicate, a role spelled
//! with an escape, more keys than it tracks) gives `None`, and the
//! reference then decides and words the error. So the verdict, the error
//! and the rewritten body are always the reference's.

use super::{
    ChatRequest, IMAGE_TOKEN_ESTIMATE, MAX_DEPTH, Param, check_image_url, check_max_tokens,
    check_stop, check_stream_options, check_tool_calls, check_tool_choice, check_tools,
    forced_options, number_in, split,
};
use crate::catalog::Catalog;

/// The top-level members the rules read, by slot.
const TOP_KEYS: usize = 11;
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
        _ => return None,
    })
}

/// Nesting of the objects read here (the top level is 1).
const MESSAGE_DEPTH: usize = 3;
const PART_DEPTH: usize = 5;
const IMAGE_URL_DEPTH: usize = 6;

/// Most keys other than the ones the rules read, over all objects open at
/// once (more goes to the reference).
const OTHER_KEYS: usize = 24;

/// The keys not read by name of the objects being read (as offsets and
/// lengths in the body), innermost last, for the duplicate check.
struct OtherKeys<'a> {
    s: &'a [u8],
    keys: [(u32, u32); OTHER_KEYS],
    len: usize,
}

impl OtherKeys<'_> {
    /// Adds the key at `at` to the object whose keys start at `base`;
    /// `None` when it is already there (or there is no room).
    fn insert(&mut self, base: usize, at: usize, key: &[u8]) -> Option<()> {
        if self.len == OTHER_KEYS {
            return None;
        }
        for &(a, n) in &self.keys[base..self.len] {
            if n as usize == key.len() && self.s[a as usize..][..key.len()] == *key {
                return None;
            }
        }
        // The body's length fits in `u32` (checked first).
        self.keys[self.len] = (at as u32, key.len() as u32);
        self.len += 1;
        Some(())
    }
}

/// Top-level members whose checks are the reference's own, on text.
const RARE: u16 =
    1 << STREAM_OPTIONS | 1 << MAX_COMPLETION_TOKENS | 1 << STOP | 1 << TOOLS | 1 << TOOL_CHOICE;

/// Validates `body` when it is an ordinary, valid request; `None` leaves
/// it to the reference.
pub(super) fn validate(body: &[u8], catalog: &Catalog) -> Option<ChatRequest> {
    let s = body;
    u32::try_from(s.len()).ok()?;
    let mut others = OtherKeys {
        s,
        keys: [(0, 0); OTHER_KEYS],
        len: 0,
    };
    let mut top = [(0usize, 0usize); TOP_KEYS];
    let mut seen = 0u16;
    // No whitespace between the top level's tokens: the body is then
    // exactly what a rewrite writes around the values it changes.
    let mut compact = true;
    let mut messages = None;

    let open = ws(s, 0);
    if s.get(open) != Some(&b'{') {
        return None;
    }
    let mut i = open + 1;
    let close = loop {
        let k = ws(s, i);
        let (key, v) = member_key(s, k)?;
        compact &= k == i && v == k + key.len() + 3;
        let end = match top_slot(key) {
            Some(slot) => {
                if seen & (1 << slot) != 0 {
                    return None;
                }
                seen |= 1 << slot;
                let end = match slot {
                    MESSAGES => {
                        let (end, estimate, strip) = check_messages(s, v, &mut others)?;
                        messages = Some((estimate, strip));
                        end
                    }
                    // A model id with an escape is left to the reference.
                    MODEL => match string_at(s, v)? {
                        (end, false) => end,
                        (_, true) => return None,
                    },
                    _ => skip_value(s, v, 1)?,
                };
                top[slot] = (v, end);
                end
            }
            None => {
                others.insert(0, k + 1, key)?;
                skip_value(s, v, 1)?
            }
        };
        i = ws(s, end);
        compact &= i == end;
        match *s.get(i)? {
            b',' => i += 1,
            b'}' => break i,
            _ => return None,
        }
    };
    if ws(s, close + 1) != s.len() {
        return None;
    }

    let range = |slot: usize| (seen & (1 << slot) != 0).then_some(top[slot]);
    let raw = |slot: usize| range(slot).map(|(a, b)| &s[a..b]);

    let (a, b) = range(MODEL)?;
    let id = &s[a + 1..b - 1];
    // As `Catalog::get`, without the id as `&str`.
    let entry = catalog.models().iter().find(|m| m.id.as_bytes() == id)?;
    let (estimate, needs_strip) = messages?;
    // As `check_stream`, on checked text.
    let stream = match raw(STREAM) {
        None | Some(b"null" | b"false") => false,
        Some(b"true") => true,
        Some(_) => return None,
    };
    let counted = raw(MAX_TOKENS).map(plain_count);
    let plain = seen & RARE == 0
        && counted.is_none_or(|c| c.is_some())
        && raw(TEMPERATURE).is_none_or(|r| plainly_within(r, b'2'))
        && raw(TOP_P).is_none_or(|r| plainly_within(r, b'1'));
    let (max_tokens, include_usage_already, tools_len) = if plain {
        (counted.flatten(), false, 0)
    } else {
        rare_params(s, range)?
    };

    let map_model = entry.upstream_id.as_deref().filter(|u| *u != entry.id);
    let force_usage = stream && !include_usage_already;
    let rewritten = if force_usage || needs_strip || map_model.is_some() {
        let edits = Edits {
            model: match map_model {
                Some(id) => Some((range(MODEL)?, id)),
                None => None,
            },
            messages: if needs_strip { range(MESSAGES) } else { None },
            force_usage,
            options: range(STREAM_OPTIONS),
        };
        Some(if compact {
            rewrite_compact(s, open, close, &edits)?
        } else {
            rewrite_spaced(s, open, &edits)?
        })
    } else {
        None
    };

    Some(ChatRequest {
        model: entry.id.clone(),
        stream,
        max_tokens,
        estimated_prompt_tokens: estimate.saturating_add(tools_len.div_ceil(4) as u64),
        rewritten,
    })
}

/// A `max_tokens` that `positive_integer` reads as itself: 1 to 19 digits
/// (JSON has no leading zeros), not `0`.
pub(super) fn plain_count(raw: &[u8]) -> Option<u64> {
    if raw.len() > 19 || raw == b"0" {
        return None;
    }
    raw.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
    })
}

/// A `temperature` or `top_p` that `number_in` accepts for the range 0 to
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

/// The reference's checks of the top-level members other than the model,
/// `messages` and `stream`, on their text: `max_tokens`, whether
/// `stream_options` already asks for usage, and the length of `tools`.
#[inline(never)]
fn rare_params(
    s: &[u8],
    range: impl Fn(usize) -> Option<(usize, usize)>,
) -> Option<(Option<u64>, bool, usize)> {
    // Checked text, so valid UTF-8.
    let text = |slot: usize| -> Option<Option<&str>> {
        match range(slot) {
            Some((a, b)) => std::str::from_utf8(&s[a..b]).ok().map(Some),
            None => Some(None),
        }
    };
    let include_usage_already = check_stream_options(text(STREAM_OPTIONS)?).ok()?;
    if let Some(raw) = text(TEMPERATURE)? {
        number_in(raw, Param::root("temperature"), 0.0, 2.0).ok()?;
    }
    if let Some(raw) = text(TOP_P)? {
        number_in(raw, Param::root("top_p"), 0.0, 1.0).ok()?;
    }
    let max_tokens = check_max_tokens(text(MAX_TOKENS)?, text(MAX_COMPLETION_TOKENS)?).ok()?;
    if let Some(raw) = text(STOP)? {
        check_stop(raw).ok()?;
    }
    let (tool_names, tools_len) = match text(TOOLS)? {
        Some(raw) => check_tools(raw).ok()?,
        None => (Vec::new(), 0),
    };
    if let Some(raw) = text(TOOL_CHOICE)? {
        check_tool_choice(raw, &tool_names).ok()?;
    }
    Some((max_tokens, include_usage_already, tools_len))
}

/// The roles a message may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A message's `content` as far as the rules need it.
#[derive(Debug, Clone, Copy)]
enum Content {
    Absent,
    Null,
    /// A string: its raw length, quotes included.
    Text(usize),
    /// Content parts: their estimate, and whether one is an image.
    Parts(u64, bool),
}

/// `messages` at `i`: after it, the prompt estimate, and whether an
/// assistant turn carries `reasoning_content`.
fn check_messages<'a>(
    s: &'a [u8],
    i: usize,
    others: &mut OtherKeys<'a>,
) -> Option<(usize, u64, bool)> {
    if s.get(i) != Some(&b'[') {
        return None;
    }
    let mut i = ws(s, i + 1);
    let (mut estimate, mut strip) = (3u64, false);
    loop {
        let (end, est, st) = check_message(s, i, others)?;
        estimate += est;
        strip |= st;
        i = ws(s, end);
        match *s.get(i)? {
            b',' => i = ws(s, i + 1),
            b']' => return Some((i + 1, estimate, strip)),
            _ => return None,
        }
    }
}

/// The message at `i`: after it, its estimate, and whether its
/// `reasoning_content` is to be stripped.
fn check_message<'a>(
    s: &'a [u8],
    i: usize,
    others: &mut OtherKeys<'a>,
) -> Option<(usize, u64, bool)> {
    if s.get(i) != Some(&b'{') {
        return None;
    }
    let base = others.len;
    let mut seen = 0u8;
    let mut role = None;
    let mut content = Content::Absent;
    let mut tool_calls = None;
    let mut id_is_string = false;
    let mut reasoning = false;
    let mut i = i + 1;
    let end = loop {
        let k = ws(s, i);
        let (key, v) = member_key(s, k)?;
        let (bit, end) = match key {
            b"role" => {
                let (end, escaped) = string_at(s, v)?;
                if escaped {
                    return None;
                }
                role = Some(match &s[v + 1..end - 1] {
                    b"system" => Role::System,
                    b"user" => Role::User,
                    b"assistant" => Role::Assistant,
                    b"tool" => Role::Tool,
                    _ => return None,
                });
                (1, end)
            }
            b"content" => {
                let end = match *s.get(v)? {
                    b'"' => {
                        let end = string_at(s, v)?.0;
                        content = Content::Text(end - v);
                        end
                    }
                    b'n' => {
                        content = Content::Null;
                        literal(s, v, b"null")?
                    }
                    b'[' => {
                        let (end, estimate, image) = check_parts(s, v, others)?;
                        content = Content::Parts(estimate, image);
                        end
                    }
                    _ => return None,
                };
                (2, end)
            }
            b"tool_calls" => {
                let end = skip_value(s, v, MESSAGE_DEPTH)?;
                if s[v] != b'n' {
                    tool_calls = Some((v, end));
                }
                (4, end)
            }
            b"tool_call_id" => {
                id_is_string = s.get(v) == Some(&b'"');
                (8, skip_value(s, v, MESSAGE_DEPTH)?)
            }
            b"reasoning_content" => {
                reasoning = true;
                (16, skip_value(s, v, MESSAGE_DEPTH)?)
            }
            _ => {
                others.insert(base, k + 1, key)?;
                (0, skip_value(s, v, MESSAGE_DEPTH)?)
            }
        };
        match member_done(s, end, &mut seen, bit)? {
            Ok(next) => i = next,
            Err(after) => break after,
        }
    };
    others.len = base;

    let role = role?;
    let assistant = role == Role::Assistant;
    let mut estimate = 4u64;
    if let Some((a, b)) = tool_calls {
        if !assistant {
            return None;
        }
        let raw = std::str::from_utf8(&s[a..b]).ok()?;
        check_tool_calls(raw, Param::root("tool_calls")).ok()?;
        estimate += ((b - a) as u64).div_ceil(4);
    }
    estimate += match content {
        Content::Absent if assistant && tool_calls.is_some() => 0,
        Content::Null if assistant => 0,
        Content::Absent | Content::Null => return None,
        Content::Text(len) => (len as u64).saturating_sub(2).div_ceil(4),
        Content::Parts(_, true) if role != Role::User => return None,
        Content::Parts(estimate, _) => estimate,
    };
    if role == Role::Tool && !id_is_string {
        return None;
    }
    Some((end, estimate, assistant && reasoning))
}

/// Content parts at `i` (an array): after them, their estimate, and
/// whether one is an image.
fn check_parts<'a>(
    s: &'a [u8],
    i: usize,
    others: &mut OtherKeys<'a>,
) -> Option<(usize, u64, bool)> {
    let mut i = ws(s, i + 1);
    let (mut estimate, mut image) = (0u64, false);
    loop {
        let (end, est, is_image) = check_part(s, i, others)?;
        estimate += est;
        image |= is_image;
        i = ws(s, end);
        match *s.get(i)? {
            b',' => i = ws(s, i + 1),
            b']' => return Some((i + 1, estimate, image)),
            _ => return None,
        }
    }
}

/// One content part: after it, its estimate, and whether it is an image.
fn check_part<'a>(s: &'a [u8], i: usize, others: &mut OtherKeys<'a>) -> Option<(usize, u64, bool)> {
    if s.get(i) != Some(&b'{') {
        return None;
    }
    let base = others.len;
    let mut seen = 0u8;
    let mut is_image = None;
    let mut text = None;
    let mut url_ok = false;
    let mut i = i + 1;
    let end = loop {
        let k = ws(s, i);
        let (key, v) = member_key(s, k)?;
        let (bit, end) = match key {
            b"type" => {
                let (end, escaped) = string_at(s, v)?;
                if escaped {
                    return None;
                }
                is_image = Some(match &s[v + 1..end - 1] {
                    b"text" => false,
                    b"image_url" => true,
                    _ => return None,
                });
                (1, end)
            }
            b"text" => {
                let end = skip_value(s, v, PART_DEPTH)?;
                if s[v] == b'"' {
                    text = Some(end - v);
                }
                (2, end)
            }
            b"image_url" => {
                let (end, ok) = check_image(s, v, others)?;
                url_ok = ok;
                (4, end)
            }
            _ => {
                others.insert(base, k + 1, key)?;
                (0, skip_value(s, v, PART_DEPTH)?)
            }
        };
        match member_done(s, end, &mut seen, bit)? {
            Ok(next) => i = next,
            Err(after) => break after,
        }
    };
    others.len = base;
    if is_image? {
        url_ok.then_some((end, IMAGE_TOKEN_ESTIMATE, true))
    } else {
        Some((end, (text? as u64).saturating_sub(2).div_ceil(4), false))
    }
}

/// A part's `image_url` at `i`: after it, and whether it is an object
/// with an acceptable `url` (only image parts need one).
fn check_image<'a>(s: &'a [u8], i: usize, others: &mut OtherKeys<'a>) -> Option<(usize, bool)> {
    if s.get(i) != Some(&b'{') {
        return Some((skip_value(s, i, PART_DEPTH)?, false));
    }
    let base = others.len;
    let mut url = None;
    let mut seen_url = false;
    let mut i = i + 1;
    let end = loop {
        let k = ws(s, i);
        let (key, v) = member_key(s, k)?;
        let end = if key == b"url" {
            if std::mem::replace(&mut seen_url, true) {
                return None;
            }
            if s.get(v) == Some(&b'"') {
                let (end, escaped) = string_at(s, v)?;
                // An escaped URL is left to the reference.
                url = (!escaped).then_some((v + 1, end - 1));
                end
            } else {
                skip_value(s, v, IMAGE_URL_DEPTH)?
            }
        } else {
            others.insert(base, k + 1, key)?;
            skip_value(s, v, IMAGE_URL_DEPTH)?
        };
        i = ws(s, end);
        match *s.get(i)? {
            b',' => i += 1,
            b'}' => break i + 1,
            _ => return None,
        }
    };
    others.len = base;
    let ok = url.is_some_and(|(a, b)| {
        std::str::from_utf8(&s[a..b])
            .is_ok_and(|url| check_image_url(url, Param::root("url")).is_ok())
    });
    Some((end, ok))
}

/// The key at `k` (no escapes) and where its value starts.
#[inline(always)]
fn member_key(s: &[u8], k: usize) -> Option<(&[u8], usize)> {
    if s.get(k) != Some(&b'"') {
        return None;
    }
    let (end, escaped) = string_at(s, k)?;
    if escaped {
        return None;
    }
    let colon = ws(s, end);
    if s.get(colon) != Some(&b':') {
        return None;
    }
    Some((&s[k + 1..end - 1], ws(s, colon + 1)))
}

/// After the whitespace at `i` (usually none).
#[inline(always)]
fn ws(s: &[u8], i: usize) -> usize {
    match s.get(i) {
        Some(&b) if b <= b' ' => more_ws(s, i),
        _ => i,
    }
}

#[inline(never)]
fn more_ws(s: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = s.get(i) {
        i += 1;
    }
    i
}

/// After `word` at `i`.
fn literal(s: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (s.get(i..i + word.len())? == word).then_some(i + word.len())
}

/// After the number at `i`, in JSON's grammar.
#[inline(always)]
fn number(s: &[u8], i: usize) -> Option<usize> {
    let mut j = i + usize::from(s.get(i) == Some(&b'-'));
    match s.get(j) {
        Some(b'0') => j += 1,
        Some(b'1'..=b'9') => {
            j += 1;
            while let Some(b'0'..=b'9') = s.get(j) {
                j += 1;
            }
        }
        _ => return None,
    }
    match s.get(j) {
        Some(b'.' | b'e' | b'E') => fraction(s, j),
        _ => Some(j),
    }
}

/// After a number's fraction and exponent, the first of which is at `i`.
#[inline(never)]
fn fraction(s: &[u8], mut i: usize) -> Option<usize> {
    let digits = |mut i: usize| {
        while let Some(b'0'..=b'9') = s.get(i) {
            i += 1;
        }
        i
    };
    if s.get(i) == Some(&b'.') {
        let end = digits(i + 1);
        if end == i + 1 {
            return None;
        }
        i = end;
    }
    if let Some(b'e' | b'E') = s.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = s.get(i) {
            i += 1;
        }
        let end = digits(i);
        if end == i {
            return None;
        }
        i = end;
    }
    Some(i)
}

/// After the value at `i`, whose container is `depth` deep; `None` for
/// anything malformed or nested deeper than [`MAX_DEPTH`].
#[inline(always)]
fn skip_value(s: &[u8], i: usize, depth: usize) -> Option<usize> {
    match *s.get(i)? {
        b'"' => Some(string_at(s, i)?.0),
        b'-' | b'0'..=b'9' => number(s, i),
        b't' => literal(s, i, b"true"),
        b'f' => literal(s, i, b"false"),
        b'n' => literal(s, i, b"null"),
        _ => skip_nested(s, i, depth),
    }
}

/// [`skip_value`] for arrays and objects (and anything malformed).
/// Iterative: one bit per open container (set for an object).
#[inline(never)]
fn skip_nested(s: &[u8], mut i: usize, depth: usize) -> Option<usize> {
    let mut stack: u128 = 0;
    let mut open = 0usize;
    loop {
        // A value starts at `i`.
        match *s.get(i)? {
            b'"' => i = string_at(s, i)?.0,
            c @ (b'{' | b'[') => {
                open += 1;
                if depth + open > MAX_DEPTH {
                    return None;
                }
                let is_object = c == b'{';
                stack = (stack << 1) | u128::from(is_object);
                i = ws(s, i + 1);
                let empty = if is_object { b'}' } else { b']' };
                if s.get(i) == Some(&empty) {
                    open -= 1;
                    stack >>= 1;
                    i += 1;
                } else {
                    if is_object {
                        i = any_key(s, i)?;
                    }
                    continue;
                }
            }
            b't' => i = literal(s, i, b"true")?,
            b'f' => i = literal(s, i, b"false")?,
            b'n' => i = literal(s, i, b"null")?,
            b'-' | b'0'..=b'9' => i = number(s, i)?,
            _ => return None,
        }
        // After a value: close containers, or on to the next element.
        loop {
            if open == 0 {
                return Some(i);
            }
            i = ws(s, i);
            let in_object = stack & 1 == 1;
            match *s.get(i)? {
                b',' => {
                    i = ws(s, i + 1);
                    if in_object {
                        i = any_key(s, i)?;
                    }
                    break;
                }
                b'}' if in_object => {}
                b']' if !in_object => {}
                _ => return None,
            }
            open -= 1;
            stack >>= 1;
            i += 1;
        }
    }
}

/// A key of an object not read by name (escapes allowed): where its value
/// starts.
#[inline(always)]
fn any_key(s: &[u8], i: usize) -> Option<usize> {
    if s.get(i) != Some(&b'"') {
        return None;
    }
    let colon = ws(s, string_at(s, i)?.0);
    if s.get(colon) != Some(&b':') {
        return None;
    }
    Some(ws(s, colon + 1))
}

const ONES: u64 = u64::from_ne_bytes([1; 8]);
const HIGH: u64 = ONES * 0x80;

/// The bytes of `w` where a run of plain ASCII string bytes stops: `"`,
/// `\`, control characters and bytes above 0x7F. The high bit of each;
/// only the lowest is exact (a borrow can flag a byte above it). Without
/// the usual `& !x` terms: a subtraction sets a high bit without a zero
/// byte only for bytes above 0x7F, which stop the run anyway.
#[inline(always)]
fn ascii_stops(w: u64) -> u64 {
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    (quote.wrapping_sub(ONES) | backslash.wrapping_sub(ONES) | w.wrapping_sub(ONES * 0x20) | w)
        & HIGH
}

/// Like [`ascii_stops`], bytes above 0x7F let through.
#[inline(always)]
fn stops(w: u64) -> u64 {
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    ((quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash)
        | (w.wrapping_sub(ONES * 0x20) & !w))
        & HIGH
}

/// The string whose opening quote is at `i`: after its closing quote, and
/// whether it holds an escape. `None` for what serde_json or
/// [`json_hazard`](super::json_hazard) refuses: a control character, an
/// unknown escape, a `\u` escape of a lone surrogate, invalid UTF-8, no
/// closing quote. Plain ASCII is read eight bytes at a time here; anything
/// else goes on in [`string_rest`].
#[inline(always)]
fn string_at(s: &[u8], i: usize) -> Option<(usize, bool)> {
    if s.get(i) != Some(&b'"') {
        return None;
    }
    // Two rounds here: most keys and many values end within them.
    let mut j = i + 1;
    for _ in 0..2 {
        let Some(chunk) = s.get(j..j + 8) else {
            return string_rest(s, j);
        };
        let m = ascii_stops(u64::from_le_bytes(chunk.try_into().ok()?));
        if m != 0 {
            j += (m.trailing_zeros() / 8) as usize;
            if s[j] == b'"' {
                return Some((j + 1, false));
            }
            return string_rest(s, j);
        }
        j += 8;
    }
    long_string(s, j)
}

/// The rest of a longer string from `j`, up to which it is plain ASCII:
/// eight bytes at a time for a while, then (when long enough for its
/// setup to pay) its end found with `memchr` and its bytes checked for
/// control characters and bytes above 0x7F. A string with any of those,
/// or an escape, goes on in [`string_rest`].
#[inline(never)]
fn long_string(s: &[u8], mut j: usize) -> Option<(usize, bool)> {
    for _ in 0..10 {
        let Some(chunk) = s.get(j..j + 8) else {
            return string_rest(s, j);
        };
        let m = ascii_stops(u64::from_le_bytes(chunk.try_into().ok()?));
        if m != 0 {
            j += (m.trailing_zeros() / 8) as usize;
            if s[j] == b'"' {
                return Some((j + 1, false));
            }
            return string_rest(s, j);
        }
        j += 8;
    }
    let end = j + memchr::memchr2(b'"', b'\\', s.get(j..)?)?;
    if s[end] == b'"' && plain_ascii(&s[j..end]) {
        return Some((end + 1, false));
    }
    string_rest(s, j)
}

/// No byte below 0x20 or above 0x7F.
fn plain_ascii(b: &[u8]) -> bool {
    let mut chunks = b.chunks_exact(8);
    let mut flags = 0;
    for chunk in &mut chunks {
        let Ok(w) = <[u8; 8]>::try_from(chunk) else {
            return false;
        };
        let w = u64::from_le_bytes(w);
        // A borrow flags a byte only above one that is flagged itself.
        flags |= w.wrapping_sub(ONES * 0x20) | w;
    }
    flags & HIGH == 0
        && chunks
            .remainder()
            .iter()
            .all(|&b| (0x20..0x80).contains(&b))
}

/// The rest of a string from `j`, up to which it is plain ASCII.
#[inline(never)]
fn string_rest(s: &[u8], mut j: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    // Where the first byte above 0x7F is; from there the string is checked
    // as UTF-8 at its end.
    let mut wide = None;
    loop {
        let ascii = wide.is_none();
        loop {
            match s.get(j..j + 8) {
                Some(chunk) => {
                    let w = u64::from_le_bytes(chunk.try_into().ok()?);
                    let m = if ascii { ascii_stops(w) } else { stops(w) };
                    if m != 0 {
                        j += (m.trailing_zeros() / 8) as usize;
                        break;
                    }
                    j += 8;
                }
                None => {
                    while let Some(&b) = s.get(j) {
                        if b == b'"' || b == b'\\' || b < 0x20 || (ascii && b > 0x7f) {
                            break;
                        }
                        j += 1;
                    }
                    break;
                }
            }
        }
        match *s.get(j)? {
            b'"' => {
                if let Some(from) = wide {
                    std::str::from_utf8(&s[from..j]).ok()?;
                }
                return Some((j + 1, escaped));
            }
            b'\\' => {
                escaped = true;
                j = escape(s, j)?;
            }
            0..=0x1f => return None,
            _ => wide = Some(j),
        }
    }
}

/// After the escape whose backslash is at `at`.
fn escape(s: &[u8], at: usize) -> Option<usize> {
    match *s.get(at + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 2),
        b'u' => match hex4(s, at + 2)? {
            0xD800..=0xDBFF => {
                let pair = s.get(at + 6..at + 8) == Some(b"\\u".as_slice())
                    && matches!(hex4(s, at + 8)?, 0xDC00..=0xDFFF);
                pair.then_some(at + 12)
            }
            0xDC00..=0xDFFF => None,
            _ => Some(at + 6),
        },
        _ => None,
    }
}

/// The four hex digits at `i`.
fn hex4(s: &[u8], i: usize) -> Option<u16> {
    s.get(i..i + 4)?.iter().try_fold(0u16, |v, &b| {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        Some(v << 4 | u16::from(d))
    })
}

/// What a rewrite changes (values by range): the model id (to the
/// provider's), the `messages` whose assistant turns lose
/// `reasoning_content`, and with `force_usage`, `stream_options` (appended
/// when absent) made to include usage.
struct Edits<'a> {
    model: Option<((usize, usize), &'a str)>,
    messages: Option<(usize, usize)>,
    force_usage: bool,
    options: Option<(usize, usize)>,
}

const INCLUDE_USAGE: &[u8] = b"{\"include_usage\":true}";

impl Edits<'_> {
    /// Writes the value at `a..b`, changed if it is to be.
    fn value(&self, out: &mut Vec<u8>, s: &[u8], (a, b): (usize, usize)) -> Option<()> {
        if let Some((_, id)) = self.model.filter(|m| m.0.0 == a) {
            out.extend_from_slice(serde_json::to_string(id).ok()?.as_bytes());
        } else if self.messages.is_some_and(|m| m.0 == a) {
            strip_reasoning(out, &s[a..b])?;
        } else if self.force_usage && self.options.is_some_and(|o| o.0 == a) {
            out.extend_from_slice(&forced_options(std::str::from_utf8(&s[a..b]).ok()?));
        } else {
            out.extend_from_slice(&s[a..b]);
        }
        Some(())
    }

    fn append_options(&self) -> bool {
        self.force_usage && self.options.is_none()
    }
}

/// The rewrite of a body whose top level holds no whitespace between its
/// tokens: its bytes, the changed values replaced.
fn rewrite_compact(s: &[u8], open: usize, close: usize, edits: &Edits<'_>) -> Option<Vec<u8>> {
    let mut changed = [
        edits.model.map(|m| m.0),
        edits.messages,
        edits.options.filter(|_| edits.force_usage),
    ];
    changed.sort_unstable_by_key(|r| r.map_or(usize::MAX, |r| r.0));
    let mut out = Vec::with_capacity(s.len() + 40);
    let mut at = open;
    for r in changed.into_iter().flatten() {
        out.extend_from_slice(&s[at..r.0]);
        edits.value(&mut out, s, r)?;
        at = r.1;
    }
    out.extend_from_slice(&s[at..close]);
    if edits.append_options() {
        out.extend_from_slice(b",\"stream_options\":");
        out.extend_from_slice(INCLUDE_USAGE);
    }
    out.push(b'}');
    Some(out)
}

/// The rewrite of any other body: its members written again without the
/// whitespace between them, as the reference writes them.
fn rewrite_spaced(s: &[u8], open: usize, edits: &Edits<'_>) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() + 40);
    out.push(b'{');
    for_each_member(s, open, |key, v| {
        if out.len() > 1 {
            out.push(b',');
        }
        out.extend_from_slice(key);
        out.push(b':');
        edits.value(&mut out, s, v)
    })?;
    if edits.append_options() {
        out.extend_from_slice(b",\"stream_options\":");
        out.extend_from_slice(INCLUDE_USAGE);
    }
    out.push(b'}');
    Some(out)
}

/// Calls `f` with each member of the checked object at `open`: its key as
/// written (quotes included) and its value's range.
fn for_each_member(
    s: &[u8],
    open: usize,
    mut f: impl FnMut(&[u8], (usize, usize)) -> Option<()>,
) -> Option<()> {
    let mut i = ws(s, open + 1);
    if s.get(i) == Some(&b'}') {
        return Some(());
    }
    loop {
        let key_end = split::string_end(s, i)?;
        let v = ws(s, ws(s, key_end) + 1);
        let end = split::value_end(s, v)?;
        f(&s[i..key_end], (v, end))?;
        i = ws(s, end);
        match *s.get(i)? {
            b',' => i = ws(s, i + 1),
            _ => return Some(()),
        }
    }
}

/// `messages` (checked) without `reasoning_content` in assistant turns,
/// written as the reference writes it: elements joined by commas, a
/// changed message's members too.
fn strip_reasoning(out: &mut Vec<u8>, raw: &[u8]) -> Option<()> {
    out.push(b'[');
    let mut i = ws(raw, 1);
    loop {
        let end = split::value_end(raw, i)?;
        let msg = &raw[i..end];
        let (mut assistant, mut reasoning) = (false, false);
        for_each_member(msg, 0, |key, (a, b)| {
            match key {
                b"\"role\"" => assistant = &msg[a..b] == b"\"assistant\"",
                b"\"reasoning_content\"" => reasoning = true,
                _ => {}
            }
            Some(())
        })?;
        if assistant && reasoning {
            out.push(b'{');
            let mut first = true;
            for_each_member(msg, 0, |key, (a, b)| {
                if key != b"\"reasoning_content\"" {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                    out.extend_from_slice(key);
                    out.push(b':');
                    out.extend_from_slice(&msg[a..b]);
                }
                Some(())
            })?;
            out.push(b'}');
        } else {
            out.extend_from_slice(msg);
        }
        i = ws(raw, end);
        match *raw.get(i)? {
            b',' => {
                out.push(b',');
                i = ws(raw, i + 1);
            }
            _ => break,
        }
    }
    out.push(b']');
    Some(())
}

/// After a member whose value ends at `end`, in an object whose members
/// are flagged in `seen`: refuses a repeated member (`bit` already set),
/// then steps over `,` (`Ok`: where the next member starts) or the closing
/// `}` (`Err`: where the object ends).
fn member_done(s: &[u8], end: usize, seen: &mut u8, bit: u8) -> Option<Result<usize, usize>> {
    if *seen & bit != 0 {
        return None;
    }
    *seen |= bit;
    let i = ws(s, end);
    match *s.get(i)? {
        b',' => Some(Ok(i + 1)),
        b'}' => Some(Err(i + 1)),
        _ => None,
    }
}
