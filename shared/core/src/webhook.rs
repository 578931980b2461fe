//! A webhook definition (API.md, "Schedules and webhooks"): an endpoint,
//! `POST /v1/_webhooks/{tenant}/{name}`, that a third party calls without a bearer token. Each
//! definition says how a delivery proves where it came from ([`SignatureScheme`]: Standard
//! Webhooks, GitHub, Stripe, Slack or a bare hex HMAC), where the signing secret lives (the
//! *name* of an environment variable: the secret itself is never stored or hashed), and what a
//! verified delivery does — start a run of `agent` or publish to `channel`.
//!
//! [`Mapping`] picks the run's `input`, `user` and `metadata.*` out of the JSON payload with a
//! strict JSONPath subset ([`JsonPath`]: `$`, `.key`, `[n]`). Tenant, agent and model tier come
//! from the definition, never from the payload: a sender controls the payload, not where it runs.
//! Verification itself lives with the receiver (`weft-ingress`, `verify`).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::def::{DefContent, DefKind};
use crate::{Error, TenantId};

/// The largest body accepted when the definition does not say.
pub const DEFAULT_MAX_BODY_BYTES: u32 = 262_144;
/// How far a signed timestamp may be from the receiver's clock when the definition does not say
/// (the five minutes every scheme with a timestamp documents).
pub const DEFAULT_TOLERANCE_SECS: u32 = 300;
/// How long `?sync=true` waits for the run when the definition does not say.
pub const DEFAULT_SYNC_TIMEOUT_MS: u32 = 30_000;
/// The header carrying an `hmac-sha256` signature when the definition does not name one.
pub const DEFAULT_SIGNATURE_HEADER: &str = "x-signature";

/// Bounds enforced by [`WebhookContent::validate`] and [`JsonPath::parse`].
pub mod limits {
    pub const DESCRIPTION_BYTES: usize = 4096;
    /// `secret_env`: `[A-Z_][A-Z0-9_]{0,127}`.
    pub const SECRET_ENV_CHARS: usize = 128;
    pub const HEADER_NAME_CHARS: usize = 128;
    pub const MAX_BODY_BYTES: u32 = 1_048_576;
    pub const TOLERANCE_SECS: u32 = 3600;
    pub const SYNC_TIMEOUT_MS: u32 = 120_000;
    pub const PER_MINUTE: u32 = 600_000;
    pub const BURST: u32 = 100_000;
    /// Entries of `mapping`.
    pub const MAPPING_ENTRIES: usize = 32;
    /// The `<key>` of `metadata.<key>`: `[a-z0-9_-]{1,64}`.
    pub const METADATA_KEY_CHARS: usize = 64;
    /// A JSON path's text.
    pub const PATH_BYTES: usize = 512;
    /// `.key` and `[n]` steps of one path.
    pub const PATH_STEPS: usize = 32;
    /// The key of one `.key` step: `[A-Za-z0-9_-]{1,128}`.
    pub const PATH_KEY_CHARS: usize = 128;
    /// The largest `[n]`.
    pub const PATH_INDEX: usize = 1_000_000;
    /// A mapped `user`.
    pub const USER_BYTES: usize = 256;
}

/// The prefix of every secret variable `tenant`'s webhooks may name: the operator's `prefix`
/// (`ingress.secret_env_prefix`), the tenant upper-cased with `-` as `_`, and `__`
/// (`WEFT_WEBHOOK_ACME_EU__`). The mapping is one-to-one (tenants are `a-z 0-9 -`) and the name
/// after it may not hold `__` or start with `_`, so no name falls in two namespaces.
pub fn secret_namespace(prefix: &str, tenant: &TenantId) -> String {
    format!(
        "{prefix}{}__",
        tenant.as_str().to_ascii_uppercase().replace('-', "_")
    )
}

/// Checks that variable `env` lies in `tenant`'s secret namespace ([`secret_namespace`]); the
/// error (param `secret_env`) says how to name it.
pub fn check_secret_env(prefix: &str, tenant: &TenantId, env: &str) -> Result<(), Error> {
    if in_secret_namespace(prefix, tenant, env) {
        return Ok(());
    }
    let ns = secret_namespace(prefix, tenant);
    Err(bad(
        "secret_env",
        format!(
            "`secret_env` `{}` is outside your tenant's secret namespace: name it `{ns}<NAME>` (NAME of A-Z, 0-9 and '_', starting with a letter or digit, without `__`), e.g. `{ns}GITHUB`, and have the operator set that variable on every gateway and ingress process",
            env.escape_default()
        ),
    ))
}

/// Whether variable `env` lies in `tenant`'s secret namespace under `prefix`
/// ([`secret_namespace`]): the namespace, then a name of `A-Z 0-9 _` starting with a letter or
/// digit, without `__`. Hooks' secrets (`weft_core::hook`) follow the same rule under their own
/// prefix.
pub fn in_secret_namespace(prefix: &str, tenant: &TenantId, env: &str) -> bool {
    let ns = secret_namespace(prefix, tenant);
    env.strip_prefix(&ns).is_some_and(|r| {
        r.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && !r.contains("__")
            && is_env_name(env)
    })
}

/// How a delivery is signed. Every scheme is HMAC-SHA256 over the raw body (and, where the
/// scheme has them, an id and a timestamp); they differ in headers, encoding and key format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignatureScheme {
    /// <https://www.standardwebhooks.com>: `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature: v1,<base64> …`, over `{id}.{timestamp}.{body}`; the secret is
    /// `whsec_<base64 key>`.
    StandardWebhooks,
    /// `X-Hub-Signature-256: sha256=<hex>` over the body; no timestamp.
    Github,
    /// `Stripe-Signature: t=<unix>,v1=<hex>…` over `{t}.{body}`.
    Stripe,
    /// `X-Slack-Request-Timestamp` and `X-Slack-Signature: v0=<hex>` over `v0:{ts}:{body}`.
    Slack,
    /// A hex HMAC of the body in one header (`header`, default `x-signature`), optionally
    /// prefixed `sha256=`; no timestamp.
    #[default]
    HmacSha256,
}

