//! Reading values of a body that passed the pass ([`super::body`]): valid
//! JSON, valid UTF-8, no hazard. What the rules need of them — a value's
//! kind, a string's text, an object's members by name, an array's elements
//! — read again from their text with the cursor, and the errors a repeated
//! member name gets, worded as the reference words them.

use std::borrow::Cow;

use super::Param;
use crate::error::ApiError;
use crate::json::{Cursor, Key, Keys, Stop, position};

/// What a value is, by its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Object,
    Array,
    String,
    Number,
    Bool,
    Null,
}

pub(super) fn kind(raw: &[u8]) -> Kind {
    match raw.first() {
        Some(b'{') => Kind::Object,
        Some(b'[') => Kind::Array,
        Some(b'"') => Kind::String,
        Some(b't' | b'f') => Kind::Bool,
        Some(b'n') => Kind::Null,
        _ => Kind::Number,
    }
}

/// `invalid_json` with the error a read of `c` stopped at (text that
/// passed the pass cannot stop one; never a panic for all that).
#[cold]
pub(super) fn syntax(c: &Cursor<'_>) -> ApiError {
    match c.error() {
        Some(e) => ApiError::invalid_json(e),
        None => ApiError::invalid_json("not a JSON object"),
    }
}

/// A string value's text, unescaped; `invalid_type(param, "a string")` for
/// any other value.
pub(super) fn string<'t>(raw: &'t [u8], param: Param<'_>) -> Result<Cow<'t, str>, ApiError> {
    let not_a_string = || ApiError::invalid_type(param.to_string(), "a string");
    if kind(raw) != Kind::String {
        return Err(not_a_string());
    }
    match Cursor::new(raw).str().map_err(|Stop| not_a_string())? {
        Cow::Borrowed(text) => std::str::from_utf8(text)
            .map(Cow::Borrowed)
            .map_err(|_| not_a_string()),
        Cow::Owned(text) => String::from_utf8(text)
            .map(Cow::Owned)
            .map_err(|_| not_a_string()),
    }
}

/// The values of the members named `names` of an object (the reference's
/// `object()`, then its `get`s): `invalid_type(param, "an object")` for
/// another value, [`duplicate_in`] when a name repeats.
pub(super) fn object_slots<'t, const N: usize>(
    raw: &'t [u8],
    param: Param<'_>,
    names: [&str; N],
) -> Result<[Option<&'t [u8]>; N], ApiError> {
    if kind(raw) != Kind::Object {
        return Err(ApiError::invalid_type(param.to_string(), "an object"));
    }
    let mut c = Cursor::new(raw);
    let mut keys = KeySet::new();
    let mut slots = [None; N];
    c.members(Keys::Skipped, |c, key| {
        keys.push(key);
        let v = c.at();
        c.skip()?;
        let name = c.name(key);
        if let Some(k) = names.iter().position(|n| n.as_bytes() == &*name) {
            slots[k] = Some(&raw[v..c.at()]);
        }
        Ok(())
    })
    .map_err(|Stop| syntax(&c))?;
    if keys.repeats(&c, 0) {
        return Err(duplicate_in(raw, param));
    }
    Ok(slots)
}

/// Calls `f(index, element)` for each element of an array (the reference's
/// `array()`); `invalid_type(param, "an array")` for another value. Returns
/// how many there are.
pub(super) fn elements<'t>(
    raw: &'t [u8],
    param: Param<'_>,
    mut f: impl FnMut(usize, &'t [u8]) -> Result<(), ApiError>,
) -> Result<usize, ApiError> {
    if kind(raw) != Kind::Array {
        return Err(ApiError::invalid_type(param.to_string(), "an array"));
    }
    let mut c = Cursor::new(raw);
    let mut n = 0;
    let mut failed = None;
    let read = c.elements(|c| {
        let v = c.at();
        c.skip()?;
        n += 1;
        f(n - 1, &raw[v..c.at()]).map_err(|e| {
            failed = Some(e);
            Stop
        })
    });
    match (read, failed) {
        (Ok(()), _) => Ok(n),
        (Err(Stop), Some(e)) => Err(e),
        (Err(Stop), None) => Err(syntax(&c)),
    }
}

/// Calls `f(key, value)` for each member of the object at `open` of
/// `text` (checked), `value` its range.
pub(super) fn each_member<'t>(
    text: &'t [u8],
    open: usize,
    mut f: impl FnMut(&Cursor<'t>, Key, (usize, usize)),
) {
    let mut c = Cursor::new(text);
    c.seek(open);
    // Checked text: the read cannot stop.
    let _ = c.members(Keys::Skipped, |c, key| {
        let v = c.at();
        c.skip()?;
        f(c, key, (v, c.at()));
        Ok(())
    });
}

