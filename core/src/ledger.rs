//! The usage ledger: one JSON object per line, one line per metered request.
//!
//! Every authenticated `POST /v1/chat/completions` gets exactly one line when
//! it finishes, whatever its status: successes, rejections (400/404/429),
//! provider failures (502/504) and client disconnects (status 499 when no
//! response head had been sent). Unauthenticated requests and `GET /v1/models`
//! are not metered. The runtime appends the line, and only then lets the last
//! bytes of the response go to the client.

use crate::json::write::string as json_string;
use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::catalog::{Price, format_usd};
use crate::http::write::push_decimal;
use crate::time::rfc3339_ms_cached;
use crate::usage::Usage;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The status recorded when the client left before any response head.
pub(crate) const STATUS_CLIENT_CLOSED: u16 = 499;

/// One metered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRecord {
    /// Finish time, RFC 3339 UTC with milliseconds.
    pub ts: String,
    /// The gateway's request id (`x-request-id`).
    pub request_id: String,
    /// The key's name (never the key).
    pub key: String,
    /// The model id the client asked for (its id when it used an alias;
    /// empty when the body was invalid).
    pub model: String,
    /// Streamed or not.
    pub stream: bool,
    /// The HTTP status the client got (499: disconnected before any answer).
    pub status: u16,
    /// Metered input tokens.
    pub prompt_tokens: u64,
    /// Metered output tokens, reasoning included.
    pub completion_tokens: u64,
    /// Reasoning tokens (0 if unreported).
    pub reasoning_tokens: u64,
    /// Cached prompt tokens (0 if unreported).
    pub cached_tokens: u64,
    /// Cost as an exact decimal (nine places) in USD.
    #[serde(with = "decimal_usd")]
    pub cost_usd: u64,
    /// Cost in integer nano-dollars: what sums are computed from.
    pub cost_nano_usd: u64,
    /// The completion's `finish_reason`, if one arrived.
    pub finish_reason: Option<String>,
    /// False when the answer is incomplete (no `finish_reason`, or failed).
    pub complete: bool,
    /// The client went away before the response was done.
    pub client_disconnected: bool,
    /// The provider's status, when it answered.
    pub upstream_status: Option<u16>,
    /// The provider endpoint that served the request, or the last one
    /// tried (absent when no endpoint was asked).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Attempts on provider endpoints (several after failover; 0 when the
    /// request never reached one). Failed attempts are not metered.
    #[serde(default)]
    pub attempts: u32,
    /// The id the provider was sent as `X-Request-Id` (a UUID derived from
    /// `request_id`, see [`crate::provider_request_id`]), when a provider
    /// endpoint was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_request_id: Option<String>,
    /// The client API the request came through when it is not chat
    /// completions (`responses`); written only then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// The model the request went to in the end, when it is not the one
    /// asked for (a fallback: it answered, or was tried last); the cost is
    /// at its prices. Written only then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// The Responses API's kept response this request made (`resp_…`),
    /// when the store kept it. Written only then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The provider answered but reported no usage: the token counts and
    /// cost above are the reported ones (zero), and the key's limits and
    /// budget were charged `charged_nano_usd` instead. Written only when
    /// true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub usage_missing: bool,
    /// The stream was cut mid-answer and finished by this many more
    /// requests (`--stream-resume`; each an attempt): the token counts
    /// and cost are all of theirs together. Written only when not zero.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub continued: u32,
    /// What the key's budget was charged when that differs from
    /// `cost_nano_usd` (usage missing: the request's worst case). Written
    /// only when not zero; spend is `max(cost_nano_usd, charged_nano_usd)`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub charged_nano_usd: u64,
    /// What the request cost beyond its budget reservation (nano-dollars),
    /// when its key has a budget: it had no `max_tokens`, or the provider
    /// counted more prompt tokens than the estimate. Written only when not
    /// zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub budget_overshoot_nano_usd: u64,
    /// The error code the client got, if any.
    pub error: Option<String>,
    /// Time from the first byte of the request to the end, milliseconds.
    pub duration_ms: u64,
    /// Time to the first byte of the response head, milliseconds.
    pub ttfb_ms: Option<u64>,
    /// The request's trace id, when tracing is on: in the access line, not
    /// in the ledger line.
    #[serde(skip)]
    pub trace_id: Option<String>,
    /// `ts` in Unix milliseconds (not written: `ts` is; a line read back
    /// gets it from `ts`).
    #[serde(skip)]
    pub unix_ms: u64,
}