impl SignatureScheme {
    /// Every scheme, in declaration order.
    pub const ALL: [SignatureScheme; 5] = [
        SignatureScheme::StandardWebhooks,
        SignatureScheme::Github,
        SignatureScheme::Stripe,
        SignatureScheme::Slack,
        SignatureScheme::HmacSha256,
    ];

    /// The JSON form: `standard-webhooks`, `github`, `stripe`, `slack`, `hmac-sha256`.
    pub fn as_str(self) -> &'static str {
        match self {
            SignatureScheme::StandardWebhooks => "standard-webhooks",
            SignatureScheme::Github => "github",
            SignatureScheme::Stripe => "stripe",
            SignatureScheme::Slack => "slack",
            SignatureScheme::HmacSha256 => "hmac-sha256",
        }
    }

    /// The header a sender of this scheme puts its delivery id in, if the scheme has one.
    pub fn delivery_id_header(self) -> Option<&'static str> {
        match self {
            SignatureScheme::StandardWebhooks => Some("webhook-id"),
            SignatureScheme::Github => Some("x-github-delivery"),
            SignatureScheme::Stripe | SignatureScheme::Slack | SignatureScheme::HmacSha256 => None,
        }
    }

    /// The header carrying the signature; for `hmac-sha256` the default one (a definition may
    /// name another, [`WebhookContent::effective_header`]).
    pub fn signature_header(self) -> &'static str {
        match self {
            SignatureScheme::StandardWebhooks => "webhook-signature",
            SignatureScheme::Github => "x-hub-signature-256",
            SignatureScheme::Stripe => "stripe-signature",
            SignatureScheme::Slack => "x-slack-signature",
            SignatureScheme::HmacSha256 => DEFAULT_SIGNATURE_HEADER,
        }
    }

    /// Whether the signature covers a timestamp, which is then checked against the receiver's
    /// clock (`tolerance_secs`).
    pub fn has_timestamp(self) -> bool {
        matches!(
            self,
            SignatureScheme::StandardWebhooks | SignatureScheme::Stripe | SignatureScheme::Slack
        )
    }
}

impl fmt::Display for SignatureScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many deliveries a webhook accepts, fleet-wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct WebhookRateLimit {
    /// Sustained deliveries per minute, 1..=600000.
    pub per_minute: u32,
    /// Deliveries accepted at once above the sustained rate, 1..=100000 (default: the
    /// receiver's choice).
    #[serde(default)]
    pub burst: Option<u32>,
}

// Read from a JSON object only, never from an array of its fields (`[600]`).
crate::objects_only!(WebhookRateLimit);

/// The content fields of a webhook definition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookContent {
    pub description: String,
    /// A disabled webhook answers every delivery as if it did not exist.
    pub enabled: bool,
    /// Start a run of this agent for each delivery. Exactly one of `agent` and `channel`.
    pub agent: Option<String>,
    /// Publish each delivery to this channel. Exactly one of `agent` and `channel`.
    pub channel: Option<String>,
    pub signature: SignatureScheme,
    /// The name of the environment variable (on the ingress hosts) holding the signing secret:
    /// `[A-Z_][A-Z0-9_]{0,127}`. Only the name is stored.
    pub secret_env: String,
    /// `hmac-sha256` only: the header carrying the hex signature (default `x-signature`).
    pub header: Option<String>,
    /// A header holding a delivery id, used to drop replays; overrides the scheme's own
    /// ([`SignatureScheme::delivery_id_header`]).
    pub delivery_id_header: Option<String>,
    /// `input`, `user` or `metadata.<key>` → a JSON path into the payload ([`Mapping`]).
    pub mapping: BTreeMap<String, String>,
    pub rate_limit: Option<WebhookRateLimit>,
    /// 1..=1048576; default [`DEFAULT_MAX_BODY_BYTES`].
    pub max_body_bytes: Option<u32>,
    /// Schemes with a timestamp only: 1..=3600; default [`DEFAULT_TOLERANCE_SECS`].
    pub tolerance_secs: Option<u32>,
    /// Whether a caller may ask `?sync=true` to wait for the run's result.
    pub allow_sync: bool,
    /// With `allow_sync` only: 1..=120000; default [`DEFAULT_SYNC_TIMEOUT_MS`].
    pub sync_timeout_ms: Option<u32>,
}

impl Default for WebhookContent {
    fn default() -> Self {
        Self {
            description: String::new(),
            enabled: true,
            agent: None,
            channel: None,
            signature: SignatureScheme::default(),
            secret_env: String::new(),
            header: None,
            delivery_id_header: None,
            mapping: BTreeMap::new(),
            rate_limit: None,
            max_body_bytes: None,
            tolerance_secs: None,
            allow_sync: false,
            sync_timeout_ms: None,
        }
    }
}

/// What a verified delivery does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookTarget<'a> {
    /// Start a run of this agent.
    Agent(&'a str),
    /// Publish to this channel.
    Channel(&'a str),
}

fn bad(param: impl Into<String>, message: impl Into<String>) -> Error {
    Error::invalid(message).with_param(param)
}

/// An HTTP header name: 1-128 token characters (any case; compared lowercased).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= limits::HEADER_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `[A-Z_][A-Z0-9_]{0,127}`.
fn is_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= limits::SECRET_ENV_CHARS
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

/// A channel name one may publish to: 1-128 characters of `A-Z a-z 0-9 _ - .` with dots
/// between non-empty segments, and not `await`. The same rule as the substrate's
/// `channels::rules::validate_name` (which this crate cannot call); the substrate checks again
/// when the webhook publishes.
fn is_channel_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name != "await"
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
        && name.split('.').all(|s| !s.is_empty())
}

