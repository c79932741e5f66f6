//! Where traces go and which are kept: chatgate's own settings first (flag,
//! `CHATGATE_*` variable, config file), then OpenTelemetry's standard
//! variables, then the defaults. Tracing is on when a collector is named.

use std::time::Duration;

use super::ConfigError;
use super::endpoints::Target;
use super::settings::Resolver;
use crate::secret::Secret;
use crate::trace::{Sampler, Source, TraceSettings, Value};

/// Where spans are sent, and how.
#[derive(Debug, Clone)]
pub struct OtlpExport {
    /// The collector (scheme, host, port); `base_path` is the whole path
    /// spans are posted to.
    pub target: Target,
    /// Headers sent with every export (values may be secrets: never
    /// logged).
    pub headers: Vec<(String, Secret)>,
    /// How long one export may take.
    pub timeout: Duration,
}

impl OtlpExport {
    /// `scheme://host[:port]/path`, without headers.
    pub fn display_url(&self) -> String {
        self.target.display_url()
    }
}

/// The export and the tracer's settings, when a collector is configured.
pub(super) fn traces(r: &Resolver) -> Result<Option<(OtlpExport, TraceSettings)>, ConfigError> {
    let o = Otel(r);
    let Some(target) = collector(&o)? else {
        return Ok(None);
    };
    let export = OtlpExport {
        target,
        headers: export_headers(&o)?,
        timeout: export_timeout(&o)?,
    };
    let settings = TraceSettings {
        sampler: sampler(&o)?,
        source: Source {
            resource: resource(&o)?,
            scope: "chatgate",
            version: env!("CARGO_PKG_VERSION"),
        },
    };
    Ok(Some((export, settings)))
}

/// The settings, with OpenTelemetry's standard variables behind them.
struct Otel<'a>(&'a Resolver);

