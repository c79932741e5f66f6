//! The end of a provider stream after `[DONE]`: the connection is read to
//! its last chunk before it is pooled, within a bound, and whatever comes
//! meanwhile never reaches the client.

use std::time::Duration;

use chatgate_core::LedgerRecord;
use chatgate_core::http::{BodyDecoder, HeadScanner, HttpLimits};
use chatgate_testkit::{ClientResponse, Pair, ProviderScript, UpstreamReads, sse_data};

use crate::common::{one, responses, send, stream_body};

/// A streamed answer as a provider sends it in chunked framing, up to and
/// including the `[DONE]` chunk but without the last chunk (`0\r\n\r\n`).
fn stream_without_last_chunk() -> Vec<u8> {
    let events = [
        r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"4"},"finish_reason":null}]}"#,
        r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#,
        "data: [DONE]",
    ];
    let mut out =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for e in events {
        out.extend_from_slice(&chunk(format!("{e}\n\n").as_bytes()));
    }
    out
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// A pair whose provider answers every request with
/// [`stream_without_last_chunk`] and then waits.
fn draining_pair(reads: UpstreamReads) -> Pair {
    let mut pair = Pair::with_defaults();
    pair.upstream_reads = reads;
    pair.provider_script = Some(ProviderScript {
        answer: stream_without_last_chunk(),
        close: false,
    });
    pair
}

/// Opened, reused and closed provider connections.
fn pool_counts(pair: &Pair) -> (u32, u32, u32) {
    (
        pair.upstream_opened,
        pair.upstream_reused,
        pair.upstream_closed,
    )
}

/// The client's answer to the scripted stream: complete, metered, ended.
fn assert_streamed_answer(r: &ClientResponse, rec: &LedgerRecord) {
    assert_eq!(r.status, 200);
    assert!(r.complete, "the last chunk went out to the client");
    let data = sse_data(&r.body);
    assert_eq!(data.len(), 4);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert_eq!((rec.status, rec.complete), (200, true));
    assert_eq!((rec.prompt_tokens, rec.completion_tokens), (12, 3));
}

#[test]
fn a_last_chunk_that_comes_after_done_returns_the_connection_to_the_pool() {
    let tails: [&[&[u8]]; 3] = [
        &[b"0\r\n\r\n"],
        &[b"0\r", b"\n\r", b"\n"],
        &[b"0\r\nX-Trailer: 1\r\n", b"\r\n"],
    ];
    for tail in tails {
        for reads in [UpstreamReads::Whole, UpstreamReads::AtMost(5)] {
            let mut pair = draining_pair(reads);
            send(&mut pair, &stream_body(""));
            // The client has its whole answer (and the ledger its line) at
            // once; the provider connection is still read for its end.
            assert_streamed_answer(&one(&pair), &pair.ledger[0]);
            assert_eq!(pool_counts(&pair), (1, 0, 0));
            let conn = pair.connection().expect("client connection open");
            assert!(conn.wants_upstream_read());
            assert_eq!(
                conn.poll_timeout(),
                Some(pair.now + Duration::from_secs(1)),
                "the drain deadline comes before the idle timeout"
            );
            pair.advance(Duration::from_millis(500));
            let received = pair.received.len();
            for piece in tail {
                assert!(pair.provider_sends(piece));
            }
            assert_eq!(pair.received.len(), received, "nothing more for the client");
            assert_eq!(pool_counts(&pair), (1, 0, 0), "pooled, not closed");
            assert!(!pair.connection().unwrap().wants_upstream_read());
            // The next request reuses it.
            send(&mut pair, &stream_body(""));
            let rs = responses(&pair);
            assert_eq!(rs.len(), 2, "{tail:?} {reads:?}");
            assert_streamed_answer(&rs[1], &pair.ledger[1]);
            assert_eq!(pool_counts(&pair), (1, 1, 0), "{tail:?} {reads:?}");
            // Its answer drains the same way.
            for piece in tail {
                assert!(pair.provider_sends(piece));
            }
            // Nothing is left to time out but the idle keep-alive.
            pair.advance(Duration::from_secs(2));
            assert_eq!(pool_counts(&pair), (1, 1, 0));
            assert!(!pair.client_closed);
        }
    }
}

