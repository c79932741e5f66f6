//! Metering: the ledger record of a metered request (handed to the runtime
//! with the bytes it guards), the metrics of every request, and the access
//! line of requests that are not metered.

use std::time::Duration;

use super::Connection;
use crate::catalog::Price;
use crate::error::UpstreamFault;
use crate::ledger::{LedgerRecord, STATUS_CLIENT_CLOSED};
use crate::metrics::{Finished, Metered};
use crate::time::Instant;
use crate::usage::Usage;

use super::Event;

impl Connection {
    /// Metered: an authenticated chat completion request.
    pub(super) fn is_metered(&self) -> bool {
        self.req.as_ref().is_some_and(|r| r.is_metered())
    }

    /// The current request's record, as far as it is known at `now`.
    pub(super) fn record(&self, now: Instant, status: u16) -> LedgerRecord {
        let req = self.req.as_ref().expect("a record is for a request");
        let key = req.key.as_ref().map_or("", |k| k.name.as_str());
        let mut rec = LedgerRecord::new(self.gw.wall().unix_ms(now), &req.id, key);
        if let Some(chat) = &req.chat {
            rec.model = chat.model.clone();
            rec.stream = chat.stream;
            rec.served_model = req
                .routes
                .as_ref()
                .map(|r| &r.catalog().models()[req.model].id)
                .filter(|id| **id != chat.model)
                .cloned();
        } else if let Some((model, stream)) = &req.peeked {
            rec.model = model.clone();
            rec.stream = *stream;
        }
        rec.status = status;
        rec.upstream_status = req.upstream_status;
        rec.endpoint = req
            .endpoint
            .as_ref()
            .or(req.endpoint_before_retry.as_ref())
            .map(|e| e.name().to_owned());
        rec.attempts = req.attempts;
        if let Some(d) = req.dialect.as_deref() {
            rec.api = Some(d.api().to_owned());
        }
        if req.attempts > 0 {
            rec.provider_request_id = Some(req.provider_id.clone());
        }
        rec.duration_ms = (now - req.started).as_millis() as u64;
        rec.ttfb_ms = req.first_byte.map(|t| (t - req.started).as_millis() as u64);
        if self.cancelled {
            // A background run its client cancelled.
            rec.error = Some("cancelled".to_owned());
        }
        rec
    }

    /// The prices of the model that answered (or answers now).
    pub(super) fn price(&self) -> Price {
        let req = self.req.as_ref().expect("request");
        req.routes
            .as_ref()
            .map_or(Price::DEFAULT, |r| r.catalog().models()[req.model].price)
    }

    /// Tokens and cost into the record: what the provider reported. An
    /// answer (2xx) without a usage object leaves the counts at zero; the
    /// record says usage was missing (`usage_missing`, counted), so that
    /// settlement charges the key conservatively, when the provider ended
    /// that answer itself (`ended`: not cut short by a failure or the
    /// client) or its endpoint was last seen to leave usage out of a
    /// complete answer (a provider that never reports it). A report teaches
    /// the endpoint's prompt allowance.
    pub(super) fn meter(&self, rec: &mut LedgerRecord, usage: Option<Usage>, ended: bool) {
        let req = self.req.as_ref().expect("a record is for a request");
        // A continued stream's figures are several requests' together:
        // nothing to learn of one endpoint from them.
        let continued = req.resume.as_deref().is_some_and(|r| r.continued());
        let endpoint = req.endpoint.as_ref().filter(|_| !continued);
        let Some(usage) = usage else {
            if !rec.upstream_status.is_some_and(|s| (200..300).contains(&s)) {
                return;
            }
            if let Some(e) = endpoint.filter(|_| ended) {
                e.saw_usage_omitted(true);
            }
            if ended || endpoint.is_some_and(|e| e.omits_usage()) {
                rec.usage_missing = true;
                self.gw.metrics().usage_missing(&rec.key);
            }
            return;
        };
        rec.meter(&usage, &self.price());
        if let (Some(endpoint), Some(chat)) = (endpoint, &req.chat) {
            if ended {
                endpoint.saw_usage_omitted(false);
            }
            endpoint.prompt_allowance().learn(
                chat.estimated_prompt_tokens,
                usage.prompt_tokens,
                self.gw.config().prompt_overhead_tokens,
            );
        }
    }

