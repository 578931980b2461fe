//! weft's configuration: defaults → TOML file → `WEFT_<SECTION>__<KEY>` env → CLI flags, later
//! winning. Unknown keys are errors; [`Config::validate`] explains; [`Secret`]s are redacted.

mod cli;
mod secret;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub use cli::{CommonArgs, Overrides};
pub use secret::Secret;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config: {0}")]
    Load(#[from] Box<figment::Error>),
    #[error("config file {0} does not exist; pass an existing file or none to use the defaults")]
    MissingFile(PathBuf),
    #[error("config: {0}")]
    Invalid(String),
}

/// The whole fleet's configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub gateway: GatewayConfig,
    pub router: RouterConfig,
    pub database: DatabaseConfig,
    pub auth: AuthConfig,
    pub telemetry: TelemetryConfig,
    pub bootstrap: BootstrapConfig,
    pub redis: RedisConfig,
    pub nats: NatsConfig,
    pub substrate: SubstrateConfig,
    pub executor: ExecutorConfig,
    pub mcp_bridge: McpBridgeConfig,
    pub mcp: McpServerFaceConfig,
    pub ingress: IngressConfig,
}

/// The ingress: the schedule ticker and the webhook receiver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngressConfig {
    /// Whether `weft up` runs the scheduler (false when separate `weft-ingress` processes fire).
    pub embedded: bool,
    /// Where `weft-ingress` serves the webhook receiver and `/healthz` (`weft up`: the gateway).
    pub listen: SocketAddr,
    /// The substrate's gRPC URL (definitions, memory, channels); ignored by `weft up`.
    pub substrate_url: String,
    /// How often each replica looks for due schedules, in milliseconds.
    pub tick_ms: u64,
    /// Schedules claimed per transaction.
    pub claim_batch: u32,
    /// Slots one schedule may fire per tick (the rest follow on the next tick).
    pub max_fires_per_tick: u32,
    /// A slot at most this late (ms) always fires; older ones follow the schedule's `catch_up_max`.
    pub misfire_grace_ms: u64,
    /// A claimed fire with no run after this long (ms) is taken over by another replica.
    pub reclaim_after_ms: u64,
    /// Attempts to make a fire's run before it is recorded as failed.
    pub max_fire_attempts: u32,
    /// Runs made at once by one replica.
    pub dispatch_concurrency: usize,
    /// How often stale claims and finished runs' `on_complete` actions are looked for (ms).
    pub sweep_ms: u64,
    /// Accepted webhook delivery ids are remembered (replays answered) for this many days.
    pub delivery_retention_days: u32,
    /// Verdicts kept per webhook for `GET /v1/webhooks/{name}/deliveries`.
    pub triage_keep: u32,
    /// Required prefix of a webhook's `secret_env` (a tenant cannot name other secrets).
    pub secret_env_prefix: String,
    /// The longest a substrate call may take, in seconds.
    pub request_timeout_secs: u64,
}

impl Default for IngressConfig {
    fn default() -> Self {
        Self {
            embedded: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 8791)),
            substrate_url: "http://127.0.0.1:8789".into(),
            tick_ms: 250,
            claim_batch: 64,
            max_fires_per_tick: 10,
            misfire_grace_ms: 5_000,
            reclaim_after_ms: 5_000,
            max_fire_attempts: 10,
            dispatch_concurrency: 32,
            sweep_ms: 1_000,
            delivery_retention_days: 7,
            triage_keep: 50,
            secret_env_prefix: "WEFT_WEBHOOK_".into(),
            request_timeout_secs: 10,
        }
    }
}

/// The MCP bridge's client side: the session pool that mounts external MCP servers into runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpBridgeConfig {
    /// Address of the bridge's gRPC server (`weft mcp-bridge`); `weft up` wires it in-process.
    pub listen: SocketAddr,
    /// The substrate's gRPC URL (server definitions); ignored by `weft up`.
    pub substrate_url: String,
    /// Longest one tool call may take, ms (a definition's `timeout_ms` may only lower it).
    pub call_timeout_ms: u64,
    /// How long connecting and listing tools may take, ms, retries included.
    pub connect_timeout_ms: u64,
    /// The largest tool result handed back, in bytes; longer results are cut with a note.
    pub max_result_bytes: usize,
    /// Sessions open at once across tenants and servers; least recently used closed beyond it.
    pub max_sessions: usize,
    pub idle_timeout_ms: u64,
    /// CIDRs a tenant-defined `http` server may resolve to although private or loopback.
    pub private_exempt: Vec<String>,
}

impl Default for McpBridgeConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8790)),
            substrate_url: "http://127.0.0.1:8789".into(),
            call_timeout_ms: 60_000,
            connect_timeout_ms: 15_000,
            max_result_bytes: 256 * 1024,
            max_sessions: 1024,
            idle_timeout_ms: 300_000,
            private_exempt: Vec::new(),
        }
    }
}

