//! An in-memory pair: client ↔ [`Connection`] ↔ [`SimConnection`] on a
//! virtual clock, without sockets.
//!
//! It drives the exchange exactly as a runtime does (events in order, ledger
//! acknowledged before held bytes go out, timeouts fired at the instants the
//! state machines ask for), so whole conversations — streams, faults,
//! disconnects at any phase, timeouts — run in microseconds and
//! deterministically. Tests, fuzz targets and benchmarks share it.
//!
//! ```
//! use chatgate_testkit::{Pair, parse_responses};
//! let mut pair = Pair::with_defaults();
//! let key = pair.key.clone();
//! pair.client_send(&Pair::chat_request(&key, r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"hi"}]}"#));
//! pair.run();
//! let responses = parse_responses(&pair.received).unwrap();
//! assert_eq!(responses[0].status, 200);
//! assert_eq!(pair.ledger.len(), 1);
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use chatgate_core::Gateway;
use chatgate_core::LedgerRecord;
use chatgate_core::Limits;
use chatgate_core::http::BodyDecoder;
use chatgate_core::http::parse_response_head;
use chatgate_core::http::{HeadScanner, HttpError, HttpLimits};
use chatgate_core::{Accept, AdmitRequest, Connection, Event, UpstreamFailure};
use chatgate_core::{GatewayConfig, Target};
use chatgate_core::{Instant, WallClock};
use chatgate_core::{KeyTable, entry_toml, key_hash_hex, mint_key};
use chatgate_sim::{SimAction, SimConnection, SimOptions, SimServer};

/// Unix time at [`Instant::ZERO`] in the pair: 2026-11-22T00:00:00Z.
pub const PAIR_EPOCH_MS: u64 = 1_795_305_600_000;

/// How the gateway's reads from the provider connection are sized
/// ([`Pair::upstream_reads`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UpstreamReads {
    /// Everything the provider has written so far, in one read.
    #[default]
    Whole,
    /// At most this many bytes per read (at least one).
    AtMost(usize),
    /// Sizes from 1 to `max` bytes, drawn from `seed` (reproducible).
    Random {
        /// Seed of the size sequence.
        seed: u64,
        /// Largest read.
        max: usize,
    },
}

/// A provider answer that replaces the simulator's ([`Pair::provider_script`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderScript {
    /// The bytes the provider sends once a request has been written to it.
    pub answer: Vec<u8>,
    /// Then it closes the connection; otherwise it goes silent and keeps
    /// the connection open.
    pub close: bool,
}

/// The scripted answer on the current provider connection.
#[derive(Debug)]
struct Scripted {
    bytes: Vec<u8>,
    pos: usize,
    close: bool,
}

