//! Provider connections: keep-alive reuse, stale pooled connections, what
//! may go back to the pool, and reads split anywhere giving the same answer.

use chatgate_core::{LedgerRecord, UpstreamFailure};
use chatgate_testkit::{Pair, ProviderScript, UpstreamReads};

use crate::common::{MODEL, body, one, responses, send, stream_body};

#[test]
fn keep_alive_reuses_the_provider_connection_and_pipelining_keeps_order() {
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    let mut two = Pair::chat_request(&key, &body(r#""user":"first""#));
    two.extend_from_slice(&Pair::chat_request(
        &key,
        &stream_body(r#""user":"second""#),
    ));
    two.extend_from_slice(
        format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    );
    pair.client_send(&two);
    let rs = responses(&pair);
    assert_eq!(rs.len(), 3);
    assert_eq!(rs[0].header("content-type"), Some("application/json"));
    assert_eq!(
        rs[1].header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    assert_eq!(rs[2].json()["object"], "list");
    assert_eq!((pair.upstream_opened, pair.upstream_reused), (1, 1));
    let j = pair.sim.journal();
    assert!(j[0].body.contains("first") && j[1].body.contains("second"));
}

#[test]
fn stale_pooled_connection_is_retried_once_on_a_new_one() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &body(""));
    pair.close_idle_upstreams();
    pair.received.clear();
    send(&mut pair, &body(r#""user":"second""#));
    assert_eq!(one(&pair).status, 200);
    assert_eq!((pair.upstream_opened, pair.upstream_reused), (2, 1));
    assert_eq!(
        pair.sim.journal().len(),
        2,
        "the failed attempt never reached the provider"
    );
    // A failure to connect at all is answered, not retried.
    pair.received.clear();
    pair.connect_failures
        .push_back(UpstreamFailure::Broken("reset".into()));
    send(&mut pair, &body(""));
    assert_eq!(one(&pair).status, 502);
}

/// Equal bytes, or a message showing where they part.
fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let at = got.iter().zip(want).take_while(|(a, b)| a == b).count();
    let show = |b: &[u8]| {
        String::from_utf8_lossy(&b[at.saturating_sub(40)..b.len().min(at + 80)]).into_owned()
    };
    panic!(
        "{what}: {} bytes against {}, first difference at {at}:\n got: {:?}\nwant: {:?}",
        got.len(),
        want.len(),
        show(got),
        show(want)
    );
}

/// A ledger line without the fields that depend on when it was written.
fn timeless(rec: &LedgerRecord) -> LedgerRecord {
    let mut rec = rec.clone();
    rec.ts = String::new();
    rec.duration_ms = 0;
    rec.ttfb_ms = None;
    rec
}

#[test]
fn split_provider_reads_give_the_same_answer_and_ledger() {
    let cases = [
        body(""),
        body(r#""x_sim":{"fault":"reject","status":400,"message":"too long"}"#),
        stream_body(""),
        stream_body(r#""x_sim":{"framing":"close"}"#),
        stream_body(r#""x_sim":{"usage_every":true}"#),
        stream_body(r#""x_sim":{"fault":"omit_done"}"#),
        stream_body(r#""x_sim":{"fault":"reset","after":4}"#),
        stream_body(r#""x_sim":{"fault":"error_event","after":3}"#),
        stream_body(r#""x_sim":{"fault":"data_after_done"}"#),
        stream_body(r#""x_sim":{"fault":"no_usage","framing":"close"}"#),
        format!(
            r#"{{"model":"{MODEL}","stream":true,"messages":[{{"role":"user","content":"Paris"}}],"tools":[{{"type":"function","function":{{"name":"get_weather"}}}}]}}"#
        ),
    ];
    let mut splits = vec![UpstreamReads::AtMost(1), UpstreamReads::AtMost(7)];
    for seed in 1..=6 {
        splits.push(UpstreamReads::Random { seed, max: 48 });
        splits.push(UpstreamReads::Random { seed, max: 700 });
    }
    for b in &cases {
        let run = |reads: UpstreamReads| {
            let mut pair = Pair::with_defaults();
            pair.upstream_reads = reads;
            send(&mut pair, b);
            // A second request on the same connections: the provider
            // connection must have been left reusable (or not) alike.
            send(&mut pair, b);
            pair
        };
        let whole = run(UpstreamReads::Whole);
        let expected = responses(&whole);
        assert_eq!(expected.len(), 2, "{b}");
        for reads in &splits {
            let split = run(*reads);
            assert_eq!(responses(&split), expected, "{b} read as {reads:?}");
            assert_eq!(
                split.ledger.iter().map(timeless).collect::<Vec<_>>(),
                whole.ledger.iter().map(timeless).collect::<Vec<_>>(),
                "{b} read as {reads:?}"
            );
            if !b.contains("\"stream\":true") {
                // Content-Length answers are the same bytes; streams differ
                // only in where client chunks begin (each read's complete
                // events go out as one chunk).
                same_bytes(&split.received, &whole.received, b);
                same_bytes(&split.upstream_sent, &whole.upstream_sent, b);
            }
            // Streams too: a `[DONE]` read before the end of the chunked
            // body leaves the connection as reusable as one read with it.
            assert_eq!(
                (
                    split.upstream_opened,
                    split.upstream_reused,
                    split.upstream_closed
                ),
                (
                    whole.upstream_opened,
                    whole.upstream_reused,
                    whole.upstream_closed
                ),
                "{b} read as {reads:?}"
            );
        }
    }
    // What the whole reads did: streams that end cleanly reuse their
    // connection; data after `[DONE]` and a close-delimited body do not.
    let pooled = |b: &str| {
        let mut pair = Pair::with_defaults();
        send(&mut pair, b);
        send(&mut pair, b);
        (
            pair.upstream_opened,
            pair.upstream_reused,
            pair.upstream_closed,
        )
    };
    assert_eq!(pooled(&stream_body("")), (1, 1, 0));
    assert_eq!(
        pooled(&stream_body(r#""x_sim":{"fault":"data_after_done"}"#)),
        (2, 0, 2)
    );
    assert_eq!(
        pooled(&stream_body(r#""x_sim":{"framing":"close"}"#)),
        (2, 0, 0)
    );
}

/// A non-streamed answer goes back to the pool only when nothing of it is
/// left on the provider connection: bytes beyond `Content-Length`, or a
/// provider that said `Connection: close`, mean the connection is closed,
/// so the next request (perhaps another client's) never reads them.
#[test]
fn a_provider_connection_with_bytes_left_over_is_not_pooled() {
    let answer = r#"{"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;
    let head = |extra: &str| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{answer}",
            answer.len()
        )
    };
    let cases = [
        // (what the provider sends, may the connection be pooled)
        (head(""), true),
        (head("") + "HTTP/1.1 200 OK\r\n", false),
        (head("Connection: close\r\n"), false),
    ];
    for (script, pooled) in cases {
        let mut pair = Pair::with_defaults();
        pair.provider_script = Some(ProviderScript {
            answer: script.clone().into_bytes(),
            close: false,
        });
        send(&mut pair, &body(""));
        assert_eq!(one(&pair).status, 200, "{script:?}");
        assert_eq!(
            pair.upstream_closed == 0,
            pooled,
            "{script:?}: closed {}",
            pair.upstream_closed
        );
    }
}
