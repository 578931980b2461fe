//! `/v1/schedules…` and `/v1/webhooks…`: the eight definition routes of [`crate::defs`] over
//! [`ScheduleContent`] and [`WebhookContent`], a schedule's live state and its run-now, pause,
//! resume and delete, a webhook's delivery verdicts and dry run, and the signed webhook
//! receiver `POST /v1/_webhooks/{tenant}/{name}`.
//!
//! The content types mirror `weft_core::schedule` and `weft_core::webhook` (serde form,
//! defaults); weft-core keeps the validation, and a test there checks that both serialize the
//! same.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::common::{NextCursor, TenantName, Timestamp, Uuid};
use crate::defs::{DefContentSchema, DefName, all_required, def_ops};
use crate::op::Op;

const CHANNEL: &str = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$";
const HEADER_NAME: &str = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$";

/// What to do when a fire time comes while the run of the previous fire is still active.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Overlap {
    #[default]
    Allow,
    Skip,
}

/// The memory scope a `memory.set` action writes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum MemoryScope {
    #[default]
    Tenant,
    Agent,
    Run,
    User,
}

/// `channel.publish`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline, transform = crate::defs::string_const)]
pub enum ChannelPublishAction {
    #[default]
    #[serde(rename = "channel.publish")]
    ChannelPublish,
}

/// `memory.set`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline, transform = crate::defs::string_const)]
pub enum MemorySetAction {
    #[default]
    #[serde(rename = "memory.set")]
    MemorySet,
}

/// Publish the rendered `message` to `channel`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct ScheduleChannelPublish {
    pub action: ChannelPublishAction,
    /// a channel of the tenant (`await` is reserved)
    #[schemars(length(max = 128), regex(pattern = CHANNEL))]
    pub channel: String,
    /// the payload (a JSON string), a template: `{{run.final_text}}`, `{{run.id}}`, `{{run.status}}`, `{{schedule.name}}` and `{{fire.at}}` are replaced; any other `{{…}}` is refused
    #[schemars(length(max = 16384))]
    pub message: String,
}

/// Set `key` in `scope` to the rendered `value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct ScheduleMemorySet {
    pub action: MemorySetAction,
    /// the memory key, a template without `{{run.final_text}}`; at most 512 bytes once rendered, counting each placeholder at its longest
    #[schemars(length(min = 1, max = 512))]
    pub key: String,
    /// stored as a JSON string, a template: `{{run.final_text}}`, `{{run.id}}`, `{{run.status}}`, `{{schedule.name}}` and `{{fire.at}}` are replaced; any other `{{…}}` is refused
    #[schemars(length(max = 16384))]
    pub value: String,
    /// default tenant; agent: the schedule's agent, run: the run that ended, user: `schedule:<name>`
    #[serde(default)]
    #[schemars(transform = crate::defs::no_default)]
    pub scope: MemoryScope,
    /// the entry expires after this long; null: never
    #[serde(default)]
    #[schemars(range(min = 1, max = 315360000), transform = crate::defs::no_default)]
    pub ttl_seconds: Option<i64>,
}

crate::objects_only!(ScheduleChannelPublish, ScheduleMemorySet);

/// One action after a scheduled run ends
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(
    transform = crate::defs::one_of,
    extend("discriminator" = {
        "propertyName": "action",
        "mapping": {
            "channel.publish": "#/components/schemas/ScheduleChannelPublish",
            "memory.set": "#/components/schemas/ScheduleMemorySet"
        }
    })
)]
pub enum ScheduleOnComplete {
    ChannelPublish(ScheduleChannelPublish),
    MemorySet(ScheduleMemorySet),
}

