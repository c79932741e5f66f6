//! The provider endpoints serving the model: which one a request goes to,
//! what their answers say about their health, and what operators see of
//! them.
//!
//! **Choice.** Among the endpoints a request has not tried yet and whose
//! health lets a request through, the next one by smooth weighted round
//! robin (nginx's: over every cycle each endpoint gets exactly its share),
//! unless it has more than one request in flight per unit of weight than
//! the least loaded one, which then gets it instead. When no endpoint is
//! available (all ejected), the one that comes back soonest is tried rather
//! than failing without an attempt.
//!
//! **Models.** Each model of the catalogue is served by its own endpoints
//! (every endpoint unless it names some): a request chooses only among its
//! model's.
//!
//! **Affinity.** A request that carries a conversation's key (its
//! `prompt_cache_key`, a session header, its `user`) goes to the endpoint
//! that key ranks first among those available (rendezvous hashing,
//! weighted), so a conversation keeps hitting one provider's prompt cache;
//! unless that endpoint already has more than twice its share of the
//! requests in flight, when the next in the key's ranking takes it. An
//! ejected endpoint's conversations go to their next choice, and come back
//! when it does.
//!
//! **Health** is passive ([`health`]): consecutive failures eject an
//! endpoint for a cool-down that grows; one trial request readmits it.
//!
//! Every choice is an [`Attempt`], which reports how it ended exactly once
//! (a dropped attempt reports that it was abandoned), so in-flight counts
//! and trials never leak.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the endpoint set, the choice, attempts, what `GET /upstreams` shows |
//! | `health.rs` | passive health, ejection and trials, probes |
//! | `prompt.rs` | each endpoint's learned prompt allowance (what it counts beyond the estimate) |

mod health;
mod prompt;

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub(crate) use health::{Change, Health, State};
pub use health::{FailureKind, Outcome};
pub use prompt::PromptAllowance;

use crate::catalog::Catalog;
use crate::config::{EndpointConfig, MAX_ENDPOINTS};
use crate::http::write::header;
use crate::metrics::{Histogram, header as metric_header};
use crate::time::{Instant, WallClock, rfc3339_ms};

/// Ids of endpoints, unique in a process (a reload's new endpoint gets a
/// new one; an unchanged endpoint keeps its own, and its health).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One provider endpoint.
pub struct Endpoint {
    id: u64,
    config: EndpointConfig,
    /// Its name's hash: its place in every affinity key's ranking (by
    /// name, so instances and reloads rank alike).
    name_hash: u64,
    /// The fixed start of every request head sent to it (request line,
    /// `Host`, `Authorization`, `Content-Type`, `User-Agent`).
    prefix: Vec<u8>,
    health: Mutex<Health>,
    in_flight: AtomicU64,
    requests: AtomicU64,
    failures: [AtomicU64; FailureKind::ALL.len()],
    ttfb: Histogram,
    /// How many more prompt tokens it counts than the gateway estimates.
    prompt: PromptAllowance,
    /// Its last complete answer reported no usage (a provider that never
    /// does, such as llama-cpp-python's streams).
    omits_usage: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the prefix: it holds the endpoint's key.
        f.debug_struct("Endpoint")
            .field("id", &self.id)
            .field("name", &self.config.name)
            .field("url", &self.config.target.display_url())
            .finish_non_exhaustive()
    }
}

