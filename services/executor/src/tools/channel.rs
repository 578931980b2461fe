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
use serde_json::{Value, json};
use weft_core::acl::channel_allowed;
use weft_core::message::ToolSpec;
use weft_core::run::{ChannelDelivery, ChannelPublish, RunEvent};
use weft_proto::v1;

use super::{
    Abort, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput, substrate_error, with_retry,
};

/// `Channel`.
pub struct Channel;

const OPS: [&str; 5] = ["publish", "read", "ack", "peek", "await"];
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
            parameters: json!({
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": OPS},
                    "channel": {"type": "string"},
                    "payload": {"description": "any JSON value (publish)"},
                    "cursor": {"type": "string"},
                    "max": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "wait_ms": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS},
                    "channels": {"type": "array", "items": {"type": "string"}},
                    "mode": {"type": "string", "enum": ["any", "all", "at_least"]},
                    "n": {"type": "integer", "minimum": 1}
                },
                "required": ["op"]
            }),
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
                Ok(v) => ToolOutput::ok(v.to_string()),
                Err(out) => out,
            }))
        })
    }
}

fn uint(input: &Value, name: &str, max: u32) -> Result<Option<u32>, ToolOutput> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n <= u64::from(max))
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                ToolOutput::error(format!("`{name}` must be an integer from 0 to {max}"))
            }),
    }
}

fn message(m: &v1::ChannelMessage) -> Value {
    json!({
        "seq": m.seq,
        "cursor": m.cursor,
        "payload": serde_json::from_str::<Value>(&m.payload_json).unwrap_or(Value::Null),
        "published_at": m.published_at,
        "published_by": m.published_by,
    })
}

/// Checks `name` against the run's `publish` or `subscribe` grants.
fn check(ctx: &ToolCtx<'_>, name: &str, publish: bool) -> Result<(), ToolOutput> {
    let acl = &ctx.spec().channels;
    let (list, what) = if publish {
        (&acl.publish, "publish to")
    } else {
        (&acl.subscribe, "read")
    };
    if channel_allowed(list, name) {
        Ok(())
    } else {
        Err(ToolOutput::error(format!(
            "this run may not {what} channel `{name}`; its grants: {}",
            if list.is_empty() {
                "none".to_owned()
            } else {
                list.join(", ")
            }
        )))
    }
}

async fn channel(ctx: &ToolCtx<'_>, input: &Value) -> Result<Result<Value, ToolOutput>, Abort> {
    macro_rules! tri {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(out) => return Ok(Err(out)),
            }
        };
    }
    let op = match input.get("op").and_then(Value::as_str) {
        Some(op) if OPS.contains(&op) => op,
        other => {
            return Ok(Err(ToolOutput::error(format!(
                "`op` must be one of {}, got {}",
                OPS.join(", "),
                other.map_or_else(|| "nothing".to_owned(), |o| format!("{o:?}"))
            ))));
        }
    };
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
    if op == "await" {
        let Some(names) = input.get("channels").and_then(Value::as_array) else {
            return Ok(Err(ToolOutput::error(
                "`channels` (an array of channel names) is required",
            )));
        };
        let mut channels = Vec::with_capacity(names.len());
        for (i, n) in names.iter().enumerate() {
            let Some(n) = n.as_str() else {
                return Ok(Err(ToolOutput::error(format!(
                    "`channels[{i}]` must be a string"
                ))));
            };
            tri!(check(ctx, n, false));
            channels.push(n.to_owned());
        }
        let r = rpc!(
            await_channels,
            v1::AwaitRequest {
                channels,
                mode: input
                    .get("mode")
                    .and_then(Value::as_str)
                    .unwrap_or("any")
                    .to_owned(),
                n: tri!(uint(input, "n", 64)),
                wait_ms: tri!(uint(input, "wait_ms", MAX_WAIT_MS)).unwrap_or(0),
                consumer,
                agent,
                user: None,
            }
        );
        return Ok(Ok(json!({
            "satisfied": r.satisfied,
            "channels": r.channels.iter().map(|c| json!({"channel": c.channel, "ready": c.ready, "cursor": c.cursor})).collect::<Vec<_>>(),
        })));
    }
    let Some(name) = input.get("channel").and_then(Value::as_str) else {
        return Ok(Err(ToolOutput::error("`channel` (a string) is required")));
    };
    let name = name.to_owned();
    tri!(check(ctx, &name, op == "publish"));
    let out = match op {
        "publish" => {
            let Some(payload) = input.get("payload") else {
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
            json!({"published": true, "seq": r.seq, "cursor": r.cursor})
        }
        "read" => {
            let r = rpc!(
                read,
                v1::ReadRequest {
                    name: name.clone(),
                    cursor: input
                        .get("cursor")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    max: tri!(uint(input, "max", 1000)),
                    wait_ms: tri!(uint(input, "wait_ms", MAX_WAIT_MS)),
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
            json!({"messages": r.messages.iter().map(message).collect::<Vec<_>>(), "cursor": r.cursor})
        }
        "ack" => {
            let Some(cursor) = input.get("cursor").and_then(Value::as_str) else {
                return Ok(Err(ToolOutput::error("`cursor` (from a read) is required")));
            };
            let r = rpc!(
                ack,
                v1::AckRequest {
                    name,
                    cursor: cursor.to_owned(),
                    consumer,
                    agent,
                    user: None,
                }
            );
            json!({"committed": r.cursor})
        }
        _ => {
            let r = rpc!(
                peek,
                v1::PeekRequest {
                    name,
                    max: tri!(uint(input, "max", 1000)),
                    agent,
                    user: None,
                }
            );
            json!({"messages": r.messages.iter().map(message).collect::<Vec<_>>()})
        }
    };
    Ok(Ok(out))
}
