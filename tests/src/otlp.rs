//! The OTLP trace receiver: the Python receiver started as a child, the
//! spans it decoded, and its modes (answer, fail, stall).

use std::net::SocketAddr;
use std::path::Path;

use serde_json::Value;

use crate::http::{Conn, request};
use crate::process::{Proc, address_from};

/// An OTLP/HTTP trace receiver (`tests/otlp/receiver.py`) that decodes
/// every export with the official OpenTelemetry protobuf definitions (the
/// test venv from `clients/install.sh`), keeping the spans as JSON.
pub struct OtlpReceiver {
    /// The process.
    pub proc: Proc,
    /// Its address.
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl OtlpReceiver {
    /// Starts it on a free port.
    pub fn start() -> OtlpReceiver {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("repository root")
            .to_owned();
        let python = root.join(".cache/clients/venv/bin/python");
        assert!(
            python.exists(),
            "the test venv is missing: run clients/install.sh (it installs opentelemetry-proto)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let script = root.join("tests/otlp/receiver.py");
        let mut proc = Proc::spawn(
            python.to_str().expect("a UTF-8 path"),
            &[script.to_string_lossy().into_owned()],
            &[("PYTHONDONTWRITEBYTECODE".into(), "1".into())],
            &dir.path().join("receiver.stderr"),
        );
        let addr = address_from(&proc.line());
        OtlpReceiver {
            proc,
            addr,
            _dir: dir,
        }
    }

    /// The base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`'s form).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Value> {
        match request(self.addr, "GET", "/spans", None, None).json() {
            Value::Array(spans) => spans,
            other => panic!("not a list of spans: {other}"),
        }
    }

    /// Counts of exports, spans and undecodable bodies, and the last
    /// exports' headers.
    pub fn stats(&self) -> Value {
        request(self.addr, "GET", "/stats", None, None).json()
    }

    /// `ok`, `fail` (answer every export with `status`) or `stall` (never
    /// answer).
    pub fn set_mode(&self, mode: &str, status: u16) {
        let body = format!(r#"{{"mode":"{mode}","status":{status}}}"#);
        let r = request(self.addr, "POST", "/mode", None, Some(&body));
        assert_eq!(r.status, 200);
    }

    /// Posts `body` as an export (`application/x-protobuf`); the status.
    pub fn post(&self, body: &[u8]) -> u16 {
        let mut c = Conn::open(self.addr);
        let head = format!(
            "POST /v1/traces HTTP/1.1\r\nHost: test\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        c.send(head.as_bytes());
        c.send(body);
        c.response().status
    }
}