/// The client, the gateway connection and the simulated provider.
#[derive(Debug)]
pub struct Pair {
    /// The gateway.
    pub gateway: Arc<Gateway>,
    /// The simulator.
    pub sim: Arc<SimServer>,
    /// Virtual time.
    pub now: Instant,
    /// A valid client key.
    pub key: String,
    /// Every byte the client received.
    pub received: Vec<u8>,
    /// Ledger lines appended, in order.
    pub ledger: Vec<LedgerRecord>,
    /// For each ledger line, how many bytes the client had received when it
    /// was appended.
    pub ledger_at: Vec<usize>,
    /// Every byte the simulator sent to the gateway.
    pub upstream_sent: Vec<u8>,
    /// The gateway closed the client connection.
    pub client_closed: bool,
    /// Upstream connections opened (not taken from the pool).
    pub upstream_opened: u32,
    /// Upstream connections taken from the pool.
    pub upstream_reused: u32,
    /// Failures to inject into the next connection attempts.
    pub connect_failures: VecDeque<UpstreamFailure>,
    /// Stop reading the client's bytes (a client that does not read).
    pub client_stops_reading: bool,
    /// The shared limiter's store (with shared limits configured): a
    /// limiter of its own, standing in for Redis.
    pub shared: chatgate_core::RateLimiter,
    /// The shared limiter is unreachable.
    pub shared_down: bool,
    /// Settlements sent to the shared limiter.
    pub shared_settled: u32,
    /// The shared reasoning memory (with shared limits configured): key to
    /// value, standing in for Redis; `None` while it is unreachable.
    pub shared_reasoning: Option<std::collections::HashMap<Vec<u8>, Vec<u8>>>,
    /// The Responses API's kept responses, by id (`None`: the store fails).
    pub responses: Option<
        std::collections::BTreeMap<
            String,
            chatgate_core::dialect::responses::stored::StoredResponse,
        >,
    >,
    /// Connecting to the provider takes this long (virtual time, passed with
    /// [`Pair::advance`]); `None` connects at once.
    pub connect_delay: Option<Duration>,
    /// The shared limiter answers after this long; `None` answers at once.
    pub admit_delay: Option<Duration>,
    /// How reads from the provider are sized.
    pub upstream_reads: UpstreamReads,
    /// Instead of the simulator's answer, the provider sends this (the
    /// simulator is not asked).
    pub provider_script: Option<ProviderScript>,
    /// Ledger appends fail (the gateway is told; nothing is appended).
    pub ledger_fails: bool,
    /// Ledger appends that failed.
    pub ledger_failed: u32,
    /// Ledger lines are appended but acknowledged only by
    /// [`Pair::ack_ledger`] (a slow disk).
    pub ledger_held: bool,
    /// Provider connections the gateway closed (rather than pooled).
    pub upstream_closed: u32,
    conn: Option<Box<Connection>>,
    upstream: Option<SimConnection>,
    /// The current provider connection was closed by the provider while it
    /// sat in the pool: it reads EOF as soon as it is used.
    upstream_dead: bool,
    idle: Vec<(SimConnection, bool)>,
    /// A connection attempt in progress: when it completes, and `fresh`.
    pending_connect: Option<(Instant, bool)>,
    /// An admission in progress: when it is answered, and what was asked.
    pending_admit: Option<(Instant, String, Limits, u64)>,
    /// A ledger line appended but not yet acknowledged.
    ledger_unacked: bool,
    scripted: Option<Scripted>,
    read_rng: Option<u64>,
}

impl Pair {
    /// A pair with default configuration and simulator options.
    pub fn with_defaults() -> Pair {
        Pair::new(|_| {}, SimOptions::default(), Limits::default())
    }

    /// A pair; `configure` adjusts the gateway configuration, `limits` are the
    /// client key's.
    pub fn new(
        configure: impl FnOnce(&mut GatewayConfig),
        sim: SimOptions,
        limits: Limits,
    ) -> Pair {
        let key = mint_key(&[7; 32]);
        let toml = entry_toml(
            "test-key",
            &key_hash_hex(&key),
            Some(limits.requests_per_minute),
            Some(limits.tokens_per_minute),
            "2026-11-22T00:00:00.000Z",
        );
        let keys = KeyTable::parse_toml(&toml, Limits::default()).expect("valid keys");
        let upstream = Target::parse("http://sim.test/v1").expect("valid URL");
        let mut config = GatewayConfig::new(upstream);
        // One attempt per request unless a test asks for more: most
        // exchange tests check what a failed attempt gives the client, and
        // retries (after a pause on the virtual clock) are tested on their
        // own.
        config.upstream_attempts = 1;
        configure(&mut config);
        let wall = WallClock::new(PAIR_EPOCH_MS);
        let gateway = Gateway::new(config, keys, wall, 0x5EED);
        let sim = SimServer::new(sim, wall);
        let conn = match Connection::accept(&gateway, Instant::ZERO) {
            Accept::Serve(c) => c,
            Accept::Refuse(_) => panic!("a fresh gateway accepts"),
        };
        Pair {
            gateway,
            sim,
            now: Instant::ZERO,
            key,
            received: Vec::new(),
            ledger: Vec::new(),
            ledger_at: Vec::new(),
            upstream_sent: Vec::new(),
            client_closed: false,
            upstream_opened: 0,
            upstream_reused: 0,
            connect_failures: VecDeque::new(),
            client_stops_reading: false,
            shared: chatgate_core::RateLimiter::new(),
            shared_down: false,
            shared_settled: 0,
            shared_reasoning: Some(std::collections::HashMap::new()),
            responses: Some(std::collections::BTreeMap::new()),
            connect_delay: None,
            admit_delay: None,
            upstream_reads: UpstreamReads::Whole,
            provider_script: None,
            ledger_fails: false,
            ledger_failed: 0,
            ledger_held: false,
            upstream_closed: 0,
            conn: Some(conn),
            upstream: None,
            upstream_dead: false,
            idle: Vec::new(),
            pending_connect: None,
            pending_admit: None,
            ledger_unacked: false,
            scripted: None,
            read_rng: None,
        }
    }

