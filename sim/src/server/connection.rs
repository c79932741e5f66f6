//! One connection to the simulator: the request read (head, body), the
//! plan for it chosen, its pieces sent when they are due, and the exchange
//! journaled and counted when it ends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{ExchangeEnd, HEARTBEAT, JOURNAL_BODY_CAP, JournalEntry, SimServer, json_plan};
use crate::plan::{Piece, Plan, PlanFraming, plan_chat, plan_error};
use chatgate_core::Instant;
use chatgate_core::http::BodyDecoder;
use chatgate_core::http::write::{self, header, header_u64};
use chatgate_core::http::{Framing, HeadScanner, HttpLimits};
use chatgate_core::http::{Method, header_value, parse_request_head};

/// What the runtime must do to the connection once pending bytes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimAction {
    /// Close normally.
    Close,
    /// Close with a TCP reset (SO_LINGER 0).
    Reset,
}

#[derive(Debug)]
struct Active {
    plan: Plan,
    next: usize,
    started: Instant,
    seq: u64,
    keep_alive: bool,
    stalled: bool,
    /// A comment repeated forever, and when it is next due.
    heartbeat: Option<(&'static [u8], Instant)>,
    /// The second part of a split event, and when it is due.
    rest: Option<(Vec<u8>, Instant)>,
    sent: Vec<u8>,
    /// A chat exchange (journaled and counted in the totals).
    chat: bool,
}

#[derive(Debug)]
struct Pending {
    keep_alive: bool,
    path: String,
    method: Method,
    request_id: Option<String>,
    traceparent: Option<String>,
    authorized: bool,
    decoder: BodyDecoder,
    body: Vec<u8>,
}

/// One connection to the simulator.
#[derive(Debug)]
pub struct SimConnection {
    server: Arc<SimServer>,
    id: u64,
    cin: Vec<u8>,
    scanner: HeadScanner,
    pending: Option<Pending>,
    active: Option<Active>,
    out: Vec<u8>,
    out_pos: usize,
    actions: VecDeque<SimAction>,
    closed: bool,
}

impl SimConnection {
    /// A new connection.
    pub fn new(server: Arc<SimServer>) -> Self {
        let id = server.connections.fetch_add(1, Ordering::Relaxed);
        server.open.fetch_add(1, Ordering::Relaxed);
        SimConnection {
            server,
            id,
            cin: Vec::new(),
            scanner: HeadScanner::new(),
            pending: None,
            active: None,
            out: Vec::new(),
            out_pos: 0,
            actions: VecDeque::new(),
            closed: false,
        }
    }

    /// Bytes to write.
    #[must_use]
    pub fn poll_transmit(&self) -> Option<&[u8]> {
        (self.out_pos < self.out.len()).then(|| &self.out[self.out_pos..])
    }

    /// What to do once [`SimConnection::poll_transmit`] is empty.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<SimAction> {
        if self.poll_transmit().is_some() {
            return None;
        }
        self.actions.pop_front()
    }

