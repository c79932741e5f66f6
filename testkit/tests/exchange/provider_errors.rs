//! Provider refusals and connect failures: the 502 the client gets, the
//! provider's own status and code, and when the gateway tries again.

use std::time::Duration;

use chatgate_core::{Limits, UpstreamFailure};
use chatgate_sim::SimOptions;
use chatgate_testkit::Pair;

use crate::common::{body, error_of, one, responses, retrying, send, stream_body};

#[test]
fn provider_rejections_become_502() {
    for (fault, stream) in [
        ("reject,status=400,message=context too long", false),
        ("reject,status=500", true),
        ("reject,status=400", true),
    ] {
        let mut pair = Pair::with_defaults();
        let extra = format!(
            r#""x_sim":{{{}}}"#,
            fault
                .split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or(("fault", kv));
                    format!(r#""{k}":"{v}""#)
                })
                .collect::<Vec<_>>()
                .join(",")
        );
        let b = if stream {
            stream_body(&extra)
        } else {
            body(&extra)
        };
        send(&mut pair, &b);
        let r = one(&pair);
        let (status, kind, code, _) = error_of(&r);
        assert_eq!(
            (status, kind.as_str(), code.as_str()),
            (502, "upstream_error", "upstream_error"),
            "{fault}"
        );
        let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            msg.contains("HTTP 400") || msg.contains("HTTP 500"),
            "{msg}"
        );
        if fault.contains("context") {
            assert!(msg.contains("context too long"), "{msg}");
        }
        assert_eq!(pair.ledger[0].status, 502);
        assert_eq!(
            pair.ledger[0].upstream_status,
            Some(if fault.contains("500") { 500 } else { 400 })
        );
        assert!(!pair.client_closed, "the client connection survives");
    }
}

#[test]
fn provider_429_keeps_its_retry_after() {
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &body(r#""x_sim":{"fault":"reject","status":429,"retry_after":7}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert_eq!(r.header("retry-after"), Some("7"));
}

#[test]
fn connect_failures_and_stale_pooled_connections() {
    let mut pair = Pair::with_defaults();
    pair.connect_failures
        .push_back(UpstreamFailure::Connect("connection refused".into()));
    send(&mut pair, &body(""));
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connection refused")
    );
    pair.connect_failures.push_back(UpstreamFailure::Tls(
        "certificate not valid for name".into(),
    ));
    pair.received.clear();
    send(&mut pair, &body(""));
    assert!(
        one(&pair).json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("certificate")
    );
}

#[test]
fn provider_key_is_sent_and_required() {
    use chatgate_core::Secret;
    let sim = SimOptions {
        api_key: Some("provider-secret".into()),
        ..SimOptions::default()
    };
    let mut pair = Pair::new(
        |c| c.endpoints[0].target.api_key = Some(Secret::new("provider-secret")),
        sim.clone(),
        Limits::default(),
    );
    send(&mut pair, &body(""));
    assert_eq!(one(&pair).status, 200);
    let mut pair = Pair::new(|_| {}, sim, Limits::default());
    send(&mut pair, &body(""));
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("HTTP 401")
    );
}

/// Issue: real providers. One endpoint, a transient failure: the request is
/// sent to it again after a pause, and the client sees only the answer.
#[test]
fn one_endpoint_retries_a_transient_failure_after_a_pause() {
    let mut pair = retrying(3);
    pair.connect_failures
        .push_back(UpstreamFailure::Broken("connection reset by peer".into()));
    pair.connect_failures
        .push_back(UpstreamFailure::Connect("connection refused".into()));
    send(&mut pair, &body(""));
    assert!(responses(&pair).is_empty(), "waiting for the pause");
    pair.advance(Duration::from_millis(240));
    assert!(
        responses(&pair).is_empty(),
        "the first pause is 250 ms or more"
    );
    pair.advance(Duration::from_secs(2));
    let r = one(&pair);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let rec = &pair.ledger[0];
    assert_eq!(
        (rec.attempts, rec.endpoint.as_deref()),
        (3, Some("default"))
    );
    assert!(rec.duration_ms >= 750, "two pauses: {}", rec.duration_ms);
}

#[test]
fn every_retry_failing_gives_one_502_that_says_how_often_it_was_tried() {
    let mut pair = retrying(3);
    send(
        &mut pair,
        &body(r#""x_sim":{"fault":"reject","status":"503","retry_after":"1"}"#),
    );
    pair.advance(Duration::from_secs(5));
    let r = one(&pair);
    assert_eq!(r.status, 502);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("Tried 3 times."), "{msg}");
    let journal = pair.sim.journal();
    assert_eq!(journal.len(), 3);
    // Each attempt has its own provider id, the same request's.
    let ids: Vec<_> = journal
        .iter()
        .map(|j| j.request_id.clone().unwrap())
        .collect();
    assert!(
        ids[0].ends_with("01") && ids[1].ends_with("02") && ids[2].ends_with("03"),
        "{ids:?}"
    );
    assert!(ids.iter().all(|i| i[..34] == ids[0][..34]), "{ids:?}");
    // One request's retries do not eject the endpoint on their own.
    let wall = pair.gateway.wall();
    let status = pair
        .gateway
        .endpoints()
        .status(chatgate_core::Instant::ZERO, wall);
    assert_eq!(
        (status[0].state, status[0].failures_in_a_row),
        ("healthy", 1)
    );
    // Retry-After (1 s) was honoured between attempts.
    assert!(
        pair.ledger[0].duration_ms >= 2000,
        "{}",
        pair.ledger[0].duration_ms
    );
    // A Retry-After above the cap is not waited for.
    let mut pair = retrying(3);
    send(
        &mut pair,
        &body(r#""x_sim":{"fault":"reject","status":"429","retry_after":"30"}"#),
    );
    pair.advance(Duration::from_secs(1));
    let r = one(&pair);
    assert_eq!((r.status, r.header("retry-after")), (502, Some("30")));
    assert_eq!(pair.sim.journal().len(), 1);
}

/// A provider's refusal is not retried by the gateway, nor (told so) by
/// the client's SDK, and keeps the provider's own code.
#[test]
fn a_provider_refusal_says_do_not_retry_and_keeps_the_providers_code() {
    let mut pair = retrying(3);
    send(
        &mut pair,
        &body(r#""x_sim":{"fault":"reject","status":"400","message":"context too long"}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert_eq!(r.header("x-should-retry"), Some("false"));
    let e = &r.json()["error"];
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("upstream_error"), Some("upstream_error"))
    );
    assert_eq!(e["provider"]["status"], 400);
    assert_eq!(e["provider"]["code"], "invalid_request");
    assert_eq!(e["provider"]["message"], "context too long");
    assert_eq!(pair.sim.journal().len(), 1, "not tried again");
    // A 5xx may be retried by the client.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &body(r#""x_sim":{"fault":"reject","status":"500"}"#),
    );
    let r = one(&pair);
    assert_eq!((r.status, r.header("x-should-retry")), (502, None));
    assert_eq!(r.json()["error"]["provider"]["status"], 500);
}

/// An error event instead of a first event may be the request's fault (a
/// context overflow said that way): it is not sent to the same endpoint
/// again.
#[test]
fn an_error_event_first_is_not_retried_on_the_same_endpoint() {
    let mut pair = retrying(3);
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"error_event","after":0}"#),
    );
    pair.advance(Duration::from_secs(2));
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert_eq!(pair.sim.journal().len(), 1);
    assert_eq!(
        pair.ledger[0].error.as_deref(),
        Some("upstream_error_event")
    );
}
