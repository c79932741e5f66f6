//! Admission: request and token rates with their `Retry-After`, shared
//! limits through the store (reachable or not), reservations given back,
//! the prompt allowance.

use std::time::Duration;

use chatgate_core::Limits;
use chatgate_sim::SimOptions;
use chatgate_testkit::Pair;
use serde_json::Value;

use crate::common::{body, error_of, one, responses, send};

#[test]
fn request_rate_limit_with_retry_after() {
    let limits = Limits {
        requests_per_minute: 2,
        tokens_per_minute: 100_000,
    };
    let mut pair = Pair::new(|_| {}, SimOptions::default(), limits);
    for _ in 0..3 {
        send(&mut pair, &body(""));
    }
    let rs = responses(&pair);
    assert_eq!((rs[0].status, rs[1].status), (200, 200));
    assert_eq!(
        error_of(&rs[2]),
        (
            429,
            "rate_limit_error".into(),
            "rate_limit_exceeded".into(),
            Value::Null
        )
    );
    assert_eq!(rs[2].header("retry-after"), Some("30"));
    assert_eq!(rs[2].header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(pair.sim.journal().len(), 2);
    // After the advertised wait it succeeds.
    pair.advance(Duration::from_secs(30));
    pair.received.clear();
    send(&mut pair, &body(""));
    assert_eq!(one(&pair).status, 200);
}

#[test]
fn token_rate_limit_with_retry_after() {
    let limits = Limits {
        requests_per_minute: 100,
        tokens_per_minute: 600,
    };
    let mut pair = Pair::new(|_| {}, SimOptions::default(), limits);
    send(&mut pair, &body(r#""max_tokens":500"#));
    assert_eq!(one(&pair).status, 200);
    pair.received.clear();
    // The first request used ~60 tokens of its 500+ reservation; this one
    // reserves more than what is left.
    send(&mut pair, &body(r#""max_tokens":590"#));
    let r = one(&pair);
    assert_eq!(r.status, 429);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tokens")
    );
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait));
    pair.advance(Duration::from_secs(wait));
    pair.received.clear();
    send(&mut pair, &body(r#""max_tokens":590"#));
    assert_eq!(one(&pair).status, 200);
}

fn shared(fail_closed: bool, rpm: u64) -> Pair {
    Pair::new(
        |c| c.shared_limits = Some(chatgate_core::SharedLimits { fail_closed }),
        SimOptions::default(),
        Limits {
            requests_per_minute: rpm,
            tokens_per_minute: 1_000_000,
        },
    )
}

#[test]
fn shared_limits_admit_and_settle_through_the_store() {
    let mut pair = shared(false, 2);
    for _ in 0..3 {
        send(&mut pair, &body(""));
    }
    let statuses: Vec<u16> = responses(&pair).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 429]);
    // Both admissions were settled in the store with what was metered; the
    // process's own limiter was not used.
    assert_eq!(pair.shared_settled, 2);
    let now = chatgate_core::Instant::ZERO;
    let limits = Limits {
        requests_per_minute: 2,
        tokens_per_minute: 1_000_000,
    };
    assert_eq!(
        pair.shared
            .status("test-key", limits, now)
            .remaining_requests,
        0
    );
    assert_eq!(
        pair.gateway
            .limiter()
            .status("test-key", limits, now)
            .remaining_requests,
        2
    );
    let used: u64 = pair
        .ledger
        .iter()
        .map(|r| r.prompt_tokens + r.completion_tokens)
        .sum();
    let left = pair.shared.status("test-key", limits, now).remaining_tokens;
    assert_eq!(left, 1_000_000 - used);
}

#[test]
fn shared_limits_unreachable_fail_open_or_closed() {
    // fail-open: the local limiter decides, and it is counted.
    let mut pair = shared(false, 1);
    pair.shared_down = true;
    send(&mut pair, &body(""));
    send(&mut pair, &body(""));
    let statuses: Vec<u16> = responses(&pair).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 429]);
    assert!(
        pair.gateway
            .render_metrics(chatgate_core::Instant::ZERO)
            .contains("chatgate_shared_limits_unavailable_total 2")
    );
    // Its tokens were settled here; its cost alone goes to the shared
    // spend (no tokens, no lease), which the other instances decide on.
    assert_eq!(pair.shared_settled, 1, "the admitted request's cost");
    let full = Limits {
        requests_per_minute: 1,
        tokens_per_minute: 1_000_000,
    };
    let store = pair
        .shared
        .status("test-key", full, chatgate_core::Instant::ZERO);
    assert_eq!(
        (store.remaining_requests, store.remaining_tokens),
        (1, 1_000_000),
        "the shared buckets are untouched"
    );
    // fail-closed: 503, metered.
    let mut pair = shared(true, 100);
    pair.shared_down = true;
    send(&mut pair, &body(""));
    let r = one(&pair);
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], "server_overloaded");
    assert_eq!(pair.ledger[0].status, 503);
    assert!(pair.sim.journal().is_empty());
}

fn two_keys(pair: &Pair) -> (String, String) {
    use chatgate_core::{KeyTable, entry_toml, key_hash_hex, mint_key};
    let other = mint_key(&[9; 32]);
    let mut toml = String::new();
    for (name, key) in [("test-key", &pair.key), ("other-key", &other)] {
        toml.push_str(&entry_toml(
            name,
            &key_hash_hex(key),
            Some(100),
            Some(1_000_000),
            "2026-11-22T00:00:00.000Z",
        ));
    }
    let table = KeyTable::parse_toml(&toml, Limits::default()).unwrap();
    pair.gateway.replace_keys(table);
    (pair.key.clone(), other)
}