impl PartialEq for Endpoint {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Endpoint {}

impl Endpoint {
    fn new(config: EndpointConfig) -> Endpoint {
        let prefix = request_prefix(&config);
        Endpoint {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name_hash: affinity_hash(config.name.as_bytes()),
            config,
            prefix,
            health: Mutex::new(Health::default()),
            in_flight: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            failures: Default::default(),
            ttfb: Histogram::default(),
            prompt: PromptAllowance::default(),
            omits_usage: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Unique in the process: the runtime keys its connection pools by it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its configuration (its key inside, in a `Secret`).
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The `q` quantile of its time to first byte, milliseconds.
    pub fn ttfb_quantile_ms(&self, q: f64) -> Option<f64> {
        self.ttfb.quantile_ms(q)
    }

    /// Whether its last complete answer left usage out.
    pub(crate) fn omits_usage(&self) -> bool {
        self.omits_usage.load(Ordering::Relaxed)
    }

    /// A complete answer of its came with usage (`false`) or without.
    pub(crate) fn saw_usage_omitted(&self, omitted: bool) {
        self.omits_usage.store(omitted, Ordering::Relaxed);
    }

    /// What it counts beyond the gateway's prompt estimates.
    pub fn prompt_allowance(&self) -> &PromptAllowance {
        &self.prompt
    }

    /// The probe the runtime sends it while it is ejected: `GET
    /// {upstream}/models` (cheap, and served by OpenAI-compatible servers),
    /// with its key, on a connection of its own that closes after it.
    pub fn probe_request(&self) -> Vec<u8> {
        let mut p = request_head(&self.config, "GET", "/models");
        header(&mut p, "Accept", "application/json");
        header(&mut p, "Connection", "close");
        p.extend_from_slice(b"\r\n");
        p
    }

    /// A probe ended at `now`, with the status the endpoint answered
    /// (`None`: no answer: it could not connect, broke, or timed out).
    pub fn probed(&self, status: Option<u16>, now: Instant) {
        let alive = status.is_some_and(|s| s < 500 && s != 408 && s != 429);
        if self.health().probed(alive, now) == Some(Change::Readmitted) {
            tracing::info!(
                endpoint = self.name(),
                status = status.unwrap_or(0),
                "provider endpoint readmitted: it answered a probe"
            );
        }
    }

    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    fn health(&self) -> MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn load(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// The indices of the set bits of `set`, lowest first.
fn bits(mut set: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (set != 0).then(|| {
            let i = set.trailing_zeros() as usize;
            set &= set - 1;
            i
        })
    })
}

/// A stable 64-bit hash (FNV-1a, then mixed): what an affinity key and an
/// endpoint's name are ranked by.
pub(crate) fn affinity_hash(bytes: &[u8]) -> u64 {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    mix(h)
}

/// splitmix64's finaliser: every input bit moves every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The load an endpoint may carry for an affinity key, as a multiple of
/// its weight's part of the requests in flight (plus one): twice it
/// (consistent hashing with bounded loads). A tighter bound spills
/// conversations at ordinary load: with 8 requests in flight over three
/// endpoints, a quarter above the share moves one request in six off its
/// conversation's endpoint by chance alone; twice it, one in 150.
const AFFINITY_BOUND: (u128, u128) = (2, 1);

/// The endpoints and the catalogue in force (a reload replaces both at
/// once), and the round robin's state.
#[derive(Debug)]
pub struct EndpointSet {
    endpoints: Vec<Arc<Endpoint>>,
    /// Smooth weighted round robin: each endpoint's current weight.
    current: Mutex<Vec<i64>>,
    catalog: Catalog,
    /// For each model (by its index in the catalogue), the endpoints that
    /// serve it (bits).
    serves: Vec<u64>,
}

impl EndpointSet {
    /// The set for `pool` (at least one endpoint) serving `catalog` (whose
    /// models name endpoints of the pool, as the configuration checked).
    /// Endpoints of `previous` whose configuration is unchanged are kept
    /// as they are: their health, counts and the runtime's connections to
    /// them carry over.
    pub fn new(
        pool: Vec<EndpointConfig>,
        catalog: Catalog,
        previous: Option<&EndpointSet>,
    ) -> EndpointSet {
        let endpoints: Vec<Arc<Endpoint>> = pool
            .into_iter()
            .map(|config| {
                previous
                    .and_then(|p| p.endpoints.iter().find(|e| e.config == config))
                    .map_or_else(|| Arc::new(Endpoint::new(config)), Arc::clone)
            })
            .collect();
        assert!(
            (1..=MAX_ENDPOINTS).contains(&endpoints.len()),
            "a set has 1 to {MAX_ENDPOINTS} endpoints (checked by the configuration)"
        );
        let serves = catalog
            .models()
            .iter()
            .map(|m| {
                endpoints
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| {
                        m.endpoints
                            .as_ref()
                            .is_none_or(|names| names.contains(&e.config.name))
                    })
                    .fold(0u64, |set, (i, _)| set | 1 << i)
            })
            .collect();
        EndpointSet {
            current: Mutex::new(vec![0; endpoints.len()]),
            endpoints,
            catalog,
            serves,
        }
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[Arc<Endpoint>] {
        &self.endpoints
    }

    /// The catalogue the endpoints serve.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The endpoints (bits of their indices) that serve the model with
    /// this index.
    pub fn serving(&self, model: usize) -> u64 {
        self.serves.get(model).copied().unwrap_or(0)
    }

    /// Whether the configuration this set was made of is `pool` serving
    /// `catalog` (a reload that changes neither changes nothing).
    pub fn is_made_of(&self, pool: &[EndpointConfig], catalog: &Catalog) -> bool {
        self.catalog == *catalog
            && self.endpoints.len() == pool.len()
            && self.endpoints.iter().zip(pool).all(|(e, c)| e.config == *c)
    }

    /// Chooses the endpoint for a request's next attempt at `now`, among
    /// those serving its model (by index) that it has not tried (`tried`,
    /// by id); by its conversation's `affinity` key when it has one.
    /// `None` when it has tried them all.
    pub fn choose(
        &self,
        now: Instant,
        tried: &[u64],
        model: usize,
        affinity: Option<u64>,
    ) -> Option<Attempt> {
        let serving = self.serving(model);
        let index = if self.endpoints.len() == 1 {
            // The usual pool: nothing to choose.
            if serving == 0 || tried.contains(&self.endpoints[0].id) {
                return None;
            }
            0
        } else {
            // Sets of endpoints as bits (a pool has at most
            // `MAX_ENDPOINTS`): nothing is allocated per request.
            let mut candidates = 0u64;
            let mut available = 0u64;
            for i in bits(serving) {
                let e = &self.endpoints[i];
                if !tried.contains(&e.id) {
                    candidates |= 1 << i;
                    if e.health().available(now) {
                        available |= 1 << i;
                    }
                }
            }
            if candidates == 0 {
                return None;
            }
            if available == 0 {
                // All ejected (or on trial): the one back soonest.
                bits(candidates)
                    .min_by_key(|&i| self.endpoints[i].health().back_at().unwrap_or(now))
                    .unwrap_or(0)
            } else {
                match affinity {
                    Some(key) if available.count_ones() > 1 => self.rendezvous(available, key),
                    _ => self.pick(available),
                }
            }
        };
        let endpoint = Arc::clone(&self.endpoints[index]);
        let trial = {
            let mut h = endpoint.health();
            let ejected = matches!(h.state(), State::Ejected { .. });
            h.sent();
            ejected
        };
        endpoint.in_flight.fetch_add(1, Ordering::Relaxed);
        endpoint.requests.fetch_add(1, Ordering::Relaxed);
        Some(Attempt {
            endpoint,
            trial,
            repeat: false,
            started: now,
            finished: false,
        })
    }

    /// Smooth weighted round robin over the `available` endpoints (bits),
    /// then the in-flight check.
    fn pick(&self, available: u64) -> usize {
        let weight = |i: usize| i64::from(self.endpoints[i].config.weight.max(1));
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let mut total = 0;
        let mut best = available.trailing_zeros() as usize;
        for i in bits(available) {
            total += weight(i);
            current[i] += weight(i);
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        drop(current);
        // Load per unit of weight, compared without division.
        let load = |i: usize| u128::from(self.endpoints[i].load());
        let w = |i: usize| weight(i) as u128;
        let least = bits(available)
            .min_by(|&a, &b| (load(a) * w(b)).cmp(&(load(b) * w(a))))
            .unwrap_or(best);
        if load(best) * w(least) > (load(least) + 1) * w(best) {
            least
        } else {
            best
        }
    }

    /// The `available` endpoint (bits) that ranks first for the affinity
    /// `key` (weighted rendezvous hashing: the highest `weight / -ln(u)`,
    /// `u` uniform from the key and the endpoint's name) among those under
    /// their bound on load; the first in the ranking if none is.
    fn rendezvous(&self, available: u64, key: u64) -> usize {
        let weight = |i: usize| u128::from(self.endpoints[i].config.weight.max(1));
        let load = |i: usize| u128::from(self.endpoints[i].load());
        let total_weight: u128 = bits(available).map(weight).sum();
        let total_load: u128 = bits(available).map(load).sum();
        let score = |i: usize| {
            let h = mix(key ^ self.endpoints[i].name_hash);
            // Uniform in (0, 1), never 0 or 1.
            let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            weight(i) as f64 / -u.ln()
        };
        // Within bound: with one more request, at most `AFFINITY_BOUND`
        // times its share of the load in flight (this request counted),
        // plus one.
        let within = |i: usize| {
            let (num, den) = AFFINITY_BOUND;
            (load(i) + 1) * den * total_weight
                <= num * (total_load + 1) * weight(i) + den * total_weight
        };
        // Each endpoint scored once: the best within bound, else the best.
        let best = |only_within: bool| {
            bits(available)
                .filter(|&i| !only_within || within(i))
                .map(|i| (score(i), i))
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, i)| i)
        };
        best(true).or_else(|| best(false)).unwrap_or(0)
    }

    /// The prompt tokens to reserve for a request estimated at `estimate`
    /// that may go to the endpoints `serving` (bits): the largest bound of
    /// any of them, with at least `floor` extra tokens.
    pub fn prompt_bound(&self, estimate: u64, floor: u64, serving: u64) -> u64 {
        bits(serving)
            .filter_map(|i| self.endpoints.get(i))
            .map(|e| e.prompt.bound(estimate, floor))
            .max()
            .unwrap_or(estimate.saturating_add(floor))
    }

    /// The ejected endpoints due for a probe at `now` (each counted as
    /// probed: report with [`Endpoint::probed`]).
    pub fn probes_due(&self, now: Instant, interval: std::time::Duration) -> Vec<Arc<Endpoint>> {
        self.endpoints
            .iter()
            .filter(|e| e.health().probe_due(now, interval))
            .map(Arc::clone)
            .collect()
    }

    /// Whether at least one endpoint is not ejected (for `/readyz`).
    pub fn any_serving(&self, now: Instant) -> bool {
        self.endpoints.iter().any(|e| self.is_serving(e, now))
    }

    /// Whether `e` is not ejected at `now`.
    pub fn is_serving(&self, e: &Endpoint, now: Instant) -> bool {
        e.health().back_at().is_none_or(|until| now >= until)
    }

    /// Each endpoint's state, for `GET /upstreams`.
    pub fn status(&self, now: Instant, wall: WallClock) -> Vec<EndpointStatus> {
        self.endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let h = e.health().clone();
                let c = &e.config;
                EndpointStatus {
                    name: c.name.clone(),
                    url: c.target.display_url(),
                    weight: c.weight,
                    model: c.model.clone(),
                    models: self
                        .catalog
                        .models()
                        .iter()
                        .zip(&self.serves)
                        .filter(|(_, set)| **set & (1 << i) != 0)
                        .map(|(m, _)| ServedModel {
                            id: m.id.clone(),
                            sent_as: c.model_name(m).to_owned(),
                        })
                        .collect(),
                    state: h.state().as_str(),
                    ejected_until: h
                        .back_at()
                        .filter(|&until| until > now)
                        .map(|until| rfc3339_ms(wall.unix_ms(until))),
                    reason: h.reason(),
                    failures_in_a_row: h.failures(),
                    in_flight: e.load(),
                    requests: e.requests.load(Ordering::Relaxed),
                    failures: FailureKind::ALL
                        .iter()
                        .zip(&e.failures)
                        .map(|(k, n)| (k.as_str(), n.load(Ordering::Relaxed)))
                        .collect(),
                    prompt_extra_tokens: e.prompt.parts().0,
                    prompt_ratio: e.prompt.parts().1 as f64 / 1000.0,
                }
            })
            .collect()
    }

