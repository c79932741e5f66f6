//! The ledger: what is metered and charged when usage is reported late or
//! not at all, and a ledger line that fails or is not yet acknowledged.

use std::time::Duration;

use chatgate_core::Limits;
use chatgate_sim::{ExchangeEnd, SimOptions};
use chatgate_testkit::{Pair, sse_data};
use serde_json::Value;

use crate::common::{body, chunks, one, responses, send, stream_body};

#[test]
fn reset_after_usage_meters_the_last_reported_usage() {
    let mut pair = Pair::with_defaults();
    // Reset right before [DONE]: finish and usage were already sent.
    let mut probe = Pair::with_defaults();
    send(&mut probe, &stream_body(""));
    let events = sse_data(&one(&probe).body).len();
    send(
        &mut pair,
        &stream_body(&format!(
            r#""x_sim":{{"fault":"reset","after":{}}}"#,
            events - 1
        )),
    );
    let rec = &pair.ledger[0];
    assert!(rec.complete, "finish_reason arrived");
    assert_eq!(rec.completion_tokens, probe.ledger[0].completion_tokens);
    assert_eq!(
        sse_data(&one(&pair).body).last().map(String::as_str),
        Some("[DONE]")
    );
}

#[test]
fn a_failed_ledger_append_withholds_the_end_of_the_response() {
    // A stream: what was sent before stays sent; the last bytes ([DONE],
    // the final chunk) never go out, and the connection closes.
    let mut pair = Pair::with_defaults();
    pair.ledger_fails = true;
    send(&mut pair, &stream_body(r#""x_sim":{"token_ms":10}"#));
    pair.advance(Duration::from_secs(5));
    assert!(pair.client_closed);
    assert_eq!((pair.ledger.len(), pair.ledger_failed), (0, 1));
    let r = one(&pair);
    assert_eq!(r.status, 200);
    assert!(!r.complete, "no final chunk");
    let data = sse_data(&r.body);
    assert!(!data.is_empty());
    assert!(!data.iter().any(|d| d == "[DONE]"));

    // A non-streamed answer: held whole, so nothing is sent.
    let mut pair = Pair::with_defaults();
    pair.ledger_fails = true;
    send(&mut pair, &body(""));
    assert!(pair.client_closed);
    assert!(pair.received.is_empty());
    assert_eq!(pair.ledger_failed, 1);
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Completed);

    // A metered error: the same.
    let mut pair = Pair::with_defaults();
    pair.ledger_fails = true;
    send(&mut pair, &body(r#""temperature":3"#));
    assert!(pair.client_closed);
    assert!(pair.received.is_empty());

    // The next line is appended again: only the affected response is cut.
    let mut pair = Pair::with_defaults();
    send(&mut pair, &body(""));
    pair.ledger_fails = true;
    send(&mut pair, &body(""));
    assert_eq!(responses(&pair).len(), 1);
    assert!(pair.client_closed);
}

#[test]
fn a_stream_without_usage_is_metered_as_reported_and_charged_its_worst_case() {
    let mut pair = Pair::new(
        |_| {},
        SimOptions::default(),
        Limits {
            requests_per_minute: 60,
            tokens_per_minute: 100_000,
        },
    );
    send(
        &mut pair,
        &stream_body(r#""max_tokens":500,"x_sim":{"fault":"no_usage"}"#),
    );
    let r = one(&pair);
    let data = sse_data(&r.body);
    // What the client gets: the provider's events, its finish chunk, no
    // usage chunk (none was reported; none is made up), then [DONE].
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert!(chunks(&r).iter().all(|c| c["usage"].is_null()));
    let rec = &pair.ledger[0];
    assert!(rec.complete, "finish_reason arrived");
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    assert_eq!(rec.error, None);
    // The ledger keeps what was reported, and says it was missing.
    assert_eq!(
        (
            rec.prompt_tokens,
            rec.completion_tokens,
            rec.reasoning_tokens,
            rec.cost_nano_usd
        ),
        (0, 0, 0, 0)
    );
    assert!(rec.usage_missing);
    // The budget would have been charged the worst case: the prompt's
    // bound (estimate plus the 64-token allowance) and max_tokens.
    assert!(rec.charged_nano_usd >= 500 * 14_250 + 64 * 2_850, "{rec:?}");
    let line: Value = serde_json::from_slice(&rec.to_line()).unwrap();
    assert_eq!(line["usage_missing"], true);
    // The key's tokens per minute were charged the same worst case, not
    // given back.
    let status =
        pair.gateway
            .limiter()
            .status("test-key", Limits::default(), chatgate_core::Instant::ZERO);
    assert!(
        status.remaining_tokens <= 100_000 - 564,
        "{}",
        status.remaining_tokens
    );
    assert!(
        pair.gateway
            .metrics()
            .render(0)
            .contains("chatgate_usage_missing_total{key=\"test-key\"} 1"),
        "counted"
    );
}

#[test]
fn client_disconnect_while_the_ledger_line_is_unacknowledged() {
    // A stream whose last bytes wait for the ledger acknowledgement.
    let mut pair = Pair::with_defaults();
    pair.ledger_held = true;
    send(&mut pair, &stream_body(r#""x_sim":{"token_ms":10}"#));
    pair.advance(Duration::from_secs(5));
    assert_eq!(pair.ledger.len(), 1);
    let before = pair.received.len();
    assert!(!String::from_utf8_lossy(&pair.received).contains("[DONE]"));
    pair.client_close();
    // Closed once the runtime has reported the append, never before.
    assert!(!pair.client_closed);
    pair.ack_ledger();
    assert!(pair.client_closed);
    assert_eq!(pair.received.len(), before, "nothing sent after the close");
    assert_eq!(pair.ledger.len(), 1, "one line per request");
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Completed);

    // A non-streamed answer, held whole.
    let mut pair = Pair::with_defaults();
    pair.ledger_held = true;
    send(&mut pair, &body(""));
    pair.client_close();
    pair.ack_ledger();
    assert!(pair.client_closed);
    assert!(pair.received.is_empty());
    assert_eq!(pair.ledger.len(), 1);
    assert_eq!(pair.ledger[0].status, 200);
}

/// A stream the client leaves: no worst-case charge from a provider that
/// reports usage at the end; a provider known to leave usage out is
/// charged it.
#[test]
fn a_client_that_leaves_is_charged_the_worst_case_only_by_a_provider_without_usage() {
    for omits in [false, true] {
        let mut pair = Pair::new(
            |_| {},
            SimOptions {
                token_interval: Duration::from_millis(10),
                ..SimOptions::default()
            },
            Limits::default(),
        );
        if omits {
            // A complete answer without usage: the endpoint omits it.
            send(
                &mut pair,
                &stream_body(r#""x_sim":{"fault":"no_usage","token_ms":"0"}"#),
            );
            pair.advance(Duration::from_secs(1));
            assert!(pair.ledger[0].usage_missing);
            pair.received.clear();
        }
        send(
            &mut pair,
            &stream_body(r#""max_tokens":100,"x_sim":{"fault":"no_usage"}"#),
        );
        pair.advance(Duration::from_millis(50));
        pair.client_close();
        let rec = pair.ledger.last().unwrap();
        assert!(rec.client_disconnected, "{rec:?}");
        assert_eq!(rec.usage_missing, omits, "{rec:?}");
        assert_eq!(rec.charged_nano_usd > 0, omits, "{rec:?}");
    }
}
