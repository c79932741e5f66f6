//! The Prometheus text exposition (version 0.0.4) of every family: the
//! per-key and per-model series, the histograms, the provider's failures,
//! the continuations, and the unlabelled figures.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Metrics, PerKey, ResumeOutcome};
use crate::error::UpstreamFault;

impl Metrics {
    /// The Prometheus text exposition; `open_connections` comes from the
    /// gateway.
    pub fn render(&self, open_connections: usize) -> String {
        let mut out = String::with_capacity(8192);
        self.render_per_key(&mut out);
        self.render_per_model(&mut out);
        for (histogram, name, help) in [
            (
                &self.total,
                "chatgate_request_duration_seconds",
                "Time from the first byte of a request to the end of its response.",
            ),
            (
                &self.ttfb,
                "chatgate_time_to_first_byte_seconds",
                "Time from the first byte of a request to the first byte of its response.",
            ),
            (
                &self.overhead,
                "chatgate_overhead_seconds",
                "Time a request spent in the gateway, excluding the wait on the provider.",
            ),
            (
                &self.ledger_write,
                "chatgate_ledger_write_seconds",
                "Time to append one ledger line.",
            ),
            (
                &self.queue_wait,
                "chatgate_queue_wait_seconds",
                "Time a request waited in its key's queue for an in-flight slot.",
            ),
        ] {
            histogram.render(&mut out, name, help);
        }
        header(
            &mut out,
            "chatgate_upstream_errors_total",
            COUNTER,
            "Provider failures by kind (the ledger's error field).",
        );
        for (f, n) in UpstreamFault::ALL.iter().zip(&self.upstream_errors) {
            let kind = f.as_str().trim_start_matches("upstream_");
            let _ = writeln!(
                out,
                "chatgate_upstream_errors_total{{kind=\"{kind}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        header(
            &mut out,
            "chatgate_stream_resumes_total",
            COUNTER,
            "Streams cut mid-answer that --stream-resume sent to be finished, by how that ended: continued (a continuation finished the answer), restarted (the answer asked again repeated what the client had and finished it), diverged (it did not: the stream ended cut), failed (no continuation finished it), abandoned (the client left meanwhile).",
        );
        for (o, n) in ResumeOutcome::ALL.iter().zip(&self.stream_resumes) {
            let _ = writeln!(
                out,
                "chatgate_stream_resumes_total{{outcome=\"{}\"}} {}",
                o.as_str(),
                n.load(Ordering::Relaxed)
            );
        }
        for (name, kind, help, value) in self.scalars(open_connections) {
            header(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        out
    }

    /// Every unlabelled figure: name, type, help, value.
    fn scalars(&self, open_connections: usize) -> Vec<Scalar> {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as i64;
        vec![
            (
                "chatgate_open_connections",
                GAUGE,
                "Open client connections.",
                open_connections as i64,
            ),
            (
                "chatgate_open_streams",
                GAUGE,
                "Streamed responses in progress.",
                self.streams_open.load(Ordering::Relaxed),
            ),
            (
                "chatgate_upstream_connections_opened_total",
                COUNTER,
                "Provider connections opened.",
                get(&self.pool_opened),
            ),
            (
                "chatgate_upstream_connections_reused_total",
                COUNTER,
                "Requests sent on a pooled (kept-alive) provider connection.",
                get(&self.pool_reused),
            ),
            (
                "chatgate_upstream_pool_idle",
                GAUGE,
                "Idle provider connections in the pool.",
                get(&self.pool_idle),
            ),
            (
                "chatgate_incomplete_streams_total",
                COUNTER,
                "Streams that ended without finish_reason.",
                get(&self.incomplete_streams),
            ),
            (
                "chatgate_client_disconnects_total",
                COUNTER,
                "Clients that left before their response was complete.",
                get(&self.client_disconnects),
            ),
            (
                "chatgate_ledger_errors_total",
                COUNTER,
                "Ledger appends that failed.",
                get(&self.ledger_errors),
            ),
            (
                "chatgate_keys",
                GAUGE,
                "Client keys in force.",
                get(&self.keys_loaded),
            ),
            (
                "chatgate_key_reloads_total",
                COUNTER,
                "Keys-file reloads applied.",
                get(&self.key_reloads),
            ),
            (
                "chatgate_key_reload_errors_total",
                COUNTER,
                "Keys-file reloads refused (the previous keys stayed in force).",
                get(&self.key_reload_errors),
            ),
            (
                "chatgate_ledger_postgres_rows_total",
                COUNTER,
                "Ledger rows shipped to PostgreSQL (with --ledger-postgres).",
                get(&self.ledger_shipped),
            ),
            (
                "chatgate_ledger_postgres_errors_total",
                COUNTER,
                "Failed attempts to reach or write PostgreSQL (lines wait in the local ledger).",
                get(&self.ledger_ship_errors),
            ),
            (
                "chatgate_ledger_postgres_reshipped_total",
                COUNTER,
                "Ledger lines shipped to PostgreSQL again: a reconnection found their batches missing (a failover lost them).",
                get(&self.ledger_reshipped),
            ),
            (
                "chatgate_ledger_postgres_set_aside_total",
                COUNTER,
                "Ledger rows PostgreSQL refused for what they hold (each logged with its request id); the rows after them were shipped.",
                get(&self.ledger_set_aside),
            ),
            (
                "chatgate_ledger_postgres_repaired_total",
                COUNTER,
                "Ledger rows that held a NUL character, stored in PostgreSQL with U+FFFD in its place (the local ledger keeps the original).",
                get(&self.ledger_repaired),
            ),
            (
                "chatgate_ledger_postgres_backlog_bytes",
                GAUGE,
                "Bytes of the local ledger not yet shipped to PostgreSQL.",
                get(&self.ledger_backlog_bytes),
            ),
            (
                "chatgate_shared_limits_unavailable_total",
                COUNTER,
                "Admissions the shared limiter (Redis) could not decide (the fallback applied).",
                get(&self.shared_limits_unavailable),
            ),
            (
                "chatgate_responses_not_kept_total",
                COUNTER,
                "Responses answered with store on but not kept: the store failed, or the response was larger than --responses-max-bytes.",
                get(&self.responses_not_kept),
            ),
            (
                "chatgate_first_event_keepalives_total",
                COUNTER,
                "Streams committed by --first-event-keepalive before their provider's first event (a failure before it then ends the stream instead of going to another attempt's answer or a JSON error).",
                get(&self.first_event_keepalives),
            ),
        ]
    }

    /// The families labelled by model.
    fn render_per_model(&self, out: &mut String) {
        let map = self.per_model.lock().unwrap_or_else(|e| e.into_inner());
        header(
            out,
            "chatgate_model_requests_total",
            COUNTER,
            "Metered requests, by the model that answered (or was asked last).",
        );
        for (model, p) in map.iter() {
            let _ = writeln!(
                out,
                "chatgate_model_requests_total{{model=\"{}\"}} {}",
                escape(model),
                p.requests
            );
        }
        header(
            out,
            "chatgate_model_tokens_total",
            COUNTER,
            "Tokens metered, by the model that answered and kind (completion includes reasoning).",
        );
        for (model, p) in map.iter() {
            for (kind, n) in ["prompt", "completion", "reasoning", "cached"]
                .iter()
                .zip(p.tokens)
            {
                let _ = writeln!(
                    out,
                    "chatgate_model_tokens_total{{model=\"{}\",kind=\"{kind}\"}} {n}",
                    escape(model)
                );
            }
        }
        header(
            out,
            "chatgate_model_cost_usd_total",
            COUNTER,
            "Cost metered, by the model that answered, in US dollars (exact to the nano-dollar).",
        );
        for (model, p) in map.iter() {
            let _ = writeln!(
                out,
                "chatgate_model_cost_usd_total{{model=\"{}\"}} {}.{:09}",
                escape(model),
                p.cost_nano_usd / 1_000_000_000,
                p.cost_nano_usd % 1_000_000_000
            );
        }
        drop(map);
        let map = self.fallbacks.lock().unwrap_or_else(|e| e.into_inner());
        header(
            out,
            "chatgate_model_fallbacks_total",
            COUNTER,
            "Requests a model could not answer that went to its fallback, by model and fallback.",
        );
        for ((from, to), n) in map.iter() {
            let _ = writeln!(
                out,
                "chatgate_model_fallbacks_total{{from=\"{}\",to=\"{}\"}} {n}",
                escape(from),
                escape(to)
            );
        }
        drop(map);
        let map = self.replays.lock().unwrap_or_else(|e| e.into_inner());
        header(
            out,
            "chatgate_reasoning_replay_total",
            COUNTER,
            "Requests whose assistant tool-call turns were sent with reasoning, by model and where it came from: client (the client sent it), memory (restored from what the gateway served), empty (nothing known: an empty string).",
        );
        for ((model, source), n) in map.iter() {
            let _ = writeln!(
                out,
                "chatgate_reasoning_replay_total{{model=\"{}\",source=\"{source}\"}} {n}",
                escape(model)
            );
        }
    }

    /// The families labelled by key.
    fn render_per_key(&self, out: &mut String) {
        let map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
        header(
            out,
            "chatgate_requests_total",
            COUNTER,
            "Requests answered, by key, status and whether streamed (key \"\" when unauthenticated).",
        );
        for (key, k) in map.iter() {
            for ((status, stream), n) in &k.requests {
                let _ = writeln!(
                    out,
                    "chatgate_requests_total{{key=\"{}\",status=\"{status}\",stream=\"{stream}\"}} {n}",
                    escape(key)
                );
            }
        }
        header(
            out,
            "chatgate_tokens_total",
            COUNTER,
            "Tokens metered, by key and kind (completion includes reasoning).",
        );
        for (key, k) in map.iter() {
            for (kind, n) in ["prompt", "completion", "reasoning", "cached"]
                .iter()
                .zip(k.tokens)
            {
                let _ = writeln!(
                    out,
                    "chatgate_tokens_total{{key=\"{}\",kind=\"{kind}\"}} {n}",
                    escape(key)
                );
            }
        }
        header(
            out,
            "chatgate_cost_usd_total",
            COUNTER,
            "Cost metered, by key, in US dollars (exact to the nano-dollar).",
        );
        for (key, k) in map.iter() {
            let _ = writeln!(
                out,
                "chatgate_cost_usd_total{{key=\"{}\"}} {}.{:09}",
                escape(key),
                k.cost_nano_usd / 1_000_000_000,
                k.cost_nano_usd % 1_000_000_000
            );
        }
        header(
            out,
            "chatgate_rate_limited_total",
            COUNTER,
            "Requests refused by a key's rate limit, by key and limit.",
        );
        for (key, k) in map.iter() {
            for (kind, n) in ["requests", "tokens", "in_flight"]
                .iter()
                .zip(k.rate_limited)
            {
                let _ = writeln!(
                    out,
                    "chatgate_rate_limited_total{{key=\"{}\",limit=\"{kind}\"}} {n}",
                    escape(key)
                );
            }
        }
        let families: [PerKeyFamily; 6] = [
            (
                "chatgate_budget_refused_total",
                "Requests refused (429 insufficient_quota) because the key's budget could not cover them, by key.",
                |k| k.budget_refused.to_string(),
            ),
            (
                "chatgate_budget_overshoots_total",
                "Requests that cost more than their budget reservation (no max_tokens, or a prompt above the estimate), by key.",
                |k| k.overshoots.to_string(),
            ),
            (
                "chatgate_budget_overshoot_usd_total",
                "What those requests cost beyond their reservations, by key, in US dollars.",
                |k| crate::catalog::format_usd(k.overshoot_nano_usd),
            ),
            (
                "chatgate_usage_missing_total",
                "Answers the provider gave without reporting usage (metered as reported, charged to limits and budgets at their worst case), by key.",
                |k| k.usage_missing.to_string(),
            ),
            (
                "chatgate_queued_total",
                "Requests that waited in their key's queue for an in-flight slot, by key.",
                |k| k.queued.to_string(),
            ),
            (
                "chatgate_queue_timeouts_total",
                "Requests that waited in their key's queue until the queue timeout (then 429), by key.",
                |k| k.queue_timeouts.to_string(),
            ),
        ];
        for (name, help, value) in families {
            header(out, name, COUNTER, help);
            for (key, k) in map.iter() {
                let _ = writeln!(out, "{name}{{key=\"{}\"}} {}", escape(key), value(k));
            }
        }
    }
}

/// A counter family labelled by key: name, help, and its value for a key.
type PerKeyFamily = (&'static str, &'static str, fn(&PerKey) -> String);

pub(crate) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// An unlabelled figure: name, type, help, value.
type Scalar = (&'static str, &'static str, &'static str, i64);

const COUNTER: &str = "counter";
const GAUGE: &str = "gauge";

/// A label value: backslash, double quote and newline escaped.
pub(crate) fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
