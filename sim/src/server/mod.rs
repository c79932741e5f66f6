//! The simulator's server side: HTTP in, planned responses out on schedule,
//! and a journal of what it received and how each exchange ended.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the server: its options, the runtime fault, the journal and totals, the prompt cache |
//! | `connection.rs` | one connection: the request read, the plan chosen, its bytes sent on schedule, the exchange journaled |

mod connection;

pub use connection::{SimAction, SimConnection};

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::SimOptions;
use crate::plan::{Plan, plan_error};
use chatgate_core::{Instant, WallClock};

/// Entries kept in the journal (oldest dropped first).
const JOURNAL_CAP: usize = 2000;
/// Request bodies longer than this are journaled truncated.
const JOURNAL_BODY_CAP: usize = 256 * 1024;
/// Interval of the `heartbeat_after_finish` and `keepalive_after_usage` comments.
const HEARTBEAT: Duration = Duration::from_millis(200);
/// Prefix fingerprints the prompt cache remembers (the oldest forgotten
/// first).
const PROMPT_CACHE_CAP: usize = 65_536;

/// How an exchange with the simulator ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExchangeEnd {
    /// Still being answered.
    InProgress,
    /// The whole planned response was sent.
    Completed,
    /// The client closed the connection before the response was complete.
    Aborted,
    /// The simulator reset the connection (a fault).
    Reset,
}

/// What the simulator received and did, per request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JournalEntry {
    /// Sequence number.
    pub seq: u64,
    /// Which connection carried the request (numbered from 1 per process),
    /// so reuse of connections can be observed.
    pub connection: u64,
    /// The `X-Request-Id` the client sent.
    pub request_id: Option<String>,
    /// The `traceparent` the client sent, as sent.
    pub traceparent: Option<String>,
    /// The request body as received (UTF-8, lossy; truncated past 256 KiB).
    pub body: String,
    /// Status answered.
    pub status: u16,
    /// Streamed.
    pub stream: bool,
    /// Body pieces (events) sent.
    pub events_sent: u32,
    /// The response body as sent (events concatenated, without chunk
    /// framing; UTF-8, lossy; truncated past 256 KiB).
    pub response: String,
    /// How it ended.
    pub outcome: ExchangeEnd,
}

/// The fault set for every request that chooses none: until when, and for
/// how many more chat requests.
#[derive(Debug)]
struct RuntimeFault {
    fault: crate::Fault,
    until: Option<Instant>,
    times: Option<u32>,
}

/// Shared state of a simulator process.
#[derive(Debug)]
pub struct SimServer {
    options: SimOptions,
    /// The fault for requests that choose none, as set at runtime
    /// (`POST /_sim/fault`), and until when (`for_ms`); the options'
    /// fault at start.
    fault: Mutex<Option<RuntimeFault>>,
    wall: WallClock,
    seq: AtomicU64,
    connections: AtomicU64,
    open: AtomicU64,
    journal: Mutex<VecDeque<JournalEntry>>,
    totals: Mutex<SimTotals>,
    prompt_cache: Mutex<PromptCache>,
    /// The reasoning of the tool calls it made, by call id (the latest
    /// [`PRODUCED_CAP`]): what a replayed reasoning is checked against.
    produced: Mutex<(HashMap<String, String>, VecDeque<String>)>,
}

/// Tool calls whose reasoning the simulator remembers.
const PRODUCED_CAP: usize = 65_536;

/// The prefixes of `messages` this simulator has answered, as
/// fingerprints: a request's cached tokens are those of its longest prefix
/// found here.
struct PromptCache {
    /// Oldest first.
    order: VecDeque<u64>,
    set: HashSet<u64>,
    cap: usize,
}

impl std::fmt::Debug for PromptCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptCache")
            .field("len", &self.order.len())
            .field("cap", &self.cap)
            .finish()
    }
}

impl PromptCache {
    fn new(cap: usize) -> PromptCache {
        PromptCache {
            order: VecDeque::new(),
            set: HashSet::new(),
            cap,
        }
    }

    /// How many messages the longest of `prefixes` (fingerprints of the
    /// first 1, 2, … messages) seen before has; 0 if none was.
    fn longest_seen(&self, prefixes: &[u64]) -> usize {
        prefixes
            .iter()
            .rposition(|f| self.set.contains(f))
            .map_or(0, |i| i + 1)
    }