fn check_range(field: &str, value: Option<u32>, max: u32) -> Result<(), Error> {
    match value {
        Some(v) if !(1..=max).contains(&v) => Err(bad(
            field,
            format!("`{field}` must be between 1 and {max}, got {v}"),
        )),
        _ => Ok(()),
    }
}

impl WebhookContent {
    /// Checks what types cannot; the error names the field and says how to fix it.
    pub fn validate(&self) -> Result<(), Error> {
        if self.description.len() > limits::DESCRIPTION_BYTES {
            return Err(bad(
                "description",
                format!(
                    "`description` is {} bytes; at most {} are allowed",
                    self.description.len(),
                    limits::DESCRIPTION_BYTES
                ),
            ));
        }
        self.validate_target()?;
        self.validate_secret_env()?;
        self.validate_headers()?;
        self.mapping()?;
        if let Some(rl) = self.rate_limit {
            check_range(
                "rate_limit.per_minute",
                Some(rl.per_minute),
                limits::PER_MINUTE,
            )?;
            check_range("rate_limit.burst", rl.burst, limits::BURST)?;
        }
        check_range(
            "max_body_bytes",
            self.max_body_bytes,
            limits::MAX_BODY_BYTES,
        )?;
        check_range(
            "tolerance_secs",
            self.tolerance_secs,
            limits::TOLERANCE_SECS,
        )?;
        if self.tolerance_secs.is_some() && !self.signature.has_timestamp() {
            return Err(bad(
                "tolerance_secs",
                format!(
                    "`tolerance_secs` applies only to schemes that sign a timestamp (standard-webhooks, stripe, slack); `{}` signatures carry none, so remove it",
                    self.signature
                ),
            ));
        }
        check_range(
            "sync_timeout_ms",
            self.sync_timeout_ms,
            limits::SYNC_TIMEOUT_MS,
        )?;
        if self.sync_timeout_ms.is_some() && !self.allow_sync {
            return Err(bad(
                "sync_timeout_ms",
                "`sync_timeout_ms` applies only when `allow_sync` is true; set `allow_sync: true` or remove `sync_timeout_ms`",
            ));
        }
        // A NUL anywhere (as for agents and skills; a definition from the config file does
        // not pass the gateway's check).
        crate::storable::refuse_nul(self)?;
        Ok(())
    }

    fn validate_target(&self) -> Result<(), Error> {
        match (self.agent.as_deref(), self.channel.as_deref()) {
            (Some(_), Some(_)) => Err(bad(
                "channel",
                "set either `agent` (start a run) or `channel` (publish a message), not both",
            )),
            (None, None) => Err(bad(
                "agent",
                "`agent` or `channel` is required: the agent to run, or the channel to publish to, for each delivery",
            )),
            (Some(agent), None) if !crate::agent::is_def_name(agent) => Err(bad(
                "agent",
                format!(
                    "`agent`: `{}` is not an agent name; use 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit",
                    agent.escape_default()
                ),
            )),
            (None, Some(channel)) if !is_channel_name(channel) => Err(bad(
                "channel",
                format!(
                    "`channel`: `{}` is not a channel name; use 1-128 characters of A-Z, a-z, 0-9, '_', '-' and '.', with dots between non-empty segments (`jobs.eu`), other than `await`",
                    channel.escape_default()
                ),
            )),
            _ => Ok(()),
        }
    }

    fn validate_secret_env(&self) -> Result<(), Error> {
        if self.secret_env.is_empty() {
            return Err(bad(
                "secret_env",
                "`secret_env` is required: the name of the environment variable holding the signing secret (e.g. `GITHUB_WEBHOOK_SECRET`)",
            ));
        }
        if !is_env_name(&self.secret_env) {
            return Err(bad(
                "secret_env",
                format!(
                    "`secret_env` must be the name of an environment variable, 1-{} characters of A-Z, 0-9 and '_' not starting with a digit (e.g. `GITHUB_WEBHOOK_SECRET`); put the secret itself in that variable, never in the definition",
                    limits::SECRET_ENV_CHARS
                ),
            ));
        }
        Ok(())
    }

    /// Checks that `secret_env` lies in `tenant`'s secret namespace under the operator's
    /// `prefix` ([`secret_namespace`]): a tenant can only name variables the operator set for
    /// it, never another tenant's secret or any other variable of the process.
    pub fn validate_secret_namespace(&self, prefix: &str, tenant: &TenantId) -> Result<(), Error> {
        check_secret_env(prefix, tenant, &self.secret_env)
    }

    fn validate_headers(&self) -> Result<(), Error> {
        if let Some(header) = self.header.as_deref() {
            if self.signature != SignatureScheme::HmacSha256 {
                return Err(bad(
                    "header",
                    format!(
                        "`header` applies only to `hmac-sha256`; `{}` signatures arrive in `{}`, so remove `header`",
                        self.signature,
                        self.signature.signature_header()
                    ),
                ));
            }
            if !is_header_name(header) {
                return Err(bad(
                    "header",
                    format!(
                        "`header`: `{}` is not an HTTP header name; use 1-{} letters, digits and `-` (e.g. `x-signature`)",
                        header.escape_default(),
                        limits::HEADER_NAME_CHARS
                    ),
                ));
            }
        }
        if let Some(header) = self.delivery_id_header.as_deref()
            && !is_header_name(header)
        {
            return Err(bad(
                "delivery_id_header",
                format!(
                    "`delivery_id_header`: `{}` is not an HTTP header name; use 1-{} letters, digits and `-` (e.g. `x-delivery-id`)",
                    header.escape_default(),
                    limits::HEADER_NAME_CHARS
                ),
            ));
        }
        Ok(())
    }

