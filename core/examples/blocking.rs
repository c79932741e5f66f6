//! The gateway on plain blocking sockets and threads: no async anywhere.
//!
//! ```text
//! cargo run -p chatgate-core --example blocking -- LISTEN UPSTREAM_URL KEYS_FILE LEDGER_FILE
//! ```
//!
//! One thread per client connection owns its `Connection`; two helper
//! threads per connection block in `read` (client, provider) and hand what
//! they read over a channel, so the owner waits on one channel with the
//! core's deadline as timeout. Plain `http://` upstreams only (TLS is the
//! runtimes' business). It is a proof that `chatgate-core` needs nothing but
//! bytes and time, not a production server.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chatgate_core::Gateway;
use chatgate_core::KeyTable;
use chatgate_core::Limits;
use chatgate_core::{Accept, Connection, Event, SharedAdmission, StoreError, UpstreamFailure};
use chatgate_core::{GatewayConfig, Target};
use chatgate_core::{Instant, WallClock};

/// What the reader threads report.
enum Input {
    Client(Vec<u8>),
    ClientEof,
    /// Provider bytes, tagged with the connection's generation so a late
    /// read from a closed connection is ignored.
    Upstream(u64, Vec<u8>),
    UpstreamEof(u64),
}

struct Clock(std::time::Instant);

impl Clock {
    fn now(&self) -> Instant {
        Instant::from_start(self.0.elapsed())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: blocking LISTEN UPSTREAM_URL KEYS_FILE LEDGER_FILE");
        std::process::exit(2);
    }
    let upstream = Target::parse(&args[2]).unwrap_or_else(|e| fail(&e));
    if upstream.tls {
        fail("this example speaks plain http:// to the provider only");
    }
    let keys_text = std::fs::read_to_string(&args[3]).unwrap_or_else(|e| fail(&e.to_string()));
    let keys = KeyTable::parse_toml(&keys_text, Limits::default()).unwrap_or_else(|e| fail(&e.0));
    let ledger = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args[4])
        .unwrap_or_else(|e| fail(&e.to_string()));
    let ledger = Arc::new(Mutex::new(ledger));
    let clock = Arc::new(Clock(std::time::Instant::now()));
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let seed = u64::from(std::process::id()) ^ unix_ms.rotate_left(17);
    let gateway = Gateway::new(
        GatewayConfig::new(upstream.clone()),
        keys,
        WallClock::new(unix_ms),
        seed,
    );
    let listener = TcpListener::bind(&args[1]).unwrap_or_else(|e| fail(&e.to_string()));
    println!(
        "listening on http://{}/v1",
        listener.local_addr().expect("bound")
    );
    let _ = std::io::stdout().flush();
    for client in listener.incoming().flatten() {
        let (gateway, ledger, clock) = (
            Arc::clone(&gateway),
            Arc::clone(&ledger),
            Arc::clone(&clock),
        );
        std::thread::spawn(move || serve(client, &gateway, &ledger, &clock));
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("blocking: {msg}");
    std::process::exit(2)
}

