//! The cost of reading what a provider's answer says about itself: usage
//! and finish reason from a whole non-streamed answer (about 700 bytes, as
//! the simulated provider renders it), and the usage chunk near the end of
//! a streamed answer (tracked on its own).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use chatgate_core::StreamTracker;
use chatgate_core::parse_completion;
use chatgate_core::{Instant, WallClock};
use chatgate_sim::{SimConnection, SimOptions, SimServer};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// A non-streamed request: about 700 bytes of answer with its usage.
const ASK: &str = r#"{"model":"reasoning-model-k3","messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly."},{"role":"user","content":"What is the capital of France, and why is it the capital?"}],"max_tokens":512,"x_sim":{"reasoning_tokens":20,"answer_tokens":20}}"#;

/// The usage chunk of a streamed answer, as OpenAI-compatible providers
/// send it after the finish chunk (`choices` empty).
const USAGE_CHUNK: &[u8] = b"data: {\"id\":\"chatcmpl-9f8e7d6c5b4a39281706f5e4\",\"object\":\"chat.completion.chunk\",\"created\":1795305600,\"model\":\"reasoning-model-k3\",\"system_fingerprint\":\"fp_7c3a1e\",\"choices\":[],\"usage\":{\"prompt_tokens\":412,\"completion_tokens\":97,\"total_tokens\":509,\"prompt_tokens_details\":{\"cached_tokens\":256},\"completion_tokens_details\":{\"reasoning_tokens\":58}}}\n\n";

/// The simulator's answer body to [`ASK`].
fn answer() -> Vec<u8> {
    let server = SimServer::new(SimOptions::default(), WallClock::new(1_795_305_600_000));
    let mut c = SimConnection::new(Arc::clone(&server));
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Length: {}\r\n\r\n{ASK}",
        ASK.len()
    );
    let mut out = Vec::new();
    let mut now = Instant::ZERO;
    c.handle_data(now, request.as_bytes());
    loop {
        if let Some(bytes) = c.poll_transmit() {
            out.extend_from_slice(bytes);
            let n = bytes.len();
            c.handle_written(n);
        }
        match c.poll_timeout() {
            Some(at) => {
                now = at.max(now + Duration::from_millis(1));
                c.handle_timeout(now);
            }
            None => break,
        }
    }
    let head_end = memchr::memmem::find(&out, b"\r\n\r\n").expect("a response head") + 4;
    let head = String::from_utf8_lossy(&out[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .expect("a Content-Length answer")
        .trim()
        .parse()
        .expect("a length");
    out[head_end..head_end + length].to_vec()
}

fn bench(c: &mut Criterion) {
    let body = answer();
    // The answer is what it claims to be.
    let summary = parse_completion(&body).expect("a JSON object");
    assert_eq!(summary.finish_reason.as_deref(), Some("stop"));
    let usage = summary.usage.expect("usage");
    assert_eq!(usage.reasoning_tokens, 20);
    assert!(usage.prompt_tokens > 0 && usage.completion_tokens == 40);

    let mut g = c.benchmark_group("answer");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function(format!("parse_completion_{}B", body.len()), |b| {
        b.iter(|| parse_completion(black_box(&body)))
    });
    g.throughput(Throughput::Bytes(USAGE_CHUNK.len() as u64));
    g.bench_function(format!("tracker_usage_chunk_{}B", USAGE_CHUNK.len()), |b| {
        b.iter(|| {
            let mut t = StreamTracker::new();
            t.observe(black_box(USAGE_CHUNK));
            t
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
