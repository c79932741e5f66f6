//! Serializers: response and request heads, chunk frames.
//!
//! They append to a caller-owned `Vec<u8>` so a whole answer can be built in
//! one buffer and written with one system call.

/// The reason phrase for a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        417 => "Expectation Failed",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        499 => "Client Closed Request",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        // The Anthropic API's "overloaded" (the Messages API answers it).
        529 => "Overloaded",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// Appends a status line.
pub fn status_line(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends one header field.
pub fn header(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends a header field with a decimal value.
pub fn header_u64(out: &mut Vec<u8>, name: &str, value: u64) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    push_decimal(out, value);
    out.extend_from_slice(b"\r\n");
}

/// Appends the CRLF that ends a head.
pub fn end_head(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
}

/// Appends one chunk (`size CRLF data CRLF`); empty data writes nothing,
/// because a zero-size chunk would end the body.
pub fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    // Room for all of it at once (16 hex digits at most, two line ends):
    // appended piece by piece into an empty buffer, the closing CRLF would
    // double a buffer the data just filled, copying the data again.
    out.reserve(data.len() + 20);
    push_hex(out, data.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the last chunk of a chunked body (no trailers).
pub fn last_chunk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"0\r\n\r\n");
}

/// The two-digit pairs, `00` to `99`.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Appends `n` in decimal without allocating.
///
/// Two digits per division, from a table (as itoa and the standard
/// library do): a request writes about twenty numbers, in its ledger line,
/// access line and headers, most of them many digits long. One or two
/// digits (a translated stream's sequence numbers and indexes, most
/// counts) are written where it is called.
#[inline]
pub fn push_decimal(out: &mut Vec<u8>, n: u64) {
    if n < 10 {
        out.push(b'0' + n as u8);
    } else if n < 100 {
        let pair = n as usize * 2;
        out.extend_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        push_long_decimal(out, n);
    }
}

/// [`push_decimal`] of three digits or more: three or four (a long
/// stream's sequence numbers) as one copy of their own length.
#[inline(never)]
fn push_long_decimal(out: &mut Vec<u8>, mut n: u64) {
    let pair = |n: u64| {
        let at = n as usize * 2;
        [PAIRS[at], PAIRS[at + 1]]
    };
    if n < 1000 {
        let [a, b] = pair(n % 100);
        out.extend_from_slice(&[b'0' + (n / 100) as u8, a, b]);
        return;
    }
    if n < 10_000 {
        let ([a, b], [c, d]) = (pair(n / 100), pair(n % 100));
        out.extend_from_slice(&[a, b, c, d]);
        return;
    }
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    while n >= 100 {
        i -= 2;
        digits[i..i + 2].copy_from_slice(&pair(n % 100));
        n /= 100;
    }
    if n >= 10 {
        i -= 2;
        digits[i..i + 2].copy_from_slice(&pair(n));
    } else {
        i -= 1;
        digits[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends `n` in lowercase hexadecimal, without leading zeros, without
/// allocating (the chunk-size form).
fn push_hex(out: &mut Vec<u8>, mut n: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = DIGITS[(n & 0xf) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_is_what_display_writes() {
        let mut values = vec![0, 1, 9, 10, 99, 100, 101, 999, 1000, u64::MAX, u64::MAX - 1];
        for p in 1..20 {
            let t = 10u64.pow(p);
            values.extend([t - 1, t, t + 1, t / 7 * 9]);
        }
        values.extend(0..12_345);
        for v in values {
            let mut out = b"x".to_vec();
            push_decimal(&mut out, v);
            assert_eq!(out, format!("x{v}").into_bytes());
        }
    }

    #[test]
    fn builds_heads_and_chunks() {
        let mut out = Vec::new();
        status_line(&mut out, 200);
        header(&mut out, "Content-Type", "text/event-stream");
        header_u64(&mut out, "Content-Length", 0);
        end_head(&mut out);
        chunk(&mut out, b"");
        chunk(&mut out, &[b'a'; 26]);
        last_chunk(&mut out);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 0\r\n\r\n\
              1a\r\naaaaaaaaaaaaaaaaaaaaaaaaaa\r\n0\r\n\r\n"
        );
        let mut d = Vec::new();
        push_decimal(&mut d, u64::MAX);
        assert_eq!(d, u64::MAX.to_string().as_bytes());
    }

    #[test]
    fn hex_matches_the_formatter() {
        for n in [0, 1, 9, 10, 15, 16, 26, 255, 256, 4095, 4096, 0xdead_beef]
            .into_iter()
            .chain([u64::from(u32::MAX), u64::MAX - 1, u64::MAX])
            .chain((0..64).map(|s| 1u64 << s))
        {
            let mut h = Vec::new();
            push_hex(&mut h, n);
            assert_eq!(h, format!("{n:x}").as_bytes(), "{n}");
        }
    }

    #[test]
    fn chunk_sizes_are_lowercase_hex() {
        for len in [1usize, 15, 16, 255, 256, 70_000] {
            let data = vec![b'x'; len];
            let mut out = Vec::new();
            chunk(&mut out, &data);
            let mut want = format!("{len:x}\r\n").into_bytes();
            want.extend_from_slice(&data);
            want.extend_from_slice(b"\r\n");
            assert_eq!(out, want, "{len}");
        }
    }
}
