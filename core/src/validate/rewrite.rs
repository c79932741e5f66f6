//! The provider's body, when it must differ from the client's: written as
//! the reference writes it — the top level's members joined without the
//! whitespace between them, each key as serde_json writes the name it
//! stands for, each value as the client wrote it unless it changes.

use super::Param;
use super::body::Top;
use super::checked::{Kind, each_member, elements, kind};
use crate::json::{Cursor, Key};

/// What a rewrite changes (values by range): the model id (to the
/// provider's), the `messages` whose assistant turns at `strip` lose
/// `reasoning_content`, and with `force_usage`, `stream_options` (appended
/// when absent) made to include usage.
pub(super) struct Edits<'a> {
    pub(super) model: Option<(&'a str, (usize, usize))>,
    pub(super) messages: Option<(usize, usize)>,
    pub(super) strip: &'a [usize],
    pub(super) force_usage: bool,
    pub(super) options: Option<(usize, usize)>,
}

const INCLUDE_USAGE: &[u8] = b"{\"include_usage\":true}";

/// The provider's body for `s`, whose top level the pass read as `top`.
pub(super) fn rewrite(s: &[u8], top: &Top, edits: &Edits<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 40);
    if top.compact {
        // The body's own bytes, the changed values replaced.
        let mut changed = [
            edits.model.map(|m| m.1),
            edits.messages,
            edits.options.filter(|_| edits.force_usage),
        ];
        changed.sort_unstable_by_key(|r| r.map_or(usize::MAX, |r| r.0));
        let mut at = top.open;
        for r in changed.into_iter().flatten() {
            out.extend_from_slice(&s[at..r.0]);
            edits.value(&mut out, s, r);
            at = r.1;
        }
        out.extend_from_slice(&s[at..top.close]);
    } else {
        out.push(b'{');
        each_member(s, top.open, |c, key, v| {
            if out.len() > 1 {
                out.push(b',');
            }
            write_key(&mut out, c, key);
            out.push(b':');
            edits.value(&mut out, s, v);
        });
    }
    if edits.force_usage && edits.options.is_none() {
        out.extend_from_slice(b",\"stream_options\":");
        out.extend_from_slice(INCLUDE_USAGE);
    }
    out.push(b'}');
    out
}

impl Edits<'_> {
    /// Writes the value at `a..b`, changed if it is to be.
    fn value(&self, out: &mut Vec<u8>, s: &[u8], (a, b): (usize, usize)) {
        if let Some((id, _)) = self.model.filter(|m| m.1.0 == a) {
            // Writing a string into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, id);
        } else if self.messages.is_some_and(|m| m.0 == a) {
            strip_reasoning(out, &s[a..b], self.strip);
        } else if self.force_usage && self.options.is_some_and(|o| o.0 == a) {
            forced_options(out, &s[a..b]);
        } else {
            out.extend_from_slice(&s[a..b]);
        }
    }
}

/// A key as serde_json writes the name it stands for: its text when it has
/// no escape (nothing in it needs one), else the name written anew.
fn write_key(out: &mut Vec<u8>, c: &Cursor<'_>, key: Key) {
    if key.escaped {
        let name = c.name(key);
        let _ = serde_json::to_writer(&mut *out, &*String::from_utf8_lossy(&name));
    } else {
        out.extend_from_slice(&c.text()[key.open..=key.close]);
    }
}

/// `messages` (checked) with the messages at `strip` (indices, ascending)
/// written again without `reasoning_content`, the elements joined by
/// commas.
fn strip_reasoning(out: &mut Vec<u8>, raw: &[u8], strip: &[usize]) {
    out.push(b'[');
    let mut strip = strip.iter().peekable();
    // Checked text: the elements are there.
    let _ = elements(raw, Param::root("messages"), |i, msg| {
        if i > 0 {
            out.push(b',');
        }
        if strip.next_if_eq(&&i).is_none() {
            out.extend_from_slice(msg);
            return Ok(());
        }
        out.push(b'{');
        let mut first = true;
        each_member(msg, 0, |c, key, (a, b)| {
            if &*c.name(key) != b"reasoning_content" {
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                write_key(out, c, key);
                out.push(b':');
                out.extend_from_slice(&msg[a..b]);
            }
        });
        out.push(b'}');
        Ok(())
    });
    out.push(b']');
}

/// `stream_options` (an object or null) with `include_usage: true`, other
/// members kept in place.
fn forced_options(out: &mut Vec<u8>, raw: &[u8]) {
    if kind(raw) != Kind::Object {
        out.extend_from_slice(INCLUDE_USAGE);
        return;
    }
    out.push(b'{');
    let (mut first, mut set) = (true, false);
    each_member(raw, 0, |c, key, (a, b)| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        write_key(out, c, key);
        out.push(b':');
        if &*c.name(key) == b"include_usage" {
            set = true;
            out.extend_from_slice(b"true");
        } else {
            out.extend_from_slice(&raw[a..b]);
        }
    });
    if !set {
        if !first {
            out.push(b',');
        }
        out.extend_from_slice(b"\"include_usage\":true");
    }
    out.push(b'}');
}

/// `body` (one the validator accepted, or its rewrite) with the value of its
/// top-level `model` member replaced by `model`: what an endpoint that
/// names the model differently is sent. Everything else keeps its bytes.
pub(crate) fn with_model(body: &[u8], model: &str) -> Vec<u8> {
    let open = body.iter().position(|&b| b == b'{').unwrap_or(0);
    let mut range = None;
    each_member(body, open, |c, key, v| {
        if range.is_none() && c.name(key).as_ref() == b"model" {
            range = Some(v);
        }
    });
    let Some((a, b)) = range else {
        return body.to_vec();
    };
    let mut out = Vec::with_capacity(body.len() + model.len());
    out.extend_from_slice(&body[..a]);
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, model);
    out.extend_from_slice(&body[b..]);
    out
}
