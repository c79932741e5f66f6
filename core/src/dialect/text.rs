//! What a translated answer copies from the provider, made text every
//! JSON reader takes: a chunk with invalid UTF-8 or unpaired surrogate
//! escapes mended, and the test that lets a delta's string be copied as it
//! is.

use std::borrow::Cow;

/// Whether `s` is the inside of a JSON string every reader takes as it is:
/// no quote that an escape does not cover, no control character, every
/// escape complete and none of a surrogate (a pair is left to the long
/// way, which checks it is one), valid UTF-8.
pub(crate) fn string_inside(s: &[u8]) -> bool {
    let mut i = 0;
    let mut ascii = true;
    while i < s.len() {
        match s[i] {
            b'"' | 0..=0x1f => return false,
            b'\\' => match s.get(i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                Some(b'u')
                    if s.get(i + 2..i + 6).is_some_and(|h| {
                        h.iter().all(u8::is_ascii_hexdigit) && !matches!(h[0], b'd' | b'D')
                            || h.iter().all(u8::is_ascii_hexdigit) && matches!(h[1], b'0'..=b'7')
                    }) =>
                {
                    i += 6
                }
                _ => return false,
            },
            b => {
                ascii &= b < 0x80;
                i += 1;
            }
        }
    }
    ascii || std::str::from_utf8(s).is_ok()
}

/// `data` as text every JSON reader takes: invalid UTF-8 replaced by U+FFFD
/// (as `from_utf8_lossy` does), and a `\u` escape of a surrogate that is
/// not half of a pair by `\ufffd`. Borrowed, unchanged, in the usual case.
pub(crate) fn valid_text(data: &[u8]) -> Cow<'_, [u8]> {
    let data: Cow<'_, [u8]> = match std::str::from_utf8(data) {
        Ok(_) => Cow::Borrowed(data),
        Err(_) => Cow::Owned(String::from_utf8_lossy(data).into_owned().into_bytes()),
    };
    let surrogate = |at: usize| -> Option<u16> {
        let hex = data.get(at + 2..at + 6)?;
        let v = u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
        (data[at + 1] == b'u' && (0xD800..=0xDFFF).contains(&v)).then_some(v)
    };
    let mut lone = Vec::new();
    let mut i = 0;
    while let Some(j) = memchr::memchr(b'\\', &data[i..]) {
        let at = i + j;
        match surrogate(at) {
            Some(0xD800..=0xDBFF) if data.get(at + 6) == Some(&b'\\') => match surrogate(at + 6) {
                Some(0xDC00..=0xDFFF) => i = at + 12,
                _ => {
                    lone.push(at);
                    i = at + 6;
                }
            },
            Some(_) => {
                lone.push(at);
                i = at + 6;
            }
            // Any other escape: two bytes (`\\` included).
            None => i = at + 2,
        }
        if i >= data.len() {
            break;
        }
    }
    if lone.is_empty() {
        return data;
    }
    let mut out = data.to_vec();
    for at in lone {
        out[at..at + 6].copy_from_slice(b"\\ufffd");
    }
    Cow::Owned(out)
}
