//! An index of a long request body: where each of its arrays, objects and
//! long strings ends. The request translators read a body a level at a
//! time (an object's members are found by skipping their values, then a
//! member's value is read as an object or array of its own), so without
//! it every byte of a value nested `d` deep is walked `d` times: a coding
//! agent's conversation (tool results inside content blocks inside
//! messages) was walked six or seven times. With it, each level jumps
//! over the values below it, and the body is walked about twice.
//!
//! The index is built once a translation starts ([`indexed`]), for bodies
//! of [`INDEXED`] bytes or more, only when the whole body is valid (its
//! syntax, its UTF-8, no hazard): a read that jumps over a value has then
//! missed nothing it would have refused. It lives while the translation
//! runs, on its thread, and is dropped when it ends, however it ends;
//! reads of any other text (a stored response, a decoded string) are
//! outside its range and walk as before.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::json::{Cursor, Keys, MAX_DEPTH, Stop};

/// Bodies shorter than this are read without an index: building it costs
/// more than it saves.
const INDEXED: usize = 4096;

/// Strings shorter than this are walked again (the walk is cheaper than
/// the index's room).
const LONG_STRING: usize = 64;

/// Value start to value end, both offsets into the body.
type Map = HashMap<u32, u32, BuildHasherDefault<Mix>>;

thread_local! {
    /// The indexed body's address and length (a length of 0: none; a text
    /// inside it is a part of it), read first: a plain load, where the
    /// index itself is behind a borrow.
    static RANGE: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// The index of that body.
    static TAPE: RefCell<Option<Map>> = const { RefCell::new(None) };
}

/// Runs `f` (a translation of `body`) with `body` indexed, when it is long
/// and valid.
pub(super) fn indexed<T>(body: &[u8], f: impl FnOnce() -> T) -> T {
    let Some(ends) = index(body) else {
        return f();
    };
    /// Drops the index when the translation ends (or unwinds).
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            RANGE.set((0, 0));
            TAPE.with(|t| t.borrow_mut().take());
        }
    }
    RANGE.set((body.as_ptr() as usize, body.len()));
    TAPE.with(|t| *t.borrow_mut() = Some(ends));
    let _clear = Clear;
    f()
}

/// Where the values of one text end, as far as the index knows.
pub(super) struct Ends<'t> {
    ends: &'t Map,
    /// The text's offset in the body.
    offset: usize,
}

impl Ends<'_> {
    /// Skips the value at the cursor: to its end where the index knows
    /// it, else walking it.
    pub(super) fn skip(&self, c: &mut Cursor<'_>) -> Result<(), Stop> {
        let known = u32::try_from(self.offset + c.at())
            .ok()
            .and_then(|start| self.ends.get(&start));
        match known {
            Some(&end) => {
                c.seek(end as usize - self.offset);
                Ok(())
            }
            None => c.skip(),
        }
    }
}

