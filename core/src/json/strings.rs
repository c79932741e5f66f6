//! Strings: skipped as serde_json skips them, read as it reads them into
//! a `&str`, and the word-at-a-time scans under both.

use std::borrow::Cow;

use super::{Code, Cursor, ESCAPED, Hazard, Key, NOT_STR, Stop, SyntaxError, position};

impl<'a> Cursor<'a> {
    /// Skips the string whose opening quote is at the cursor, as
    /// serde_json skips one: a control character, an unknown escape, a `\u`
    /// not followed by four hex digits or a missing closing quote stops it.
    /// Returns [`ESCAPED`] when it holds an escape and [`NOT_STR`] when it
    /// holds a `\u` escape of a lone surrogate (noted as a hazard) or
    /// invalid UTF-8 (its start noted, see [`Cursor::take_bad_utf8`]).
    /// Plain ASCII is read eight bytes at a time here; anything else goes
    /// on in [`Cursor::string_rest`].
    #[inline(always)]
    pub(crate) fn string(&mut self) -> Result<u8, Stop> {
        match plain_string(self.s, self.i + 1) {
            Ok(end) => {
                self.i = end;
                Ok(0)
            }
            Err(j) => self.string_rest(j),
        }
    }

    /// [`Cursor::string`] at `open`: after it.
    #[inline(always)]
    pub(crate) fn string_at(&mut self, open: usize) -> Result<usize, Stop> {
        match plain_string(self.s, open + 1) {
            Ok(end) => Ok(end),
            Err(j) => {
                self.string_rest(j)?;
                Ok(self.i)
            }
        }
    }

    /// The rest of a string from `j`, up to which it is plain ASCII.
    #[inline(never)]
    pub(super) fn string_rest(&mut self, mut j: usize) -> Result<u8, Stop> {
        let s = self.s;
        let mut seen = 0;
        // Where the first byte above 0x7F is; from there the string is
        // checked as UTF-8 at its end.
        let mut wide = None;
        loop {
            let ascii = wide.is_none();
            loop {
                match word(s, j) {
                    Some(w) => {
                        let m = if ascii { ascii_stops(w) } else { stops(w) };
                        if m != 0 {
                            j += (m.trailing_zeros() / 8) as usize;
                            break;
                        }
                        j += 8;
                    }
                    None => {
                        while let Some(&b) = s.get(j) {
                            if b == b'"' || b == b'\\' || b < 0x20 || (ascii && b > 0x7f) {
                                break;
                            }
                            j += 1;
                        }
                        break;
                    }
                }
            }
            match s.get(j) {
                None => return Err(self.fail(Code::EofWhileParsingString, j)),
                Some(b'"') => {
                    if let Some(from) = wide
                        && let Err(e) = std::str::from_utf8(&s[from..j])
                    {
                        seen |= NOT_STR;
                        self.bad_utf8.get_or_insert(from + e.valid_up_to());
                    }
                    self.i = j + 1;
                    return Ok(seen);
                }
                Some(b'\\') => {
                    seen |= ESCAPED;
                    j = self.escape(j, &mut seen)?;
                }
                Some(0..=0x1f) => {
                    return Err(self.fail(Code::ControlCharacterWhileParsingString, j));
                }
                Some(_) => wide = Some(j),
            }
        }
    }

    /// After the escape whose backslash is at `at` (serde_json's
    /// `ignore_escape`); a `\u` escape of a lone surrogate is noted.
    fn escape(&mut self, at: usize, seen: &mut u8) -> Result<usize, Stop> {
        let s = self.s;
        match s.get(at + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(at + 2),
            Some(b'u') => {
                let n = self.hex4(at + 2)?;
                let lone = match n {
                    0xD800..=0xDBFF => {
                        let pair = s.get(at + 6..at + 8) == Some(b"\\u".as_slice())
                            && matches!(hex4(s, at + 8), Some(0xDC00..=0xDFFF));
                        if pair {
                            return Ok(at + 12);
                        }
                        true
                    }
                    0xDC00..=0xDFFF => true,
                    _ => false,
                };
                if lone {
                    *seen |= NOT_STR;
                    self.note(Hazard::LoneSurrogate);
                }
                Ok(at + 6)
            }
            Some(_) => Err(self.fail(Code::InvalidEscape, at + 2)),
            None => Err(self.fail(Code::EofWhileParsingString, at + 1)),
        }
    }

    /// The four hex digits of a `\u` escape at `i` (serde_json's
    /// `decode_hex_escape`).
    fn hex4(&mut self, i: usize) -> Result<u16, Stop> {
        if self.s.len() < i + 4 {
            return Err(self.fail(Code::EofWhileParsingString, self.s.len()));
        }
        hex4(self.s, i).ok_or_else(|| self.fail(Code::InvalidEscape, i + 4))
    }