    /// The per-endpoint metric families, in the Prometheus text format.
    pub(crate) fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        let families: [(&str, &str, &str); 4] = [
            (
                "chatgate_upstream_requests_total",
                "counter",
                "Attempts sent to each provider endpoint.",
            ),
            (
                "chatgate_upstream_in_flight",
                "gauge",
                "Attempts in progress on each provider endpoint.",
            ),
            (
                "chatgate_upstream_state",
                "gauge",
                "Each provider endpoint's state (1 for the state it is in).",
            ),
            (
                "chatgate_upstream_failures_total",
                "counter",
                "Failed attempts on each provider endpoint, by kind.",
            ),
        ];
        for (name, kind, help) in families {
            metric_header(out, name, kind, help);
            for e in &self.endpoints {
                let ep = crate::metrics::escape(&e.config.name);
                match name {
                    "chatgate_upstream_requests_total" => {
                        let n = e.requests.load(Ordering::Relaxed);
                        let _ = writeln!(out, "{name}{{endpoint=\"{ep}\"}} {n}");
                    }
                    "chatgate_upstream_in_flight" => {
                        let _ = writeln!(out, "{name}{{endpoint=\"{ep}\"}} {}", e.load());
                    }
                    "chatgate_upstream_state" => {
                        let now_state = e.health().state().as_str();
                        for s in ["healthy", "ejected", "trial"] {
                            let v = u8::from(s == now_state);
                            let _ = writeln!(out, "{name}{{endpoint=\"{ep}\",state=\"{s}\"}} {v}");
                        }
                    }
                    _ => {
                        for (k, n) in FailureKind::ALL.iter().zip(&e.failures) {
                            let _ = writeln!(
                                out,
                                "{name}{{endpoint=\"{ep}\",kind=\"{}\"}} {}",
                                k.as_str(),
                                n.load(Ordering::Relaxed)
                            );
                        }
                    }
                }
            }
        }
        for e in &self.endpoints {
            let ep = crate::metrics::escape(&e.config.name);
            e.ttfb.render_labelled(
                out,
                "chatgate_upstream_time_to_first_byte_seconds",
                "Time from sending an attempt to its first byte for the client, by provider endpoint.",
                &format!("endpoint=\"{ep}\""),
                std::ptr::eq(e, &self.endpoints[0]),
            );
        }
    }
}