/// Runs `f` with what the index knows of `raw` (nothing when it is not a
/// part of the indexed body).
pub(super) fn with<T>(raw: &[u8], f: impl FnOnce(Option<&Ends<'_>>) -> T) -> T {
    let (base, len) = RANGE.get();
    let at = raw.as_ptr() as usize;
    if at < base || at + raw.len() > base + len {
        return f(None);
    }
    TAPE.with(|t| {
        let t = t.borrow();
        let ends = t.as_ref().map(|ends| Ends {
            ends,
            offset: at - base,
        });
        f(ends.as_ref())
    })
}

/// The index of `body`, if it is long and valid.
fn index(body: &[u8]) -> Option<Map> {
    if body.len() < INDEXED || u32::try_from(body.len()).is_err() {
        return None;
    }
    // About one entry for every 48 bytes of a conversation's body.
    let mut ends = Map::with_capacity_and_hasher(body.len() / 48, Default::default());
    let mut c = Cursor::new(body);
    value(&mut c, &mut ends, 0).and_then(|()| c.end()).ok()?;
    if c.hazard().is_some() || c.take_bad_utf8().is_some() {
        return None;
    }
    Some(ends)
}

/// Walks the value at the cursor, noting where each array, object and
/// long string in it ends (deeper than [`MAX_DEPTH`], skipped whole).
fn value(c: &mut Cursor<'_>, ends: &mut Map, depth: usize) -> Result<(), Stop> {
    let kind = c.peek();
    let start = c.at();
    match kind {
        Some(b'{') if depth < MAX_DEPTH => {
            c.members(Keys::Skipped, |c, _| value(c, ends, depth + 1))?;
        }
        Some(b'[') if depth < MAX_DEPTH => c.elements(|c| value(c, ends, depth + 1))?,
        Some(b'"') => {
            c.skip()?;
            if c.at() - start < LONG_STRING {
                return Ok(());
            }
        }
        _ => return c.skip(),
    }
    // Offsets fit: the body's length does.
    ends.insert(start as u32, c.at() as u32);
    Ok(())
}

/// A hasher for offsets: one multiplication.
#[derive(Default)]
struct Mix(u64);

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (u64::from(n) ^ self.0)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::{index, indexed};
    use crate::dialect::raw::{Object, array};

    /// Every member and element of `raw`, read level by level as the
    /// translators read (names, values as written), and what each refused.
    fn walk(raw: &[u8], out: &mut Vec<String>) {
        if raw.starts_with(b"{") {
            match Object::read(raw) {
                Ok(o) => {
                    for (name, value) in o.0 {
                        out.push(String::from_utf8_lossy(&name).into_owned());
                        out.push(String::from_utf8_lossy(value).into_owned());
                        walk(value, out);
                    }
                }
                Err(e) => out.push(match e {
                    Some(e) => String::from_utf8_lossy(&e.body()).into_owned(),
                    None => "not an object".into(),
                }),
            }
        } else if raw.starts_with(b"[") {
            match array(raw, "x") {
                Ok(items) => {
                    for value in items {
                        out.push(String::from_utf8_lossy(value).into_owned());
                        walk(value, out);
                    }
                }
                Err(e) => out.push(String::from_utf8_lossy(&e.body()).into_owned()),
            }
        }
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z\"\\\\\n é]{0,90}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z]{1,4}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Read with the index or without, a long body reads the same.
        #[test]
        fn reads_the_same_indexed(v in value(), pad in 4096usize..4200, spaced in any::<bool>()) {
            let body = json!({"pad": "p".repeat(pad), "v": v, "w": [v.clone(), {"x": v}]});
            let body = if spaced {
                serde_json::to_vec_pretty(&body).unwrap()
            } else {
                serde_json::to_vec(&body).unwrap()
            };
            prop_assert!(index(&body).is_some());
            let mut plain = Vec::new();
            walk(&body, &mut plain);
            let mut with_index = Vec::new();
            indexed(&body, || walk(&body, &mut with_index));
            prop_assert_eq!(plain, with_index);
        }
    }

    #[test]
    fn a_body_that_is_not_all_valid_is_not_indexed() {
        let long = "p".repeat(5000);
        let valid = format!(r#"{{"a":"{long}","b":[{{"c":1}}]}}"#).into_bytes();
        assert!(index(&valid).is_some());
        assert!(index(&valid[..4000]).is_none(), "too short");
        let mut bad_utf8 = valid.clone();
        bad_utf8[10] = 0xFF;
        assert!(index(&bad_utf8).is_none());
        let cut = &valid[..valid.len() - 1];
        assert!(index(cut).is_none());
        let deep = format!(
            r#"{{"a":"{long}","b":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(index(deep.as_bytes()).is_none(), "a hazard");
        let surrogate = format!(r#"{{"a":"{long}","b":"\ud800"}}"#);
        assert!(index(surrogate.as_bytes()).is_none(), "a hazard");
        // None of them indexed: read as before, the index of another body
        // unused.
        indexed(&valid, || {
            let mut out = Vec::new();
            walk(&bad_utf8, &mut out);
            assert!(out.iter().any(|s| s.contains("invalid")), "{out:?}");
        });
    }
}
