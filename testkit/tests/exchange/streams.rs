//! Provider streams that go wrong: no `[DONE]`, resets, broken framing,
//! oversized events, error events, comments only, no event at all.

use std::time::Duration;

use chatgate_core::Limits;
use chatgate_sim::SimOptions;
use chatgate_testkit::{Pair, ProviderScript, UpstreamReads, sse_data};
use serde_json::Value;

use crate::common::{
    body, chunks, error_of, one, responses, retrying, send, stream_body, upstream_sse,
};

#[test]
fn provider_without_done_gets_one_appended() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &stream_body(r#""x_sim":{"fault":"omit_done"}"#));
    let r = one(&pair);
    let data = sse_data(&r.body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(data.iter().filter(|d| *d == "[DONE]").count(), 1);
    assert!(!sse_data(&upstream_sse(&pair)).contains(&"[DONE]".to_string()));
    let rec = &pair.ledger[0];
    assert!(rec.complete);
    assert!(rec.completion_tokens > 0);
}

#[test]
fn provider_reset_mid_stream_is_incomplete() {
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"reset","after":4}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 200);
    let data = sse_data(&r.body);
    assert_eq!(data.len(), 5);
    assert_eq!(data[4], "[DONE]");
    assert!(
        chunks(&r)
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );
    let rec = &pair.ledger[0];
    assert!(!rec.complete);
    assert_eq!(rec.finish_reason, None);
    assert_eq!(rec.error.as_deref(), Some("upstream_reset"));
    assert_eq!((rec.prompt_tokens, rec.completion_tokens), (0, 0));
}

#[test]
fn broken_streams() {
    // Chunked framing broken mid-stream.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"bad_chunk","after":2}"#),
    );
    let r = one(&pair);
    assert_eq!(sse_data(&r.body).len(), 3);
    assert!(!pair.ledger[0].complete);
    // An event over the cap.
    let mut pair = Pair::new(
        |c| c.max_sse_event = 64 * 1024,
        SimOptions::default(),
        Limits::default(),
    );
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"huge_event","after":2,"bytes":100000}"#),
    );
    let r = one(&pair);
    assert_eq!(sse_data(&r.body).len(), 3);
    assert!(!pair.ledger[0].complete);
    // Data after [DONE] is ignored.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"data_after_done"}"#),
    );
    let data = sse_data(&one(&pair).body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert!(!data.iter().any(|d| d.contains("late")));
    // An error event before anything was sent: a JSON 502.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"error_event","after":0}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mid-stream")
    );
    // An error event later: forwarded as-is, stream incomplete.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"error_event","after":2}"#),
    );
    let r = one(&pair);
    assert!(sse_data(&r.body)[2].contains("\"error\""));
    assert!(!pair.ledger[0].complete);
    assert_eq!(
        pair.ledger[0].error.as_deref(),
        Some("upstream_error_event")
    );
    // Head, then the connection closes: no first chunk, so a JSON 502.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"close_after_headers"}"#),
    );
    assert_eq!(one(&pair).status, 502);
    // JSON where a stream was asked for.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"json_for_stream"}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Content-Type")
    );
}

#[test]
fn a_stream_that_ends_without_any_event_is_a_502() {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n";
    let scripts = [
        (
            format!("{head}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            false,
        ),
        (format!("{head}Content-Length: 0\r\n\r\n"), false),
        (format!("{head}Connection: close\r\n\r\n"), true),
    ];
    for (answer, close) in scripts {
        for reads in [UpstreamReads::Whole, UpstreamReads::AtMost(1)] {
            let mut pair = Pair::with_defaults();
            pair.upstream_reads = reads;
            pair.provider_script = Some(ProviderScript {
                answer: answer.clone().into_bytes(),
                close,
            });
            send(&mut pair, &stream_body(""));
            let r = one(&pair);
            assert_eq!(
                error_of(&r),
                (
                    502,
                    "upstream_error".into(),
                    "upstream_error".into(),
                    Value::Null
                ),
                "{answer:?}"
            );
            assert!(
                r.json()["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("without any event"),
                "{answer:?}"
            );
            let rec = &pair.ledger[0];
            assert_eq!(rec.status, 502);
            assert_eq!(rec.upstream_status, Some(200));
            assert_eq!(rec.error.as_deref(), Some("upstream_invalid"));
            assert!(!pair.client_closed, "the client connection survives");
        }
    }
}

/// Comments before the first event (llama.cpp's `: ping` while a request
/// is queued) do not commit the response; they go out with the first
/// event.
#[test]
fn comments_before_the_first_event_do_not_commit_the_response() {
    // The provider dies after only comments: a JSON 502, not an empty 200.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"pings","count":"3","die":"true"}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 502, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["code"], "upstream_error");
    // With retries, the next attempt answers in full.
    let mut pair = retrying(2);
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"pings","count":"3","die":"true"}"#),
    );
    pair.advance(Duration::from_secs(1));
    assert_eq!(one(&pair).status, 502, "the same body dies again");
    assert_eq!(pair.sim.journal().len(), 2);
    // Comments then `[DONE]` and nothing else: no answer, a JSON 502.
    let mut pair = Pair::with_defaults();
    pair.provider_script = Some(ProviderScript {
        answer: b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 34\r\n\r\n: ping - 1\n\n: ping - 2\n\ndata: [DONE]\n\n".to_vec(),
        close: false,
    });
    send(&mut pair, &stream_body(""));
    pair.run();
    let r = one(&pair);
    assert_eq!(r.status, 502, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(pair.ledger[0].error.as_deref(), Some("upstream_invalid"));
    // Comments then the answer: the client gets the comments with the
    // answer's first event, in order, as the provider sent them (the
    // specification's stream forwarded unchanged).
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"pings","count":"2"}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 200);
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert!(
        body.starts_with(
            ": ping - 2026-11-25 00:00:00.000000\n\n: ping - 2026-11-25 00:00:01.000000\n\ndata: "
        ),
        "{body}"
    );
    assert!(pair.ledger[0].complete);
}

