//! The gateway's configuration: its provider, timeouts, limits on what
//! clients and the provider may send, the catalogue, and whether rate
//! limits are shared.

use crate::routes::Apis;
use std::time::Duration;

use super::{EndpointConfig, Target};
use crate::auth::KeyDefaults;
use crate::catalog::Catalog;
use crate::http::HttpLimits;
use crate::limits::Limits;
use crate::quota::{Period, Quota};
use crate::reasoning::{MemoryLimits, ReasoningField, ReplayMode};

/// Every timeout the gateway applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Idle keep-alive connection, waiting for a request's first byte.
    pub client_idle: Duration,
    /// From a request's first byte to the end of its head (slowloris).
    pub client_header: Duration,
    /// Longest pause while receiving a request body.
    pub client_body: Duration,
    /// Longest time a client may leave sent data unread.
    pub client_send: Duration,
    /// Connecting to the provider (TCP and TLS).
    pub upstream_connect: Duration,
    /// From sending the request to the provider's response head; attempts
    /// on other endpoints start only within it, counted from the first.
    pub upstream_first_byte: Duration,
    /// One attempt's wait for the first byte for the client (the response
    /// head; the first event of a stream), when shorter than
    /// `upstream_first_byte`: then the next endpoint is tried.
    pub upstream_attempt: Option<Duration>,
    /// A stream without its provider's first event this long is committed
    /// and kept alive with keep-alives until it comes (`None`: off).
    pub first_event_keepalive: Option<Duration>,
    /// Longest pause in the provider's response body or stream.
    pub upstream_idle: Duration,
    /// After `finish_reason`, how long the provider may take to end the stream.
    pub stream_tail: Duration,
    /// On shutdown, how long in-flight requests may take to finish.
    pub drain: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            client_idle: Duration::from_secs(75),
            client_header: Duration::from_secs(15),
            client_body: Duration::from_secs(60),
            client_send: Duration::from_secs(60),
            upstream_connect: Duration::from_secs(10),
            upstream_first_byte: Duration::from_secs(600),
            upstream_attempt: None,
            first_event_keepalive: None,
            upstream_idle: Duration::from_secs(300),
            stream_tail: Duration::from_secs(30),
            drain: Duration::from_secs(30),
        }
    }
}

/// Attempts per request by default, whatever the number of endpoints: a
/// deployment with one endpoint (most of them) gets two more tries of a
/// transient failure (a 5xx, a reset, a 429) before its client sees it,
/// each after a short pause; a set of three endpoints tries each once.
pub(super) const DEFAULT_ATTEMPTS: usize = 3;
/// How often an ejected endpoint is probed by default.
pub(super) const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// The prompt allowance before anything is learned: a chat template's
/// system prompt and role markers (SmolLM2's default system prompt is
/// about 30 tokens; Llama 3's date header about 25).
pub(super) const DEFAULT_PROMPT_OVERHEAD: u64 = 64;

/// What the Responses API's store keeps (`--responses-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsesKeeping {
    /// How long a response is kept after the last response that continued
    /// its conversation.
    pub ttl: Duration,
    /// Largest response kept, bytes.
    pub max_bytes: u64,
    /// Most bytes kept for one key.
    pub key_max_bytes: u64,
}

impl Default for ResponsesKeeping {
    fn default() -> Self {
        ResponsesKeeping {
            ttl: Duration::from_secs(30 * 86_400),
            max_bytes: 16 << 20,
            key_max_bytes: 1 << 30,
        }
    }
}

/// Where the Responses API's store is (`--responses-store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponsesStoreAt {
    /// An embedded file.
    File(String),
    /// A PostgreSQL database, shared by a fleet.
    Postgres(String),
}

