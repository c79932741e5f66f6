//! Many long streams: where a gateway in front of a reasoning model spends
//! its life. Thousands of streams held open at once, each receiving a
//! token at a time from the simulator (one event a second, or ten), read
//! by a light client that holds every stream to its end.
//!
//! - The reference is nginx with one worker, no access log, HTTP/1.1 to an
//!   upstream keep-alive pool and `proxy_buffering off` (what its
//!   documentation says for streaming), in front of the same simulator;
//!   chatgate runs `serve` with its ledger, `--log-level warn` and one
//!   worker thread, as in the lean comparison.
//! - Every target is a fresh process for every row, so memory per stream
//!   is what a new instance grows by, allocator warm-up included.
//! - Memory per open stream: the proxy's resident memory once every stream
//!   is open, less before the first, over the streams.
//! - CPU per relayed event: the proxy's utime + stime over a window in
//!   which every stream is open, divided by the events the client read in
//!   that window.
//! - Then every stream is read to its end: a stream counts as delivered
//!   when it ended with `[DONE]` and the body's framing, and holds as many
//!   events as the others; chatgate's ledger must hold one complete line
//!   per stream with every token of it.

use std::cell::Cell;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use chatgate_core::SseFramer;
use chatgate_core::http::{BodyDecoder, HttpLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::procs::{Child, cpu_ticks, free_port, nginx_workers, rss_kib, ticks_per_second};
use crate::{Setup, gateway_with, nginx_args, ratio};

/// One row of the workload: how many streams, how fast, how long the
/// measured window.
struct Shape {
    streams: usize,
    per_second: u64,
    window: Duration,
    /// How long each stream lasts: time to open all of them, the window,
    /// and a margin.
    stream_secs: u64,
}

/// What a run of one target measured.
struct Measured {
    name: &'static str,
    opened: usize,
    rss_before_kib: u64,
    rss_with_kib: u64,
    events_in_window: u64,
    cpu_in_window: Duration,
    delivered: usize,
    lost: usize,
    ledger: Option<Result<(), String>>,
}

/// What the client knows of all its streams.
#[derive(Default)]
struct Tally {
    /// Streams that delivered their first event.
    started: Cell<usize>,
    /// Streams that failed before their first event.
    refused: Cell<usize>,
    /// Events read, all streams.
    events: Cell<u64>,
    /// The events of each stream that ended with `[DONE]` and its
    /// framing's end.
    lengths: std::cell::RefCell<Vec<u64>>,
}

/// Appends the many-long-streams tables to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let shapes: Vec<Shape> = if let Some(list) = s.long {
        let w = Duration::from_secs(s.secs.max(3) * 2);
        list.split(',')
            .map(|row| {
                let (n, rate) = row.split_once('x').unwrap_or((row, "1"));
                let n: usize = n.parse().expect("--long STREAMSxRATE,…");
                Shape {
                    streams: n,
                    per_second: rate.parse().expect("--long STREAMSxRATE,…"),
                    window: w,
                    stream_secs: w.as_secs() + 6 + n as u64 / 1000,
                }
            })
            .collect()
    } else if s.secs < 5 {
        vec![Shape {
            streams: 200,
            per_second: 1,
            window: Duration::from_secs(3),
            stream_secs: 8,
        }]
    } else {
        let w = Duration::from_secs(s.secs.max(10) * 2);
        let mut v: Vec<Shape> = [1000, 4000, 8000]
            .into_iter()
            .map(|n| Shape {
                streams: n,
                per_second: 1,
                window: w,
                stream_secs: w.as_secs() + 6 + n as u64 / 1000,
            })
            .collect();
        v.push(Shape {
            streams: 1000,
            per_second: 10,
            window: w,
            stream_secs: w.as_secs() + 6,
        });
        v
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let most = (s.fd_limit.saturating_sub(100) / 2) as usize;
    for shape in shapes {
        let n = shape.streams.min(most);
        let shape = Shape {
            streams: n,
            ..shape
        };
        let _ = writeln!(
            report,
            "\n### Many long streams: {n} open at once, {} event{} a second each ({} s window)\n",
            shape.per_second,
            if shape.per_second == 1 { "" } else { "s" },
            shape.window.as_secs()
        );
        let _ = writeln!(
            report,
            "| target | streams | memory per open stream | × nginx | events/s relayed | CPU per event | × nginx | delivered | ledger |"
        );
        let _ = writeln!(report, "|---|---|---|---|---|---|---|---|---|");
        let mut rows = Vec::new();
        for target in ["nginx", "chatgate-smol", "chatgate-tokio"] {
            rows.push(run_target(s, &rt, target, &shape));
            std::thread::sleep(Duration::from_secs(1));
        }
        let mem = |m: &Measured| {
            (m.rss_with_kib.saturating_sub(m.rss_before_kib)) as f64 * 1024.0
                / m.opened.max(1) as f64
                / 1000.0
        };
        let cpu = |m: &Measured| {
            (m.events_in_window > 0)
                .then(|| m.cpu_in_window.as_secs_f64() * 1e6 / m.events_in_window as f64)
        };
        let (nginx_mem, nginx_cpu) = (mem(&rows[0]), cpu(&rows[0]));
        for m in &rows {
            let _ = writeln!(
                report,
                "| {} | {} | {:.1} KB | {} | {:.0} | {} | {} | {}/{}{} | {} |",
                m.name,
                m.opened,
                mem(m),
                ratio(Some(mem(m)), Some(nginx_mem)),
                m.events_in_window as f64 / shape.window.as_secs_f64(),
                cpu(m).map_or("—".into(), |v| format!("{v:.1} µs")),
                ratio(cpu(m), nginx_cpu),
                m.delivered,
                n,
                if m.lost > 0 {
                    format!(" ({} lost)", m.lost)
                } else {
                    String::new()
                },
                match &m.ledger {
                    None => "—".to_owned(),
                    Some(Ok(())) => "exact".to_owned(),
                    Some(Err(e)) => format!("**{e}**"),
                },
            );
        }
    }
    let _ = writeln!(
        report,
        "\n(KB = 1,000 bytes. CPU per event is the proxy's user + system time in the window over the events the client read in it; memory per stream is the proxy's resident memory with every stream open, less a fresh process's, over the streams.)"
    );
}

