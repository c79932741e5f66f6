//! JSON text read in place: one cursor for every reader in the crate.
//!
//! [`Cursor`] walks a byte slice and reads the few values its callers care
//! about where they are, skipping the rest. It never builds a tree, copies
//! a string only to unescape it, and computes a line and column only when
//! it reports an error. Skipping is iterative (an explicit stack), so no
//! input, however deep, recurses.
//!
//! Its callers need three strictnesses, each a method (or a [`Keys`]
//! mode) with its contract written on it:
//!
//! - **Read**: what serde_json accepts when it reads a value into a typed
//!   target: a string read as a `&str` must be valid UTF-8 with its `\u`
//!   surrogates paired ([`Cursor::str`]); a member name likewise
//!   ([`Keys::Read`]).
//! - **Skipped**: what serde_json accepts for a value it skips
//!   (`IgnoredAny`, or the text of a `RawValue`): the full grammar, but
//!   strings are not checked as UTF-8 and `\u` escapes not for pairing
//!   ([`Cursor::skip`], [`Cursor::string`], [`Keys::Skipped`]). What a
//!   provider's parser would still refuse there — nesting deeper than
//!   [`MAX_DEPTH`], a `\u` escape of a lone surrogate — is noted as a
//!   [`Hazard`], and invalid UTF-8 by where it starts, without stopping.
//! - **Shape**: strings and brackets only, for an answer whose other
//!   values are forwarded unread ([`Cursor::skip_shape`],
//!   [`Cursor::members_shape`], [`Cursor::elements_shape`]).
//!
//! A read that fails returns [`Stop`]; for the first two, the cursor then
//! holds the error as serde_json words it, at the line and column
//! serde_json reports ([`Cursor::error`]): the request validator answers
//! with that text.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | [`Cursor`]: positions, errors, skipping |
//! | `strings.rs` | strings: escapes, UTF-8, surrogates |
//! | `values.rs` | numbers, literals, objects' members and arrays' elements |
//! | `shape.rs` | the shape-only walk of an answer forwarded unread |
//! | `write.rs` | the one JSON string writer |

use std::fmt;

/// Deepest nesting of arrays and objects a provider's parser takes
/// (serde_json's own recursion limit).
pub(crate) const MAX_DEPTH: usize = 128;

/// A read stopped: the text is not what was asked for there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stop;

/// What serde_json calls a syntax error, with its wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    EofWhileParsingList,
    EofWhileParsingObject,
    EofWhileParsingString,
    EofWhileParsingValue,
    ExpectedColon,
    ExpectedListCommaOrEnd,
    ExpectedObjectCommaOrEnd,
    ExpectedSomeIdent,
    ExpectedSomeValue,
    InvalidEscape,
    InvalidNumber,
    InvalidUnicodeCodePoint,
    ControlCharacterWhileParsingString,
    KeyMustBeAString,
    LoneLeadingSurrogateInHexEscape,
    TrailingComma,
    TrailingCharacters,
    UnexpectedEndOfHexEscape,
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Code::EofWhileParsingList => "EOF while parsing a list",
            Code::EofWhileParsingObject => "EOF while parsing an object",
            Code::EofWhileParsingString => "EOF while parsing a string",
            Code::EofWhileParsingValue => "EOF while parsing a value",
            Code::ExpectedColon => "expected `:`",
            Code::ExpectedListCommaOrEnd => "expected `,` or `]`",
            Code::ExpectedObjectCommaOrEnd => "expected `,` or `}`",
            Code::ExpectedSomeIdent => "expected ident",
            Code::ExpectedSomeValue => "expected value",
            Code::InvalidEscape => "invalid escape",
            Code::InvalidNumber => "invalid number",
            Code::InvalidUnicodeCodePoint => "invalid unicode code point",
            Code::ControlCharacterWhileParsingString => {
                "control character (\\u0000-\\u001F) found while parsing a string"
            }
            Code::KeyMustBeAString => "key must be a string",
            Code::LoneLeadingSurrogateInHexEscape => "lone leading surrogate in hex escape",
            Code::TrailingComma => "trailing comma",
            Code::TrailingCharacters => "trailing characters",
            Code::UnexpectedEndOfHexEscape => "unexpected end of hex escape",
        })
    }
}

/// A syntax error where serde_json reports it: `{code} at line {line}
/// column {column}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub(crate) code: Code,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {} column {}",
            self.code, self.line, self.column
        )
    }
}

