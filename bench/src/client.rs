//! The load generator's own HTTP/1.1 client, for what wrk does not measure:
//! open-loop latency, time to first event and per-event delay of timed
//! streams, and streams held open by the thousand.
//!
//! Responses are parsed with chatgate-core's codecs (head scanner, body
//! decoder, SSE framer), incrementally, so every event's arrival is timed
//! when its bytes arrive.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chatgate_core::SseFramer;
use chatgate_core::http::BodyDecoder;
use chatgate_core::http::{HeadScanner, HttpLimits, ResponseHead, parse_response_head};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What one exchange measured.
pub(crate) struct Exchange {
    /// Status code.
    pub status: u16,
    /// Arrival of each complete SSE event (streams), from the send.
    pub events: Vec<Duration>,
    /// The connection can carry another request.
    pub reusable: bool,
}

/// Sends `request` on `stream` and reads the whole response.
pub(crate) async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    stop_after_first_event: bool,
) -> std::io::Result<Exchange> {
    let start = Instant::now();
    stream.write_all(request).await?;
    let limits = HttpLimits {
        max_body: u64::MAX,
        ..HttpLimits::default()
    };
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 16 * 1024];
    let head = read_head(stream, &mut buf, &mut chunk, &limits).await?;
    let mut decoder = BodyDecoder::new(head.framing, limits);
    let mut body = Vec::new();
    let mut framer = SseFramer::new(usize::MAX);
    let mut events = Vec::new();
    let mut pending = std::mem::take(&mut buf);
    loop {
        let used = decoder
            .decode(&pending, &mut body)
            .map_err(std::io::Error::other)?;
        pending.drain(..used);
        while let Ok(Some(_)) = framer.next_event(&body) {
            events.push(start.elapsed());
        }
        let done = framer.complete_prefix();
        body.drain(..done);
        framer.consume(done);
        if decoder.is_done() || (stop_after_first_event && !events.is_empty()) {
            break;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            decoder.finish().map_err(std::io::Error::other)?;
            break;
        }
        pending.extend_from_slice(&chunk[..n]);
    }
    Ok(Exchange {
        status: head.status,
        events,
        reusable: head.keep_alive && decoder.is_done(),
    })
}

/// Reads a response head from `stream` (reading through `chunk`), leaving
/// in `buf` the bytes after it.
pub(crate) async fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    chunk: &mut [u8],
    limits: &HttpLimits,
) -> std::io::Result<ResponseHead> {
    let mut scanner = HeadScanner::new();
    loop {
        let n = stream.read(chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(len) = scanner
            .scan(buf, limits.max_head)
            .map_err(std::io::Error::other)?
        {
            let head = parse_response_head(&buf[..len], limits).map_err(std::io::Error::other)?;
            buf.drain(..len);
            return Ok(head);
        }
    }
}

/// Reads one whole `200` answer with a `Content-Length` from `s` (the
/// gateway's non-streamed answers): its body.
pub(crate) fn read_answer(s: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read as _;
    let mut got = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200"), "{head}");
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("a length");
            if got.len() >= end + 4 + len {
                return got[end + 4..end + 4 + len].to_vec();
            }
        }
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
}

/// A POST of `body` to the chat endpoint.
pub(crate) fn chat_request(key: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Open-loop load: requests are sent on a fixed schedule (`rate` per
/// second for `duration`) whether or not earlier ones have finished (each
/// on an idle keep-alive connection, or a new one), so a slow server cannot
/// slow the offered load down. Latency runs from the moment the request is
/// written (the timer that schedules sends has millisecond granularity; the
/// send itself is timed to the microsecond).
pub(crate) async fn open_loop(
    addr: SocketAddr,
    request: Rc<Vec<u8>>,
    rate: u32,
    duration: Duration,
) -> Vec<Duration> {
    let idle: Rc<Mutex<Vec<TcpStream>>> = Rc::new(Mutex::new(Vec::new()));
    let latencies: Rc<Mutex<Vec<Duration>>> = Rc::new(Mutex::new(Vec::new()));
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let count = (duration.as_secs_f64() * f64::from(rate)) as u64;
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(count as usize);
    for i in 0..count {
        let scheduled = start + interval * i as u32;
        tokio::time::sleep_until(scheduled).await;
        let (idle, latencies, request) =
            (Rc::clone(&idle), Rc::clone(&latencies), Rc::clone(&request));
        tasks.push(tokio::task::spawn_local(async move {
            let pooled = idle.lock().expect("pool").pop();
            let mut stream = match pooled {
                Some(s) => s,
                None => match TcpStream::connect(addr).await {
                    Ok(s) => s,
                    Err(_) => return,
                },
            };
            let _ = stream.set_nodelay(true);
            let sent = Instant::now();
            if let Ok(x) = exchange(&mut stream, &request, false).await {
                if x.status == 200 {
                    latencies.lock().expect("latencies").push(sent.elapsed());
                }
                if x.reusable {
                    idle.lock().expect("pool").push(stream);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Rc::try_unwrap(latencies)
        .map(|m| m.into_inner().unwrap_or_default())
        .unwrap_or_default()
}

/// Timed streams: `concurrency` clients each running streams back to back
/// for `duration`; returns, per stream, the arrival of every event.
pub(crate) async fn timed_streams(
    addr: SocketAddr,
    request: Rc<Vec<u8>>,
    concurrency: usize,
    duration: Duration,
) -> Vec<Vec<Duration>> {
    let results: Rc<Mutex<Vec<Vec<Duration>>>> = Rc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (results, request) = (Rc::clone(&results), Rc::clone(&request));
        tasks.push(tokio::task::spawn_local(async move {
            let Ok(mut stream) = TcpStream::connect(addr).await else {
                return;
            };
            let _ = stream.set_nodelay(true);
            while Instant::now() < end {
                match exchange(&mut stream, &request, false).await {
                    Ok(x) if x.status == 200 => results.lock().expect("results").push(x.events),
                    _ => return,
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Rc::try_unwrap(results)
        .map(|m| m.into_inner().unwrap_or_default())
        .unwrap_or_default()
}

/// Opens `n` streams (at most `batch` connecting at once) and returns their
/// connections once each has delivered its first event; the caller keeps
/// them open (unread) for as long as it measures.
pub(crate) async fn hold_streams(
    addr: SocketAddr,
    request: Rc<Vec<u8>>,
    n: usize,
    batch: usize,
) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    while held.len() < n {
        let wave = batch.min(n - held.len());
        let mut tasks = Vec::with_capacity(wave);
        for _ in 0..wave {
            let request = Rc::clone(&request);
            tasks.push(tokio::task::spawn_local(async move {
                let mut stream = TcpStream::connect(addr).await.ok()?;
                let x = exchange(&mut stream, &request, true).await.ok()?;
                (x.status == 200 && !x.events.is_empty()).then_some(stream)
            }));
        }
        let mut failed = 0;
        for t in tasks {
            match t.await.ok().flatten() {
                Some(s) => held.push(s),
                None => failed += 1,
            }
        }
        if failed == wave {
            break;
        }
    }
    held
}

/// The p-th percentile (0–100) of sorted durations.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
