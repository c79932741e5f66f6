//! Token usage as providers report it, and what a non-streamed answer says.

use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::json::{Cursor, Keys, Stop};

/// A provider's `usage` object, flattened. Missing or `null` counts are 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// `prompt_tokens`: input tokens, metered.
    pub prompt_tokens: u64,
    /// `completion_tokens`: output tokens including reasoning, metered.
    pub completion_tokens: u64,
    /// `total_tokens`, as reported.
    pub total_tokens: u64,
    /// `completion_tokens_details.reasoning_tokens`.
    pub reasoning_tokens: u64,
    /// `prompt_tokens_details.cached_tokens`.
    pub cached_tokens: u64,
    /// `cache_read_input_tokens`, informational.
    pub cache_read_input_tokens: u64,
    /// `cache_created_input_tokens`, informational.
    pub cache_created_input_tokens: u64,
}

impl Usage {
    /// Both reports' counts together: an answer two requests made (a
    /// stream continued after a cut) costs both.
    pub fn plus(&self, other: &Usage) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens.saturating_add(other.prompt_tokens),
            completion_tokens: self
                .completion_tokens
                .saturating_add(other.completion_tokens),
            total_tokens: self.total_tokens.saturating_add(other.total_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_add(other.reasoning_tokens),
            cached_tokens: self.cached_tokens.saturating_add(other.cached_tokens),
            cache_read_input_tokens: self
                .cache_read_input_tokens
                .saturating_add(other.cache_read_input_tokens),
            cache_created_input_tokens: self
                .cache_created_input_tokens
                .saturating_add(other.cache_created_input_tokens),
        }
    }
}

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default, deserialize_with = "count")]
            prompt_tokens: u64,
            #[serde(default, deserialize_with = "count")]
            completion_tokens: u64,
            #[serde(default, deserialize_with = "count")]
            total_tokens: u64,
            #[serde(default)]
            completion_tokens_details: Option<CompletionDetails>,
            #[serde(default)]
            prompt_tokens_details: Option<PromptDetails>,
            #[serde(default, deserialize_with = "count")]
            cache_read_input_tokens: u64,
            #[serde(default, deserialize_with = "count")]
            cache_created_input_tokens: u64,
        }
        #[derive(Deserialize)]
        struct CompletionDetails {
            #[serde(default, deserialize_with = "count")]
            reasoning_tokens: u64,
        }
        #[derive(Deserialize)]
        struct PromptDetails {
            #[serde(default, deserialize_with = "count")]
            cached_tokens: u64,
        }
        let raw = Raw::deserialize(d)?;
        Ok(Usage {
            prompt_tokens: raw.prompt_tokens,
            completion_tokens: raw.completion_tokens,
            total_tokens: raw.total_tokens,
            reasoning_tokens: raw
                .completion_tokens_details
                .map_or(0, |c| c.reasoning_tokens),
            cached_tokens: raw.prompt_tokens_details.map_or(0, |p| p.cached_tokens),
            cache_read_input_tokens: raw.cache_read_input_tokens,
            cache_created_input_tokens: raw.cache_created_input_tokens,
        })
    }
}

/// A token count: a non-negative integer (an integral float is accepted),
/// or `null` for 0.
fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a token count")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom("negative token count"))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            if v >= 0.0 && v.fract() == 0.0 && v < 1e18 {
                Ok(v as u64)
            } else {
                Err(E::custom("token count is not a whole number"))
            }
        }
        fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
            Ok(0)
        }
        fn visit_none<E: de::Error>(self) -> Result<u64, E> {
            Ok(0)
        }
    }
    d.deserialize_any(V)
}

/// What the gateway reads from a non-streamed chat completion body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletionSummary {
    /// The `usage` object, when present.
    pub usage: Option<Usage>,
    /// `finish_reason` of the first choice that has one.
    pub finish_reason: Option<String>,
}

/// What the gateway reads of a provider's JSON chunk, in one pass;
/// everything else in it is skipped unparsed.
///
/// [`Probe::read`] accepts and refuses exactly what `serde_json::from_slice`
/// does for a `#[derive(Deserialize)]` struct with the `#[serde(default)]`
/// members `choices: Option<Vec<{ finish_reason: Option<String> }>>`,
/// `usage` (read as [`usage_value`] does) and `error: Option<&RawValue>`:
/// a repeated member is refused, member names are compared unescaped, and
/// an array is read by position as serde reads a struct from one.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Probe<'a> {
    /// `finish_reason` of the first choice that has one.
    pub(crate) finish_reason: Option<String>,
    /// The `usage` object, if present and readable.
    pub(crate) usage: Option<Usage>,
    /// The `error` member's JSON text, when present and not null.
    pub(crate) error: Option<&'a str>,
}

impl<'a> Probe<'a> {
    /// Reads a chunk; `None` when it is not JSON of that shape.
    pub(crate) fn read(text: &'a [u8]) -> Option<Probe<'a>> {
        Cursor::whole(text, probe).ok()
    }
}

// The readers below take the cursor before a value and leave it after the
// value. Each accepts and refuses exactly what serde_json does for the same
// read, which differs with the target type: a member name or a string read
// into a `&str` must be valid UTF-8 ([`Cursor::str`]), a skipped one need
// not ([`Cursor::skip`]); a number read as a number must be in range, a
// skipped one need not.

/// The next byte after whitespace, which must be there.
fn next(c: &mut Cursor<'_>) -> Result<u8, Stop> {
    c.peek().ok_or(Stop)
}

/// A string as an owned `String` (see [`Cursor::str`]).
fn string(c: &mut Cursor<'_>) -> Result<String, Stop> {
    if next(c)? != b'"' {
        return Err(Stop);
    }
    String::from_utf8(c.str()?.into_owned()).map_err(|_| Stop)
}

/// A number read as one (serde_json's `deserialize_any`), as a token
/// count: `Some` for a non-negative integer, or an integral float below
/// 1e18; `None` for any other number. A number serde_json cannot represent
/// (`1e400`) is refused.
fn number(c: &mut Cursor<'_>) -> Result<Option<u64>, Stop> {
    let text = c.number_text()?;
    let plain = text.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    });
    match plain {
        Some(n) => Ok(Some(n)),
        None => odd_number(text),
    }
}

/// [`number`] for a negative, fractional, exponent or beyond-`u64` number:
/// serde_json reads its text.
#[cold]
fn odd_number(text: &[u8]) -> Result<Option<u64>, Stop> {
    let n: serde_json::Number = serde_json::from_slice(text).map_err(|_| Stop)?;
    Ok(match (n.as_u64(), n.as_f64()) {
        (Some(n), _) => Some(n),
        (None, Some(f)) if n.is_f64() => {
            (f >= 0.0 && f.fract() == 0.0 && f < 1e18).then_some(f as u64)
        }
        _ => None,
    })
}

/// Any value read as serde_json reads one into a visitor that keeps
/// nothing of it: numbers read (see [`number`]), strings and member names
/// read as `&str`s, array elements and member values skipped.
fn read_any(c: &mut Cursor<'_>) -> Result<(), Stop> {
    match next(c)? {
        b'{' => c.members(Keys::Read, |c, _| c.skip()),
        b'[' => c.skip(),
        b'"' => c.str().map(drop),
        b'-' | b'0'..=b'9' => number(c).map(drop),
        b'n' => c.literal(b"null"),
        b't' => c.literal(b"true"),
        b'f' => c.literal(b"false"),
        _ => Err(Stop),
    }
}