/// The line and column serde_json reports for byte offset `i` of `s`
/// (lines from 1, the column counting the bytes before `i` on its line).
pub(crate) fn position(s: &[u8], i: usize) -> (usize, usize) {
    let start_of_line = memchr::memrchr(b'\n', &s[..i]).map_or(0, |p| p + 1);
    let line = 1 + memchr::memchr_iter(b'\n', &s[..start_of_line]).count();
    (line, i - start_of_line)
}

/// Valid JSON that a provider's parser (serde_json's included) refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hazard {
    /// Arrays and objects nested more than [`MAX_DEPTH`] deep.
    Deep,
    /// A `\u` escape of a UTF-16 surrogate that is not half of a pair.
    LoneSurrogate,
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hazard::Deep => write!(f, "nested more than {MAX_DEPTH} levels deep"),
            Hazard::LoneSurrogate => f.write_str("a \\u escape encodes a lone UTF-16 surrogate"),
        }
    }
}

/// How [`Cursor::members`] reads member names (and which error codes it
/// gives for a malformed object).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// As serde_json reads an object into a map or a struct: names read as
    /// strings ([`Cursor::str`]: valid UTF-8, surrogates paired), a comma
    /// before `}` is a `trailing comma`.
    Read,
    /// As serde_json skips an object inside an ignored value: names
    /// scanned like any skipped string ([`Cursor::string`]).
    Skipped,
}

/// A member name as written: its quotes at `open` and `close`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    /// The opening quote.
    pub(crate) open: usize,
    /// The closing quote.
    pub(crate) close: usize,
    /// Whether it holds an escape (its name differs from its text).
    pub(crate) escaped: bool,
}

/// Bits of what [`Cursor::string`] saw in a string.
pub(crate) const ESCAPED: u8 = 1;
/// A lone surrogate escape or invalid UTF-8: it is not a `&str`.
pub(crate) const NOT_STR: u8 = 2;

/// A cursor over JSON text; see the module documentation.
pub(crate) struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
    /// Arrays and objects open around the cursor.
    depth: usize,
    hazard: Option<Hazard>,
    bad_utf8: Option<usize>,
    error: Option<SyntaxError>,
}

mod shape;
pub(crate) mod strings;
mod values;
pub(crate) mod write;

pub(crate) use strings::plain_string;
use values::ws_at;

impl<'a> Cursor<'a> {
    /// A cursor at the start of `s`.
    pub(crate) fn new(s: &'a [u8]) -> Self {
        Cursor {
            s,
            i: 0,
            depth: 0,
            hazard: None,
            bad_utf8: None,
            error: None,
        }
    }

    /// `read` of all of `s`, with nothing but whitespace after it (what
    /// `serde_json::from_slice` requires).
    pub(crate) fn whole<T>(
        s: &'a [u8],
        read: impl FnOnce(&mut Self) -> Result<T, Stop>,
    ) -> Result<T, Stop> {
        let mut c = Cursor::new(s);
        let value = read(&mut c)?;
        c.end()?;
        Ok(value)
    }