    /// A complete `POST /v1/chat/completions` with `body`.
    pub fn chat_request(key: &str, body: &str) -> Vec<u8> {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    /// The gateway's connection state machine (for assertions).
    pub fn connection(&self) -> Option<&Connection> {
        self.conn.as_deref()
    }

    /// The client sends bytes; everything that follows is run.
    pub fn client_send(&mut self, bytes: &[u8]) {
        if let Some(c) = self.conn.as_mut() {
            c.handle_client_data(self.now, bytes);
        }
        self.run();
    }

    /// The provider closes every idle pooled connection (the gateway does
    /// not notice until it uses one).
    pub fn close_idle_upstreams(&mut self) {
        for (_, dead) in &mut self.idle {
            *dead = true;
        }
    }

    /// The scripted provider ([`Pair::provider_script`]) sends `bytes` more
    /// on its current connection, after what it sent so far (a last chunk
    /// that comes late, say); everything that follows is run. False when no
    /// scripted connection is open to send them on.
    pub fn provider_sends(&mut self, bytes: &[u8]) -> bool {
        let Some(s) = self.scripted.as_mut() else {
            return false;
        };
        s.bytes.extend_from_slice(bytes);
        self.run();
        true
    }

    /// The client goes away.
    pub fn client_close(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            c.handle_client_eof(self.now);
        }
        self.run();
    }

    /// The gateway starts draining (SIGTERM): the connection is told.
    pub fn shutdown(&mut self) {
        self.gateway.begin_drain();
        if let Some(c) = self.conn.as_mut() {
            c.handle_shutdown(self.now);
        }
        self.run();
    }

    /// Acknowledges the ledger line held back by [`Pair::ledger_held`].
    pub fn ack_ledger(&mut self) {
        if std::mem::take(&mut self.ledger_unacked)
            && let Some(c) = self.conn.as_mut()
        {
            c.handle_ledger_written(self.now, true);
        }
        self.run();
    }

    /// Runs until nothing moves without time passing.
    pub fn run(&mut self) {
        for _ in 0..1_000_000 {
            if !self.step() {
                return;
            }
        }
        panic!("the pair did not settle");
    }

