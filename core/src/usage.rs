//! Token usage as providers report it, and what a non-streamed answer says.

use serde::Deserialize;
use serde::de::{self, Deserializer};

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

/// What the gateway reads of a provider's JSON object (a chunk or a whole
/// answer), in one pass; everything else in it is skipped unparsed.
#[derive(Deserialize)]
pub(crate) struct Probe<'a> {
    #[serde(default)]
    choices: Option<Vec<ChoiceProbe>>,
    #[serde(default)]
    usage: LenientUsage,
    #[serde(default, borrow)]
    pub(crate) error: Option<&'a serde_json::value::RawValue>,
}

#[derive(Deserialize)]
struct ChoiceProbe {
    #[serde(default)]
    finish_reason: Option<String>,
}

impl Probe<'_> {
    /// `finish_reason` of the first choice that has one.
    pub(crate) fn finish_reason(&mut self) -> Option<String> {
        self.choices
            .take()?
            .into_iter()
            .find_map(|c| c.finish_reason)
    }

    /// The `usage` object, if present and readable.
    pub(crate) fn usage(&mut self) -> Option<Usage> {
        self.usage.0.take()
    }
}

/// `usage` read in the same pass as the rest, never failing it: anything
/// but an object of valid counts (null, a string, a negative number…)
/// reads as absent.
#[derive(Default)]
struct LenientUsage(Option<Usage>);

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
                            ok &= map.next_value::<Details<1>>()?.read(&mut u.cached_tokens);
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
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
                while map
                    .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Count(None))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
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
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Details<N>, A::Error> {
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
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Details<N>, A::Error> {
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

/// A provider's answer that is not a JSON object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotJson;

impl std::fmt::Display for NotJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a JSON object")
    }
}

impl std::error::Error for NotJson {}

/// Reads usage and finish reason from a non-streamed answer.
///
/// One structural pass over the body: it must be a JSON object whose
/// strings, nesting and members are well formed (anything else is the
/// provider answering garbage); `choices[].finish_reason` and the top-level
/// `usage` are found by their depth and only their values are parsed. The
/// body itself is forwarded as it is, so its other values are not checked
/// further than their shape.
pub fn parse_completion(body: &[u8]) -> Result<CompletionSummary, NotJson> {
    let mut w = Walk { s: body, i: 0 };
    let mut usage = None;
    let mut finish = None;
    w.members(|w, key| match key {
        b"choices" if w.peek()? == b'[' => w.elements(|w| {
            if w.peek()? != b'{' {
                return w.skip();
            }
            w.members(|w, key| {
                let span = w.skip_span()?;
                if key == b"finish_reason" && finish.is_none() && body[span.0] == b'"' {
                    finish = Some(span);
                }
                Some(())
            })
        }),
        b"usage" => {
            usage = Some(w.skip_span()?);
            Some(())
        }
        _ => w.skip(),
    })
    .ok_or(NotJson)?;
    w.ws();
    if w.i != body.len() {
        return Err(NotJson);
    }
    Ok(CompletionSummary {
        usage: usage.and_then(|(a, b)| serde_json::from_slice::<LenientUsage>(&body[a..b]).ok()?.0),
        finish_reason: finish.and_then(|(a, b)| serde_json::from_slice::<String>(&body[a..b]).ok()),
    })
}

/// A cursor over JSON text that checks and skips structure; every method
/// returns `None` on text that is not well formed where it looks.
struct Walk<'a> {
    s: &'a [u8],
    i: usize,
}

impl Walk<'_> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        (self.peek()? == b).then(|| self.i += 1)
    }

    /// A string; returns its raw contents (escapes as written).
    fn string(&mut self) -> Option<(usize, usize)> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            let off = memchr::memchr2(b'"', b'\\', &self.s[self.i..])?;
            self.i += off;
            if self.s[self.i] == b'"' {
                self.i += 1;
                return Some((start, self.i - 1));
            }
            if self.i + 1 >= self.s.len() {
                return None;
            }
            self.i += 2;
        }
    }

    /// Skips a value, returning its span.
    fn skip_span(&mut self) -> Option<(usize, usize)> {
        self.ws();
        let start = self.i;
        self.skip()?;
        Some((start, self.i))
    }

    /// Skips any value, checking the nesting and the strings in it.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => {
                // Open containers as a bit stack (1 = object): 128 levels,
                // deeper is refused.
                let (mut stack, mut depth) = (0u128, 0u32);
                loop {
                    let off = self.s[self.i..]
                        .iter()
                        .position(|b| matches!(b, b'"' | b'{' | b'}' | b'[' | b']'))?;
                    self.i += off;
                    match self.s[self.i] {
                        b'"' => {
                            self.string()?;
                        }
                        open @ (b'{' | b'[') => {
                            if depth == 128 {
                                return None;
                            }
                            stack = (stack << 1) | u128::from(open == b'{');
                            depth += 1;
                            self.i += 1;
                        }
                        close => {
                            if depth == 0 || (stack & 1 == 1) != (close == b'}') {
                                return None;
                            }
                            stack >>= 1;
                            depth -= 1;
                            self.i += 1;
                            if depth == 0 {
                                return Some(());
                            }
                        }
                    }
                }
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                let off = self.s[self.i..]
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
                self.i += off.unwrap_or(self.s.len() - self.i);
                Some(())
            }
            _ => None,
        }
    }

    /// Visits an object's members: `f(walk, key)` must consume the value.
    fn members(&mut self, mut f: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let (a, b) = self.string()?;
            self.eat(b':')?;
            let key = self.s;
            f(self, &key[a..b])?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Visits an array's elements: `f(walk)` must consume each.
    fn elements(&mut self, mut f: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            f(self)?;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let mut probe: Probe<'_> = serde_json::from_str(&text).unwrap();
            proptest::prop_assert_eq!(got.finish_reason, probe.finish_reason());
            proptest::prop_assert_eq!(got.usage, probe.usage());
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
}