/// A schedule definition's content (hashed into its version): start a run of `agent` with `input` at every time `cron` matches in `timezone`, then run the `on_complete` actions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(transform = schedule_required)]
#[schemars(extend("example" = {
    "description": "The daily report",
    "cron": "0 9 * * 1-5",
    "timezone": "Europe/Berlin",
    "agent": "triage",
    "input": "Write the daily report",
    "overlap": "skip",
    "on_complete": [
        {"action": "channel.publish", "channel": "reports.daily", "message": "{{run.final_text}}"}
    ]
}))]
pub struct ScheduleContent {
    /// what the schedule is for
    #[schemars(length(max = 4096))]
    pub description: String,
    /// 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field, or an `@daily`-style nickname; it must match some time in the next five years
    #[schemars(length(min = 1, max = 256), transform = crate::defs::no_default)]
    pub cron: String,
    /// an IANA time zone name the cron is read in; default UTC
    #[schemars(length(max = 64))]
    pub timezone: String,
    /// the agent each fire runs
    #[schemars(length(max = 64), regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$"), transform = crate::defs::no_default)]
    pub agent: String,
    /// the run's input text (at most 64 KiB)
    #[schemars(length(min = 1, max = 65536), transform = crate::defs::no_default)]
    pub input: String,
    /// attached to every run the schedule starts (at most 16 KiB as JSON)
    #[schemars(schema_with = "metadata")]
    pub metadata: Map<String, Value>,
    /// a disabled schedule does not fire; default true
    pub enabled: bool,
    /// retire after this many cron fires (run-now does not count); null: never
    #[schemars(range(min = 1, max = 1000000000))]
    pub max_fires: Option<u64>,
    /// how many fires missed during one downtime are made up (0 fires once); default 0
    #[schemars(range(min = 0, max = 1000))]
    pub catch_up_max: u32,
    /// when a fire comes while the previous fire's run is still active; default allow
    pub overlap: Overlap,
    /// actions run in order after each scheduled run ends
    #[schemars(length(max = 8))]
    pub on_complete: Vec<ScheduleOnComplete>,
}

fn schedule_required(s: &mut Schema) {
    crate::defs::require(s, &["cron", "agent", "input"]);
}

fn metadata(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "maxProperties": 32, "default": {}})
}

impl Default for ScheduleContent {
    fn default() -> Self {
        Self {
            description: String::new(),
            cron: String::new(),
            timezone: "UTC".to_owned(),
            agent: String::new(),
            input: String::new(),
            metadata: Map::new(),
            enabled: true,
            max_fires: None,
            catch_up_max: 0,
            overlap: Overlap::default(),
            on_complete: Vec::new(),
        }
    }
}

impl DefContentSchema for ScheduleContent {
    const NAME: &'static str = "Schedule";
    const WARNINGS: bool = true;
}

/// How a delivery is signed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[schemars(inline)]
pub enum SignatureScheme {
    StandardWebhooks,
    Github,
    Stripe,
    Slack,
    #[default]
    HmacSha256,
}

/// deliveries accepted, fleet-wide; null: no limit
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(inline)]
pub struct WebhookRateLimit {
    #[schemars(range(min = 1, max = 600000))]
    pub per_minute: u32,
    #[serde(default)]
    #[schemars(range(min = 1, max = 100000), transform = crate::defs::no_default)]
    pub burst: Option<u32>,
}

crate::objects_only!(WebhookRateLimit);

