//! The `Channel` tool: publish to and read from the substrate's channels from inside a run. The
//! run's `channels` grants are the ACL (`publish` for publishing, `subscribe` for everything
//! else; exact names or `prefix.*`); a sub-run's grants never exceed its parent's. An
//! agent-scoped channel is this run's agent's partition and the reader's committed cursor is the
//! agent's, so every run of an agent shares its position. A publish carries the call's
//! exactly-once key (a repeat after a crash returns the first message), so it is `Idempotent`;
//! reading without acknowledging moves nothing and is `ReadOnly`; an ack of a position already
//! committed is harmless, so it is `Idempotent` too. Publishes and deliveries go into the
//! transcript as `channel_publish` / `channel_delivery` events.

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use weft_api::tools::{ChannelInput, ChannelOp, input_schema};
use weft_core::acl::channel_allowed;
use weft_core::agent::AgentChannels;
use weft_core::message::ToolSpec;
use weft_core::run::{ChannelDelivery, ChannelPublish, RunEvent};
use weft_proto::v1;

use super::{
    Abort, Field, Problem, Reading, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput, read_op,
    substrate_error, with_retry,
};

/// `Channel`.
pub struct Channel;

/// The longest a tool call waits for a message: the run holds its slot meanwhile.
const MAX_WAIT_MS: u32 = 30_000;

impl Tool for Channel {
    fn name(&self) -> &str {
        "Channel"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Message channels shared with other agents and users. op=publish \
                needs channel and payload. op=read needs channel (optional: cursor, max, \
                wait_ms) and returns messages after your committed position (or after cursor), \
                waiting up to wait_ms for one. op=ack needs channel and cursor and commits your \
                position. op=peek needs channel (optional: max) and shows the newest messages. \
                op=await needs channels and mode (any, all or at_least; optional: n, wait_ms) \
                and waits until those channels have unread messages."
                .into(),
            parameters: input_schema::<ChannelInput>(),
        }
    }

    fn side_effect(&self, input: &Value) -> SideEffect {
        match input.get("op").and_then(Value::as_str) {
            Some("read" | "peek" | "await") => SideEffect::ReadOnly,
            _ => SideEffect::Idempotent,
        }
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move {
            Ok(ToolOutcome::Done(match channel(ctx, input).await? {
                Ok(answer) => ToolOutput::json(&answer),
                Err(out) => out,
            }))
        })
    }
}

/// One message as the model sees it.
#[derive(Serialize)]
struct Message {
    seq: u64,
    cursor: String,
    payload: Value,
    published_at: String,
    published_by: String,
}

impl From<v1::ChannelMessage> for Message {
    fn from(m: v1::ChannelMessage) -> Self {
        Self {
            payload: serde_json::from_str(&m.payload_json).unwrap_or(Value::Null),
            seq: m.seq,
            cursor: m.cursor,
            published_at: m.published_at,
            published_by: m.published_by,
        }
    }
}

/// One awaited channel's readiness.
#[derive(Serialize)]
struct Readiness {
    channel: String,
    ready: bool,
    cursor: String,
}

/// What each op answers.
#[derive(Serialize)]
#[serde(untagged)]
enum Answer {
    Awaited {
        satisfied: bool,
        channels: Vec<Readiness>,
    },
    Published {
        published: bool,
        seq: u64,
        cursor: String,
    },
    Read {
        messages: Vec<Message>,
        cursor: String,
    },
    Acked {
        committed: String,
    },
    Peeked {
        messages: Vec<Message>,
    },
}

/// Checks `name` against the run's `publish` or `subscribe` grants.
fn grant(acl: &AgentChannels, name: &str, publish: bool) -> Result<(), String> {
    let (list, what) = if publish {
        (&acl.publish, "publish to")
    } else {
        (&acl.subscribe, "read")
    };
    if channel_allowed(list, name) {
        Ok(())
    } else {
        Err(format!(
            "this run may not {what} channel `{name}`; its grants: {}",
            if list.is_empty() {
                "none".to_owned()
            } else {
                list.join(", ")
            }
        ))
    }
}