/// weft's own MCP server face, at `<gateway>/mcp`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerFaceConfig {
    pub enabled: bool,
    /// `Host` values accepted (DNS-rebinding guard); empty = any. Default: loopback names only.
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin`s accepted; empty = the gateway's own. A request without `Origin` passes.
    pub allowed_origins: Vec<String>,
    /// How long a 2025-11-25 session is kept in the database after it was opened, in seconds.
    pub session_ttl_secs: u64,
    /// Live sessions per principal per replica; an `initialize` past it is a 429.
    pub max_sessions_per_principal: usize,
    /// Live sessions per replica across principals; an `initialize` past it is a 429.
    pub max_sessions: usize,
    /// A session unused for this long ends on its replica, in seconds.
    pub session_idle_secs: u64,
}

impl Default for McpServerFaceConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            allowed_origins: Vec::new(),
            session_ttl_secs: 24 * 3600,
            max_sessions_per_principal: 16,
            max_sessions: 1024,
            session_idle_secs: 300,
        }
    }
}

/// The substrate: versioned definitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubstrateConfig {
    pub listen: SocketAddr,
    /// A folder of `<name>.md` agent definitions (front matter + prompt) loaded at boot.
    pub agents_dir: Option<PathBuf>,
    /// Agent definitions given inline, by name, with the same fields as the front matter.
    pub agents: BTreeMap<String, serde_json::Value>,
    /// The tenant that boot-loaded definitions belong to.
    pub boot_tenant: String,
    /// A folder of skills (`<name>/SKILL.md` plus text files) loaded at boot.
    pub skills_dir: Option<PathBuf>,
    /// The router's gRPC URL, for memory embeddings; ignored by `weft up`.
    pub router_url: String,
    /// Model (or alias) for memory embeddings; changing it drops older vectors from search.
    pub embedding_model: String,
    /// Bytes (keys + values) of memory one tenant may hold.
    pub memory_tenant_quota_bytes: u64,
    /// Bytes of memory the writes of one agent may hold (writes that name an agent).
    pub memory_agent_quota_bytes: u64,
    /// How often expired memory entries are deleted, ms (reads never return them).
    pub memory_sweep_interval_ms: u64,
    /// Channels created (or updated) in `boot_tenant` at start, by name.
    pub channels: BTreeMap<String, ChannelDecl>,
    /// Long-polls one substrate holds at once; more are answered 503 with `Retry-After`.
    pub max_channel_waiters: usize,
    /// MCP servers loaded at boot into `boot_tenant`; the only place for a `stdio` server.
    pub mcp_servers: BTreeMap<String, serde_json::Value>,
    /// Schedules loaded at boot into `boot_tenant` (fields of `PUT /v1/schedules/{name}`).
    pub schedules: BTreeMap<String, serde_json::Value>,
    /// Webhooks loaded at boot into `boot_tenant` (fields of `PUT /v1/webhooks/{name}`).
    pub webhooks: BTreeMap<String, serde_json::Value>,
}

/// A channel declared in the config (`substrate.channels.<name>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelDecl {
    /// `agent`, `user` or `tenant`.
    pub scope: String,
    /// Message lifetime; default one day.
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// Messages kept per partition; default 1000.
    #[serde(default)]
    pub max_messages: Option<u64>,
}

impl Default for SubstrateConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8789)),
            agents_dir: None,
            agents: BTreeMap::new(),
            boot_tenant: "default".into(),
            skills_dir: None,
            router_url: "http://127.0.0.1:8788".into(),
            embedding_model: "default".into(),
            memory_tenant_quota_bytes: 256 * 1024 * 1024,
            memory_agent_quota_bytes: 32 * 1024 * 1024,
            memory_sweep_interval_ms: 30_000,
            channels: BTreeMap::new(),
            max_channel_waiters: 10_000,
            mcp_servers: BTreeMap::new(),
            schedules: BTreeMap::new(),
            webhooks: BTreeMap::new(),
        }
    }
}

