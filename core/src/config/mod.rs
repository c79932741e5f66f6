//! Configuration: every setting of `serve` and how it is resolved
//! (precedence flag > environment > file > default, in `settings.rs`), and
//! the configuration types the rest of core reads — the gateway's
//! ([`GatewayConfig`], [`Timeouts`], [`SharedLimits`]), the provider's
//! ([`Target`], [`Secret`]) and the shared limiter's ([`RedisUrl`]).
//!
//! The runtime collects flags (argv) and the environment and reads the file;
//! everything else — names, parsing, validation, messages — happens here,
//! once, for every binary.
//!
//! | file | job |
//! |---|---|
//! | `settings.rs` | every setting's flag, variable, file key and default, and the precedence |
//! | `gateway.rs` | [`GatewayConfig`] and [`Timeouts`]: what the exchange reads |
//! | `endpoints.rs` | a provider endpoint's configuration ([`EndpointConfig`], [`Target`]) and the `[[upstream]]` tables |
//! | `models.rs` | the catalogue of the `[[model]]` tables: prices, endpoints, aliases, fallbacks |
//! | `tables.rs` | one `[[upstream]]` or `[[model]]` table read field by field, its refusals naming table and field |
//! | `listeners.rs` | TLS on the listeners ([`ListenerTls`]): certificate, key and the admin listener's client CAs, paired |
//! | `redis.rs` | the shared limiter's URL ([`RedisUrl`]), and which Redis the settings name: one server, Sentinels or a cluster |
//! | `console.rs` | the console's settings: the admin token and single sign-on |
//! | `traces.rs` | the trace exporter's settings, from chatgate's and the `OTEL_*` variables |

mod console;
mod endpoints;
mod gateway;
mod listeners;
mod models;
mod redis;
mod settings;
mod tables;
mod traces;

use std::time::Duration;

use crate::limits::Limits;
use crate::quota::{Budget, Period, usd_to_nano};

pub use crate::routes::Apis;
pub use crate::secret::Secret;
pub(crate) use endpoints::MAX_ENDPOINTS;
pub use endpoints::{DEFAULT_ENDPOINT, EndpointConfig, Target, parse_endpoints};
pub use gateway::{
    GatewayConfig, ReasoningConfig, ResponsesKeeping, ResponsesStoreAt, SharedLimits, Timeouts,
};
pub use listeners::ListenerTls;
pub use redis::{RedisTopology, RedisUrl, SharedRedis, parse_redis_list};
use settings::{Resolver, bad};
pub use settings::{SERVE_SETTINGS, Setting, Sources, env_name, flag_name, parse_duration};
pub(crate) use settings::{Source, UPSTREAM_KEY_ENV};
pub use traces::OtlpExport;

/// The resolved configuration of `serve`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Listen address.
    pub listen: String,
    /// Keys file path.
    pub keys_path: String,
    /// Ledger path.
    pub ledger_path: String,
    /// Extra CA file.
    pub upstream_ca: Option<String>,
    /// The admin listener's address, if any.
    pub admin_listen: Option<String>,
    /// TLS on the public listener, if set.
    pub tls: Option<ListenerTls>,
    /// TLS on the admin listener, if set.
    pub admin_tls: Option<ListenerTls>,
    /// The shared ledger's PostgreSQL URL, if any.
    pub ledger_postgres: Option<String>,
    /// The Responses API's store, when it keeps responses.
    pub responses_store: Option<ResponsesStoreAt>,
    /// The shared limiter's Redis, if any.
    pub redis: Option<SharedRedis>,
    /// Longest wait for Redis.
    pub redis_timeout: Duration,
    /// Log level.
    pub log_level: String,
    /// `json` logs.
    pub log_json: bool,
    /// Idle provider connections kept.
    pub pool_max_idle: usize,
    /// Idle provider connection lifetime.
    pub pool_idle_timeout: Duration,
    /// Where traces go, when tracing is on.
    pub otlp: Option<OtlpExport>,
    /// Threads that serve connections (`None`: one per core).
    pub worker_threads: Option<usize>,
    /// The public listener shares its port with other processes that set
    /// it too (`SO_REUSEPORT`): one single-threaded instance per core, and
    /// restarts with no refused connection.
    pub reuse_port: bool,
    /// The gateway's configuration.
    pub gateway: GatewayConfig,
}