/// [`grant`], as the call's result.
fn check(ctx: &ToolCtx<'_>, name: &str, publish: bool) -> Result<(), ToolOutput> {
    grant(&ctx.spec().channels, name, publish).map_err(ToolOutput::error)
}

/// The largest value of a bounded integer field.
fn bound(field: &str) -> Option<u32> {
    match field {
        "max" => Some(1000),
        "wait_ms" => Some(MAX_WAIT_MS),
        "n" => Some(64),
        _ => None,
    }
}

/// The fields each op reads, in the order their checks fire.
fn fields(op: ChannelOp) -> &'static [Field] {
    use Field::{Lenient, Need, NeedAny, Opt};
    match op {
        ChannelOp::Publish => &[Need("op"), Need("channel"), NeedAny("payload")],
        ChannelOp::Read => &[
            Need("op"),
            Need("channel"),
            Lenient("cursor"),
            Opt("max"),
            Opt("wait_ms"),
        ],
        ChannelOp::Ack => &[Need("op"), Need("channel"), Need("cursor")],
        ChannelOp::Peek => &[Need("op"), Need("channel"), Opt("max")],
        ChannelOp::Await => &[
            Need("op"),
            Need("channels"),
            Lenient("mode"),
            Opt("n"),
            Opt("wait_ms"),
        ],
    }
}

/// `Channel`'s messages.
fn words(field: &str, problem: &Problem<'_>) -> Option<String> {
    let missing = matches!(problem, Problem::Missing | Problem::Invalid { .. });
    Some(match field {
        "channel" if missing => "`channel` (a string) is required".into(),
        "channels" if missing => "`channels` (an array of channel names) is required".into(),
        "payload" if missing => "`payload` (any JSON) is required".into(),
        "cursor" if missing => "`cursor` (from a read) is required".into(),
        f if f.starts_with("channels[") && missing => format!("`{f}` must be a string"),
        f => match (bound(f), problem) {
            (Some(max), Problem::Invalid { .. }) => {
                format!("`{f}` must be an integer from 0 to {max}")
            }
            _ => return None,
        },
    })
}

/// Reads a call's input: its op, then the op's fields in order, each channel named checked
/// against `acl` and each bound before the next field is read.
pub(super) fn read(input: &Value, acl: &AgentChannels) -> Result<ChannelInput, String> {
    let op = read_op(input, words)?;
    let check = |field: &str, value: &Value| match field {
        "channel" => value
            .as_str()
            .map_or(Ok(()), |name| grant(acl, name, op == ChannelOp::Publish)),
        // Up to the first that is not a string, which the read then names.
        "channels" => value
            .as_array()
            .into_iter()
            .flatten()
            .map_while(Value::as_str)
            .try_for_each(|name| grant(acl, name, false)),
        _ => match (bound(field), value.as_u64()) {
            (Some(max), Some(n)) if n > u64::from(max) => {
                Err(format!("`{field}` must be an integer from 0 to {max}"))
            }
            _ => Ok(()),
        },
    };
    Reading::new(fields(op), words).check(&check).read(input)
}

/// `value`, if given, is at most `max` (already checked while reading; said again here, where
/// it guards the call).
fn at_most(value: Option<u32>, name: &str, max: u32) -> Result<Option<u32>, ToolOutput> {
    match value {
        Some(n) if n > max => Err(ToolOutput::error(format!(
            "`{name}` must be an integer from 0 to {max}"
        ))),
        v => Ok(v),
    }
}

