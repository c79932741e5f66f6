//! Hostile clients, broken providers and crashes, through both binaries.
//!
//! Every case runs against every runtime. The heavy ones (a thousand
//! slowloris connections, ten thousand idle ones) hold a lock so that they
//! never overlap. Figures are printed on lines starting with `figure:`
//! (`cargo test -p chatgate-tests --test reliability -- --nocapture`);
//! nothing here asserts a duration.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chatgate_testkit::parse_response;
use chatgate_tests::*;

cases!(
    slowloris_does_not_starve_other_clients,
    ten_thousand_idle_keep_alive_connections,
    over_the_connection_limit_at_concurrency,
    oversized_heads_and_bodies_at_concurrency,
    smuggling_corpus_is_rejected_and_closed,
    hostile_json_and_random_bytes,
    broken_providers,
    unreachable_providers,
    sigkill_under_load_loses_nothing_delivered,
    sigterm_with_streams_in_flight,
    an_unwritable_ledger_withholds_every_answer,
);

static HEAVY: Mutex<()> = Mutex::new(());

fn heavy() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

/// A gateway whose test key is never rate limited, with extra flags.
fn gateway(bin: &str, upstream: &str, extra: &[&str]) -> Gw {
    Gw::start(
        bin,
        upstream,
        GwOptions {
            args: args(extra),
            rpm: Some(100_000_000),
            tpm: Some(1_000_000_000_000),
            ..GwOptions::default()
        },
    )
}

/// Reads what the peer still sends until it closes; `Err` on a reset,
/// and when nothing ends within the read timeout.
fn read_to_close(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b)? {
            0 => return Ok(out),
            n => out.extend_from_slice(&b[..n]),
        }
    }
}

fn assert_no_secrets(gw: &Gw, also: &[&str]) {
    let log = gw.proc.stderr();
    for needle in std::iter::once(gw.key.as_str()).chain(also.iter().copied()) {
        assert!(!log.contains(needle), "the log contains {needle:?}");
    }
}

/// Makes room for `needed` open files in this process and the gateways it
/// starts (children inherit the limit): the soft limit goes up to the hard
/// one, and, where that is too low, the hard limit itself (allowed as root).
/// A machine that cannot give that many fails the test instead of quietly
/// testing fewer connections.
fn descriptors_for(needed: u64) {
    if raise_fd_limit() >= needed {
        return;
    }
    // SAFETY: setrlimit only reads the struct passed.
    unsafe {
        let l = libc::rlimit {
            rlim_cur: needed,
            rlim_max: needed,
        };
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
    }
    let limit = raise_fd_limit();
    assert!(
        limit >= needed,
        "this test needs {needed} open files and the limit is {limit}: raise it (ulimit -Hn, or run as root)"
    );
}

// ---------------------------------------------------------------------------
// Hostile clients

fn slowloris_does_not_starve_other_clients(bin: &str) {
    let _g = heavy();
    let n: usize = 1000;
    descriptors_for(n as u64 + 200);
    let sim = Sim::start(bin, &[], &[]);
    let gw = gateway(bin, &sim.url(), &["--client-header-timeout", "3s"]);
    let mut slow: Vec<TcpStream> = (0..n)
        .map(|_| TcpStream::connect(gw.addr).expect("connect"))
        .collect();
    // One byte a second on every connection, from one thread.
    let stop = Arc::new(AtomicBool::new(false));
    let dribbler = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let head =
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: slow\r\nX-Pad: aaaaaaaaaaaaaaaa";
            let mut i = 0;
            let mut writes_failed = 0;
            let mut open = vec![true; slow.len()];
            while !stop.load(Ordering::Relaxed) {
                for (k, s) in slow.iter_mut().enumerate() {
                    if open[k] && s.write_all(&head[i % head.len()..][..1]).is_err() {
                        open[k] = false;
                        writes_failed += 1;
                    }
                }
                i += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
            (slow, writes_failed)
        })
    };
    // Normal clients are served while the slow ones hold their sockets.
    let started = Instant::now();
    let mut served = 0;
    while started.elapsed() < Duration::from_secs(2) {
        let r = gw.chat(&body(""));
        assert_eq!(r.status, 200, "a normal client was not served");
        served += 1;
    }
    // Past the header timeout every slow connection has been cut.
    std::thread::sleep(Duration::from_millis(2500));
    stop.store(true, Ordering::Relaxed);
    let (mut slow, _) = dribbler.join().expect("dribbler");
    let (mut answered_408, mut reset) = (0, 0);
    for s in &mut slow {
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        match read_to_close(s) {
            Ok(bytes) => {
                assert!(bytes.starts_with(b"HTTP/1.1 408 "), "{bytes:?}");
                answered_408 += 1;
            }
            // Our own later byte can make the peer answer with a reset;
            // a connection still open would time out instead.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => reset += 1,
            Err(e) => panic!("a slow connection was not cut: {e}"),
        }
    }
    assert_eq!(answered_408 + reset, n);
    let r = gw.chat(&body(""));
    assert_eq!(r.status, 200);
    println!(
        "figure: {bin} slowloris: {n} connections at a byte a second; {served} normal requests served meanwhile; {answered_408} cut with 408, {reset} reset"
    );
    assert_no_secrets(&gw, &["What is two plus two?"]);
}

