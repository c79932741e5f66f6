//! JSON written by hand: the one string writer every JSON the crate writes
//! goes through (ledger lines, translated answers).

/// `s` as a JSON string: copied as it is when nothing needs escaping (the
/// usual case), else escaped by serde_json.
pub(crate) fn string(out: &mut Vec<u8>, s: &str) {
    // Without short-circuiting, so the check runs on whole vectors.
    let plain = s.bytes().fold(true, |ok, b| {
        ok & (b >= 0x20) & (b != b'"') & (b != b'\\') & (b != 0x7f)
    });
    if plain {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a str into a Vec cannot fail.
        serde_json::to_writer(&mut *out, s).expect("string serializes");
    }
}
