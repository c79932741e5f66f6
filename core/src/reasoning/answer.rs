//! What one answer said as reasoning, and the tool calls it made: kept as
//! the answer passes (its text unescaped, its calls' ids), for the
//! signature or sealing a translated answer carries and for the memory.

use std::borrow::Cow;
use std::sync::Arc;

use crate::json::Cursor;

/// Most bytes of reasoning kept from one answer: beyond them the answer's
/// reasoning is neither signed, sealed nor remembered (it is still
/// forwarded).
pub const MAX_KEPT_REASONING: usize = 4 << 20;

/// Most tool call ids kept from one answer.
const MAX_CALLS: usize = 256;

/// The text of `json`, a JSON string a chunk reader took (valid, as it is
/// after the translators' and the chat path's reading): its inside when it
/// holds no escape (the usual delta), else unescaped. `None` for what is
/// no JSON string.
pub(crate) fn text_of(json: &[u8]) -> Option<Cow<'_, [u8]>> {
    let quoted = json.len() >= 2 && json[0] == b'"' && json[json.len() - 1] == b'"';
    let inside = json.get(1..json.len().saturating_sub(1))?;
    // A delta is a few bytes: eight at a time, where memchr's set-up is
    // most of its cost.
    let plain = quoted
        && if inside.len() < 64 {
            !quote_or_backslash(inside)
        } else {
            memchr::memchr2(b'\\', b'"', inside).is_none()
        };
    if plain {
        return Some(Cow::Borrowed(inside));
    }
    Cursor::whole(json, Cursor::str).ok()
}

/// Whether `s` holds a `"` or `\`: a word at a time (a byte is one of
/// them when its XOR with it is zero), the last few bytes one by one.
fn quote_or_backslash(s: &[u8]) -> bool {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH != 0;
    let mut words = s.chunks_exact(8);
    let found = words.by_ref().any(|w| {
        let w = u64::from_le_bytes(w.try_into().unwrap_or_default());
        zero(w ^ (ONES * u64::from(b'"'))) || zero(w ^ (ONES * u64::from(b'\\')))
    });
    found || words.remainder().iter().any(|&b| b == b'"' || b == b'\\')
}

/// An answer's reasoning and tool call ids, as they pass.
#[derive(Debug, Default, Clone)]
pub struct AnswerReasoning {
    text: Vec<u8>,
    calls: Vec<Vec<u8>>,
    /// More reasoning came than is kept.
    over: bool,
}

impl AnswerReasoning {
    /// Nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a reasoning delta: `json` is a JSON string as the provider
    /// wrote it (quotes included). Returns how many bytes the text grew.
    pub fn push(&mut self, json: &[u8]) -> usize {
        if self.over {
            return 0;
        }
        let Some(text) = text_of(json) else {
            return 0;
        };
        if self.text.len() + text.len() > MAX_KEPT_REASONING {
            self.over = true;
            self.text = Vec::new();
            return 0;
        }
        self.text.extend_from_slice(&text);
        text.len()
    }

    /// Notes a tool call's id: `json` is its JSON string as written.
    pub fn call(&mut self, json: &[u8]) {
        if self.calls.len() >= MAX_CALLS {
            return;
        }
        if let Ok(id) = Cursor::whole(json, Cursor::str)
            && !id.is_empty()
            && !self.calls.iter().any(|c| **c == *id)
        {
            self.calls.push(id.into_owned());
        }
    }

    /// The reasoning so far (`None` when there was more than is kept).
    pub fn text(&self) -> Option<&[u8]> {
        (!self.over).then_some(self.text.as_slice())
    }

    /// Bytes of reasoning kept.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// No reasoning kept.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The ids of the answer's tool calls, unescaped, in order.
    pub fn calls(&self) -> &[Vec<u8>] {
        &self.calls
    }

    /// What the memory keeps of this answer: its reasoning as a JSON
    /// string, when it made tool calls and had (all of its) reasoning.
    pub fn to_remember(&self) -> Option<Arc<[u8]>> {
        if self.calls.is_empty() || self.over || self.text.is_empty() {
            return None;
        }
        let mut json = Vec::with_capacity(self.text.len() + 16);
        crate::json::write::string(&mut json, &String::from_utf8_lossy(&self.text));
        Some(Arc::from(json))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn quote_or_backslash_is_any_byte(s in proptest::collection::vec(proptest::prop_oneof![proptest::strategy::Just(b'a'), proptest::strategy::Just(b'"'), proptest::strategy::Just(b'\\'), proptest::strategy::Just(0xdcu8), proptest::strategy::Just(0u8), proptest::strategy::Just(0xa2u8)], 0..40)) {
            proptest::prop_assert_eq!(quote_or_backslash(&s), s.iter().any(|&b| b == b'"' || b == b'\\'));
        }
    }

    #[test]
    fn deltas_are_unescaped_and_calls_kept_once() {
        let mut a = AnswerReasoning::new();
        assert_eq!(a.push(br#""think ""#), 6);
        a.push(br#""\u00e9 \"q\"\n""#);
        a.push(b"not json");
        a.call(br#""call_1""#);
        a.call(br#""call_\u0031""#);
        a.call(br#""""#);
        assert_eq!(a.text(), Some("think é \"q\"\n".as_bytes()));
        assert_eq!(a.calls(), [b"call_1".to_vec()]);
        assert_eq!(
            a.to_remember().as_deref(),
            Some("\"think é \\\"q\\\"\\n\"".as_bytes())
        );
    }

    #[test]
    fn an_answer_without_calls_or_with_too_much_reasoning_is_not_remembered() {
        let mut a = AnswerReasoning::new();
        a.push(br#""r""#);
        assert_eq!(a.to_remember(), None);
        a.call(br#""c""#);
        assert!(a.to_remember().is_some());
        let big = format!("\"{}\"", "x".repeat(MAX_KEPT_REASONING));
        a.push(big.as_bytes());
        assert_eq!(a.text(), None);
        assert_eq!(a.to_remember(), None);
    }
}
