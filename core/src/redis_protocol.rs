//! RESP, the Redis serialization protocol (version 2, which every Redis
//! server speaks without a `HELLO`): commands encoded as arrays of bulk
//! strings, replies parsed incrementally from whatever bytes have arrived.
//!
//! Pure and bounded: a reply nested deeper than [`RedisReplyLimits::max_depth`],
//! an array longer than `max_elements` or a bulk string longer than
//! `max_bulk` is an error, never an allocation of that size. The parser
//! resumes nothing: a partial reply returns `Ok(None)` and is parsed again
//! from its start when more bytes arrive (replies to the gateway's commands
//! are a few dozen bytes).

/// Caps on what a reply may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisReplyLimits {
    /// Deepest nesting of arrays.
    pub max_depth: usize,
    /// Most elements in one array.
    pub max_elements: usize,
    /// Longest bulk string.
    pub max_bulk: usize,
}

impl Default for RedisReplyLimits {
    fn default() -> Self {
        RedisReplyLimits {
            max_depth: 8,
            max_elements: 1024,
            max_bulk: 1 << 20,
        }
    }
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisReply {
    /// `+OK`.
    Simple(String),
    /// `-ERR ...`: the server's error message.
    Error(String),
    /// `:42`.
    Integer(i64),
    /// `$n` then n bytes; `None` for `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*n` then n replies; `None` for `*-1`.
    Array(Option<Vec<RedisReply>>),
}

impl RedisReply {
    /// The integers of an array reply of integers.
    pub fn integers(&self) -> Option<Vec<i64>> {
        match self {
            RedisReply::Array(Some(items)) => items
                .iter()
                .map(|r| match r {
                    RedisReply::Integer(n) => Some(*n),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }
}

/// A reply that breaks the protocol or a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisProtocolError(pub String);

impl std::fmt::Display for RedisProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid reply from Redis: {}", self.0)
    }
}

impl std::error::Error for RedisProtocolError {}

/// Appends a command (`args[0]` is its name) as an array of bulk strings.
pub fn encode_redis_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.push(b'$');
        out.extend_from_slice(a.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Parses one reply from the start of `buf`: `Ok(None)` when it is not all
/// there yet, else the reply and the bytes it used.
pub fn parse_redis_reply(
    buf: &[u8],
    limits: &RedisReplyLimits,
) -> Result<Option<(RedisReply, usize)>, RedisProtocolError> {
    parse_at(buf, 0, limits, 0)
}

fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, RedisProtocolError> {
    let rest = &buf[at..];
    match memchr::memchr(b'\n', rest) {
        None => Ok(None),
        Some(i) if i == 0 || rest[i - 1] != b'\r' => {
            Err(RedisProtocolError("a line without CRLF".into()))
        }
        Some(i) => Ok(Some((&rest[..i - 1], at + i + 1))),
    }
}

fn integer(text: &[u8]) -> Result<i64, RedisProtocolError> {
    let s =
        std::str::from_utf8(text).map_err(|_| RedisProtocolError("a non-ASCII number".into()))?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || digits.len() > 19 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RedisProtocolError(format!("not an integer: {s:?}")));
    }
    s.parse()
        .map_err(|_| RedisProtocolError(format!("integer out of range: {s}")))
}

fn length(n: i64, cap: usize, what: &str) -> Result<Option<usize>, RedisProtocolError> {
    match n {
        -1 => Ok(None),
        n if n < 0 => Err(RedisProtocolError(format!("negative {what} length {n}"))),
        n if n as u64 > cap as u64 => Err(RedisProtocolError(format!(
            "{what} of {n} over the limit of {cap}"
        ))),
        n => Ok(Some(n as usize)),
    }
}

fn parse_at(
    buf: &[u8],
    at: usize,
    limits: &RedisReplyLimits,
    depth: usize,
) -> Result<Option<(RedisReply, usize)>, RedisProtocolError> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some((text, next)) = line(buf, at + 1)? else {
        return Ok(None);
    };
    let text_str = || String::from_utf8_lossy(text).into_owned();
    match kind {
        b'+' => Ok(Some((RedisReply::Simple(text_str()), next))),
        b'-' => Ok(Some((RedisReply::Error(text_str()), next))),
        b':' => Ok(Some((RedisReply::Integer(integer(text)?), next))),
        b'$' => {
            let Some(n) = length(integer(text)?, limits.max_bulk, "bulk string")? else {
                return Ok(Some((RedisReply::Bulk(None), next)));
            };
            if buf.len() < next + n + 2 {
                return Ok(None);
            }
            if &buf[next + n..next + n + 2] != b"\r\n" {
                return Err(RedisProtocolError("a bulk string without its CRLF".into()));
            }
            Ok(Some((
                RedisReply::Bulk(Some(buf[next..next + n].to_vec())),
                next + n + 2,
            )))
        }
        b'*' => {
            let Some(n) = length(integer(text)?, limits.max_elements, "array")? else {
                return Ok(Some((RedisReply::Array(None), next)));
            };
            if depth + 1 > limits.max_depth {
                return Err(RedisProtocolError(format!(
                    "arrays nested deeper than {}",
                    limits.max_depth
                )));
            }
            let mut items = Vec::with_capacity(n.min(64));
            let mut pos = next;
            for _ in 0..n {
                match parse_at(buf, pos, limits, depth + 1)? {
                    None => return Ok(None),
                    Some((r, p)) => {
                        items.push(r);
                        pos = p;
                    }
                }
            }
            Ok(Some((RedisReply::Array(Some(items)), pos)))
        }
        other => Err(RedisProtocolError(format!(
            "unknown reply type byte 0x{other:02x}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(buf: &[u8]) -> RedisReply {
        let (r, used) = parse_redis_reply(buf, &RedisReplyLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(used, buf.len());
        r
    }

    #[test]
    fn encodes_commands() {
        let mut out = Vec::new();
        encode_redis_command(&mut out, &[b"EVALSHA", b"abc", b"1", b"k"]);
        assert_eq!(
            out,
            b"*4\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$1\r\nk\r\n"
        );
    }

    #[test]
    fn parses_every_reply_type() {
        assert_eq!(all(b"+OK\r\n"), RedisReply::Simple("OK".into()));
        assert_eq!(
            all(b"-NOSCRIPT No matching script\r\n"),
            RedisReply::Error("NOSCRIPT No matching script".into())
        );
        assert_eq!(all(b":-42\r\n"), RedisReply::Integer(-42));
        assert_eq!(
            all(b"$3\r\na\r\n\r\n"),
            RedisReply::Bulk(Some(b"a\r\n".to_vec()))
        );
        assert_eq!(all(b"$-1\r\n"), RedisReply::Bulk(None));
        assert_eq!(all(b"*-1\r\n"), RedisReply::Array(None));
        let r = all(b"*3\r\n:1\r\n:0\r\n:1700000000000\r\n");
        assert_eq!(r.integers(), Some(vec![1, 0, 1_700_000_000_000]));
        let nested = all(b"*2\r\n*1\r\n+a\r\n$0\r\n\r\n");
        assert_eq!(
            nested,
            RedisReply::Array(Some(vec![
                RedisReply::Array(Some(vec![RedisReply::Simple("a".into())])),
                RedisReply::Bulk(Some(Vec::new()))
            ]))
        );
    }

    #[test]
    fn partial_input_waits_and_any_split_gives_the_same_reply() {
        let whole = b"*3\r\n:1\r\n$5\r\nhello\r\n*1\r\n-ERR x\r\n";
        let full = all(whole);
        for cut in 0..whole.len() {
            assert_eq!(
                parse_redis_reply(&whole[..cut], &RedisReplyLimits::default()),
                Ok(None),
                "{cut}"
            );
        }
        let mut two = whole.to_vec();
        two.extend_from_slice(b"+next\r\n");
        let (r, used) = parse_redis_reply(&two, &RedisReplyLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!((r, used), (full, whole.len()));
    }

    #[test]
    fn bad_and_oversized_replies_are_errors() {
        let l = RedisReplyLimits {
            max_depth: 2,
            max_elements: 3,
            max_bulk: 4,
        };
        for bad in [
            &b"?x\r\n"[..],
            b"+OK\n",
            b":12a\r\n",
            b":99999999999999999999\r\n",
            b"$5\r\nab\r\n",
            b"$5\r\nhelloXX",
            b"$-2\r\n",
            b"*4\r\n",
            b"*1\r\n*1\r\n*1\r\n:1\r\n",
            b"$\r\n",
        ] {
            assert!(
                parse_redis_reply(bad, &l).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