/// One endpoint as `GET /upstreams` shows it (no key).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndpointStatus {
    /// Its name.
    pub name: String,
    /// Its base URL.
    pub url: String,
    /// Its weight.
    pub weight: u32,
    /// The model id it is sent for every model, when it differs.
    pub model: Option<String>,
    /// The models it serves, and the id it is sent for each.
    pub models: Vec<ServedModel>,
    /// `healthy`, `ejected` or `trial`.
    pub state: &'static str,
    /// Until when it is ejected (RFC 3339), while it is.
    pub ejected_until: Option<String>,
    /// Why it was last ejected: a failure kind, or `retry_after`.
    pub reason: Option<&'static str>,
    /// Failures in a row since its last success.
    pub failures_in_a_row: u32,
    /// Attempts in progress.
    pub in_flight: u64,
    /// Attempts sent.
    pub requests: u64,
    /// Failed attempts, by kind.
    pub failures: std::collections::BTreeMap<&'static str, u64>,
    /// Prompt tokens it was seen to count beyond the gateway's estimate
    /// (its chat template), learned from its reports.
    pub prompt_extra_tokens: u64,
    /// The ratio of its prompt counts to the estimate on large prompts.
    pub prompt_ratio: f64,
}

/// A model an endpoint serves, as `GET /upstreams` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServedModel {
    /// The catalogue id.
    pub id: String,
    /// The id the endpoint is sent for it.
    pub sent_as: String,
}

