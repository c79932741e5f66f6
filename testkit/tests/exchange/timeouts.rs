//! Deadlines: the client's head, body and idle timeouts, connecting, the
//! provider's first byte, an idle body or stream, a stream's tail.

use std::time::Duration;

use chatgate_core::Limits;
use chatgate_sim::{ExchangeEnd, SimOptions};
use chatgate_testkit::{Pair, sse_data};
use serde_json::Value;

use crate::common::{body, error_of, one, send, stalled_body, stream_body};

/// A provider that keeps a finished stream open with `: keep-alive`
/// comments after its usage chunk: the client has its whole answer, so the
/// stream ends with `[DONE]` 2 s after the usage chunk (not after the
/// 30-second tail timeout), metered complete and without an error; the
/// provider connection is closed, not pooled.
#[test]
fn keep_alive_comments_after_the_usage_chunk_end_the_stream_within_2_s() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &stream_body(""));
    let whole = sse_data(&one(&pair).body);
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"keepalive_after_usage"}"#),
    );
    pair.advance(Duration::from_millis(1900));
    assert!(pair.ledger.is_empty(), "not over before 2 s");
    assert!(String::from_utf8_lossy(&pair.received).contains(": keep-alive"));
    pair.advance(Duration::from_millis(200));
    let r = one(&pair);
    assert_eq!(sse_data(&r.body), whole, "the same events, then [DONE]");
    let rec = &pair.ledger[0];
    assert!(rec.complete);
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    assert_eq!(rec.error, None);
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Aborted);
    assert_eq!(pair.upstream_closed, 1);
}

#[test]
fn timeouts_on_the_client_side() {
    // Slowloris: a head that never completes gets 408 and the connection closes.
    let mut pair = Pair::with_defaults();
    pair.client_send(b"GET /v1/models HTTP/1.1\r\nHo");
    pair.advance(Duration::from_secs(14));
    assert!(pair.received.is_empty());
    pair.advance(Duration::from_secs(2));
    assert_eq!(one(&pair).status, 408);
    assert!(pair.client_closed);
    // An idle keep-alive connection closes quietly.
    let mut pair = Pair::with_defaults();
    pair.advance(Duration::from_secs(76));
    assert!(pair.client_closed && pair.received.is_empty());
    // A stalled body.
    let mut pair = Pair::with_defaults();
    let req = Pair::chat_request(&pair.key.clone(), &body(""));
    pair.client_send(&req[..req.len() - 3]);
    pair.advance(Duration::from_secs(61));
    assert_eq!(one(&pair).status, 408);
    assert_eq!(pair.ledger[0].status, 408);
}

#[test]
fn provider_stalls_and_garbage() {
    // No head within the first-byte timeout: 504.
    let mut pair = Pair::new(
        |c| c.timeouts.upstream_first_byte = Duration::from_secs(5),
        SimOptions::default(),
        Limits::default(),
    );
    send(&mut pair, &body(r#""x_sim":{"fault":"stall_headers"}"#));
    pair.advance(Duration::from_secs(6));
    let r = one(&pair);
    assert_eq!(
        error_of(&r),
        (
            504,
            "upstream_error".into(),
            "upstream_timeout".into(),
            Value::Null
        )
    );
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Aborted);

    // A stream that stalls mid-way: [DONE] after the idle timeout, incomplete.
    let mut pair = Pair::new(
        |c| c.timeouts.upstream_idle = Duration::from_secs(3),
        SimOptions::default(),
        Limits::default(),
    );
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"stall","after":3}"#),
    );
    pair.advance(Duration::from_secs(4));
    let r = one(&pair);
    let data = sse_data(&r.body);
    assert_eq!((data.len(), data[3].as_str()), (4, "[DONE]"));
    assert!(!pair.ledger[0].complete);

    // Heartbeats after finish_reason that never end: cut after the tail timeout.
    let mut pair = Pair::new(
        |c| c.timeouts.stream_tail = Duration::from_secs(2),
        SimOptions::default(),
        Limits::default(),
    );
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"heartbeat_after_finish"}"#),
    );
    pair.advance(Duration::from_secs(3));
    let r = one(&pair);
    assert!(String::from_utf8_lossy(&r.body).contains(": heartbeat"));
    assert_eq!(sse_data(&r.body).last().map(String::as_str), Some("[DONE]"));
    assert!(pair.ledger[0].complete);
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Aborted);

    // Garbage instead of HTTP.
    let mut pair = Pair::with_defaults();
    send(&mut pair, &body(r#""x_sim":{"fault":"garbage"}"#));
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid HTTP")
    );
}

