//! Whole conversations through `harness::Pair` (client ↔ exchange ↔
//! simulated provider, virtual clock), driven by an operation sequence read
//! from the input: raw client bytes, well-formed chat requests with
//! parameters and simulator faults chosen by the input, client close, time
//! passing, connect failures, a client that stops reading, a provider that
//! closes its idle pooled connections.
//!
//! Invariants: no panic; what the client received parses as HTTP responses
//! (only the last may be cut short); statuses are ones the gateway uses;
//! at most one ledger line per request id, its status the one the client
//! saw, appended before the response's last byte; every request the
//! provider received is in the ledger once the connection closed; a closed
//! connection leaves no provider exchange in progress.
#![no_main]

use std::collections::HashSet;
use std::time::Duration;

use chatgate_core::UpstreamFailure;
use chatgate_testkit::{Pair, parse_response, parse_responses};
use chatgate_core::http::HttpError;
use chatgate_core::Limits;
use chatgate_sim::{ExchangeEnd, SimOptions};
use chatgate_fuzz::Reader;
use libfuzzer_sys::fuzz_target;

const MAX_OPS: usize = 24;

/// Every status the gateway answers with (and 499 in the ledger).
const STATUSES: [u16; 15] = [
    200, 400, 401, 404, 405, 408, 413, 417, 429, 431, 499, 502, 503, 504, 505,
];

const FAULTS: [&str; 15] = [
    "",
    "reject",
    "reset",
    "omit_done",
    "stall_headers",
    "stall",
    "garbage",
    "bad_chunk",
    "huge_event",
    "data_after_done",
    "heartbeat_after_finish",
    "error_event",
    "no_usage",
    "close_after_headers",
    "json_for_stream",
];

