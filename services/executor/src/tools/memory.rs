//! The `Memory` tool: the substrate's key/value memory from inside a run. The model names a
//! scope (`run`, `agent`, `user`, `tenant`), never a scope id: the id is this run's own (its run
//! id, agent name, subject or tenant), so a model cannot reach another user's or tenant's
//! memory, and the agent's `memory_scopes` is the allowlist. Writes carry the call's
//! exactly-once key, which the substrate records with the change: a repeat after a crash
//! returns the first result, so writes are `Idempotent`; reads are `ReadOnly`.

use futures::future::BoxFuture;
use serde_json::{Value, json};
use weft_core::message::ToolSpec;
use weft_proto::v1;

use super::{
    Abort, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput, substrate_error, with_retry,
};

/// `Memory`.
pub struct Memory;

const OPS: [&str; 6] = ["get", "set", "delete", "list", "incr", "search"];

impl Tool for Memory {
    fn name(&self) -> &str {
        "Memory"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Durable memory as JSON values by key. scope: run (this run), agent \
                (every run of this agent), user (this user), tenant (everyone here). \
                op=get needs key. op=set needs key and value (optional: ttl_seconds, \
                if_version, embed; embed=true makes it findable by op=search). op=delete needs \
                key. op=list takes optional prefix, cursor, limit. op=incr needs key (optional: \
                by) and adds to an integer. op=search needs query (optional: top_k) and finds \
                embedded entries by meaning, best first with scores."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": OPS},
                    "scope": {"type": "string", "enum": ["run", "agent", "user", "tenant"]},
                    "key": {"type": "string"},
                    "value": {"description": "any JSON value (set)"},
                    "ttl_seconds": {"type": "integer", "minimum": 1},
                    "if_version": {"type": "integer", "minimum": 0, "description": "set/delete only if the entry is at this version (0: does not exist)"},
                    "embed": {"type": "boolean"},
                    "by": {"type": "integer"},
                    "prefix": {"type": "string"},
                    "cursor": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "query": {"type": "string"},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": 100}
                },
                "required": ["op", "scope"]
            }),
        }
    }

    fn side_effect(&self, input: &Value) -> SideEffect {
        match input.get("op").and_then(Value::as_str) {
            Some("get" | "list" | "search") => SideEffect::ReadOnly,
            // Keyed by (run, call) in the substrate: a repeat changes nothing.
            _ => SideEffect::Idempotent,
        }
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move { memory(ctx, input).await.map(ToolOutcome::Done) })
    }
}

/// The scope id this run has in `scope`.
fn scope_id(ctx: &ToolCtx<'_>, scope: &str) -> Option<String> {
    Some(match scope {
        "run" => ctx.run_id().to_string(),
        "agent" => ctx.agent_name().to_owned(),
        "user" => ctx.subject().to_owned(),
        "tenant" => ctx.tenant().to_string(),
        _ => return None,
    })
}

fn str_field<'v>(input: &'v Value, name: &str) -> Result<&'v str, ToolOutput> {
    input
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolOutput::error(format!("`{name}` (a string) is required")))
}

fn int_field(input: &Value, name: &str) -> Result<Option<i64>, ToolOutput> {
    match input.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| ToolOutput::error(format!("`{name}` must be an integer"))),
    }
}

fn entry(e: &v1::MemoryEntry) -> Value {
    json!({
        "key": e.key,
        "value": serde_json::from_str::<Value>(&e.value_json).unwrap_or(Value::Null),
        "version": e.version,
        "expires_at": e.expires_at,
        "updated_at": e.updated_at,
    })
}