impl LedgerRecord {
    /// A record with timestamps and identity filled and everything else empty.
    pub fn new(unix_ms: u64, request_id: &str, key: &str) -> Self {
        LedgerRecord {
            ts: rfc3339_ms_cached(unix_ms),
            request_id: request_id.to_owned(),
            key: key.to_owned(),
            model: String::new(),
            stream: false,
            status: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            reasoning_tokens: 0,
            cached_tokens: 0,
            cost_usd: 0,
            cost_nano_usd: 0,
            finish_reason: None,
            complete: false,
            client_disconnected: false,
            upstream_status: None,
            endpoint: None,
            attempts: 0,
            provider_request_id: None,
            api: None,
            served_model: None,
            response_id: None,
            usage_missing: false,
            continued: 0,
            charged_nano_usd: 0,
            budget_overshoot_nano_usd: 0,
            error: None,
            trace_id: None,
            unix_ms,
            duration_ms: 0,
            ttfb_ms: None,
        }
    }

    /// Fills token counts and cost from a metered usage.
    pub fn meter(&mut self, usage: &Usage, price: &Price) {
        self.prompt_tokens = usage.prompt_tokens;
        self.completion_tokens = usage.completion_tokens;
        self.reasoning_tokens = usage.reasoning_tokens;
        self.cached_tokens = usage.cached_tokens;
        self.cost_nano_usd = price.cost_nano(usage.prompt_tokens, usage.completion_tokens);
        self.cost_usd = self.cost_nano_usd;
    }

    /// The fields of the request's access log line, appended to `out`:
    /// `request request_id=… key=… method=POST …` for the text format, or
    /// the members of a JSON `fields` object (`"message":"request",…`).
    ///
    /// The runtime writes the line after appending the ledger line; both
    /// come from this one record, so they cannot disagree.
    pub fn access_fields(&self, out: &mut Vec<u8>, json: bool) {
        out.extend_from_slice(if json {
            b"\"message\":\"request\""
        } else {
            b"request"
        });
        let mut f = AccessFields { out, json };
        f.str("request_id", &self.request_id);
        f.str("key", &self.key);
        f.str("method", "POST");
        f.str(
            "path",
            match self.api.as_deref() {
                Some("responses") => crate::routes::RESPONSES_PATH,
                Some("messages") => crate::routes::MESSAGES_PATH,
                _ => crate::routes::CHAT_PATH,
            },
        );
        f.num("status", u64::from(self.status));
        f.flag("stream", self.stream);
        f.num("prompt_tokens", self.prompt_tokens);
        f.num("completion_tokens", self.completion_tokens);
        f.flag("complete", self.complete);
        f.flag("client_disconnected", self.client_disconnected);
        f.num("upstream_status", self.upstream_status.map_or(0, u64::from));
        if let Some(m) = &self.served_model {
            f.str("served_model", m);
        }
        if let Some(endpoint) = &self.endpoint {
            f.str("endpoint", endpoint);
            f.num("attempts", u64::from(self.attempts));
        }
        f.num("duration_ms", self.duration_ms);
        f.num("ttfb_ms", self.ttfb_ms.unwrap_or(0));
        if let Some(e) = &self.error {
            f.str("error", e);
        }
        if let Some(t) = &self.trace_id {
            f.str("trace_id", t);
        }
    }