/// The run-executor pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecutorConfig {
    /// Whether `weft up` runs an executor (false when separate `weft-executor` processes do).
    pub embedded: bool,
    /// With `embedded`: hand new runs to this executor in memory and stream their events from
    /// memory (docs/runs.md, "The in-process fast path"). False: everything through JetStream.
    pub local_fast_path: bool,
    /// The router's gRPC URL; ignored by `weft up`, which wires it in-process.
    pub router_url: String,
    /// The substrate's gRPC URL; ignored by `weft up`.
    pub substrate_url: String,
    /// The MCP bridge's gRPC URL; ignored by `weft up`.
    pub mcp_bridge_url: String,
    /// Where the standalone executor serves Prometheus `/metrics`; unset = nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Lease lifetime without a heartbeat, ms; also JetStream's ack wait.
    pub lease_ttl_ms: u64,
    /// How often a held lease is renewed, in milliseconds; well under `lease_ttl_ms`.
    pub heartbeat_ms: u64,
    /// Runs one executor process works on at once.
    pub max_concurrent_runs: usize,
    /// Tool calls of one model turn run at once.
    pub max_parallel_tools: usize,
    /// How long a model turn holds its `provider_chosen` and the last read-only tool result to
    /// commit them with its message, ms; a longer or streaming turn commits them first. 0 = never.
    pub step_hold_ms: u64,
    /// Deepest sub-run nesting allowed (a top-level run has depth 0).
    pub max_depth: u32,
    /// Deliveries of a dispatch message, and executor losses of a run, before it is given up.
    pub max_deliver: i64,
    /// How often this executor looks for runs nothing is working on, in milliseconds.
    pub sweep_interval_ms: u64,
    /// How long a run may sit queued or under a lapsed lease before re-dispatch, ms (doubling).
    pub sweep_after_ms: u64,
    /// Outbound host allowlist for the HTTP tool (`*.example.com`: subdomains); empty = none.
    pub allowed_hosts: Vec<String>,
    /// Largest HTTP tool response body kept, in bytes.
    pub http_max_bytes: usize,
    pub http_timeout_ms: u64,
    /// CIDRs the HTTP tool may reach although non-public; the host allowlist still applies.
    pub http_private_exempt: Vec<String>,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            embedded: true,
            local_fast_path: true,
            router_url: "http://127.0.0.1:8788".into(),
            substrate_url: "http://127.0.0.1:8789".into(),
            mcp_bridge_url: "http://127.0.0.1:8790".into(),
            metrics_listen: None,
            lease_ttl_ms: 15_000,
            heartbeat_ms: 3_000,
            max_concurrent_runs: 256,
            max_parallel_tools: 8,
            step_hold_ms: 50,
            max_depth: 4,
            max_deliver: 20,
            sweep_interval_ms: 5_000,
            sweep_after_ms: 30_000,
            allowed_hosts: Vec::new(),
            http_max_bytes: 1024 * 1024,
            http_timeout_ms: 10_000,
            http_private_exempt: Vec::new(),
        }
    }
}

/// Redis: cancel flags, fairness leases, quotas (used by later services; `weft doctor` checks it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    pub url: Secret,
    /// Prefix of every key and channel, so fleets (and tests) can share one Redis.
    pub prefix: String,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: Secret::new("redis://127.0.0.1:6379"),
            prefix: "weft".into(),
        }
    }
}

/// NATS with JetStream: run dispatch and live events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    pub url: String,
    /// Prefix of every subject, stream and consumer name (fleets and tests share a server).
    pub prefix: String,
}

impl Default for NatsConfig {
    fn default() -> Self {
        Self {
            url: "nats://127.0.0.1:4222".into(),
            prefix: "weft".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    /// The router's gRPC URL; ignored by `weft up`, which wires the router in-process.
    pub router_url: String,
    pub max_body_bytes: usize,
    /// How long a resolved token stays cached. Revocation takes effect within this; at most 1000.
    pub token_cache_ttl_ms: u64,
    /// Deadline for one router call, in seconds.
    pub request_timeout_secs: u64,
    /// The substrate's gRPC URL; ignored by `weft up`, which wires it in-process.
    pub substrate_url: String,
    /// Runs one tenant may have queued or running, sub-runs included; more get 429.
    pub tenant_max_concurrent_runs: u32,
    /// How long an admission slot lasts without being renewed by the executor, in seconds.
    pub admission_lease_secs: u64,
    /// Run streams one principal may hold open per gateway replica; more get 429.
    pub max_streams_per_principal: u32,
    /// Lifetime of a web UI session, in seconds (it also ends with its token).
    pub ui_session_ttl_secs: u64,
    /// Always mark the UI session cookie `Secure` (behind a proxy without `X-Forwarded-Proto`).
    pub ui_cookie_secure: bool,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            router_url: "http://127.0.0.1:8788".into(),
            max_body_bytes: 4 * 1024 * 1024,
            token_cache_ttl_ms: 1000,
            request_timeout_secs: 600,
            substrate_url: "http://127.0.0.1:8789".into(),
            tenant_max_concurrent_runs: 1000,
            admission_lease_secs: 600,
            max_streams_per_principal: 64,
            ui_session_ttl_secs: 12 * 3600,
            ui_cookie_secure: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterConfig {
    pub listen: SocketAddr,
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Alias → ordered candidates (`provider/model`); later candidates are fallbacks.
    pub aliases: BTreeMap<String, Vec<String>>,
    /// Tier name → ordered candidates, addressed as `tier:<name>` or `x-weft-tier`.
    pub tiers: BTreeMap<String, Vec<String>>,
    /// Where the standalone `weft-router` serves `/metrics`; under `weft up`, the gateway's.
    pub metrics_listen: Option<SocketAddr>,
    /// Per-tenant overlays: aliases and tiers that replace global ones, and limits.
    pub tenants: BTreeMap<String, TenantRouting>,
    /// Default limits for every tenant, subject and token (Redis-enforced).
    pub limits: Limits,
    /// Price table, keyed `provider/model`, in USD per million tokens.
    pub prices: BTreeMap<String, Price>,
    /// Seconds a (provider, model) is skipped after a retryable failure; 0 disables it.
    pub cooldown_secs: u64,
    /// Directory of usage records JetStream has not stored yet, appended before a call's end
    /// reaches its caller, replayed by any router sharing it; empty = none (lost if NATS is down).
    pub usage_spool_dir: PathBuf,
}

/// One tenant's routing overlay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantRouting {
    pub aliases: BTreeMap<String, Vec<String>>,
    pub tiers: BTreeMap<String, Vec<String>>,
    /// Replaces `router.limits.tenant` for this tenant (unset fields fall back to it).
    pub limits: Option<LimitSpec>,
}

/// Limits at three levels; each applies separately to every caller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub tenant: LimitSpec,
    /// For each subject (tenant + subject).
    pub subject: LimitSpec,
    pub token: LimitSpec,
    /// `max_tokens` sent (and reserved) for a call without one while a token budget applies.
    pub output_reservation: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            tenant: LimitSpec::default(),
            subject: LimitSpec::default(),
            token: LimitSpec::default(),
            output_reservation: 1024,
        }
    }
}

