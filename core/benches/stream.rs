//! Throughput of the streaming path: the SSE framer alone, the framer with
//! the stream tracker on every event, and both fed in TCP-segment-sized
//! pieces into a buffer drained as a runtime does.
//!
//! The stream imitates a reasoning model's answer as OpenAI-compatible
//! providers send it with `include_usage`: a first delta with the role and
//! `reasoning_content`, more `reasoning_content` deltas, `content` deltas,
//! every chunk carrying `"finish_reason":null` and `"usage":null`, then a
//! finish chunk, a usage chunk with empty `choices`, and `[DONE]`.

use std::hint::black_box;

use chatgate_core::SseFramer;
use chatgate_core::StreamTracker;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

/// Reasoning deltas, then content deltas (with the finish, usage and
/// `[DONE]` events: 100 in all).
const REASONING_EVENTS: usize = 58;
const CONTENT_EVENTS: usize = 39;
/// A typical TCP segment payload.
const SEGMENT: usize = 1460;

const WORDS: [&str; 16] = [
    " consider",
    " the",
    " question",
    " carefully",
    " then",
    " weigh",
    " each",
    " option",
    " against",
    " what",
    " is",
    " known",
    " so",
    " far",
    " and",
    " check",
];

/// One chunk with its members in the order OpenAI-compatible providers
/// write them (serde_json's `json!` would sort them alphabetically, which no
/// provider does): id, object, created, model, system_fingerprint, choices
/// (index, delta, logprobs, finish_reason), usage.
fn chunk(delta: Value, finish: Value, usage: Value, choices: bool) -> String {
    let choices = if choices {
        format!(r#"[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]"#)
    } else {
        "[]".to_owned()
    };
    format!(
        "data: {{\"id\":\"chatcmpl-9f8e7d6c5b4a39281706f5e4\",\"object\":\"chat.completion.chunk\",\"created\":1795305600,\
         \"model\":\"reasoning-model-k3\",\"system_fingerprint\":\"fp_7c3a1e\",\"choices\":{choices},\"usage\":{usage}}}\n\n"
    )
}

/// About 22 KB: 100 events.
fn reasoning_stream() -> Vec<u8> {
    let mut out = String::new();
    let word = |i: usize| WORDS[i % WORDS.len()];
    out += &chunk(
        json!({"role": "assistant", "content": null, "reasoning_content": "Let"}),
        Value::Null,
        Value::Null,
        true,
    );
    for i in 1..REASONING_EVENTS {
        out += &chunk(
            json!({"reasoning_content": word(i)}),
            Value::Null,
            Value::Null,
            true,
        );
    }
    for i in 0..CONTENT_EVENTS {
        out += &chunk(
            json!({"content": word(i * 7)}),
            Value::Null,
            Value::Null,
            true,
        );
    }
    out += &chunk(json!({}), json!("stop"), Value::Null, true);
    out += &chunk(
        Value::Null,
        Value::Null,
        json!({
            "prompt_tokens": 412,
            "completion_tokens": 97,
            "total_tokens": 509,
            "prompt_tokens_details": {"cached_tokens": 256},
            "completion_tokens_details": {"reasoning_tokens": 58}
        }),
        false,
    );
    out += "data: [DONE]\n\n";
    out.into_bytes()
}

/// Frames the whole buffer; returns the number of events.
fn frame(stream: &[u8]) -> usize {
    let mut framer = SseFramer::new(1 << 20);
    let mut n = 0;
    while let Some(r) = framer.next_event(stream).expect("within the cap") {
        black_box(r);
        n += 1;
    }
    n + usize::from(framer.finish().expect("within the cap").is_some())
}

/// Frames the whole buffer and tracks every event.
fn frame_and_track(stream: &[u8]) -> StreamTracker {
    let mut framer = SseFramer::new(1 << 20);
    let mut tracker = StreamTracker::new();
    while let Some(r) = framer.next_event(stream).expect("within the cap") {
        tracker.observe(&stream[r]);
    }
    tracker
}

/// Feeds `segment`-byte reads into a buffer, tracks and "forwards" complete
/// events, and drops them from the buffer, as the exchange does.
fn segmented(stream: &[u8], segment: usize, track: bool) -> StreamTracker {
    let mut framer = SseFramer::new(1 << 20);
    let mut tracker = StreamTracker::new();
    let mut buf = Vec::with_capacity(4 * segment);
    for read in stream.chunks(segment) {
        buf.extend_from_slice(read);
        while let Some(r) = framer.next_event(&buf).expect("within the cap") {
            let event = &buf[r];
            if track {
                tracker.observe(event);
            }
            black_box(event);
        }
        let done = framer.complete_prefix();
        buf.drain(..done);
        framer.consume(done);
    }
    tracker
}

fn bench(c: &mut Criterion) {
    let stream = reasoning_stream();
    // The stream is what it claims to be.
    assert_eq!(frame(&stream), REASONING_EVENTS + CONTENT_EVENTS + 3);
    let t = frame_and_track(&stream);
    assert!(t.is_done() && t.finish_reason() == Some("stop"));
    assert_eq!(t.usage().map(|u| u.prompt_tokens), Some(412));
    assert_eq!(segmented(&stream, SEGMENT, true).usage(), t.usage());

    let mut g = c.benchmark_group(format!("stream_{}B_{}ev", stream.len(), frame(&stream)));
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("framer", |b| b.iter(|| frame(black_box(&stream))));
    g.bench_function("framer+tracker", |b| {
        b.iter(|| frame_and_track(black_box(&stream)))
    });
    g.bench_function("framer_1460B_reads", |b| {
        b.iter(|| segmented(black_box(&stream), SEGMENT, false))
    });
    g.bench_function("framer+tracker_1460B_reads", |b| {
        b.iter(|| segmented(black_box(&stream), SEGMENT, true))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