/// A configuration problem, with a message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl ServeConfig {
    /// Resolves every setting; the provider key comes from
    /// `CHATGATE_UPSTREAM_API_KEY` in `sources.env`.
    pub fn resolve(sources: Sources) -> Result<ServeConfig, ConfigError> {
        let mut file: toml::Table = match &sources.file {
            Some(text) => toml::from_str(text)
                .map_err(|e| ConfigError(format!("config file: {}", e.message())))?,
            None => toml::Table::new(),
        };
        let models = file.remove("model");
        // `upstream` is a URL, or a list of `[[upstream]]` tables (one per
        // endpoint).
        let tables = match file.get("upstream") {
            Some(toml::Value::Array(_)) => file.remove("upstream"),
            _ => None,
        };
        for key in file.keys() {
            if !SERVE_SETTINGS.iter().any(|s| s.key == key) {
                return Err(ConfigError(format!("config file: unknown setting '{key}'")));
            }
        }
        let r = Resolver {
            flags: sources.flags,
            env: sources.env,
            file,
        };
        let mut endpoints = endpoint_configs(&r, tables)?;
        let keys_path = r.required("keys", "create one with `keys new --keys FILE --name NAME`")?;
        let log_format = one_of(&r, "log_format", &["text", "json"], "text or json")?;
        let log_level = one_of(
            &r,
            "log_level",
            &["error", "warn", "info", "debug", "trace"],
            "error, warn, info, debug or trace",
        )?;
        let default_limits = Limits {
            requests_per_minute: positive(&r, "default_rpm")?,
            tokens_per_minute: positive(&r, "default_tpm")?,
        };
        let timeouts = timeouts(&r)?;
        let catalog = models::catalog(models, &r.string("owned_by"), &mut endpoints)?;
        let mut gateway = GatewayConfig::with_endpoints(endpoints);
        gateway.upstream_attempts = match r.get("upstream_attempts") {
            Some(_) => positive(&r, "upstream_attempts")? as usize,
            None => 0,
        };
        gateway.probe_interval = r.duration("upstream_probe_interval")?;
        gateway.stream_error_event = boolean(&r, "stream_error_event")?;
        gateway.stream_resume = boolean(&r, "stream_resume")?;
        gateway.stream_resume_attempts =
            u32::try_from(positive(&r, "stream_resume_attempts")?).unwrap_or(u32::MAX);
        gateway.apis = match r.get("apis") {
            Some((v, src)) => Apis::parse(&v).map_err(|_| {
                bad(
                    "apis",
                    &v,
                    src,
                    &format!("a comma-separated list of {}", Apis::NAMES),
                )
            })?,
            None => Apis::default(),
        };
        let responses_store = responses_store(&r, &mut gateway)?;
        gateway.prompt_overhead_tokens = r.parse("prompt_overhead_tokens")?;
        gateway.timeouts = timeouts;
        gateway.default_limits = default_limits;
        quota_defaults(&r, &mut gateway)?;
        gateway.max_connections = positive(&r, "max_connections")? as usize;
        gateway.max_sse_event = positive(&r, "max_sse_event")? as usize;
        gateway.max_upstream_body = positive(&r, "max_upstream_body")?;
        gateway.catalog = catalog;
        let otlp = match traces::traces(&r)? {
            Some((export, settings)) => {
                gateway.trace = Some(settings);
                Some(export)
            }
            None => None,
        };
        gateway.reasoning = reasoning(&r)?;
        gateway.console_token = console::token(&r)?;
        gateway.sso = console::sso(&r, gateway.console_token.is_some())?;
        if let Some((var, _)) = r.get("admin_token_env") {
            gateway.console_token_name = var;
        }
        let redis = redis::shared(&r)?;
        let fallback = one_of(
            &r,
            "redis_fallback",
            &["fail-open", "fail-closed"],
            "fail-open or fail-closed",
        )?;
        if redis.is_some() {
            gateway.shared_limits = Some(SharedLimits {
                fail_closed: fallback == "fail-closed",
            });
            redis::within_shared_range(&r, default_limits)?;
        }
        Ok(ServeConfig {
            listen: r.string("listen"),
            keys_path,
            ledger_path: r.string("ledger"),
            upstream_ca: r.get("upstream_ca").map(|(v, _)| v),
            admin_listen: r.get("admin_listen").map(|(v, _)| v),
            tls: listeners::public(&r)?,
            admin_tls: listeners::admin(&r)?,
            redis,
            redis_timeout: r.duration("redis_timeout")?,
            ledger_postgres: r.get("ledger_postgres").map(|(v, _)| v),
            responses_store,
            log_level,
            log_json: log_format == "json",
            pool_max_idle: r.parse("pool_max_idle")?,
            pool_idle_timeout: r.duration("pool_idle_timeout")?,
            otlp,
            worker_threads: match r.get("worker_threads") {
                Some(_) => Some(positive(&r, "worker_threads")? as usize),
                None => None,
            },
            reuse_port: boolean(&r, "reuse_port")?,
            gateway,
        })
    }

    /// One line describing the effective configuration, without secrets.
    pub fn summary(&self, keys: usize) -> String {
        let g = &self.gateway;
        let t = &g.timeouts;
        format!(
            "listen={}{}{} admin={}{} console={} shared_limits={} ledger_postgres={} traces={} {} keys={} ({}) default_limits={}rpm/{}tpm ledger={} models={} \
             timeouts: connect={:?} first_byte={:?} idle={:?} client_header={:?} drain={:?} max_connections={} worker_threads={}",
            self.listen,
            if self.tls.is_some() { " (TLS)" } else { "" },
            if self.reuse_port {
                " (shared port)"
            } else {
                ""
            },
            self.admin_listen.as_deref().unwrap_or("off"),
            match &self.admin_tls {
                Some(t) if t.client_ca.is_some() => " (TLS, client certificates)",
                Some(_) => " (TLS)",
                None => "",
            },
            if g.console_token.is_some() {
                "on"
            } else {
                "off"
            },
            self.redis.as_ref().map_or_else(
                || "off".to_owned(),
                |u| format!(
                    "{} ({})",
                    u.display(),
                    if self.gateway.shared_limits.is_some_and(|s| s.fail_closed) {
                        "fail-closed"
                    } else {
                        "fail-open"
                    }
                )
            ),
            if self.ledger_postgres.is_some() {
                "on"
            } else {
                "off"
            },
            self.otlp.as_ref().map_or_else(
                || "off".to_owned(),
                |o| format!("{} (headers: {})", o.display_url(), o.headers.len())
            ),
            endpoints_summary(&g.endpoints),
            keys,
            if self.keys_path.contains("://") {
                "postgres"
            } else {
                &self.keys_path
            },
            g.default_limits.requests_per_minute,
            g.default_limits.tokens_per_minute,
            self.ledger_path,
            g.catalog
                .models()
                .iter()
                .map(|m| m.id.as_str())
                .collect::<Vec<_>>()
                .join(","),
            t.upstream_connect,
            t.upstream_first_byte,
            t.upstream_idle,
            t.client_header,
            t.drain,
            g.max_connections,
            self.worker_threads
                .map_or_else(|| "one per core".to_owned(), |n| n.to_string()),
        )
    }
}

