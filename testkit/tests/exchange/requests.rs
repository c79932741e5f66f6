//! The client's side of HTTP: routes, methods and keys, validation, body
//! limits, `Expect: 100-continue`, `HEAD`, HTTP/1.0, malformed and
//! smuggling requests, pipelining.

use chatgate_testkit::Pair;
use serde_json::{Value, json};

use crate::common::{MODEL, body, error_of, one, responses, send, stream_body};

#[test]
fn invalid_requests_never_reach_the_provider() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &body(r#""temperature":3"#));
    send(
        &mut pair,
        r#"{"model":"nope","messages":[{"role":"user","content":"x"}]}"#,
    );
    send(&mut pair, "{not json");
    let rs = responses(&pair);
    assert_eq!(
        error_of(&rs[0]),
        (
            400,
            "invalid_request_error".into(),
            "invalid_value".into(),
            json!("temperature")
        )
    );
    assert_eq!(
        error_of(&rs[1]),
        (
            404,
            "invalid_request_error".into(),
            "model_not_found".into(),
            json!("model")
        )
    );
    assert_eq!(error_of(&rs[2]).2, "invalid_json");
    assert_eq!(pair.upstream_opened, 0);
    assert!(pair.sim.journal().is_empty());
    // Metered as rejected requests, on the same connection.
    assert_eq!(
        pair.ledger.iter().map(|r| r.status).collect::<Vec<_>>(),
        [400, 404, 400]
    );
    assert_eq!(pair.ledger[0].error.as_deref(), Some("invalid_value"));
    assert!(!pair.client_closed);
}

#[test]
fn body_size_limit_is_exact() {
    let mut pair = Pair::with_defaults();
    let limit = 2 * 1024 * 1024;
    let mut exact = body(r#""pad":"PAD""#);
    let pad = limit - exact.len() + 3;
    exact = exact.replace("PAD", &"x".repeat(pad));
    assert_eq!(exact.len(), limit);
    send(&mut pair, &exact);
    assert_eq!(one(&pair).status, 200);

    let mut pair = Pair::with_defaults();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\r\n",
        pair.key,
        limit + 1
    );
    // Decided from Content-Length, before a single body byte.
    pair.client_send(head.as_bytes());
    let r = one(&pair);
    assert_eq!(
        error_of(&r),
        (
            413,
            "invalid_request_error".into(),
            "request_too_large".into(),
            Value::Null
        )
    );
    assert_eq!(r.header("connection"), Some("close"));
    assert!(pair.client_closed);

    // A chunked body is counted while it is decoded.
    let mut pair = Pair::with_defaults();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        pair.key
    );
    pair.client_send(head.as_bytes());
    let chunk = format!("100000\r\n{}\r\n", "x".repeat(0x100000));
    pair.client_send(chunk.as_bytes());
    pair.client_send(chunk.as_bytes());
    assert!(pair.received.is_empty());
    pair.client_send(b"1\r\nx\r\n");
    assert_eq!(one(&pair).status, 413);
}