    /// A string at the cursor read as serde_json reads one into a `&str`
    /// (a member name, a string value): its contents, borrowed unless it
    /// has escapes. Beyond [`Cursor::string`]'s grammar, it must be valid
    /// UTF-8 and every `\u` escape of a surrogate half of a pair; errors
    /// are worded and placed as serde_json's `parse_str` words them.
    #[inline(always)]
    pub(crate) fn str(&mut self) -> Result<Cow<'a, [u8]>, Stop> {
        let open = self.i;
        match self.string() {
            Ok(0) => Ok(Cow::Borrowed(&self.s[open + 1..self.i - 1])),
            _ => self.str_exactly(open),
        }
    }

    /// [`Cursor::str`] for a string with escapes or anything wrong in it:
    /// serde_json's `parse_str` step by step.
    #[cold]
    #[inline(never)]
    pub(super) fn str_exactly(&mut self, open: usize) -> Result<Cow<'a, [u8]>, Stop> {
        let s = self.s;
        let mut i = open + 1;
        let mut start = i;
        let mut out: Option<Vec<u8>> = None;
        loop {
            while i < s.len() && !matches!(s[i], b'"' | b'\\' | 0..=0x1f) {
                i += 1;
            }
            let Some(&b) = s.get(i) else {
                return Err(self.fail(Code::EofWhileParsingString, i));
            };
            match b {
                b'"' => {
                    let text = match out {
                        None => Cow::Borrowed(&s[start..i]),
                        Some(mut v) => {
                            v.extend_from_slice(&s[start..i]);
                            Cow::Owned(v)
                        }
                    };
                    i += 1;
                    if let Err(e) = std::str::from_utf8(&text) {
                        // serde_json counts back from after the quote by
                        // the unescaped length.
                        let (line, column) = position(s, i);
                        let column = column.saturating_sub(text.len() - e.valid_up_to());
                        self.error = Some(SyntaxError {
                            code: Code::InvalidUnicodeCodePoint,
                            line,
                            column,
                        });
                        return Err(Stop);
                    }
                    self.i = i;
                    return Ok(text);
                }
                b'\\' => {
                    let v = out.get_or_insert_with(Vec::new);
                    v.extend_from_slice(&s[start..i]);
                    i = self.unescape(i + 1, v)?;
                    start = i;
                }
                _ => return Err(self.fail(Code::ControlCharacterWhileParsingString, i + 1)),
            }
        }
    }

    /// Decodes the escape after the backslash, at `i`, into `out`
    /// (serde_json's `parse_escape` and `parse_unicode_escape`); returns
    /// where the string goes on.
    fn unescape(&mut self, mut i: usize, out: &mut Vec<u8>) -> Result<usize, Stop> {
        let s = self.s;
        let Some(&c) = s.get(i) else {
            return Err(self.fail(Code::EofWhileParsingString, i));
        };
        i += 1;
        let simple = match c {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let n = self.hex4(i)?;
                i += 4;
                let code = match n {
                    0xDC00..=0xDFFF => {
                        return Err(self.fail(Code::LoneLeadingSurrogateInHexEscape, i));
                    }
                    0xD800..=0xDBFF => {
                        for want in [b'\\', b'u'] {
                            match s.get(i) {
                                None => return Err(self.fail(Code::EofWhileParsingString, i)),
                                Some(&b) if b == want => i += 1,
                                Some(_) => {
                                    return Err(self.fail(Code::UnexpectedEndOfHexEscape, i + 1));
                                }
                            }
                        }
                        let low = self.hex4(i)?;
                        i += 4;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(self.fail(Code::LoneLeadingSurrogateInHexEscape, i));
                        }
                        0x1_0000 + ((u32::from(n) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
                    }
                    n => u32::from(n),
                };
                // Surrogates are excluded above: always a char.
                let ch = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
                out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                return Ok(i);
            }
            _ => return Err(self.fail(Code::InvalidEscape, i)),
        };
        out.push(simple);
        Ok(i)
    }

    /// The name `key` stands for: its text, unescaped when it has escapes
    /// (as serde_json reads it; when it cannot be read so — a lone
    /// surrogate — its text as written, which no name a caller looks for
    /// matches).
    pub(crate) fn name(&self, key: Key) -> Cow<'a, [u8]> {
        let raw = &self.s[key.open + 1..key.close];
        if !key.escaped {
            return Cow::Borrowed(raw);
        }
        let mut c = Cursor::new(self.s);
        c.i = key.open;
        c.str_exactly(key.open).unwrap_or(Cow::Borrowed(raw))
    }

    /// The text of `key` as written, quotes excluded (its name when it has
    /// no escapes).
    #[inline(always)]
    pub(crate) fn raw_name(&self, key: Key) -> &'a [u8] {
        &self.s[key.open + 1..key.close]
    }
}