impl Limits {
    /// Whether any limit is configured anywhere (else no Redis call is made per request).
    pub fn any(&self) -> bool {
        !(self.tenant.is_empty() && self.subject.is_empty() && self.token.is_empty())
    }
}

/// Requests and tokens per window; unset = unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSpec {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub tokens_per_day: Option<u64>,
}

impl LimitSpec {
    pub fn is_empty(&self) -> bool {
        self.requests_per_minute.is_none()
            && self.tokens_per_minute.is_none()
            && self.tokens_per_day.is_none()
    }

    /// This spec with unset fields taken from `base`.
    #[must_use]
    pub fn or(self, base: Self) -> Self {
        Self {
            requests_per_minute: self.requests_per_minute.or(base.requests_per_minute),
            tokens_per_minute: self.tokens_per_minute.or(base.tokens_per_minute),
            tokens_per_day: self.tokens_per_day.or(base.tokens_per_day),
        }
    }
}

/// What one model costs, in USD per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cached input read; defaults to `input` when unset.
    pub cache_read: Option<f64>,
    /// Cached input written; defaults to `input` when unset.
    pub cache_write: Option<f64>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        let mut providers = BTreeMap::new();
        providers.insert(
            "mock".to_owned(),
            ProviderConfig::Mock(MockProviderConfig::default()),
        );
        let mut aliases = BTreeMap::new();
        aliases.insert("default".to_owned(), vec!["mock/mock-1".to_owned()]);
        let mut tiers = BTreeMap::new();
        tiers.insert("fast".to_owned(), vec!["mock/mock-1".to_owned()]);
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8788)),
            providers,
            aliases,
            tiers,
            metrics_listen: None,
            tenants: BTreeMap::new(),
            limits: Limits::default(),
            prices: BTreeMap::new(),
            cooldown_secs: 30,
            usage_spool_dir: PathBuf::from(".weft/usage-spool"),
        }
    }
}

/// One provider, tagged by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProviderConfig {
    /// The embedded deterministic provider; no key, no network.
    Mock(MockProviderConfig),
    /// Any OpenAI-compatible server (chat completions): OpenAI, vLLM, llama.cpp, LM Studio, Groq…
    Openai(HttpProviderConfig),
    /// Anthropic's Messages API (`{base_url}/v1/messages`).
    Anthropic(HttpProviderConfig),
    /// Google Gemini (`{base_url}/models/{model}:generateContent`).
    Gemini(HttpProviderConfig),
    /// DeepSeek: OpenAI-compatible plus `reasoning_content`.
    Deepseek(HttpProviderConfig),
    /// Ollama's native API (`{base_url}/api/chat`, NDJSON streaming).
    Ollama(HttpProviderConfig),
}

impl ProviderConfig {
    /// The model names this provider serves.
    pub fn models(&self) -> Vec<String> {
        match self {
            Self::Mock(m) => m.models.keys().cloned().collect(),
            _ => self.http().map(|h| h.models.clone()).unwrap_or_default(),
        }
    }

