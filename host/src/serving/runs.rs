//! Background runs in this process: each run's connection driven like a
//! client's (`driver`), with a recorder for its client — the other end of
//! a loopback connection — that reads the HTTP response the run writes and
//! keeps its events by sequence number; followers read them as they come;
//! a cancel closes the recorder's end (which the run reads as its client
//! leaving: cancelled). What a run does is core's; this moves its bytes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chatgate_core::dialect::responses::stored::{sequence_number, split_events};
use chatgate_core::http::{BodyDecoder, HttpLimits, parse_response_head};
use chatgate_core::{Follow, Run, RunEvents};
use futures_lite::{AsyncReadExt, future};

use super::driver::Shared;
use crate::runtime::{Runtime, now};

/// How long a finished run's events stay here for late followers (then
/// the store has them).
const KEPT_AFTER_END: Duration = Duration::from_secs(60);

/// The runs of this process, by response id.
#[derive(Default)]
pub(crate) struct Runs {
    map: Mutex<HashMap<String, Arc<RunLog>>>,
}

/// One run's events so far, and whether it ended or was cancelled.
pub(crate) struct RunLog {
    key: String,
    state: Mutex<RunState>,
    changed: event_listener::Event,
}

#[derive(Default)]
struct RunState {
    /// Each event's sequence number and bytes, in order.
    events: Vec<(u64, Vec<u8>)>,
    ended: bool,
    cancelled: bool,
}

impl RunLog {
    fn push(&self, seq: u64, event: &[u8]) {
        lock(&self.state).events.push((seq, event.to_vec()));
        self.changed.notify(usize::MAX);
    }

    fn end(&self) {
        lock(&self.state).ended = true;
        self.changed.notify(usize::MAX);
    }

    /// The events after `after`, and whether the run ended; `None` while
    /// there are none and it runs.
    fn after(&self, after: Option<u64>) -> Option<(Vec<u8>, bool)> {
        let state = lock(&self.state);
        // In order of their numbers: the first one after `after`, found
        // without a walk.
        let from = state
            .events
            .partition_point(|(seq, _)| after.is_some_and(|a| *seq <= a));
        let mut out = Vec::new();
        for (_, event) in &state.events[from..] {
            out.extend_from_slice(event);
        }
        (!out.is_empty() || state.ended).then_some((out, state.ended))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Runs {
    fn get(&self, id: &str, key: &str) -> Option<Arc<RunLog>> {
        lock(&self.map).get(id).filter(|r| r.key == key).cloned()
    }

    /// Registers `run` and starts driving it (with its recorder).
    pub(crate) fn start<R: Runtime>(shared: &Arc<Shared<R>>, run: Box<Run>) {
        let log = Arc::new(RunLog {
            key: run.key.clone(),
            state: Mutex::new(RunState::default()),
            changed: event_listener::Event::new(),
        });
        lock(&shared.runs.map).insert(run.id.clone(), Arc::clone(&log));
        let shared = Arc::clone(shared);
        shared.rt.clone().spawn(async move {
            let id = run.id.clone();
            drive(&shared, run, &log).await;
            if let Some(store) = &shared.responses {
                store.run_ended(&id);
            }
            // Late followers read it here a while, then from the store.
            shared
                .rt
                .timer(std::time::Instant::now() + KEPT_AFTER_END)
                .await;
            lock(&shared.runs.map).remove(&id);
        });
    }

    /// The events of the run `f` names after `f.after`, once there are
    /// some (or it ended); `NotHere` when it does not run here.
    pub(crate) async fn next(&self, f: &Follow) -> RunEvents {
        let Some(log) = self.get(&f.id, &f.key) else {
            return RunEvents::NotHere;
        };
        loop {
            let listener = log.changed.listen();
            if let Some((events, ended)) = log.after(f.after) {
                return RunEvents::Events(events, ended);
            }
            listener.await;
        }
    }

    /// Cancels the run `f` names if it runs here and has not ended, and
    /// waits for it to end.
    pub(crate) async fn cancel(&self, f: &Follow) {
        let Some(log) = self.get(&f.id, &f.key) else {
            return;
        };
        {
            let mut state = lock(&log.state);
            if !state.ended {
                state.cancelled = true;
            }
        }
        log.changed.notify(usize::MAX);
        loop {
            let listener = log.changed.listen();
            if lock(&log.state).ended {
                return;
            }
            listener.await;
        }
    }
}

/// Drives `run` until it ends: its connection on one end of a loopback
/// connection, its recorder on the other.
async fn drive<R: Runtime>(shared: &Arc<Shared<R>>, run: Box<Run>, log: &Arc<RunLog>) {
    let rt = &shared.rt;
    let (ours, theirs) = match loopback(rt).await {
        Ok(pair) => pair,
        Err(e) => {
            // Out of descriptors: nothing can drive it. Its connection is
            // dropped unmetered and its reservation is not given back
            // before the key's limits refill (the log says so); its kept
            // response reads `queued` until the next start fails it.
            tracing::error!(id = %run.id, error = %e, "a background run could not start: its reservation is lost until the limits refill");
            log.end();
            return;
        }
    };
    let mut conn = run.conn;
    conn.start_run(now());
    let recorder = record(ours, log);
    let serving = super::driver::serve_run(shared, conn, theirs);
    // The recorder ends first when the run is cancelled (its end closed),
    // else when the run's connection closed.
    future::zip(recorder, serving).await;
    log.end();
}

/// A connected pair of loopback TCP streams.
async fn loopback<R: Runtime>(rt: &R) -> std::io::Result<(R::Tcp, R::Tcp)> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    l.set_nonblocking(true)?;
    let l = rt.listener(l)?;
    let (a, b) = future::zip(rt.connect(addr), rt.accept(&l)).await;
    Ok((a?, b?))
}

/// Reads the run's HTTP response from `s`: its events, each kept with its
/// sequence number, until the run closes its end (or it is cancelled:
/// then this end is closed).
async fn record<T: futures_lite::AsyncRead + Unpin>(mut s: T, log: &RunLog) {
    let limits = HttpLimits {
        max_body: u64::MAX,
        ..HttpLimits::default()
    };
    let mut buf = vec![0u8; 16 * 1024];
    let mut head: Vec<u8> = Vec::new();
    let mut decoder: Option<BodyDecoder> = None;
    let mut body: Vec<u8> = Vec::new();
    loop {
        let cancelled = async {
            loop {
                let listener = log.changed.listen();
                if lock(&log.state).cancelled {
                    return None;
                }
                listener.await;
            }
        };
        let read = async { Some(s.read(&mut buf).await) };
        let n = match future::or(read, cancelled).await {
            // Cancelled: this end closes (dropped on return).
            None => return,
            Some(Ok(0) | Err(_)) => return,
            Some(Ok(n)) => n,
        };
        let mut input = &buf[..n];
        if decoder.is_none() {
            head.extend_from_slice(input);
            let Some(end) = memchr::memmem::find(&head, b"\r\n\r\n") else {
                continue;
            };
            let Ok(parsed) = parse_response_head(&head[..end + 4], &limits) else {
                return;
            };
            decoder = Some(BodyDecoder::new(parsed.framing, limits));
            let rest = head.split_off(end + 4);
            head = rest;
            input = &head;
        }
        let d = decoder.as_mut().expect("set above");
        if d.decode(input, &mut body).is_err() {
            return;
        }
        let events = split_events(&body);
        let used: usize = events.iter().map(|e| e.len()).sum();
        for event in events {
            if let Some(seq) = sequence_number(event) {
                log.push(seq, event);
            }
        }
        body.drain(..used);
        head.clear();
    }
}
