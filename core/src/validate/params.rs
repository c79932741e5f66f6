//! The rules for the top-level parameters other than `model` and
//! `messages`, and for a message's `tool_calls`, checked on their text
//! once the pass has found it valid. Each is the reference's rule, worded
//! the same.

use super::checked::{Kind, elements, kind, object_slots, string};
use super::{MAX_STOP, Param};
use crate::error::ApiError;

/// `stream`: absent, `null` or a boolean.
pub(super) fn check_stream(raw: Option<&[u8]>) -> Result<bool, ApiError> {
    match raw {
        None => Ok(false),
        Some(raw) => match kind(raw) {
            Kind::Null => Ok(false),
            Kind::Bool => Ok(raw == b"true"),
            _ => Err(ApiError::invalid_type("stream", "a boolean")),
        },
    }
}

/// `stream_options`: absent, `null` or an object whose `include_usage`,
/// when there, is a boolean. True when it already asks for usage.
pub(super) fn check_stream_options(raw: Option<&[u8]>) -> Result<bool, ApiError> {
    let Some(raw) = raw else {
        return Ok(false);
    };
    match kind(raw) {
        Kind::Null => Ok(false),
        Kind::Object => {
            let [include_usage] =
                object_slots(raw, Param::root("stream_options"), ["include_usage"])?;
            match include_usage {
                None => Ok(false),
                Some(v) if kind(v) == Kind::Bool => Ok(v == b"true"),
                Some(_) => Err(ApiError::invalid_type(
                    "stream_options.include_usage",
                    "a boolean",
                )),
            }
        }
        _ => Err(ApiError::invalid_type("stream_options", "an object")),
    }
}

/// A number in `min..=max`, or `null`. The value is serde_json's reading of
/// the number (the error quotes it).
pub(super) fn number_in(raw: &[u8], param: Param<'_>, min: f64, max: f64) -> Result<(), ApiError> {
    match kind(raw) {
        Kind::Null => Ok(()),
        Kind::Number => {
            let v: f64 = serde_json::from_slice(raw).map_err(|_| {
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

/// A positive integer literal, or `null`.
fn positive_integer(raw: &[u8], param: Param<'_>) -> Result<Option<u64>, ApiError> {
    match kind(raw) {
        Kind::Null => Ok(None),
        Kind::Number => {
            if raw.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                return Err(ApiError::invalid_type(param.to_string(), "an integer"));
            }
            if raw.starts_with(b"-") || raw == b"0" {
                return Err(ApiError::invalid_value(
                    param.to_string(),
                    format!("'{param}' must be a positive integer."),
                ));
            }
            parse_u64(raw).map(Some).ok_or_else(|| {
                ApiError::invalid_value(param.to_string(), format!("'{param}' is too large."))
            })
        }
        _ => Err(ApiError::invalid_type(param.to_string(), "an integer")),
    }
}

/// The text as a `u64`, as `str::parse` reads it.
fn parse_u64(raw: &[u8]) -> Option<u64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// `max_tokens`, or else `max_completion_tokens`.
pub(super) fn check_max_tokens(
    max_tokens: Option<&[u8]>,
    max_completion_tokens: Option<&[u8]>,
) -> Result<Option<u64>, ApiError> {
    let max_tokens = match max_tokens {
        Some(raw) => positive_integer(raw, Param::root("max_tokens"))?,
        None => None,
    };
    // `max_completion_tokens` is not validated (not in the specification),
    // but a cap is a cap.
    Ok(max_tokens.or_else(|| max_completion_tokens.and_then(parse_u64)))
}

/// `stop`: `null`, a string, or at most [`MAX_STOP`] strings.
pub(super) fn check_stop(raw: &[u8]) -> Result<(), ApiError> {
    let p = Param::root("stop");
    match kind(raw) {
        Kind::Null | Kind::String => Ok(()),
        Kind::Array => {
            let mut not_a_string = None;
            let n = elements(raw, p, |i, item| {
                if kind(item) != Kind::String {
                    not_a_string.get_or_insert(i);
                }
                Ok(())
            })?;
            if n > MAX_STOP {
                return Err(ApiError::invalid_value(
                    "stop",
                    format!("'stop' may hold at most {MAX_STOP} sequences; got {n}."),
                ));
            }
            match not_a_string {
                Some(i) => Err(ApiError::invalid_type(p.index(i).to_string(), "a string")),
                None => Ok(()),
            }
        }
        _ => Err(ApiError::invalid_type(
            "stop",
            "a string or an array of strings",
        )),
    }
}

/// A member that must be there.
fn required<'t>(value: Option<&'t [u8]>, param: Param<'_>) -> Result<&'t [u8], ApiError> {
    value.ok_or_else(|| ApiError::missing(param.to_string()))
}

/// Checks `tools`; returns the function names and the raw length (for the
/// prompt estimate).
pub(super) fn check_tools(raw: &[u8]) -> Result<(Vec<String>, usize), ApiError> {
    if kind(raw) == Kind::Null {
        return Ok((Vec::new(), 0));
    }
    let root = Param::root("tools");
    let mut names = Vec::new();
    elements(raw, root, |i, tool| {
        let p = root.index(i);
        let [ty, function] = object_slots(tool, p, ["type", "function"])?;
        let type_p = p.key("type");
        if string(required(ty, type_p)?, type_p)? != "function" {
            return Err(ApiError::invalid_value(
                type_p.to_string(),
                "Only tools of type 'function' are supported.",
            ));
        }
        let fp = p.key("function");
        let [name, parameters] = object_slots(required(function, fp)?, fp, ["name", "parameters"])?;
        let name_p = fp.key("name");
        let name = string(required(name, name_p)?, name_p)?;
        if !is_function_name(&name) {
            return Err(ApiError::invalid_value(
                name_p.to_string(),
                "Function names are 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'.",
            ));
        }
        if parameters.is_some_and(|params| kind(params) != Kind::Object) {
            return Err(ApiError::invalid_type(
                fp.key("parameters").to_string(),
                "an object",
            ));
        }
        names.push(name.into_owned());
        Ok(())
    })?;
    Ok((names, raw.len()))
}

fn is_function_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `tool_choice`: `null`, `auto`, `none`, `required` (with tools) or an
/// object naming a function in `tools`.
pub(super) fn check_tool_choice(raw: &[u8], tools: &[String]) -> Result<(), ApiError> {
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
            let [ty, function] = object_slots(raw, p, ["type", "function"])?;
            let type_p = p.key("type");
            match ty {
                Some(t) if string(t, type_p)? == "function" => {}
                _ => {
                    return Err(ApiError::invalid_value(
                        "tool_choice.type",
                        "'tool_choice.type' must be 'function'.",
                    ));
                }
            }
            let fp = p.key("function");
            let [name] = object_slots(required(function, fp)?, fp, ["name"])?;
            let name_p = fp.key("name");
            let name = string(required(name, name_p)?, name_p)?;
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

/// A message's `tool_calls` (`p` is its path): an array of objects whose
/// `function`, when there, is an object with a string `name`.
pub(super) fn check_tool_calls(raw: &[u8], p: Param<'_>) -> Result<(), ApiError> {
    elements(raw, p, |j, call| {
        let cp = p.index(j);
        let [function] = object_slots(call, cp, ["function"])?;
        if let Some(f) = function {
            let fp = cp.key("function");
            let [name] = object_slots(f, fp, ["name"])?;
            let np = fp.key("name");
            string(required(name, np)?, np)?;
        }
        Ok(())
    })
    .map(drop)
}
