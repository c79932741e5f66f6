//! One table gives every setting its flag, environment variable,
//! config-file key and default; [`Resolver`] finds each one's value with
//! the precedence flag > environment > file > default.

use std::collections::HashMap;
use std::time::Duration;

use super::ConfigError;
use crate::catalog::DEFAULT_OWNER;

/// The environment variable holding the provider's API key (never a flag,
/// never in a file: argv is world-readable and files get committed).
pub(crate) const UPSTREAM_KEY_ENV: &str = "CHATGATE_UPSTREAM_API_KEY";

/// One setting of `serve` (and `demo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// Name in the config file; the flag is `--` + this with `-` for `_`,
    /// the environment variable `CHATGATE_` + this in upper case.
    pub key: &'static str,
    /// Placeholder for the value in help output.
    pub value: &'static str,
    /// Default, if any.
    pub default: Option<&'static str>,
    /// One line of help.
    pub help: &'static str,
}

const fn s(
    key: &'static str,
    value: &'static str,
    default: Option<&'static str>,
    help: &'static str,
) -> Setting {
    Setting {
        key,
        value,
        default,
        help,
    }
}

/// Every setting of `serve`.
pub const SERVE_SETTINGS: &[Setting] = &[
    s(
        "listen",
        "ADDR",
        Some("127.0.0.1:8080"),
        "Address to listen on",
    ),
    s(
        "admin_listen",
        "ADDR",
        None,
        "Address of the admin listener (/metrics, /healthz, /readyz); off unless set, never the public port",
    ),
    s(
        "tls_cert",
        "PEM",
        None,
        "Serve TLS (HTTPS) on the public listener with this certificate chain, server certificate first (with tls_key; read again when the files change and on SIGHUP; off: plain HTTP, for a TLS-terminating load balancer in front)",
    ),
    s(
        "tls_key",
        "PEM",
        None,
        "The private key of tls_cert (PEM: PKCS#8, PKCS#1 or SEC1)",
    ),
    s(
        "admin_tls_cert",
        "PEM",
        None,
        "Serve TLS on the admin listener with this certificate chain (with admin_tls_key; read again when the files change and on SIGHUP)",
    ),
    s(
        "admin_tls_key",
        "PEM",
        None,
        "The private key of admin_tls_cert",
    ),
    s(
        "admin_client_ca",
        "PEM",
        None,
        "Ask admin clients for a certificate signed by one of these CAs, and refuse those without one (needs admin_tls_cert)",
    ),
    s(
        "admin_token_env",
        "NAME",
        None,
        "Environment variable holding the admin token that opens the console on the admin listener (at least 16 characters); the console is off unless set",
    ),
    s(
        "sso_issuer",
        "URL",
        None,
        "Single sign-on to the console with this OpenID Connect provider (its issuer URL); needs sso_client_id, sso_client_secret_env and sso_allowed or sso_admins",
    ),
    s(
        "sso_client_id",
        "ID",
        None,
        "This gateway's client id at the OpenID provider",
    ),
    s(
        "sso_client_secret_env",
        "NAME",
        None,
        "Environment variable holding the client secret at the OpenID provider",
    ),
    s(
        "sso_allowed",
        "LIST",
        None,
        "Who may sign in and look: e-mail addresses and @domains, comma-separated",
    ),
    s(
        "sso_admins",
        "LIST",
        None,
        "Who may sign in and change keys: e-mail addresses and @domains, comma-separated",
    ),
    s(
        "sso_redirect_url",
        "URL",
        None,
        "The callback URL registered at the provider (default: http://HOST/sso/callback, HOST as the browser asked for the admin listener)",
    ),
    s(
        "sso_login_timeout",
        "DURATION",
        Some("10m"),
        "How long a sign-in may take at the provider",
    ),
    s(
        "ledger_postgres",
        "URL",
        None,
        "Also ship every ledger line to this PostgreSQL (postgres://user:password@host:port/db); the local ledger is the spool",
    ),
    s(
        "redis",
        "URL",
        None,
        "Share rate limits with other instances through this Redis (redis:// or rediss://); off unless set",
    ),
    s(
        "redis_sentinels",
        "LIST",
        None,
        "Share rate limits through the Redis primary these Sentinels watch (HOST:PORT,… or redis[s]://[[user]:password@]HOST:PORT,…[/db]); with --redis-sentinel-master",
    ),
    s(
        "redis_sentinel_master",
        "NAME",
        None,
        "The name the Sentinels monitor the primary under",
    ),
    s(
        "redis_cluster",
        "LIST",
        None,
        "Share rate limits through this Redis Cluster, reached first through these nodes (HOST:PORT,… or redis[s]://[[user]:password@]HOST:PORT,…)",
    ),
    s(
        "redis_fallback",
        "MODE",
        Some("fail-open"),
        "When Redis is unreachable: fail-open (this instance's own limits, logged and counted) or fail-closed (503)",
    ),
    s(
        "redis_timeout",
        "DURATION",
        Some("1s"),
        "Longest wait for a Redis answer before the fallback applies",
    ),
    s(
        "upstream",
        "URL",
        None,
        "Provider base URL including its version prefix, e.g. https://api.provider.example/v1 (one endpoint; [[upstream]] tables in the config file give several)",
    ),
    s(
        "upstream_attempts",
        "N",
        Some("3"),
        "Most attempts for a request before the client gets anything: endpoints not yet tried first, then the best one again after a short pause",
    ),
    s(
        "upstream_probe_interval",
        "DURATION",
        Some("5s"),
        "How often an ejected provider endpoint is probed (GET {upstream}/models); an answer readmits it (0: never probe)",
    ),
    s(
        "stream_error_event",
        "BOOL",
        Some("false"),
        "End a stream cut without finish_reason with a data: {\"error\": ...} event before [DONE], so SDKs raise instead of returning a truncated answer",
    ),
    s(
        "stream_resume",
        "BOOL",
        Some("on"),
        "Finish a stream cut mid-answer (reset, stall, invalid event, end without finish_reason) on an endpoint whose [[upstream]] table sets continuation, spliced into the same client stream; off keeps the cut stream's ending exactly",
    ),
    s(
        "stream_resume_attempts",
        "N",
        Some("1"),
        "Most continuations of one cut stream",
    ),
    s(
        "apis",
        "LIST",
        Some("chat"),
        "Client APIs to serve, comma-separated: chat (always on), responses (POST /v1/responses, for Codex CLI and the OpenAI SDKs), messages (POST /v1/messages, for Claude Code and the Anthropic SDKs), gemini (POST /v1beta/models/{model}:generateContent and :streamGenerateContent, for Gemini CLI and the Google Gen AI SDKs)",
    ),
    s(
        "responses_store",
        "WHERE",
        None,
        "Where the Responses API keeps responses (store, previous_response_id, item_reference, background): a file (default: chatgate-responses.redb beside the ledger), postgres://user:password@host:port/db (shared by a fleet), or off (stateless: those are refused)",
    ),
    s(
        "responses_ttl",
        "DURATION",
        Some("30d"),
        "How long a kept response is kept after the last response that continued its conversation",
    ),
    s(
        "responses_max_bytes",
        "BYTES",
        Some("16777216"),
        "Largest response kept (its input and output); a request whose input alone is larger is refused",
    ),
    s(
        "responses_key_max_bytes",
        "BYTES",
        Some("1073741824"),
        "Most bytes of responses kept for one key; a key at its cap is refused 'store': true until responses expire or are deleted",
    ),
    s(
        "reasoning_replay",
        "MODE",
        Some("strip"),
        "How a model's reasoning goes back to its provider in later turns, for models whose [[model]] table sets none: strip (the specification: never), tool_calls (assistant messages with tool calls keep theirs: DeepSeek, Kimi), all",
    ),
    s(
        "reasoning_field",
        "NAME",
        Some("reasoning_content"),
        "The member providers read replayed reasoning from, for endpoints whose [[upstream]] table sets none: reasoning_content (DeepSeek, Kimi, GLM, llama.cpp) or reasoning (vLLM)",
    ),
    s(
        "reasoning_memory_ttl",
        "DURATION",
        Some("1h"),
        "How long the reasoning of an answer with tool calls is remembered for clients that drop it (with reasoning_replay on)",
    ),
    s(
        "reasoning_memory_entries",
        "N",
        Some("100000"),
        "Most tool calls whose reasoning is remembered at once (per instance)",
    ),
    s(
        "reasoning_memory_bytes",
        "BYTES",
        Some("268435456"),
        "Most bytes of remembered reasoning (per instance)",
    ),
    s(
        "signing_secret_env",
        "NAME",
        None,
        "Environment variable holding the secret (32 characters or more, the same on every instance) that signs thinking blocks and seals reasoning items; without it each process makes its own at start",
    ),
    s(
        "prompt_overhead_tokens",
        "N",
        Some("64"),
        "Prompt tokens added to every estimate for what the provider adds (its chat template) until its reports show more",
    ),
    s(
        "upstream_ca",
        "PEM",
        None,
        "Extra CA certificate(s) to trust for an https upstream and a rediss:// Redis (PEM file)",
    ),
    s(
        "upstream_continuation",
        "MODE",
        Some("none"),
        "How the --upstream endpoint continues a final assistant message, for --stream-resume: none, prefix (DeepSeek's beta base, Mistral), partial (Kimi), continue_final_message (vLLM, SGLang), final_assistant (llama.cpp, Ollama); [[upstream]] tables set their own continuation",
    ),
    s(
        "keys",
        "FILE|URL",
        None,
        "Client keys: a keys file (TOML, written by `keys new`), or a postgres:// URL (keys every instance shares)",
    ),
    s(
        "ledger",
        "FILE",
        Some("chatgate-ledger.jsonl"),
        "Usage ledger (JSON lines, appended)",
    ),
    s(
        "log_level",
        "LEVEL",
        Some("info"),
        "Log level: error, warn, info, debug, trace",
    ),
    s(
        "log_format",
        "FORMAT",
        Some("text"),
        "Log format: text or json",
    ),
    s(
        "max_connections",
        "N",
        Some("10000"),
        "Most open client connections; more get 503",
    ),
    s(
        "worker_threads",
        "N",
        None,
        "Threads that serve connections [default: one per core]",
    ),
    s(
        "reuse_port",
        "BOOL",
        Some("off"),
        "Share the listen port with other chatgate processes that set it too (SO_REUSEPORT; the kernel spreads connections over them): one --worker-threads 1 instance per core, or a restart with no refused connection",
    ),
    s(
        "default_rpm",
        "N",
        Some("60"),
        "Requests per minute for keys that set none",
    ),
    s(
        "default_tpm",
        "N",
        Some("100000"),
        "Tokens per minute for keys that set none",
    ),
    s(
        "default_budget_usd",
        "USD",
        None,
        "Spend budget for keys that set none (default: no budget)",
    ),
    s(
        "default_budget_period",
        "PERIOD",
        Some("month"),
        "Period of a budget that names none: day, week (ISO, from Monday), month or total (UTC)",
    ),
    s(
        "budget_reserve_tokens",
        "N",
        Some("8192"),
        "Output tokens a budget reserves for a request without max_tokens",
    ),
    s(
        "default_max_in_flight",
        "N",
        None,
        "Most requests open at once for keys that set none (default: no cap)",
    ),
    s(
        "queue_timeout",
        "DURATION",
        Some("0s"),
        "How long a request over its key's in-flight cap waits for a slot, first in first out (0: refused at once)",
    ),
    s(
        "otlp_endpoint",
        "URL",
        None,
        "Send traces (OTLP/HTTP, protobuf) to this collector: a base URL, /v1/traces is appended (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, or OTEL_EXPORTER_OTLP_ENDPOINT; no tracing without one)",
    ),
    s(
        "otlp_headers",
        "K=V,...",
        None,
        "Headers for every export, values %-encoded (default: OTEL_EXPORTER_OTLP_TRACES_HEADERS or OTEL_EXPORTER_OTLP_HEADERS)",
    ),
    s(
        "otlp_timeout",
        "DURATION",
        None,
        "Longest an export may take (default: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT or OTEL_EXPORTER_OTLP_TIMEOUT, in ms; else 10s)",
    ),
    s(
        "service_name",
        "NAME",
        None,
        "service.name of the traces (default: OTEL_SERVICE_NAME, else chatgate)",
    ),
    s(
        "traces_sampler",
        "NAME",
        None,
        "always_on, always_off, traceidratio or parentbased_… of these (default: OTEL_TRACES_SAMPLER, else parentbased_always_on)",
    ),
    s(
        "traces_sampler_arg",
        "RATIO",
        None,
        "The ratio of the traceidratio samplers, 0 to 1 (default: OTEL_TRACES_SAMPLER_ARG, else 1)",
    ),
    s(
        "client_idle_timeout",
        "DURATION",
        Some("75s"),
        "Idle keep-alive connection lifetime",
    ),
    s(
        "client_header_timeout",
        "DURATION",
        Some("15s"),
        "Time allowed to send a request head",
    ),
    s(
        "client_body_timeout",
        "DURATION",
        Some("60s"),
        "Longest pause while sending a request body",
    ),
    s(
        "client_send_timeout",
        "DURATION",
        Some("60s"),
        "Longest time a client may leave response bytes unread",
    ),
    s(
        "upstream_connect_timeout",
        "DURATION",
        Some("10s"),
        "Connecting to the provider (TCP and TLS)",
    ),
    s(
        "upstream_first_byte_timeout",
        "DURATION",
        Some("600s"),
        "Waiting for the provider's response head; attempts on other endpoints start only within it",
    ),
    s(
        "upstream_attempt_timeout",
        "DURATION",
        None,
        "One attempt's wait for the provider's first byte for the client (response head; first event of a stream) before the next endpoint is tried (default: the first-byte timeout)",
    ),
    s(
        "first_event_keepalive",
        "DURATION",
        Some("off"),
        "After this long without a stream's first event from the provider, send the 200 and keep the stream alive (SSE comments; the Messages API's ping) every 15 s until it comes: for load balancers that cut silent connections. A failure before the first event then ends the stream with an error event instead of a JSON error",
    ),
    s(
        "upstream_idle_timeout",
        "DURATION",
        Some("300s"),
        "Longest pause in the provider's response",
    ),
    s(
        "stream_tail_timeout",
        "DURATION",
        Some("30s"),
        "After finish_reason, time for the provider to end the stream",
    ),
    s(
        "drain_timeout",
        "DURATION",
        Some("30s"),
        "On SIGTERM/SIGINT, time for in-flight requests to finish",
    ),
    s(
        "pool_max_idle",
        "N",
        Some("256"),
        "Idle provider connections kept for reuse",
    ),
    s(
        "pool_idle_timeout",
        "DURATION",
        Some("30s"),
        "How long an idle provider connection is kept",
    ),
    s(
        "max_sse_event",
        "BYTES",
        Some("1048576"),
        "Largest server-sent event accepted from the provider",
    ),
    s(
        "max_upstream_body",
        "BYTES",
        Some("67108864"),
        "Largest non-streamed answer accepted from the provider",
    ),
    s(
        "owned_by",
        "LABEL",
        Some(DEFAULT_OWNER),
        "owned_by label of the default model",
    ),
];