    /// The kind as written in config (`kind = "…"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Mock(_) => "mock",
            Self::Openai(_) => "openai",
            Self::Anthropic(_) => "anthropic",
            Self::Gemini(_) => "gemini",
            Self::Deepseek(_) => "deepseek",
            Self::Ollama(_) => "ollama",
        }
    }

    /// The HTTP settings of every kind but `mock`.
    pub fn http(&self) -> Option<&HttpProviderConfig> {
        match self {
            Self::Mock(_) => None,
            Self::Openai(h)
            | Self::Anthropic(h)
            | Self::Gemini(h)
            | Self::Deepseek(h)
            | Self::Ollama(h) => Some(h),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockProviderConfig {
    pub models: BTreeMap<String, MockModelConfig>,
}

impl Default for MockProviderConfig {
    fn default() -> Self {
        let mut models = BTreeMap::new();
        models.insert("mock-1".to_owned(), MockModelConfig::default());
        Self { models }
    }
}

/// How one mock model behaves. Deterministic for a given `seed` and call sequence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockModelConfig {
    /// Delay before the first event, in milliseconds.
    pub latency_ms: u64,
    /// Extra random delay up to this many milliseconds.
    pub jitter_ms: u64,
    /// Delay between streamed tokens, in milliseconds.
    pub token_delay_ms: u64,
    /// Reply with a fixed tool call when tools are offered and the last message is not a result.
    pub tool_calls: bool,
    /// The JSON arguments of that tool call.
    pub tool_arguments: String,
    /// Fraction of calls (0..=1) that fail with 429.
    pub error_rate_429: f64,
    /// Fraction of calls (0..=1) that fail with 500.
    pub error_rate_500: f64,
    pub seed: u64,
    pub embedding_dims: u32,
}

impl Default for MockModelConfig {
    fn default() -> Self {
        Self {
            latency_ms: 0,
            jitter_ms: 0,
            token_delay_ms: 0,
            tool_calls: true,
            tool_arguments: "{}".into(),
            error_rate_429: 0.0,
            error_rate_500: 0.0,
            seed: 1,
            embedding_dims: 16,
        }
    }
}

/// The settings of an HTTP provider. The name is kept for the `openai` kind, the first one.
pub type OpenAiProviderConfig = HttpProviderConfig;

/// One HTTP provider of any kind. `base_url` follows each vendor's SDK: versioned for `openai`
/// and `gemini`, the host for `anthropic`, `deepseek` and `ollama`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpProviderConfig {
    /// Where the provider's API lives; see the type's documentation for each kind's convention.
    pub base_url: String,
    /// Name of the environment variable that holds the API key; unset for keyless servers.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Models served; requests name them as `model` or `<provider>/<model>`.
    #[serde(default)]
    pub models: Vec<String>,
    /// Retries on 429/5xx before the first byte, per candidate.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Base of the exponential backoff, in milliseconds.
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
    /// Longest `Retry-After` honoured before giving up on this candidate, in seconds.
    #[serde(default = "default_max_retry_after_secs")]
    pub max_retry_after_secs: u64,
    /// Time allowed until response headers arrive, in seconds.
    #[serde(default = "default_first_byte_timeout_secs")]
    pub first_byte_timeout_secs: u64,
    /// Most calls in flight to this provider fleet-wide (Redis); over it, fail over or 429.
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// `anthropic` only: `max_tokens` when the caller sets none. Default 4096.
    #[serde(default)]
    pub default_max_tokens: Option<u32>,
    /// `anthropic` only: the `anthropic-version` header. Default `2023-06-01`.
    #[serde(default)]
    pub api_version: Option<String>,
    /// `ollama` only: the context window (`options.num_ctx`) sent with every call.
    #[serde(default)]
    pub num_ctx: Option<u32>,
}

impl HttpProviderConfig {
    /// Settings for `base_url` with every other field at its default.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key_env: None,
            models: Vec::new(),
            max_retries: default_max_retries(),
            backoff_ms: default_backoff_ms(),
            max_retry_after_secs: default_max_retry_after_secs(),
            first_byte_timeout_secs: default_first_byte_timeout_secs(),
            max_concurrency: None,
            default_max_tokens: None,
            api_version: None,
            num_ctx: None,
        }
    }
}

fn default_max_retries() -> u32 {
    2
}
fn default_backoff_ms() -> u64 {
    200
}
fn default_max_retry_after_secs() -> u64 {
    10
}
fn default_first_byte_timeout_secs() -> u64 {
    60
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    pub url: Secret,
    pub max_connections: u32,
    pub migrate_on_start: bool,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: Secret::new("postgres://postgres@127.0.0.1:5432/weft"),
            max_connections: 16,
            migrate_on_start: true,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// HMAC key of internal JWTs; required for separate processes, random under `weft up`.
    pub internal_jwt_secret: Option<Secret>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `json` or `text`.
    pub log_format: LogFormat,
    /// An `EnvFilter` directive such as `info` or `weft_router=debug,info`.
    pub log_level: String,
    /// OTLP/gRPC endpoint for traces, e.g. `http://127.0.0.1:4317`; unset = no export.
    pub otlp_endpoint: Option<String>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log_format: LogFormat::Auto,
            log_level: "info".into(),
            otlp_endpoint: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Json,
    Text,
    /// Text when stderr is a terminal (a person is reading), JSON otherwise (a log pipeline).
    Auto,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BootstrapConfig {
    /// Where `weft up` keeps the bootstrap admin token it minted (mode 0600).
    pub token_file: PathBuf,
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        Self {
            token_file: PathBuf::from(".weft/admin-token"),
        }
    }
}