/// How reasoning survives the tool loop: the defaults of models and
/// endpoints, the memory's bounds, and the deployment secret from the
/// variable `signing_secret_env` names.
fn reasoning(r: &Resolver) -> Result<ReasoningConfig, ConfigError> {
    use crate::reasoning::{MIN_SECRET, MemoryLimits, ReasoningField, ReplayMode};
    let value = |key: &str| {
        r.get(key)
            .ok_or_else(|| ConfigError(format!("{key} is not set")))
    };
    let (v, src) = value("reasoning_replay")?;
    let replay =
        ReplayMode::parse(&v).ok_or_else(|| bad("reasoning_replay", &v, src, ReplayMode::NAMES))?;
    let (v, src) = value("reasoning_field")?;
    let field = ReasoningField::parse(&v)
        .ok_or_else(|| bad("reasoning_field", &v, src, ReasoningField::NAMES))?;
    let memory = MemoryLimits {
        entries: r.parse("reasoning_memory_entries")?,
        bytes: r.parse("reasoning_memory_bytes")?,
        ttl: r.duration("reasoning_memory_ttl")?,
    };
    let mut config = ReasoningConfig {
        replay,
        field,
        memory,
        secret: None,
        secret_env: None,
    };
    if let Some((var, _)) = r.get("signing_secret_env") {
        let Some(secret) = r.env.get(&var).filter(|v| !v.is_empty()) else {
            return Err(ConfigError(format!(
                "signing_secret_env: the environment variable {var} is not set"
            )));
        };
        if secret.len() < MIN_SECRET {
            return Err(ConfigError(format!(
                "signing_secret_env: the secret in {var} is shorter than {MIN_SECRET} characters; use a long random one (e.g. `openssl rand -hex 32`), the same on every instance"
            )));
        }
        config.secret = Some(Secret::new(secret.clone()));
        config.secret_env = Some(var);
    }
    Ok(config)
}

