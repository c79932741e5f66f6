//! The core's cost for one typical request: parsing the head an OpenAI SDK
//! sends, authenticating against 1,000 keys, validating (and rewriting) a
//! 1.5 KB streaming body, and a whole non-streamed request through the
//! in-memory pair (which includes the simulated provider's work).

use std::hint::black_box;

use chatgate_core::Catalog;
use chatgate_core::Limits;
use chatgate_core::http::parse_request_head;
use chatgate_core::http::{HeadScanner, HttpLimits};
use chatgate_core::validate_chat_request;
use chatgate_core::{KeyTable, entry_toml, key_hash_hex, mint_key};
use chatgate_sim::SimOptions;
use chatgate_testkit::{Pair, parse_responses};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

const KEYS: usize = 1000;

/// The non-streamed body of the load tests.
const SMALL_BODY: &str = r#"{"model":"reasoning-model-k3","messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly."},{"role":"user","content":"What is the capital of France, and why is it the capital?"}],"max_tokens":512,"x_sim":{"reasoning_tokens":20,"answer_tokens":10}}"#;

/// About 1.5 KB: a system and a user message and the usual parameters.
fn chat_body(stream: bool) -> String {
    let system = "You are a careful assistant for an engineering team. Answer precisely, \
        state assumptions, and prefer short, verifiable steps. When the question is about \
        code, show the smallest change that fixes the problem and explain why it works. \
        If you are unsure, say so and describe how to find out. ";
    let user = "Our service retries failed HTTP calls with exponential backoff, but during an \
        incident last week the retries made things worse: the upstream was overloaded and \
        every client kept retrying at the same moments. We use a base delay of 100 ms, a \
        factor of 2 and at most 6 attempts. What would you change in the retry policy, and \
        how would you test that the change actually spreads the load? Please consider \
        jitter strategies, retry budgets and circuit breakers, and explain the trade-offs \
        between them for a service handling about 2,000 requests per second with a p99 \
        latency target of 300 ms. We also have a queue in front of the upstream; should \
        the retries go through the queue or bypass it? Finally, the clients are written in \
        three languages (Go, Python and TypeScript) and share no library, so whatever we \
        choose must be simple enough to implement three times without subtle differences; \
        suggest a test that all three implementations could run against the same fake \
        upstream to prove they behave identically. ";
    let mut body = json!({
        "model": "reasoning-model-k3",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
        "temperature": 0.6,
        "top_p": 0.95,
        "max_tokens": 2048,
        "presence_penalty": 0,
        "user": "eng-team-7",
    });
    if stream {
        body["stream"] = json!(true);
    }
    body.to_string()
}

/// The head the OpenAI Python SDK sends.
fn sdk_head(key: &str, content_length: usize) -> Vec<u8> {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\n\
         Host: gateway.internal:8080\r\n\
         Accept-Encoding: gzip, deflate\r\n\
         Connection: keep-alive\r\n\
         Accept: application/json\r\n\
         Content-Type: application/json\r\n\
         User-Agent: OpenAI/Python 1.54.3\r\n\
         X-Stainless-Lang: python\r\n\
         X-Stainless-Package-Version: 1.54.3\r\n\
         X-Stainless-OS: Linux\r\n\
         X-Stainless-Arch: x64\r\n\
         X-Stainless-Runtime: CPython\r\n\
         X-Stainless-Runtime-Version: 3.12.7\r\n\
         Authorization: Bearer {key}\r\n\
         X-Stainless-Async: false\r\n\
         x-stainless-retry-count: 0\r\n\
         Content-Length: {content_length}\r\n\r\n"
    )
    .into_bytes()
}

fn key_table() -> (KeyTable, Vec<String>) {
    let mut toml = String::new();
    let mut keys = Vec::with_capacity(KEYS);
    for i in 0..KEYS {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        let key = mint_key(&seed);
        toml += &entry_toml(
            &format!("key-{i}"),
            &key_hash_hex(&key),
            None,
            None,
            "2026-11-22T00:00:00.000Z",
        );
        keys.push(key);
    }
    let table = KeyTable::parse_toml(&toml, Limits::default()).expect("valid keys");
    (table, keys)
}

fn bench(c: &mut Criterion) {
    let limits = HttpLimits::default();
    let (table, keys) = key_table();
    let key = &keys[KEYS / 2];
    let stream_body = chat_body(true);
    let head = sdk_head(key, stream_body.len());
    let authorization = format!("Bearer {key}");
    let catalog = Catalog::default();

    let parsed = parse_request_head(&head, &limits).expect("a valid head");
    assert_eq!(
        parsed.authorization.as_deref(),
        Some(authorization.as_str())
    );
    assert_eq!(table.len(), KEYS);
    assert_eq!(
        table.authenticate(Some(&authorization)).map(|e| &e.name),
        Ok(&format!("key-{}", KEYS / 2))
    );
    let chat = validate_chat_request(stream_body.as_bytes(), &catalog).expect("valid body");
    assert!(chat.stream && chat.rewritten.is_some());

    let mut g = c.benchmark_group("request");
    let fields = head.windows(2).filter(|w| w == b"\r\n").count() - 2;
    g.bench_function(format!("parse_head_{}B_{fields}_fields", head.len()), |b| {
        b.iter(|| {
            let head = black_box(&head[..]);
            let len = HeadScanner::new()
                .scan(head, limits.max_head)
                .expect("valid")
                .expect("complete");
            parse_request_head(&head[..len], &limits).expect("valid")
        })
    });
    g.bench_function(format!("authenticate_{KEYS}_keys"), |b| {
        b.iter(|| {
            table
                .authenticate(Some(black_box(authorization.as_str())))
                .is_ok()
        })
    });
    g.bench_function(
        format!("validate_stream_{}B_rewrite", stream_body.len()),
        |b| b.iter(|| validate_chat_request(black_box(stream_body.as_bytes()), &catalog)),
    );
    // The body the load tests send: small, not streamed, forwarded as is.
    let small = SMALL_BODY.as_bytes();
    let chat = validate_chat_request(small, &catalog).expect("valid body");
    assert!(!chat.stream && chat.rewritten.is_none());
    g.bench_function(format!("validate_{}B_as_is", small.len()), |b| {
        b.iter(|| validate_chat_request(black_box(small), &catalog))
    });

    // The pair: a keep-alive client connection sending one non-streamed
    // request after another, the provider connection pooled. Limits are
    // high enough never to trigger.
    let body = chat_body(false);
    let mut pair = Pair::new(
        |_| {},
        SimOptions::default(),
        Limits {
            requests_per_minute: 1 << 40,
            tokens_per_minute: 1 << 40,
        },
    );
    let request = Pair::chat_request(&pair.key.clone(), &body);
    pair.client_send(&request);
    let r = parse_responses(&pair.received).expect("responses");
    assert_eq!((r.len(), r[0].status), (1, 200), "{:?}", r[0].json());
    assert_eq!(pair.ledger.len(), 1);
    g.bench_function(
        format!("pair_non_streamed_{}B_incl_simulator", request.len()),
        |b| {
            b.iter(|| {
                pair.received.clear();
                pair.ledger.clear();
                pair.ledger_at.clear();
                pair.upstream_sent.clear();
                pair.client_send(black_box(&request));
                assert!(!pair.received.is_empty());
            })
        },
    );
    g.finish();
    assert_eq!(
        pair.upstream_opened, 1,
        "the provider connection was reused"
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