impl Config {
    /// Loads defaults → `file` → `WEFT_*__*` env → `overrides` (CLI flags), then validates.
    pub fn load(file: Option<&Path>, overrides: serde_json::Value) -> Result<Self, ConfigError> {
        Self::figment(file, overrides)?
            .extract::<Config>()
            .map_err(|e| ConfigError::Load(Box::new(e)))
            .and_then(|c| c.validate().map(|()| c))
    }

    fn figment(file: Option<&Path>, overrides: serde_json::Value) -> Result<Figment, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::MissingFile(path.to_owned()));
            }
            fig = fig.merge(Toml::file_exact(path));
        }
        // Only `WEFT_<SECTION>__<KEY>` is config; webhook secrets and CLI variables are not.
        fig = fig.merge(
            Env::prefixed("WEFT_")
                .filter(|k| {
                    k.as_str().contains("__")
                        && !k.as_str().to_ascii_uppercase().starts_with("WEBHOOK_")
                })
                .split("__"),
        );
        Ok(fig.merge(Serialized::defaults(overrides)))
    }

    /// The internal JWT key, which services running as separate processes must share.
    pub fn required_jwt_secret(&self, peer: &str) -> Result<&Secret, ConfigError> {
        self.auth.internal_jwt_secret.as_ref().ok_or_else(|| {
            ConfigError::Invalid(format!(
                "auth.internal_jwt_secret is not set; set WEFT_AUTH__INTERNAL_JWT_SECRET to the same value as the {peer}'s"
            ))
        })
    }

    /// Checks what types cannot: references between sections and ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.gateway.token_cache_ttl_ms > 1000 {
            return bad(format!(
                "gateway.token_cache_ttl_ms must be at most 1000 so revocation takes effect within 1 s, got {}",
                self.gateway.token_cache_ttl_ms
            ));
        }
        if self.gateway.max_body_bytes < 1024 {
            return bad(format!(
                "gateway.max_body_bytes must be at least 1024, got {}",
                self.gateway.max_body_bytes
            ));
        }
        let m = &self.mcp_bridge;
        for (field, v) in [
            ("call_timeout_ms", m.call_timeout_ms),
            ("connect_timeout_ms", m.connect_timeout_ms),
            ("idle_timeout_ms", m.idle_timeout_ms),
            ("max_result_bytes", m.max_result_bytes as u64),
            ("max_sessions", m.max_sessions as u64),
        ] {
            if v == 0 {
                return bad(format!("mcp_bridge.{field} must be at least 1, got 0"));
            }
        }
        if let Some(cidr) = m.private_exempt.iter().find(|c| !is_cidr(c)) {
            return bad(format!(
                "mcp_bridge.private_exempt: {cidr:?} is not a CIDR; write an address and a prefix length, like \"10.20.0.0/16\" or \"127.0.0.1/32\""
            ));
        }
        let e = &self.executor;
        if e.heartbeat_ms == 0 || e.heartbeat_ms.saturating_mul(2) > e.lease_ttl_ms {
            return bad(format!(
                "executor.heartbeat_ms must be positive and at most half of executor.lease_ttl_ms ({}), got {}",
                e.lease_ttl_ms, e.heartbeat_ms
            ));
        }
        for (field, v) in [
            ("max_concurrent_runs", e.max_concurrent_runs),
            ("max_parallel_tools", e.max_parallel_tools),
        ] {
            if v == 0 {
                return bad(format!("executor.{field} must be at least 1, got 0"));
            }
        }
        if e.max_deliver < 2 {
            return bad(format!(
                "executor.max_deliver must be at least 2 so a crashed executor's runs are redelivered, got {}",
                e.max_deliver
            ));
        }
        if e.sweep_interval_ms < 100 || e.sweep_after_ms < 1_000 {
            return bad(format!(
                "executor.sweep_interval_ms must be at least 100 and executor.sweep_after_ms at least 1000, got {} and {}",
                e.sweep_interval_ms, e.sweep_after_ms
            ));
        }
        if e.step_hold_ms > 10_000 {
            return bad(format!(
                "executor.step_hold_ms must be at most 10000 (a watcher learns the provider of a turn, or a tool's result, this late at worst), got {}",
                e.step_hold_ms
            ));
        }
        if let Some(cidr) = e.http_private_exempt.iter().find(|c| !is_cidr(c)) {
            return bad(format!(
                "executor.http_private_exempt: {cidr:?} is not a CIDR; write an address and a prefix length, like \"10.20.0.0/16\" or \"127.0.0.1/32\""
            ));
        }
        for (section, prefix) in [("nats", &self.nats.prefix), ("redis", &self.redis.prefix)] {
            if prefix.is_empty()
                || !prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return bad(format!(
                    "{section}.prefix must be non-empty letters, digits, '-' or '_', got {prefix:?}"
                ));
            }
        }
        let sb = &self.substrate;
        for (field, v) in [
            ("memory_tenant_quota_bytes", sb.memory_tenant_quota_bytes),
            ("memory_agent_quota_bytes", sb.memory_agent_quota_bytes),
            ("memory_sweep_interval_ms", sb.memory_sweep_interval_ms),
        ] {
            if v == 0 {
                return bad(format!("substrate.{field} must be at least 1, got 0"));
            }
        }
        if sb.embedding_model.trim().is_empty() {
            return bad(
                "substrate.embedding_model must name a model or alias of the router".into(),
            );
        }
        if self.substrate.max_channel_waiters == 0 {
            return bad("substrate.max_channel_waiters must be at least 1, got 0".into());
        }
        if self.mcp.max_sessions_per_principal == 0 || self.mcp.max_sessions == 0 {
            return bad(format!(
                "mcp.max_sessions_per_principal and mcp.max_sessions must be at least 1, got {} and {}",
                self.mcp.max_sessions_per_principal, self.mcp.max_sessions
            ));
        }
        if self.mcp.session_idle_secs == 0 {
            return bad("mcp.session_idle_secs must be at least 1, got 0".into());
        }
        if self.gateway.max_streams_per_principal == 0 {
            return bad("gateway.max_streams_per_principal must be at least 1, got 0".into());
        }
        if !(60..=30 * 86_400).contains(&self.gateway.ui_session_ttl_secs) {
            return bad(format!(
                "gateway.ui_session_ttl_secs must be between 60 and 2592000 (30 days), got {}",
                self.gateway.ui_session_ttl_secs
            ));
        }
        if self.gateway.tenant_max_concurrent_runs == 0 {
            return bad("gateway.tenant_max_concurrent_runs must be at least 1, got 0".into());
        }
        for (name, p) in &self.router.providers {
            if name.is_empty() || name.contains('/') || name.contains(':') {
                return bad(format!(
                    "router.providers.{name}: provider names must be non-empty and contain no '/' or ':'"
                ));
            }
            match p {
                ProviderConfig::Mock(m) => {
                    for (model, mc) in &m.models {
                        for (field, rate) in [
                            ("error_rate_429", mc.error_rate_429),
                            ("error_rate_500", mc.error_rate_500),
                        ] {
                            if !(0.0..=1.0).contains(&rate) {
                                return bad(format!(
                                    "router.providers.{name}.models.{model}.{field} must be between 0 and 1, got {rate}"
                                ));
                            }
                        }
                        if mc.error_rate_429 + mc.error_rate_500 > 1.0 {
                            return bad(format!(
                                "router.providers.{name}.models.{model}: error_rate_429 + error_rate_500 must be at most 1"
                            ));
                        }
                        if serde_json::from_str::<serde_json::Value>(&mc.tool_arguments).is_err() {
                            return bad(format!(
                                "router.providers.{name}.models.{model}.tool_arguments must be JSON text, got {:?}",
                                mc.tool_arguments
                            ));
                        }
                    }
                }
                _ => {
                    let kind = p.kind();
                    let Some(o) = p.http() else { continue };
                    if !(o.base_url.starts_with("http://") || o.base_url.starts_with("https://")) {
                        return bad(format!(
                            "router.providers.{name}.base_url must start with http:// or https://, got {:?}",
                            o.base_url
                        ));
                    }
                    for (field, set, owner) in [
                        (
                            "default_max_tokens",
                            o.default_max_tokens.is_some(),
                            "anthropic",
                        ),
                        ("api_version", o.api_version.is_some(), "anthropic"),
                        ("num_ctx", o.num_ctx.is_some(), "ollama"),
                    ] {
                        if set && kind != owner {
                            return bad(format!(
                                "router.providers.{name}.{field} applies to kind = \"{owner}\" only; this provider is kind = \"{kind}\""
                            ));
                        }
                    }
                    if o.max_concurrency == Some(0) {
                        return bad(format!(
                            "router.providers.{name}.max_concurrency must be at least 1; leave it unset for no cap"
                        ));
                    }
                }
            }
        }
        let mut sections: Vec<(String, &BTreeMap<String, Vec<String>>)> = vec![
            ("aliases".into(), &self.router.aliases),
            ("tiers".into(), &self.router.tiers),
        ];
        for (tenant, t) in &self.router.tenants {
            sections.push((format!("tenants.{tenant}.aliases"), &t.aliases));
            sections.push((format!("tenants.{tenant}.tiers"), &t.tiers));
        }
        for key in self.router.prices.keys() {
            if key
                .split_once('/')
                .is_none_or(|(p, _)| !self.router.providers.contains_key(p))
            {
                return bad(format!(
                    "router.prices.{key:?} must be `provider/model` with a configured provider"
                ));
            }
        }
        if self.router.limits.output_reservation == 0 {
            return bad("router.limits.output_reservation must be at least 1".into());
        }
        for (section, map) in sections {
            for (key, candidates) in map {
                if candidates.is_empty() {
                    return bad(format!(
                        "router.{section}.{key} has no candidates; list at least one `provider/model`"
                    ));
                }
                for c in candidates {
                    let Some((provider, model)) = c.split_once('/') else {
                        return bad(format!(
                            "router.{section}.{key}: candidate {c:?} must be `provider/model`"
                        ));
                    };
                    match self.router.providers.get(provider) {
                        None => {
                            return bad(format!(
                                "router.{section}.{key}: candidate {c:?} names provider `{provider}`, which is not configured"
                            ));
                        }
                        Some(ProviderConfig::Mock(m)) if !m.models.contains_key(model) => {
                            return bad(format!(
                                "router.{section}.{key}: mock provider `{provider}` has no model `{model}`"
                            ));
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether `s` is an IP address with a prefix length in range, as `ipnet` accepts.
fn is_cidr(s: &str) -> bool {
    let Some((addr, len)) = s.split_once('/') else {
        return false;
    };
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let Ok(len) = len.parse::<u8>() else {
        return false;
    };
    match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => len <= 32,
        Ok(std::net::IpAddr::V6(_)) => len <= 128,
        Err(_) => false,
    }
}

#[cfg(test)]
#[expect(
    clippy::result_large_err,
    reason = "figment's Jail API returns its own error type"
)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_use_the_mock() {
        let c = Config::default();
        c.validate().unwrap();
        assert!(matches!(
            c.router.providers["mock"],
            ProviderConfig::Mock(_)
        ));
    }

    #[test]
    fn http_private_exempt_entries_must_be_cidrs() {
        let mut c = Config::default();
        c.executor.http_private_exempt = vec!["127.0.0.1/32".into(), "fd00::/8".into()];
        c.validate().unwrap();
        for bad in [
            "127.0.0.1",
            "10.0.0.0/33",
            "::1/129",
            "example.com/8",
            "10.0.0.0/+8",
        ] {
            c.executor.http_private_exempt = vec![bad.into()];
            let err = c.validate().unwrap_err().to_string();
            assert!(
                err.contains("executor.http_private_exempt") && err.contains(bad),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn layers_apply_in_order() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "weft.toml",
                r#"
                [gateway]
                listen = "127.0.0.1:9000"
                max_body_bytes = 2048
                [router.providers.up]
                kind = "openai"
                base_url = "http://127.0.0.1:1/v1"
                models = ["m"]
                "#,
            )?;
            jail.set_env("WEFT_GATEWAY__MAX_BODY_BYTES", "4096");
            jail.set_env("WEFT_URL", "ignored: not section-qualified");
            jail.set_env("WEFT_WEBHOOK_ACME__GITHUB", "ignored: a webhook secret");
            let c = Config::load(
                Some(Path::new("weft.toml")),
                serde_json::json!({"gateway": {"listen": "127.0.0.1:9100"}}),
            )
            .map_err(|e| e.to_string())?;
            assert_eq!(c.gateway.listen.port(), 9100, "cli beats file");
            assert_eq!(c.gateway.max_body_bytes, 4096, "env beats file");
            assert!(c.router.providers.contains_key("up"));
            assert!(c.router.providers.contains_key("mock"), "defaults stay");
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_are_refused() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("weft.toml", "[gateway]\nlisten_addr = \"x\"\n")?;
            let err = Config::load(Some(Path::new("weft.toml")), serde_json::json!({}))
                .unwrap_err()
                .to_string();
            assert!(err.contains("listen_addr"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn validation_names_the_field() {
        let mut c = Config::default();
        c.router.aliases.insert("x".into(), vec!["nope/m".into()]);
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("router.aliases.x") && err.contains("nope"),
            "{err}"
        );
        let mut c = Config::default();
        c.gateway.token_cache_ttl_ms = 5000;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("token_cache_ttl_ms")
        );
    }

    #[test]
    fn secrets_are_redacted_in_debug() {
        let mut c = Config::default();
        c.auth.internal_jwt_secret = Some(Secret::new("hunter2"));
        c.database.url = Secret::new("postgres://u:pw@h/db");
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("hunter2") && !dbg.contains("pw@"), "{dbg}");
    }
}