    /// What a verified delivery does, or `None` for content that does not validate.
    pub fn target(&self) -> Option<WebhookTarget<'_>> {
        match (self.agent.as_deref(), self.channel.as_deref()) {
            (Some(a), None) => Some(WebhookTarget::Agent(a)),
            (None, Some(c)) => Some(WebhookTarget::Channel(c)),
            _ => None,
        }
    }

    /// The header carrying the signature, lowercased: the scheme's own, or for `hmac-sha256`
    /// `header` (default `x-signature`).
    pub fn effective_header(&self) -> String {
        match (self.signature, self.header.as_deref()) {
            (SignatureScheme::HmacSha256, Some(h)) => h.to_ascii_lowercase(),
            (scheme, _) => scheme.signature_header().to_owned(),
        }
    }

    /// The header holding the delivery id, lowercased: `delivery_id_header`, else the
    /// scheme's own; `None` when neither names one (replays are then not recognised).
    pub fn effective_delivery_id_header(&self) -> Option<String> {
        match self.delivery_id_header.as_deref() {
            Some(h) => Some(h.to_ascii_lowercase()),
            None => self.signature.delivery_id_header().map(str::to_owned),
        }
    }

    /// `max_body_bytes` or [`DEFAULT_MAX_BODY_BYTES`].
    pub fn effective_max_body_bytes(&self) -> u32 {
        self.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES)
    }

    /// `tolerance_secs` or [`DEFAULT_TOLERANCE_SECS`].
    pub fn effective_tolerance_secs(&self) -> u32 {
        self.tolerance_secs.unwrap_or(DEFAULT_TOLERANCE_SECS)
    }

    /// `sync_timeout_ms` or [`DEFAULT_SYNC_TIMEOUT_MS`].
    pub fn effective_sync_timeout_ms(&self) -> u32 {
        self.sync_timeout_ms.unwrap_or(DEFAULT_SYNC_TIMEOUT_MS)
    }

    /// The parsed `mapping`, or an error naming the entry at fault.
    pub fn mapping(&self) -> Result<Mapping, Error> {
        Mapping::from_map(&self.mapping)
    }
}

impl DefContent for WebhookContent {
    const KIND: DefKind = DefKind::Webhook;

    fn from_json(value: Value) -> Result<Self, Error> {
        crate::def::from_json_fields("a webhook definition", value)
    }

    fn validate(&self) -> Result<(), Error> {
        WebhookContent::validate(self)
    }

    fn description(&self) -> &str {
        &self.description
    }
}

/// One step of a [`JsonPath`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathStep {
    /// `.key`: a member of an object.
    Key(String),
    /// `[n]`: an element of an array.
    Index(usize),
}

/// A strict JSONPath subset: `$` then `.key` (1-128 characters of `A-Za-z0-9_-`) and `[n]`
/// (decimal, no leading zero, at most 1000000) steps; at most 32 steps and 512 bytes. Nothing
/// else — no wildcards, quotes, filters or whitespace — so every path has one spelling, which
/// [`Display`](fmt::Display) gives back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JsonPath {
    steps: Vec<PathStep>,
}

const PATH_HINT: &str =
    "use `$` followed by `.key` and `[n]` steps only (e.g. `$.data.items[0].id`)";

impl JsonPath {
    /// Parses `text`; the error says what is wrong and where (it does not name the field).
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        if text.len() > limits::PATH_BYTES {
            return Err(format!(
                "the path is {} bytes; at most {} are allowed",
                text.len(),
                limits::PATH_BYTES
            ));
        }
        let b = text.as_bytes();
        if b.first() != Some(&b'$') {
            return Err(format!(
                "`{}` does not start with `$`; {PATH_HINT}",
                text.escape_default()
            ));
        }
        let mut steps = Vec::new();
        let mut i = 1;
        while i < b.len() {
            if steps.len() == limits::PATH_STEPS {
                return Err(format!(
                    "`{}` has more than {} steps",
                    text.escape_default(),
                    limits::PATH_STEPS
                ));
            }
            match b[i] {
                b'.' => {
                    let start = i + 1;
                    let len = b[start..]
                        .iter()
                        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'))
                        .count();
                    if len == 0 || len > limits::PATH_KEY_CHARS {
                        return Err(format!(
                            "`{}`: the key after byte {i} must be 1-{} characters of A-Z, a-z, 0-9, '_' and '-'; {PATH_HINT}",
                            text.escape_default(),
                            limits::PATH_KEY_CHARS
                        ));
                    }
                    // The key is ASCII, so these are character boundaries.
                    steps.push(PathStep::Key(text[start..start + len].to_owned()));
                    i = start + len;
                }
                b'[' => {
                    let start = i + 1;
                    let len = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
                    let digits = &text[start..start + len];
                    // 1-7 digits (the largest index is 1000000) and no leading zero.
                    let well_formed =
                        (1..=7).contains(&len) && (len == 1 || !digits.starts_with('0'));
                    let index = digits
                        .parse::<usize>()
                        .ok()
                        .filter(|n| well_formed && *n <= limits::PATH_INDEX);
                    let close = b.get(start + len) == Some(&b']');
                    let (Some(index), true) = (index, close) else {
                        return Err(format!(
                            "`{}`: the index at byte {i} must be `[n]` with n a whole number from 0 to {} without leading zeros; {PATH_HINT}",
                            text.escape_default(),
                            limits::PATH_INDEX
                        ));
                    };
                    steps.push(PathStep::Index(index));
                    i = start + len + 1;
                }
                _ => {
                    // `i` follows `$`, a key, or `]` (all ASCII), so it is a character boundary.
                    let found = text[i..].chars().next().unwrap_or_default();
                    return Err(format!(
                        "`{}`: unexpected `{}` at byte {i}; {PATH_HINT}",
                        text.escape_default(),
                        found.escape_default()
                    ));
                }
            }
        }
        Ok(JsonPath { steps })
    }

    /// The steps after `$`, in order.
    pub fn steps(&self) -> &[PathStep] {
        &self.steps
    }

    /// The value the path points at in `value`, if there is one: a `.key` step needs an object
    /// with that member, an `[n]` step an array with that many elements.
    pub fn get<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        self.steps.iter().try_fold(value, |v, step| match step {
            PathStep::Key(k) => v.as_object()?.get(k),
            PathStep::Index(n) => v.as_array()?.get(*n),
        })
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("$")?;
        for step in &self.steps {
            match step {
                PathStep::Key(k) => write!(f, ".{k}")?,
                PathStep::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for JsonPath {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JsonPath::parse(s)
    }
}

/// A webhook's `mapping`, parsed: where in the payload the run's fields come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    /// The run's input; unmapped, the whole payload (as compact JSON) is the input.
    pub input: Option<JsonPath>,
    /// The end user the run acts for.
    pub user: Option<JsonPath>,
    /// `metadata.<key>` entries of the run.
    pub metadata: BTreeMap<String, JsonPath>,
}