    /// Remembers `prefixes`, forgetting the oldest beyond the cap.
    fn remember(&mut self, prefixes: &[u64]) {
        for &f in prefixes {
            if self.cap == 0 || !self.set.insert(f) {
                continue;
            }
            if self.order.len() == self.cap
                && let Some(old) = self.order.pop_front()
            {
                self.set.remove(&old);
            }
            self.order.push_back(f);
        }
    }
}

/// Running totals over every chat exchange the simulator finished, however
/// many the journal still holds (`GET /_sim/stats`): what a soak run
/// reconciles the gateway's ledger against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SimTotals {
    /// Chat exchanges finished (completed, aborted or reset).
    pub exchanges: u64,
    /// Of which completed in full.
    pub completed: u64,
    /// Of which the client aborted.
    pub aborted: u64,
    /// Of which the simulator reset (a fault).
    pub reset: u64,
    /// Tokens in the last `usage` object actually sent per exchange, summed.
    pub prompt_tokens: u64,
    /// Likewise.
    pub completion_tokens: u64,
    /// Likewise.
    pub reasoning_tokens: u64,
    /// Likewise (`prompt_tokens_details.cached_tokens`: read from the
    /// simulator's prompt cache).
    pub cached_tokens: u64,
    /// Connections open now, the one asking included: a client's idle
    /// keep-alive connections are seen here until it closes them.
    pub open_connections: u64,
    /// Chat exchanges being answered now.
    pub in_progress: u64,
    /// The most chat exchanges ever answered at once: what an in-flight
    /// cap in front of the simulator is checked against.
    pub peak_in_progress: u64,
}

impl SimServer {
    fn fault_slot(&self) -> std::sync::MutexGuard<'_, Option<RuntimeFault>> {
        self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fault in force at `now` (one set `for_ms` lapses); a chat
    /// request (`use_one`) uses one of its `times` (the last clears it).
    fn fault_now(&self, now: Instant, use_one: bool) -> Option<crate::Fault> {
        let mut slot = self.fault_slot();
        let f = slot.as_mut()?;
        let fault = f.fault.clone();
        let lapsed = f.until.is_some_and(|u| now >= u);
        let used_up = match f.times.as_mut() {
            Some(left) if use_one && !lapsed => {
                *left -= 1;
                *left == 0
            }
            _ => false,
        };
        if lapsed || used_up {
            *slot = None;
        }
        (!lapsed).then_some(fault)
    }

    /// The options for a chat request at `now`, with the fault in force.
    fn options_now(&self, now: Instant) -> SimOptions {
        SimOptions {
            fault: self.fault_now(now, true),
            ..self.options.clone()
        }
    }