fn ten_thousand_idle_keep_alive_connections(bin: &str) {
    let _g = heavy();
    let n: usize = 10_000;
    descriptors_for(n as u64 + 300);
    let sim = Sim::start(bin, &[], &[]);
    let max = (n + 100).to_string();
    let gw = gateway(bin, &sim.url(), &["--max-connections", &max]);
    let rss_before = rss_kib(gw.proc.pid());
    let req = raw_request("GET", "/v1/models", Some(&gw.key), None);
    let mut idle = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = Conn::open(gw.addr);
        c.send(&req);
        assert_eq!(c.response().status, 200);
        idle.push(c);
    }
    let rss_with = rss_kib(gw.proc.pid());
    // A new client is served, streams included.
    let r = gw.chat(&stream_body(""));
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    // The idle connections are still open and usable.
    for c in idle.iter_mut().step_by(100) {
        c.send(&req);
        assert_eq!(c.response().status, 200);
    }
    println!(
        "figure: {bin} idle keep-alive: {n} connections open, RSS {} KiB -> {} KiB ({:.1} KiB each)",
        rss_before,
        rss_with,
        (rss_with.saturating_sub(rss_before)) as f64 / n as f64
    );
    drop(idle);
    let mut gw = gw;
    assert!(gw.alive());
}

fn over_the_connection_limit_at_concurrency(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = gateway(bin, &sim.url(), &["--max-connections", "16"]);
    let clients = 64;
    let barrier = Arc::new(Barrier::new(clients + 1));
    let (addr, key) = (gw.addr, gw.key.clone());
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (barrier, key) = (Arc::clone(&barrier), key.clone());
            std::thread::spawn(move || {
                let mut c = Conn::open(addr);
                c.send(&raw_request("GET", "/v1/models", Some(&key), None));
                let r = c.response();
                if r.status == 503 {
                    assert_eq!(r.json()["error"]["code"], "server_overloaded");
                    assert!(c.closed(), "a refused connection stays open");
                }
                // Admitted connections stay open until every client is done.
                barrier.wait();
                r.status
            })
        })
        .collect();
    barrier.wait();
    let statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 503).count();
    assert_eq!(ok + refused, clients, "{statuses:?}");
    assert!((1..=16).contains(&ok), "{ok} admitted over a limit of 16");
    eventually("capacity returns", || {
        request(gw.addr, "GET", "/v1/models", Some(&gw.key), None).status == 200
    });
    assert!(gw.alive());
    println!(
        "figure: {bin} connection limit 16: {clients} at once, {ok} served, {refused} got 503"
    );
}