/// `--flag-name` of a setting.
pub fn flag_name(key: &str) -> String {
    key.replace('_', "-")
}

/// `CHATGATE_ENV_NAME` of a setting.
pub fn env_name(key: &str) -> String {
    format!("CHATGATE_{}", key.to_ascii_uppercase())
}

/// Where a resolved value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A command-line flag.
    Flag,
    /// An environment variable.
    Env,
    /// The config file.
    File,
    /// The built-in default.
    Default,
}

/// The inputs of resolution.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// Flags given, by setting key.
    pub flags: HashMap<String, String>,
    /// The process environment: `CHATGATE_*`, and the variables
    /// `[[upstream]]` tables name for their keys.
    pub env: HashMap<String, String>,
    /// The config file's text, if one was given.
    pub file: Option<String>,
}

/// Every setting's value from the flags, the environment and the file.
pub(super) struct Resolver {
    pub(super) flags: HashMap<String, String>,
    pub(super) env: HashMap<String, String>,
    pub(super) file: toml::Table,
}

impl Resolver {
    pub(super) fn get(&self, key: &str) -> Option<(String, Source)> {
        if let Some(v) = self.flags.get(key) {
            return Some((v.clone(), Source::Flag));
        }
        if let Some(v) = self.env.get(&env_name(key)) {
            return Some((v.clone(), Source::Env));
        }
        if let Some(v) = self.file.get(key) {
            let text = match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            return Some((text, Source::File));
        }
        let setting = SERVE_SETTINGS.iter().find(|s| s.key == key)?;
        setting.default.map(|d| (d.to_owned(), Source::Default))
    }