/// The reference's error for an object in a parameter with a repeated
/// member name (`raw` is the object's text).
#[cold]
pub(super) fn duplicate_in(raw: &[u8], param: Param<'_>) -> ApiError {
    ApiError::invalid_value(
        param.to_string(),
        format!(
            "Invalid object for '{param}': {}.",
            duplicate(raw, 0, raw.len())
        ),
    )
}

/// serde_json's error for the object from `open` to `end` of `text`
/// (checked) when a name repeats: the first repeated name (the one whose
/// second occurrence comes first; among more than 16 members, the least),
/// placed after the object.
#[cold]
pub(super) fn duplicate(text: &[u8], open: usize, end: usize) -> String {
    let mut names = Vec::new();
    each_member(text, open, |c, key, _| {
        names.push(String::from_utf8_lossy(&c.name(key)).into_owned());
    });
    let first = if names.len() <= 16 {
        names
            .iter()
            .enumerate()
            .find(|(i, k)| names[..*i].contains(k))
            .map(|(_, k)| k.clone())
    } else {
        names.sort_unstable();
        names
            .windows(2)
            .find(|w| w[0] == w[1])
            .map(|w| w[0].clone())
    };
    let (line, column) = position(text, end);
    format!(
        "duplicate key '{}' at line {line} column {column}",
        first.unwrap_or_default()
    )
}

/// Names held inline; more spill to the heap.
const FEW: usize = 8;

/// A name's place: its quotes, and (in the top bit of the closing one,
/// which no slice index uses) whether it has escapes.
#[derive(Clone, Copy)]
struct Place(usize, usize);

const ESCAPES: usize = 1 << (usize::BITS - 1);

impl Place {
    fn of(key: Key) -> Place {
        Place(key.open, key.close | if key.escaped { ESCAPES } else { 0 })
    }

    fn key(self) -> Key {
        Key {
            open: self.0,
            close: self.1 & !ESCAPES,
            escaped: self.1 & ESCAPES != 0,
        }
    }
}

/// The names of the members of the objects being read, innermost last
/// (each object notes where its own start and drops them when done), for
/// finding one that repeats. Names read by slot are not kept here: a bit
/// per slot tells.
pub(super) struct KeySet {
    few: [Place; FEW],
    len: usize,
    more: Vec<Place>,
}

impl KeySet {
    pub(super) fn new() -> Self {
        KeySet {
            few: [Place(0, 0); FEW],
            len: 0,
            more: Vec::new(),
        }
    }

    /// How many names it holds (where an object's own start).
    #[inline(always)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub(super) fn push(&mut self, key: Key) {
        match self.few.get_mut(self.len) {
            Some(slot) => *slot = Place::of(key),
            None => self.more.push(Place::of(key)),
        }
        self.len += 1;
    }

    /// Drops the names from `base` on.
    #[inline(always)]
    pub(super) fn truncate(&mut self, base: usize) {
        self.len = base;
        if base < self.more.len() + FEW {
            self.more.truncate(base.saturating_sub(FEW));
        }
    }

    fn get(&self, i: usize) -> Key {
        match self.few.get(i) {
            Some(place) => place.key(),
            None => self.more[i - FEW].key(),
        }
    }

    /// Whether two of the names from `base` on are the same name (compared
    /// unescaped).
    #[inline(always)]
    pub(super) fn repeats(&self, c: &Cursor<'_>, base: usize) -> bool {
        self.len - base > 1 && self.some_repeat(c, base)
    }

    #[inline(never)]
    fn some_repeat(&self, c: &Cursor<'_>, base: usize) -> bool {
        if self.len > FEW {
            return self.many_repeat(c, base);
        }
        let s = c.text();
        let names = &self.few[base..self.len];
        for (n, a) in names.iter().enumerate() {
            for b in &names[..n] {
                let same = if (a.1 | b.1) & ESCAPES != 0 {
                    c.name(a.key()) == c.name(b.key())
                } else {
                    a.1 - a.0 == b.1 - b.0 && s[a.0 + 1..a.1] == s[b.0 + 1..b.1]
                };
                if same {
                    return true;
                }
            }
        }
        false
    }

    /// [`KeySet::repeats`] for names beyond the inline ones (compared
    /// sorted, O(n log n), when there are many).
    #[cold]
    fn many_repeat(&self, c: &Cursor<'_>, base: usize) -> bool {
        let mut names: Vec<Cow<'_, [u8]>> = (base..self.len).map(|i| c.name(self.get(i))).collect();
        if names.len() <= 16 {
            return names
                .iter()
                .enumerate()
                .any(|(n, name)| names[..n].contains(name));
        }
        names.sort_unstable();
        names.windows(2).any(|w| w[0] == w[1])
    }
}