/// Starts a fresh `target` in front of the simulator, opens the streams,
/// measures, reads every stream to its end and checks the ledger.
fn run_target(
    s: &Setup<'_>,
    rt: &tokio::runtime::Runtime,
    target: &'static str,
    shape: &Shape,
) -> Measured {
    let name = format!("long-{target}-{}-{}", shape.streams, shape.per_second);
    let ledger = s.dir.join(format!("ledger-{name}.jsonl"));
    let (_proc, addr, pids) = match target {
        "nginx" => {
            let port = free_port();
            // The lean comparison's nginx, with room for every stream.
            let conf =
                crate::lean::write_proxy_conf(s.dir, &name, port, s.sim, s.fd_limit, s.fd_limit);
            let nginx = Child::spawn(
                &s.tools.nginx,
                &nginx_args(s.dir, &conf),
                &[],
                &s.dir.join(format!("{name}.stderr")),
            );
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            crate::procs::wait_accepting(addr, Instant::now());
            let workers = nginx_workers(nginx.pid(), 1);
            (nginx, addr, workers)
        }
        _ => {
            let bin = if target == "chatgate-smol" {
                &s.tools.smol
            } else {
                &s.tools.tokio
            };
            let mut g = gateway_with(
                bin,
                s.dir,
                &[
                    "--upstream",
                    s.upstream,
                    "--log-level",
                    "warn",
                    "--worker-threads",
                    "1",
                ],
                &name,
            );
            let addr = g.listening_address();
            let pid = g.pid();
            (g, addr, vec![pid])
        }
    };
    // One stream through it first: the process is as warm as it will be
    // after its first request, as a fresh instance is once in service.
    // Reasoning tokens, then one answer token.
    let reasoning = shape.stream_secs * shape.per_second;
    let body = format!(
        r#"{{"model":"reasoning-model-k3","stream":true,"messages":[{{"role":"user","content":"Think it through."}}],"x_sim":{{"reasoning_tokens":{reasoning},"answer_tokens":1,"token_ms":{}}}}}"#,
        1000 / shape.per_second
    );
    let warm = r#"{"model":"reasoning-model-k3","stream":true,"messages":[{"role":"user","content":"Warm up."}],"x_sim":{"reasoning_tokens":3,"answer_tokens":1}}"#;
    let local = tokio::task::LocalSet::new();
    let warm_request = Rc::new(crate::client::chat_request(s.key, warm));
    local.block_on(rt, async {
        let tally = Rc::new(Tally::default());
        read_stream(addr, warm_request, Rc::clone(&tally), None).await;
    });
    std::thread::sleep(Duration::from_millis(300));
    let rss_before_kib = rss_kib(&pids);
    let request = Rc::new(crate::client::chat_request(s.key, &body));
    let tally = Rc::new(Tally::default());
    let m = local.block_on(rt, async {
        let gate = Rc::new(tokio::sync::Semaphore::new(500));
        let mut tasks = Vec::with_capacity(shape.streams);
        for _ in 0..shape.streams {
            tasks.push(tokio::task::spawn_local(read_stream(
                addr,
                Rc::clone(&request),
                Rc::clone(&tally),
                Some(Rc::clone(&gate)),
            )));
        }
        // Every stream open (or refused).
        let open_deadline = Instant::now() + Duration::from_secs(shape.stream_secs / 2);
        while tally.started.get() + tally.refused.get() < shape.streams
            && Instant::now() < open_deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss_with_kib = rss_kib(&pids);
        let (ticks0, events0) = (cpu_ticks(&pids), tally.events.get());
        tokio::time::sleep(shape.window).await;
        let (ticks1, events1) = (cpu_ticks(&pids), tally.events.get());
        for t in tasks {
            let _ = t.await;
        }
        (rss_with_kib, ticks1 - ticks0, events1 - events0)
    });
    let (rss_with_kib, ticks, events_in_window) = m;
    let lengths = tally.lengths.borrow();
    let longest = lengths.iter().copied().max().unwrap_or(0);
    let delivered = lengths.iter().filter(|&&l| l == longest).count();
    let lost = shape.streams - delivered;
    let ledger = (target != "nginx").then(|| {
        // Give the last lines their write.
        std::thread::sleep(Duration::from_millis(300));
        check_ledger(&ledger, shape.streams + 1, reasoning + 1)
    });
    Measured {
        name: target,
        opened: tally.started.get(),
        rss_before_kib,
        rss_with_kib,
        events_in_window,
        cpu_in_window: Duration::from_secs_f64(ticks as f64 / ticks_per_second() as f64),
        delivered,
        lost,
        ledger,
    }
}

