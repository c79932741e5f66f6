//! The raw-JSON reading every request translator shares: a body's members
//! as written (syntax checked as the chat validator checks it), typed
//! accessors that name the client's field when they refuse, and the
//! writer of a member copied as it is.

use std::borrow::Cow;
use std::fmt::Display;

use crate::error::ApiError;
use crate::json::{Cursor, Keys, Stop};

/// A 400 for a body that is not a JSON object.
pub(super) fn not_an_object() -> ApiError {
    ApiError::invalid_json("not a JSON object")
}

/// An object's members as written: name (unescaped) and raw value.
pub(super) struct Object<'a>(pub(super) Vec<(Cow<'a, [u8]>, &'a [u8])>);

impl<'a> Object<'a> {
    /// The object that is all of `raw`. `Err(Some)` for a syntax error (or
    /// a value a provider's parser would refuse), `Err(None)` when `raw`
    /// is valid JSON but no object.
    pub(super) fn read(raw: &'a [u8]) -> Result<Object<'a>, Option<ApiError>> {
        super::tape::with(raw, |ends| match ends {
            Some(ends) => Object::read_with(raw, |c| ends.skip(c)),
            None => Object::read_with(raw, |c| c.skip()),
        })
    }

    /// [`Object::read`], each value skipped by `skip` (jumping over the
    /// values whose ends the body's index knows, or walking them).
    #[inline(always)]
    fn read_with(
        raw: &'a [u8],
        skip: impl Fn(&mut Cursor<'a>) -> Result<(), Stop>,
    ) -> Result<Object<'a>, Option<ApiError>> {
        let mut c = Cursor::new(raw);
        if c.peek() != Some(b'{') {
            return match Cursor::whole(raw, Cursor::skip) {
                Ok(()) => Err(None),
                Err(Stop) => Err(Some(syntax(raw))),
            };
        }
        let mut members = Vec::new();
        let read = c
            .members(Keys::Read, |c, key| {
                let name = c.name(key);
                let start = c.at();
                skip(c)?;
                if let Some(bad) = c.take_bad_utf8() {
                    return Err(c.fail(crate::json::Code::InvalidUnicodeCodePoint, bad + 1));
                }
                members.push((name, &raw[start..c.at()]));
                Ok(())
            })
            .and_then(|()| c.end());
        if read.is_err() {
            // The cursor's own error (a bad byte in a string is one only
            // a read finds), else the grammar's.
            return Err(Some(match c.error() {
                Some(e) => ApiError::invalid_json(e),
                None => syntax(raw),
            }));
        }
        if let Some(hazard) = c.hazard() {
            return Err(Some(ApiError::invalid_json(hazard)));
        }
        Ok(Object(members))
    }

    /// The raw value of member `name`.
    pub(super) fn get(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.0.iter().find(|(n, _)| &**n == name).map(|(_, v)| *v)
    }

    /// The raw value of member `name`, or `missing` naming it where `at`
    /// says it is.
    pub(super) fn required(
        &self,
        name: &str,
        at: &dyn Fn(&str) -> String,
    ) -> Result<&'a [u8], ApiError> {
        self.get(name.as_bytes())
            .ok_or_else(|| ApiError::missing(at(name)))
    }

    /// [`Object::required`] for a member whose whole name is `param`.
    pub(super) fn required_at(&self, name: &str, param: &str) -> Result<&'a [u8], ApiError> {
        self.get(name.as_bytes())
            .ok_or_else(|| ApiError::missing(param))
    }
}

/// The syntax error in `raw`, as the chat validator words one.
pub(super) fn syntax(raw: &[u8]) -> ApiError {
    let mut c = Cursor::new(raw);
    let _ = c.skip().and_then(|()| c.end());
    match c.error() {
        Some(e) => ApiError::invalid_json(e),
        None => not_an_object(),
    }
}

/// Where a value is in the client's body, `{base}[{index}]{field}` (a
/// `field` with its `.`), written only when an error names it: a long
/// conversation has thousands of values, and none of them refused.
#[derive(Clone, Copy)]
pub(super) struct At<'p> {
    pub(super) base: &'p dyn Display,
    pub(super) index: usize,
    pub(super) field: &'p str,
}

impl Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]{}", self.base, self.index, self.field)
    }
}

/// `at(field)` (an item's closure that names its fields), written only
/// when an error names it.
pub(super) struct Field<'p>(pub(super) &'p dyn Fn(&str) -> String, pub(super) &'p str);

impl Display for Field<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&(self.0)(self.1))
    }
}

/// The object at `raw` (already checked), or `invalid_type` naming `param`
/// (written then: `format_args!` or an [`At`] costs nothing before).
pub(super) fn object<'a>(raw: &'a [u8], param: impl Display) -> Result<Object<'a>, ApiError> {
    Object::read(raw)
        .map_err(|e| e.unwrap_or_else(|| ApiError::invalid_type(param.to_string(), "an object")))
}

/// The elements of the array at `raw` (already checked), each as written,
/// or `invalid_type` naming `param`.
pub(super) fn array(raw: &[u8], param: impl Display) -> Result<Vec<&[u8]>, ApiError> {
    if !raw.starts_with(b"[") {
        return Err(ApiError::invalid_type(param.to_string(), "an array"));
    }
    super::tape::with(raw, |ends| match ends {
        Some(ends) => elements(raw, |c| ends.skip(c)),
        None => elements(raw, |c| c.skip()),
    })
}

/// The elements of the array `raw`, each value skipped by `skip`.
#[inline(always)]
fn elements<'a>(
    raw: &'a [u8],
    skip: impl Fn(&mut Cursor<'a>) -> Result<(), Stop>,
) -> Result<Vec<&'a [u8]>, ApiError> {
    let mut c = Cursor::new(raw);
    let mut out = Vec::new();
    c.elements(|c| {
        let start = c.at();
        skip(c)?;
        out.push(&raw[start..c.at()]);
        Ok(())
    })
    .map_err(|Stop| syntax(raw))?;
    Ok(out)
}

/// The text of the string at `raw`, or `invalid_type` naming `param`.
pub(super) fn text<'a>(
    raw: &'a [u8],
    param: &dyn Fn() -> String,
) -> Result<Cow<'a, str>, ApiError> {
    let not_a_string = || ApiError::invalid_type(param(), "a string");
    if !raw.starts_with(b"\"") {
        return Err(not_a_string());
    }
    let bytes = Cursor::whole(raw, Cursor::str).map_err(|Stop| not_a_string())?;
    match bytes {
        Cow::Borrowed(b) => std::str::from_utf8(b).map(Cow::Borrowed),
        Cow::Owned(b) => String::from_utf8(b)
            .map(Cow::Owned)
            .map_err(|e| e.utf8_error()),
    }
    .map_err(|_| not_a_string())
}

/// A string as written (quotes included), or `invalid_type` naming `param`.
pub(super) fn string<'a>(raw: &'a [u8], param: &dyn Fn() -> String) -> Result<&'a [u8], ApiError> {
    if raw.starts_with(b"\"") {
        Ok(raw)
    } else {
        Err(ApiError::invalid_type(param(), "a string"))
    }
}

pub(super) fn is_null(raw: &[u8]) -> bool {
    raw == b"null"
}

/// `,"name":raw`.
pub(super) fn member(out: &mut Vec<u8>, name: &str, raw: &[u8]) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
    out.extend_from_slice(raw);
}