async fn memory(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Abort> {
    Ok(match run_op(ctx, input).await {
        Ok(Ok(v)) => ToolOutput::ok(v.to_string()),
        Ok(Err(out)) => out,
        Err(abort) => return Err(abort),
    })
}

async fn run_op(ctx: &ToolCtx<'_>, input: &Value) -> Result<Result<Value, ToolOutput>, Abort> {
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
    let scope = match str_field(input, "scope") {
        Ok(s) => s.to_owned(),
        Err(e) => return Ok(Err(e)),
    };
    let allowed = &ctx.spec().memory_scopes;
    if !allowed.contains(&scope) {
        return Ok(Err(ToolOutput::error(if allowed.is_empty() {
            "this agent has no memory scopes (memory_scopes is empty)".to_owned()
        } else {
            format!(
                "scope `{scope}` is not allowed for this agent; allowed: {}",
                allowed.join(", ")
            )
        })));
    }
    let Some(scope_id) = scope_id(ctx, &scope) else {
        return Ok(Err(ToolOutput::error(
            "`scope` must be run, agent, user or tenant",
        )));
    };
    let client = weft_proto::transport::memory_client(ctx.substrate_transport());
    let key = || str_field(input, "key").map(str::to_owned);
    let op_key = Some(ctx.exactly_once_key());
    let agent = Some(ctx.agent_name().to_owned());
    macro_rules! tri {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(out) => return Ok(Err(out)),
            }
        };
    }
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
    let out = match op {
        "get" => {
            let key = tri!(key());
            let msg = v1::MemoryGetRequest {
                scope,
                scope_id,
                key: key.clone(),
            };
            let answer = with_retry(|| {
                let mut client = client.clone();
                let req = ctx
                    .internal(msg.clone())
                    .map_err(|e| tonic::Status::internal(e.message));
                async move { client.get(req?).await }
            })
            .await;
            match answer {
                Ok(r) => json!({"found": true, "entry": entry(&r.into_inner())}),
                // A missing key, not a refused scope (also NOT_FOUND, naming no field).
                Err(s)
                    if s.code() == tonic::Code::NotFound
                        && weft_core::Error::from(&s).param.as_deref() == Some("key") =>
                {
                    json!({"found": false, "key": key})
                }
                Err(s) => return substrate_error(&s).map(Err),
            }
        }
        "set" => {
            let Some(value) = input.get("value") else {
                return Ok(Err(ToolOutput::error("`value` (any JSON) is required")));
            };
            let e = rpc!(
                set,
                v1::MemorySetRequest {
                    scope,
                    scope_id,
                    key: tri!(key()),
                    value_json: value.to_string(),
                    ttl_seconds: tri!(int_field(input, "ttl_seconds")),
                    if_version: tri!(int_field(input, "if_version")),
                    embed: input.get("embed").and_then(Value::as_bool).unwrap_or(false),
                    op_key,
                    agent,
                }
            );
            json!({"stored": true, "entry": entry(&e)})
        }
        "delete" => {
            let r = rpc!(
                delete,
                v1::MemoryDeleteRequest {
                    scope,
                    scope_id,
                    key: tri!(key()),
                    if_version: tri!(int_field(input, "if_version")),
                    op_key,
                    agent,
                }
            );
            json!({"deleted": r.deleted, "version": r.version})
        }
        "incr" => {
            let e = rpc!(
                incr,
                v1::MemoryIncrRequest {
                    scope,
                    scope_id,
                    key: tri!(key()),
                    by: tri!(int_field(input, "by")).unwrap_or(1),
                    ttl_seconds: tri!(int_field(input, "ttl_seconds")),
                    op_key,
                    agent,
                }
            );
            json!({"entry": entry(&e)})
        }
        "list" => {
            let limit = tri!(int_field(input, "limit"))
                .unwrap_or(100)
                .clamp(1, 1000);
            let r = rpc!(
                list,
                v1::MemoryListRequest {
                    scope,
                    scope_id,
                    prefix: input
                        .get("prefix")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    cursor: input
                        .get("cursor")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    limit: u32::try_from(limit).unwrap_or(100),
                }
            );
            json!({
                "entries": r.entries.iter().map(entry).collect::<Vec<_>>(),
                "next_cursor": r.next_cursor,
            })
        }
        _ => {
            let query = tri!(str_field(input, "query")).to_owned();
            let top_k = tri!(int_field(input, "top_k")).unwrap_or(5).clamp(1, 100);
            let r = rpc!(
                search,
                v1::MemorySearchRequest {
                    scope,
                    scope_id,
                    query,
                    top_k: u32::try_from(top_k).unwrap_or(5),
                }
            );
            json!({
                "hits": r.hits.iter().map(|h| {
                    let mut e = h.entry.as_ref().map(entry).unwrap_or(Value::Null);
                    e["score"] = json!(h.score);
                    e
                }).collect::<Vec<_>>(),
            })
        }
    };
    Ok(Ok(out))
}