/// The run fields a [`Mapping`] took from one payload.
#[derive(Clone, Debug, PartialEq)]
pub struct Mapped {
    /// A JSON string as itself, anything else as compact JSON.
    pub input: String,
    /// A string as itself (an empty one as `None`), a number as its text; anything else, or
    /// nothing at the path, is `None`. At most 256 bytes.
    pub user: Option<String>,
    /// The mapped values as they are; a path matching nothing is left out.
    pub metadata: serde_json::Map<String, Value>,
}

const MAPPING_KEYS_HINT: &str =
    "use `input`, `user` or `metadata.<key>` (key: 1-64 characters of a-z, 0-9, '_' and '-')";

fn is_metadata_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= limits::METADATA_KEY_CHARS
        && key
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-'))
}

impl Mapping {
    /// Parses a definition's `mapping` (`input`, `user`, `metadata.<key>` → path); the error
    /// names the entry (`mapping.<key>`).
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Mapping, Error> {
        if map.len() > limits::MAPPING_ENTRIES {
            return Err(bad(
                "mapping",
                format!(
                    "`mapping` has {} entries; at most {}",
                    map.len(),
                    limits::MAPPING_ENTRIES
                ),
            ));
        }
        let mut out = Mapping::default();
        for (key, text) in map {
            let field = format!("mapping.{key}");
            let path = JsonPath::parse(text).map_err(|m| bad(&field, format!("`{field}`: {m}")));
            match key.as_str() {
                "input" => out.input = Some(path?),
                "user" => out.user = Some(path?),
                _ => match key.strip_prefix("metadata.") {
                    Some(k) if is_metadata_key(k) => {
                        out.metadata.insert(k.to_owned(), path?);
                    }
                    _ => {
                        return Err(bad(
                            &field,
                            format!(
                                "`{}` is not a mapping target; {MAPPING_KEYS_HINT}",
                                field.escape_default()
                            ),
                        ));
                    }
                },
            }
        }
        Ok(out)
    }