    /// When to call [`SimConnection::handle_timeout`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let a = self.active.as_ref()?;
        if let Some((_, at)) = &a.rest {
            return Some(*at);
        }
        if let Some((_, h)) = a.heartbeat {
            return Some(h);
        }
        if a.stalled || a.next >= a.plan.pieces.len() {
            return None;
        }
        Some(due(a, a.next))
    }

    /// `n` bytes were written.
    pub fn handle_written(&mut self, n: usize) {
        self.out_pos += n;
        if self.out_pos >= self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
    }

    /// Bytes arrived.
    pub fn handle_data(&mut self, now: Instant, data: &[u8]) {
        if self.closed {
            return;
        }
        self.cin.extend_from_slice(data);
        self.process(now);
    }

    /// The client closed: an unfinished response was aborted.
    pub fn handle_eof(&mut self, _now: Instant) {
        if let Some(a) = self.active.take() {
            self.finish(&a, ExchangeEnd::Aborted);
        }
        if !self.closed {
            self.closed = true;
            self.out.clear();
            self.out_pos = 0;
            self.actions.push_back(SimAction::Close);
        }
    }

    /// A deadline passed: send what is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.send_due(now);
        self.process(now);
    }

    fn process(&mut self, now: Instant) {
        while !self.closed && self.active.is_none() {
            if self.pending.is_none() && !self.read_head(now) {
                return;
            }
            if !self.read_body(now) {
                return;
            }
        }
    }

    fn read_head(&mut self, now: Instant) -> bool {
        let limits = HttpLimits::default();
        let start = chatgate_core::http::leading_empty_lines(&self.cin);
        if start > 0 {
            // The scanner's position counts from the buffer's start.
            self.cin.drain(..start);
            self.scanner.reset();
        }
        let head = match self.scanner.scan(&self.cin, limits.max_head) {
            Ok(None) => return false,
            Ok(Some(len)) => parse_request_head(&self.cin[..len], &limits).map(|h| (h, len)),
            Err(e) => Err(e),
        };
        let (head, len) = match head {
            Ok(h) => h,
            Err(e) => {
                self.bad_http(now, &e);
                return false;
            }
        };
        let raw = &self.cin[..len];
        let request_id =
            header_value(raw, "x-request-id").map(|v| String::from_utf8_lossy(v).into_owned());
        let traceparent =
            header_value(raw, "traceparent").map(|v| String::from_utf8_lossy(v).into_owned());
        let authorized = match &self.server.options.api_key {
            None => true,
            Some(key) => header_value(raw, "authorization").is_some_and(|v| {
                v.strip_prefix(b"Bearer ")
                    .is_some_and(|k| k == key.as_bytes())
            }),
        };
        self.cin.drain(..len);
        self.scanner.reset();
        let framing = match head.framing {
            Framing::UntilClose => Framing::Empty,
            f => f,
        };
        self.pending = Some(Pending {
            keep_alive: head.keep_alive,
            path: head.path,
            method: head.method,
            request_id,
            traceparent,
            authorized,
            decoder: BodyDecoder::new(
                framing,
                HttpLimits {
                    max_body: 16 << 20,
                    ..limits
                },
            ),
            body: Vec::new(),
        });
        true
    }

    fn read_body(&mut self, now: Instant) -> bool {
        let p = self.pending.as_mut().expect("a head was read");
        match p.decoder.decode(&self.cin, &mut p.body) {
            Ok(used) => {
                self.cin.drain(..used);
            }
            Err(e) => {
                self.pending = None;
                self.bad_http(now, &e);
                return false;
            }
        }
        if !p.decoder.is_done() {
            return false;
        }
        let p = self.pending.take().expect("checked");
        let seq = self.server.seq.fetch_add(1, Ordering::Relaxed);
        let plan = match (p.method, p.path.as_str()) {
            (_, "/v1/chat/completions") if !p.authorized => {
                plan_error(401, "Incorrect API key provided.", None, "invalid_request_error", "invalid_api_key")
            }
            (Method::Post, "/v1/chat/completions")
                if self.server.options.strict_request_id
                    && p.request_id.as_deref().is_some_and(|id| !is_uuid(id)) =>
            {
                // llama-cpp-python's server: a 400 without a body.
                Plan::json(400, Vec::new(), Duration::ZERO)
            }
            (Method::Post, "/v1/chat/completions") => {
                let options = self.server.options_now(now);
                let created = self.server.wall.unix_secs(now);
                let mut plan = plan_chat(
                    &p.body,
                    &options,
                    created,
                    seq,
                    |prefixes| self.server.prompt_cache().longest_seen(prefixes),
                    |id| self.server.produced(id),
                );
                let prefixes = std::mem::take(&mut plan.prefixes);
                self.server.prompt_cache().remember(&prefixes);
                if let Some((ids, reasoning)) = plan.produced.take() {
                    self.server.remember_produced(ids, reasoning);
                }
                plan
            }
            (Method::Post, "/_sim/fault") => self.server.set_fault(&p.body, now),
            // A trace sink for benchmarks: every OTLP export accepted, unread.
            (Method::Post, "/v1/traces") => json_plan(Vec::new()),
            (Method::Delete, "/_sim/fault") => {
                *self.server.fault_slot() = None;
                json_plan(b"{\"fault\":null}".to_vec())
            }
            (Method::Get, "/v1/models")
                if matches!(self.server.fault_now(now, false), Some(crate::Fault::Reject { status, .. }) if status >= 500) =>
            {
                plan_error(503, "The simulated server is down.", None, "server_error", "server_error")
            }
            (Method::Get, "/v1/models") => json_plan(
                br#"{"object":"list","data":[{"id":"reasoning-model-k3","object":"model","created":0,"owned_by":"sim"}]}"#.to_vec(),
            ),
            (Method::Get, "/_sim/journal") => json_plan(serde_json::to_vec(&self.server.journal()).unwrap_or_default()),
            (Method::Get, "/_sim/stats") => json_plan(serde_json::to_vec(&self.server.totals()).unwrap_or_default()),
            _ => plan_error(404, "Unknown path.", None, "invalid_request_error", "unknown_url"),
        };
        let journaled = p.path == "/v1/chat/completions";
        let body = if journaled {
            let shown = &p.body[..p.body.len().min(JOURNAL_BODY_CAP)];
            Some(String::from_utf8_lossy(shown).into_owned())
        } else {
            None
        };
        self.start_seq(
            now,
            plan,
            p.keep_alive,
            (p.request_id, p.traceparent),
            body,
            seq,
        );
        true
    }

    /// Answers malformed HTTP with 400 and closes.
    fn bad_http(&mut self, now: Instant, e: &chatgate_core::http::HttpError) {
        let seq = self.server.seq.fetch_add(1, Ordering::Relaxed);
        let plan = plan_error(
            400,
            &e.to_string(),
            None,
            "invalid_request_error",
            "bad_http",
        );
        self.start_seq(now, plan, false, (None, None), None, seq);
    }

    fn start_seq(
        &mut self,
        now: Instant,
        plan: Plan,
        keep_alive: bool,
        (request_id, traceparent): (Option<String>, Option<String>),
        body: Option<String>,
        seq: u64,
    ) {
        let chat = body.is_some();
        if let Some(body) = body {
            self.server.begin();
            self.server.record(JournalEntry {
                seq,
                connection: self.id,
                request_id,
                traceparent,
                body,
                status: plan.status,
                stream: plan.stream,
                events_sent: 0,
                response: String::new(),
                outcome: ExchangeEnd::InProgress,
            });
        }
        let keep_alive = keep_alive && plan.framing != PlanFraming::Close && plan.send_head;
        if plan.send_head && plan.framing != PlanFraming::Length {
            // Streams send their head at once, like real providers.
            let head = head_bytes(&plan, None, keep_alive);
            self.push(&head);
        }
        self.active = Some(Active {
            plan,
            next: 0,
            started: now,
            seq,
            keep_alive,
            stalled: false,
            heartbeat: None,
            rest: None,
            sent: Vec::new(),
            chat,
        });
        self.send_due(now);
    }

    fn push(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    fn send_due(&mut self, now: Instant) {
        let Some(mut a) = self.active.take() else {
            return;
        };
        if let Some((comment, at)) = a.heartbeat {
            if now >= at {
                self.push_event(&mut a, comment);
                a.heartbeat = Some((comment, now + HEARTBEAT));
            }
            self.active = Some(a);
            return;
        }
        loop {
            if let Some((bytes, at)) = a.rest.take() {
                if now < at {
                    a.rest = Some((bytes, at));
                    self.active = Some(a);
                    return;
                }
                self.push_event(&mut a, &bytes);
            }
            if a.stalled || a.next >= a.plan.pieces.len() || now < due(&a, a.next) {
                break;
            }
            let piece = a.plan.pieces[a.next].clone();
            a.next += 1;
            match piece {
                Piece::Event(bytes) => {
                    if a.plan.framing == PlanFraming::Length {
                        let head = head_bytes(&a.plan, Some(bytes.len()), a.keep_alive);
                        self.push(&head);
                        self.push(&bytes);
                        record_sent(&mut a.sent, &bytes);
                    } else if a.plan.split > Duration::ZERO && bytes.len() >= 2 {
                        // Alternately mid-event and just before its last
                        // byte (the blank line's final LF).
                        let at = if a.next % 2 == 1 {
                            bytes.len() / 2
                        } else {
                            bytes.len() - 1
                        };
                        self.push_event(&mut a, &bytes[..at]);
                        a.rest = Some((bytes[at..].to_vec(), now + a.plan.split));
                    } else {
                        self.push_event(&mut a, &bytes);
                    }
                }
                Piece::Raw(bytes) => self.push(&bytes),
                Piece::Reset => {
                    self.finish(&a, ExchangeEnd::Reset);
                    self.actions.push_back(SimAction::Reset);
                    self.closed = true;
                    return;
                }
                Piece::Stall => a.stalled = true,
                Piece::Heartbeat(comment) => {
                    a.heartbeat = Some((comment, now + HEARTBEAT));
                    self.active = Some(a);
                    return;
                }
            }
        }
        if a.stalled || a.next < a.plan.pieces.len() {
            self.active = Some(a);
            return;
        }
        match a.plan.framing {
            PlanFraming::Chunked => write::last_chunk(&mut self.out),
            PlanFraming::Close => {}
            PlanFraming::Length if a.plan.pieces.is_empty() => {
                let head = head_bytes(&a.plan, Some(0), a.keep_alive);
                self.push(&head);
            }
            PlanFraming::Length => {}
        }
        self.finish(&a, ExchangeEnd::Completed);
        if !a.keep_alive {
            self.closed = true;
            self.actions.push_back(SimAction::Close);
        }
    }

    fn push_event(&mut self, a: &mut Active, bytes: &[u8]) {
        record_sent(&mut a.sent, bytes);
        if a.plan.framing == PlanFraming::Chunked {
            write::chunk(&mut self.out, bytes);
        } else {
            self.push(bytes);
        }
    }

    fn finish(&self, a: &Active, outcome: ExchangeEnd) {
        if a.chat {
            self.server.count(outcome, &a.sent);
        }
        let sent = a.next as u32;
        self.server.update(a.seq, |e| {
            if e.outcome == ExchangeEnd::InProgress {
                e.outcome = outcome;
                e.events_sent = sent;
                e.response = String::from_utf8_lossy(&a.sent).into_owned();
            }
        });
    }
}