    /// Advances virtual time by `d`, firing every deadline on the way.
    pub fn advance(&mut self, d: Duration) {
        let target = self.now + d;
        loop {
            self.run();
            let next = [
                self.conn.as_ref().and_then(|c| c.poll_timeout()),
                self.upstream.as_ref().and_then(SimConnection::poll_timeout),
                self.pending_connect.as_ref().map(|p| p.0),
                self.pending_admit.as_ref().map(|p| p.0),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) if t <= target => {
                    self.now = self.now.max(t);
                    let mut fired = false;
                    if let Some(c) = self.conn.as_mut()
                        && c.poll_timeout().is_some_and(|d| d <= self.now)
                    {
                        c.handle_timeout(self.now);
                        fired = true;
                    }
                    if let Some(u) = self.upstream.as_mut()
                        && u.poll_timeout().is_some_and(|d| d <= self.now)
                    {
                        u.handle_timeout(self.now);
                        fired = true;
                    }
                    if fired {
                        // What the deadlines caused (a cancelled connection
                        // attempt, say) is run before anything else is due.
                        continue;
                    }
                    if self.pending_connect.is_some_and(|p| p.0 <= self.now) {
                        let (_, fresh) = self.pending_connect.take().expect("checked");
                        self.complete_connect(fresh);
                    } else if self.pending_admit.as_ref().is_some_and(|p| p.0 <= self.now) {
                        let (_, key, limits, tokens) = self.pending_admit.take().expect("checked");
                        self.answer_admission(&key, limits, tokens);
                    }
                }
                _ => break,
            }
        }
        self.now = target;
        self.run();
    }

    /// The connection attempt asked for completes now (or fails, with the
    /// next of [`Pair::connect_failures`]).
    fn complete_connect(&mut self, fresh: bool) {
        let now = self.now;
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if let Some(f) = self.connect_failures.pop_front() {
            conn.handle_upstream_failure(now, f);
            return;
        }
        let (up, reused, dead) = match (fresh, self.idle.pop()) {
            (false, Some((up, dead))) => (up, true, dead),
            (_, idle) => {
                if let Some(i) = idle {
                    self.idle.push(i);
                }
                (SimConnection::new(Arc::clone(&self.sim)), false, false)
            }
        };
        self.upstream_dead = dead;
        if reused {
            self.upstream_reused += 1;
        } else {
            self.upstream_opened += 1;
        }
        self.upstream = Some(up);
        self.scripted = None;
        conn.handle_upstream_connected(now, reused);
    }

    /// The shared limiter answers an admission now.
    fn answer_admission(&mut self, key: &str, limits: Limits, tokens: u64) {
        let now = self.now;
        use chatgate_core::SharedAdmission;
        let verdict = if self.shared_down {
            SharedAdmission::Unavailable(chatgate_core::StoreError::Unreachable(
                "connection refused".to_owned(),
            ))
        } else {
            match self.shared.admit(key, limits, tokens, now) {
                Ok(a) => SharedAdmission::Admitted(a),
                Err(r) => SharedAdmission::Refused(chatgate_core::Refusal::Rate(r)),
            }
        };
        if let Some(c) = self.conn.as_mut() {
            c.handle_admission(now, verdict);
        }
    }

    /// Carries out one event; true when the client connection closed.
    fn handle_event(&mut self, ev: Event) -> bool {
        let now = self.now;
        match ev {
            Event::ConnectUpstream { fresh, .. } => match self.connect_delay {
                Some(d) => self.pending_connect = Some((now + d, fresh)),
                None => self.complete_connect(fresh),
            },
            Event::ReleaseUpstream => {
                self.scripted = None;
                if let Some(up) = self.upstream.take() {
                    self.idle.push((up, false));
                }
            }
            Event::CloseUpstream => {
                self.pending_connect = None;
                self.scripted = None;
                if let Some(mut up) = self.upstream.take() {
                    up.handle_eof(now);
                    self.upstream_closed += 1;
                }
            }
            Event::Ledger(rec) => {
                let Some(conn) = self.conn.as_mut() else {
                    return false;
                };
                if self.ledger_fails {
                    self.ledger_failed += 1;
                    conn.handle_ledger_written(now, false);
                } else {
                    self.ledger.push(*rec);
                    self.ledger_at.push(self.received.len());
                    if self.ledger_held {
                        self.ledger_unacked = true;
                    } else {
                        conn.handle_ledger_written(now, true);
                    }
                }
            }
            Event::Admit(ask) => {
                let AdmitRequest {
                    key,
                    limits,
                    tokens,
                    ..
                } = *ask;
                match self.admit_delay {
                    Some(d) => self.pending_admit = Some((now + d, key, limits, tokens)),
                    None => self.answer_admission(&key, limits, tokens),
                }
            }
            Event::Settle(s) => {
                self.shared
                    .settle(&s.key, s.limits, s.reserved, s.used, now);
                self.shared_settled += 1;
                s.finish(&self.gateway, now, Ok(()));
            }
            Event::Recall(r) => {
                let found = match &self.shared_reasoning {
                    Some(store) => Ok(r.keys.iter().map(|k| store.get(k).cloned()).collect()),
                    None => Err(chatgate_core::StoreError::Unreachable(
                        "connection refused".to_owned(),
                    )),
                };
                if let Some(c) = self.conn.as_mut() {
                    c.handle_recall(now, found);
                }
            }
            Event::Remember(r) => {
                if let Some(store) = self.shared_reasoning.as_mut() {
                    for k in r.keys {
                        store.insert(k, r.text.to_vec());
                    }
                }
            }
            Event::Responses(ask) => {
                let reply = match self.responses.as_mut() {
                    Some(store) => Ok(answer_responses(store, *ask)),
                    None => Err(chatgate_core::StoreError::Unreachable(
                        "connection refused".to_owned(),
                    )),
                };
                if let Some(c) = self.conn.as_mut() {
                    c.handle_responses(now, reply);
                }
            }
            // One connection only: a background run is not driven here
            // (its place and reservation go with it, unmetered), and no run
            // is followed or cancelled.
            Event::Background(_) => {}
            Event::Follow(_) => {
                if let Some(c) = self.conn.as_mut() {
                    c.handle_run_events(now, chatgate_core::RunEvents::NotHere);
                }
            }
            Event::Cancel(_) => {
                if let Some(c) = self.conn.as_mut() {
                    c.handle_cancelled(now);
                }
            }
            Event::CloseClient => {
                self.client_closed = true;
                if let Some(mut up) = self.upstream.take() {
                    up.handle_eof(now);
                }
                self.pending_connect = None;
                self.pending_admit = None;
                self.ledger_unacked = false;
                self.conn = None;
                return true;
            }
        }
        false
    }

    /// One round of moving bytes and events; true if anything moved.
    fn step(&mut self) -> bool {
        if self.conn.is_none() {
            return false;
        }
        let now = self.now;
        let mut moved = false;
        while let Some(ev) = self.conn.as_mut().and_then(|c| c.poll_event()) {
            moved = true;
            if self.handle_event(ev) {
                return true;
            }
        }
        let Some(conn) = self.conn.as_mut() else {
            return moved;
        };
        if !self.client_stops_reading
            && let Some(bytes) = conn.poll_client_transmit()
        {
            let n = bytes.len();
            self.received.extend_from_slice(bytes);
            conn.handle_client_written(now, n);
            moved = true;
        }
        if self.upstream_dead && self.upstream.is_some() && conn.poll_upstream_transmit().is_some()
        {
            // The provider had closed it: the write "succeeds", then EOF.
            let n = conn.poll_upstream_transmit().map_or(0, <[u8]>::len);
            conn.handle_upstream_written(now, n);
            self.upstream = None;
            self.upstream_dead = false;
            conn.handle_upstream_eof(now);
            return true;
        }
        if let Some(up) = self.upstream.as_mut() {
            if let Some(bytes) = conn.poll_upstream_transmit() {
                let bytes = bytes.to_vec();
                conn.handle_upstream_written(now, bytes.len());
                match &self.provider_script {
                    // The whole request is written: the scripted answer.
                    Some(script) if conn.poll_upstream_transmit().is_none() => {
                        self.scripted = Some(Scripted {
                            bytes: script.answer.clone(),
                            pos: 0,
                            close: script.close,
                        });
                    }
                    Some(_) => {}
                    None => up.handle_data(now, &bytes),
                }
                moved = true;
            }
            if conn.wants_upstream_read() {
                let available = match &self.scripted {
                    Some(s) => Some(&s.bytes[s.pos..]).filter(|b| !b.is_empty()),
                    None => up.poll_transmit(),
                };
                if let Some(available) = available {
                    let n = read_size(self.upstream_reads, &mut self.read_rng, available.len());
                    let bytes = available[..n].to_vec();
                    match self.scripted.as_mut() {
                        Some(s) => s.pos += n,
                        None => up.handle_written(n),
                    }
                    self.upstream_sent.extend_from_slice(&bytes);
                    conn.handle_upstream_data(now, &bytes);
                    moved = true;
                }
            }
            let action = match &self.scripted {
                Some(s) => (s.close && s.pos == s.bytes.len()).then_some(SimAction::Close),
                None if up.poll_transmit().is_none() => up.poll_action(),
                None => None,
            };
            match action {
                Some(SimAction::Close) => {
                    self.upstream = None;
                    self.scripted = None;
                    conn.handle_upstream_eof(now);
                    moved = true;
                }
                Some(SimAction::Reset) => {
                    self.upstream = None;
                    conn.handle_upstream_failure(
                        now,
                        UpstreamFailure::Broken("connection reset by peer".into()),
                    );
                    moved = true;
                }
                None => {}
            }
        }
        // Pooled connections that the simulator closed are dropped.
        self.idle.retain_mut(|(c, _)| c.poll_action().is_none());
        moved
    }
}