/// A token count: `Some` for a count (see [`number`]; null reads as 0),
/// `None` for any other value.
fn token_count(c: &mut Cursor<'_>) -> Result<Option<u64>, Stop> {
    match next(c)? {
        b'-' | b'0'..=b'9' => number(c),
        b'n' => c.literal(b"null").map(|()| Some(0)),
        _ => read_any(c).map(|()| None),
    }
}

/// The count named `name` in a `*_details` object: `Ok(None)` when absent,
/// null, or the value is not an object; `Err(())` when present but not a
/// count. When the name repeats, the last one counts.
fn details(c: &mut Cursor<'_>, name: &[u8]) -> Result<Result<Option<u64>, ()>, Stop> {
    if next(c)? != b'{' {
        read_any(c)?;
        return Ok(Ok(None));
    }
    let mut found = Ok(None);
    c.members(Keys::Read, |c, key| {
        if *c.name(key) == *name {
            found = token_count(c)?.map(Some).ok_or(());
            Ok(())
        } else {
            c.skip()
        }
    })?;
    Ok(found)
}

/// `usage`, never failing the read around it unless its text is not JSON:
/// anything but an object of valid counts (null, a string, a negative
/// number…) reads as absent. Unknown members are skipped; when a member
/// repeats, the last one counts, but one that is not a count makes the
/// whole object absent.
fn usage_value(c: &mut Cursor<'_>) -> Result<Option<Usage>, Stop> {
    if next(c)? != b'{' {
        read_any(c)?;
        return Ok(None);
    }
    let mut u = Usage::default();
    let mut ok = true;
    c.members(Keys::Read, |c, key| {
        let name = c.name(key);
        let slot = match &*name {
            b"prompt_tokens" => &mut u.prompt_tokens,
            b"completion_tokens" => &mut u.completion_tokens,
            b"total_tokens" => &mut u.total_tokens,
            b"cache_read_input_tokens" => &mut u.cache_read_input_tokens,
            b"cache_created_input_tokens" => &mut u.cache_created_input_tokens,
            b"completion_tokens_details" | b"prompt_tokens_details" => {
                let (slot, count) = if name[0] == b'c' {
                    (&mut u.reasoning_tokens, &b"reasoning_tokens"[..])
                } else {
                    (&mut u.cached_tokens, &b"cached_tokens"[..])
                };
                match details(c, count)? {
                    Ok(Some(n)) => *slot = n,
                    Ok(None) => {}
                    Err(()) => ok = false,
                }
                return Ok(());
            }
            _ => return c.skip(),
        };
        match token_count(c)? {
            Some(n) => *slot = n,
            None => ok = false,
        }
        Ok(())
    })?;
    Ok(ok.then_some(u))
}

/// A string or null (`Option<String>`).
fn string_or_null(c: &mut Cursor<'_>) -> Result<Option<String>, Stop> {
    match next(c)? {
        b'n' => c.literal(b"null").map(|()| None),
        b'"' => string(c).map(Some),
        _ => Err(Stop),
    }
}

/// Any value but null, as its text (`Option<&RawValue>`: skipped, then
/// checked as UTF-8 as a whole).
fn raw_or_null<'a>(c: &mut Cursor<'a>) -> Result<Option<&'a str>, Stop> {
    if next(c)? == b'n' {
        return c.literal(b"null").map(|()| None);
    }
    let start = c.at();
    c.skip()?;
    let text: &'a [u8] = c.text();
    std::str::from_utf8(&text[start..c.at()])
        .map(Some)
        .map_err(|_| Stop)
}

/// One choice, an object (or an array, read by position): its
/// `finish_reason`, a string or null.
fn choice(c: &mut Cursor<'_>) -> Result<Option<String>, Stop> {
    match next(c)? {
        b'{' => {
            let (mut reason, mut seen) = (None, false);
            c.members(Keys::Read, |c, key| {
                if *c.name(key) != *b"finish_reason" {
                    return c.skip();
                }
                if std::mem::replace(&mut seen, true) {
                    return Err(Stop);
                }
                reason = string_or_null(c)?;
                Ok(())
            })?;
            Ok(reason)
        }
        b'[' => {
            c.eat(b'[')?;
            let mut reason = None;
            if next(c)? != b']' {
                reason = string_or_null(c)?;
            }
            c.eat(b']')?;
            Ok(reason)
        }
        _ => Err(Stop),
    }
}

/// `choices`, null or an array of choices: the first `finish_reason`.
fn choices(c: &mut Cursor<'_>) -> Result<Option<String>, Stop> {
    match next(c)? {
        b'n' => return c.literal(b"null").map(|()| None),
        b'[' => {}
        _ => return Err(Stop),
    }
    let mut first = None;
    c.elements(|c| {
        let reason = choice(c)?;
        first = first.take().or(reason);
        Ok(())
    })?;
    Ok(first)
}

/// A chunk: see [`Probe`].
fn probe<'a>(c: &mut Cursor<'a>) -> Result<Probe<'a>, Stop> {
    let mut p = Probe::default();
    match next(c)? {
        b'{' => {
            let mut seen = [false; 3];
            c.members(Keys::Read, |c, key| {
                let member = match &*c.name(key) {
                    b"choices" => 0,
                    b"usage" => 1,
                    b"error" => 2,
                    _ => return c.skip(),
                };
                if std::mem::replace(&mut seen[member], true) {
                    return Err(Stop);
                }
                match member {
                    0 => p.finish_reason = choices(c)?,
                    1 => p.usage = usage_value(c)?,
                    _ => p.error = raw_or_null(c)?,
                }
                Ok(())
            })?;
        }
        b'[' => {
            c.eat(b'[')?;
            if next(c)? == b']' {
                c.eat(b']')?;
                return Ok(p);
            }
            for member in 0..3 {
                match member {
                    0 => p.finish_reason = choices(c)?,
                    1 => p.usage = usage_value(c)?,
                    _ => p.error = raw_or_null(c)?,
                }
                match next(c)? {
                    b']' => {
                        c.eat(b']')?;
                        return Ok(p);
                    }
                    b',' if member < 2 => c.eat(b',')?,
                    _ => return Err(Stop),
                }
            }
            return Err(Stop);
        }
        _ => return Err(Stop),
    }
    Ok(p)
}

/// A provider's answer that is not a JSON object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotJson;

impl std::fmt::Display for NotJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a JSON object")
    }
}

impl std::error::Error for NotJson {}

/// Whether the byte after a value (none: the end) is where
/// [`Cursor::skip_shape`] ends a number or a literal.
fn ends_a_value(next: Option<&u8>) -> bool {
    matches!(
        next,
        None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
    )
}

/// Whether a value the strict reader took (so valid JSON, its brackets in
/// pairs) has too few brackets to nest deeper than [`Cursor::skip_shape`]
/// goes: shorter than the pairs that would take, or few enough counted
/// (brackets in strings count too: a text this says no to is skipped by
/// its shape, which decides exactly).
fn within_depth(value: &[u8]) -> bool {
    use crate::json::MAX_DEPTH;
    value.len() < 2 * (MAX_DEPTH + 1)
        || value.iter().filter(|&&b| b == b'{' || b == b'[').count() <= MAX_DEPTH
}

