//! Values: literals, numbers, objects member by member, arrays element by
//! element, and any value skipped, as serde_json reads and skips them.

use super::strings::plain_string;
use super::{Code, Cursor, ESCAPED, Hazard, Key, Keys, MAX_DEPTH, Stop};

impl<'a> Cursor<'a> {
    /// `word` (`true`, `false` or `null`), whose first byte is at the
    /// cursor (serde_json's `parse_ident`).
    #[inline(always)]
    pub(crate) fn literal(&mut self, word: &'static [u8]) -> Result<(), Stop> {
        self.i = self.literal_at(self.i, word)?;
        Ok(())
    }

    /// [`Cursor::literal`] at `i`: after it.
    #[inline(always)]
    fn literal_at(&mut self, i: usize, word: &'static [u8]) -> Result<usize, Stop> {
        if self.s.get(i..i + word.len()) == Some(word) {
            Ok(i + word.len())
        } else {
            Err(self.literal_error(i, word))
        }
    }

    #[cold]
    #[inline(never)]
    fn literal_error(&mut self, i: usize, word: &[u8]) -> Stop {
        let mut j = i + 1;
        for &want in &word[1..] {
            let Some(&b) = self.s.get(j) else {
                return self.fail(Code::EofWhileParsingValue, j);
            };
            j += 1;
            if b != want {
                return self.fail(Code::ExpectedSomeIdent, j);
            }
        }
        self.fail(Code::ExpectedSomeIdent, j)
    }

    /// A number in JSON's grammar at the cursor (at `-` or a digit),
    /// skipped as serde_json skips one: only its grammar is checked.
    #[inline(always)]
    pub(crate) fn number(&mut self) -> Result<(), Stop> {
        self.i = self.number_at(self.i)?;
        Ok(())
    }

    /// [`Cursor::number`] at `i`: after it.
    #[inline(always)]
    fn number_at(&mut self, i: usize) -> Result<usize, Stop> {
        let s = self.s;
        let mut j = i + usize::from(s.get(i) == Some(&b'-'));
        match s.get(j) {
            Some(b'0') => j += 1,
            Some(b'1'..=b'9') => {
                j += 1;
                while let Some(b'0'..=b'9') = s.get(j) {
                    j += 1;
                }
            }
            // No digit: the byte was consumed (unless there was none).
            _ => return Err(self.fail(Code::InvalidNumber, (j + 1).min(s.len()))),
        }
        match s.get(j) {
            Some(b'.' | b'e' | b'E') => match fraction_end(s, j) {
                Ok(end) => Ok(end),
                Err((code, at)) => Err(self.fail(code, at)),
            },
            // Only after a leading `0`.
            Some(b'0'..=b'9') => Err(self.fail_peek(Code::InvalidNumber, j)),
            _ => Ok(j),
        }
    }