/// A webhook definition's content (hashed into its version). Exactly one of `agent` (start a run per delivery) and `channel` (publish each delivery). `mapping` picks the run's `input`, `user` and `metadata.<key>` out of the payload with JSON paths (`$`, `.key`, `[n]`); unmapped, the whole payload is the input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(transform = webhook_required)]
#[schemars(extend("example" = {
    "description": "New GitHub issues",
    "agent": "triage",
    "signature": "github",
    "secret_env": "WEFT_WEBHOOK_DEFAULT__GITHUB",
    "mapping": {
        "input": "$.issue.title",
        "user": "$.sender.login",
        "metadata.repo": "$.repository.full_name"
    }
}))]
pub struct WebhookContent {
    #[schemars(length(max = 4096))]
    pub description: String,
    /// a disabled webhook answers every delivery 404; default true
    pub enabled: bool,
    /// start a run of this agent for each delivery
    #[schemars(length(max = 64), regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$"))]
    pub agent: Option<String>,
    /// publish each delivery to this channel
    #[schemars(length(max = 128), regex(pattern = CHANNEL))]
    pub channel: Option<String>,
    /// how deliveries are signed; default hmac-sha256
    pub signature: SignatureScheme,
    /// the name of the environment variable holding the signing secret (only the name is stored): it must lie in the tenant's namespace, `<ingress.secret_env_prefix><TENANT>__<NAME>` (the tenant upper-cased with `-` as `_`; NAME of A-Z, 0-9 and `_`, not starting with `_`, without `__`), e.g. `WEFT_WEBHOOK_ACME__GITHUB`; anything else is a 400
    #[schemars(length(max = 128), regex(pattern = r"^[A-Z_][A-Z0-9_]{0,127}$"), transform = crate::defs::no_default)]
    pub secret_env: String,
    /// hmac-sha256 only: the header carrying the hex signature; default x-signature
    #[schemars(length(max = 128), regex(pattern = HEADER_NAME))]
    pub header: Option<String>,
    /// a header holding a delivery id, to drop replays; default the scheme's own
    #[schemars(length(max = 128), regex(pattern = HEADER_NAME))]
    pub delivery_id_header: Option<String>,
    /// `input`, `user` or `metadata.<key>` → a JSON path into the payload (at most 32 steps; indexes up to 1000000)
    #[schemars(extend(
        "maxProperties" = 32,
        "propertyNames" = {"type": "string", "pattern": r"^(input|user|metadata\.[a-z0-9_-]{1,64})$"},
        "additionalProperties" = {
            "type": "string",
            "maxLength": 512,
            "pattern": r"^\$(\.[A-Za-z0-9_-]{1,128}|\[(0|[1-9][0-9]{0,6})\])*$"
        }
    ))]
    pub mapping: BTreeMap<String, String>,
    pub rate_limit: Option<WebhookRateLimit>,
    /// the largest body accepted; default 262144
    #[schemars(range(min = 1, max = 1048576))]
    pub max_body_bytes: Option<u32>,
    /// schemes that sign a timestamp only (standard-webhooks, stripe, slack): how far it may be from now; default 300
    #[schemars(range(min = 1, max = 3600))]
    pub tolerance_secs: Option<u32>,
    /// whether ?sync=true may wait for the run; default false
    pub allow_sync: bool,
    /// with allow_sync only: how long ?sync=true waits; default 30000
    #[schemars(range(min = 1, max = 120000))]
    pub sync_timeout_ms: Option<u32>,
}

fn webhook_required(s: &mut Schema) {
    crate::defs::require(s, &["secret_env"]);
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

impl DefContentSchema for WebhookContent {
    const NAME: &'static str = "Webhook";
    const WARNINGS: bool = true;
}

/// One fire of a schedule.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = all_required)]
pub struct ScheduleFire {
    pub fire_id: Uuid,
    /// `cron` or `run_now`
    pub kind: String,
    /// the slot (for run-now, when it was asked for)
    pub fire_at: Timestamp,
    /// e.g. `claimed`, `dispatched`, `failed`
    pub status: String,
    pub run_id: Option<Uuid>,
    pub run_status: Option<String>,
    pub error: Option<String>,
    #[schemars(range(min = 0))]
    pub attempts: i32,
    /// the state of the on_complete actions, when there are any
    pub on_complete: Option<String>,
    /// what the on_complete actions did (any JSON), or null
    #[schemars(schema_with = "any_json")]
    pub on_complete_result: Option<Value>,
}

fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({})
}

