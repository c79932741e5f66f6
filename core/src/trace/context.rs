//! W3C Trace Context: reading a client's `traceparent` and `tracestate`,
//! writing the gateway's. A header that breaks a rule is ignored (a new
//! trace starts), never an error: tracing must not refuse a request.

/// A trace's id: 16 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// A span's id: 8 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

impl TraceId {
    /// An id from two random words; an all-zero draw becomes 1.
    pub fn from_random(hi: u64, lo: u64) -> TraceId {
        let lo = if hi == 0 && lo == 0 { 1 } else { lo };
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&hi.to_be_bytes());
        b[8..].copy_from_slice(&lo.to_be_bytes());
        TraceId(b)
    }

    /// Lowercase hex, as in `traceparent` and the access log.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

impl SpanId {
    /// An id from a random word; zero becomes 1.
    pub fn from_random(r: u64) -> SpanId {
        SpanId(r.max(1).to_be_bytes())
    }

    /// Lowercase hex.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

/// The `sampled` bit of the trace flags.
pub const SAMPLED: u8 = 0x01;

/// A span's context as another process sent it (`traceparent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    /// The trace.
    pub trace_id: TraceId,
    /// The span (the parent, for spans made from it).
    pub span_id: SpanId,
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl SpanContext {
    /// Whether the sender recorded its span.
    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }
}

/// The trace context a request head carries: its `traceparent`, when
/// valid and sent once, and its `tracestate` (every field, joined), when
/// valid and with such a `traceparent`.
pub fn client_context(head: &crate::http::RequestHead) -> (Option<SpanContext>, Option<String>) {
    let parent = head.traceparent.as_deref().and_then(parse_traceparent);
    let state = parent
        .and(head.tracestate.as_deref())
        .and_then(parse_tracestate);
    (parent, state)
}

/// Reads a `traceparent` header value. Version `00` must be exactly
/// `00-<32 hex>-<16 hex>-<2 hex>`; a later version (`01` to `fe`) is read
/// by the same first 55 characters, followed by nothing or by `-` and
/// more; version `ff`, uppercase hex, or an all-zero id make it invalid.
pub fn parse_traceparent(v: &[u8]) -> Option<SpanContext> {
    let v = v.trim_ascii();
    if v.len() < 55 {
        return None;
    }
    let version = hex_byte(&v[0..2])?;
    if version == 0xff || (version == 0 && v.len() != 55) {
        return None;
    }
    if v.len() > 55 && v[55] != b'-' {
        return None;
    }
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let mut trace = [0u8; 16];
    for (i, b) in trace.iter_mut().enumerate() {
        *b = hex_byte(&v[3 + 2 * i..5 + 2 * i])?;
    }
    let mut span = [0u8; 8];
    for (i, b) in span.iter_mut().enumerate() {
        *b = hex_byte(&v[36 + 2 * i..38 + 2 * i])?;
    }
    let flags = hex_byte(&v[53..55])?;
    if trace == [0; 16] || span == [0; 8] {
        return None;
    }
    Some(SpanContext {
        trace_id: TraceId(trace),
        span_id: SpanId(span),
        // Only the flags this version defines travel on.
        flags: flags & SAMPLED,
    })
}

/// Writes the `traceparent` for `span` in `trace` (version `00`).
pub fn format_traceparent(trace: &TraceId, span: &SpanId, sampled: bool) -> String {
    format!(
        "00-{}-{}-{:02x}",
        trace.hex(),
        span.hex(),
        u8::from(sampled)
    )
}

/// The most `tracestate` members kept.
const MAX_MEMBERS: usize = 32;
/// The longest `tracestate` carried on (the length W3C asks every
/// participant to propagate at least).
const MAX_TRACESTATE: usize = 512;

/// A `tracestate` value to carry on, if it is valid: at most 32
/// comma-separated `key=value` members with W3C's characters, at most 512
/// bytes; empty members (`a=1,,b=2`) are allowed. Anything else is dropped
/// whole, as the reference SDKs do.
pub fn parse_tracestate(v: &[u8]) -> Option<String> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > MAX_TRACESTATE {
        return None;
    }
    let mut members = 0;
    for member in v.split(|&b| b == b',') {
        let member = member.trim_ascii();
        if member.is_empty() {
            continue;
        }
        members += 1;
        if members > MAX_MEMBERS {
            return None;
        }
        let eq = member.iter().position(|&b| b == b'=')?;
        let (key, value) = (&member[..eq], &member[eq + 1..]);
        if !valid_key(key) || !valid_value(value) {
            return None;
        }
    }
    if members == 0 {
        return None;
    }
    std::str::from_utf8(v).ok().map(str::to_owned)
}