/// The gateway's configuration (everything but keys).
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The provider endpoints (at least one).
    pub endpoints: Vec<EndpointConfig>,
    /// Most attempts for one request (0: three, `DEFAULT_ATTEMPTS`), on
    /// endpoints it has not tried first, then on the best one again.
    pub upstream_attempts: usize,
    /// How often an ejected endpoint is probed (zero: never; it then comes
    /// back only through a trial request).
    pub probe_interval: Duration,
    /// `--stream-error-event`: a stream cut without `finish_reason` gets a
    /// `data: {"error": …}` event before its `[DONE]`.
    pub stream_error_event: bool,
    /// `--stream-resume`: a stream cut mid-answer is finished on an
    /// endpoint that continues (`continuation` on `[[upstream]]`).
    pub stream_resume: bool,
    /// `--stream-resume-attempts`: most continuations of one request.
    pub stream_resume_attempts: u32,
    /// The client-facing APIs served beside chat completions (`--apis`).
    pub apis: Apis,
    /// The Responses API keeps responses (`--responses-store` not `off`,
    /// with `--apis responses`): how long and how much.
    pub responses_kept: Option<ResponsesKeeping>,
    /// Prompt tokens a request's reservation adds to its estimate before
    /// the providers' reports say how many more they count (the chat
    /// template): the start of every endpoint's learned allowance.
    pub prompt_overhead_tokens: u64,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Limits on client requests (head 64 KiB, 64 headers, body 2 MiB).
    pub http: HttpLimits,
    /// Largest SSE event accepted from the provider.
    pub max_sse_event: usize,
    /// Largest non-streamed response accepted from the provider.
    pub max_upstream_body: u64,
    /// Limits of keys that set none.
    pub default_limits: Limits,
    /// Budget and in-flight cap of keys that set none.
    pub default_quota: Quota,
    /// Period of a budget that names none.
    pub default_budget_period: Period,
    /// Output tokens a budget reserves for a request without `max_tokens`.
    pub budget_reserve_tokens: u64,
    /// How long a request over its key's in-flight cap waits (zero: it is
    /// refused at once).
    pub queue_timeout: Duration,
    /// Most open client connections; more get 503.
    pub max_connections: usize,
    /// The models.
    pub catalog: Catalog,
    /// Limits shared through a remote store (Redis), if configured.
    pub shared_limits: Option<SharedLimits>,
    /// Tracing, when a collector is configured.
    pub trace: Option<crate::trace::TraceSettings>,
    /// The admin token that opens the console (`--admin-token-env`); the
    /// console is off without one.
    pub console_token: Option<super::Secret>,
    /// The variable the admin token is in: the audit trail's `token:NAME`.
    pub console_token_name: String,
    /// Single sign-on to the console, when configured.
    pub sso: Option<crate::console::SsoConfig>,
    /// How reasoning survives the tool loop.
    pub reasoning: ReasoningConfig,
}

/// How reasoning survives the tool loop (`crate::reasoning`).
#[derive(Debug, Clone, Default)]
pub struct ReasoningConfig {
    /// The replay of models whose `[[model]]` table sets none.
    pub replay: ReplayMode,
    /// The field of endpoints whose `[[upstream]]` table sets none.
    pub field: ReasoningField,
    /// The memory's bounds.
    pub memory: MemoryLimits,
    /// The deployment secret that signs and seals reasoning (`None`: the
    /// runtime makes one at start; without one, the gateway derives its
    /// keys from its random seed, which only tests rely on).
    pub secret: Option<super::Secret>,
    /// The variable the secret came from, for the start-up line.
    pub secret_env: Option<String>,
}

impl ReasoningConfig {
    /// Whether any model of `catalog` replays reasoning: with the default
    /// strip and no model of its own mind, a request needs no look at its
    /// models.
    #[inline(always)]
    pub fn any_replays(&self, catalog: &crate::catalog::Catalog) -> bool {
        self.replay.replays() || catalog.sets_replay()
    }

    /// The replay of `model`.
    pub fn replay_of(&self, model: &crate::catalog::Model) -> ReplayMode {
        model.reasoning_replay.unwrap_or(self.replay)
    }

    /// The field of `endpoint`.
    pub fn field_of(&self, endpoint: &super::EndpointConfig) -> ReasoningField {
        endpoint.reasoning_field.unwrap_or(self.field)
    }
}

/// Rate limits decided by a store shared by several gateway instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedLimits {
    /// When the store cannot be reached: refuse with 503 (`true`), or fall
    /// back to this process's own limiter, logged and counted (`false`).
    pub fail_closed: bool,
}

impl GatewayConfig {
    /// Defaults around one upstream (an endpoint named `default`).
    pub fn new(upstream: Target) -> Self {
        Self::with_endpoints(vec![EndpointConfig::single(upstream, None)])
    }

    /// Defaults around a set of endpoints.
    pub fn with_endpoints(endpoints: Vec<EndpointConfig>) -> Self {
        GatewayConfig {
            endpoints,
            upstream_attempts: 0,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            stream_error_event: false,
            stream_resume: true,
            stream_resume_attempts: 1,
            apis: Apis::default(),
            responses_kept: None,
            prompt_overhead_tokens: DEFAULT_PROMPT_OVERHEAD,
            timeouts: Timeouts::default(),
            http: HttpLimits::default(),
            max_sse_event: 1 << 20,
            max_upstream_body: 64 << 20,
            default_limits: Limits::default(),
            default_quota: Quota::default(),
            default_budget_period: Period::Month,
            budget_reserve_tokens: crate::quota::DEFAULT_RESERVE_TOKENS,
            queue_timeout: Duration::ZERO,
            max_connections: 10_000,
            catalog: Catalog::default(),
            shared_limits: None,
            trace: None,
            console_token: None,
            console_token_name: "admin".into(),
            sso: None,
            reasoning: ReasoningConfig::default(),
        }
    }

    /// What keys that set none of their limits get.
    pub fn key_defaults(&self) -> KeyDefaults {
        KeyDefaults {
            limits: self.default_limits,
            quota: self.default_quota,
            budget_period: self.default_budget_period,
        }
    }

    /// Most attempts for one request.
    pub fn max_attempts(&self) -> usize {
        match self.upstream_attempts {
            0 => DEFAULT_ATTEMPTS,
            n => n,
        }
    }
}