/// A schedule's live state and its most recent fires.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = all_required)]
pub struct ScheduleState {
    pub name: String,
    /// the active version (sha256:<hex>)
    pub version: String,
    pub enabled: bool,
    pub paused: bool,
    pub retired: bool,
    pub retired_at: Option<Timestamp>,
    pub retired_why: Option<String>,
    /// null while paused, retired or done
    pub next_fire_at: Option<Timestamp>,
    pub last_fire_at: Option<Timestamp>,
    pub last_run_id: Option<Uuid>,
    pub last_run_status: Option<String>,
    /// cron_fires + run_now_fires
    #[schemars(range(min = 0))]
    pub fire_count: i64,
    #[schemars(range(min = 0))]
    pub cron_fires: i64,
    #[schemars(range(min = 0))]
    pub run_now_fires: i64,
    /// slots skipped (missed beyond catch_up_max, or overlap: skip)
    #[schemars(range(min = 0))]
    pub skipped: i64,
    /// the most recent fires, newest first
    #[schemars(length(max = 20))]
    pub fires: Vec<ScheduleFire>,
}

/// The answer of a run-now.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = all_required)]
pub struct RunNowResult {
    pub schedule: String,
    pub fire_id: Uuid,
    /// null when the run could not be started
    pub run_id: Option<Uuid>,
    /// why the run could not be started
    pub error: Option<String>,
}

/// One delivery verdict.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = delivery_required)]
pub struct WebhookDelivery {
    /// `accepted`, `replayed`, `unauthorized`, `too_large`, `bad_payload`, `rate_limited`, `unavailable` or `failed`
    pub verdict: String,
    pub at: Timestamp,
    /// null before the delivery verified
    pub delivery_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    /// why it was refused (never a secret or a signature)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub reason: Option<String>,
}

fn delivery_required(s: &mut Schema) {
    crate::defs::require(s, &["verdict", "at", "delivery_id"]);
}

/// Deliveries refused before they verified, counted apart.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(inline, transform = all_required)]
pub struct WebhookRejected {
    /// deliveries whose signature did not verify
    #[schemars(range(min = 0))]
    pub unauthorized: i64,
    /// deliveries over max_body_bytes
    #[schemars(range(min = 0))]
    pub too_large: i64,
    /// when the last of them came
    #[schemars(with = "Option<String>")]
    pub last_at: Option<Timestamp>,
    /// the last of them, newest first, with their reasons
    pub recent: Vec<WebhookDelivery>,
}

/// The answer of `GET /v1/webhooks/{name}/deliveries`. `D` and `R` are the verdicts and the
/// refused counts: the types in the document, any JSON where they are passed on as read.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(inline, transform = deliveries_required)]
pub struct WebhookDeliveries<D = WebhookDelivery, R = WebhookRejected> {
    pub data: Vec<D>,
    #[serde(default)]
    pub next_cursor: NextCursor,
    pub rejected: R,
}

fn deliveries_required(s: &mut Schema) {
    crate::defs::require(s, &["data", "rejected"]);
}

/// `POST /v1/webhooks/{name}/test`: a delivery to try, its headers and raw body.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {
    "headers": {
        "Content-Type": "application/json",
        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "X-Hub-Signature-256": "sha256=0000000000000000000000000000000000000000000000000000000000000000"
    },
    "body": "{\"issue\":{\"title\":\"Crash on start\"},\"sender\":{\"login\":\"octocat\"}}"
}))]
pub struct WebhookTest {
    /// the delivery's headers (names in any case; values must be valid HTTP header values)
    #[serde(default)]
    #[schemars(extend(
        "maxProperties" = 64,
        "propertyNames" = {"type": "string", "pattern": HEADER_NAME}
    ), transform = crate::defs::no_default)]
    pub headers: BTreeMap<String, String>,
    /// the raw body, as the sender would sign it
    #[serde(default)]
    #[schemars(transform = crate::defs::no_default)]
    pub body: String,
}

crate::objects_only!(WebhookTest);

/// Where a delivery would go: `{agent}` or `{channel}`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct WebhookTestTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub channel: Option<String>,
}

/// The run fields a mapping makes of a body, or why it cannot.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct WebhookTestMapped {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub input: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "object")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub error: Option<String>,
}