#[test]
fn a_last_chunk_that_never_comes_closes_the_connection_after_the_drain_bound() {
    let mut pair = draining_pair(UpstreamReads::Whole);
    send(&mut pair, &stream_body(""));
    assert_streamed_answer(&one(&pair), &pair.ledger[0]);
    let received = pair.received.len();
    pair.advance(Duration::from_millis(999));
    assert_eq!(pool_counts(&pair), (1, 0, 0));
    pair.advance(Duration::from_millis(1));
    assert_eq!(pool_counts(&pair), (1, 0, 1), "closed at the bound");
    assert_eq!(pair.received.len(), received);
    assert!(!pair.client_closed, "the client connection stays open");
    assert!(!pair.connection().unwrap().wants_upstream_read());
    // A last chunk that comes now is not read: the connection is gone.
    assert!(!pair.provider_sends(b"0\r\n\r\n"));
    // The next request opens a new connection.
    send(&mut pair, &stream_body(""));
    let rs = responses(&pair);
    assert_eq!(rs.len(), 2);
    assert_streamed_answer(&rs[1], &pair.ledger[1]);
    assert_eq!(pool_counts(&pair), (2, 0, 1));
}

#[test]
fn data_after_done_closes_the_provider_connection() {
    // In the same read as `[DONE]` (and the last chunk): closed at once.
    for reads in [UpstreamReads::Whole, UpstreamReads::AtMost(3)] {
        let mut pair = Pair::with_defaults();
        pair.upstream_reads = reads;
        send(
            &mut pair,
            &stream_body(r#""x_sim":{"fault":"data_after_done"}"#),
        );
        let data = sse_data(&one(&pair).body);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
        assert!(!data.iter().any(|d| d.contains("late")));
        assert_eq!(pool_counts(&pair), (1, 0, 1), "{reads:?}");
        send(&mut pair, &stream_body(""));
        assert_eq!(responses(&pair).len(), 2);
        assert_eq!(pool_counts(&pair), (2, 0, 1), "{reads:?}");
    }
    // While the connection is drained: an event, a lone body byte, broken
    // framing, or (in the read that ends the body) bytes after its end.
    // None of it reaches the client and the connection is closed.
    let late: [(&[u8], bool); 4] = [
        (
            &chunk(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"}}]}\n\n"),
            true,
        ),
        (b"1\r\n\n\r\n0\r\n\r\n", true),
        (b"zz\r\n", true),
        // Read apart, the end comes first and the connection is pooled, as
        // after any complete response.
        (b"0\r\n\r\nHTTP/1.1 200 OK\r\n", false),
    ];
    for (bytes, however_read) in late {
        let splits: &[UpstreamReads] = if however_read {
            &[UpstreamReads::Whole, UpstreamReads::AtMost(1)]
        } else {
            &[UpstreamReads::Whole]
        };
        for &reads in splits {
            let mut pair = draining_pair(reads);
            send(&mut pair, &stream_body(""));
            let received = pair.received.clone();
            assert!(pair.provider_sends(bytes));
            assert_eq!(pair.received, received, "{bytes:?}");
            assert_streamed_answer(&one(&pair), &pair.ledger[0]);
            assert_eq!(pool_counts(&pair), (1, 0, 1), "{bytes:?} {reads:?}");
            assert!(!pair.client_closed);
            send(&mut pair, &stream_body(""));
            assert_eq!(responses(&pair).len(), 2);
            assert_eq!(pool_counts(&pair), (2, 0, 1), "{bytes:?} {reads:?}");
        }
    }
    // `Content-Length` framing: a body that ends with `[DONE]` is pooled at
    // once; one that announced more bytes holds data after `[DONE]`.
    let body = &stream_without_last_chunk();
    let head_len = HeadScanner::new().scan(body, 65536).unwrap().unwrap();
    let mut events = Vec::new();
    BodyDecoder::new(chatgate_core::http::Framing::Chunked, HttpLimits::default())
        .decode(&body[head_len..], &mut events)
        .unwrap();
    for (extra, counts) in [(0, (1, 1, 0)), (5, (2, 0, 2))] {
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n",
            events.len() + extra
        )
        .into_bytes();
        answer.extend_from_slice(&events);
        let mut pair = Pair::with_defaults();
        pair.provider_script = Some(ProviderScript {
            answer,
            close: false,
        });
        send(&mut pair, &stream_body(""));
        send(&mut pair, &stream_body(""));
        let rs = responses(&pair);
        assert_eq!(rs.len(), 2);
        assert_streamed_answer(&rs[1], &pair.ledger[1]);
        assert_eq!(pool_counts(&pair), counts, "{extra} more bytes announced");
    }
}