    /// The number at the cursor: its text (see [`Cursor::number`]).
    pub(crate) fn number_text(&mut self) -> Result<&'a [u8], Stop> {
        let start = self.i;
        self.number()?;
        Ok(&self.s[start..self.i])
    }

    /// A member name and its colon at `i`, by `keys`; `first` for the
    /// first member (serde_json words a missing one differently after a
    /// comma). Leaves the cursor at the value, after whitespace.
    #[inline(always)]
    fn member_key(&mut self, i: usize, keys: Keys, first: bool) -> Result<Key, Stop> {
        let (key, value) = self.key_at(i, keys, first)?;
        self.i = value;
        Ok(key)
    }

    /// [`Cursor::member_key`] without moving the cursor: the name, and
    /// where its value starts.
    #[inline(always)]
    fn key_at(&mut self, i: usize, keys: Keys, first: bool) -> Result<(Key, usize), Stop> {
        let s = self.s;
        let (open, b) = token(s, i);
        match b {
            Some(b'"') => {}
            Some(b'}') if keys == Keys::Read && !first => {
                return Err(self.fail_peek(Code::TrailingComma, open));
            }
            Some(_) => return Err(self.fail_peek(Code::KeyMustBeAString, open)),
            None if keys == Keys::Read && !first => {
                return Err(self.fail_peek(Code::EofWhileParsingValue, open));
            }
            None => return Err(self.fail_peek(Code::EofWhileParsingObject, open)),
        }
        let (close, escaped) = match plain_string(s, open + 1) {
            Ok(end) => (end - 1, false),
            Err(j) => self.odd_key(open, j, keys)?,
        };
        let (colon, b) = token(s, close + 1);
        match b {
            Some(b':') => {}
            Some(_) => return Err(self.fail_peek(Code::ExpectedColon, colon)),
            None => return Err(self.fail_peek(Code::EofWhileParsingObject, colon)),
        }
        let key = Key {
            open,
            close,
            escaped,
        };
        Ok((key, ws_at(s, colon + 1)))
    }

    /// A member name at `open` that is not plain ASCII from `j` on: its
    /// closing quote and whether it has escapes.
    #[inline(never)]
    fn odd_key(&mut self, open: usize, j: usize, keys: Keys) -> Result<(usize, bool), Stop> {
        let seen = self.string_rest(j);
        if keys == Keys::Read && seen != Ok(0) && seen != Ok(ESCAPED) {
            // Not a `&str`, or a grammar error: worded as a name.
            self.str_exactly(open)?;
            let close = self.i - 1;
            return Ok((
                close,
                memchr::memchr(b'\\', &self.s[open + 1..close]).is_some(),
            ));
        }
        let seen = seen?;
        Ok((self.i - 1, seen & ESCAPED != 0))
    }

    /// The object at the cursor (at `{`) read member by member: `f(cursor,
    /// key)` with the cursor at the value (after whitespace), which it must
    /// read or skip. Names are read by `keys`; duplicates are the caller's
    /// to notice.
    #[inline(always)]
    pub(crate) fn members(
        &mut self,
        keys: Keys,
        f: impl FnMut(&mut Self, Key) -> Result<(), Stop>,
    ) -> Result<(), Stop> {
        match self.open_object()? {
            Some(i) => self.members_from(i, keys, true, f),
            None => Ok(()),
        }
    }

    /// Into the object at the cursor (at `{`): where its first name is
    /// expected, or `None` (the cursor after it) when it is empty. The rest
    /// is read with [`Cursor::members_from`].
    #[inline(always)]
    pub(crate) fn open_object(&mut self) -> Result<Option<usize>, Stop> {
        self.enter();
        let i = ws_at(self.s, self.i + 1);
        match self.s.get(i) {
            Some(b'}') => {
                self.i = i + 1;
                self.depth -= 1;
                Ok(None)
            }
            None => Err(self.fail_peek(Code::EofWhileParsingObject, i)),
            Some(_) => Ok(Some(i)),
        }
    }

    /// The members of an object opened with [`Cursor::open_object`] from
    /// `i`: its first name (`first`), or just after the value of a member
    /// already read; as [`Cursor::members`] reads them.
    #[inline(always)]
    pub(crate) fn members_from(
        &mut self,
        mut i: usize,
        keys: Keys,
        mut first: bool,
        mut f: impl FnMut(&mut Self, Key) -> Result<(), Stop>,
    ) -> Result<(), Stop> {
        let s = self.s;
        loop {
            if !first {
                let b;
                (i, b) = token(s, i);
                match b {
                    Some(b',') => i += 1,
                    Some(b'}') => {
                        self.i = i + 1;
                        self.depth -= 1;
                        return Ok(());
                    }
                    Some(_) => return Err(self.fail_peek(Code::ExpectedObjectCommaOrEnd, i)),
                    None => return Err(self.fail_peek(Code::EofWhileParsingObject, i)),
                }
            }
            let key = self.member_key(i, keys, first)?;
            first = false;
            f(self, key)?;
            i = self.i;
        }
    }

    /// The array at the cursor (at `[`) read element by element: `f(cursor)`
    /// with the cursor at the element (after whitespace), which it must
    /// read or skip (and which stops the read where no value starts).
    /// Errors are worded as for a skipped array.
    #[inline(always)]
    pub(crate) fn elements(
        &mut self,
        mut f: impl FnMut(&mut Self) -> Result<(), Stop>,
    ) -> Result<(), Stop> {
        let s = self.s;
        self.enter();
        let mut i = ws_at(s, self.i + 1);
        match s.get(i) {
            Some(b']') => {
                self.i = i + 1;
                self.depth -= 1;
                return Ok(());
            }
            None => return Err(self.fail_peek(Code::EofWhileParsingList, i)),
            Some(_) => {}
        }
        loop {
            self.i = i;
            f(self)?;
            let b;
            (i, b) = token(s, self.i);
            match b {
                Some(b',') => i = ws_at(s, i + 1),
                Some(b']') => {
                    self.i = i + 1;
                    self.depth -= 1;
                    return Ok(());
                }
                Some(_) => return Err(self.fail_peek(Code::ExpectedListCommaOrEnd, i)),
                None => return Err(self.fail_peek(Code::EofWhileParsingList, i)),
            }
        }
    }

    /// Skips the value at the cursor as serde_json skips one it ignores:
    /// the full grammar, strings as [`Cursor::string`] skips them, numbers
    /// as [`Cursor::number`], nesting as deep as it goes (deeper than
    /// [`MAX_DEPTH`], counting the containers the cursor is in, is noted as
    /// a hazard). Whitespace before the value is skipped too.
    #[inline(always)]
    pub(crate) fn skip(&mut self) -> Result<(), Stop> {
        let i = self.i;
        self.i = match self.s.get(i) {
            Some(b'"') => self.string_at(i)?,
            Some(b'-' | b'0'..=b'9') => self.number_at(i)?,
            Some(b't') => self.literal_at(i, b"true")?,
            Some(b'f') => self.literal_at(i, b"false")?,
            Some(b'n') => self.literal_at(i, b"null")?,
            _ => self.skip_nested(i)?,
        };
        Ok(())
    }

    /// [`Cursor::skip`] at `start` for arrays and objects (and anything
    /// malformed), serde_json's `ignore_value` step by step: after it. The
    /// open containers are bits of one word; a value nested deeper than it
    /// holds is skipped again with them on the heap.
    #[inline(never)]
    fn skip_nested(&mut self, start: usize) -> Result<usize, Stop> {
        self.skip_with::<Bits>(start)
    }

    #[cold]
    #[inline(never)]
    fn skip_deep(&mut self, start: usize) -> Result<usize, Stop> {
        self.skip_with::<Nesting>(start)
    }

    #[inline(always)]
    fn skip_with<S: Stack>(&mut self, start: usize) -> Result<usize, Stop> {
        let s = self.s;
        let mut i = start;
        // Containers the cursor is in: no more than these fit in the rest.
        let room = MAX_DEPTH.saturating_sub(self.depth);
        let mut open = S::default();
        loop {
            // A value starts here.
            let b;
            (i, b) = token(s, i);
            match b {
                Some(b'"') => i = self.string_at(i)?,
                Some(c @ (b'{' | b'[')) => {
                    let object = c == b'{';
                    if !open.push(object) {
                        return self.skip_deep(start);
                    }
                    if open.depth() > room {
                        self.note(Hazard::Deep);
                    }
                    let b;
                    (i, b) = token(s, i + 1);
                    // `}` and `]` follow `{` and `[` by two.
                    match b {
                        Some(b) if b == c + 2 => {
                            i += 1;
                            open.pop();
                        }
                        Some(_) => {
                            if object {
                                i = self.key_at(i, Keys::Skipped, true)?.1;
                            }
                            continue;
                        }
                        None => return Err(self.fail_peek(eof_in(object), i)),
                    }
                }
                Some(b't') => i = self.literal_at(i, b"true")?,
                Some(b'f') => i = self.literal_at(i, b"false")?,
                Some(b'n') => i = self.literal_at(i, b"null")?,
                Some(b'-' | b'0'..=b'9') => i = self.number_at(i)?,
                Some(_) => return Err(self.fail_peek(Code::ExpectedSomeValue, i)),
                None => return Err(self.fail_peek(Code::EofWhileParsingValue, i)),
            }
            // After a value: close containers, or on to the next element.
            loop {
                let Some(object) = open.top() else {
                    return Ok(i);
                };
                let b;
                (i, b) = token(s, i);
                match b {
                    Some(b',') => {
                        i += 1;
                        if object {
                            i = self.key_at(i, Keys::Skipped, false)?.1;
                        }
                        break;
                    }
                    Some(b'}') if object => {}
                    Some(b']') if !object => {}
                    Some(_) => {
                        let code = if object {
                            Code::ExpectedObjectCommaOrEnd
                        } else {
                            Code::ExpectedListCommaOrEnd
                        };
                        return Err(self.fail_peek(code, i));
                    }
                    None => return Err(self.fail_peek(eof_in(object), i)),
                }
                i += 1;
                open.pop();
            }
        }
    }
}