/// `--stream-error-event`: a cut stream ends with an error event before
/// `[DONE]`; off by default (the specification's ending).
#[test]
fn a_cut_stream_gets_an_error_event_only_when_asked() {
    for on in [false, true] {
        let mut pair = Pair::new(
            |c| c.stream_error_event = on,
            SimOptions::default(),
            Limits::default(),
        );
        send(
            &mut pair,
            &stream_body(r#""x_sim":{"fault":"reset","after":"3"}"#),
        );
        let r = one(&pair);
        assert_eq!(r.status, 200);
        let data = sse_data(&r.body);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
        let before = &data[data.len() - 2];
        let v: Value = serde_json::from_str(before).unwrap();
        if on {
            assert_eq!(v["error"]["code"], "upstream_reset", "{before}");
            assert_eq!(v["error"]["type"], "upstream_error");
        } else {
            assert!(v.get("error").is_none(), "{before}");
        }
        assert!(!pair.ledger[0].complete);
        // A complete stream never gets one.
        pair.received.clear();
        send(&mut pair, &stream_body(""));
        pair.run();
        let all = responses(&pair);
        assert!(
            all.last()
                .is_some_and(|r| !String::from_utf8_lossy(&r.body).contains("\"error\""))
        );
    }
    // A provider that sends [DONE] without finish_reason: the event goes
    // before its [DONE].
    let mut pair = Pair::new(
        |c| c.stream_error_event = true,
        SimOptions::default(),
        Limits::default(),
    );
    pair.provider_script = Some(ProviderScript {
        answer: b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 76\r\n\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n".to_vec(),
        close: false,
    });
    send(&mut pair, &stream_body(""));
    pair.run();
    let data = sse_data(&one(&pair).body);
    assert_eq!(data.len(), 3, "{data:?}");
    assert!(data[1].contains("upstream_incomplete"), "{data:?}");
    assert_eq!(data[2], "[DONE]");
}

/// The first-event keep-alive belongs to its request: a stream refused at
/// once leaves nothing armed that would commit the next request on the
/// same connection (a request that is not even streamed).
#[test]
fn a_first_event_keepalive_does_not_outlive_its_request() {
    let mut pair = Pair::new(
        |c| c.timeouts.first_event_keepalive = Some(Duration::from_secs(5)),
        SimOptions::default(),
        Limits::default(),
    );
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"reject","status":400}"#),
    );
    assert_eq!(one(&pair).status, 502, "the provider's refusal");
    // The next request's answer takes longer than the first one's
    // keep-alive delay.
    send(&mut pair, &body(r#""x_sim":{"ttft_ms":8000}"#));
    pair.advance(Duration::from_secs(10));
    let r = responses(&pair);
    assert_eq!(r.len(), 2, "{:?}", String::from_utf8_lossy(&pair.received));
    let answer = &r[1];
    assert_eq!(answer.status, 200);
    let ct = answer.headers.iter().find(|(n, _)| n == "content-type");
    assert_eq!(ct.map(|(_, v)| v.as_str()), Some("application/json"));
    let v: Value = serde_json::from_slice(&answer.body).expect("one JSON answer");
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
}