#[test]
fn routes_methods_and_auth() {
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    for path in [
        "/v1/embeddings",
        "/v1/completions",
        "/v1/images/generations",
        "/v2/models",
        "/",
    ] {
        pair.client_send(
            format!("POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
                .as_bytes(),
        );
    }
    // Route comes before auth: an unknown path without a key is still 404.
    pair.client_send(b"GET /v1/nothing HTTP/1.1\r\nHost: gw\r\n\r\n");
    pair.client_send(b"GET /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n");
    pair.client_send(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n");
    pair.client_send(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sk-cg-0000000000000000000000000000000000000000000\r\n\r\n");
    pair.client_send(
        format!("GET /v1/models?x=1 HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    );
    let rs = responses(&pair);
    for r in &rs[..6] {
        assert_eq!(error_of(r).2, "unknown_url");
        assert_eq!(r.status, 404);
    }
    assert_eq!(rs[6].status, 405);
    assert_eq!(rs[6].header("allow"), Some("POST"));
    assert_eq!(rs[6].json()["error"]["code"], "method_not_allowed");
    assert_eq!(
        error_of(&rs[7]),
        (
            401,
            "authentication_error".into(),
            "invalid_api_key".into(),
            Value::Null
        )
    );
    assert_eq!(error_of(&rs[8]).0, 401);
    assert_eq!(rs[9].status, 200);
    let v = rs[9].json();
    assert_eq!(v["object"], "list");
    assert_eq!(
        v["data"][0],
        json!({"id": MODEL, "object": "model", "created": 0, "owned_by": "chatgate"})
    );
    assert_eq!(rs[9].header("x-ratelimit-limit-tokens"), Some("100000"));
    // Unauthenticated and model-list requests are not metered.
    assert!(pair.ledger.is_empty());
    assert!(!pair.client_closed);
}

#[test]
fn a_keep_alive_connection_can_change_keys() {
    // The per-connection authentication cache never lets a different
    // value through, nor a key removed by a reload.
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    let models = |k: &str| {
        format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {k}\r\n\r\n")
    };
    pair.client_send(models(&key).as_bytes());
    pair.client_send(models(&key).as_bytes());
    let mut wrong = key.clone();
    wrong.pop();
    wrong.push(if key.ends_with('A') { 'B' } else { 'A' });
    pair.client_send(models(&wrong).as_bytes());
    pair.client_send(models(&key).as_bytes());
    pair.gateway
        .replace_keys(chatgate_core::KeyTable::default());
    pair.client_send(models(&key).as_bytes());
    let statuses: Vec<u16> = responses(&pair).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 401, 200, 401]);
}

#[test]
fn chunked_request_body_and_expect_continue() {
    let mut pair = Pair::with_defaults();
    let b = body("");
    let (a, c) = b.split_at(10);
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
        pair.key
    );
    pair.client_send(req.as_bytes());
    assert_eq!(pair.received, b"HTTP/1.1 100 Continue\r\n\r\n");
    pair.client_send(
        format!(
            "{:x}\r\n{a}\r\n{:x};ext=1\r\n{c}\r\n0\r\nTrailer: x\r\n\r\n",
            a.len(),
            c.len()
        )
        .as_bytes(),
    );
    assert_eq!(one(&pair).status, 200);
    assert_eq!(pair.sim.journal()[0].body, b);

    // Not admissible: the final answer at once, no 100.
    let mut pair = Pair::with_defaults();
    pair.client_send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n");
    let r = one(&pair);
    assert_eq!(r.status, 401);
    assert!(!String::from_utf8_lossy(&pair.received).contains("100 Continue"));
    assert!(
        pair.client_closed,
        "the unread body means the connection closes"
    );
}

#[test]
fn smuggling_and_malformed_requests_close_the_connection() {
    for raw in [
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        "GET /v1/models HTTP/1.1\nHost: gw\n\n",
        "GET /v1/models HTTP/1.1\r\nHost: gw\r\nX: a\r\n  folded\r\n\r\n",
        "GET /v1/models HTTP/1.1\r\nHost: g\0w\r\n\r\n",
        "\x16\x03\x01\x02\x00\x01\x00\x01\x7f\x03\x03\r\n\r\n",
    ] {
        let mut pair = Pair::with_defaults();
        pair.client_send(raw.as_bytes());
        let r = one(&pair);
        assert_eq!(r.status, 400, "{raw:?}");
        assert_eq!(r.header("connection"), Some("close"));
        assert!(pair.client_closed, "{raw:?}");
    }
    let mut pair = Pair::with_defaults();
    let mut big = String::from("GET /v1/models HTTP/1.1\r\nHost: gw\r\n");
    big.push_str(&format!("X-Big: {}\r\n\r\n", "a".repeat(70_000)));
    pair.client_send(big.as_bytes());
    assert_eq!(one(&pair).status, 431);
}

#[test]
fn content_type_must_be_json_when_given() {
    let mut pair = Pair::with_defaults();
    let b = body("");
    let key = pair.key.clone();
    let raw = |ct: &str| {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n{ct}Content-Length: {}\r\n\r\n{b}",
            b.len()
        )
    };
    pair.client_send(raw("").as_bytes());
    pair.client_send(raw("Content-Type: application/json; charset=utf-8\r\n").as_bytes());
    let rs = responses(&pair);
    assert_eq!((rs[0].status, rs[1].status), (200, 200));
    pair.received.clear();
    pair.client_send(raw("Content-Type: text/plain\r\n").as_bytes());
    let r = one(&pair);
    assert_eq!(error_of(&r).2, "unsupported_content_type");
    assert!(pair.client_closed, "the unread body closes the connection");
}

#[test]
fn head_requests_get_heads_without_bodies() {
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    pair.client_send(
        format!("HEAD /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    );
    pair.client_send(b"HEAD /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n");
    pair.client_send(b"HEAD /nope HTTP/1.1\r\nHost: gw\r\n\r\n");
    pair.client_send(
        format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    );
    // Parse as a HEAD-aware client would: the first three have no body.
    let text = String::from_utf8_lossy(&pair.received).into_owned();
    let heads: Vec<&str> = text.split("\r\n\r\n").collect();
    assert!(
        heads[0].starts_with("HTTP/1.1 200 OK") && heads[0].contains("Content-Length: 105"),
        "{}",
        heads[0]
    );
    assert!(
        heads[1].starts_with("HTTP/1.1 405") && heads[1].contains("Allow: POST"),
        "{}",
        heads[1]
    );
    assert!(heads[2].starts_with("HTTP/1.1 404"), "{}", heads[2]);
    assert!(heads[3].starts_with("HTTP/1.1 200 OK"), "{}", heads[3]);
    assert!(heads[4].starts_with("{\"object\":\"list\""), "{}", heads[4]);
    assert!(!pair.client_closed);
}

#[test]
fn http10_client_stream_ends_with_close() {
    let mut pair = Pair::with_defaults();
    let b = stream_body("");
    let req = format!(
        "POST /v1/chat/completions HTTP/1.0\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\r\n{b}",
        pair.key,
        b.len()
    );
    pair.client_send(req.as_bytes());
    let text = String::from_utf8_lossy(&pair.received).into_owned();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
    assert!(!text.contains("Transfer-Encoding"));
    assert!(text.trim_end().ends_with("data: [DONE]"));
    assert!(pair.client_closed);
}

#[test]
fn pipelined_writes_that_straddle_requests_keep_the_input_buffer_bounded() {
    // Each write ends with the first byte of the next request, so the
    // client input is never consumed to its end; the consumed part must
    // still be dropped, or it grows by a request per request.
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    let invalid = format!("{{{}", "x".repeat(1 << 20));
    let req = Pair::chat_request(&key, &invalid);
    let n = 12;
    let mut written = 0;
    for i in 0..=n {
        let mut write = Vec::new();
        if i > 0 {
            write.extend_from_slice(&req[1..]);
        }
        if i < n {
            write.push(req[0]);
        }
        pair.client_send(&write);
        written += write.len();
        let held = pair.connection().unwrap().client_input_capacity();
        assert!(
            held <= 3 * req.len(),
            "after {i} requests ({written} bytes) the input buffer holds {held} bytes"
        );
    }
    let rs = responses(&pair);
    assert_eq!(rs.len(), n);
    assert!(rs.iter().all(|r| error_of(r).2 == "invalid_json"));
    assert!(!pair.client_closed);
}

#[test]
fn many_small_pipelined_requests_in_one_write_are_all_answered() {
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    let one = format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n");
    pair.client_send(one.repeat(2000).as_bytes());
    let rs = responses(&pair);
    assert_eq!(rs.len(), 2000);
    assert!(rs.iter().all(|r| r.status == 200));
}
