//! What a translated answer copies from the provider, made text every
//! JSON reader takes: a chunk with invalid UTF-8 or unpaired surrogate
//! escapes mended, and the test that lets a delta's string be copied as it
//! is.

use std::borrow::Cow;

use crate::json::strings::{ascii_stops, word};

/// Whether `s` is the inside of a JSON string every reader takes as it is:
/// no quote that an escape does not cover, no control character, every
/// escape complete and none of a surrogate (a pair is left to the long
/// way, which checks it is one), valid UTF-8.
pub(crate) fn string_inside(s: &[u8]) -> bool {
    let mut i = 0;
    let mut ascii = true;
    // Eight plain ASCII bytes at a time, to the first that is not (most
    // deltas are plain: they end here).
    while let Some(w) = word(s, i) {
        let stops = ascii_stops(w);
        if stops != 0 {
            i += (stops.trailing_zeros() / 8) as usize;
            break;
        }
        i += 8;
    }
    // Fewer than eight bytes left: the string's last eight (the bytes
    // before `i` are plain), or, shorter than a word, the string padded
    // with spaces.
    let rest = &s[i..];
    if rest.len() < 8 {
        let last = match s.len().checked_sub(8) {
            Some(at) => word(s, at),
            None => {
                let mut padded = [b' '; 8];
                padded[..rest.len()].copy_from_slice(rest);
                Some(u64::from_le_bytes(padded))
            }
        };
        if last.is_some_and(|w| ascii_stops(w) == 0) {
            return true;
        }
    }
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

/// [`string_inside`] of `data[start..end]`. Most deltas are a few plain
/// ASCII bytes: where `data` has eight bytes from `start`, such a string
/// is read as one word of `data` itself, the bytes past its end taken as
/// spaces (no copy).
#[inline(always)]
pub(crate) fn string_inside_at(data: &[u8], start: usize, end: usize) -> bool {
    let len = end - start;
    if len < 8
        && let Some(w) = word(data, start)
    {
        const SPACES: u64 = u64::from_le_bytes([b' '; 8]);
        let kept = (1u64 << (8 * len)) - 1;
        if ascii_stops((w & kept) | (SPACES & !kept)) == 0 {
            return true;
        }
    }
    string_inside(&data[start..end])
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

#[cfg(test)]
mod tests {
    use super::{string_inside, string_inside_at};
    use proptest::prelude::*;

    /// What [`string_inside`] promises, asked of serde_json: the text
    /// between quotes is a JSON string, and no character of it came from
    /// an escaped surrogate pair (as many characters beyond U+FFFF as the
    /// raw text has four-byte sequences).
    fn by_serde(s: &[u8]) -> bool {
        let quoted = [&b"\""[..], s, b"\""].concat();
        let Ok(text) = serde_json::from_slice::<String>(&quoted) else {
            return false;
        };
        let astral = text.chars().filter(|&c| u32::from(c) > 0xFFFF).count();
        astral == s.iter().filter(|&&b| b >= 0xF0).count()
    }

    #[test]
    fn one_odd_byte_anywhere_in_a_plain_string() {
        for len in 0..40 {
            for at in 0..len {
                for odd in [
                    &b"\""[..],
                    b"\\",
                    b"\n",
                    b"\x7f",
                    "é".as_bytes(),
                    b"\\n",
                    b"\\u00e9",
                    b"\\ud800",
                    b"\\ud83d\\ude00",
                    "\u{1F600}".as_bytes(),
                    b"\\u12",
                ] {
                    let mut s = vec![b'a'; len];
                    s.splice(at..at + 1, odd.iter().copied());
                    assert_eq!(
                        string_inside(&s),
                        by_serde(&s),
                        "{:?}",
                        String::from_utf8_lossy(&s)
                    );
                }
            }
        }
    }

    proptest! {
        /// Read inside a longer text, as a delta is read in its chunk.
        #[test]
        fn at_agrees_with_the_slice(
            s in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'"'), Just(b'\\'), Just(b'u'), Just(0x1fu8), Just(0xc3u8), Just(0xa9u8)], 0..20),
            before in 0usize..4,
            after in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'"'), Just(0u8)], 0..12),
        ) {
            let data = [&vec![b'x'; before][..], &s, &after].concat();
            prop_assert_eq!(string_inside_at(&data, before, before + s.len()), string_inside(&s));
        }

        #[test]
        fn agrees_with_serde_json(s in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'"'), Just(b'\\'), Just(b'u'), Just(b'0'), Just(b'd'), Just(b'8'), Just(b'c'), Just(0x1fu8), Just(0xc3u8), Just(0xa9u8), Just(0xf0u8), Just(0x9fu8)], 0..48)) {
            prop_assert_eq!(string_inside(&s), by_serde(&s));
        }
    }
}