    /// `POST /_sim/fault` with `{"fault": NAME, …its parameters}`: the fault
    /// for every request that does not choose its own, until
    /// `DELETE /_sim/fault`, for `for_ms` milliseconds (a flapping
    /// endpoint that recovers by itself), or for the next `times` chat
    /// requests. A `reject` fault with a 5xx
    /// status answers `GET /v1/models` too, as a server that is down would.
    fn set_fault(&self, body: &[u8], now: Instant) -> Plan {
        let bad = |msg: String| {
            plan_error(
                400,
                &msg,
                None,
                "invalid_request_error",
                "invalid_sim_option",
            )
        };
        let Ok(serde_json::Value::Object(o)) = serde_json::from_slice(body) else {
            return bad("the body must be a JSON object with a 'fault'".into());
        };
        let get = |k: &str| {
            o.get(k).map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        let Some(name) = get("fault") else {
            return bad("'fault' is missing".into());
        };
        let until = match get("for_ms").map(|v| v.parse::<u64>()) {
            None => None,
            Some(Ok(ms)) => Some(now + Duration::from_millis(ms)),
            Some(Err(_)) => return bad("'for_ms' must be a number of milliseconds".into()),
        };
        let times = match get("times").map(|v| v.parse::<u32>()) {
            None => None,
            Some(Ok(n)) if n > 0 => Some(n),
            Some(_) => return bad("'times' must be a positive number of requests".into()),
        };
        match crate::Fault::parse(&name, &get) {
            Ok(f) => {
                *self.fault_slot() = Some(RuntimeFault {
                    fault: f,
                    until,
                    times,
                });
                json_plan(format!("{{\"fault\":{}}}", serde_json::Value::String(name)).into_bytes())
            }
            Err(msg) => bad(msg),
        }
    }

    /// A simulator with these defaults.
    pub fn new(options: SimOptions, wall: WallClock) -> Arc<SimServer> {
        Arc::new(SimServer {
            fault: Mutex::new(options.fault.clone().map(|fault| RuntimeFault {
                fault,
                until: None,
                times: None,
            })),
            options,
            wall,
            seq: AtomicU64::new(1),
            connections: AtomicU64::new(1),
            open: AtomicU64::new(0),
            journal: Mutex::new(VecDeque::new()),
            totals: Mutex::new(SimTotals::default()),
            prompt_cache: Mutex::new(PromptCache::new(PROMPT_CACHE_CAP)),
            produced: Mutex::new((HashMap::new(), VecDeque::new())),
        })
    }

    /// The reasoning it produced for the tool call `id`, if it made it.
    fn produced(&self, id: &str) -> Option<String> {
        let p = self.produced.lock().unwrap_or_else(|e| e.into_inner());
        p.0.get(id).cloned()
    }

    /// Remembers the reasoning it produced for the calls `ids`.
    fn remember_produced(&self, ids: Vec<String>, reasoning: String) {
        let mut p = self.produced.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *p;
        for id in ids {
            if map.insert(id.clone(), reasoning.clone()).is_none() {
                order.push_back(id);
            }
            while order.len() > PRODUCED_CAP {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
    }

    fn prompt_cache(&self) -> std::sync::MutexGuard<'_, PromptCache> {
        self.prompt_cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The running totals.
    pub fn totals(&self) -> SimTotals {
        SimTotals {
            open_connections: self.open.load(Ordering::Relaxed),
            ..*self.totals.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    fn count(&self, outcome: ExchangeEnd, sent: &[u8]) {
        let usage = last_usage(sent).unwrap_or_default();
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        t.in_progress = t.in_progress.saturating_sub(1);
        t.exchanges += 1;
        match outcome {
            ExchangeEnd::Completed => t.completed += 1,
            ExchangeEnd::Aborted => t.aborted += 1,
            ExchangeEnd::Reset => t.reset += 1,
            ExchangeEnd::InProgress => {}
        }
        t.prompt_tokens += usage.prompt_tokens;
        t.completion_tokens += usage.completion_tokens;
        t.reasoning_tokens += usage.reasoning_tokens;
        t.cached_tokens += usage.cached_tokens;
    }

    fn begin(&self) {
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        t.in_progress += 1;
        t.peak_in_progress = t.peak_in_progress.max(t.in_progress);
    }

    /// A copy of the journal.
    pub fn journal(&self) -> Vec<JournalEntry> {
        self.lock().iter().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<JournalEntry>> {
        self.journal.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, entry: JournalEntry) {
        let mut j = self.lock();
        if j.len() >= JOURNAL_CAP {
            j.pop_front();
        }
        j.push_back(entry);
    }

    fn update(&self, seq: u64, f: impl FnOnce(&mut JournalEntry)) {
        if let Some(e) = self.lock().iter_mut().rev().find(|e| e.seq == seq) {
            f(e);
        }
    }
}

/// The last `usage` object in what was sent, if any.
fn last_usage(sent: &[u8]) -> Option<chatgate_core::Usage> {
    let at = memchr::memmem::rfind(sent, b"\"usage\":{")?;
    let rest = &sent[at + b"\"usage\":".len()..];
    serde_json::Deserializer::from_slice(rest)
        .into_iter::<chatgate_core::Usage>()
        .next()?
        .ok()
}

fn json_plan(body: Vec<u8>) -> Plan {
    Plan::json(200, body, Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chatgate_core::http::{BodyDecoder, Framing, HttpLimits};

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn request(body: &str) -> Vec<u8> {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nX-Request-Id: r1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    fn drain(c: &mut SimConnection) -> Vec<u8> {
        let out = c.poll_transmit().map(<[u8]>::to_vec).unwrap_or_default();
        c.handle_written(out.len());
        out
    }

    #[test]
    fn a_fault_set_at_runtime_applies_until_cleared() {
        let server = SimServer::new(SimOptions::default(), WallClock::new(0));
        let ask = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let status = |raw: &[u8]| {
            let mut c = SimConnection::new(Arc::clone(&server));
            c.handle_data(at(0), raw);
            let out = drain(&mut c);
            String::from_utf8_lossy(&out[9..12]).into_owned()
        };
        let control = |method: &str, body: &str| {
            format!(
                "{method} /_sim/fault HTTP/1.1\r\nHost: sim\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        };
        assert_eq!(status(&request(ask)), "200");
        assert_eq!(
            status(&control("POST", r#"{"fault":"reject","status":503}"#)),
            "200"
        );
        assert_eq!(status(&request(ask)), "503");
        assert_eq!(status(&control("POST", r#"{"fault":"nope"}"#)), "400");
        assert_eq!(status(&request(ask)), "503", "a bad fault changes nothing");
        assert_eq!(status(&control("DELETE", "")), "200");
        assert_eq!(status(&request(ask)), "200");
        // For the next two requests only.
        let twice = r#"{"fault":"reject","status":500,"times":2}"#;
        assert_eq!(status(&control("POST", twice)), "200");
        assert_eq!(status(&request(ask)), "500");
        assert_eq!(status(&request(ask)), "500");
        assert_eq!(status(&request(ask)), "200");
        assert_eq!(
            status(&control("POST", r#"{"fault":"reject","times":0}"#)),
            "400"
        );
    }

    #[test]
    fn timed_stream_and_journal() {
        let server = SimServer::new(SimOptions::default(), WallClock::new(0));
        let mut c = SimConnection::new(Arc::clone(&server));
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x_sim":{"ttft_ms":100,"token_ms":10,"reasoning_tokens":2,"answer_tokens":2}}"#;
        c.handle_data(at(0), &request(body));
        let head = drain(&mut c);
        assert!(head.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert_eq!(c.poll_timeout(), Some(at(100)));
        c.handle_timeout(at(100));
        let first = drain(&mut c);
        assert!(String::from_utf8_lossy(&first).contains("reasoning_content"));
        assert_eq!(c.poll_timeout(), Some(at(110)));
        c.handle_timeout(at(1000));
        let rest = String::from_utf8(drain(&mut c)).unwrap();
        assert!(rest.contains("data: [DONE]") && rest.ends_with("0\r\n\r\n"));
        let j = server.journal();
        assert_eq!(j.len(), 1);
        assert_eq!(
            (j[0].outcome, j[0].request_id.as_deref(), j[0].stream),
            (ExchangeEnd::Completed, Some("r1"), true)
        );
        assert!(j[0].body.contains("x_sim"));
    }

    #[test]
    fn split_events_go_out_in_two_writes() {
        let server = SimServer::new(SimOptions::default(), WallClock::new(0));
        let mut c = SimConnection::new(Arc::clone(&server));
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x_sim":{"split_ms":50,"reasoning_tokens":2,"answer_tokens":2}}"#;
        c.handle_data(at(0), &request(body));
        let mut t = 0;
        let mut writes = vec![drain(&mut c)];
        while let Some(next) = c.poll_timeout() {
            assert_eq!(next, at(t + 50), "each second part 50 ms after the first");
            t += 50;
            c.handle_timeout(next);
            writes.push(drain(&mut c));
        }
        let bodies: Vec<String> = writes[1..]
            .iter()
            .map(|w| {
                let mut out = Vec::new();
                let mut d = BodyDecoder::new(Framing::Chunked, HttpLimits::default());
                d.decode(w, &mut out).unwrap();
                String::from_utf8(out).unwrap()
            })
            .collect();
        // The head and the first half of the first event, then each write:
        // the rest of one event and the first part of the next.
        assert!(!bodies.is_empty());
        for b in &bodies[..bodies.len() - 1] {
            assert!(!b.ends_with("\n\n"), "{b:?}");
        }
        assert!(bodies.last().unwrap().ends_with("\n"));
        let j = server.journal();
        assert_eq!(j[0].outcome, ExchangeEnd::Completed);
        let first = String::from_utf8_lossy(&writes[0]).into_owned();
        let (_, first_body) = first.split_once("\r\n\r\n").unwrap();
        let mut d = BodyDecoder::new(Framing::Chunked, HttpLimits::default());
        let mut all = Vec::new();
        d.decode(first_body.as_bytes(), &mut all).unwrap();
        for b in &bodies {
            all.extend_from_slice(b.as_bytes());
        }
        assert_eq!(String::from_utf8(all).unwrap(), j[0].response);
        assert!(j[0].response.ends_with("data: [DONE]\n\n"));
    }

    #[test]
    fn open_connections_are_counted() {
        let server = SimServer::new(SimOptions::default(), WallClock::new(0));
        let a = SimConnection::new(Arc::clone(&server));
        let b = SimConnection::new(Arc::clone(&server));
        assert_eq!(server.totals().open_connections, 2);
        drop(a);
        drop(b);
        assert_eq!(server.totals().open_connections, 0);
    }

    #[test]
    fn abort_is_observed() {
        let server = SimServer::new(SimOptions::default(), WallClock::new(0));
        let mut c = SimConnection::new(Arc::clone(&server));
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x_sim":{"token_ms":10}}"#;
        c.handle_data(at(0), &request(body));
        c.handle_timeout(at(25));
        c.handle_eof(at(26));
        let j = server.journal();
        assert_eq!(j[0].outcome, ExchangeEnd::Aborted);
        assert_eq!(j[0].events_sent, 3);
        assert_eq!(c.poll_action(), Some(SimAction::Close));
    }

    #[test]
    fn reset_fault_and_keep_alive() {
        let server = SimServer::new(SimOptions::default(), WallClock::new(0));
        let mut c = SimConnection::new(Arc::clone(&server));
        let plain = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let mut two = request(plain);
        two.extend_from_slice(&request(plain));
        c.handle_data(at(0), &two);
        let out = String::from_utf8(drain(&mut c)).unwrap();
        assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 2, "{out}");
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x_sim":{"fault":"reset","after":1}}"#;
        c.handle_data(at(0), &request(body));
        assert!(c.poll_action().is_none());
        drain(&mut c);
        assert_eq!(c.poll_action(), Some(SimAction::Reset));
        assert_eq!(server.journal()[2].outcome, ExchangeEnd::Reset);
        // Two answers with usage, one reset before its usage chunk.
        let t = server.totals();
        assert_eq!((t.exchanges, t.completed, t.reset), (3, 2, 1));
        let one = last_usage(out.as_bytes()).unwrap();
        assert!(one.prompt_tokens > 0 && one.completion_tokens > 0);
        assert_eq!(
            (t.prompt_tokens, t.completion_tokens),
            (2 * one.prompt_tokens, 2 * one.completion_tokens)
        );
    }

    #[test]
    fn totals_count_the_last_usage_sent() {
        let server = SimServer::new(SimOptions::default(), WallClock::new(0));
        let mut c = SimConnection::new(Arc::clone(&server));
        let body = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"x_sim":{"usage_every":true,"reasoning_tokens":3,"answer_tokens":2}}"#;
        c.handle_data(at(0), &request(body));
        let mut sent = String::new();
        for _ in 0..100 {
            c.handle_timeout(at(1000));
            sent.push_str(&String::from_utf8(drain(&mut c)).unwrap());
        }
        assert!(sent.matches("\"usage\":{").count() > 2, "{sent}");
        let t = server.totals();
        assert_eq!((t.exchanges, t.completed), (1, 1));
        assert_eq!((t.completion_tokens, t.reasoning_tokens), (5, 3));
    }

    /// The usage a whole (unstreamed) answer to `body` reports.
    fn usage_of(server: &Arc<SimServer>, body: &str) -> chatgate_core::Usage {
        let mut c = SimConnection::new(Arc::clone(server));
        c.handle_data(at(0), &request(body));
        let out = drain(&mut c);
        assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"));
        last_usage(&out).expect("a usage object")
    }

    const TURN_1: &str = r#"{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"What is two plus two?"}]}"#;
    const TURN_2: &str = r#"{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"What is two plus two?"},{"role":"assistant","content":"Four."},{"role":"user","content":"And three plus three?"}]}"#;

    #[test]
    fn a_first_request_reads_nothing_from_the_prompt_cache() {
        let server = SimServer::new(SimOptions::default(), WallClock::new(0));
        let u = usage_of(&server, TURN_1);
        assert!(u.prompt_tokens > 0);
        assert_eq!((u.cached_tokens, u.cache_read_input_tokens), (0, 0));
        assert_eq!(server.totals().cached_tokens, 0);
    }

    #[test]
    fn a_continued_conversation_reads_its_earlier_messages_from_the_cache() {
        let opts = SimOptions {
            template_tokens: 50,
            ..SimOptions::default()
        };
        let server = SimServer::new(opts, WallClock::new(0));
        let first = usage_of(&server, TURN_1);
        let second = usage_of(&server, TURN_2);
        // The first turn's messages, the base 3 included and the template
        // not: 3 + (4 + 4) + (4 + 6).
        assert_eq!(first.prompt_tokens, 21 + 50);
        assert_eq!(second.cached_tokens, 21);
        assert_eq!(second.cache_read_input_tokens, 21);
        assert!(second.cached_tokens < second.prompt_tokens);
        // Repeated whole: every message, never the template.
        let again = usage_of(&server, TURN_2);
        assert_eq!(again.cached_tokens, again.prompt_tokens - 50);
        // Only a prefix counts: the same last message after a different
        // first one is not cached.
        let other = TURN_2.replace("You are terse.", "You are verbose.");
        assert_eq!(usage_of(&server, &other).cached_tokens, 0);
        assert_eq!(
            server.totals().cached_tokens,
            second.cached_tokens + again.cached_tokens
        );
    }

    #[test]
    fn streams_report_cached_tokens_and_rejections_are_not_remembered() {
        let server = SimServer::new(SimOptions::default(), WallClock::new(0));
        let rejected = TURN_1.replace("]}", r#"],"x_sim":{"fault":"reject","status":503}}"#);
        let mut c = SimConnection::new(Arc::clone(&server));
        c.handle_data(at(0), &request(&rejected));
        assert!(drain(&mut c).starts_with(b"HTTP/1.1 503"));
        let stream = TURN_1.replace(
            "]}",
            r#"],"stream":true,"stream_options":{"include_usage":true}}"#,
        );
        let mut sent = Vec::new();
        for _ in 0..2 {
            let mut c = SimConnection::new(Arc::clone(&server));
            c.handle_data(at(0), &request(&stream));
            sent.push(last_usage(&drain(&mut c)).expect("a usage chunk"));
        }
        assert_eq!(sent[0].cached_tokens, 0, "the rejection was not remembered");
        assert_eq!(sent[1].cached_tokens, sent[1].prompt_tokens);
        assert_eq!(sent[1].cache_read_input_tokens, sent[1].prompt_tokens);
    }

    #[test]
    fn each_simulator_has_its_own_prompt_cache() {
        let one = SimServer::new(SimOptions::default(), WallClock::new(0));
        let two = SimServer::new(SimOptions::default(), WallClock::new(0));
        usage_of(&one, TURN_1);
        assert!(usage_of(&one, TURN_2).cached_tokens > 0);
        assert_eq!(usage_of(&two, TURN_2).cached_tokens, 0);
    }

    #[test]
    fn the_prompt_cache_forgets_its_oldest_beyond_the_cap() {
        let mut cache = PromptCache::new(PROMPT_CACHE_CAP);
        let n = PROMPT_CACHE_CAP as u64 + 1000;
        let all: Vec<u64> = (0..n)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        for chunk in all.chunks(7) {
            cache.remember(chunk);
        }
        // Remembering again what it holds changes nothing.
        cache.remember(&all[all.len() - 10..]);
        assert_eq!(cache.order.len(), PROMPT_CACHE_CAP);
        assert_eq!(cache.set.len(), PROMPT_CACHE_CAP);
        assert_eq!(cache.longest_seen(&all[..1000]), 0, "the oldest forgotten");
        assert_eq!(cache.longest_seen(&all[1000..1003]), 3);
        assert_eq!(cache.longest_seen(&[all[0], all[n as usize - 1]]), 2);
        // Through a server: a request of more messages than the cap holds
        // leaves the cap full and the request's latest prefixes in it.
        let server = SimServer::new(SimOptions::default(), WallClock::new(0));
        let messages: Vec<String> = (0..PROMPT_CACHE_CAP + 10)
            .map(|i| format!(r#"{{"role":"user","content":"{i}"}}"#))
            .collect();
        let body = format!(r#"{{"model":"m","messages":[{}]}}"#, messages.join(","));
        let first = usage_of(&server, &body);
        assert_eq!(first.cached_tokens, 0);
        assert_eq!(server.prompt_cache().order.len(), PROMPT_CACHE_CAP);
        let again = usage_of(&server, &body);
        assert_eq!(again.cached_tokens, again.prompt_tokens);
    }

    #[test]
    fn requires_the_api_key_when_configured() {
        let opts = SimOptions {
            api_key: Some("pk".into()),
            ..SimOptions::default()
        };
        let server = SimServer::new(opts, WallClock::new(0));
        let mut c = SimConnection::new(server);
        c.handle_data(
            at(0),
            &request(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#),
        );
        assert!(drain(&mut c).starts_with(b"HTTP/1.1 401"));
    }
}