/// A switch: `true` or `false` (also `1`/`0`, `yes`/`no`, `on`/`off`;
/// a flag given without a value is `true`).
fn boolean(r: &Resolver, key: &str) -> Result<bool, ConfigError> {
    let value = r.string(key);
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => {
            let src = r.get(key).map_or(Source::Default, |(_, s)| s);
            Err(bad(key, &value, src, "true or false"))
        }
    }
}

/// A setting that must be one of `choices`.
fn one_of(
    r: &Resolver,
    key: &str,
    choices: &[&str],
    expected: &str,
) -> Result<String, ConfigError> {
    let value = r.string(key);
    if choices.contains(&value.as_str()) {
        return Ok(value);
    }
    let src = r.get(key).map_or(Source::Default, |(_, s)| s);
    Err(bad(key, &value, src, expected))
}

/// The provider's endpoints: the one `upstream` URL (a flag or variable
/// wins over the file) with its key from the environment, or the file's
/// `[[upstream]]` tables.
fn endpoint_configs(
    r: &Resolver,
    tables: Option<toml::Value>,
) -> Result<Vec<EndpointConfig>, ConfigError> {
    let ca = r.get("upstream_ca").map(|(v, _)| v);
    let tables = match tables {
        Some(tables) if r.get("upstream").is_none() => tables,
        _ => {
            let url = r.required("upstream", "say where the provider is")?;
            let mut target = Target::parse(&url).map_err(ConfigError)?;
            target.api_key = r
                .env
                .get(UPSTREAM_KEY_ENV)
                .filter(|k| !k.is_empty())
                .map(Secret::new);
            let mut endpoint = EndpointConfig::single(target, ca);
            if let Some((v, src)) = r.get("upstream_continuation") {
                endpoint.continuation = crate::dialect::splice::Continuation::parse(&v)
                    .ok_or_else(|| {
                        bad(
                            "upstream_continuation",
                            &v,
                            src,
                            crate::dialect::splice::Continuation::NAMES,
                        )
                    })?;
            }
            return Ok(vec![endpoint]);
        }
    };
    let mut endpoints = parse_endpoints(&tables, &r.env)?;
    for endpoint in &mut endpoints {
        endpoint.ca = endpoint.ca.take().or_else(|| ca.clone());
    }
    Ok(endpoints)
}

/// `upstream=URL provider_key=set` for one endpoint; otherwise the endpoints' names,
/// addresses, weights and whether each has a key otherwise.
fn endpoints_summary(endpoints: &[EndpointConfig]) -> String {
    let key = |e: &EndpointConfig| {
        if e.target.api_key.is_some() {
            "set"
        } else {
            "none"
        }
    };
    match endpoints {
        [one] if one.name == DEFAULT_ENDPOINT => format!(
            "upstream={} provider_key={}",
            one.target.display_url(),
            key(one)
        ),
        _ => {
            let list: Vec<String> = endpoints
                .iter()
                .map(|e| {
                    format!(
                        "{}={}(weight={},key={}{})",
                        e.name,
                        e.target.display_url(),
                        e.weight,
                        key(e),
                        e.model
                            .as_ref()
                            .map_or(String::new(), |m| format!(",model={m}"))
                    )
                })
                .collect();
            format!("upstreams={}", list.join(","))
        }
    }
}