    /// The JSON line, newline included.
    ///
    /// Written field by field (one line per request is on the hot path); the
    /// bytes are exactly what serializing the struct with serde_json gives.
    pub fn to_line(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(448);
        o.extend_from_slice(b"{\"ts\":");
        json_string(&mut o, &self.ts);
        o.extend_from_slice(b",\"request_id\":");
        json_string(&mut o, &self.request_id);
        o.extend_from_slice(b",\"key\":");
        json_string(&mut o, &self.key);
        o.extend_from_slice(b",\"model\":");
        json_string(&mut o, &self.model);
        o.extend_from_slice(if self.stream {
            b",\"stream\":true,\"status\":"
        } else {
            b",\"stream\":false,\"status\":"
        });
        push_decimal(&mut o, u64::from(self.status));
        for (name, value) in [
            (&b",\"prompt_tokens\":"[..], self.prompt_tokens),
            (b",\"completion_tokens\":", self.completion_tokens),
            (b",\"reasoning_tokens\":", self.reasoning_tokens),
            (b",\"cached_tokens\":", self.cached_tokens),
        ] {
            o.extend_from_slice(name);
            push_decimal(&mut o, value);
        }
        o.extend_from_slice(b",\"cost_usd\":");
        push_usd(&mut o, self.cost_usd);
        o.extend_from_slice(b",\"cost_nano_usd\":");
        push_decimal(&mut o, self.cost_nano_usd);
        o.extend_from_slice(b",\"finish_reason\":");
        json_opt_str(&mut o, self.finish_reason.as_deref());
        o.extend_from_slice(if self.complete {
            b",\"complete\":true"
        } else {
            b",\"complete\":false"
        });
        o.extend_from_slice(if self.client_disconnected {
            b",\"client_disconnected\":true,\"upstream_status\":"
        } else {
            b",\"client_disconnected\":false,\"upstream_status\":"
        });
        match self.upstream_status {
            Some(s) => push_decimal(&mut o, u64::from(s)),
            None => o.extend_from_slice(b"null"),
        }
        o.extend_from_slice(b",\"endpoint\":");
        json_opt_str(&mut o, self.endpoint.as_deref());
        o.extend_from_slice(b",\"attempts\":");
        push_decimal(&mut o, u64::from(self.attempts));
        if let Some(id) = &self.provider_request_id {
            o.extend_from_slice(b",\"provider_request_id\":");
            json_string(&mut o, id);
        }
        if let Some(api) = &self.api {
            o.extend_from_slice(b",\"api\":");
            json_string(&mut o, api);
        }
        if let Some(m) = &self.served_model {
            o.extend_from_slice(b",\"served_model\":");
            json_string(&mut o, m);
        }
        if let Some(id) = &self.response_id {
            o.extend_from_slice(b",\"response_id\":");
            json_string(&mut o, id);
        }
        if self.usage_missing {
            o.extend_from_slice(b",\"usage_missing\":true");
        }
        if self.continued > 0 {
            o.extend_from_slice(b",\"continued\":");
            push_decimal(&mut o, u64::from(self.continued));
        }
        if self.charged_nano_usd > 0 {
            o.extend_from_slice(b",\"charged_nano_usd\":");
            push_decimal(&mut o, self.charged_nano_usd);
        }
        if self.budget_overshoot_nano_usd > 0 {
            o.extend_from_slice(b",\"budget_overshoot_nano_usd\":");
            push_decimal(&mut o, self.budget_overshoot_nano_usd);
        }
        o.extend_from_slice(b",\"error\":");
        json_opt_str(&mut o, self.error.as_deref());
        o.extend_from_slice(b",\"duration_ms\":");
        push_decimal(&mut o, self.duration_ms);
        o.extend_from_slice(b",\"ttfb_ms\":");
        match self.ttfb_ms {
            Some(t) => push_decimal(&mut o, t),
            None => o.extend_from_slice(b"null"),
        }
        o.extend_from_slice(b"}\n");
        o
    }