/// The first byte at or after `i` that is not whitespace, and where it is
/// (`None` at the end).
#[inline(always)]
fn token(s: &[u8], i: usize) -> (usize, Option<u8>) {
    match s.get(i) {
        Some(&b) if b > b' ' => (i, Some(b)),
        Some(_) => {
            let j = more_ws_at(s, i);
            (j, s.get(j).copied())
        }
        None => (i, None),
    }
}

/// After the whitespace at `i` (usually none).
#[inline(always)]
pub(super) fn ws_at(s: &[u8], i: usize) -> usize {
    match s.get(i) {
        Some(&b) if b <= b' ' => more_ws_at(s, i),
        _ => i,
    }
}

#[inline(never)]
fn more_ws_at(s: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = s.get(i) {
        i += 1;
    }
    i
}

/// After a number's fraction and exponent, the first of which is at `i`,
/// or serde_json's error and where it places it.
#[inline(never)]
fn fraction_end(s: &[u8], mut i: usize) -> Result<usize, (Code, usize)> {
    let digits = |mut i: usize| {
        while let Some(b'0'..=b'9') = s.get(i) {
            i += 1;
        }
        i
    };
    if s.get(i) == Some(&b'.') {
        let end = digits(i + 1);
        if end == i + 1 {
            // Not consumed: a "peek" error.
            return Err((Code::InvalidNumber, (end + 1).min(s.len())));
        }
        i = end;
    }
    if let Some(b'e' | b'E') = s.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = s.get(i) {
            i += 1;
        }
        match s.get(i) {
            Some(b'0'..=b'9') => i = digits(i + 1),
            Some(_) => return Err((Code::InvalidNumber, i + 1)),
            None => return Err((Code::InvalidNumber, i)),
        }
    }
    Ok(i)
}

