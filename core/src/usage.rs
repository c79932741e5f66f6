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
/// answer); everything else in it is skipped unparsed. `usage` and `error`
/// stay raw text borrowed from the input until asked for.
#[derive(Deserialize)]
pub(crate) struct Probe<'a> {
    #[serde(default)]
    choices: Option<Vec<ChoiceProbe>>,
    #[serde(default, borrow)]
    usage: Option<&'a serde_json::value::RawValue>,
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

    /// The `usage` object, if present and readable (an unreadable one counts
    /// as absent, not as an error).
    pub(crate) fn usage(&mut self) -> Option<Usage> {
        let raw = self.usage.take()?;
        if !raw.get().starts_with('{') {
            return None;
        }
        serde_json::from_str(raw.get()).ok()
    }
}

/// Reads usage and finish reason from a non-streamed answer. The body must be
/// a JSON object (anything else is the provider answering garbage).
pub fn parse_completion(body: &[u8]) -> Result<CompletionSummary, serde_json::Error> {
    let mut probe: Probe<'_> = serde_json::from_slice(body)?;
    Ok(CompletionSummary {
        usage: probe.usage(),
        finish_reason: probe.finish_reason(),
    })
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