/// A well-formed request (mostly valid), shaped by input bytes.
fn chat_request(r: &mut Reader<'_>, key: &str) -> Vec<u8> {
    let flags = r.u16();
    let stream = flags & 1 != 0;
    let mut members = vec![
        format!(
            r#""model":"{}""#,
            if flags & 2 != 0 {
                "gpt-unknown"
            } else {
                "reasoning-model-k3"
            }
        ),
        format!(
            r#""messages":[{{"role":"system","content":"Be brief."}},{}{{"role":"user","content":"What is {} plus {}?"}}]"#,
            if flags & 4 != 0 {
                r#"{"role":"user","content":"hi"},{"role":"assistant","content":"Hello.","reasoning_content":"greet"},"#
            } else {
                ""
            },
            r.byte(),
            r.byte()
        ),
    ];
    if stream {
        members.push(r#""stream":true"#.into());
        if flags & 8 != 0 {
            members.push(r#""stream_options":{"include_usage":false}"#.into());
        }
    }
    if flags & 16 != 0 {
        members.push(format!(r#""max_tokens":{}"#, r.byte()));
    }
    if flags & 32 != 0 {
        members.push(r#""temperature":3"#.into());
    }
    let mut sim = vec![
        format!(r#""reasoning_tokens":{}"#, r.byte() % 24),
        format!(r#""answer_tokens":{}"#, r.byte() % 24),
    ];
    let fault = FAULTS[usize::from(r.byte()) % FAULTS.len()];
    if !fault.is_empty() {
        sim.push(format!(r#""fault":"{fault}""#));
        sim.push(format!(r#""after":{}"#, r.byte() % 8));
        sim.push(format!(
            r#""status":{}"#,
            [400, 401, 404, 429, 500, 503][usize::from(r.byte()) % 6]
        ));
        sim.push(format!(
            r#""bytes":{}"#,
            [600, 3000, 70_000][usize::from(r.byte()) % 3]
        ));
    }
    let timing = r.byte();
    sim.push(format!(
        r#""ttft_ms":{}"#,
        [0, 5, 700][usize::from(timing % 3)]
    ));
    sim.push(format!(
        r#""token_ms":{}"#,
        [0, 1, 40][usize::from(timing / 3 % 3)]
    ));
    if flags & 64 != 0 {
        sim.push(r#""framing":"close""#.into());
    }
    members.push(format!(r#""x_sim":{{{}}}"#, sim.join(",")));
    let body = format!("{{{}}}", members.join(","));

    let version = if flags & 128 != 0 { "1.0" } else { "1.1" };
    let mut head = format!(
        "POST /v1/chat/completions HTTP/{version}\r\nHost: gw\r\nContent-Type: application/json\r\n"
    );
    if flags & 256 == 0 {
        head.push_str(&format!("Authorization: Bearer {key}\r\n"));
    } else if flags & 512 != 0 {
        head.push_str(
            "Authorization: Bearer sk-cg-0000000000000000000000000000000000000000000\r\n",
        );
    }
    if flags & 1024 != 0 {
        head.push_str("Connection: close\r\n");
    }
    if flags & 2048 != 0 && version == "1.1" {
        head.push_str("Expect: 100-continue\r\n");
    }
    let mut out = head.into_bytes();
    if flags & 4096 != 0 && version == "1.1" {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
        let (a, b) = body.as_bytes().split_at(body.len() / 2);
        for part in [a, b] {
            out.extend_from_slice(format!("{:x};ext=1\r\n", part.len()).as_bytes());
            out.extend_from_slice(part);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
    } else {
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// Checks that hold after every operation.
fn check(pair: &Pair) {
    let mut ids = HashSet::new();
    for rec in &pair.ledger {
        assert!(
            STATUSES.contains(&rec.status),
            "ledger status {}",
            rec.status
        );
        assert!(
            ids.insert(rec.request_id.as_str()),
            "two ledger lines for {}",
            rec.request_id
        );
    }
    assert!(pair.ledger_at.windows(2).all(|w| w[0] <= w[1]));
    let journal = pair.sim.journal();
    let in_progress = journal
        .iter()
        .filter(|e| e.outcome == ExchangeEnd::InProgress)
        .count();
    assert!(
        in_progress <= 1,
        "{in_progress} provider exchanges in progress"
    );
    if pair.client_closed {
        assert_eq!(
            in_progress, 0,
            "closed, but the provider is still answering"
        );
        assert_eq!(pair.gateway.open_connections(), 0);
    }
}

/// Checks on the whole conversation.
fn check_responses(pair: &Pair) {
    match parse_responses(&pair.received) {
        Ok(_) | Err(HttpError::Truncated) => {}
        Err(e) => panic!("the client received malformed HTTP: {e:?}"),
    }
    // Response by response, with where each ended. Without EOF, a body
    // delimited by the close of the connection never counts as complete:
    // truncation cannot be told from the end.
    let mut pos = 0;
    let mut ids = HashSet::new();
    while pos < pair.received.len() {
        let (response, used) = match parse_response(&pair.received[pos..], false) {
            Ok(Some(r)) => r,
            // A head cut short: the last response.
            Ok(None) => break,
            Err(e) => panic!("the client received malformed HTTP: {e:?}"),
        };
        pos += used;
        let status = response.status;
        assert!(STATUSES.contains(&status), "response status {status}");
        let id = response
            .header("x-request-id")
            .expect("every response has an id");
        assert!(ids.insert(id.to_owned()), "two responses with id {id}");
        if let Some(at) = pair.ledger.iter().position(|r| r.request_id == id) {
            let rec = &pair.ledger[at];
            if !rec.client_disconnected {
                assert_eq!(rec.status, status, "ledger status for {id}");
            }
            if response.complete {
                assert!(
                    pair.ledger_at[at] < pos,
                    "the response of {id} was complete before its ledger line: {rec:?} at {} of {pos}",
                    pair.ledger_at[at],
                );
            }
        }
        if !response.complete {
            assert_eq!(
                pos,
                pair.received.len(),
                "a response after an incomplete one"
            );
            break;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let config = r.byte();
    let limits = if config & 1 != 0 {
        Limits {
            requests_per_minute: 2,
            tokens_per_minute: 400,
        }
    } else {
        Limits::default()
    };
    let mut pair = Pair::new(
        |c| {
            if config & 2 != 0 {
                c.max_sse_event = 700;
            }
            if config & 4 != 0 {
                c.max_upstream_body = 1500;
            }
            if config & 8 != 0 {
                c.http.max_body = 600;
                c.http.max_head = 300;
            }
        },
        SimOptions::default(),
        limits,
    );
    let key = pair.key.clone();
    for _ in 0..MAX_OPS {
        if r.is_empty() {
            break;
        }
        match r.byte() % 8 {
            0 | 1 => {
                let n = usize::from(r.byte());
                let bytes = r.take(n);
                pair.client_send(bytes);
            }
            2 | 3 => {
                let req = chat_request(&mut r, &key);
                let at = usize::from(r.u16()) % (req.len() + 1);
                pair.client_send(&req[..at]);
                pair.client_send(&req[at..]);
            }
            4 => pair.client_close(),
            5 => {
                let n = u64::from(r.byte());
                let ms = match r.byte() % 4 {
                    0 => n,
                    1 => n * 10,
                    2 => n * 100,
                    _ => n * 1000,
                };
                pair.advance(Duration::from_millis(ms));
            }
            6 => {
                let why = "injected".to_owned();
                pair.connect_failures.push_back(match r.byte() % 4 {
                    0 => UpstreamFailure::Resolve(why),
                    1 => UpstreamFailure::Connect(why),
                    2 => UpstreamFailure::Tls(why),
                    _ => UpstreamFailure::Broken(why),
                });
            }
            _ => match r.byte() % 5 {
                0 => pair.client_stops_reading = !pair.client_stops_reading,
                1 => pair.client_send(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n"),
                2 => {
                    let req = format!(
                        "GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n"
                    );
                    pair.client_send(req.as_bytes());
                }
                3 => pair.client_send(b"\r\n"),
                _ => pair.close_idle_upstreams(),
            },
        }
        check(&pair);
    }
    check_responses(&pair);
    // However it ended, the client leaving closes everything.
    pair.client_close();
    assert!(pair.client_closed, "the connection outlived the client");
    check(&pair);
    check_responses(&pair);
    // The provider sees each request's own UUID, which its ledger line
    // names (and which derives from the client's id).
    let ledger: HashSet<String> = pair
        .ledger
        .iter()
        .flat_map(|r| {
            if let Some(id) = r.provider_request_id.as_deref() {
                assert_eq!(id, chatgate_core::provider_request_id(&r.request_id, r.attempts));
            }
            (1..=r.attempts).map(|a| chatgate_core::provider_request_id(&r.request_id, a))
        })
        .collect();
    for entry in pair.sim.journal() {
        let id = entry.request_id.expect("the gateway sends X-Request-Id");
        assert!(
            ledger.contains(id.as_str()),
            "{id} reached the provider but is not in the ledger"
        );
    }
});