#[test]
fn the_next_request_does_not_wait_for_a_drain() {
    // Sent after the answer, while the last chunk has not come: it gets
    // another provider connection at once.
    let mut pair = draining_pair(UpstreamReads::Whole);
    send(&mut pair, &stream_body(""));
    send(&mut pair, &stream_body(""));
    let rs = responses(&pair);
    assert_eq!(rs.len(), 2);
    assert_streamed_answer(&rs[1], &pair.ledger[1]);
    assert_eq!(pool_counts(&pair), (2, 0, 1));
    // Pipelined in one write with the first.
    let mut pair = draining_pair(UpstreamReads::AtMost(7));
    let mut two = Pair::chat_request(&pair.key, &stream_body(""));
    two.extend_from_slice(&Pair::chat_request(&pair.key, &stream_body("")));
    pair.client_send(&two);
    let rs = responses(&pair);
    assert_eq!(rs.len(), 2);
    assert_streamed_answer(&rs[0], &pair.ledger[0]);
    assert_streamed_answer(&rs[1], &pair.ledger[1]);
    assert_eq!(pool_counts(&pair), (2, 0, 1));
    // A request that needs no provider leaves the drain alone.
    let mut pair = draining_pair(UpstreamReads::Whole);
    send(&mut pair, &stream_body(""));
    let key = pair.key.clone();
    pair.client_send(
        format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(responses(&pair)[1].status, 200);
    assert!(pair.provider_sends(b"0\r\n\r\n"));
    send(&mut pair, &stream_body(""));
    assert_eq!(responses(&pair).len(), 3);
    assert_eq!(pool_counts(&pair), (1, 1, 0));
}

#[test]
fn a_drained_connection_closes_with_the_client_or_the_provider() {
    // The client leaves: the drained connection is closed before it.
    let mut pair = draining_pair(UpstreamReads::Whole);
    send(&mut pair, &stream_body(""));
    pair.client_close();
    assert!(pair.client_closed);
    assert_eq!(pool_counts(&pair), (1, 0, 1));
    assert_eq!(pair.ledger.len(), 1, "the answer was metered once");
    assert!(!pair.ledger[0].client_disconnected);
    // The client asked to close after the answer: same.
    let mut pair = draining_pair(UpstreamReads::Whole);
    let req = String::from_utf8(Pair::chat_request(&pair.key, &stream_body("")))
        .unwrap()
        .replacen("Host: gw\r\n", "Host: gw\r\nConnection: close\r\n", 1);
    pair.client_send(req.as_bytes());
    assert_streamed_answer(&one(&pair), &pair.ledger[0]);
    assert!(pair.client_closed);
    assert_eq!(pool_counts(&pair), (1, 0, 1));
    // The provider closes instead of sending the last chunk: nothing for
    // the client, and the next request opens a new connection.
    let mut pair = draining_pair(UpstreamReads::Whole);
    pair.provider_script.as_mut().unwrap().close = true;
    send(&mut pair, &stream_body(""));
    assert_streamed_answer(&one(&pair), &pair.ledger[0]);
    assert!(!pair.client_closed);
    assert!(!pair.connection().unwrap().wants_upstream_read());
    send(&mut pair, &stream_body(""));
    assert_eq!(responses(&pair).len(), 2);
    assert_eq!((pair.upstream_opened, pair.upstream_reused), (2, 0));
    // Shutdown while a drain is pending: the idle client connection closes,
    // and the drained one with it.
    let mut pair = draining_pair(UpstreamReads::Whole);
    send(&mut pair, &stream_body(""));
    pair.shutdown();
    assert!(pair.client_closed);
    assert_eq!(pool_counts(&pair), (1, 0, 1));
}

/// Pieces of what a provider might send after `[DONE]`: the end of the
/// framing, trailers, chunks, and anything at all.
fn after_done_piece() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    prop_oneof![
        Just(b"0".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"X-Trailer: 1".to_vec()),
        Just(b"3;ext=1\r\nabc\r\n".to_vec()),
        Just(b"data: [DONE]\n\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..8),
    ]
}

/// What a provider sends after `[DONE]`, in pieces: anything, or the end of
/// the framing (with trailers), cut short or followed by anything.
fn after_done() -> impl proptest::strategy::Strategy<Value = Vec<Vec<u8>>> {
    use proptest::prelude::*;
    let end = (
        0usize..3,
        any::<proptest::sample::Index>(),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..4),
    )
        .prop_map(|(trailers, cut, whole, noise)| {
            let mut end = b"0\r\n".to_vec();
            for _ in 0..trailers {
                end.extend_from_slice(b"X-Trailer: 1\r\n");
            }
            end.extend_from_slice(b"\r\n");
            if !whole {
                end.truncate(cut.index(end.len()));
            }
            vec![end, noise]
        });
    prop_oneof![proptest::collection::vec(after_done_piece(), 0..10), end]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Whatever comes while a connection is drained, however it is read:
    /// nothing reaches the client, nothing panics, the connection is pooled
    /// exactly when only the end of the framing came, closed when anything
    /// else came before that end, and the next request is answered.
    #[test]
    fn whatever_comes_while_draining_never_reaches_the_client(
        pieces in after_done(),
        read in 1usize..12,
    ) {
        let sent = pieces.concat();
        // The model: a chunked decoder at a chunk boundary, as the drain's.
        let mut model = BodyDecoder::new(
            chatgate_core::http::Framing::Chunked,
            HttpLimits { max_body: u64::MAX, ..HttpLimits::default() },
        );
        let mut body = Vec::new();
        let decoded = model.decode(&sent, &mut body);
        let mut pair = draining_pair(UpstreamReads::AtMost(read));
        send(&mut pair, &stream_body(""));
        let received = pair.received.clone();
        for piece in &pieces {
            // False once the connection was pooled or closed.
            let _ = pair.provider_sends(piece);
        }
        proptest::prop_assert_eq!(&pair.received, &received);
        let counts = pool_counts(&pair);
        let draining = pair.connection().unwrap().wants_upstream_read();
        match decoded {
            Ok(used) if body.is_empty() && model.is_done() => {
                if used == sent.len() {
                    proptest::prop_assert_eq!(counts, (1, 0, 0));
                    proptest::prop_assert!(!draining);
                } else {
                    // Bytes after the end are seen only in the same read.
                    proptest::prop_assert!(!draining);
                }
            }
            Ok(_) if body.is_empty() => {
                proptest::prop_assert_eq!(counts, (1, 0, 0));
                proptest::prop_assert!(draining);
            }
            _ => {
                proptest::prop_assert_eq!(counts, (1, 0, 1));
                proptest::prop_assert!(!draining);
            }
        }
        pair.advance(Duration::from_secs(1));
        proptest::prop_assert!(!pair.connection().unwrap().wants_upstream_read());
        let pooled = pair.upstream_closed == 0;
        send(&mut pair, &stream_body(""));
        let rs = responses(&pair);
        proptest::prop_assert_eq!(rs.len(), 2);
        assert_streamed_answer(&rs[1], &pair.ledger[1]);
        proptest::prop_assert_eq!(pair.upstream_reused, u32::from(pooled));
    }
}