/// `simple-key` or `tenant@system`: lowercase letters and digits, `_`,
/// `-`, `*`, `/`; a simple key starts with a letter, at most 256 bytes; a
/// tenant at most 241 and a system at most 14 bytes, the system starting
/// with a letter.
fn valid_key(k: &[u8]) -> bool {
    let chars = |s: &[u8]| {
        s.iter().all(|&c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'*' | b'/')
        })
    };
    match k.iter().position(|&c| c == b'@') {
        None => !k.is_empty() && k.len() <= 256 && k[0].is_ascii_lowercase() && chars(k),
        Some(at) => {
            let (tenant, system) = (&k[..at], &k[at + 1..]);
            !tenant.is_empty()
                && tenant.len() <= 241
                && (tenant[0].is_ascii_lowercase() || tenant[0].is_ascii_digit())
                && chars(tenant)
                && !system.is_empty()
                && system.len() <= 14
                && system[0].is_ascii_lowercase()
                && chars(system)
        }
    }
}

/// Up to 256 printable ASCII characters except `,` and `=`, not ending in
/// a space.
fn valid_value(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= 256
        && v.last() != Some(&b' ')
        && v.iter()
            .all(|&c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    let d = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(d(two[0])? << 4 | d(two[1])?)
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_trace_context_and_ignores_a_broken_one() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let head = |extra: &str| {
            let raw = format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\n{extra}Content-Length: 2\r\n\r\n"
            );
            let limits = crate::http::HttpLimits::default();
            let h = crate::http::parse_request_head(raw.as_bytes(), &limits).unwrap();
            client_context(&h)
        };
        let h = head(&format!(
            "traceparent: {tp}\r\ntracestate: a=1\r\nTraceState: b=2\r\n"
        ));
        assert_eq!(
            h.0.unwrap().trace_id.hex(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(h.1.as_deref(), Some("a=1,b=2"));
        // Two traceparents: neither; a tracestate without a valid one: none.
        let h = head(&format!(
            "traceparent: {tp}\r\ntraceparent: {tp}\r\ntracestate: a=1\r\n"
        ));
        assert_eq!(h, (None, None));
        let h = head("traceparent: garbage\r\ntracestate: a=1\r\n");
        assert_eq!(h, (None, None));
        // A broken tracestate is dropped; the traceparent stays.
        let h = head(&format!("traceparent: {tp}\r\ntracestate: A=1\r\n"));
        assert!(h.0.is_some() && h.1.is_none());
        assert_eq!(head("").0, None);
    }

    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn reads_a_valid_traceparent_and_writes_it_back() {
        let c = parse_traceparent(GOOD.as_bytes()).unwrap();
        assert_eq!(c.trace_id.hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(c.span_id.hex(), "00f067aa0ba902b7");
        assert!(c.sampled());
        assert_eq!(format_traceparent(&c.trace_id, &c.span_id, true), GOOD);
        let unsampled = GOOD.replace("-01", "-00");
        assert!(!parse_traceparent(unsampled.as_bytes()).unwrap().sampled());
        // Surrounding whitespace is the header's, not the value's.
        assert!(parse_traceparent(format!(" {GOOD} ").as_bytes()).is_some());
    }

    #[test]
    fn ignores_every_kind_of_broken_traceparent() {
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert_eq!(parse_traceparent(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_a_later_version_by_its_first_fields() {
        let future = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-comes-next";
        let c = parse_traceparent(future.as_bytes()).unwrap();
        assert_eq!(c.flags, SAMPLED, "unknown flags are not carried on");
        assert!(parse_traceparent(&future.as_bytes()[..55]).is_some());
    }

    #[test]
    fn keeps_a_valid_tracestate_and_drops_a_broken_one() {
        for good in [
            "rojo=00f067aa0ba902b7",
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
            "a=1,,b=2",
            "tenant1@vendor=x y",
            "k/*_-=v",
        ] {
            assert_eq!(parse_tracestate(good.as_bytes()).as_deref(), Some(good));
        }
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        let long = format!("k={}", "v".repeat(257));
        for bad in [
            "",
            ",",
            "novalue",
            "Upper=1",
            "9start=1",
            "k=a,b",
            "k=a=b",
            "k=é",
            "@system=1",
            "tenant@=1",
            long.as_str(),
            many.join(",").as_str(),
            "x".repeat(600).as_str(),
        ] {
            assert_eq!(parse_tracestate(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn random_ids_are_never_zero() {
        assert_ne!(TraceId::from_random(0, 0).0, [0; 16]);
        assert_ne!(SpanId::from_random(0).0, [0; 8]);
        assert_eq!(
            TraceId::from_random(1, 2).hex(),
            "00000000000000010000000000000002"
        );
    }
}