/// Reads usage and finish reason from a non-streamed answer.
///
/// One pass over the body by its shape (the JSON cursor's `skip_shape`): it must
/// be a JSON object whose strings, nesting and members are well formed
/// (anything else is the provider answering garbage);
/// `choices[].finish_reason` and the top-level `usage` are found by their
/// depth and only their values are parsed (`usage` where the walk meets
/// it, by the strict reader, not walked first and read again). The body
/// itself is forwarded as it is, so its other values are not checked
/// further than their shape.
///
/// A member named twice counts as the client's JSON reader takes it (the
/// SDKs' readers, serde_json, Python's and JavaScript's): the last one. So
/// the finish reason is the first choice's, among those of the last
/// `choices`, whose last `finish_reason` is a string; names are compared
/// unescaped.
pub fn parse_completion(body: &[u8]) -> Result<CompletionSummary, NotJson> {
    let mut c = Cursor::new(body);
    let mut usage = None;
    let mut finish = None;
    c.members_shape(|c, key| match &*c.name(key) {
        b"choices" => {
            finish = None;
            if c.peek() != Some(b'[') {
                return c.skip_shape().map(drop);
            }
            c.elements_shape(|c| {
                if c.peek() != Some(b'{') {
                    return c.skip_shape().map(drop);
                }
                // This choice's last `finish_reason`, if a string.
                let mut reason = None;
                c.members_shape(|c, key| {
                    let span = c.skip_shape()?;
                    if *c.name(key) == *b"finish_reason" {
                        reason = (body[span.0] == b'"').then_some(span);
                    }
                    Ok(())
                })?;
                finish = finish.or(reason);
                Ok(())
            })
        }
        b"usage" => {
            // Read where it is, in the one pass. What the strict reader
            // takes, where the shape walk would take the same text (it ends
            // at the same byte, and is not nested deeper than the walk
            // goes), is the usage; anything else is skipped by its shape
            // and is no usage, as when the two were separate passes. The
            // last `usage` counts.
            let mark = c.mark();
            match usage_value(c) {
                Ok(u) if ends_a_value(body.get(c.at())) && within_depth(&body[mark.0..c.at()]) => {
                    usage = u;
                    Ok(())
                }
                _ => {
                    c.rewind(mark);
                    usage = None;
                    c.skip_shape().map(drop)
                }
            }
        }
        _ => c.skip_shape().map(drop),
    })
    .map_err(|Stop| NotJson)?;
    if c.peek().is_some() {
        return Err(NotJson);
    }
    Ok(CompletionSummary {
        usage,
        finish_reason: finish.and_then(|(a, b)| Cursor::whole(&body[a..b], string).ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_member_named_twice_counts_as_clients_read_it_the_last() {
        let finish = |body: &[u8]| parse_completion(body).unwrap().finish_reason;
        // The fuzz target's find: `choices` twice, the client sees the last.
        let twice = br#"{"choices":[{"finish_reason":"suop"}],"x":1,"choices":[{"i":null,"finish_reason":"stop"}]}"#;
        assert_eq!(finish(twice).as_deref(), Some("stop"));
        let then_none = br#"{"choices":[{"finish_reason":"stop"}],"choices":null}"#;
        assert_eq!(finish(then_none), None);
        // Within a choice too; a later null is no reason, so the next choice's counts.
        let in_choice = br#"{"choices":[{"finish_reason":"a","finish_reason":null},{"finish_reason":"b","finish_reason":"c"}]}"#;
        assert_eq!(finish(in_choice).as_deref(), Some("c"));
        // Names are compared unescaped.
        let escaped = br#"{"\u0063hoices":[{"finish\u005freason":"length"}]}"#;
        assert_eq!(finish(escaped).as_deref(), Some("length"));
        for body in [&twice[..], then_none, in_choice, escaped] {
            let v: serde_json::Value = serde_json::from_slice(body).unwrap();
            let want = v["choices"]
                .as_array()
                .and_then(|cs| cs.iter().find_map(|c| c.get("finish_reason")?.as_str()));
            assert_eq!(
                finish(body).as_deref(),
                want,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn reads_openai_shape() {
        let body = br#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,
            "message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30,
            "completion_tokens_details":{"reasoning_tokens":15},
            "prompt_tokens_details":{"cached_tokens":4},"cache_read_input_tokens":4,
            "cache_created_input_tokens":null}}"#;
        let s = parse_completion(body).unwrap();
        assert_eq!(s.finish_reason.as_deref(), Some("stop"));
        let u = s.usage.unwrap();
        assert_eq!(
            (
                u.prompt_tokens,
                u.completion_tokens,
                u.total_tokens,
                u.reasoning_tokens,
                u.cached_tokens
            ),
            (10, 20, 30, 15, 4)
        );
        assert_eq!(u.cache_read_input_tokens, 4);
        assert_eq!(u.cache_created_input_tokens, 0);
    }

    #[test]
    fn the_walk_reads_by_depth_and_refuses_garbage() {
        let body = br#"{"id":"c","x_groq":{"usage":{"prompt_tokens":99}},"choices":[{"index":0,"message":{"content":"\"usage\":{\"prompt_tokens\":7}","finish_reason":"fake"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#;
        let s = parse_completion(body).unwrap();
        assert_eq!(s.finish_reason.as_deref(), Some("length"));
        assert_eq!(
            s.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((3, 4))
        );
        for garbage in [
            &b"<html>502</html>"[..],
            b"{\"id\":\"c\"",
            b"{\"choices\":[{\"finish_reason\":\"stop\"}]",
            b"{\"a\":[1,2}",
            b"{\"a\":\"unterminated}",
            b"{\"a\" 1}",
            b"{} trailing",
            b"",
            b"   ",
            b"{\"a\":\\}",
            b"{\"a\":[{]}}",
        ] {
            assert_eq!(
                parse_completion(garbage),
                Err(NotJson),
                "{}",
                String::from_utf8_lossy(garbage)
            );
        }
        assert_eq!(
            parse_completion(b" {} \n").unwrap(),
            CompletionSummary::default()
        );
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(parse_completion(deep.as_bytes()), Err(NotJson));
        let ok = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(parse_completion(ok.as_bytes()).is_ok());
    }

    proptest::proptest! {
        #[test]
        fn the_walk_agrees_with_serde(
            finish in proptest::option::of(proptest::option::of("[a-z]{1,8}")),
            usage in proptest::option::of(proptest::option::of((0u64..1000, 0u64..1000))),
            content in "[a-z \"\\\\{}\\[\\]:,]{0,30}",
            choices in 0usize..3,
            pretty in proptest::bool::ANY,
        ) {
            let mut v = serde_json::json!({"id": "c", "object": "chat.completion", "created": 1});
            let mut list = Vec::new();
            for i in 0..choices {
                let mut c = serde_json::json!({"index": i, "message": {"role": "assistant", "content": content}});
                if let Some(f) = &finish {
                    c["finish_reason"] = f.clone().map_or(serde_json::Value::Null, Into::into);
                }
                list.push(c);
            }
            v["choices"] = list.into();
            if let Some(u) = usage {
                v["usage"] = u.map_or(serde_json::Value::Null, |(p, c)| serde_json::json!({"prompt_tokens": p, "completion_tokens": c}));
            }
            let text = if pretty { serde_json::to_string_pretty(&v).unwrap() } else { v.to_string() };
            let got = parse_completion(text.as_bytes()).unwrap();
            let mut probe: reference::Probe<'_> = serde_json::from_str(&text).unwrap();
            proptest::prop_assert_eq!(got.finish_reason, probe.finish_reason());
            proptest::prop_assert_eq!(got.usage, probe.usage());
        }
    }

    /// The two passes the in-place read replaced: the usage's extent by
    /// its shape, then that text read whole by the strict reader.
    fn two_passes(body: &[u8]) -> Result<Option<Usage>, NotJson> {
        let mut c = Cursor::new(body);
        let mut usage = None;
        c.members_shape(|c, key| {
            let span = c.skip_shape()?;
            if *c.name(key) == *b"usage" {
                usage = Some(span);
            }
            Ok(())
        })
        .map_err(|Stop| NotJson)?;
        if c.peek().is_some() {
            return Err(NotJson);
        }
        Ok(usage.and_then(|(a, b)| Cursor::whole(&body[a..b], usage_value).ok()?))
    }

    proptest! {
        /// Reading `usage` in place decides as the two passes did, for
        /// counts, odd values, text that is not JSON, values run on into
        /// the next bytes (`nullx`), deep nesting and repeated members.
        #[test]
        fn usage_in_place_agrees_with_the_two_passes(
            values in proptest::collection::vec(proptest::sample::select(vec![
                r#"{"prompt_tokens":3,"completion_tokens":4}"#,
                r#"{"prompt_tokens":3,"completion_tokens_details":{"reasoning_tokens":2}}"#,
                r#"{"prompt_tokens":-1}"#, r#"{"prompt_tokens":"3"}"#, r#"{"prompt_tokens":3.0}"#,
                r#"{"x":"\ud800","total_tokens":5}"#, r#"{"x":[1,{"y":null}],"total_tokens":5}"#,
                r#"{"prompt_tokens":1,,}"#, r#"{"prompt_tokens":1"#, r#"{"prompt_tokens":1x}"#,
                "null", "nullx", "12", "12abc", "-", "true", "\"s\"", "[1,2]", "{}", " { } ",
                "tru", r#"{"a":"\"}"}"#,
            ]), 1..4),
            deep in 120usize..140,
            deep_at in proptest::option::of(0usize..4),
            tail in proptest::sample::select(vec!["}", " }", r#","z":1}"#, "x}", "]", ""]),
        ) {
            let deep_value = format!(
                r#"{{"total_tokens":1,"d":{}{}}}"#,
                "[".repeat(deep),
                "]".repeat(deep)
            );
            let mut body = String::from(r#"{"choices":[]"#);
            for (i, v) in values.iter().enumerate() {
                let v = if deep_at == Some(i) { deep_value.as_str() } else { v };
                body.push_str(r#","usage":"#);
                body.push_str(v);
            }
            body.push_str(tail);
            let old = two_passes(body.as_bytes());
            let new = parse_completion(body.as_bytes()).map(|s| s.usage);
            proptest::prop_assert_eq!(new, old, "{}", body);
        }
    }

    #[test]
    fn garbage_and_odd_usage() {
        assert!(parse_completion(b"<html>").is_err());
        assert!(parse_completion(b"[1,2]").is_err());
        let s = parse_completion(br#"{"choices":[],"usage":{"prompt_tokens":-1}}"#).unwrap();
        assert_eq!(s.usage, None);
        let s = parse_completion(br#"{"usage":{"prompt_tokens":3.0}}"#).unwrap();
        assert_eq!(s.usage.unwrap().prompt_tokens, 3);
        let s = parse_completion(br#"{"usage":null}"#).unwrap();
        assert_eq!(s.usage, None);
    }

    /// The serde readers these replace, kept as the reference they must
    /// agree with byte for byte.
    mod reference {
        use super::super::Usage;
        use serde::Deserialize;
        use serde::de::{self, Deserializer};

        /// What the gateway reads of a provider's JSON object (a chunk or a whole
        /// answer), in one pass; everything else in it is skipped unparsed.
        #[derive(Deserialize)]
        pub(super) struct Probe<'a> {
            #[serde(default)]
            choices: Option<Vec<ChoiceProbe>>,
            #[serde(default)]
            usage: LenientUsage,
            #[serde(default, borrow)]
            pub(super) error: Option<&'a serde_json::value::RawValue>,
        }

        #[derive(Deserialize)]
        struct ChoiceProbe {
            #[serde(default)]
            finish_reason: Option<String>,
        }

        impl Probe<'_> {
            /// `finish_reason` of the first choice that has one.
            pub(super) fn finish_reason(&mut self) -> Option<String> {
                self.choices
                    .take()?
                    .into_iter()
                    .find_map(|c| c.finish_reason)
            }

            /// The `usage` object, if present and readable.
            pub(super) fn usage(&mut self) -> Option<Usage> {
                self.usage.0.take()
            }
        }

        /// `usage` read in the same pass as the rest, never failing it: anything
        /// but an object of valid counts (null, a string, a negative number…)
        /// reads as absent.
        #[derive(Default)]
        pub(super) struct LenientUsage(pub(super) Option<Usage>);

        impl<'de> Deserialize<'de> for LenientUsage {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> de::Visitor<'de> for V {
                    type Value = LenientUsage;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a usage object")
                    }
                    fn visit_map<A: de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<LenientUsage, A::Error> {
                        let mut u = Usage::default();
                        let mut ok = true;
                        while let Some(Name(key)) = map.next_key::<Name<'de>>()? {
                            let slot = match key.as_ref() {
                                "prompt_tokens" => &mut u.prompt_tokens,
                                "completion_tokens" => &mut u.completion_tokens,
                                "total_tokens" => &mut u.total_tokens,
                                "cache_read_input_tokens" => &mut u.cache_read_input_tokens,
                                "cache_created_input_tokens" => &mut u.cache_created_input_tokens,
                                "completion_tokens_details" => {
                                    ok &= map
                                        .next_value::<Details<0>>()?
                                        .read(&mut u.reasoning_tokens);
                                    continue;
                                }
                                "prompt_tokens_details" => {
                                    ok &=
                                        map.next_value::<Details<1>>()?.read(&mut u.cached_tokens);
                                    continue;
                                }
                                _ => {
                                    map.next_value::<de::IgnoredAny>()?;
                                    continue;
                                }
                            };
                            match map.next_value::<Count>()?.0 {
                                Some(n) => *slot = n,
                                None => ok = false,
                            }
                        }
                        Ok(LenientUsage(ok.then_some(u)))
                    }
                    fn visit_seq<A: de::SeqAccess<'de>>(
                        self,
                        mut seq: A,
                    ) -> Result<LenientUsage, A::Error> {
                        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                        Ok(LenientUsage(None))
                    }
                    fn visit_unit<E: de::Error>(self) -> Result<LenientUsage, E> {
                        Ok(LenientUsage(None))
                    }
                    fn visit_none<E: de::Error>(self) -> Result<LenientUsage, E> {
                        Ok(LenientUsage(None))
                    }
                    fn visit_bool<E: de::Error>(self, _: bool) -> Result<LenientUsage, E> {
                        Ok(LenientUsage(None))
                    }
                    fn visit_i64<E: de::Error>(self, _: i64) -> Result<LenientUsage, E> {
                        Ok(LenientUsage(None))
                    }
                    fn visit_u64<E: de::Error>(self, _: u64) -> Result<LenientUsage, E> {
                        Ok(LenientUsage(None))
                    }
                    fn visit_f64<E: de::Error>(self, _: f64) -> Result<LenientUsage, E> {
                        Ok(LenientUsage(None))
                    }
                    fn visit_str<E: de::Error>(self, _: &str) -> Result<LenientUsage, E> {
                        Ok(LenientUsage(None))
                    }
                }
                d.deserialize_any(V)
            }
        }

        /// A member name, borrowed unless it has escapes (serde's own `Cow<str>`
        /// always allocates a `String`).
        struct Name<'a>(std::borrow::Cow<'a, str>);

        impl<'de> Deserialize<'de> for Name<'de> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> de::Visitor<'de> for V {
                    type Value = Name<'de>;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a member name")
                    }
                    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Name<'de>, E> {
                        Ok(Name(std::borrow::Cow::Borrowed(v)))
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<Name<'de>, E> {
                        Ok(Name(std::borrow::Cow::Owned(v.to_owned())))
                    }
                }
                d.deserialize_str(V)
            }
        }

        /// A token count, or `None` for anything that is not one (null reads as 0).
        struct Count(Option<u64>);

        impl<'de> Deserialize<'de> for Count {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> de::Visitor<'de> for V {
                    type Value = Count;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a token count")
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                        Ok(Count(Some(v)))
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                        Ok(Count(u64::try_from(v).ok()))
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Count, E> {
                        Ok(Count(
                            (v >= 0.0 && v.fract() == 0.0 && v < 1e18).then_some(v as u64),
                        ))
                    }
                    fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
                        Ok(Count(Some(0)))
                    }
                    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Count, E> {
                        Ok(Count(None))
                    }
                    fn visit_str<E: de::Error>(self, _: &str) -> Result<Count, E> {
                        Ok(Count(None))
                    }
                    fn visit_map<A: de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<Count, A::Error> {
                        while map
                            .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                            .is_some()
                        {}
                        Ok(Count(None))
                    }
                    fn visit_seq<A: de::SeqAccess<'de>>(
                        self,
                        mut seq: A,
                    ) -> Result<Count, A::Error> {
                        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                        Ok(Count(None))
                    }
                }
                d.deserialize_any(V)
            }
        }

        /// The one count read from a `*_details` object (`Details::<N>` reads the
        /// member named by `DETAIL_NAMES[N]`): `Ok(None)` when absent or null,
        /// `Err(())` when present but not a count.
        struct Details<const N: usize>(Result<Option<u64>, ()>);

        const DETAIL_NAMES: [&str; 2] = ["reasoning_tokens", "cached_tokens"];

        impl<'de, const N: usize> Deserialize<'de> for Details<N> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V<const N: usize>;
                impl<'de, const N: usize> de::Visitor<'de> for V<N> {
                    type Value = Details<N>;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a details object")
                    }
                    fn visit_map<A: de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<Details<N>, A::Error> {
                        let mut found = Ok(None);
                        while let Some(Name(key)) = map.next_key::<Name<'de>>()? {
                            if key == DETAIL_NAMES[N] {
                                found = match map.next_value::<Count>()?.0 {
                                    Some(n) => Ok(Some(n)),
                                    None => Err(()),
                                };
                            } else {
                                map.next_value::<de::IgnoredAny>()?;
                            }
                        }
                        Ok(Details(found))
                    }
                    fn visit_unit<E: de::Error>(self) -> Result<Details<N>, E> {
                        Ok(Details(Ok(None)))
                    }
                    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Details<N>, E> {
                        Ok(Details(Ok(None)))
                    }
                    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Details<N>, E> {
                        Ok(Details(Ok(None)))
                    }
                    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Details<N>, E> {
                        Ok(Details(Ok(None)))
                    }
                    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Details<N>, E> {
                        Ok(Details(Ok(None)))
                    }
                    fn visit_str<E: de::Error>(self, _: &str) -> Result<Details<N>, E> {
                        Ok(Details(Ok(None)))
                    }
                    fn visit_seq<A: de::SeqAccess<'de>>(
                        self,
                        mut seq: A,
                    ) -> Result<Details<N>, A::Error> {
                        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                        Ok(Details(Ok(None)))
                    }
                }
                d.deserialize_any(V::<N>)
            }
        }

        impl<const N: usize> Details<N> {
            /// Stores the count in `slot`; false when it was present but invalid.
            fn read(self, slot: &mut u64) -> bool {
                match self.0 {
                    Ok(Some(n)) => {
                        *slot = n;
                        true
                    }
                    Ok(None) => true,
                    Err(()) => false,
                }
            }
        }

        /// What `Probe` read: finish reason, usage and error text.
        pub(super) fn probe(
            text: &[u8],
        ) -> Option<(Option<String>, Option<Usage>, Option<String>)> {
            let mut p = serde_json::from_slice::<Probe<'_>>(text).ok()?;
            Some((
                p.finish_reason(),
                p.usage(),
                p.error.map(|e| e.get().to_owned()),
            ))
        }

        /// What `LenientUsage` read; `None` when serde_json refused the text.
        pub(super) fn usage(text: &[u8]) -> Option<Option<Usage>> {
            serde_json::from_slice::<LenientUsage>(text)
                .ok()
                .map(|u| u.0)
        }
    }

    fn read_usage(text: &[u8]) -> Option<Option<Usage>> {
        Cursor::whole(text, usage_value).ok()
    }

    fn read_probe(text: &[u8]) -> Option<(Option<String>, Option<Usage>, Option<String>)> {
        Probe::read(text).map(|p| (p.finish_reason, p.usage, p.error.map(str::to_owned)))
    }

    fn usage(prompt: u64, completion: u64, reasoning: u64, cached: u64) -> Option<Usage> {
        Some(Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            reasoning_tokens: reasoning,
            cached_tokens: cached,
            ..Usage::default()
        })
    }

    #[test]
    fn the_usage_reader_reads_what_serde_read() {
        let max = Some(Usage {
            prompt_tokens: u64::MAX,
            ..Usage::default()
        });
        let cases: &[(&[u8], Option<Usage>)] = &[
            (br#"{"prompt_tokens":3,"completion_tokens":4}"#, usage(3, 4, 0, 0)),
            (br#"{}"#, usage(0, 0, 0, 0)),
            // Escaped member names are their unescaped selves.
            (br#"{"prompt\u005ftokens":3,"\u0063ompletion_tokens":4}"#, usage(3, 4, 0, 0)),
            (br#"{"completion_tokens_details":{"reasoning\u005Ftokens":2}}"#, usage(0, 0, 2, 0)),
            // Counts: integers, integral floats below 1e18, null for 0.
            (br#"{"prompt_tokens":3.0}"#, usage(3, 0, 0, 0)),
            (br#"{"prompt_tokens":1e3}"#, usage(1000, 0, 0, 0)),
            (br#"{"prompt_tokens":1E+2,"completion_tokens":2500e-1}"#, usage(100, 250, 0, 0)),
            (br#"{"prompt_tokens":0}"#, usage(0, 0, 0, 0)),
            (br#"{"prompt_tokens":-0}"#, usage(0, 0, 0, 0)),
            (br#"{"prompt_tokens":-0.0}"#, usage(0, 0, 0, 0)),
            (br#"{"prompt_tokens":null}"#, usage(0, 0, 0, 0)),
            (br#"{"prompt_tokens":1e17}"#, usage(100_000_000_000_000_000, 0, 0, 0)),
            (br#"{"prompt_tokens":18446744073709551615}"#, max),
            (br#"{"prompt_tokens":3.5}"#, None),
            (br#"{"prompt_tokens":-1}"#, None),
            (br#"{"prompt_tokens":-1.0}"#, None),
            (br#"{"prompt_tokens":1e18}"#, None),
            (br#"{"prompt_tokens":18446744073709551616}"#, None),
            (br#"{"prompt_tokens":-9223372036854775809}"#, None),
            (br#"{"prompt_tokens":"3"}"#, None),
            (br#"{"prompt_tokens":true}"#, None),
            (br#"{"prompt_tokens":[3]}"#, None),
            (br#"{"prompt_tokens":{"n":3}}"#, None),
            // Not JSON serde_json takes.
            (br#"{"prompt_tokens":1e400}"#, None),
            (br#"{"prompt_tokens":01}"#, None),
            (br#"{"prompt_tokens":1.}"#, None),
            (br#"{"prompt_tokens":+1}"#, None),
            (br#"{"prompt_tokens":nul}"#, None),
            (br#"{"prompt_tokens":1,}"#, None),
            (br#"{"prompt_tokens" 1}"#, None),
            (br#"{"prompt_tokens":1 "completion_tokens":2}"#, None),
            (br#"{"x":[1,]}"#, None),
            (br#"{"x":1e}"#, None),
            (br#"{"x":"\q"}"#, None),
            (b"{\"x\":\"a\x01b\"}", None),
            (br#"{"prompt_tokens":1} x"#, None),
            // Whitespace everywhere.
            (
                b" \t{ \"prompt_tokens\" :\n3 ,\r\"completion_tokens_details\" : { \"reasoning_tokens\" : 2 } , \"prompt_tokens_details\":{ } }\n ",
                usage(3, 0, 2, 0),
            ),
            // Details: null, absent or not an object reads as 0.
            (br#"{"completion_tokens_details":null,"prompt_tokens_details":{"cached_tokens":null}}"#, usage(0, 0, 0, 0)),
            (br#"{"completion_tokens_details":"x","prompt_tokens_details":[1,{}]}"#, usage(0, 0, 0, 0)),
            (br#"{"completion_tokens_details":7,"prompt_tokens_details":true}"#, usage(0, 0, 0, 0)),
            (br#"{"completion_tokens_details":{"audio_tokens":5},"prompt_tokens_details":{"cached_tokens":4,"x":[]}}"#, usage(0, 0, 0, 4)),
            (br#"{"completion_tokens_details":{"reasoning_tokens":-2}}"#, None),
            (br#"{"completion_tokens_details":{"reasoning_tokens":"2"}}"#, None),
            // ... but a detail's number is still read as a number.
            (br#"{"completion_tokens_details":1e400}"#, None),
            // Repeated members: the last one counts, but one that is not a
            // count spoils the object; inside a details object, the last one
            // alone counts.
            (br#"{"prompt_tokens":1,"prompt_tokens":2}"#, usage(2, 0, 0, 0)),
            (br#"{"prompt_tokens":-1,"prompt_tokens":2}"#, None),
            (br#"{"prompt_tokens":2,"prompt_tokens":-1}"#, None),
            (br#"{"completion_tokens_details":{"reasoning_tokens":-1,"reasoning_tokens":2}}"#, usage(0, 0, 2, 0)),
            (br#"{"completion_tokens_details":{"reasoning_tokens":2,"reasoning_tokens":-1}}"#, None),
            (br#"{"completion_tokens_details":{"reasoning_tokens":2},"completion_tokens_details":null}"#, usage(0, 0, 2, 0)),
            (br#"{"completion_tokens_details":{"reasoning_tokens":2},"completion_tokens_details":{"reasoning_tokens":3}}"#, usage(0, 0, 3, 0)),
            (br#"{"completion_tokens_details":{"reasoning_tokens":"x"},"completion_tokens_details":{"reasoning_tokens":3}}"#, None),
            // Unknown members are skipped as serde_json skips them: their
            // strings need not be UTF-8 nor their escapes paired, their
            // numbers need not fit...
            (b"{\"x\":{\"y\":[1,{\"z\":\"\xff\"}]},\"s\":\"\\ud800\",\"n\":1e400,\"prompt_tokens\":1}", usage(1, 0, 0, 0)),
            // ... but names (and strings) that are read must.
            (b"{\"\xff\":1}", None),
            (br#"{"\ud800":1}"#, None),
            (b"{\"prompt_tokens\":{\"\xff\":1}}", None),
            (b"{\"prompt_tokens\":\"\xff\"}", None),
            (b"{\"prompt_tokens\":{\"a\":\"\xff\"}}", None),
            (br#"{"\ud83d\ude00":1,"prompt_tokens":5}"#, usage(5, 0, 0, 0)),
            // Anything but an object.
            (b"null", None),
            (b"\"usage\"", None),
            (b"[1,2]", None),
            (b"5", None),
            (b"", None),
        ];
        for (text, want) in cases {
            let shown = String::from_utf8_lossy(text);
            let got = read_usage(text).flatten();
            assert_eq!(got, *want, "{shown}");
            assert_eq!(got, reference::usage(text).flatten(), "reference: {shown}");
        }
        // One that fails on its own fails the chunk it is in; one that is
        // merely not usage does not.
        for text in [
            &br#"{"prompt_tokens":1e400}"#[..],
            b"{\"\xff\":1}",
            br#"{"x":1,}"#,
        ] {
            assert!(read_usage(text).is_none());
            assert!(reference::usage(text).is_none());
        }
        for text in [&br#"{"prompt_tokens":-1}"#[..], b"[1]", b"null", b"\"x\""] {
            assert_eq!(read_usage(text), Some(None));
            assert_eq!(reference::usage(text), Some(None));
        }
    }

    #[test]
    fn finish_reasons_are_read_as_serde_read_them() {
        for (reason, want) in [
            (&b"\"stop\""[..], Some("stop")),
            (b"\"st\\u006fp\"", Some("stop")),
            (b"\"tool_calls\"", Some("tool_calls")),
            (b"\"caf\xc3\xa9\"", Some("caf\u{e9}")),
            (b"\"\\ud83d\\ude00\"", Some("\u{1f600}")),
            (b"\"\"", Some("")),
            (b"\"\xff\"", None),
            (b"\"a\tb\"", None),
            (b"\"\\ud800\"", None),
            (b"\"\\x\"", None),
        ] {
            let mut body = br#"{"choices":[{"index":0,"finish_reason":"#.to_vec();
            body.extend_from_slice(reason);
            body.extend_from_slice(b"}]}");
            let shown = String::from_utf8_lossy(&body).into_owned();
            let got = parse_completion(&body).expect(&shown).finish_reason;
            assert_eq!(got.as_deref(), want, "{shown}");
            assert_eq!(
                got,
                serde_json::from_slice::<String>(reason).ok(),
                "{shown}"
            );
        }
    }

    #[test]
    fn chunks_are_read_as_serde_read_them() {
        let cases: &[&[u8]] = &[
            br#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#,
            br#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens_details":{"reasoning_tokens":3}}}"#,
            br#"{"choices":[{"finish_reason":null},{"finish_reason":"length"},{"finish_reason":"stop"}]}"#,
            br#"{"choices":null,"usage":null,"error":null}"#,
            br#"{"error":{"message":"overloaded","type":"x"}}"#,
            br#"{"error":"boom"}"#,
            b"{\"error\":{\"message\":\"\xff\"}}",
            b"{\"x\":\"\xff\",\"choices\":[]}",
            br#"{"ch\u006fices":[{"finish_re\u0061son":"stop"}],"us\u0061ge":{"total_tokens":9}}"#,
            // A repeated member is refused, even a null one.
            br#"{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}"#,
            br#"{"usage":null,"usage":null}"#,
            br#"{"choices":[{"finish_reason":"stop","finish_reason":null}]}"#,
            br#"{"x":1,"x":2,"choices":[{"y":1,"y":2}]}"#,
            // Wrong shapes are refused.
            br#"{"choices":{}}"#,
            br#"{"choices":[null]}"#,
            br#"{"choices":[{"finish_reason":1}]}"#,
            br#"{"choices":"stop"}"#,
            br#"{"usage":1e400}"#,
            br#"{"usage":{"prompt_tokens":-1}}"#,
            // Structs read from arrays by position, as serde reads them.
            br#"[[{"finish_reason":"stop"}],{"prompt_tokens":2},null]"#,
            br#"[[["length"]]]"#,
            br#"[null,null,null,null]"#,
            br#"[null,]"#,
            br#"[[[]],{}]"#,
            br#"[[["a","b"]]]"#,
            br#"[]"#,
            br#"{}"#,
            b" {\"choices\" : [ { \"finish_reason\" : \"stop\" } ] } \n",
            b"null",
            b"",
            b"{\"choices\":[]",
            b"{\"choices\":[]} {}",
        ];
        for text in cases {
            assert_eq!(
                read_probe(text),
                reference::probe(text),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        assert_eq!(read_probe(cases[2]).unwrap().0.as_deref(), Some("length"));
        assert_eq!(
            read_probe(cases[8]),
            Some((
                Some("stop".into()),
                usage(0, 0, 0, 0).map(|u| Usage {
                    total_tokens: 9,
                    ..u
                }),
                None
            ))
        );
        assert_eq!(read_probe(cases[9]), None);
    }

    #[test]
    fn skipping_has_no_depth_limit() {
        for depth in [1, 63, 64, 65, 128, 129, 1000] {
            let nested = format!("{}1{}", "[{\"a\":".repeat(depth), "}]".repeat(depth));
            let text = format!(r#"{{"x":{nested},"prompt_tokens":7}}"#);
            assert_eq!(
                read_usage(text.as_bytes()),
                Some(usage(7, 0, 0, 0)),
                "{depth}"
            );
            assert_eq!(
                read_usage(text.as_bytes()),
                reference::usage(text.as_bytes())
            );
            let unbalanced = format!(
                r#"{{"x":{}1{}]}}"#,
                "[{\"a\":".repeat(depth),
                "}]".repeat(depth)
            );
            assert_eq!(read_usage(unbalanced.as_bytes()), None, "{depth}");
        }
    }

    /// Bytes for the generators below: values (mostly well formed, some
    /// not), counts, finish reasons, member names, and the whitespace
    /// between them.
    #[rustfmt::skip]
    mod fragments {
        pub(super) const LEAVES: &[&[u8]] = &[
            b"0", b"3", b"42", b"3.0", b"1e3", b"-1", b"-0", b"1e400", b"18446744073709551616",
            b"null", b"true", b"false", b"\"s\"", b"\"\\u00e9\"", b"\"\\ud800\"",
            b"\"\\ud83d\\ude00\"", b"\"\xff\"", b"\"\xc3\xa9\"", b"\"a\\\"b\"", b"[]", b"{}",
        ];
        pub(super) const BAD_LEAVES: &[&[u8]] = &[
            b"01", b"1.", b".5", b"-", b"+1", b"1e", b"nul", b"\"\\q\"", b"\"\\u12\"", b"\"a\x01b\"",
        ];
        pub(super) const COUNTS: &[&[u8]] = &[
            b"0", b"3", b"42", b"412", b"3.0", b"1e3", b"1E+2", b"2500e-1", b"-0", b"-0.0", b"null",
            b"1e17", b"18446744073709551615",
        ];
        pub(super) const NOT_COUNTS: &[&[u8]] = &[
            b"3.5", b"-1", b"-1.5", b"1e18", b"18446744073709551616", b"99999999999999999999999",
            b"-9223372036854775808", b"-9223372036854775809", b"\"3\"", b"true", b"[1]", b"{}",
            b"1e400", b"{\"\xff\":1}", b"\"\xff\"", b"\"\\ud800\"",
        ];
        pub(super) const REASONS: &[&[u8]] = &[
            b"\"stop\"", b"\"length\"", b"null", b"\"st\\u006fp\"", b"\"caf\xc3\xa9\"",
        ];
        pub(super) const BAD_REASONS: &[&[u8]] = &[
            b"\"\xff\"", b"\"\\ud800\"", b"\"a\tb\"", b"1", b"{}",
        ];
        pub(super) const USAGE_NAMES: &[&[u8]] = &[
            b"prompt_tokens", b"completion_tokens", b"total_tokens", b"cache_read_input_tokens",
            b"cache_created_input_tokens", b"completion_tokens_details", b"prompt_tokens_details",
            b"prompt\\u005ftokens", b"completion_tokens_det\\u0061ils", b"x",
        ];
        pub(super) const DETAIL_NAMES: &[&[u8]] = &[
            b"reasoning_tokens", b"cached_tokens", b"reasoning\\u005ftokens", b"audio_tokens",
        ];
        pub(super) const CHOICE_NAMES: &[&[u8]] = &[
            b"finish_reason", b"fin\\u0069sh_reason", b"index", b"delta",
        ];
        pub(super) const NAMES: &[&[u8]] = &[
            b"choices", b"usage", b"error", b"us\\u0061ge", b"id", b"x", b"",
        ];
        pub(super) const OTHER_NAMES: &[&[u8]] = &[b"id", b"object", b"x", b""];
        pub(super) const BAD_NAMES: &[&[u8]] = &[b"\xff", b"\\ud800", b"\\u00"];
        pub(super) const SPACES: &[&[u8]] = &[b"", b"", b"", b" ", b"\n\t", b"\r "];
    }
    use fragments::*;

    fn pick(from: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> + Clone {
        proptest::sample::select(from).prop_map(<[u8]>::to_vec)
    }

    /// An object of up to `n` members named from `names` (and rarely
    /// [`BAD_NAMES`]).
    fn object_of(
        names: &'static [&'static [u8]],
        values: impl Strategy<Value = Vec<u8>> + Clone,
        n: usize,
    ) -> impl Strategy<Value = Vec<u8>> + Clone {
        let name = prop_oneof![20 => pick(names), 1 => pick(BAD_NAMES)];
        proptest::collection::vec((name, pick(SPACES), values), 0..=n).prop_map(object)
    }

    /// An array of up to `n` elements.
    fn array_of(
        values: impl Strategy<Value = Vec<u8>> + Clone,
        n: usize,
    ) -> impl Strategy<Value = Vec<u8>> + Clone {
        proptest::collection::vec((pick(SPACES), values), 0..=n).prop_map(array)
    }

    fn object(members: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)>) -> Vec<u8> {
        let mut out = b"{".to_vec();
        for (i, (name, space, value)) in members.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&space);
            out.push(b'"');
            out.extend_from_slice(&name);
            out.push(b'"');
            out.extend_from_slice(&space);
            out.push(b':');
            out.extend_from_slice(&value);
            out.extend_from_slice(&space);
        }
        out.push(b'}');
        out
    }

    fn array(elements: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<u8> {
        let mut out = b"[".to_vec();
        for (i, (space, value)) in elements.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&space);
            out.extend_from_slice(&value);
        }
        out.push(b']');
        out
    }

    /// Any value built from [`LEAVES`], a few levels deep.
    fn any_value() -> impl Strategy<Value = Vec<u8>> + Clone {
        prop_oneof![20 => pick(LEAVES), 1 => pick(BAD_LEAVES)].prop_recursive(3, 24, 4, |inner| {
            prop_oneof![object_of(NAMES, inner.clone(), 4), array_of(inner, 3)]
        })
    }

    /// Usage-like objects: usage members (counts, details objects, other
    /// values), sometimes repeated.
    fn usage_like() -> impl Strategy<Value = Vec<u8>> + Clone {
        let details = prop_oneof![
            4 => object_of(DETAIL_NAMES, prop_oneof![8 => pick(COUNTS), 1 => pick(NOT_COUNTS), 1 => any_value()], 3),
            1 => pick(LEAVES),
        ];
        prop_oneof![
            8 => object_of(
                USAGE_NAMES,
                prop_oneof![16 => pick(COUNTS), 1 => pick(NOT_COUNTS), 4 => details, 1 => any_value()],
                7,
            ),
            1 => any_value(),
        ]
    }

    /// Chunk-like text: an object (or, rarely, an array read by position)
    /// with `choices`, `usage`, `error` and other members.
    fn chunk_like() -> impl Strategy<Value = Vec<u8>> {
        let choice = prop_oneof![
            6 => object_of(
                CHOICE_NAMES,
                prop_oneof![12 => pick(REASONS), 1 => pick(BAD_REASONS), 2 => any_value()],
                3,
            ),
            1 => array_of(prop_oneof![6 => pick(REASONS), 1 => pick(BAD_REASONS)], 2),
            1 => pick(LEAVES),
        ];
        let choices = prop_oneof![6 => array_of(choice, 3), 1 => pick(LEAVES)];
        // Each of choices, usage and error at most once (rarely twice),
        // among other members, in any order.
        let members = (
            proptest::option::weighted(0.8, choices.clone()),
            proptest::option::weighted(0.6, usage_like()),
            proptest::option::weighted(0.2, any_value()),
            proptest::collection::vec((pick(OTHER_NAMES), any_value()), 0..3),
            proptest::option::weighted(0.05, (pick(NAMES), usage_like())),
        )
            .prop_map(|(c, u, e, mut others, twice)| {
                others.extend(c.map(|c| (b"choices".to_vec(), c)));
                others.extend(u.map(|u| (b"usage".to_vec(), u)));
                others.extend(e.map(|e| (b"error".to_vec(), e)));
                others.extend(twice);
                others
            })
            .prop_shuffle();
        prop_oneof![
            8 => (members, pick(SPACES)).prop_map(|(members, space)| {
                object(members.into_iter().map(|(name, value)| (name, space.clone(), value)).collect())
            }),
            1 => (choices, usage_like(), any_value(), 0..5usize).prop_map(|(c, u, e, n)| {
                let items = [c, u, e, b"null".to_vec()];
                array(items.into_iter().take(n).map(|v| (Vec::new(), v)).collect())
            }),
        ]
    }

    /// [`usage_like`] or [`chunk_like`] text, sometimes damaged by a byte
    /// or two.
    fn json_like() -> impl Strategy<Value = Vec<u8>> {
        let edit = (
            any::<proptest::sample::Index>(),
            0..3u8,
            proptest::sample::select(&b"{}[],:\"\\ 0e.-nx\xff\x01"[..]),
        );
        let text = prop_oneof![usage_like(), chunk_like()];
        let edits = prop_oneof![4 => Just(Vec::new()), 1 => proptest::collection::vec(edit, 1..3)];
        (text, edits).prop_map(|(mut text, edits)| {
            for (at, how, byte) in edits {
                let at = at.index(text.len() + 1);
                match how {
                    0 => text.insert(at, byte),
                    1 if at < text.len() => {
                        text.remove(at);
                    }
                    _ if at < text.len() => text[at] = byte,
                    _ => {}
                }
            }
            text
        })
    }

    /// A usage object as `serde_json::Value` would read it, for objects
    /// without repeated members.
    fn value_usage(v: &serde_json::Value) -> Option<Usage> {
        use serde_json::Value;
        fn count(v: &Value) -> Option<u64> {
            match v {
                Value::Null => Some(0),
                Value::Number(n) if n.is_f64() => n
                    .as_f64()
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 1e18)
                    .map(|f| f as u64),
                Value::Number(n) => n.as_u64(),
                _ => None,
            }
        }
        fn detail(v: Option<&Value>, name: &str) -> Option<u64> {
            match v.and_then(Value::as_object).and_then(|o| o.get(name)) {
                Some(c) => count(c),
                None => Some(0),
            }
        }
        let o = v.as_object()?;
        let top = |name: &str| o.get(name).map_or(Some(0), count);
        Some(Usage {
            prompt_tokens: top("prompt_tokens")?,
            completion_tokens: top("completion_tokens")?,
            total_tokens: top("total_tokens")?,
            reasoning_tokens: detail(o.get("completion_tokens_details"), "reasoning_tokens")?,
            cached_tokens: detail(o.get("prompt_tokens_details"), "cached_tokens")?,
            cache_read_input_tokens: top("cache_read_input_tokens")?,
            cache_created_input_tokens: top("cache_created_input_tokens")?,
        })
    }

    proptest::proptest! {
        #[test]
        fn the_readers_agree_with_serde(text in json_like()) {
            let shown = String::from_utf8_lossy(&text).into_owned();
            proptest::prop_assert_eq!(read_usage(&text), reference::usage(&text), "{}", shown);
            proptest::prop_assert_eq!(read_probe(&text), reference::probe(&text), "{}", shown);
            if text.first() == Some(&b'"') {
                proptest::prop_assert_eq!(
                    Cursor::whole(&text, string).ok(),
                    serde_json::from_slice::<String>(&text).ok(),
                    "{}", shown
                );
            }
        }

        #[test]
        fn the_usage_reader_agrees_with_a_value_reader(
            members in proptest::sample::subsequence(
                vec![
                    ("prompt_tokens", "prompt\\u005ftokens"),
                    ("completion_tokens", "completion_tokens"),
                    ("total_tokens", "tot\\u0061l_tokens"),
                    ("cache_read_input_tokens", "cache_read_input_tokens"),
                    ("cache_created_input_tokens", "cache_created_input_tokens"),
                    ("completion_tokens_details", "completion_tokens_details"),
                    ("prompt_tokens_details", "prompt_tokens_det\\u0061ils"),
                    ("x_other", "x_other"),
                ],
                0..=8,
            ).prop_shuffle(),
            values in proptest::collection::vec(
                prop_oneof![
                    4 => (0u64..100_000).prop_map(|n| n.to_string()),
                    1 => any::<u64>().prop_map(|n| n.to_string()),
                    1 => (-5i64..5).prop_map(|n| n.to_string()),
                    1 => (0u32..1000, 0u8..3).prop_map(|(n, f)| format!("{n}.{f}")),
                    1 => (0u32..100, 0u8..20).prop_map(|(n, e)| format!("{n}e{e}")),
                    1 => Just("null".to_owned()),
                    1 => Just("\"7\"".to_owned()),
                    1 => Just("[1]".to_owned()),
                    1 => Just("true".to_owned()),
                    2 => (0u64..1000, any::<bool>(), any::<bool>()).prop_map(|(n, escaped, other)| {
                        let mut members = vec![format!("\"{}\":{n}", if escaped { "reasoning\\u005ftokens" } else { "reasoning_tokens" })];
                        members.push(format!("\"cached_tokens\":{n}"));
                        if other { members.push("\"audio_tokens\":[{}]".into()); }
                        format!("{{{}}}", members.join(","))
                    }),
                    1 => Just("{\"reasoning_tokens\":-1,\"cached_tokens\":2.5}".to_owned()),
                ],
                8,
            ),
            spaces in proptest::collection::vec(proptest::sample::select(vec!["", " ", "\n  ", "\t"]), 4),
            escape_names in any::<bool>(),
        ) {
            let [a, b, c, d] = [spaces[0], spaces[1], spaces[2], spaces[3]];
            let body = members
                .iter()
                .zip(&values)
                .map(|((plain, escaped), value)| {
                    let name = if escape_names { escaped } else { plain };
                    format!("{a}\"{name}\"{b}:{c}{value}{d}")
                })
                .collect::<Vec<_>>()
                .join(",");
            let text = format!("{a}{{{body}}}{d}");
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            proptest::prop_assert_eq!(read_usage(text.as_bytes()), Some(value_usage(&value)), "{}", text);
        }
    }
}