/// serde_json's error for the end of the text inside an object or array.
fn eof_in(object: bool) -> Code {
    if object {
        Code::EofWhileParsingObject
    } else {
        Code::EofWhileParsingList
    }
}

/// The containers a skip is inside, innermost on top (`true` for an
/// object).
trait Stack: Default {
    /// Pushes one; `false` when it holds no more.
    fn push(&mut self, object: bool) -> bool;
    fn top(&self) -> Option<bool>;
    fn pop(&mut self);
    fn depth(&self) -> usize;
}

/// At most 128 containers, as bits of one word.
#[derive(Default)]
struct Bits {
    bits: u128,
    depth: usize,
}

impl Stack for Bits {
    #[inline(always)]
    fn push(&mut self, object: bool) -> bool {
        if self.depth == 128 {
            return false;
        }
        self.bits = (self.bits << 1) | u128::from(object);
        self.depth += 1;
        true
    }

    #[inline(always)]
    fn top(&self) -> Option<bool> {
        (self.depth > 0).then_some(self.bits & 1 == 1)
    }

    #[inline(always)]
    fn pop(&mut self) {
        self.bits >>= 1;
        self.depth -= 1;
    }

    #[inline(always)]
    fn depth(&self) -> usize {
        self.depth
    }
}

/// Any number of containers: 128 as bits of one word, the words of those
/// further out on the heap.
#[derive(Default)]
struct Nesting {
    bits: u128,
    depth: usize,
    spill: Vec<u128>,
}

impl Stack for Nesting {
    fn push(&mut self, object: bool) -> bool {
        if self.depth > 0 && self.depth.is_multiple_of(128) {
            self.spill.push(self.bits);
            self.bits = 0;
        }
        self.bits = (self.bits << 1) | u128::from(object);
        self.depth += 1;
        true
    }

    fn top(&self) -> Option<bool> {
        (self.depth > 0).then_some(self.bits & 1 == 1)
    }

    fn pop(&mut self) {
        self.bits >>= 1;
        self.depth -= 1;
        if self.depth > 0 && self.depth.is_multiple_of(128) {
            self.bits = self.spill.pop().unwrap_or(0);
        }
    }

    fn depth(&self) -> usize {
        self.depth
    }
}