    /// Parses one line (as written by [`LedgerRecord::to_line`]).
    pub fn from_line(line: &[u8]) -> Result<Self, serde_json::Error> {
        let mut r: LedgerRecord = serde_json::from_slice(line)?;
        r.unix_ms = crate::time::parse_rfc3339_ms(&r.ts).unwrap_or(0);
        Ok(r)
    }
}

/// [`format_usd`] without `core::fmt`: whole dollars, a point, nine places.
fn push_usd(out: &mut Vec<u8>, nanos: u64) {
    push_decimal(out, nanos / 1_000_000_000);
    out.push(b'.');
    let mut frac = nanos % 1_000_000_000;
    let mut places = [b'0'; 9];
    for p in places.iter_mut().rev() {
        *p = b'0' + (frac % 10) as u8;
        frac /= 10;
    }
    out.extend_from_slice(&places);
}

/// Writes access-line fields as ` name=value` (text) or `,"name":value`.
struct AccessFields<'a> {
    out: &'a mut Vec<u8>,
    json: bool,
}

impl AccessFields<'_> {
    fn name(&mut self, name: &str) {
        if self.json {
            self.out.extend_from_slice(b",\"");
            self.out.extend_from_slice(name.as_bytes());
            self.out.extend_from_slice(b"\":");
        } else {
            self.out.push(b' ');
            self.out.extend_from_slice(name.as_bytes());
            self.out.push(b'=');
        }
    }

    /// A string: JSON-escaped, or as it is in text (as the text format has
    /// always written it).
    fn str(&mut self, name: &str, value: &str) {
        self.name(name);
        if self.json {
            json_string(self.out, value);
        } else {
            self.out.extend_from_slice(value.as_bytes());
        }
    }

    fn num(&mut self, name: &str, value: u64) {
        self.name(name);
        push_decimal(self.out, value);
    }

    fn flag(&mut self, name: &str, value: bool) {
        self.name(name);
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
    }
}

fn json_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => json_string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// `cost_usd`: nano-dollars written as an exact JSON decimal number.
mod decimal_usd {
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};
    use serde_json::value::RawValue;

    pub(super) fn serialize<S: Serializer>(nanos: &u64, s: S) -> Result<S::Ok, S::Error> {
        let raw =
            RawValue::from_string(super::format_usd(*nanos)).map_err(serde::ser::Error::custom)?;
        serde::Serialize::serialize(&raw, s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let raw: Box<RawValue> = Deserialize::deserialize(d)?;
        parse_decimal_nanos(raw.get()).ok_or_else(|| D::Error::custom("invalid cost_usd"))
    }

    /// `"0.000313500"` (up to nine decimals) to nano-dollars, exactly.
    pub(super) fn parse_decimal_nanos(s: &str) -> Option<u64> {
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        if int.is_empty()
            || frac.len() > 9
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let int: u64 = int.parse().ok()?;
        let mut frac_nanos = 0u64;
        for (i, b) in frac.bytes().enumerate() {
            frac_nanos += u64::from(b - b'0') * 10u64.pow(8 - i as u32);
        }
        int.checked_mul(1_000_000_000)?.checked_add(frac_nanos)
    }
}

/// The fields of a ledger line that are read back: by the usage report
/// (`report`), the spend tally (`quota`) and the console; the one reader
/// of ledger lines.
#[derive(Deserialize)]
pub(crate) struct Line<'a> {
    #[serde(borrow)]
    pub(crate) ts: &'a str,
    #[serde(borrow)]
    pub(crate) key: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(crate) request_id: Cow<'a, str>,
    #[serde(default)]
    pub(crate) stream: bool,
    #[serde(default)]
    pub(crate) complete: bool,
    #[serde(default)]
    pub(crate) prompt_tokens: u64,
    #[serde(default)]
    pub(crate) completion_tokens: u64,
    #[serde(default)]
    pub(crate) reasoning_tokens: u64,
    #[serde(default)]
    pub(crate) cached_tokens: u64,
    #[serde(default)]
    pub(crate) cost_nano_usd: u64,
    /// What the key's budget was charged instead, when usage was missing.
    #[serde(default)]
    pub(crate) charged_nano_usd: u64,
    #[serde(default)]
    pub(crate) status: u16,
    #[serde(borrow, default)]
    pub(crate) error: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) endpoint: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) model: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(crate) served_model: Option<Cow<'a, str>>,
}