async fn channel(ctx: &ToolCtx<'_>, input: &Value) -> Result<Result<Answer, ToolOutput>, Abort> {
    macro_rules! tri {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(out) => return Ok(Err(out)),
            }
        };
    }
    let input = tri!(read(input, &ctx.spec().channels).map_err(ToolOutput::error));
    let client = weft_proto::transport::channels_client(ctx.substrate_transport());
    let agent = Some(ctx.agent_name().to_owned());
    let consumer = Some(ctx.agent_name().to_owned());
    macro_rules! rpc {
        ($method:ident, $msg:expr) => {{
            let msg = $msg;
            let answer = with_retry(|| {
                let mut client = client.clone();
                let req = ctx
                    .internal(msg.clone())
                    .map_err(|e| tonic::Status::internal(e.message));
                async move { client.$method(req?).await }
            })
            .await;
            match answer {
                Ok(r) => r.into_inner(),
                Err(s) => return substrate_error(&s).map(Err),
            }
        }};
    }
    if input.op == ChannelOp::Await {
        let Some(channels) = input.channels else {
            return Ok(Err(ToolOutput::error(
                "`channels` (an array of channel names) is required",
            )));
        };
        for n in &channels {
            tri!(check(ctx, n, false));
        }
        let r = rpc!(
            await_channels,
            v1::AwaitRequest {
                channels,
                mode: input.mode.map_or_else(|| "any".to_owned(), |m| m.0),
                n: tri!(at_most(input.n, "n", 64)),
                wait_ms: tri!(at_most(input.wait_ms, "wait_ms", MAX_WAIT_MS)).unwrap_or(0),
                consumer,
                agent,
                user: None,
            }
        );
        return Ok(Ok(Answer::Awaited {
            satisfied: r.satisfied,
            channels: r
                .channels
                .into_iter()
                .map(|c| Readiness {
                    channel: c.channel,
                    ready: c.ready,
                    cursor: c.cursor,
                })
                .collect(),
        }));
    }
    let Some(name) = input.channel else {
        return Ok(Err(ToolOutput::error("`channel` (a string) is required")));
    };
    tri!(check(ctx, &name, input.op == ChannelOp::Publish));
    let out = match input.op {
        ChannelOp::Publish => {
            let Some(payload) = input.payload else {
                return Ok(Err(ToolOutput::error("`payload` (any JSON) is required")));
            };
            let r = rpc!(
                publish,
                v1::PublishRequest {
                    name: name.clone(),
                    payload_json: payload.to_string(),
                    op_key: Some(ctx.exactly_once_key()),
                    agent,
                    user: None,
                }
            );
            ctx.emit(RunEvent::ChannelPublish(ChannelPublish {
                tool_use_id: ctx.tool_use_id().to_owned(),
                channel: name,
                seq: i64::try_from(r.seq).unwrap_or(i64::MAX),
                payload: None,
            }));
            Answer::Published {
                published: true,
                seq: r.seq,
                cursor: r.cursor,
            }
        }
        ChannelOp::Read => {
            let r = rpc!(
                read,
                v1::ReadRequest {
                    name: name.clone(),
                    cursor: input.cursor,
                    max: tri!(at_most(input.max, "max", 1000)),
                    wait_ms: tri!(at_most(input.wait_ms, "wait_ms", MAX_WAIT_MS)),
                    consumer,
                    agent,
                    user: None,
                }
            );
            for m in &r.messages {
                ctx.emit(RunEvent::ChannelDelivery(ChannelDelivery {
                    tool_use_id: ctx.tool_use_id().to_owned(),
                    channel: name.clone(),
                    seq: i64::try_from(m.seq).unwrap_or(i64::MAX),
                    cursor: Some(m.cursor.clone()),
                    payload: None,
                }));
            }
            Answer::Read {
                messages: r.messages.into_iter().map(Message::from).collect(),
                cursor: r.cursor,
            }
        }
        ChannelOp::Ack => {
            let Some(cursor) = input.cursor else {
                return Ok(Err(ToolOutput::error("`cursor` (from a read) is required")));
            };
            let r = rpc!(
                ack,
                v1::AckRequest {
                    name,
                    cursor,
                    consumer,
                    agent,
                    user: None,
                }
            );
            Answer::Acked {
                committed: r.cursor,
            }
        }
        ChannelOp::Peek | ChannelOp::Await => {
            let r = rpc!(
                peek,
                v1::PeekRequest {
                    name,
                    max: tri!(at_most(input.max, "max", 1000)),
                    agent,
                    user: None,
                }
            );
            Answer::Peeked {
                messages: r.messages.into_iter().map(Message::from).collect(),
            }
        }
    };
    Ok(Ok(out))
}