/// The size of the next read from the provider when `available` bytes wait.
fn read_size(reads: UpstreamReads, rng: &mut Option<u64>, available: usize) -> usize {
    let most = match reads {
        UpstreamReads::Whole => available,
        UpstreamReads::AtMost(n) => n.max(1),
        UpstreamReads::Random { seed, max } => {
            // xorshift64*: small, and the same sizes for the same seed.
            let x = rng.get_or_insert(seed ^ 0x9E37_79B9_7F4A_7C15 | 1);
            *x ^= *x >> 12;
            *x ^= *x << 25;
            *x ^= *x >> 27;
            let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
            1 + (r % max.max(1) as u64) as usize
        }
    };
    most.min(available)
}

/// A response as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientResponse {
    /// Status code.
    pub status: u16,
    /// Header fields, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked (what arrived of it, if incomplete).
    pub body: Vec<u8>,
    /// The whole body arrived.
    pub complete: bool,
}

impl ClientResponse {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics, showing the body, if it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Parses the response at the start of `buf`, skipping `100 Continue`:
/// `None` until its head is complete; then the response (with `complete`
/// false while its body is unfinished) and the bytes it used. With `eof`, a
/// read-until-close body ends where `buf` ends.
pub fn parse_response(buf: &[u8], eof: bool) -> Result<Option<(ClientResponse, usize)>, HttpError> {
    let limits = HttpLimits {
        max_body: u64::MAX,
        ..HttpLimits::default()
    };
    let mut at = 0;
    loop {
        let Some(len) = HeadScanner::new().scan(&buf[at..], limits.max_head)? else {
            return Ok(None);
        };
        let raw = &buf[at..at + len];
        let head = parse_response_head(raw, &limits)?;
        at += len;
        if head.is_interim() {
            continue;
        }
        let mut slots = [httparse::EMPTY_HEADER; 128];
        let mut r = httparse::Response::new(&mut slots);
        let _ = r.parse(raw);
        let headers = r
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let mut decoder = BodyDecoder::new(head.framing, limits);
        let mut body = Vec::new();
        let used = decoder.decode(&buf[at..], &mut body)?;
        if eof {
            let _ = decoder.finish();
        }
        let response = ClientResponse {
            status: head.status,
            headers,
            body,
            complete: decoder.is_done(),
        };
        return Ok(Some((response, at + used)));
    }
}

/// Splits the bytes a client received into responses; a last response cut
/// short is returned with what arrived (`complete` false).
pub fn parse_responses(mut bytes: &[u8]) -> Result<Vec<ClientResponse>, HttpError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (response, used) = parse_response(bytes, true)?.ok_or(HttpError::Truncated)?;
        bytes = &bytes[used..];
        let complete = response.complete;
        out.push(response);
        if !complete {
            break;
        }
    }
    Ok(out)
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &[u8]) -> Vec<String> {
    let mut framer = chatgate_core::SseFramer::new(usize::MAX);
    let mut out = Vec::new();
    let mut push = |ev: &[u8]| {
        let data: Vec<&str> = std::str::from_utf8(ev)
            .unwrap_or("")
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if !data.is_empty() {
            out.push(data.join("\n"));
        }
    };
    while let Ok(Some(r)) = framer.next_event(body) {
        push(&body[r]);
    }
    if let Ok(Some(r)) = framer.finish() {
        push(&body[r]);
    }
    out
}