/// One stream: connects (holding a `gate` permit until its first event, so
/// that at most so many connect at once), sends `request`, and reads the
/// answer to its end, counting events into `tally`.
async fn read_stream(
    addr: SocketAddr,
    request: Rc<Vec<u8>>,
    tally: Rc<Tally>,
    gate: Option<Rc<tokio::sync::Semaphore>>,
) {
    let mut permit = match &gate {
        Some(g) => Some(g.acquire().await.expect("open gate")),
        None => None,
    };
    let mut started = false;
    let outcome = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(&request).await?;
        let limits = HttpLimits {
            max_body: u64::MAX,
            ..HttpLimits::default()
        };
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 2048];
        let head = crate::client::read_head(&mut stream, &mut buf, &mut chunk, &limits).await?;
        if head.status != 200 {
            return Err(std::io::Error::other(format!("status {}", head.status)));
        }
        let mut decoder = BodyDecoder::new(head.framing, limits);
        let mut body = Vec::new();
        let mut framer = SseFramer::new(usize::MAX);
        let mut pending = buf;
        let (mut events, mut done) = (0u64, false);
        loop {
            let used = decoder
                .decode(&pending, &mut body)
                .map_err(std::io::Error::other)?;
            pending.drain(..used);
            while let Ok(Some(range)) = framer.next_event(&body) {
                events += 1;
                tally.events.set(tally.events.get() + 1);
                done = body[range].starts_with(b"data: [DONE]");
                if !started {
                    started = true;
                    tally.started.set(tally.started.get() + 1);
                    permit.take();
                }
            }
            let consumed = framer.complete_prefix();
            body.drain(..consumed);
            framer.consume(consumed);
            if decoder.is_done() {
                break;
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                decoder.finish().map_err(std::io::Error::other)?;
                break;
            }
            pending.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, std::io::Error>((events, done))
    }
    .await;
    if !started {
        tally.refused.set(tally.refused.get() + 1);
    }
    if let Ok((events, true)) = outcome {
        tally.lengths.borrow_mut().push(events);
    }
}

/// The ledger holds `lines` complete lines (the streams and the warm-up),
/// each stream's with `completion_tokens` tokens.
fn check_ledger(path: &Path, lines: usize, completion_tokens: u64) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("no ledger: {e}"))?;
    let mut complete = 0;
    let mut exact = 0;
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("bad ledger line: {e}"))?;
        if v["status"] == 200 && v["complete"] == true {
            complete += 1;
        }
        if v["completion_tokens"] == completion_tokens {
            exact += 1;
        }
    }
    if complete == lines && exact == lines - 1 {
        Ok(())
    } else {
        Err(format!(
            "{} lines, {complete} complete, {exact} with every token (want {lines})",
            text.lines().count()
        ))
    }
}