    /// The whole text.
    pub(crate) fn text(&self) -> &'a [u8] {
        self.s
    }

    /// Where the cursor is.
    pub(crate) fn at(&self) -> usize {
        self.i
    }

    /// Moves the cursor to `i` (a place a read of the same text reached).
    pub(crate) fn seek(&mut self, i: usize) {
        self.i = i;
    }

    /// Where the cursor is and how deep, for [`Cursor::rewind`].
    pub(crate) fn mark(&self) -> (usize, usize) {
        (self.i, self.depth)
    }

    /// Back to a [`Cursor::mark`] of this cursor: a read that stopped is
    /// taken back (what it noted of errors stays noted).
    pub(crate) fn rewind(&mut self, (i, depth): (usize, usize)) {
        self.i = i;
        self.depth = depth;
    }

    /// The error a read stopped at (for reads that word one).
    pub(crate) fn error(&self) -> Option<SyntaxError> {
        self.error
    }

    /// The first hazard met so far.
    pub(crate) fn hazard(&self) -> Option<Hazard> {
        self.hazard
    }

    /// Where the first invalid UTF-8 met in a skipped string since the
    /// last call starts; forgets it.
    #[inline(always)]
    pub(crate) fn take_bad_utf8(&mut self) -> Option<usize> {
        if self.bad_utf8.is_some() {
            self.bad_utf8.take()
        } else {
            None
        }
    }

    /// Skips whitespace (usually none).
    #[inline(always)]
    pub(crate) fn ws(&mut self) {
        self.i = ws_at(self.s, self.i);
    }

    /// The next byte after whitespace, not consumed.
    #[inline(always)]
    pub(crate) fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    /// Steps over `b` after whitespace, or stops (no error code).
    #[inline(always)]
    pub(crate) fn eat(&mut self, b: u8) -> Result<(), Stop> {
        if self.peek() == Some(b) {
            self.i += 1;
            Ok(())
        } else {
            Err(Stop)
        }
    }

    /// Only whitespace remains (serde_json's end of input), else `trailing
    /// characters`.
    pub(crate) fn end(&mut self) -> Result<(), Stop> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.fail_peek(Code::TrailingCharacters, self.i)),
        }
    }

    /// Records the error (serde_json's `error`: at the byte offset the
    /// read has reached).
    #[cold]
    #[inline(never)]
    pub(crate) fn fail(&mut self, code: Code, at: usize) -> Stop {
        let (line, column) = position(self.s, at);
        self.error = Some(SyntaxError { code, line, column });
        Stop
    }

    /// Records the error about the byte at `at`, not consumed
    /// (serde_json's `peek_error`).
    #[cold]
    #[inline(never)]
    pub(crate) fn fail_peek(&mut self, code: Code, at: usize) -> Stop {
        self.fail(code, (at + 1).min(self.s.len()))
    }

    #[cold]
    #[inline(never)]
    fn note(&mut self, hazard: Hazard) {
        self.hazard.get_or_insert(hazard);
    }

    /// Into an array or object; notes one nested too deep.
    #[inline(always)]
    fn enter(&mut self) {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.note(Hazard::Deep);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::strings::{ascii_stops, plain_ascii, stops, word};
    use super::*;
    use proptest::prelude::*;

    /// JSON-like text: well-formed pieces, and bytes that break them.
    fn json_like() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            8 => proptest::sample::select(vec![
                &b"{"[..], b"}", b"[", b"]", b",", b":", b" ", b"\n", b"\t", b"\"", b"\"a\"",
                b"\"key\":", b"0", b"-1", b"12.5e-3", b"1e400", b"01", b"1.", b"-", b"1e", b"true",
                b"nul", b"null", b"false", b"\\", b"\\n", b"\\u00e9", b"\\ud83d\\ude00", b"\\ud800",
                b"\\udc00", b"\\ud800\\u0041", b"\\ud800\\n", b"\\u12", b"\\x", b"\x01", b"\xc3\xa9",
                b"\xff", b"\xc3", b"abc",
            ]).prop_map(<[u8]>::to_vec),
            1 => any::<u8>().prop_map(|b| vec![b]),
        ];
        proptest::collection::vec(piece, 0..24).prop_map(|p| p.concat())
    }

    /// `"` + JSON-string-like contents + `"` (now and then unterminated).
    fn string_like() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            12 => proptest::sample::select(vec![
                &b"a"[..], b"hello world", b"\\\"", b"\\\\", b"\\/", b"\\n", b"\\u00e9", b"\\u00E9",
                b"\\ud83d\\ude00", b"\\ud800", b"\\udfff", b"\\ud800\\u0041", b"\\ud800\\n",
                b"\\ud800\\", b"\\ud800x", b"\\u12", b"\\u12g4", b"\\x", b"\\", b"\x01", b"\n",
                b"\xc3\xa9", b"\xe4\xb8\xad", b"\xf0\x9f\x98\x80", b"\xff", b"\xc3", b"\xed\xa0\x80",
                b"\x7f", b"{}[],:",
            ]).prop_map(<[u8]>::to_vec),
            1 => any::<u8>().prop_map(|b| vec![b]),
        ];
        (proptest::collection::vec(piece, 0..12), 0..8u8).prop_map(|(p, end)| {
            let mut s = b"\"".to_vec();
            s.extend(p.concat());
            if end != 0 {
                s.push(b'"');
            }
            s
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// [`Cursor::skip`] accepts what serde_json accepts as a value it
        /// ignores, and words a refusal as serde_json does, where it does.
        #[test]
        fn skipping_agrees_with_serde(text in json_like()) {
            let want = serde_json::from_slice::<serde::de::IgnoredAny>(&text);
            let mut c = Cursor::new(&text);
            let got = c.skip().and_then(|()| c.end());
            let shown = String::from_utf8_lossy(&text).into_owned();
            match want {
                Ok(_) => prop_assert_eq!(got, Ok(()), "{}", shown),
                Err(e) => {
                    prop_assert_eq!(got, Err(Stop), "{}", shown);
                    prop_assert_eq!(c.error().map(|e| e.to_string()), Some(e.to_string()), "{}", shown);
                }
            }
        }

        /// [`Cursor::str`] reads what serde_json reads into a `String`, and
        /// words a refusal as serde_json does, where it does.
        #[test]
        fn strings_read_as_serde_reads_them(text in string_like()) {
            let want = serde_json::from_slice::<String>(&text);
            let mut c = Cursor::new(&text);
            let got = c.str().map(|s| String::from_utf8(s.into_owned()).unwrap());
            let shown = String::from_utf8_lossy(&text).into_owned();
            match want {
                // Trailing characters aside: one string is read.
                Ok(s) => prop_assert_eq!(got, Ok(s), "{}", shown),
                Err(e) if e.to_string().starts_with("trailing") => {}
                Err(e) => {
                    prop_assert_eq!(got, Err(Stop), "{}", shown);
                    prop_assert_eq!(c.error().map(|e| e.to_string()), Some(e.to_string()), "{}", shown);
                }
            }
        }

        /// Skipping a string notes what reading it as a `&str` refuses.
        #[test]
        fn skipped_strings_note_what_reading_refuses(text in string_like()) {
            let mut c = Cursor::new(&text);
            if let Ok(seen) = c.string() {
                let end = c.at();
                let read = Cursor::new(&text).str().is_ok();
                prop_assert_eq!(seen & NOT_STR == 0, read);
                prop_assert_eq!(seen & ESCAPED != 0, text[..end].contains(&b'\\'));
            }
        }

        /// The word-at-a-time scans stop where a byte-at-a-time scan does.
        #[test]
        fn the_word_scan_agrees_with_a_byte_scan(
            text in proptest::collection::vec(
                prop_oneof![
                    12 => Just(b'a'),
                    1 => proptest::sample::select(&b"\"\\\x00\x01\x1f\x20\x21\x5b\x5d\x7f\x80\xc3\xa9\xff"[..]),
                ],
                8..=8,
            ),
        ) {
            let w = word(&text, 0).unwrap();
            let first = |stop: fn(u8) -> bool| text.iter().position(|&b| stop(b));
            let lowest = |m: u64| (m != 0).then(|| (m.trailing_zeros() / 8) as usize);
            prop_assert_eq!(
                lowest(ascii_stops(w)),
                first(|b| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b))
            );
            prop_assert_eq!(lowest(stops(w)), first(|b| b == b'"' || b == b'\\' || b < 0x20));
            prop_assert_eq!(plain_ascii(&text), first(|b| !(0x20..0x80).contains(&b)).is_none());
        }
    }

    #[test]
    fn positions_are_serde_json_s() {
        for (text, want) in [
            (&b""[..], "EOF while parsing a value at line 1 column 0"),
            (b"  ", "EOF while parsing a value at line 1 column 2"),
            (b"[1,]", "expected value at line 1 column 4"),
            (b"{\"a\":1,}", "key must be a string at line 1 column 8"),
            (b"[\n1\n2]", "expected `,` or `]` at line 3 column 1"),
            (
                b"\"a\x01\"",
                "control character (\\u0000-\\u001F) found while parsing a string at line 1 column 2",
            ),
            (b"1.\n", "invalid number at line 2 column 0"),
            // A name cut off (once made the cursor count back from 0).
            (b"{\"", "EOF while parsing a string at line 1 column 2"),
            (
                b"[{\"\xc3\xa9",
                "EOF while parsing a string at line 1 column 5",
            ),
        ] {
            let mut c = Cursor::new(text);
            assert_eq!(c.skip().and_then(|()| c.end()), Err(Stop));
            assert_eq!(c.error().unwrap().to_string(), want);
            let serde = serde_json::from_slice::<serde::de::IgnoredAny>(text).unwrap_err();
            assert_eq!(serde.to_string(), want);
        }
    }

    #[test]
    fn hazards_are_noted_in_order() {
        let mut c = Cursor::new(br#"["\ud800", [[]]]"#);
        c.depth = MAX_DEPTH - 1;
        assert_eq!(c.skip(), Ok(()));
        assert_eq!(c.hazard(), Some(Hazard::LoneSurrogate));
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let mut c = Cursor::new(deep.as_bytes());
        assert_eq!(c.skip(), Ok(()));
        assert_eq!(c.hazard(), Some(Hazard::Deep));
        let mut c = Cursor::new(br#"["\ud83d\ude00", "\\ud800"]"#);
        assert_eq!(c.skip(), Ok(()));
        assert_eq!(c.hazard(), None);
    }
}