#[test]
fn connect_timeout_while_connecting_is_a_502() {
    let mut pair = Pair::new(
        |c| c.timeouts.upstream_connect = Duration::from_secs(2),
        SimOptions::default(),
        Limits::default(),
    );
    pair.connect_delay = Some(Duration::from_secs(5));
    send(&mut pair, &body(""));
    pair.advance(Duration::from_millis(1900));
    assert!(pair.received.is_empty(), "still connecting");
    pair.advance(Duration::from_millis(200));
    let r = one(&pair);
    assert_eq!(
        error_of(&r),
        (
            502,
            "upstream_error".into(),
            "upstream_error".into(),
            Value::Null
        )
    );
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connecting")
    );
    let rec = &pair.ledger[0];
    assert_eq!(
        (rec.status, rec.error.as_deref()),
        (502, Some("upstream_connect"))
    );
    // The attempt was abandoned: it never completes later.
    pair.advance(Duration::from_secs(10));
    assert_eq!(pair.upstream_opened, 0);
    assert!(pair.sim.journal().is_empty());
    assert!(!pair.client_closed);

    // A connection that takes a while but within the timeout is used.
    pair.received.clear();
    pair.connect_delay = Some(Duration::from_secs(1));
    send(&mut pair, &stream_body(""));
    assert!(pair.received.is_empty());
    pair.advance(Duration::from_secs(1));
    assert_eq!(one(&pair).status, 200);
    assert_eq!(pair.upstream_opened, 1);
}

#[test]
fn a_non_streamed_body_that_stops_arriving_is_a_504() {
    let mut pair = Pair::new(
        |c| c.timeouts.upstream_idle = Duration::from_secs(3),
        SimOptions::default(),
        Limits::default(),
    );
    pair.provider_script = Some(stalled_body());
    send(&mut pair, &body(""));
    pair.advance(Duration::from_millis(2900));
    assert!(pair.received.is_empty());
    pair.advance(Duration::from_millis(200));
    let r = one(&pair);
    assert_eq!(
        error_of(&r),
        (
            504,
            "upstream_error".into(),
            "upstream_timeout".into(),
            Value::Null
        )
    );
    let rec = &pair.ledger[0];
    assert_eq!(
        (rec.status, rec.upstream_status, rec.error.as_deref()),
        (504, Some(200), Some("upstream_timeout"))
    );
    assert_eq!(pair.upstream_closed, 1);
    assert!(!pair.client_closed);
}

/// A Messages stream whose provider goes silent (a reasoning model
/// thinking between tokens) gets a `ping` event every 10 s of silence,
/// after its first event and never before it (a ping would commit the
/// response before the provider answered); a chat stream gets none.
#[test]
fn a_silent_provider_on_the_messages_api_gets_pings() {
    let run = |path: &str, body: &str| {
        let mut pair = Pair::new(
            |c| c.apis.messages = true,
            SimOptions::default(),
            Limits::default(),
        );
        let key = pair.key.clone();
        let auth = if path == "/v1/messages" {
            format!("x-api-key: {key}")
        } else {
            format!("Authorization: Bearer {key}")
        };
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: gw\r\n{auth}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        pair.client_send(req.as_bytes());
        // The provider says nothing for 25 s: nothing is sent (a ping
        // would commit the response before the provider answered).
        pair.advance(Duration::from_secs(24));
        let early = pair.received.len();
        pair.advance(Duration::from_secs(120));
        let r = one(&pair);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        (early, String::from_utf8_lossy(&r.body).into_owned())
    };
    // The first token after 25 s, the next ones 25 s apart: two pings in
    // each silence after the first.
    let slow = "hi [[sim:ttft_ms=25000,token_ms=25000,reasoning_tokens=1,answer_tokens=2]]";
    let messages = format!(
        r#"{{"model":"reasoning-model-k3","max_tokens":100,"stream":true,"messages":[{{"role":"user","content":"{slow}"}}]}}"#
    );
    let (early, body) = run("/v1/messages", &messages);
    assert_eq!(
        early, 0,
        "nothing before the provider's first event: {body}"
    );
    assert!(body.starts_with("event: message_start"), "{body}");
    let pings = body.matches("event: ping").count();
    assert!(pings >= 4, "{pings} pings: {body}");
    assert!(
        body.trim_end()
            .ends_with("data: {\"type\":\"message_stop\"}"),
        "{body}"
    );
    let chat = format!(
        r#"{{"model":"reasoning-model-k3","stream":true,"messages":[{{"role":"user","content":"{slow}"}}]}}"#
    );
    let (_, body) = run("/v1/chat/completions", &chat);
    assert!(!body.contains("ping"), "{body}");
}