fn timeouts(r: &Resolver) -> Result<Timeouts, ConfigError> {
    Ok(Timeouts {
        client_idle: r.duration("client_idle_timeout")?,
        client_header: r.duration("client_header_timeout")?,
        client_body: r.duration("client_body_timeout")?,
        client_send: r.duration("client_send_timeout")?,
        upstream_connect: r.duration("upstream_connect_timeout")?,
        upstream_first_byte: r.duration("upstream_first_byte_timeout")?,
        upstream_attempt: match r.get("upstream_attempt_timeout") {
            Some(_) => Some(r.duration("upstream_attempt_timeout")?),
            None => None,
        },
        first_event_keepalive: match r.get("first_event_keepalive") {
            Some((v, _)) if v == "off" => None,
            Some(_) => Some(r.duration("first_event_keepalive")?),
            None => None,
        },
        upstream_idle: r.duration("upstream_idle_timeout")?,
        stream_tail: r.duration("stream_tail_timeout")?,
        drain: r.duration("drain_timeout")?,
    })
}

/// Budgets and in-flight caps for keys that set none, the reserve for
/// requests without `max_tokens`, and the queue's timeout.
fn quota_defaults(r: &Resolver, g: &mut GatewayConfig) -> Result<(), ConfigError> {
    let period = r.string("default_budget_period");
    g.default_budget_period = Period::parse(&period).ok_or_else(|| {
        let src = r
            .get("default_budget_period")
            .map_or(Source::Default, |(_, s)| s);
        bad(
            "default_budget_period",
            &period,
            src,
            "day, week, month or total",
        )
    })?;
    if let Some((text, src)) = r.get("default_budget_usd") {
        let nano = text
            .trim()
            .parse::<f64>()
            .map_err(|_| "not a number".to_owned())
            .and_then(usd_to_nano)
            .map_err(|why| {
                bad(
                    "default_budget_usd",
                    &text,
                    src,
                    &format!("an amount of USD ({why})"),
                )
            })?;
        g.default_quota.budget = Some(Budget {
            limit_nano: nano,
            period: g.default_budget_period,
        });
    }
    if r.get("default_max_in_flight").is_some() {
        let n = positive(r, "default_max_in_flight")?;
        g.default_quota.max_in_flight = Some(u32::try_from(n).unwrap_or(u32::MAX));
    }
    g.budget_reserve_tokens = r.parse("budget_reserve_tokens")?;
    g.queue_timeout = r.duration("queue_timeout")?;
    Ok(())
}

fn positive(r: &Resolver, key: &str) -> Result<u64, ConfigError> {
    let v: u64 = r.parse(key)?;
    if v == 0 {
        let (text, src) = r.get(key).unwrap_or((String::new(), Source::Default));
        return Err(bad(key, &text, src, "a positive number"));
    }
    Ok(v)
}