/// What an in-memory responses store answers (no expiry).
fn answer_responses(
    store: &mut std::collections::BTreeMap<
        String,
        chatgate_core::dialect::responses::stored::StoredResponse,
    >,
    ask: chatgate_core::StoreAsk,
) -> chatgate_core::StoreReply {
    use chatgate_core::{StoreAsk, StoreReply};
    match ask {
        StoreAsk::Read {
            key,
            chain,
            responses,
        } => {
            let get = |id: &str| store.get(id).filter(|r| r.key == key).cloned();
            let mut found = Vec::new();
            if let Some(last) = chain.as_deref().and_then(get) {
                found.extend(last.ancestors.iter().filter_map(|a| get(a)));
                found.push(last);
            }
            let key_bytes = store
                .values()
                .filter(|r| r.key == key)
                .map(|r| r.bytes())
                .sum();
            StoreReply::Read {
                chain: found,
                responses: responses.iter().filter_map(|id| get(id)).collect(),
                key_bytes,
            }
        }
        StoreAsk::Replace(r) if !store.contains_key(&r.id) => StoreReply::Kept,
        StoreAsk::Keep(r) | StoreAsk::Replace(r) => {
            store.insert(r.id.clone(), *r);
            StoreReply::Kept
        }
        StoreAsk::Delete { key, id } => {
            let mine = store.get(&id).is_some_and(|r| r.key == key);
            if mine {
                store.remove(&id);
            }
            StoreReply::Deleted(mine)
        }
    }
}