/// One attempt of a request on an endpoint: reports how it ended exactly
/// once ([`Attempt::finish`]; dropped unfinished, it was abandoned).
#[derive(Debug)]
pub struct Attempt {
    endpoint: Arc<Endpoint>,
    trial: bool,
    /// The request was already sent to this endpoint (a retry after a
    /// pause): its failure does not count again towards an ejection.
    repeat: bool,
    started: Instant,
    finished: bool,
}

impl Attempt {
    /// The endpoint.
    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.endpoint
    }

    /// This attempt sends its request again to an endpoint that already
    /// failed it: a failure counts in the endpoint's figures but not again
    /// towards its ejection (one request retried cannot eject an endpoint
    /// on its own), unless the attempt is the endpoint's trial.
    pub(crate) fn mark_repeat(&mut self) {
        self.repeat = true;
    }

    /// The client got its first byte from this attempt at `now`.
    pub(crate) fn first_byte(&self, now: Instant) {
        self.endpoint.ttfb.observe(now - self.started);
    }

    /// How the attempt ended, at `now`.
    pub fn finish(mut self, outcome: Outcome, now: Instant) {
        self.report(outcome, now);
    }

    fn report(&mut self, outcome: Outcome, now: Instant) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let e = &self.endpoint;
        e.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Outcome::Failed(kind) = outcome {
            let i = FailureKind::ALL
                .iter()
                .position(|k| *k == kind)
                .unwrap_or(0);
            e.failures[i].fetch_add(1, Ordering::Relaxed);
        }
        let judged = match outcome {
            Outcome::Failed(_) if self.repeat && !self.trial => Outcome::Abandoned,
            o => o,
        };
        let change = e.health().report(judged, self.trial, now);
        match change {
            Some(Change::Ejected { until }) => tracing::warn!(
                endpoint = e.name(),
                for_ms = (until - now).as_millis() as u64,
                reason = e.health().reason().unwrap_or(""),
                "provider endpoint ejected"
            ),
            Some(Change::Readmitted) => {
                tracing::info!(endpoint = e.name(), "provider endpoint readmitted")
            }
            None => {}
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        let started = self.started;
        self.report(Outcome::Abandoned, started);
    }
}

/// The fixed start of every request to `e`.
fn request_prefix(e: &EndpointConfig) -> Vec<u8> {
    let mut p = request_head(e, "POST", "/chat/completions");
    header(&mut p, "Content-Type", "application/json");
    p
}

/// A request line for `path` under `e`'s base path, and the headers every
/// request to it carries: `Host`, `Authorization` (its key), `User-Agent`.
fn request_head(e: &EndpointConfig, method: &str, path: &str) -> Vec<u8> {
    let t = &e.target;
    let mut p = Vec::with_capacity(256);
    p.extend_from_slice(method.as_bytes());
    p.push(b' ');
    p.extend_from_slice(t.base_path.as_bytes());
    p.extend_from_slice(path.as_bytes());
    p.extend_from_slice(b" HTTP/1.1\r\n");
    header(&mut p, "Host", &t.host_header());
    if let Some(key) = &t.api_key {
        header(&mut p, "Authorization", &format!("Bearer {}", key.expose()));
    }
    header(
        &mut p,
        "User-Agent",
        concat!("chatgate/", env!("CARGO_PKG_VERSION")),
    );
    p
}

#[cfg(test)]
mod tests;
