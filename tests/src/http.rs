//! HTTP as a client speaks it over a real socket: raw requests, a
//! connection that reads whole responses, one request on a new connection,
//! and what the tests read from a response (errors, SSE events, chunks).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use chatgate_testkit::parse_response;
use serde_json::Value;

use crate::wait::PATIENCE;

pub use chatgate_testkit::sse_data;

/// A response as a client sees it.
pub use chatgate_testkit::ClientResponse as Response;

/// What the tests read from responses beyond status, headers and body.
pub trait ResponseExt {
    /// `(status, error.type, error.code, error.param)`.
    fn error(&self) -> (u16, String, String, Value);
    /// SSE `data:` payloads.
    fn events(&self) -> Vec<String>;
    /// Parsed chunks (not `[DONE]`).
    fn chunks(&self) -> Vec<Value>;
}

impl ResponseExt for Response {
    fn error(&self) -> (u16, String, String, Value) {
        let v = self.json();
        (
            self.status,
            v["error"]["type"].as_str().unwrap_or("").to_owned(),
            v["error"]["code"].as_str().unwrap_or("").to_owned(),
            v["error"]["param"].clone(),
        )
    }

    fn events(&self) -> Vec<String> {
        sse_data(&self.body)
    }

    fn chunks(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e != "[DONE]")
            .map(|e| serde_json::from_str(&e).expect("chunk JSON"))
            .collect()
    }
}

/// One complete response from the start of `buf`, and the bytes it used.
pub fn parse_one(buf: &[u8], eof: bool) -> Option<(Response, usize)> {
    match parse_response(buf, eof) {
        Ok(Some((r, used))) if r.complete => Some((r, used)),
        _ => None,
    }
}

/// A client connection.
pub struct Conn {
    /// The socket.
    pub stream: TcpStream,
    buf: Vec<u8>,
    eof: bool,
}

impl Conn {
    /// Connects.
    pub fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        Conn {
            stream,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// Sends bytes.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Reads one more piece; false at EOF.
    pub fn read_more(&mut self) -> bool {
        let mut b = [0u8; 65536];
        match self.stream.read(&mut b) {
            Ok(0) | Err(_) => {
                self.eof = true;
                false
            }
            Ok(n) => {
                self.buf.extend_from_slice(&b[..n]);
                true
            }
        }
    }

    /// Reads until one whole response arrived.
    pub fn response(&mut self) -> Response {
        loop {
            if let Some((r, used)) = parse_one(&self.buf, self.eof) {
                self.buf.drain(..used);
                return r;
            }
            if self.eof {
                panic!(
                    "connection closed mid-response: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
            }
            self.read_more();
        }
    }

    /// Bytes received and not yet parsed.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }

    /// Reads until `needle` appears in the received bytes.
    pub fn read_until(&mut self, needle: &str) {
        while !String::from_utf8_lossy(&self.buf).contains(needle) {
            assert!(
                self.read_more(),
                "closed before {needle:?}: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        }
    }

    /// True once the peer closed.
    pub fn closed(&mut self) -> bool {
        while !self.eof {
            if !self.read_more() {
                break;
            }
        }
        self.eof
    }
}

/// A raw request's bytes.
pub fn raw_request(method: &str, path: &str, key: Option<&str>, body: Option<&str>) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
    if let Some(k) = key {
        r.push_str(&format!("Authorization: Bearer {k}\r\n"));
    }
    if let Some(b) = body {
        r.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        ));
    } else {
        r.push_str("\r\n");
    }
    r.into_bytes()
}

/// One request on a new connection.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&str>,
) -> Response {
    let mut c = Conn::open(addr);
    c.send(&raw_request(method, path, key, body));
    c.response()
}

/// One request on a new connection that may fail: `None` unless a whole
/// response arrived (for load and crash tests, where failures are counted).
pub fn try_exchange(addr: SocketAddr, raw: &[u8]) -> Option<Response> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(PATIENCE)).ok()?;
    s.write_all(raw).ok()?;
    let mut buf = Vec::new();
    let mut b = [0u8; 16384];
    loop {
        if let Some((r, _)) = parse_one(&buf, false) {
            return Some(r);
        }
        match s.read(&mut b) {
            Ok(0) => return parse_one(&buf, true).map(|(r, _)| r),
            Ok(n) => buf.extend_from_slice(&b[..n]),
            Err(_) => return None,
        }
    }
}