    pub(super) fn required(&self, key: &str, what_to_do: &str) -> Result<String, ConfigError> {
        self.get(key).map(|(v, _)| v).ok_or_else(|| {
            ConfigError(format!(
                "no {key} configured: {what_to_do} (--{} or {} or '{key}' in the config file)",
                flag_name(key),
                env_name(key)
            ))
        })
    }

    pub(super) fn string(&self, key: &str) -> String {
        self.get(key).map(|(v, _)| v).unwrap_or_default()
    }

    pub(super) fn parse<T: std::str::FromStr>(&self, key: &str) -> Result<T, ConfigError> {
        let (v, src) = self
            .get(key)
            .ok_or_else(|| ConfigError(format!("{key} is not set")))?;
        v.trim()
            .parse()
            .map_err(|_| bad(key, &v, src, "a whole number"))
    }

    pub(super) fn duration(&self, key: &str) -> Result<Duration, ConfigError> {
        let (v, src) = self
            .get(key)
            .ok_or_else(|| ConfigError(format!("{key} is not set")))?;
        parse_duration(&v).ok_or_else(|| {
            bad(
                key,
                &v,
                src,
                "a duration such as 500ms, 30s, 10m, 1h or 30d",
            )
        })
    }
}

pub(super) fn bad(key: &str, value: &str, src: Source, expected: &str) -> ConfigError {
    let from = match src {
        Source::Flag => format!("--{}", flag_name(key)),
        Source::Env => env_name(key),
        Source::File => format!("'{key}' in the config file"),
        Source::Default => "the default".to_owned(),
    };
    ConfigError(format!(
        "{from} = '{value}' is not valid: expected {expected}"
    ))
}

/// `500ms`, `30s`, `10m`, `1h`, `30d`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60)?),
        "h" => Duration::from_secs(n.checked_mul(3600)?),
        "d" => Duration::from_secs(n.checked_mul(86_400)?),
        _ => return None,
    })
}