impl<'a> Line<'a> {
    /// What the line's request counts against its key's budget: its cost,
    /// or what it was charged when the provider reported no usage.
    pub(crate) fn spend_nano_usd(&self) -> u64 {
        self.cost_nano_usd.max(self.charged_nano_usd)
    }

    /// The same fields of a record this process wrote.
    pub(crate) fn of(r: &'a crate::ledger::LedgerRecord) -> Line<'a> {
        Line {
            ts: &r.ts,
            key: Cow::Borrowed(&r.key),
            request_id: Cow::Borrowed(&r.request_id),
            stream: r.stream,
            complete: r.complete,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            reasoning_tokens: r.reasoning_tokens,
            cached_tokens: r.cached_tokens,
            cost_nano_usd: r.cost_nano_usd,
            charged_nano_usd: r.charged_nano_usd,
            status: r.status,
            error: r.error.as_deref().map(Cow::Borrowed),
            endpoint: r.endpoint.as_deref().map(Cow::Borrowed),
            model: Cow::Borrowed(&r.model),
            served_model: r.served_model.as_deref().map(Cow::Borrowed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        for text in [
            "",
            "plain",
            "2026-11-22T19:25:13.537Z",
            "q\"uote",
            "back\\slash",
            "tab\there",
            "nl\n",
            "del\u{7f}",
            "caf\u{e9} \u{1f600}",
            "a long plain string that is more than thirty-two bytes long",
            "a long string that is more than thirty-two bytes with a \u{1} at the end",
        ] {
            let mut out = Vec::new();
            json_string(&mut out, text);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(text).unwrap()
            );
        }
    }

    #[test]
    fn access_fields_text_and_json() {
        let mut r = LedgerRecord::new(1_795_318_440_123, "req_1", "al\"ice");
        r.status = 200;
        r.stream = true;
        r.prompt_tokens = 37;
        r.completion_tokens = 30;
        r.complete = true;
        r.upstream_status = Some(200);
        r.duration_ms = 12;
        r.ttfb_ms = Some(3);
        let mut text = Vec::new();
        r.access_fields(&mut text, false);
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "request request_id=req_1 key=al\"ice method=POST path=/v1/chat/completions \
             status=200 stream=true prompt_tokens=37 completion_tokens=30 complete=true \
             client_disconnected=false upstream_status=200 duration_ms=12 ttfb_ms=3"
        );
        r.status = 499;
        r.upstream_status = None;
        r.ttfb_ms = None;
        r.client_disconnected = true;
        r.error = Some("upstream_timeout".into());
        let mut json = b"{".to_vec();
        r.access_fields(&mut json, true);
        json.push(b'}');
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "message": "request", "request_id": "req_1", "key": "al\"ice",
                "method": "POST", "path": "/v1/chat/completions", "status": 499,
                "stream": true, "prompt_tokens": 37, "completion_tokens": 30,
                "complete": true, "client_disconnected": true, "upstream_status": 0,
                "duration_ms": 12, "ttfb_ms": 0, "error": "upstream_timeout"
            })
        );
    }

    #[test]
    fn access_fields_name_the_endpoint_and_attempts_when_there_was_one() {
        let mut r = LedgerRecord::new(1_795_318_440_123, "req_1", "alice");
        r.endpoint = Some("east".into());
        r.attempts = 2;
        let mut text = Vec::new();
        r.access_fields(&mut text, false);
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains(" upstream_status=0 endpoint=east attempts=2 "),
            "{text}"
        );
    }

    #[test]
    fn lines_without_endpoint_fields_still_read() {
        let old = br#"{"ts":"2026-11-22T03:34:00.123Z","request_id":"req_1","key":"alice","model":"m","stream":false,"status":200,"prompt_tokens":1,"completion_tokens":2,"reasoning_tokens":0,"cached_tokens":0,"cost_usd":0.000031350,"cost_nano_usd":31350,"finish_reason":"stop","complete":true,"client_disconnected":false,"upstream_status":200,"error":null,"duration_ms":5,"ttfb_ms":5}"#;
        let r = LedgerRecord::from_line(old).unwrap();
        assert_eq!((r.endpoint, r.attempts), (None, 0));
    }

    #[test]
    fn usd_is_written_as_format_usd_writes_it() {
        for nanos in [
            0,
            1,
            9,
            532_950,
            999_999_999,
            1_000_000_000,
            12_345_678_901,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            push_usd(&mut out, nanos);
            assert_eq!(String::from_utf8(out).unwrap(), format_usd(nanos));
        }
    }

    #[test]
    fn line_round_trips_with_exact_cost() {
        let mut r = LedgerRecord::new(1_795_318_440_123, "req_1", "alice");
        r.model = "reasoning-model-k3".into();
        r.stream = true;
        r.status = 200;
        r.finish_reason = Some("stop".into());
        r.complete = true;
        r.meter(
            &Usage {
                prompt_tokens: 10,
                completion_tokens: 20,
                reasoning_tokens: 15,
                ..Usage::default()
            },
            &Price::DEFAULT,
        );
        let line = r.to_line();
        let text = std::str::from_utf8(&line).unwrap();
        assert!(text.ends_with('\n') && !text[..text.len() - 1].contains('\n'));
        assert!(text.contains("\"cost_usd\":0.000313500"), "{text}");
        assert!(text.contains("\"ts\":\"2026-11-22T03:34:00.123Z\""));
        let back = LedgerRecord::from_line(&line).unwrap();
        assert_eq!(back, r);
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        for field in [
            "ts",
            "request_id",
            "key",
            "model",
            "stream",
            "status",
            "prompt_tokens",
            "completion_tokens",
            "reasoning_tokens",
            "cached_tokens",
            "cost_usd",
            "finish_reason",
            "complete",
            "client_disconnected",
        ] {
            assert!(v.get(field).is_some(), "missing {field}");
        }
    }

    #[test]
    fn hand_written_line_equals_serde() {
        let mut r = LedgerRecord::new(1_795_318_440_123, "req_1", "ali\"ce\u{1}");
        r.model = "m\\odel".into();
        for (stream, fin, up, ttfb, err) in [
            (true, Some("stop"), Some(200), Some(12), None),
            (false, None, None, None, Some("invalid_value")),
        ] {
            r.endpoint = up.map(|_| "east-\"1\"".to_owned());
            r.attempts = u32::from(up.is_some()) * 2;
            r.stream = stream;
            r.finish_reason = fin.map(str::to_owned);
            r.upstream_status = up;
            r.ttfb_ms = ttfb;
            r.error = err.map(str::to_owned);
            r.complete = stream;
            r.client_disconnected = !stream;
            r.cost_usd = 313_500;
            r.cost_nano_usd = 313_500;
            let mut want = serde_json::to_vec(&r).unwrap();
            want.push(b'\n');
            assert_eq!(
                String::from_utf8(r.to_line()).unwrap(),
                String::from_utf8(want).unwrap()
            );
        }
    }

    #[test]
    fn decimal_parsing() {
        use super::decimal_usd::parse_decimal_nanos as p;
        assert_eq!(p("0.000313500"), Some(313_500));
        assert_eq!(p("2.85"), Some(2_850_000_000));
        assert_eq!(p("1"), Some(1_000_000_000));
        assert_eq!(p("-1"), None);
        assert_eq!(p("0.0000000001"), None);
    }
}