/// `--responses-store` and its limits, with `--apis responses`: where
/// responses are kept (beside the ledger unless told), or `None` when off.
fn responses_store(
    r: &Resolver,
    gateway: &mut GatewayConfig,
) -> Result<Option<ResponsesStoreAt>, ConfigError> {
    let at = match r.get("responses_store") {
        Some((v, _)) if v.trim() == "off" => None,
        Some((v, src)) if v.starts_with("postgres://") || v.starts_with("postgresql://") => {
            crate::conninfo::split_tls(&v)
                .map_err(|e| bad("responses_store", "postgres://***", src, &e.to_string()))?;
            Some(ResponsesStoreAt::Postgres(v))
        }
        Some((v, src)) if v.trim().is_empty() => {
            return Err(bad(
                "responses_store",
                &v,
                src,
                "a file, a postgres:// URL or off",
            ));
        }
        Some((v, _)) => Some(ResponsesStoreAt::File(v)),
        None => {
            let ledger = r.string("ledger");
            let dir = std::path::Path::new(&ledger)
                .parent()
                .filter(|d| !d.as_os_str().is_empty());
            let file = match dir {
                Some(d) => d.join("chatgate-responses.redb"),
                None => std::path::PathBuf::from("chatgate-responses.redb"),
            };
            Some(ResponsesStoreAt::File(file.to_string_lossy().into_owned()))
        }
    };
    if !gateway.apis.responses || at.is_none() {
        return Ok(None);
    }
    let keeping = ResponsesKeeping {
        ttl: r.duration("responses_ttl")?,
        max_bytes: positive(r, "responses_max_bytes")?,
        key_max_bytes: positive(r, "responses_key_max_bytes")?,
    };
    if keeping.ttl.is_zero() {
        let (v, src) = r
            .get("responses_ttl")
            .unwrap_or((String::new(), Source::Default));
        return Err(bad("responses_ttl", &v, src, "a duration above zero"));
    }
    gateway.responses_kept = Some(keeping);
    gateway.apis.stored = true;
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Price;

    #[test]
    fn listener_tls_comes_in_pairs() {
        let base = [("upstream", "http://h/v1"), ("keys", "k")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut flags = base.to_vec();
            flags.extend_from_slice(extra);
            ServeConfig::resolve(sources(&flags, &[], None))
        };
        let c = with(&[("tls_cert", "c.pem"), ("tls_key", "k.pem")]).unwrap();
        assert_eq!(
            c.tls,
            Some(ListenerTls {
                cert: "c.pem".into(),
                key: "k.pem".into(),
                client_ca: None
            })
        );
        assert_eq!(c.admin_tls, None);
        assert!(c.summary(1).contains("listen=127.0.0.1:8080 (TLS)"));
        let c = with(&[
            ("admin_listen", "127.0.0.1:0"),
            ("admin_tls_cert", "a.pem"),
            ("admin_tls_key", "b.pem"),
            ("admin_client_ca", "ca.pem"),
        ])
        .unwrap();
        assert_eq!(c.tls, None);
        assert_eq!(c.admin_tls.unwrap().client_ca.as_deref(), Some("ca.pem"));
        for (extra, says) in [
            (
                &[("tls_cert", "c.pem")][..],
                "tls_cert is set but tls_key is not",
            ),
            (
                &[("tls_key", "k.pem")][..],
                "tls_key is set but tls_cert is not",
            ),
            (
                &[("admin_tls_cert", "a.pem"), ("admin_tls_key", "b.pem")][..],
                "set admin_listen too",
            ),
            (
                &[
                    ("admin_listen", "127.0.0.1:0"),
                    ("admin_client_ca", "ca.pem"),
                ][..],
                "set admin_tls_cert and admin_tls_key too",
            ),
        ] {
            let e = with(extra).unwrap_err().0;
            assert!(e.contains(says), "{extra:?}: {e}");
        }
    }

    #[test]
    fn redis_is_one_server_sentinels_or_a_cluster() {
        let base = [("upstream", "http://h/v1"), ("keys", "k")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut flags = base.to_vec();
            flags.extend_from_slice(extra);
            ServeConfig::resolve(sources(&flags, &[], None))
        };
        let c = with(&[
            ("redis_sentinels", "redis://:pw@10.0.0.1,10.0.0.2:5000/3"),
            ("redis_sentinel_master", "mymaster"),
        ])
        .unwrap();
        let r = c.redis.unwrap();
        assert_eq!(
            r.topology,
            RedisTopology::Sentinel {
                sentinels: vec![("10.0.0.1".into(), 26379), ("10.0.0.2".into(), 5000)],
                primary: "mymaster".into(),
            }
        );
        assert_eq!((r.url.password.as_deref(), r.url.db), (Some("pw"), 3));
        assert!(c.gateway.shared_limits.is_some());
        let c = with(&[("redis_cluster", "a:7000,b")]).unwrap();
        assert_eq!(
            c.redis.unwrap().topology,
            RedisTopology::Cluster {
                seeds: vec![("a".into(), 7000), ("b".into(), 6379)]
            }
        );
        let c = with(&[("redis", "redis://h")]).unwrap();
        assert_eq!(c.redis.unwrap().topology, RedisTopology::Server);
        for (extra, says) in [
            (
                &[("redis", "redis://h"), ("redis_cluster", "a:1")][..],
                "--redis and --redis-cluster are exclusive",
            ),
            (
                &[("redis_sentinels", "a:1"), ("redis_cluster", "b:1")][..],
                "are exclusive",
            ),
            (
                &[("redis_sentinels", "a:1")][..],
                "needs --redis-sentinel-master",
            ),
            (
                &[("redis_sentinel_master", "m")][..],
                "to be given with --redis-sentinels",
            ),
            (
                &[
                    ("redis_sentinels", "a:1"),
                    ("redis_sentinel_master", "my master"),
                ][..],
                "the name the Sentinels monitor",
            ),
            (&[("redis_cluster", "redis://a:1/2")][..], "database 0"),
            (
                &[("redis_cluster", "a:1,,b:2")][..],
                "an address in the list is empty",
            ),
            (
                &[
                    ("redis_sentinels", "a:1,a:1"),
                    ("redis_sentinel_master", "m"),
                ][..],
                "listed twice",
            ),
        ] {
            let e = with(extra).unwrap_err().0;
            assert!(e.contains(says), "{extra:?}: {e}");
        }
    }

    #[test]
    fn single_sign_on_needs_its_settings() {
        let base = [
            ("upstream", "http://h/v1"),
            ("keys", "k"),
            ("admin_listen", "127.0.0.1:0"),
            ("admin_token_env", "T"),
            ("sso_issuer", "https://id.example"),
            ("sso_client_id", "chatgate"),
            ("sso_client_secret_env", "S"),
            ("sso_admins", "boss@example.com"),
            ("sso_allowed", "@example.com, x@y.org"),
        ];
        let env = [("T", "admin-token-0123456789"), ("S", "secret")];
        let c = ServeConfig::resolve(sources(&base, &env, None)).unwrap();
        let sso = c.gateway.sso.unwrap();
        assert_eq!(sso.allowed, ["@example.com", "x@y.org"]);
        assert_eq!(sso.login_timeout_ms, 600_000);
        assert_eq!(sso.client_secret.expose(), "secret");
        let without = |key: &str| {
            let flags: Vec<(&str, &str)> =
                base.iter().copied().filter(|(k, _)| *k != key).collect();
            ServeConfig::resolve(sources(&flags, &env, None))
                .unwrap_err()
                .0
        };
        assert!(without("admin_token_env").contains("needs admin_token_env"));
        assert!(without("sso_client_id").starts_with("sso_client_id:"));
        assert!(without("sso_issuer").contains("needs sso_issuer too"));
        let e = ServeConfig::resolve(sources(&base, &env[..1], None))
            .unwrap_err()
            .0;
        assert!(e.contains("S is not set"), "{e}");
        let nobody: Vec<(&str, &str)> = base
            .iter()
            .copied()
            .filter(|(k, _)| *k != "sso_admins" && *k != "sso_allowed")
            .collect();
        let e = ServeConfig::resolve(sources(&nobody, &env, None))
            .unwrap_err()
            .0;
        assert!(e.contains("who may sign in"), "{e}");
    }

    fn sources(flags: &[(&str, &str)], env: &[(&str, &str)], file: Option<&str>) -> Sources {
        Sources {
            flags: flags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            file: file.map(str::to_owned),
        }
    }

    #[test]
    fn precedence_flag_env_file_default() {
        let file = "listen = \"file:1\"\nupstream = \"http://file/v1\"\nkeys = \"k.toml\"\ndefault_rpm = 7\n";
        let c = ServeConfig::resolve(sources(
            &[("listen", "flag:1")],
            &[
                ("CHATGATE_LISTEN", "env:1"),
                ("CHATGATE_UPSTREAM", "http://env/v1"),
            ],
            Some(file),
        ))
        .unwrap();
        assert_eq!(c.listen, "flag:1");
        assert_eq!(c.gateway.endpoints[0].target.host, "env");
        assert_eq!(c.keys_path, "k.toml");
        assert_eq!(c.gateway.default_limits.requests_per_minute, 7);
        assert_eq!(c.gateway.default_limits.tokens_per_minute, 100_000);
        assert_eq!(c.ledger_path, "chatgate-ledger.jsonl");
        assert_eq!(
            c.gateway.timeouts.upstream_first_byte,
            Duration::from_secs(600)
        );
    }

    #[test]
    fn provider_key_only_from_env_and_never_printed() {
        let c = ServeConfig::resolve(sources(
            &[("upstream", "https://p/v1"), ("keys", "k")],
            &[(UPSTREAM_KEY_ENV, "sk-provider-xyz")],
            None,
        ))
        .unwrap();
        assert_eq!(
            c.gateway.endpoints[0]
                .target
                .api_key
                .as_ref()
                .map(Secret::expose),
            Some("sk-provider-xyz")
        );
        let summary = c.summary(3);
        assert!(!summary.contains("sk-provider-xyz"));
        assert!(summary.contains("provider_key=set"));
        assert!(!format!("{c:?}").contains("sk-provider-xyz"));
    }

    #[test]
    fn stream_resumption_settings() {
        let base = [("upstream", "http://h/v1"), ("keys", "k")];
        let c = ServeConfig::resolve(sources(&base, &[], None)).unwrap();
        assert!(c.gateway.stream_resume);
        assert_eq!(c.gateway.stream_resume_attempts, 1);
        assert_eq!(
            c.gateway.endpoints[0].continuation,
            crate::dialect::splice::Continuation::None
        );
        let c = ServeConfig::resolve(sources(
            &[
                ("upstream", "http://h/v1"),
                ("keys", "k"),
                ("upstream_continuation", "continue_final_message"),
                ("stream_resume", "off"),
                ("stream_resume_attempts", "2"),
            ],
            &[],
            None,
        ))
        .unwrap();
        assert_eq!(
            c.gateway.endpoints[0].continuation,
            crate::dialect::splice::Continuation::ContinueFinalMessage
        );
        assert!(!c.gateway.stream_resume);
        assert_eq!(c.gateway.stream_resume_attempts, 2);
        let e = ServeConfig::resolve(sources(
            &[
                ("upstream", "http://h/v1"),
                ("keys", "k"),
                ("upstream_continuation", "prefill"),
            ],
            &[],
            None,
        ))
        .unwrap_err();
        assert!(
            e.0.contains("upstream-continuation") && e.0.contains("final_assistant"),
            "{e}"
        );
        let e = ServeConfig::resolve(sources(
            &[
                ("upstream", "http://h/v1"),
                ("keys", "k"),
                ("stream_resume_attempts", "0"),
            ],
            &[],
            None,
        ))
        .unwrap_err();
        assert!(e.0.contains("stream-resume-attempts"), "{e}");
    }

    #[test]
    fn clear_errors() {
        let e = ServeConfig::resolve(sources(&[("keys", "k")], &[], None)).unwrap_err();
        assert!(
            e.0.contains("--upstream") && e.0.contains("CHATGATE_UPSTREAM"),
            "{e}"
        );
        let e =
            ServeConfig::resolve(sources(&[("upstream", "http://h/v1")], &[], None)).unwrap_err();
        assert!(e.0.contains("keys new"), "{e}");
        let e = ServeConfig::resolve(sources(
            &[("upstream", "ftp://h"), ("keys", "k")],
            &[],
            None,
        ))
        .unwrap_err();
        assert!(e.0.contains("http://"), "{e}");
        let e = ServeConfig::resolve(sources(
            &[("upstream", "http://h/v1"), ("keys", "k")],
            &[("CHATGATE_CLIENT_IDLE_TIMEOUT", "soon")],
            None,
        ))
        .unwrap_err();
        assert!(
            e.0.contains("CHATGATE_CLIENT_IDLE_TIMEOUT") && e.0.contains("duration"),
            "{e}"
        );
        let e = ServeConfig::resolve(sources(
            &[("upstream", "http://h/v1"), ("keys", "k")],
            &[],
            Some("lisen = 1"),
        ))
        .unwrap_err();
        assert!(e.0.contains("unknown setting 'lisen'"), "{e}");
        let e = ServeConfig::resolve(sources(
            &[
                ("upstream", "http://h/v1"),
                ("keys", "k"),
                ("default_rpm", "0"),
            ],
            &[],
            None,
        ))
        .unwrap_err();
        assert!(e.0.contains("positive"), "{e}");
    }

    #[test]
    fn models_from_the_file() {
        let file = "upstream = \"http://h/v1\"\nkeys = \"k\"\n[[model]]\nid = \"reasoning-model-k3\"\n[[model]]\nid = \"big\"\nupstream_id = \"provider-big\"\ninput_usd_per_million = 1.0\noutput_usd_per_million = 2.0\n";
        let c = ServeConfig::resolve(sources(&[], &[], Some(file))).unwrap();
        let cat = &c.gateway.catalog;
        assert_eq!(cat.models().len(), 2);
        assert_eq!(cat.get("reasoning-model-k3").unwrap().price, Price::DEFAULT);
        let big = cat.get("big").unwrap();
        assert_eq!(big.upstream_id.as_deref(), Some("provider-big"));
        assert_eq!(big.price.cost_nano(1_000_000, 1_000_000), 3_000_000_000);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_duration("30d"),
            Some(Duration::from_secs(30 * 86_400))
        );
        assert_eq!(parse_duration("1w"), None);
        assert_eq!(parse_duration("x"), None);
    }

    #[test]
    fn names() {
        assert_eq!(flag_name("upstream_ca"), "upstream-ca");
        assert_eq!(env_name("upstream_ca"), "CHATGATE_UPSTREAM_CA");
    }
}