impl Drop for SimConnection {
    fn drop(&mut self) {
        // A connection given up (a failed write) with an answer unfinished.
        if let Some(a) = self.active.take() {
            self.finish(&a, ExchangeEnd::Aborted);
        }
        self.server.open.fetch_sub(1, Ordering::Relaxed);
    }
}

fn record_sent(sent: &mut Vec<u8>, bytes: &[u8]) {
    let room = JOURNAL_BODY_CAP.saturating_sub(sent.len());
    sent.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

fn due(a: &Active, i: usize) -> Instant {
    a.started + a.plan.ttft + a.plan.interval * (i as u32)
}

fn head_bytes(plan: &Plan, length: Option<usize>, keep_alive: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write::status_line(&mut out, plan.status);
    header(&mut out, "Content-Type", plan.content_type);
    match (plan.framing, length) {
        (PlanFraming::Chunked, _) => header(&mut out, "Transfer-Encoding", "chunked"),
        (_, Some(n)) => header_u64(&mut out, "Content-Length", n as u64),
        _ => {}
    }
    if let Some(r) = plan.retry_after {
        header_u64(&mut out, "Retry-After", r);
    }
    if !keep_alive {
        header(&mut out, "Connection", "close");
    }
    write::end_head(&mut out);
    out
}

/// Whether `id` is a UUID (8-4-4-4-12 hex digits), as strict servers
/// require of `X-Request-Id`.
fn is_uuid(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}