fn object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object"})
}

/// The answer of a dry run.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = all_required)]
pub struct WebhookTestResult {
    pub verified: bool,
    /// why it did not verify
    pub reason: Option<String>,
    /// the delivery id it would have, when it verifies
    pub delivery_id: Option<String>,
    /// `{agent}` or `{channel}`
    pub target: Option<WebhookTestTarget>,
    /// the run fields the mapping makes of the body (`input`, `user`, `metadata`), or `{error}`
    pub mapped: WebhookTestMapped,
}

/// What a delivery made.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WebhookReceipt {
    /// the sender's delivery id, else sha256:<hex> of the body
    pub delivery_id: String,
    /// an agent webhook: the run
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    /// a channel webhook: where it was published
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub channel: Option<String>,
    /// a channel webhook: the message's sequence number
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i64>")]
    pub seq: Option<i64>,
    /// true: a replay; the run or message is the first delivery's
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub replayed: Option<bool>,
    /// ?sync=true: the run's status
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub status: Option<String>,
    /// ?sync=true, the run ended: its final text
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Option<String>>,
}

/// A delivery as the sender signed it: any JSON value.
pub struct AnyJson;

impl JsonSchema for AnyJson {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "AnyJson".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"description": "any JSON value"})
    }
}

/// A form-encoded delivery (Slack): fields by name.
pub struct FormFields;

impl JsonSchema for FormFields {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "FormFields".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "object", "additionalProperties": {"type": "string"}})
    }
}

/// The answers of the bearer-authenticated schedule and webhook routes.
fn errors(op: Op, not_found: &'static str, unavailable: &'static str) -> Op {
    op.error(
        400,
        "invalid request: the message and `param` name the field",
    )
    .error(401, "missing, invalid, expired or revoked token")
    .error(403, "the token lacks the scope this route needs")
    .error(404, not_found)
    .error(503, unavailable)
}

const SUBSTRATE: &str = "the substrate or the database is unreachable";
const NO_SCHEDULE: &str = "no such schedule in your tenant";
const NO_WEBHOOK: &str = "no such webhook in your tenant";
const RETIRED: &str =
    "the schedule is retired; put a new version (or activate one) to start it again";

fn schedule(op: Op) -> Op {
    op.tag("schedules")
        .path::<DefName>("name", Some("daily-report".into()))
}

fn webhook(op: Op) -> Op {
    op.tag("webhooks")
        .path::<DefName>("name", Some("github-issues".into()))
}