fn spawn_reader(
    mut stream: TcpStream,
    tx: Sender<Input>,
    wrap: impl Fn(Option<Vec<u8>>) -> Input + Send + 'static,
) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(wrap(None));
                    return;
                }
                Ok(n) => {
                    if tx.send(wrap(Some(buf[..n].to_vec()))).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

fn serve(client: TcpStream, gateway: &Arc<Gateway>, ledger: &Mutex<std::fs::File>, clock: &Clock) {
    let _ = client.set_nodelay(true);
    let mut client_w = client.try_clone().expect("clone socket");
    let mut conn = match Connection::accept(gateway, clock.now()) {
        Accept::Serve(c) => c,
        Accept::Refuse(bytes) => {
            let _ = client_w.write_all(&bytes);
            return;
        }
    };
    let (tx, rx) = mpsc::channel();
    spawn_reader(client, tx.clone(), |d| {
        d.map_or(Input::ClientEof, Input::Client)
    });
    let mut upstream: Option<TcpStream> = None;
    let mut generation = 0u64;
    loop {
        while let Some(event) = conn.poll_event() {
            match event {
                Event::ConnectUpstream { endpoint, .. } => {
                    // No pool here: every request gets a fresh connection.
                    generation += 1;
                    let target = &endpoint.config().target;
                    match connect(target, gateway.config().timeouts.upstream_connect) {
                        Ok(s) => {
                            let g = generation;
                            spawn_reader(
                                s.try_clone().expect("clone socket"),
                                tx.clone(),
                                move |d| match d {
                                    Some(b) => Input::Upstream(g, b),
                                    None => Input::UpstreamEof(g),
                                },
                            );
                            upstream = Some(s);
                            conn.handle_upstream_connected(clock.now(), false);
                        }
                        Err(f) => conn.handle_upstream_failure(clock.now(), f),
                    }
                }
                Event::ReleaseUpstream | Event::CloseUpstream => {
                    if let Some(s) = upstream.take() {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
                Event::Ledger(record) => {
                    let mut f = ledger.lock().unwrap_or_else(|e| e.into_inner());
                    let appended = f.write_all(&record.to_line()).is_ok();
                    drop(f);
                    // The request's access line comes from the same record.
                    let mut fields = Vec::new();
                    record.access_fields(&mut fields, false);
                    eprintln!("access: {}", String::from_utf8_lossy(&fields));
                    conn.handle_ledger_written(clock.now(), appended);
                }
                // Only with shared limits configured, which this example
                // never does: it has no shared limiter to ask, and says so;
                // core applies the fallback (`--redis-fallback`) and
                // settles with this process's own limiter.
                Event::Admit(_) => {
                    let none = SharedAdmission::Unavailable(StoreError::NotConfigured);
                    conn.handle_admission(clock.now(), none);
                }
                Event::Settle(settlement) => {
                    settlement.finish(gateway, clock.now(), Err(StoreError::NotConfigured));
                }
                // The shared reasoning memory, likewise: this process's
                // own memory is all there is.
                Event::Recall(_) => {
                    conn.handle_recall(clock.now(), Err(StoreError::NotConfigured));
                }
                Event::Remember(_) => {}
                // It serves chat completions only: no Responses API, so no
                // store is ever asked for.
                Event::Responses(_) => {
                    conn.handle_responses(clock.now(), Err(StoreError::NotConfigured));
                }
                Event::Background(_) | Event::Follow(_) | Event::Cancel(_) => {}
                Event::CloseClient => {
                    let _ = client_w.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
        if let (Some(bytes), Some(s)) = (conn.poll_upstream_transmit(), upstream.as_mut()) {
            let n = bytes.len();
            match s.write_all(bytes) {
                Ok(()) => conn.handle_upstream_written(clock.now(), n),
                Err(e) => {
                    upstream = None;
                    conn.handle_upstream_failure(
                        clock.now(),
                        UpstreamFailure::Broken(e.to_string()),
                    );
                }
            }
            continue;
        }
        if let Some(bytes) = conn.poll_client_transmit() {
            let n = bytes.len();
            match client_w.write_all(bytes) {
                Ok(()) => conn.handle_client_written(clock.now(), n),
                Err(_) => conn.handle_client_eof(clock.now()),
            }
            continue;
        }
        let input = match conn.poll_timeout() {
            Some(deadline) => rx.recv_timeout(deadline.saturating_duration_since(clock.now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let now = clock.now();
        match input {
            Ok(Input::Client(b)) => conn.handle_client_data(now, &b),
            Ok(Input::ClientEof) => conn.handle_client_eof(now),
            Ok(Input::Upstream(g, b)) if g == generation && upstream.is_some() => {
                conn.handle_upstream_data(now, &b)
            }
            Ok(Input::UpstreamEof(g)) if g == generation && upstream.is_some() => {
                upstream = None;
                conn.handle_upstream_eof(now);
            }
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout) => conn.handle_timeout(now),
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn connect(t: &Target, timeout: Duration) -> Result<TcpStream, UpstreamFailure> {
    let addrs: Vec<_> = (t.host.as_str(), t.port)
        .to_socket_addrs()
        .map_err(|e| UpstreamFailure::Resolve(e.to_string()))?
        .collect();
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(UpstreamFailure::Connect(last))
}
