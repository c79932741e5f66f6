//! Google's `Schema` (an OpenAPI 3.0 subset, its types upper-case:
//! `"OBJECT"`, `"STRING"`) as the JSON Schema chat providers take: the
//! same text, every `type` in lower case. Nothing else is changed:
//! `nullable`, `format`, `propertyOrdering` and the rest are copied (a
//! provider ignores a keyword it does not know, as JSON Schema says).

use crate::json::{Cursor, Keys, Stop};

/// The schema at `raw` (valid JSON, already read) with its types in lower
/// case.
pub(super) fn lower_types(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut c = Cursor::new(raw);
    match value(&mut c, raw, &mut out, false) {
        Ok(()) => out,
        // The body was read whole before: this does not happen, and the
        // schema is then sent as it is.
        Err(Stop) => raw.to_vec(),
    }
}

/// The value at the cursor, copied, each `type` member's string (or
/// array of strings) lower-cased; values that are data (`enum`, `default`,
/// `example`, `const`) copied as they are. With `named`, the value is an
/// object of schemas by name (`properties`, `$defs`): every member is a
/// schema, whatever its name (a property may be called `default`).
fn value(c: &mut Cursor<'_>, raw: &[u8], out: &mut Vec<u8>, named: bool) -> Result<(), Stop> {
    match c.peek() {
        Some(b'{') => {
            out.push(b'{');
            let mut first = true;
            c.members(Keys::Read, |c, key| {
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                out.push(b'"');
                out.extend_from_slice(c.raw_name(key));
                out.extend_from_slice(b"\":");
                let name = c.name(key);
                c.peek();
                let start = c.at();
                if named {
                    return value(c, raw, out, false);
                }
                match &*name {
                    // A type, not a property named `type` (a schema).
                    b"type" if matches!(c.peek(), Some(b'"' | b'[')) => {
                        c.skip()?;
                        out.extend_from_slice(&raw[start..c.at()].to_ascii_lowercase());
                    }
                    b"enum" | b"default" | b"example" | b"const" => {
                        c.skip()?;
                        out.extend_from_slice(&raw[start..c.at()]);
                    }
                    b"properties" | b"$defs" | b"definitions" | b"patternProperties" => {
                        value(c, raw, out, true)?
                    }
                    _ => value(c, raw, out, false)?,
                }
                Ok(())
            })?;
            out.push(b'}');
        }
        Some(b'[') => {
            out.push(b'[');
            let mut first = true;
            c.elements(|c| {
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                value(c, raw, out, false)
            })?;
            out.push(b']');
        }
        _ => {
            let start = c.at();
            c.skip()?;
            out.extend_from_slice(&raw[start..c.at()]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::lower_types;
    use serde_json::{Value, json};

    #[test]
    fn types_are_lower_cased_and_data_kept() {
        let schema = json!({"type": "OBJECT", "properties": {
            "type": {"type": "STRING", "enum": ["A", "B"], "default": "X"},
            "items": {"type": "ARRAY", "items": {"type": "INTEGER", "nullable": true}},
            "u": {"anyOf": [{"type": "NUMBER"}, {"type": ["STRING", "NULL"]}]}
        }, "required": ["type"], "propertyOrdering": ["type", "items"]});
        let out: Value =
            serde_json::from_slice(&lower_types(schema.to_string().as_bytes())).unwrap();
        assert_eq!(
            out,
            json!({"type": "object", "properties": {
                "type": {"type": "string", "enum": ["A", "B"], "default": "X"},
                "items": {"type": "array", "items": {"type": "integer", "nullable": true}},
                "u": {"anyOf": [{"type": "number"}, {"type": ["string", "null"]}]}
            }, "required": ["type"], "propertyOrdering": ["type", "items"]})
        );
        assert_eq!(lower_types(b" { } "), b"{}");
        // Properties named like data keywords are schemas all the same.
        let named = json!({"type": "OBJECT", "properties": {
            "default": {"type": "STRING"}, "enum": {"type": "ARRAY", "items": {"type": "STRING"}}
        }});
        let out: Value =
            serde_json::from_slice(&lower_types(named.to_string().as_bytes())).unwrap();
        assert_eq!(
            out,
            json!({"type": "object", "properties": {
                "default": {"type": "string"}, "enum": {"type": "array", "items": {"type": "string"}}
            }})
        );
    }
}
