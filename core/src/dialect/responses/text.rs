//! A freeform call's input read from its chat arguments.

use crate::json::write::string as json_string;
use crate::json::{Cursor, Keys};

/// A freeform call's `input` (the inside of a JSON string) from its chat
/// arguments (the inside of the JSON string they came in): the `input`
/// member of the arguments' object, or, when they are no such object, the
/// arguments' text itself.
pub(super) fn custom_input(arguments: &[u8]) -> Vec<u8> {
    let quoted = [b"\"", arguments, b"\""].concat();
    let Ok(json) = Cursor::whole(&quoted, Cursor::str) else {
        return arguments.to_vec();
    };
    let mut c = Cursor::new(&json);
    let mut input = None;
    if c.peek() == Some(b'{') {
        let _ = c.members(Keys::Read, |c, key| {
            let start = c.at();
            c.skip()?;
            if &*c.name(key) == b"input" && json[start] == b'"' {
                input = Some(start + 1..c.at() - 1);
            }
            Ok(())
        });
    }
    match input {
        Some(r) => json[r].to_vec(),
        None => {
            let mut v = Vec::new();
            json_string(&mut v, &String::from_utf8_lossy(&json));
            v[1..v.len() - 1].to_vec()
        }
    }
}
