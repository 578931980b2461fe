//! The channel routes (`/v1/channels…`): named, bounded message streams of a tenant — create and
//! delete (tenant admins), publish, read after a cursor (long-poll), ack, peek, and fan-in over
//! several channels.
//!
//! The gateway hands the bodies to the substrate, which validates them: the bounds below are the
//! substrate's, and the fields the gateway reads stay as loose as it reads them (a `scope` or a
//! `mode` is a string here, refused by the substrate with a message naming it).

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::common::{NextCursor, Timestamp};
use crate::op::Op;

/// The channel name: 1-128 characters of A-Z a-z 0-9 _ - and dots between segments (`await` is reserved).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct ChannelName(
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
    )]
    pub String,
);

/// How the channel is partitioned: one stream per agent, per subject, or one for the tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline, extend("enum" = ["agent", "user", "tenant"]))]
pub struct ChannelScope(pub String);

/// The agent whose stream to use; required on channels of scope `agent`, ignored on others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct StreamAgent(
    #[schemars(
        length(min = 1, max = 64),
        regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$")
    )]
    pub String,
);

/// Another subject's stream on a channel of scope `user` (tenant admins only); ignored on other scopes. Default: the token's subject.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct StreamUser(#[schemars(length(min = 1, max = 256))] pub String);

/// Whose committed cursor; default the token's subject.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct Consumer(#[schemars(length(min = 1, max = 256))] pub String);

/// An opaque cursor returned by a read, a publish or a peek of this channel (and stream).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct ChannelCursor(#[schemars(length(min = 1, max = 64))] pub String);

/// How many messages a peek returns (default 10).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct PeekMax(#[schemars(range(min = 1, max = 1000))] pub u32);

/// A channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Channel {
    pub name: String,
    pub scope: ChannelScope,
    pub ttl_seconds: u64,
    pub max_messages: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The answer of `GET /v1/channels`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChannelList {
    pub data: Vec<Channel>,
    #[serde(default)]
    pub next_cursor: NextCursor,
}

/// The body of `PUT /v1/channels/{name}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"scope": "tenant", "ttl_seconds": 3600, "max_messages": 500}))]
pub struct PutChannel {
    pub scope: ChannelScope,
    /// Message lifetime (default 86400).
    #[serde(default)]
    #[schemars(range(min = 1, max = 2_592_000))]
    pub ttl_seconds: Option<u64>,
    /// Messages kept per stream; older ones are trimmed when a publish exceeds it (default 1000).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100_000))]
    pub max_messages: Option<u64>,
}

/// The answer of `PUT /v1/channels/{name}`: the channel, and whether it was created.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PutChannelResult {
    #[serde(flatten)]
    pub channel: Option<Channel>,
    pub created: bool,
}

impl JsonSchema for PutChannelResult {
    fn schema_name() -> Cow<'static, str> {
        "PutChannelResult".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let channel = g.subschema_for::<Channel>();
        json_schema!({
            "allOf": [
                channel,
                {
                    "type": "object",
                    "properties": {"created": {"type": "boolean"}},
                    "required": ["created"]
                }
            ]
        })
    }
}

/// The body of `POST /v1/channels/{name}/publish`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"payload": {"job": 42}}))]
pub struct Publish {
    /// Any JSON value, at most 64 KiB as JSON text.
    pub payload: Value,
    /// Publish at most once per key and stream.
    #[serde(default)]
    #[schemars(length(min = 1, max = 256))]
    pub op_key: Option<String>,
    #[serde(default)]
    pub agent: Option<StreamAgent>,
    #[serde(default)]
    pub user: Option<StreamUser>,
}

/// The answer of a publish: the message's position.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PublishResult {
    pub seq: u64,
    pub cursor: String,
    pub replayed: bool,
    pub published_at: Timestamp,
}

/// The body of `POST /v1/channels/{name}/read` (optional: no body reads after the committed
/// cursor without waiting).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"max": 10, "wait_ms": 0}))]
pub struct ReadChannel {
    #[serde(default)]
    pub cursor: Option<ChannelCursor>,
    /// At most this many messages (default 100).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub max: Option<u32>,
    /// Wait up to this long for a message when there is none (default 0).
    #[serde(default)]
    #[schemars(range(min = 0, max = 30_000))]
    pub wait_ms: Option<u32>,
    #[serde(default)]
    pub consumer: Option<Consumer>,
    #[serde(default)]
    pub agent: Option<StreamAgent>,
    #[serde(default)]
    pub user: Option<StreamUser>,
}