pub fn ops() -> Vec<Op> {
    let mut ops = def_ops::<ScheduleContent>(&crate::def_texts!(
        path: "/v1/schedules", tag: "schedules", example: "daily-report",
        plural: "schedules", a: "a schedule definition", noun: "schedule",
        put_a: "a schedule definition",
        put_description: "Scope: tenant:admin or admin. The body is the content fields (`cron`, `agent` and `input` are required). The same content returns the existing version (200, created=false) and makes it active; new content becomes the next version (201) with the previously active version as parent, and the schedule fires from its next slot after now. A cron that matches no time in the next five years is refused (400 naming `cron`). The agent is named, not checked: a fire of a missing agent is recorded as a failed fire.",
        retire: "Retire a schedule (it stays readable; it stops firing)",
        retire_description: "Scope: tenant:admin or admin. No body. Idempotent. The same as DELETE /v1/schedules/{name}, answering with the summary. Fires already made keep their runs; activating a version or putting new content starts the schedule again.",
    ));
    ops.extend([
        errors(
            schedule(Op::delete("/v1/schedules/{name}", "Retire a schedule: it stops firing for good (its versions stay for lineage)"))
                .describe("Scope: tenant:admin or admin. No body. Idempotent. The same as POST /v1/schedules/{name}/retire, answering 204. Fires already made keep their runs.")
                .empty(204, "retired"),
            NO_SCHEDULE,
            SUBSTRATE,
        ),
        errors(
            schedule(Op::get("/v1/schedules/{name}/state", "A schedule's live state: paused, retired, next and last fire, counts, the last 20 fires"))
                .describe("Scope: tenant:admin or admin (the state names the schedule's runs). A retired schedule still has a state.")
                .ok::<ScheduleState>("the schedule's state and its most recent fires"),
            NO_SCHEDULE,
            SUBSTRATE,
        ),
        errors(
            schedule(Op::post("/v1/schedules/{name}/run-now", "Fire a schedule now: a distinct fire, not a move of its next slot"))
                .describe("Scope: tenant:admin or admin. No body. Starts a run of the schedule's agent with its input, as a fire of kind `run_now` (it does not count towards `max_fires`, and a paused or disabled schedule fires too). When the run cannot be started the fire is recorded as failed and the answer is still 202, with `run_id` null and `error` saying why.")
                .answer::<RunNowResult>(202, "the fire, and the run it started (or why none)"),
            NO_SCHEDULE,
            SUBSTRATE,
        )
        .error(409, RETIRED),
        errors(
            schedule(Op::post("/v1/schedules/{name}/pause", "Pause a schedule: it keeps its definition and stops firing until resumed"))
                .describe("Scope: tenant:admin or admin. No body. Idempotent. run-now still fires a paused schedule. A retired schedule is a 409 (put a new version to start it again).")
                .ok::<ScheduleState>("the schedule's state and its most recent fires"),
            NO_SCHEDULE,
            SUBSTRATE,
        )
        .error(409, RETIRED),
        errors(
            schedule(Op::post("/v1/schedules/{name}/resume", "Resume a paused schedule from its next slot after now"))
                .describe("Scope: tenant:admin or admin. No body. Idempotent. Slots that passed while the schedule was paused are not caught up. A retired schedule is a 409 (put a new version to start it again).")
                .ok::<ScheduleState>("the schedule's state and its most recent fires"),
            NO_SCHEDULE,
            SUBSTRATE,
        )
        .error(409, RETIRED),
    ]);
    ops.extend(def_ops::<WebhookContent>(&crate::def_texts!(
        path: "/v1/webhooks", tag: "webhooks", example: "github-issues",
        plural: "webhooks", a: "a webhook definition", noun: "webhook",
        put_a: "a webhook definition",
        put_description: "Scope: tenant:admin or admin. The body is the content fields: exactly one of `agent` and `channel`, and `secret_env`, the name of the environment variable (on the hosts receiving deliveries, in the tenant's namespace `WEFT_WEBHOOK_<TENANT>__<NAME>` under the operator's ingress.secret_env_prefix; any other name is a 400) that holds the signing secret; the secret itself is never stored. The same content returns the existing version (200, created=false) and makes it active; new content becomes the next version (201) with the previously active version as parent. Deliveries go to POST /v1/_webhooks/{tenant}/{name}.",
        retire: "Retire a webhook (it stays readable; deliveries to it answer 404)",
    )));
    ops.extend([
        errors(
            webhook(Op::get("/v1/webhooks/{name}/deliveries", "A webhook's most recent delivery verdicts, newest first (for triage)"))
                .describe("Scope: tenant:admin or admin. `data`: the verdicts of deliveries that verified, newest first: each a verdict, its time, the delivery id and the run it started; never a payload, a header or a secret (a replay of one id is listed the first time only). Kept for ingress.delivery_retention_days, at most ingress.triage_keep. `rejected`: deliveries refused before they verified (anyone can POST), counted apart so that they cannot push real deliveries out of the list, with the last ingress.triage_keep of them and their reasons.")
                .ok::<WebhookDeliveries>("the verdicts"),
            NO_WEBHOOK,
            "the substrate, the database or the delivery log (Redis) is unreachable",
        ),
        errors(
            webhook(Op::post("/v1/webhooks/{name}/test", "A dry run of one delivery: whether it verifies, and what the mapping makes of it"))
                .describe("Scope: tenant:admin or admin. Give the headers and the raw body a sender would send; the answer says whether the signature verifies against the webhook's secret (and why not), the delivery id it would have, its target and the mapped run fields. Nothing is started, published, recorded or marked as delivered.")
                .body::<WebhookTest>()
                .ok::<WebhookTestResult>("the dry run"),
            NO_WEBHOOK,
            SUBSTRATE,
        )
        .error(413, "body larger than gateway.max_body_bytes")
        .error(415, "body is not JSON"),
        Op::post("/v1/_webhooks/{tenant}/{name}", "Receive a webhook delivery (no bearer token: each webhook says how deliveries are signed)")
            .describe("No token: the delivery is verified against the signature scheme and secret of the webhook definition `{name}` of tenant `{tenant}` (standard-webhooks, github, stripe, slack or hmac-sha256), over the raw body, in constant time. The body may be of any content type; it is parsed as JSON, or as a form when the content type is application/x-www-form-urlencoded (Slack), after it verifies. In order: a tenant or name that does not name an enabled, active webhook is an opaque 404 (malformed ones included, so this route answers 404 rather than 400 for them); a body over the webhook's max_body_bytes is a 413; a delivery that does not verify is an opaque 401; a replay of an accepted delivery (same delivery id) answers 200 with what the first made and `replayed: true`; a body that does not parse, or that the mapping cannot use, is a 400; over the webhook's rate_limit, a 429 with Retry-After. Then the delivery starts a run of the webhook's agent (202 `{run_id, delivery_id}`) or is published to its channel (202 `{delivery_id, channel, seq}`). The tenant, agent and channel come from the definition, never from the payload. A URL that cannot name a webhook (a tenant or name that is not a valid slug) is a 400; `sync` other than true/false/1/0 is a 400. A delivery that verified but could not be delivered (the agent is missing, admission is full) is a 500 or a 503 with Retry-After, without details: the webhook's owner sees the reason in GET /v1/webhooks/{name}/deliveries.")
            .tag("webhooks")
            .security(crate::Security::Open)
            .path::<TenantName>("tenant", Some("acme".into()))
            .path::<DefName>("name", Some("github-issues".into()))
            .query::<bool>("sync", Some("`true` (or `1`): wait up to the webhook's sync_timeout_ms for the run to end and answer with its output (the webhook must have allow_sync, else 400). Any other value answers at once."), Some(false.into()))
            .body::<AnyJson>()
            .or_body_in::<FormFields>("application/x-www-form-urlencoded")
            .optional_body("the delivery, as the sender signed it (any content type)")
            .answer::<WebhookReceipt>(200, "a replay of an accepted delivery, or with ?sync=true a run that ended in time")
            .answer::<WebhookReceipt>(202, "accepted: a run was started, or the delivery was published")
            .error(400, "the body is not JSON (or a form), the mapping found nothing it needs, or ?sync=true without allow_sync")
            .error(401, "the signature did not verify (opaque: the reason is in the webhook's deliveries)")
            .error(403, "the webhook's target refused the delivery")
            .error(404, "no such webhook (opaque: unknown, disabled and retired webhooks, and malformed tenants and names, answer alike), or, once verified, the webhook's agent or channel does not exist")
            .error(409, "the run could not be started: it conflicts with an earlier one")
            .error(413, "the body is larger than the webhook's max_body_bytes, or than gateway.max_body_bytes")
            .error(429, "over the webhook's rate_limit, or the tenant's concurrent runs")
            .header::<RetryAfter>("Retry-After", "seconds to wait")
            .error(503, "the substrate, the database or Redis is unreachable")
            .error(500, "The delivery verified but could not be delivered; its owner sees why in the delivery log."),
    ]);
    ops
}

/// `Retry-After`: whole seconds, at least 1.
#[derive(JsonSchema)]
#[schemars(inline)]
pub struct RetryAfter(#[schemars(range(min = 1))] pub u64);