#[test]
fn client_disconnect_while_admitting_gives_the_reservation_back() {
    let limits = Limits {
        requests_per_minute: 100,
        tokens_per_minute: 1_000_000,
    };
    let now = chatgate_core::Instant::ZERO;
    // The first request of a connection.
    let mut pair = shared(false, 100);
    pair.admit_delay = Some(Duration::from_secs(1));
    send(&mut pair, &body(r#""max_tokens":5000"#));
    assert!(pair.received.is_empty(), "waiting for the shared limiter");
    pair.client_close();
    let rec = &pair.ledger[0];
    assert_eq!(rec.status, 499);
    assert!(rec.client_disconnected);
    // The connection stays until the limiter answered, so that what it
    // granted can be given back.
    pair.advance(Duration::from_secs(2));
    assert!(pair.client_closed);
    assert_eq!(pair.shared_settled, 1);
    assert_eq!(
        pair.shared.status("test-key", limits, now).remaining_tokens,
        1_000_000
    );
    assert!(pair.sim.journal().is_empty());
    assert_eq!(pair.ledger.len(), 1);

    // A keep-alive connection whose next request names another key: that
    // key's reservation is given back, not the previous one's.
    let mut pair = shared(false, 100);
    let (first, second) = two_keys(&pair);
    pair.client_send(&Pair::chat_request(&first, &body("")));
    assert_eq!(one(&pair).status, 200);
    let used = pair.ledger[0].prompt_tokens + pair.ledger[0].completion_tokens;
    pair.admit_delay = Some(Duration::from_secs(1));
    pair.client_send(&Pair::chat_request(&second, &body(r#""max_tokens":5000"#)));
    pair.client_close();
    pair.advance(Duration::from_secs(2));
    assert!(pair.client_closed);
    assert_eq!(pair.shared_settled, 2);
    assert_eq!(
        pair.shared
            .status("other-key", limits, now)
            .remaining_tokens,
        1_000_000
    );
    assert_eq!(
        pair.shared.status("test-key", limits, now).remaining_tokens,
        1_000_000 - used
    );
    assert_eq!(pair.ledger[1].key, "other-key");
    assert_eq!(pair.ledger[1].status, 499);
}

/// A chat request head asking `Expect: 100-continue` for a body of `len`.
fn expect_head(key: &str, len: usize) -> Vec<u8> {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\nExpect: 100-continue\r\nContent-Length: {len}\r\n\r\n"
    )
    .into_bytes()
}

#[test]
fn expect_continue_with_an_empty_request_bucket_is_429_at_once() {
    let limits = Limits {
        requests_per_minute: 1,
        tokens_per_minute: 100_000,
    };
    let mut pair = Pair::new(|_| {}, SimOptions::default(), limits);
    send(&mut pair, &body(""));
    assert_eq!(one(&pair).status, 200);
    pair.received.clear();
    pair.client_send(&expect_head(&pair.key, 2_000_000));
    assert!(!String::from_utf8_lossy(&pair.received).contains("100 Continue"));
    let r = one(&pair);
    assert_eq!(
        error_of(&r),
        (
            429,
            "rate_limit_error".into(),
            "rate_limit_exceeded".into(),
            Value::Null
        )
    );
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(pair.client_closed, "the body was not read");
    assert_eq!(pair.ledger[1].status, 429);
    assert_eq!(pair.ledger[1].error.as_deref(), Some("rate_limit_exceeded"));
    assert_eq!(pair.sim.journal().len(), 1);

    // Once the bucket has a request again, 100 Continue as usual.
    let mut pair = Pair::new(|_| {}, SimOptions::default(), limits);
    send(&mut pair, &body(""));
    pair.advance(Duration::from_secs(60));
    pair.received.clear();
    let b = body("");
    pair.client_send(&expect_head(&pair.key, b.len()));
    assert_eq!(pair.received, b"HTTP/1.1 100 Continue\r\n\r\n");
    pair.client_send(b.as_bytes());
    assert_eq!(one(&pair).status, 200);

    // With shared limits the local buckets do not decide: the body is read
    // and the shared limiter refuses it.
    let mut pair = shared(false, 1);
    send(&mut pair, &body(""));
    pair.received.clear();
    pair.client_send(&expect_head(&pair.key, b.len()));
    assert_eq!(pair.received, b"HTTP/1.1 100 Continue\r\n\r\n");
    pair.client_send(b.as_bytes());
    assert_eq!(one(&pair).status, 429);
}

/// The prompt reservation learns what the provider adds to the estimate.
#[test]
fn the_prompt_allowance_is_learned_from_reports() {
    let mut pair = Pair::with_defaults();
    let endpoint = std::sync::Arc::clone(&pair.gateway.endpoints().endpoints()[0]);
    assert_eq!(endpoint.prompt_allowance().parts(), (0, 1000));
    // A chat template the gateway cannot see: 100 tokens on every prompt.
    send(&mut pair, &body(r#""x_sim":{"template_tokens":"100"}"#));
    assert_eq!(one(&pair).status, 200);
    let rec = pair.ledger[0].clone();
    assert_eq!(endpoint.prompt_allowance().parts(), (100, 1000));
    // The next request's reservation covers what was reported.
    let estimate = rec.prompt_tokens - 100;
    assert_eq!(
        pair.gateway
            .endpoints()
            .prompt_bound(estimate, 64, u64::MAX),
        rec.prompt_tokens
    );
}
