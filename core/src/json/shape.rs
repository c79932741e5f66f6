//! Values by their shape only: strings and brackets.

use super::strings::quote_or_backslash;
use super::{Cursor, Key, MAX_DEPTH, Stop};

impl<'a> Cursor<'a> {
    /// A string by its shape only, its opening quote after whitespace at
    /// the cursor: up to the next quote not escaped by a backslash (any
    /// byte after a backslash is taken as escaped). Returns the range of
    /// its contents as written.
    #[inline(always)]
    pub(crate) fn string_shape(&mut self) -> Result<(usize, usize), Stop> {
        self.string_shape_escaped().map(|(a, b, _)| (a, b))
    }

    /// [`Cursor::string_shape`], and whether the string holds a backslash.
    #[inline(always)]
    fn string_shape_escaped(&mut self) -> Result<(usize, usize, bool), Stop> {
        self.eat(b'"')?;
        let (s, start) = (self.s, self.i);
        let mut j = start;
        loop {
            let at = quote_or_backslash(s, j).ok_or(Stop)?;
            if s[at] == b'"' {
                self.i = at + 1;
                return Ok((start, at, j != start));
            }
            if at + 1 >= s.len() {
                return Err(Stop);
            }
            j = at + 2;
        }
    }

    /// Skips a value by its shape only (after whitespace): a string as
    /// [`Cursor::string_shape`] reads it; an array or object up to its
    /// matching bracket, only the strings and brackets inside it looked at,
    /// at most [`MAX_DEPTH`] deep counting from it; a number or literal
    /// (a value starting with `-`, a digit, `t`, `f` or `n`) up to the next
    /// comma, closing bracket or whitespace. Returns the value's range.
    pub(crate) fn skip_shape(&mut self) -> Result<(usize, usize), Stop> {
        self.ws();
        let start = self.i;
        match self.s.get(self.i).ok_or(Stop)? {
            b'"' => {
                self.string_shape()?;
            }
            b'{' | b'[' => {
                // Open containers as a bit stack (1 = object).
                let (mut stack, mut depth) = (0u128, 0usize);
                loop {
                    let off = self.s[self.i..]
                        .iter()
                        .position(|b| matches!(b, b'"' | b'{' | b'}' | b'[' | b']'))
                        .ok_or(Stop)?;
                    self.i += off;
                    match self.s[self.i] {
                        b'"' => {
                            self.string_shape()?;
                        }
                        open @ (b'{' | b'[') => {
                            if depth == MAX_DEPTH {
                                return Err(Stop);
                            }
                            stack = (stack << 1) | u128::from(open == b'{');
                            depth += 1;
                            self.i += 1;
                        }
                        close => {
                            if depth == 0 || (stack & 1 == 1) != (close == b'}') {
                                return Err(Stop);
                            }
                            stack >>= 1;
                            depth -= 1;
                            self.i += 1;
                            if depth == 0 {
                                break;
                            }
                        }
                    }
                }
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                let rest = &self.s[self.i..];
                self.i += rest
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                    .unwrap_or(rest.len());
            }
            _ => return Err(Stop),
        }
        Ok((start, self.i))
    }

    /// An object by its shape only (after whitespace, at `{`): `f(cursor,
    /// key)` reads or skips each value; names are any quoted text.
    pub(crate) fn members_shape(
        &mut self,
        mut f: impl FnMut(&mut Self, Key) -> Result<(), Stop>,
    ) -> Result<(), Stop> {
        self.eat(b'{')?;
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            let (a, b, escaped) = self.string_shape_escaped()?;
            self.eat(b':')?;
            f(
                self,
                Key {
                    open: a - 1,
                    close: b,
                    escaped,
                },
            )?;
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(Stop),
            }
        }
    }

    /// An array by its shape only (after whitespace, at `[`): `f(cursor)`
    /// reads or skips each element.
    pub(crate) fn elements_shape(
        &mut self,
        mut f: impl FnMut(&mut Self) -> Result<(), Stop>,
    ) -> Result<(), Stop> {
        self.eat(b'[')?;
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            f(self)?;
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(Stop),
            }
        }
    }
}