/// One message of a channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChannelMessage {
    #[schemars(range(min = 1))]
    pub seq: u64,
    pub cursor: String,
    #[schemars(schema_with = "any_json")]
    pub payload: Value,
    pub published_at: Timestamp,
    pub expires_at: Timestamp,
    /// `<tenant>/<subject>` of the publisher
    pub published_by: String,
}

/// Any JSON value.
fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({})
}

/// The answer of a read: the messages, and the cursor to read from next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadResult {
    pub messages: Vec<ChannelMessage>,
    pub cursor: String,
}

/// The answer of a peek: the newest messages, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PeekResult {
    pub data: Vec<ChannelMessage>,
    #[serde(default)]
    pub next_cursor: NextCursor,
    /// the same list as `data` (the old key, kept for one release)
    #[schemars(extend("deprecated" = true))]
    pub messages: Vec<ChannelMessage>,
}

/// The body of `POST /v1/channels/{name}/ack`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"cursor": "AQAAAAAAAAABAAAAAAAAAAEAAAAAAAAAAQ"}))]
pub struct AckChannel {
    pub cursor: ChannelCursor,
    #[serde(default)]
    pub consumer: Option<Consumer>,
    #[serde(default)]
    pub agent: Option<StreamAgent>,
    #[serde(default)]
    pub user: Option<StreamUser>,
}

/// The answer of an ack: the committed cursor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AckResult {
    pub cursor: String,
}

/// When an await is satisfied: `any` channel, `all` of them, or `at_least` `n`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline, extend("enum" = ["any", "all", "at_least"]))]
pub struct AwaitMode(pub String);

/// The body of `POST /v1/channels/await`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"channels": ["jobs.eu", "jobs.us"], "mode": "any", "wait_ms": 0}))]
pub struct AwaitChannels {
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 128)), extend("uniqueItems" = true))]
    pub channels: Vec<String>,
    pub mode: AwaitMode,
    /// With mode `at_least` only: how many channels must be ready.
    #[serde(default)]
    #[schemars(range(min = 1, max = 64))]
    pub n: Option<u32>,
    /// Wait up to this long (default 0).
    #[serde(default)]
    #[schemars(range(min = 0, max = 30_000))]
    pub wait_ms: u32,
    #[serde(default)]
    pub consumer: Option<Consumer>,
    #[serde(default)]
    pub agent: Option<StreamAgent>,
    #[serde(default)]
    pub user: Option<StreamUser>,
}

// Bodies are JSON objects only: serde's derive would also read an array of the fields.
crate::objects_only!(PutChannel, Publish, ReadChannel, AckChannel, AwaitChannels);

/// One channel's readiness in an await.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct ChannelReadiness {
    pub channel: String,
    pub ready: bool,
    pub cursor: String,
}

/// The answer of an await.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AwaitResult {
    pub satisfied: bool,
    pub channels: Vec<ChannelReadiness>,
}

const NO_CHANNEL: (u16, &str) = (
    404,
    "no such channel in your tenant (create it with PUT /v1/channels/{name})",
);
const CONFLICT: (u16, &str) = (
    409,
    "the channel exists with another scope, or the tenant has 1000 channels",
);

