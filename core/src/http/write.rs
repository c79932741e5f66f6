//! Serializers: response and request heads, chunk frames.
//!
//! They append to a caller-owned `Vec<u8>` so a whole answer can be built in
//! one buffer and written with one system call.

use std::io::Write as _;

/// The reason phrase for a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        499 => "Client Closed Request",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
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
    // usize to hex cannot fail when writing into a Vec.
    let _ = write!(out, "{:x}\r\n", data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the last chunk of a chunked body (no trailers).
pub fn last_chunk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"0\r\n\r\n");
}

/// Appends `n` in decimal without allocating.
pub fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
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
}