impl Otel<'_> {
    /// A variable's value, trimmed; an empty one is unset.
    fn env(&self, name: &str) -> Option<String> {
        self.0
            .env
            .get(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// The signal's own variable, else the generic one; with its name.
    fn signal(
        &self,
        traces: &'static str,
        generic: &'static str,
    ) -> Option<(String, &'static str)> {
        self.env(traces)
            .map(|v| (v, traces))
            .or_else(|| self.env(generic).map(|v| (v, generic)))
    }

    /// Our setting, else the named variable.
    fn setting_or(&self, key: &str, var: &str) -> Option<String> {
        self.0.get(key).map(|(v, _)| v).or_else(|| self.env(var))
    }
}

/// Where spans are posted: ours (a base, as OTEL_EXPORTER_OTLP_ENDPOINT),
/// the signal's own URL (as is), or the generic base; none when no
/// collector is named.
fn collector(o: &Otel<'_>) -> Result<Option<Target>, ConfigError> {
    let (url, from) = match o.0.get("otlp_endpoint") {
        Some((v, _)) => (base_to_traces(&v), "otlp_endpoint"),
        None => match o.signal(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ) {
            Some((v, from @ "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) => (v, from),
            Some((v, from)) => (base_to_traces(&v), from),
            None => return Ok(None),
        },
    };
    let mut target = Target::parse(&url)
        .map_err(|e| ConfigError(format!("{from}: {}", e.replace("upstream URL", "URL"))))?;
    if target.base_path.is_empty() {
        // A signal URL without a path posts to `/`, as the specification says.
        target.base_path = "/".into();
    }
    Ok(Some(target))
}

/// The headers sent with every export.
fn export_headers(o: &Otel<'_>) -> Result<Vec<(String, Secret)>, ConfigError> {
    let from =
        o.0.get("otlp_headers")
            .map(|(v, _)| (v, "otlp_headers"))
            .or_else(|| {
                o.signal(
                    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                    "OTEL_EXPORTER_OTLP_HEADERS",
                )
            });
    match from {
        Some((v, from)) => parse_headers(&v).map_err(|e| ConfigError(format!("{from}: {e}"))),
        None => Ok(Vec::new()),
    }
}

/// How long one export may take (10 s by default).
fn export_timeout(o: &Otel<'_>) -> Result<Duration, ConfigError> {
    if o.0.get("otlp_timeout").is_some() {
        return o.0.duration("otlp_timeout");
    }
    match o.signal(
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ) {
        Some((v, from)) => v
            .parse::<u64>()
            .ok()
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
            .ok_or_else(|| {
                ConfigError(format!(
                    "{from} = '{v}' is not valid: expected milliseconds"
                ))
            }),
        None => Ok(Duration::from_secs(10)),
    }
}

/// Which traces are kept (`parentbased_always_on` by default).
fn sampler(o: &Otel<'_>) -> Result<Sampler, ConfigError> {
    let name = o
        .setting_or("traces_sampler", "OTEL_TRACES_SAMPLER")
        .unwrap_or_else(|| "parentbased_always_on".into());
    let arg = o.setting_or("traces_sampler_arg", "OTEL_TRACES_SAMPLER_ARG");
    Sampler::parse(&name, arg.as_deref()).map_err(|e| ConfigError(format!("traces sampler: {e}")))
}

/// The resource: `service.name` first (ours, the standard variable, the
/// resource attributes', else `chatgate`), the other resource attributes,
/// then `service.version`.
fn resource(o: &Otel<'_>) -> Result<Vec<(String, Value)>, ConfigError> {
    let mut pairs = match o.env("OTEL_RESOURCE_ATTRIBUTES") {
        Some(v) => {
            parse_pairs(&v).map_err(|e| ConfigError(format!("OTEL_RESOURCE_ATTRIBUTES: {e}")))?
        }
        None => Vec::new(),
    };
    let named = pairs
        .iter()
        .position(|(k, _)| k == "service.name")
        .map(|i| pairs.remove(i).1);
    let mut resource: Vec<(String, Value)> =
        pairs.into_iter().map(|(k, v)| (k, Value::Str(v))).collect();
    let service = o
        .setting_or("service_name", "OTEL_SERVICE_NAME")
        .or(named)
        .unwrap_or_else(|| "chatgate".into());
    resource.insert(0, ("service.name".into(), Value::Str(service)));
    resource.push((
        "service.version".into(),
        Value::Str(env!("CARGO_PKG_VERSION").into()),
    ));
    Ok(resource)
}

/// A base URL's traces URL: `/v1/traces` after its path.
fn base_to_traces(base: &str) -> String {
    format!("{}/v1/traces", base.trim().trim_end_matches('/'))
}

/// `key=value,…` with percent-encoded values (the W3C Baggage form the
/// OpenTelemetry variables use).
fn parse_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in text.split(',') {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("'{pair}' is not key=value"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(format!("'{pair}' has no key"));
        }
        out.push((
            k.to_owned(),
            crate::url::percent_decode(v)
                .ok_or_else(|| format!("the value of '{k}' has a bad %-escape"))?,
        ));
    }
    Ok(out)
}

/// Headers from `key=value,…`: names must be HTTP tokens, values visible
/// characters and spaces.
fn parse_headers(text: &str) -> Result<Vec<(String, Secret)>, String> {
    parse_pairs(text)?
        .into_iter()
        .map(|(k, v)| {
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if !k.chars().all(token) {
                return Err(format!("'{k}' is not a header name"));
            }
            if v.chars()
                .any(|c| !(c == ' ' || c == '\t' || c.is_ascii_graphic()))
            {
                return Err(format!(
                    "the value of header '{k}' has a character a header cannot carry"
                ));
            }
            Ok((k, Secret::new(v)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(
        flags: &[(&str, &str)],
        env: &[(&str, &str)],
    ) -> Result<Option<(OtlpExport, TraceSettings)>, ConfigError> {
        let map = |kv: &[(&str, &str)]| -> HashMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        traces(&Resolver {
            flags: map(flags),
            env: map(env),
            file: toml::Table::new(),
        })
    }

    #[test]
    fn off_without_a_collector() {
        assert!(resolve(&[], &[]).unwrap().is_none());
    }

    #[test]
    fn the_standard_variables_and_their_precedence() {
        let (e, s) = resolve(&[], &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(e.display_url(), "http://c:4318/v1/traces");
        assert_eq!(e.timeout, Duration::from_secs(10));
        assert_eq!(s.sampler, Sampler::default());
        assert_eq!(
            s.source.resource[0],
            ("service.name".into(), Value::Str("chatgate".into()))
        );
        let (e, _) = resolve(
            &[],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t.example/in"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(e.display_url(), "https://t.example/in");
        assert!(e.target.tls);
        let (e, s) = resolve(
            &[
                ("otlp_endpoint", "http://mine:4318/base"),
                ("service_name", "edge"),
            ],
            &[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t.example/in"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "x-honeycomb-team=abc%3D,b = 2 ",
                ),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_SERVICE_NAME", "ignored"),
                (
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "deployment.environment=prod,service.name=x",
                ),
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(e.display_url(), "http://mine:4318/base/v1/traces");
        let headers: Vec<_> = e
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(headers, [("x-honeycomb-team", "abc="), ("b", "2")]);
        assert_eq!(e.timeout, Duration::from_millis(2500));
        assert_eq!(
            s.sampler,
            Sampler::parse("traceidratio", Some("0.5")).unwrap()
        );
        assert_eq!(s.source.resource[0].1, Value::Str("edge".into()));
        assert_eq!(
            s.source.resource[1],
            ("deployment.environment".into(), Value::Str("prod".into()))
        );
    }

    #[test]
    fn bad_values_refuse_to_start_with_one_line() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        for (env, needle) in [
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://c")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                vec![base, ("OTEL_TRACES_SAMPLER", "sometimes")],
                "'sometimes'",
            ),
            (
                vec![
                    base,
                    ("OTEL_TRACES_SAMPLER", "traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "2"),
                ],
                "'2'",
            ),
            (
                vec![base, ("OTEL_EXPORTER_OTLP_HEADERS", "novalue")],
                "'novalue' is not key=value",
            ),
            (
                vec![base, ("OTEL_EXPORTER_OTLP_HEADERS", "a b=1")],
                "'a b' is not a header name",
            ),
            (
                vec![base, ("OTEL_EXPORTER_OTLP_HEADERS", "a=%zz")],
                "bad %-escape",
            ),
            (
                vec![base, ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")],
                "expected milliseconds",
            ),
            (vec![base, ("OTEL_RESOURCE_ATTRIBUTES", "=x")], "has no key"),
        ] {
            let e = resolve(&[], &env).unwrap_err().to_string();
            assert!(e.contains(needle), "{env:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let e = resolve(&[("otlp_endpoint", "http://c"), ("otlp_timeout", "x")], &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--otlp-timeout"), "{e}");
    }
}