/// A channel route: its tag, and the errors every channel route answers, with `more` (400, 404,
/// 409) where the route has them and 413 and 415 when it reads a body.
fn channel(mut op: Op, more: &[(u16, &'static str)]) -> Op {
    op = op
        .tag("channels")
        .error(401, "missing, invalid, expired or revoked token")
        .error(403, "the token lacks the scope this route needs");
    for &(status, description) in more {
        op = op.error(status, description);
    }
    if op.body.is_some() {
        op = op
            .error(413, "body over the size cap")
            .error(415, "body is not JSON");
    }
    op.error(
        503,
        "the substrate, the database or NATS is unreachable, or too many readers wait (Retry-After)",
    )
}

const BAD: (u16, &str) = (
    400,
    "invalid request: the message and `param` name the field",
);

/// A route on one channel (`{name}` in its path).
fn named(op: Op) -> Op {
    op.param::<ChannelName>(
        crate::In::Path,
        "name",
        true,
        Some("The channel name: 1-128 characters of A-Z a-z 0-9 _ - and dots between segments (`await` is reserved)."),
        Some("jobs.eu".into()),
    )
}

pub fn ops() -> Vec<Op> {
    vec![
        channel(
            Op::get("/v1/channels", "The tenant's channels")
                .describe("Scope: channels:read, channels:publish or tenant:admin.")
                .ok::<ChannelList>("the channels, by name"),
            &[],
        ),
        channel(
            Op::post("/v1/channels/await", "Fan-in: wait until some or all channels have unread messages")
                .describe("Scope: channels:read. Registers for every channel's wake-ups, then checks which have messages after the consumer's committed cursor, and answers when `mode` holds (`any`: one, `all`: every one, `at_least`: `n`) or when `wait_ms` (at most 30000) passes, with per-channel readiness. `agent`/`user` choose the stream on every listed channel of that scope.")
                .body::<AwaitChannels>()
                .ok::<AwaitResult>("the readiness of each channel; `satisfied` says whether the mode held"),
            &[BAD, NO_CHANNEL],
        ),
        channel(
            named(Op::put("/v1/channels/{name}", "Create a channel, or change its TTL and size bound"))
                .describe("Scope: tenant:admin or admin. The scope of an existing channel cannot change (409): delete it and create it again.")
                .body::<PutChannel>()
                .ok::<PutChannelResult>("the channel existed; its bounds are as given")
                .answer::<PutChannelResult>(201, "the channel was created"),
            &[BAD, CONFLICT],
        ),
        channel(
            named(Op::delete("/v1/channels/{name}", "Delete a channel with its messages and cursors"))
                .describe("Scope: tenant:admin or admin.")
                .empty(204, "deleted"),
            &[BAD, NO_CHANNEL],
        ),
        channel(
            named(Op::post("/v1/channels/{name}/publish", "Publish a message"))
                .describe("Scope: channels:publish. The payload is any JSON value up to 64 KiB. Waiting readers on every replica are woken. With `op_key`, a repeat in the same stream returns the first message (200, replayed) and appends nothing.")
                .body::<Publish>()
                .ok::<PublishResult>("`op_key` was published before: the first message's position")
                .answer::<PublishResult>(201, "published"),
            &[BAD, NO_CHANNEL],
        ),
        channel(
            crate::runs::optional_body(
                named(Op::post("/v1/channels/{name}/read", "Read messages after a cursor (long-poll)"))
                    .describe("Scope: channels:read. Messages after `cursor`, or after the consumer's committed cursor, oldest first, at most `max` (1-1000, default 100). With `wait_ms` (at most 30000) and nothing to return, waits for a publish. Reading moves no cursor: ack to commit. The body may be empty.")
                    .body::<ReadChannel>(),
            )
            .ok::<ReadResult>("the messages and the cursor to read from next"),
            &[BAD, NO_CHANNEL],
        ),
        channel(
            named(Op::post("/v1/channels/{name}/ack", "Commit the consumer's cursor"))
                .describe("Scope: channels:read. A cursor behind the committed one, ahead of the channel, or of another channel or stream is a 400 naming `cursor`.")
                .body::<AckChannel>()
                .ok::<AckResult>("the committed cursor"),
            &[BAD, NO_CHANNEL],
        ),
        channel(
            named(Op::get("/v1/channels/{name}/peek", "The newest messages, moving no cursor"))
                .describe("Scope: channels:read.")
                .query::<PeekMax>("max", Some("How many (default 10)."), Some(10.into()))
                .query::<StreamAgent>("agent", Some("The agent whose stream to use; required on channels of scope `agent`, ignored on others."), None)
                .query::<StreamUser>("user", Some("Another subject's stream on a channel of scope `user` (tenant admins only); ignored on other scopes. Default: the token's subject."), None)
                .ok::<PeekResult>("the newest messages, oldest first"),
            &[BAD, NO_CHANNEL],
        ),
    ]
}