    /// The run fields for `payload`. The error (a 400 for the sender) names the entry that
    /// failed.
    pub fn apply(&self, payload: &Value) -> Result<Mapped, String> {
        let input = match &self.input {
            None => payload.to_string(),
            Some(path) => match path.get(payload) {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => {
                    return Err(format!(
                        "`mapping.input` ({path}) matched nothing in the payload"
                    ));
                }
            },
        };
        let user = match self.user.as_ref().and_then(|p| p.get(payload)) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        if let (Some(u), Some(path)) = (&user, &self.user)
            && u.len() > limits::USER_BYTES
        {
            return Err(format!(
                "`mapping.user` ({path}) is {} bytes; at most {} are allowed",
                u.len(),
                limits::USER_BYTES
            ));
        }
        let metadata = self
            .metadata
            .iter()
            .filter_map(|(k, path)| path.get(payload).map(|v| (k.clone(), v.clone())))
            .collect();
        Ok(Mapped {
            input,
            user,
            metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn content(v: Value) -> Result<WebhookContent, Error> {
        let c = WebhookContent::from_json(v)?;
        c.validate()?;
        Ok(c)
    }

    #[test]
    fn a_secret_variable_belongs_to_one_tenant_namespace_at_most() {
        let t = |s: &str| TenantId::parse(s).unwrap();
        let with = |env: &str| content(json!({"agent": "a", "secret_env": env})).unwrap();
        let in_ns = |env: &str, tenant: &str| {
            with(env)
                .validate_secret_namespace("WEFT_WEBHOOK_", &t(tenant))
                .is_ok()
        };
        assert_eq!(
            secret_namespace("WEFT_WEBHOOK_", &t("acme-eu")),
            "WEFT_WEBHOOK_ACME_EU__"
        );
        assert!(in_ns("WEFT_WEBHOOK_ACME__GITHUB", "acme"));
        assert!(in_ns("WEFT_WEBHOOK_ACME__GH_2", "acme"));
        // Another tenant's, another prefix's, or any other variable of the process.
        for env in [
            "WEFT_WEBHOOK_OTHER__X",
            "HOME",
            "WEFT_DATABASE__URL",
            "WEFT_WEBHOOK_ACME",
        ] {
            let e = with(env)
                .validate_secret_namespace("WEFT_WEBHOOK_", &t("acme"))
                .unwrap_err();
            assert_eq!(e.param.as_deref(), Some("secret_env"), "{env}");
            assert!(e.message.contains("WEFT_WEBHOOK_ACME__"), "{}", e.message);
        }
        // Names that would fall in two namespaces belong to the longer tenant only.
        assert!(!in_ns("WEFT_WEBHOOK_A___X", "a"));
        assert!(in_ns("WEFT_WEBHOOK_A___X", "a-"));
        assert!(!in_ns("WEFT_WEBHOOK_A__B__X", "a"));
        assert!(in_ns("WEFT_WEBHOOK_A__B__X", "a--b"));
        assert!(!in_ns("WEFT_WEBHOOK_ACME__", "acme"));
    }

    fn param(v: Value) -> String {
        let e = content(v).unwrap_err();
        assert!(!e.message.ends_with('.'), "{}", e.message);
        e.param.unwrap_or_default()
    }

    fn path(s: &str) -> JsonPath {
        JsonPath::parse(s).unwrap()
    }

    #[test]
    fn paths_parse_and_print_back_the_same_text() {
        for text in [
            "$",
            "$.a",
            "$.data.items[0].id",
            "$[0][12][1000000]",
            "$.A-b_9[3].x",
            "$.0",
        ] {
            let p = path(text);
            assert_eq!(p.to_string(), text);
            assert_eq!(JsonPath::parse(&p.to_string()).unwrap(), p);
        }
        assert_eq!(
            path("$.a[2]").steps(),
            [PathStep::Key("a".into()), PathStep::Index(2)]
        );
        let longest_key = format!("$.{}", "k".repeat(128));
        path(&longest_key);
        let most_steps = format!("${}", "[0]".repeat(32));
        path(&most_steps);
    }

    #[test]
    fn paths_outside_the_subset_are_refused() {
        for text in [
            "",
            "a",
            "$.",
            "$..a",
            "$.*",
            "$[*]",
            "$['a']",
            "$[\"a\"]",
            "$[?(@.a)]",
            "$.a b",
            " $.a",
            "$.a ",
            "$[]",
            "$[01]",
            "$[-1]",
            "$[1000001]",
            "$[99999999999999999999]",
            "$[1",
            "$[1.5]",
            "$.a.",
            "$a",
            "$.é",
            "$.a\u{0}",
            "$$",
        ] {
            let e = JsonPath::parse(text).unwrap_err();
            assert!(!e.is_empty() && !e.ends_with('.'), "{text:?}: {e}");
        }
        let e = JsonPath::parse(&format!("$.{}", "k".repeat(129))).unwrap_err();
        assert!(e.contains("1-128"), "{e}");
        let e = JsonPath::parse(&format!("${}", "[0]".repeat(33))).unwrap_err();
        assert!(e.contains("more than 32 steps"), "{e}");
        let e = JsonPath::parse(&format!("$.{}", "a.".repeat(300))).unwrap_err();
        assert!(e.contains("at most 512"), "{e}");
        let e = JsonPath::parse("$.a b").unwrap_err();
        assert!(e.contains("unexpected ` ` at byte 3"), "{e}");
        // A multi-byte character is named whole, not split.
        let e = JsonPath::parse("$.aé").unwrap_err();
        assert!(e.contains("unexpected `\\u{e9}`"), "{e}");
    }

    #[test]
    fn get_walks_objects_and_nested_arrays() {
        let doc = json!({"a": {"b": [[1, 2], [3, {"c": "x"}]]}, "n": null, "arr": []});
        assert_eq!(path("$").get(&doc), Some(&doc));
        assert_eq!(path("$.a.b[1][1].c").get(&doc), Some(&json!("x")));
        assert_eq!(path("$.a.b[0][1]").get(&doc), Some(&json!(2)));
        assert_eq!(path("$.n").get(&doc), Some(&Value::Null));
        assert_eq!(path("$.a.b[2]").get(&doc), None);
        assert_eq!(path("$.arr[0]").get(&doc), None);
        // A key step on an array and an index step on an object match nothing.
        assert_eq!(path("$.a.b.c").get(&doc), None);
        assert_eq!(path("$.a[0]").get(&doc), None);
        assert_eq!(path("$.missing.deeper").get(&doc), None);
    }

    fn mapping(entries: &[(&str, &str)]) -> Result<Mapping, Error> {
        Mapping::from_map(
            &entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn mappings_take_input_user_and_metadata_keys_only() {
        let m = mapping(&[
            ("input", "$.text"),
            ("user", "$.sender.id"),
            ("metadata.repo", "$.repository.full_name"),
        ])
        .unwrap();
        assert_eq!(m.input, Some(path("$.text")));
        assert_eq!(m.metadata["repo"], path("$.repository.full_name"));
        for key in [
            "agent",
            "tenant",
            "model",
            "metadata.",
            "metadata.Repo",
            "metadata",
        ] {
            let e = mapping(&[(key, "$.x")]).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(format!("mapping.{key}").as_str()));
            assert!(
                e.message.contains("`input`, `user` or `metadata.<key>`"),
                "{}",
                e.message
            );
        }
        let e = mapping(&[("metadata.x", "$.a[*]")]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("mapping.metadata.x"));
        assert!(
            e.message.starts_with("`mapping.metadata.x`: "),
            "{}",
            e.message
        );
        let long = format!("metadata.{}", "k".repeat(65));
        assert!(mapping(&[(&long, "$")]).is_err());
        let many: BTreeMap<String, String> = (0..33)
            .map(|i| (format!("metadata.k{i}"), "$".to_owned()))
            .collect();
        let e = Mapping::from_map(&many).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("mapping"));
    }

    #[test]
    fn apply_maps_input_user_and_metadata() {
        let payload = json!({
            "text": "hello", "obj": {"k": [1, 2]}, "uid": 42, "name": "ann",
            "flag": true, "empty": "", "repo": {"id": 7}
        });
        let m = mapping(&[
            ("input", "$.text"),
            ("user", "$.name"),
            ("metadata.repo", "$.repo"),
            ("metadata.missing", "$.nope"),
        ])
        .unwrap();
        let out = m.apply(&payload).unwrap();
        assert_eq!(out.input, "hello");
        assert_eq!(out.user.as_deref(), Some("ann"));
        assert_eq!(Value::Object(out.metadata), json!({"repo": {"id": 7}}));

        // Not a string: compact JSON.
        let out = mapping(&[("input", "$.obj")])
            .unwrap()
            .apply(&payload)
            .unwrap();
        assert_eq!(out.input, r#"{"k":[1,2]}"#);
        assert_eq!(out.user, None);
        // Unmapped: the whole payload.
        let out = Mapping::default().apply(&json!({"a": [1, "b"]})).unwrap();
        assert_eq!(out.input, r#"{"a":[1,"b"]}"#);
        // Mapped to nothing: an error naming the entry and its path.
        let e = mapping(&[("input", "$.x")])
            .unwrap()
            .apply(&payload)
            .unwrap_err();
        assert_eq!(e, "`mapping.input` ($.x) matched nothing in the payload");

        // user: a number as its text; a bool, an empty string or nothing is no user.
        let user = |p: &str| {
            mapping(&[("user", p)])
                .unwrap()
                .apply(&payload)
                .unwrap()
                .user
        };
        assert_eq!(user("$.uid").as_deref(), Some("42"));
        assert_eq!(user("$.flag"), None);
        assert_eq!(user("$.empty"), None);
        assert_eq!(user("$.nope"), None);
        let long = json!({"u": "u".repeat(257)});
        let e = mapping(&[("user", "$.u")])
            .unwrap()
            .apply(&long)
            .unwrap_err();
        assert!(e.contains("257 bytes"), "{e}");
        let fits = json!({"u": "u".repeat(256)});
        assert!(mapping(&[("user", "$.u")]).unwrap().apply(&fits).is_ok());
    }

    fn minimal() -> Value {
        json!({"agent": "triage", "secret_env": "GITHUB_WEBHOOK_SECRET", "signature": "github"})
    }

    fn with(changes: Value) -> Value {
        let mut v = minimal();
        if let (Some(o), Some(c)) = (v.as_object_mut(), changes.as_object()) {
            for (k, x) in c {
                if x.is_null() {
                    o.remove(k);
                } else {
                    o.insert(k.clone(), x.clone());
                }
            }
        }
        v
    }

    #[test]
    fn a_nul_in_the_description_is_refused() {
        assert_eq!(
            param(with(json!({"description": "a\u{0}b"}))),
            "description"
        );
    }

    #[test]
    fn a_minimal_definition_takes_the_defaults() {
        let c = content(minimal()).unwrap();
        assert!(c.enabled);
        assert_eq!(c.target(), Some(WebhookTarget::Agent("triage")));
        assert_eq!(c.effective_header(), "x-hub-signature-256");
        assert_eq!(
            c.effective_delivery_id_header().as_deref(),
            Some("x-github-delivery")
        );
        assert_eq!(c.effective_max_body_bytes(), DEFAULT_MAX_BODY_BYTES);
        assert_eq!(c.effective_tolerance_secs(), 300);
        assert_eq!(c.effective_sync_timeout_ms(), 30_000);
        assert_eq!(c.mapping().unwrap(), Mapping::default());
        assert_eq!(c.hash(), content(minimal()).unwrap().hash());

        let c = content(json!({"channel": "hooks.eu", "secret_env": "S"})).unwrap();
        assert_eq!(c.signature, SignatureScheme::HmacSha256);
        assert_eq!(c.target(), Some(WebhookTarget::Channel("hooks.eu")));
        assert_eq!(c.effective_header(), "x-signature");
        assert_eq!(c.effective_delivery_id_header(), None);
        let c = content(with(json!({
            "signature": "hmac-sha256", "header": "X-Acme-Signature",
            "delivery_id_header": "X-Acme-Delivery"
        })))
        .unwrap();
        assert_eq!(c.effective_header(), "x-acme-signature");
        assert_eq!(
            c.effective_delivery_id_header().as_deref(),
            Some("x-acme-delivery")
        );
        assert_eq!(DefContent::description(&c), "");
    }

    #[test]
    fn every_scheme_has_its_wire_name() {
        for scheme in SignatureScheme::ALL {
            let v = serde_json::to_value(scheme).unwrap();
            assert_eq!(v, json!(scheme.as_str()));
            assert_eq!(
                serde_json::from_value::<SignatureScheme>(v).unwrap(),
                scheme
            );
        }
        assert_eq!(
            SignatureScheme::StandardWebhooks.delivery_id_header(),
            Some("webhook-id")
        );
        assert_eq!(SignatureScheme::Stripe.delivery_id_header(), None);
        assert_eq!(param(with(json!({"signature": "sha1"}))), "signature");
    }

    #[test]
    fn exactly_one_of_agent_and_channel() {
        assert_eq!(param(with(json!({"agent": null}))), "agent");
        assert_eq!(param(with(json!({"channel": "x"}))), "channel");
        assert_eq!(param(with(json!({"agent": "Bad Name"}))), "agent");
        for channel in ["a..b", ".a", "a.", "await", "a*", "a b", ""] {
            assert_eq!(
                param(with(json!({"agent": null, "channel": channel}))),
                "channel",
                "{channel}"
            );
        }
    }

    #[test]
    fn the_secret_is_named_never_given() {
        assert_eq!(param(with(json!({"secret_env": null}))), "secret_env");
        for bad_name in ["whsec_abc", "1SECRET", "MY-SECRET", "lower", "A B"] {
            let e = content(with(json!({"secret_env": bad_name}))).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("secret_env"));
            assert!(
                e.message.contains("never in the definition"),
                "{}",
                e.message
            );
        }
        content(with(json!({"secret_env": "_X9"}))).unwrap();
        content(with(json!({"secret_env": "A".repeat(128)}))).unwrap();
        assert_eq!(
            param(with(json!({"secret_env": "A".repeat(129)}))),
            "secret_env"
        );
    }

    #[test]
    fn header_belongs_to_hmac_sha256_only() {
        let e = content(with(json!({"header": "x-sig"}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("header"));
        assert!(e.message.contains("`x-hub-signature-256`"), "{}", e.message);
        let e = content(with(json!({"signature": "stripe", "header": "x"}))).unwrap_err();
        assert!(e.message.contains("`stripe-signature`"), "{}", e.message);
        assert_eq!(
            param(with(json!({"signature": "hmac-sha256", "header": "x sig"}))),
            "header"
        );
        assert_eq!(
            param(with(json!({"signature": "hmac-sha256", "header": ""}))),
            "header"
        );
        assert_eq!(
            param(with(json!({"delivery_id_header": "bad:header"}))),
            "delivery_id_header"
        );
    }

    #[test]
    fn bounds_are_checked() {
        assert_eq!(
            param(with(json!({"rate_limit": {"per_minute": 0}}))),
            "rate_limit.per_minute"
        );
        assert_eq!(
            param(with(json!({"rate_limit": {"per_minute": 600_001}}))),
            "rate_limit.per_minute"
        );
        assert_eq!(
            param(with(json!({"rate_limit": {"per_minute": 60, "burst": 0}}))),
            "rate_limit.burst"
        );
        assert_eq!(
            param(with(json!({"rate_limit": {"per_minute": 60, "brust": 5}}))),
            "rate_limit.brust"
        );
        content(with(
            json!({"rate_limit": {"per_minute": 600_000, "burst": 100_000}}),
        ))
        .unwrap();
        assert_eq!(param(with(json!({"max_body_bytes": 0}))), "max_body_bytes");
        assert_eq!(
            param(with(json!({"max_body_bytes": 1_048_577}))),
            "max_body_bytes"
        );
        content(with(json!({"max_body_bytes": 1_048_576}))).unwrap();
        let e = content(with(json!({"max_body_bytes": 0}))).unwrap_err();
        assert_eq!(
            e.message,
            "`max_body_bytes` must be between 1 and 1048576, got 0"
        );
        assert_eq!(
            param(with(json!({"description": "d".repeat(4097)}))),
            "description"
        );
        assert_eq!(param(with(json!({"colour": "red"}))), "colour");
    }

    #[test]
    fn tolerance_needs_a_timestamp_and_sync_timeout_needs_sync() {
        let e = content(with(json!({"tolerance_secs": 60}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tolerance_secs"));
        assert!(
            e.message.contains("`github` signatures carry none"),
            "{}",
            e.message
        );
        let c = content(with(json!({"signature": "slack", "tolerance_secs": 60}))).unwrap();
        assert_eq!(c.effective_tolerance_secs(), 60);
        assert_eq!(
            param(with(json!({"signature": "stripe", "tolerance_secs": 3601}))),
            "tolerance_secs"
        );
        assert_eq!(
            param(with(json!({"sync_timeout_ms": 1000}))),
            "sync_timeout_ms"
        );
        assert_eq!(
            param(with(
                json!({"allow_sync": true, "sync_timeout_ms": 120_001})
            )),
            "sync_timeout_ms"
        );
        let c = content(with(json!({"allow_sync": true, "sync_timeout_ms": 5000}))).unwrap();
        assert_eq!(c.effective_sync_timeout_ms(), 5000);
    }

    #[test]
    fn validate_checks_the_mapping() {
        let e = content(with(json!({"mapping": {"tenant": "$.org"}}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("mapping.tenant"));
        let e = content(with(json!({"mapping": {"input": "$.a[01]"}}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("mapping.input"));
        let c = content(with(
            json!({"mapping": {"input": "$.a", "metadata.k": "$.b[0]"}}),
        ))
        .unwrap();
        assert_eq!(c.mapping().unwrap().metadata["k"], path("$.b[0]"));
    }

    #[test]
    fn a_webhook_is_a_definition_kind() {
        assert_eq!(WebhookContent::KIND.as_str(), "webhook");
        assert_eq!(WebhookContent::KIND.plural(), "webhooks");
        assert_eq!(DefKind::Schedule.as_str(), "schedule");
        assert_eq!(DefKind::Schedule.plural(), "schedules");
        let e = WebhookContent::from_json(json!([1])).unwrap_err();
        assert!(e.message.contains("a webhook definition"), "{}", e.message);
    }
}

#[cfg(test)]
mod object_form_tests {
    use super::*;

    #[test]
    fn rate_limits_are_objects_never_arrays() {
        let ok: WebhookRateLimit =
            serde_json::from_value(serde_json::json!({"per_minute": 60})).unwrap();
        assert_eq!(ok.per_minute, 60);
        assert!(serde_json::from_value::<WebhookRateLimit>(serde_json::json!([60])).is_err());
    }
}