fn oversized_heads_and_bodies_at_concurrency(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = gateway(bin, &sim.url(), &[]);
    let (addr, key) = (gw.addr, gw.key.clone());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let key = key.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                for i in 0..12 {
                    let (raw, want) = match (t + i) % 3 {
                        0 => {
                            let mut h = format!(
                                "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                            );
                            h.push_str(&format!("X-Big: {}\r\n\r\n", "a".repeat(70_000)));
                            (h.into_bytes(), 431)
                        }
                        1 => (
                            format!(
                                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: 3000000\r\n\r\n"
                            )
                            .into_bytes(),
                            413,
                        ),
                        _ => {
                            // Chunked: counted while decoding, cut at 2 MiB.
                            let mut b = format!(
                                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                            )
                            .into_bytes();
                            let chunk = vec![b' '; 65536];
                            for _ in 0..33 {
                                b.extend_from_slice(b"10000\r\n");
                                b.extend_from_slice(&chunk);
                                b.extend_from_slice(b"\r\n");
                            }
                            b.extend_from_slice(b"0\r\n\r\n");
                            (b, 413)
                        }
                    };
                    let r = try_exchange(addr, &raw).expect("an answer");
                    assert_eq!(r.status, want);
                    assert_eq!(r.header("connection"), Some("close"));
                    seen.push(r.status);
                }
                seen.len()
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 96);
    assert_eq!(gw.chat(&body("")).status, 200);
    assert!(gw.alive());
    let rss = rss_kib(gw.proc.pid());
    println!(
        "figure: {bin} oversized: {total} requests (431/413, 8 at a time), RSS after {rss} KiB"
    );
}