/// Where a string whose contents start at `j` ends (after its closing
/// quote) when it is plain ASCII — no escape, control character or byte
/// above 0x7F — else `Err` with where the plain part stops. Eight bytes at
/// a time; three rounds inline (most names and many values end within
/// them), longer strings in [`long_plain_string`].
#[inline(always)]
pub(crate) fn plain_string(s: &[u8], mut j: usize) -> Result<usize, usize> {
    for _ in 0..3 {
        let Some(w) = word(s, j) else {
            return Err(j);
        };
        let m = ascii_stops(w);
        if m != 0 {
            j += (m.trailing_zeros() / 8) as usize;
            return if s[j] == b'"' { Ok(j + 1) } else { Err(j) };
        }
        j += 8;
    }
    long_plain_string(s, j)
}

/// The first `"` or `\` from `j`: eight bytes at a time for a while
/// (most strings are short), then with `memchr`.
#[inline(always)]
pub(super) fn quote_or_backslash(s: &[u8], mut j: usize) -> Option<usize> {
    for _ in 0..ROUNDS {
        let Some(w) = word(s, j) else {
            return memchr::memchr2(b'"', b'\\', s.get(j..)?).map(|n| j + n);
        };
        let quote = w ^ (ONES * u64::from(b'"'));
        let backslash = w ^ (ONES * u64::from(b'\\'));
        let m = ((quote.wrapping_sub(ONES) & !quote) | (backslash.wrapping_sub(ONES) & !backslash))
            & HIGH;
        if m != 0 {
            return Some(j + (m.trailing_zeros() / 8) as usize);
        }
        j += 8;
    }
    memchr::memchr2(b'"', b'\\', &s[j..]).map(|n| j + n)
}

/// Rounds of eight bytes the scans read before they call `memchr` (whose
/// setup costs as much as about 40 bytes read so).
const ROUNDS: usize = 5;

/// [`plain_string`] for a longer string, plain up to `j`: eight bytes at a
/// time for a while, then its end found with `memchr` and its bytes checked
/// for control characters and bytes above 0x7F.
#[inline(never)]
fn long_plain_string(s: &[u8], mut j: usize) -> Result<usize, usize> {
    for _ in 0..ROUNDS {
        let Some(w) = word(s, j) else {
            return Err(j);
        };
        let m = ascii_stops(w);
        if m != 0 {
            j += (m.trailing_zeros() / 8) as usize;
            return if s[j] == b'"' { Ok(j + 1) } else { Err(j) };
        }
        j += 8;
    }
    match memchr::memchr2(b'"', b'\\', &s[j..]) {
        Some(n) if s[j + n] == b'"' && plain_ascii(&s[j..j + n]) => Ok(j + n + 1),
        _ => Err(j),
    }
}

const ONES: u64 = u64::from_ne_bytes([1; 8]);
const HIGH: u64 = ONES * 0x80;

/// The eight bytes at `i`, if there are as many.
#[inline(always)]
pub(crate) fn word(s: &[u8], i: usize) -> Option<u64> {
    let bytes = s.get(i..i + 8)?;
    Some(u64::from_le_bytes(bytes.try_into().unwrap_or_default()))
}

/// The bytes of `w` where a run of plain ASCII string bytes stops: `"`,
/// `\`, control characters and bytes above 0x7F. The high bit of each;
/// only the lowest is exact (a borrow can flag a byte above it). Without
/// the usual `& !x` terms: a subtraction sets a high bit without a zero
/// byte only for bytes above 0x7F, which stop the run anyway.
#[inline(always)]
pub(crate) fn ascii_stops(w: u64) -> u64 {
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    (quote.wrapping_sub(ONES) | backslash.wrapping_sub(ONES) | w.wrapping_sub(ONES * 0x20) | w)
        & HIGH
}

/// Like [`ascii_stops`], bytes above 0x7F let through.
#[inline(always)]
pub(super) fn stops(w: u64) -> u64 {
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    ((quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash)
        | (w.wrapping_sub(ONES * 0x20) & !w))
        & HIGH
}

/// No byte below 0x20 or above 0x7F. (A plain fold: the compiler turns it
/// into vector instructions.)
pub(super) fn plain_ascii(b: &[u8]) -> bool {
    !b.iter()
        .fold(false, |odd, &c| odd | (c.wrapping_sub(0x20) >= 0x60))
}

/// The four hex digits at `i`.
fn hex4(s: &[u8], i: usize) -> Option<u16> {
    s.get(i..i + 4)?.iter().try_fold(0u16, |v, &b| {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        Some(v << 4 | u16::from(d))
    })
}
