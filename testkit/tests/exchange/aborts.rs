//! A client that leaves or stops reading, at every phase of an exchange,
//! and shutdown: the drain and its timeout.

use std::time::Duration;

use chatgate_core::Limits;
use chatgate_sim::{ExchangeEnd, SimOptions};
use chatgate_testkit::{Pair, sse_data};

use crate::common::{body, one, send, stalled_body, stream_body};

#[test]
fn client_disconnect_aborts_the_provider_at_every_phase() {
    // While a non-streamed answer is awaited (a slow provider, and one that
    // never sends its head), before the first event of a stream, and
    // mid-stream. (While connecting: `client_disconnect_while_connecting_
    // never_reaches_the_provider`.)
    let cases: [(&str, Option<Duration>); 4] = [
        (
            r#""x_sim":{"ttft_ms":5000}"#,
            Some(Duration::from_millis(10)),
        ),
        (r#""x_sim":{"fault":"stall_headers"}"#, None),
        (
            r#""stream":true,"x_sim":{"ttft_ms":5000}"#,
            Some(Duration::from_millis(10)),
        ),
        (
            r#""stream":true,"x_sim":{"token_ms":100}"#,
            Some(Duration::from_millis(350)),
        ),
    ];
    for (extra, wait) in cases {
        let mut pair = Pair::with_defaults();
        send(&mut pair, &body(extra));
        if let Some(w) = wait {
            pair.advance(w);
        }
        pair.client_close();
        let j = pair.sim.journal();
        assert_eq!(j[0].outcome, ExchangeEnd::Aborted, "{extra}");
        let rec = &pair.ledger[0];
        assert!(rec.client_disconnected);
        assert!(pair.client_closed);
        if extra.contains("token_ms") {
            assert_eq!(rec.status, 200);
            assert!(!rec.complete);
        } else {
            assert_eq!(rec.status, 499);
        }
    }
    // While the body is still arriving, before the provider is asked.
    let mut pair = Pair::with_defaults();
    pair.connect_failures.clear();
    let req = Pair::chat_request(&pair.key.clone(), &body(""));
    let conn_only = &req[..req.len() - 5];
    pair.client_send(conn_only);
    pair.client_close();
    assert_eq!(pair.ledger[0].status, 499);
    assert!(pair.sim.journal().is_empty());
}

#[test]
fn a_client_that_stops_reading_is_cut_and_the_provider_aborted() {
    let mut pair = Pair::new(
        |c| c.timeouts.client_send = Duration::from_secs(5),
        SimOptions::default(),
        Limits::default(),
    );
    pair.client_stops_reading = true;
    send(&mut pair, &stream_body(r#""x_sim":{"token_ms":1000}"#));
    pair.advance(Duration::from_secs(10));
    assert!(pair.client_closed);
    assert!(pair.ledger[0].client_disconnected);
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Aborted);
}

#[test]
fn a_slow_stream_is_not_mistaken_for_a_client_that_stopped_reading() {
    // Events far apart (longer than the send timeout), and reads that carry
    // no complete event: nothing waits for the client, so no send deadline.
    let mut pair = Pair::new(
        |c| c.timeouts.client_send = Duration::from_secs(2),
        SimOptions::default(),
        Limits::default(),
    );
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"token_ms":3000,"reasoning_tokens":3,"answer_tokens":2}"#),
    );
    pair.advance(Duration::from_secs(30));
    let r = one(&pair);
    assert_eq!(sse_data(&r.body).last().map(String::as_str), Some("[DONE]"));
    assert!(!pair.ledger[0].client_disconnected);
    assert!(pair.ledger[0].complete);
}

#[test]
fn the_drain_timeout_cuts_and_meters_what_is_still_waiting() {
    // A stream still running when the drain timeout passes: [DONE], metered.
    let mut pair = Pair::new(
        |c| c.timeouts.drain = Duration::from_secs(2),
        SimOptions::default(),
        Limits::default(),
    );
    send(&mut pair, &stream_body(r#""x_sim":{"token_ms":1000}"#));
    pair.advance(Duration::from_millis(1500));
    pair.shutdown();
    pair.advance(Duration::from_secs(3));
    let r = one(&pair);
    let data = sse_data(&r.body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert!(data.len() < 10, "cut early: {data:?}");
    assert!(pair.client_closed);
    let rec = &pair.ledger[0];
    assert!(!rec.complete);
    assert_eq!(rec.error.as_deref(), Some("shutdown"));
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Aborted);
    // A non-streamed request still waiting: 503, metered.
    let mut pair = Pair::new(
        |c| c.timeouts.drain = Duration::from_secs(2),
        SimOptions::default(),
        Limits::default(),
    );
    send(&mut pair, &body(r#""x_sim":{"fault":"stall_headers"}"#));
    pair.shutdown();
    pair.advance(Duration::from_secs(3));
    let r = one(&pair);
    assert_eq!(r.status, 503);
    assert!(pair.client_closed);
    assert_eq!(pair.ledger[0].status, 503);
}

#[test]
fn shutdown_closes_idle_and_finishes_busy_connections() {
    let mut pair = Pair::with_defaults();
    pair.gateway.begin_drain();
    send(&mut pair, &stream_body(r#""x_sim":{"token_ms":10}"#));
    pair.advance(Duration::from_secs(5));
    let r = one(&pair);
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(sse_data(&r.body).last().map(String::as_str), Some("[DONE]"));
    assert!(pair.client_closed);
    assert!(pair.ledger[0].complete);
}

#[test]
fn client_disconnect_while_connecting_never_reaches_the_provider() {
    let mut pair = Pair::with_defaults();
    pair.connect_delay = Some(Duration::from_secs(1));
    send(&mut pair, &stream_body(""));
    pair.advance(Duration::from_millis(500));
    pair.client_close();
    assert!(pair.client_closed);
    let rec = &pair.ledger[0];
    assert_eq!(rec.status, 499);
    assert!(rec.client_disconnected);
    assert_eq!(rec.error, None);
    pair.advance(Duration::from_secs(5));
    assert_eq!(pair.upstream_opened, 0);
    assert!(pair.sim.journal().is_empty());
    assert!(pair.received.is_empty());
}

#[test]
fn client_disconnect_while_a_non_streamed_body_arrives() {
    let mut pair = Pair::with_defaults();
    pair.provider_script = Some(stalled_body());
    send(&mut pair, &body(""));
    pair.advance(Duration::from_secs(1));
    pair.client_close();
    assert!(pair.client_closed);
    assert_eq!(pair.upstream_closed, 1, "the provider request is aborted");
    let rec = &pair.ledger[0];
    assert_eq!((rec.status, rec.upstream_status), (499, Some(200)));
    assert!(rec.client_disconnected);
    assert!(pair.received.is_empty());
}