fn smuggling_corpus_is_rejected_and_closed(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = gateway(bin, &sim.url(), &[]);
    let auth = format!("Authorization: Bearer {}\r\n", gw.key);
    let post = format!("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n{auth}");
    let json = body("");
    // Each is followed by a request that must never be answered.
    let smuggled = "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n";
    let corpus: Vec<(&str, String)> = vec![
        (
            "Content-Length with Transfer-Encoding",
            format!("{post}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ),
        (
            "differing duplicate Content-Length",
            format!("{post}Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello"),
        ),
        (
            "Content-Length with a sign",
            format!("{post}Content-Length: +5\r\n\r\nhello"),
        ),
        (
            "Content-Length in hex",
            format!("{post}Content-Length: 0x5\r\n\r\nhello"),
        ),
        (
            "Transfer-Encoding other than chunked",
            format!("{post}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ),
        (
            "obs-fold",
            format!("{post}X-A: a\r\n  folded\r\nContent-Length: 0\r\n\r\n"),
        ),
        (
            "space before the colon",
            format!("{post}Content-Length : 5\r\n\r\nhello"),
        ),
        (
            "bad chunk size",
            format!("{post}Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"),
        ),
        (
            "chunk size overflow",
            format!(
                "{post}Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\nhello\r\n0\r\n\r\n"
            ),
        ),
        (
            "chunk data without its CRLF",
            format!(
                "{post}Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{json}XX0\r\n\r\n",
                json.len()
            ),
        ),
        (
            "bare LF line endings",
            format!("GET /v1/models HTTP/1.1\nHost: gw\n{}\n", auth.trim_end()),
        ),
        (
            "NUL in a header value",
            format!("GET /v1/models HTTP/1.1\r\nHost: g\0w\r\n{auth}\r\n"),
        ),
        (
            "NUL in the request target",
            format!("GET /v1/mo\0dels HTTP/1.1\r\nHost: gw\r\n{auth}\r\n"),
        ),
        (
            "bare CR in a header value",
            format!("GET /v1/models HTTP/1.1\r\nHost: g\rw\r\n{auth}\r\n"),
        ),
        (
            "not HTTP at all",
            "\x16\x03\x01\x02\x00\x01\x00\x01\x7f\x03\x03\r\n\r\n".to_owned(),
        ),
    ];
    for (name, raw) in &corpus {
        let mut c = Conn::open(gw.addr);
        let mut bytes = raw.clone().into_bytes();
        bytes.extend_from_slice(smuggled.as_bytes());
        c.send(&bytes);
        let r = c.response();
        assert_eq!(r.status, 400, "{name}");
        assert_eq!(r.header("connection"), Some("close"), "{name}");
        assert!(c.closed(), "{name}: the connection stays open");
        assert!(
            c.pending().is_empty(),
            "{name}: the smuggled request was answered: {:?}",
            String::from_utf8_lossy(c.pending())
        );
    }
    assert!(
        sim.journal().is_empty(),
        "a smuggled request reached the provider"
    );
    assert_eq!(gw.chat(&body("")).status, 200);
    println!(
        "figure: {bin} smuggling corpus: {} shapes, all 400 and closed",
        corpus.len()
    );
}

fn hostile_json_and_random_bytes(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = gateway(bin, &sim.url(), &[]);
    let deep = |open: &str, close: &str, n: usize| format!("{}{}", open.repeat(n), close.repeat(n));
    let digits = format!("1{}", "0".repeat(1_000_000));
    let m = MODEL;
    let user = r#"[{"role":"user","content":"hi"}]"#;
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        (
            // Found by fuzzing (a panic before the fix, fuzz/seeds/validate).
            "a character straddling the end of data:image/",
            format!(r#"{{"model":"{m}","messages":[{{"role":"user","content":[{{"type":"image_url","image_url":{{"url":"data:image{}ng;base64,iVBORw0KGgo="}}}}]}}]}}"#, '\u{20f}').into_bytes(),
        ),
        (
            "100,000 nested arrays in an unknown parameter",
            format!(r#"{{"model":"{m}","messages":{user},"x":{}}}"#, deep("[", "]", 100_000)).into_bytes(),
        ),
        (
            "100,000 nested objects in an unknown parameter",
            format!(r#"{{"model":"{m}","messages":{user},"x":{}0{}}}"#, r#"{"a":"#.repeat(100_000), "}".repeat(100_000)).into_bytes(),
        ),
        (
            "nested arrays as message content",
            format!(r#"{{"model":"{m}","messages":[{{"role":"user","content":{}}}]}}"#, deep("[", "]", 50_000)).into_bytes(),
        ),
        (
            "nested arrays in tool parameters",
            format!(r#"{{"model":"{m}","messages":{user},"tools":[{{"type":"function","function":{{"name":"f","parameters":{}}}}}]}}"#, deep("[", "]", 50_000)).into_bytes(),
        ),
        (
            "unclosed nesting",
            format!(r#"{{"model":"{m}","messages":{user},"x":{}"#, "[".repeat(1_000_000)).into_bytes(),
        ),
        (
            "a million-digit max_tokens",
            format!(r#"{{"model":"{m}","messages":{user},"max_tokens":{digits}}}"#).into_bytes(),
        ),
        (
            "a million-digit temperature",
            format!(r#"{{"model":"{m}","messages":{user},"temperature":{digits}}}"#).into_bytes(),
        ),
        (
            "an exponent out of range",
            format!(r#"{{"model":"{m}","messages":{user},"temperature":1e999999}}"#).into_bytes(),
        ),
        (
            "invalid UTF-8 in a string",
            [&br#"{"model":"m","messages":[{"role":"user","content":"a"#[..], b"\xff\xfe", br#""}]}"#].concat(),
        ),
        (
            "invalid UTF-8 outside strings",
            [&br#"{"model":"m","messages":[]"#[..], b"\xc3\x28", b"}"].concat(),
        ),
        (
            "a lone surrogate escape",
            format!(r#"{{"model":"{m}","messages":[{{"role":"user","content":"\ud800"}}]}}"#).into_bytes(),
        ),
        ("a NUL byte", b"{\"model\":\0}".to_vec()),
        ("an empty body", Vec::new()),
    ];
    let post = |b: &[u8]| {
        let mut raw = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            gw.key,
            b.len()
        )
        .into_bytes();
        raw.extend_from_slice(b);
        raw
    };
    for (name, b) in &bodies {
        let r = try_exchange(gw.addr, &post(b)).unwrap_or_else(|| panic!("{name}: no answer"));
        assert_eq!(
            r.status,
            400,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.json()["error"]["type"], "invalid_request_error", "{name}");
    }
    // Random bodies, then random bytes instead of HTTP.
    let mut noise = Noise::new(7);
    for i in 0..200 {
        let len = 1 + (noise.next_u64() % 4096) as usize;
        let b = noise.bytes(len);
        let r = try_exchange(gw.addr, &post(&b))
            .unwrap_or_else(|| panic!("random body {i}: no answer"));
        assert_eq!(r.status, 400, "random body {i}");
    }
    let mut answered = 0;
    for i in 0..200 {
        let len = 1 + (noise.next_u64() % 4096) as usize;
        let mut s = TcpStream::connect(gw.addr).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let _ = s.write_all(&noise.bytes(len));
        let _ = s.shutdown(std::net::Shutdown::Write);
        // Either a 4xx answer and a close, or (input cut mid-head) a close.
        match read_to_close(&mut s) {
            Ok(bytes) if bytes.is_empty() => {}
            Ok(bytes) => {
                let head = String::from_utf8_lossy(&bytes[..bytes.len().min(12)]).into_owned();
                assert!(head.starts_with("HTTP/1.1 4"), "random bytes {i}: {head:?}");
                answered += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("random bytes {i}: the connection was not closed: {e}"),
        }
    }
    assert!(
        sim.journal().is_empty(),
        "hostile input reached the provider"
    );
    assert_eq!(gw.chat(&body("")).status, 200);
    assert!(gw.alive());
    let rss = rss_kib(gw.proc.pid());
    assert!(rss < 256 * 1024, "RSS {rss} KiB after hostile input");
    println!(
        "figure: {bin} hostile JSON: {} shapes + 200 random bodies, all 400; 200 random byte streams, {answered} answered 4xx, the rest closed; RSS after {rss} KiB",
        bodies.len()
    );
}

// ---------------------------------------------------------------------------
// Broken providers

struct Fault {
    name: &'static str,
    body: String,
    status: u16,
    /// For streams: whether the ledger says complete.
    complete: bool,
    /// The ledger's `error`.
    error: Option<&'static str>,
}

fn broken_providers(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = gateway(
        bin,
        &sim.url(),
        &[
            "--upstream-first-byte-timeout",
            "1s",
            "--upstream-idle-timeout",
            "1s",
            "--stream-tail-timeout",
            "1s",
            "--max-sse-event",
            "65536",
        ],
    );
    let f = |name, fault: &str, stream: bool, status, complete, error| Fault {
        name,
        body: if stream {
            stream_body(&format!(r#""x_sim":{fault}"#))
        } else {
            body(&format!(r#""x_sim":{fault}"#))
        },
        status,
        complete,
        error,
    };
    let cases = [
        f(
            "garbage instead of HTTP",
            r#"{"fault":"garbage"}"#,
            false,
            502,
            false,
            Some("upstream_invalid"),
        ),
        f(
            "garbage instead of HTTP (stream)",
            r#"{"fault":"garbage"}"#,
            true,
            502,
            false,
            Some("upstream_invalid"),
        ),
        f(
            "stall before the head",
            r#"{"fault":"stall_headers"}"#,
            false,
            504,
            false,
            Some("upstream_timeout"),
        ),
        f(
            "stall mid-stream",
            r#"{"fault":"stall","after":3}"#,
            true,
            200,
            false,
            Some("upstream_stalled"),
        ),
        f(
            "broken chunked framing",
            r#"{"fault":"bad_chunk","after":2}"#,
            true,
            200,
            false,
            Some("upstream_invalid"),
        ),
        f(
            "an event over the cap",
            r#"{"fault":"huge_event","after":2,"bytes":100000}"#,
            true,
            200,
            false,
            Some("upstream_event_too_large"),
        ),
        f(
            "data after [DONE]",
            r#"{"fault":"data_after_done"}"#,
            true,
            200,
            true,
            None,
        ),
        f(
            "heartbeats after finish_reason",
            r#"{"fault":"heartbeat_after_finish"}"#,
            true,
            200,
            true,
            Some("upstream_tail_timeout"),
        ),
        f(
            "no [DONE]",
            r#"{"fault":"omit_done"}"#,
            true,
            200,
            true,
            None,
        ),
        f(
            "reset mid-stream",
            r#"{"fault":"reset","after":3}"#,
            true,
            200,
            false,
            Some("upstream_reset"),
        ),
        f(
            "reset before the first event",
            r#"{"fault":"reset","after":0}"#,
            true,
            502,
            false,
            Some("upstream_reset"),
        ),
        f(
            "closed after the head",
            r#"{"fault":"close_after_headers"}"#,
            true,
            502,
            false,
            Some("upstream_reset"),
        ),
        f(
            "JSON for a stream",
            r#"{"fault":"json_for_stream"}"#,
            true,
            502,
            false,
            Some("upstream_invalid"),
        ),
        f(
            "an error event first",
            r#"{"fault":"error_event","after":0}"#,
            true,
            502,
            false,
            Some("upstream_error_event"),
        ),
        f(
            "an error event mid-stream",
            r#"{"fault":"error_event","after":2}"#,
            true,
            200,
            false,
            Some("upstream_error_event"),
        ),
        f(
            "a 500",
            r#"{"fault":"reject","status":500}"#,
            false,
            502,
            false,
            Some("upstream_rejected"),
        ),
        f(
            "a 429 with Retry-After",
            r#"{"fault":"reject","status":429,"retry_after":7}"#,
            false,
            502,
            false,
            Some("upstream_rejected"),
        ),
        f(
            "a 429 with Retry-After (stream)",
            r#"{"fault":"reject","status":429,"retry_after":7}"#,
            true,
            502,
            false,
            Some("upstream_rejected"),
        ),
    ];
    for c in &cases {
        let r = gw.chat(&c.body);
        assert_eq!(
            r.status,
            c.status,
            "{}: {}",
            c.name,
            String::from_utf8_lossy(&r.body)
        );
        let id = r.header("x-request-id").expect("request id").to_owned();
        let rec = gw.ledger_line(&id);
        assert_eq!(rec.status, c.status, "{}", c.name);
        assert_eq!(rec.error.as_deref(), c.error, "{}", c.name);
        if r.status == 200 {
            let events = r.events();
            assert_eq!(
                events.last().map(String::as_str),
                Some("[DONE]"),
                "{}",
                c.name
            );
            assert_eq!(
                events.iter().filter(|e| *e == "[DONE]").count(),
                1,
                "{}",
                c.name
            );
            assert_eq!(rec.complete, c.complete, "{}", c.name);
            // What the provider sent after [DONE] never arrives.
            assert!(
                !events.iter().any(|e| e.contains(r#""content":"late""#)),
                "{}",
                c.name
            );
        } else {
            let (_, kind, code, _) = r.error();
            assert_eq!(kind, "upstream_error", "{}", c.name);
            assert_eq!(
                code,
                if c.status == 504 {
                    "upstream_timeout"
                } else {
                    "upstream_error"
                }
            );
            assert!(!rec.complete, "{}", c.name);
        }
        if c.name.starts_with("a 429") {
            assert_eq!(r.header("retry-after"), Some("7"));
            assert_eq!(rec.upstream_status, Some(429));
            let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
            assert!(msg.contains("HTTP 429"), "{msg}");
        }
    }
    // The gateway is still well after all of it.
    assert_eq!(
        gw.chat(&stream_body(""))
            .events()
            .last()
            .map(String::as_str),
        Some("[DONE]")
    );
    println!(
        "figure: {bin} broken providers: {} faults, each a defined answer and a ledger line",
        cases.len()
    );
}

fn unreachable_providers(bin: &str) {
    // Connection refused: a port that was just free.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cases = [
        (
            format!("http://127.0.0.1:{port}/v1"),
            "upstream_connect",
            "could not connect",
        ),
        (
            "http://no-such-host.invalid/v1".to_owned(),
            "upstream_dns",
            "resolve",
        ),
    ];
    for (url, error, says) in &cases {
        let gw = gateway(bin, url, &["--upstream-connect-timeout", "3s"]);
        for b in [body(""), stream_body("")] {
            let r = gw.chat(&b);
            let msg = r.json()["error"]["message"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            assert_eq!(r.status, 502, "{url}: {msg}");
            assert!(msg.contains(says), "{url}: {msg}");
            let rec = gw.ledger_line(r.header("x-request-id").unwrap());
            assert_eq!(rec.error.as_deref(), Some(*error), "{url}");
        }
    }
    // A certificate for another name: a clear 502, upstream_tls.
    let sim = Sim::start(bin, &[], &[]);
    let wrong = certs(&["other.example"]);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &wrong.ca_pem).unwrap();
    let proxy = tls_proxy(&wrong, sim.addr);
    let url = format!("https://localhost:{}/v1", proxy.port());
    let gw = gateway(bin, &url, &["--upstream-ca", ca.to_str().unwrap()]);
    let r = gw.chat(&body(""));
    assert_eq!(r.status, 502);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("TLS") && msg.contains("not valid for name"),
        "{msg}"
    );
    let rec = gw.ledger_line(r.header("x-request-id").unwrap());
    assert_eq!(rec.error.as_deref(), Some("upstream_tls"));
}

// ---------------------------------------------------------------------------
// Crashes

fn sigkill_under_load_loses_nothing_delivered(bin: &str) {
    let sim = Sim::start(bin, &["--token-ms", "1"], &[]);
    let mut gw = gateway(bin, &sim.url(), &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let delivered = Arc::new(Mutex::new(Vec::<String>::new()));
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (stop, delivered) = (Arc::clone(&stop), Arc::clone(&delivered));
            let (addr, key) = (gw.addr, gw.key.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let b = if (t + i) % 2 == 0 {
                        body("")
                    } else {
                        stream_body("")
                    };
                    i += 1;
                    let raw = raw_request("POST", "/v1/chat/completions", Some(&key), Some(&b));
                    match try_exchange(addr, &raw) {
                        Some(r) if r.complete && r.status == 200 => {
                            let id = r.header("x-request-id").unwrap().to_owned();
                            delivered.lock().unwrap().push(id);
                        }
                        Some(_) => {}
                        None => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        })
        .collect();
    eventually("some responses delivered", || {
        delivered.lock().unwrap().len() >= 150
    });
    gw.proc.signal(libc::SIGKILL);
    gw.proc.wait_exit(PATIENCE).expect("killed");
    // Whatever the clients received in full before the kill is in the ledger.
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let delivered = delivered.lock().unwrap().clone();
    let recs = gw.ledger();
    let ids: std::collections::HashSet<&str> = recs.iter().map(|r| r.request_id.as_str()).collect();
    let lost: Vec<&String> = delivered
        .iter()
        .filter(|id| !ids.contains(id.as_str()))
        .collect();
    assert!(lost.is_empty(), "delivered but not in the ledger: {lost:?}");
    // A restarted gateway on the same files serves at once.
    let dir = std::mem::replace(&mut gw.dir, tempfile::tempdir().unwrap());
    let opts = GwOptions {
        rpm: Some(100_000_000),
        tpm: Some(1_000_000_000_000),
        ..GwOptions::default()
    };
    let gw2 = Gw::start_with_keys(bin, &sim.url(), opts, dir, gw.key.clone());
    assert_eq!(gw2.chat(&body("")).status, 200);
    assert_eq!(gw2.ledger_len(recs.len() + 1).len(), recs.len() + 1);
    println!(
        "figure: {bin} SIGKILL under load: {} responses delivered, {} ledger lines, 0 lost",
        delivered.len(),
        recs.len()
    );
}

fn sigterm_with_streams_in_flight(bin: &str) {
    // Streams that finish within the drain time: all complete, exit 0.
    let sim = Sim::start(bin, &["--token-ms", "20"], &[]);
    let mut gw = gateway(bin, &sim.url(), &["--drain-timeout", "20s"]);
    let n = 20;
    let mut conns: Vec<Conn> = (0..n)
        .map(|_| {
            let mut c = Conn::open(gw.addr);
            c.send(&raw_request(
                "POST",
                "/v1/chat/completions",
                Some(&gw.key),
                Some(&stream_body("")),
            ));
            c
        })
        .collect();
    for c in &mut conns {
        c.read_until("reasoning_content");
    }
    gw.proc.signal(libc::SIGTERM);
    for c in &mut conns {
        let r = c.response();
        let chunks = r.chunks();
        assert!(
            chunks
                .iter()
                .any(|c| c["choices"][0]["finish_reason"] == "stop")
        );
        assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    }
    assert_eq!(gw.proc.wait_exit(PATIENCE).expect("exited").code(), Some(0));
    let recs = gw.ledger();
    assert_eq!(recs.len(), n);
    assert!(recs.iter().all(|r| r.complete && r.error.is_none()));

    // Streams longer than the drain time: cut, metered, exit 0.
    let sim = Sim::start(bin, &["--token-ms", "1000"], &[]);
    let mut gw = gateway(bin, &sim.url(), &["--drain-timeout", "1s"]);
    let mut stream = Conn::open(gw.addr);
    stream.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&stream_body("")),
    ));
    stream.read_until("reasoning_content");
    let mut waiting = Conn::open(gw.addr);
    waiting.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&body(r#""x_sim":{"fault":"stall_headers"}"#)),
    ));
    eventually("both requests reached the provider", || {
        sim.journal().len() == 2
    });
    gw.proc.signal(libc::SIGTERM);
    let r = stream.response();
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    let r = waiting.response();
    assert_eq!(r.status, 503);
    assert_eq!(gw.proc.wait_exit(PATIENCE).expect("exited").code(), Some(0));
    let recs = gw.ledger();
    assert_eq!(recs.len(), 2);
    let cut = recs.iter().find(|r| r.stream).unwrap();
    assert!(!cut.complete);
    assert_eq!(cut.error.as_deref(), Some("shutdown"));
    assert!(recs.iter().any(|r| !r.stream && r.status == 503));
}

/// The ledger's promise — a response that reached its client in full has its
/// line — held when the line cannot be written: with the ledger on a full
/// device every metered answer is cut before its end (a non-streamed answer
/// is not sent at all, a stream stops before `[DONE]`), the failure is
/// logged, and unmetered paths keep working.
fn an_unwritable_ledger_withholds_every_answer(bin: &str) {
    let full = Path::new("/dev/full");
    assert!(full.exists(), "this test needs /dev/full");
    let sim = Sim::start(bin, &[], &[]);
    let dir = tempfile::tempdir().unwrap();
    let key = mint(bin, dir.path(), "test", Some(100_000), Some(100_000_000));
    std::os::unix::fs::symlink(full, dir.path().join("ledger.jsonl")).unwrap();
    let gw = Gw::start_with_keys(bin, &sim.url(), GwOptions::default(), dir, key);
    let send = |body: &str| {
        let mut s = TcpStream::connect(gw.addr).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let req = raw_request("POST", "/v1/chat/completions", Some(&gw.key), Some(body));
        s.write_all(&req).unwrap();
        read_to_close(&mut s).unwrap_or_default()
    };
    // Non-streamed: nothing of the answer is sent; the connection closes.
    let plain = send(&body(""));
    assert!(
        parse_response(&plain, true).map_or(true, |r| r.is_none()),
        "a complete answer went out without its ledger line: {:?}",
        String::from_utf8_lossy(&plain)
    );
    // Streamed: events may go out, but never the end of the stream.
    let streamed = send(&stream_body(""));
    let text = String::from_utf8_lossy(&streamed);
    assert!(!text.contains("[DONE]"), "{text}");
    assert!(!text.ends_with("0\r\n\r\n"), "{text}");
    // A refused request is metered too, so it is withheld the same way.
    let refused = send(r#"{"model":"reasoning-model-k3","messages":[]}"#);
    assert!(
        parse_response(&refused, true).map_or(true, |r| r.is_none()),
        "{:?}",
        String::from_utf8_lossy(&refused)
    );
    // The provider was asked (the failure is only known at the end) ...
    assert!(sim.journal().len() >= 2);
    // ... the gateway says why, and keeps serving what is not metered.
    let log = gw.proc.stderr();
    assert!(log.to_lowercase().contains("ledger"), "{log}");
    let models = request(gw.addr, "GET", "/v1/models", Some(&gw.key), None);
    assert_eq!(models.status, 200);
    let mut gw = gw;
    assert!(gw.alive());
}
