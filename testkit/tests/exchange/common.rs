//! The helpers the exchange's tests share: request bodies, sending them,
//! reading the client's answers and errors, and the pairs and provider
//! scripts more than one subject uses.

use chatgate_core::Limits;
use chatgate_core::http::{BodyDecoder, HeadScanner, HttpLimits, parse_response_head};
use chatgate_sim::SimOptions;
use chatgate_testkit::{ClientResponse, Pair, ProviderScript, parse_responses, sse_data};
use serde_json::Value;

/// The model every request names.
pub(crate) const MODEL: &str = "reasoning-model-k3";

/// A non-streamed chat request body, with `extra` (members of a JSON object,
/// without braces) added.
pub(crate) fn body(extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(",{extra}")
    };
    format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"What is two plus two?"}}]{extra}}}"#
    )
}

/// A streamed chat request body, with `extra` added.
pub(crate) fn stream_body(extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(",{extra}")
    };
    body(&format!(r#""stream":true{extra}"#))
}

/// Sends a chat request with `body` under the pair's key.
pub(crate) fn send(pair: &mut Pair, body: &str) {
    let req = Pair::chat_request(&pair.key.clone(), body);
    pair.client_send(&req);
}

/// Every response the client has received so far.
pub(crate) fn responses(pair: &Pair) -> Vec<ClientResponse> {
    parse_responses(&pair.received).expect("well-formed responses")
}

/// The one response the client has received.
pub(crate) fn one(pair: &Pair) -> ClientResponse {
    let mut r = responses(pair);
    assert_eq!(r.len(), 1, "{:?}", String::from_utf8_lossy(&pair.received));
    r.remove(0)
}

/// The SSE body the simulator sent, de-chunked.
pub(crate) fn upstream_sse(pair: &Pair) -> Vec<u8> {
    let bytes = &pair.upstream_sent;
    let len = HeadScanner::new().scan(bytes, 65536).unwrap().unwrap();
    let head = parse_response_head(&bytes[..len], &HttpLimits::default()).unwrap();
    let mut d = BodyDecoder::new(
        head.framing,
        HttpLimits {
            max_body: u64::MAX,
            ..HttpLimits::default()
        },
    );
    let mut out = Vec::new();
    let _ = d.decode(&bytes[len..], &mut out);
    out
}

/// The JSON chunks of a streamed answer, without `[DONE]`.
pub(crate) fn chunks(resp: &ClientResponse) -> Vec<Value> {
    sse_data(&resp.body)
        .into_iter()
        .filter(|d| d != "[DONE]")
        .map(|d| serde_json::from_str(&d).expect("chunk JSON"))
        .collect()
}

/// An error answer's status, and its error's type, code and param.
pub(crate) fn error_of(resp: &ClientResponse) -> (u16, String, String, Value) {
    let v = resp.json();
    (
        resp.status,
        v["error"]["type"].as_str().unwrap_or("").to_owned(),
        v["error"]["code"].as_str().unwrap_or("").to_owned(),
        v["error"]["param"].clone(),
    )
}

/// A non-streamed answer whose body stops after a few bytes.
pub(crate) fn stalled_body() -> ProviderScript {
    ProviderScript {
        answer: b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"id\":\"chatcmpl-1\",".to_vec(),
        close: false,
    }
}

/// A pair whose gateway makes up to `attempts` attempts per request.
pub(crate) fn retrying(attempts: usize) -> Pair {
    Pair::new(
        |c| c.upstream_attempts = attempts,
        SimOptions::default(),
        Limits::default(),
    )
}