    /// Hands the record to the runtime and holds `held` (the response's
    /// last bytes) until it says the line was appended.
    /// The request's reservations are settled first (`admission.rs`).
    pub(super) fn emit_ledger(&mut self, now: Instant, mut rec: LedgerRecord, held: Vec<u8>) {
        self.settle(now, &mut rec);
        self.observe_metered(now, &rec);
        rec.trace_id = self.trace_id();
        self.finish_trace(
            now,
            super::spans::Ending {
                status: rec.status,
                error: None,
                record: Some(&rec),
            },
        );
        self.keep_response(now, &mut rec);
        self.events.push_back(Event::Ledger(Box::new(rec)));
        self.held = held;
        self.awaiting_ledger = true;
    }

    /// An authenticated request abandoned before the provider was asked is
    /// still metered.
    pub(super) fn record_abandoned(&mut self, now: Instant) {
        if self.is_metered() {
            let mut rec = self.record(now, STATUS_CLIENT_CLOSED);
            rec.client_disconnected = true;
            self.access_log(now, STATUS_CLIENT_CLOSED, None);
            self.emit_ledger(now, rec, Vec::new());
        }
    }

    /// Metrics of a metered (ledger) request.
    fn observe_metered(&self, now: Instant, rec: &LedgerRecord) {
        let m = self.gw.metrics();
        let req = self.req.as_ref().expect("a record is for a request");
        let finished = Finished {
            key: &rec.key,
            status: rec.status,
            stream: rec.stream,
            total: now - req.started,
            // Without a streamed head, the first byte left with the rest.
            ttfb: Some(req.first_byte.unwrap_or(now) - req.started),
            provider: req.up_started.map_or(Duration::ZERO, |s| now - s),
        };
        m.finished(finished);
        let console = self.gw.console();
        if console.is_on() {
            let unix_ms = self.gw.wall().unix_ms(now);
            console.finished(
                unix_ms,
                finished.status,
                finished.total.saturating_sub(finished.provider),
                finished.ttfb,
            );
            console.record(rec, req.chat.is_some());
        }
        let metered = Metered {
            prompt: rec.prompt_tokens,
            completion: rec.completion_tokens,
            reasoning: rec.reasoning_tokens,
            cached: rec.cached_tokens,
            cost_nano_usd: rec.cost_nano_usd,
        };
        m.metered(&rec.key, metered);
        if req.chat.is_some() {
            // A validated request: its model is a catalogue id.
            m.model_metered(rec.served_model.as_deref().unwrap_or(&rec.model), metered);
        }
        if let Some(fault) = rec
            .error
            .as_deref()
            .and_then(|e| UpstreamFault::ALL.into_iter().find(|f| f.as_str() == e))
        {
            m.upstream_error(fault);
        }
        if rec.stream && req.committed {
            m.stream_open(-1);
            if !rec.complete {
                m.incomplete_stream();
            }
        }
        if rec.client_disconnected {
            m.client_disconnect();
        }
    }

    /// The access line of a request that is not metered. A metered one's
    /// line is written by the runtime from its ledger record
    /// ([`LedgerRecord::access_fields`]), after the ledger append.
    pub(super) fn access_log(&mut self, now: Instant, status: u16, error: Option<&str>) {
        if self.is_metered() {
            return;
        }
        let trace_id = self.trace_id();
        self.finish_trace(
            now,
            super::spans::Ending {
                status,
                error,
                record: None,
            },
        );
        let req = self.req.as_ref();
        let total = req.map_or(Duration::ZERO, |r| now - r.started);
        self.gw.metrics().finished(Finished {
            key: req
                .and_then(|r| r.key.as_ref())
                .map_or("", |k| k.name.as_str()),
            status,
            stream: false,
            total,
            ttfb: req.map(|r| now - r.started),
            provider: Duration::ZERO,
        });
        let console = self.gw.console();
        if console.is_on() {
            console.finished(self.gw.wall().unix_ms(now), status, total, Some(total));
        }
        let Some(req) = req else {
            tracing::info!(target: "chatgate::access", status, error = error.unwrap_or(""), "request rejected before parsing");
            return;
        };
        tracing::info!(
            target: "chatgate::access",
            request_id = req.id.as_str(),
            key = req.key.as_ref().map_or("-", |k| k.name.as_str()),
            method = req.method.as_str(),
            path = req.path.as_str(),
            status,
            error = error.unwrap_or(""),
            duration_ms = (now - req.started).as_millis() as u64,
            trace_id = trace_id.as_deref().unwrap_or(""),
            "request"
        );
    }
}
