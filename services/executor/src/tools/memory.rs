//! The `Memory` tool: the substrate's key/value memory from inside a run. The model names a
//! scope (`run`, `agent`, `user`, `tenant`), never a scope id: the id is this run's own (its run
//! id, agent name, subject or tenant), so a model cannot reach another user's or tenant's
//! memory, and the agent's `memory_scopes` is the allowlist. Writes carry the call's
//! exactly-once key, which the substrate records with the change: a repeat after a crash
//! returns the first result, so writes are `Idempotent`; reads are `ReadOnly`.

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use weft_api::face::MemoryScope;
use weft_api::tools::{MemoryInput, MemoryOp, input_schema};
use weft_core::message::ToolSpec;
use weft_proto::v1;

use super::{
    Abort, Field, Problem, Reading, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput, read_op,
    substrate_error, with_retry,
};

/// `Memory`.
pub struct Memory;

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
            parameters: input_schema::<MemoryInput>(),
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
fn scope_id(ctx: &ToolCtx<'_>, scope: MemoryScope) -> String {
    match scope {
        MemoryScope::Run => ctx.run_id().to_string(),
        MemoryScope::Agent => ctx.agent_name().to_owned(),
        MemoryScope::User => ctx.subject().to_owned(),
        MemoryScope::Tenant => ctx.tenant().to_string(),
    }
}

/// A field an op needs.
fn needs<T>(field: Option<T>, what: &str) -> Result<T, ToolOutput> {
    field.ok_or_else(|| ToolOutput::error(format!("{what} is required")))
}

/// The fields each op reads, in the order their checks fire.
fn fields(op: MemoryOp) -> &'static [Field] {
    use Field::{Lenient, Need, NeedAny, Opt};
    match op {
        MemoryOp::Get => &[Need("op"), Need("scope"), Need("key")],
        MemoryOp::Set => &[
            Need("op"),
            Need("scope"),
            NeedAny("value"),
            Need("key"),
            Opt("ttl_seconds"),
            Opt("if_version"),
            Lenient("embed"),
        ],
        MemoryOp::Delete => &[Need("op"), Need("scope"), Need("key"), Opt("if_version")],
        MemoryOp::Incr => &[
            Need("op"),
            Need("scope"),
            Need("key"),
            Opt("by"),
            Opt("ttl_seconds"),
        ],
        MemoryOp::List => &[
            Need("op"),
            Need("scope"),
            Opt("limit"),
            Lenient("prefix"),
            Lenient("cursor"),
        ],
        MemoryOp::Search => &[Need("op"), Need("scope"), Need("query"), Opt("top_k")],
    }
}

/// `Memory`'s messages.
fn words(field: &str, problem: &Problem<'_>) -> Option<String> {
    Some(match (field, problem) {
        ("scope" | "key" | "query", Problem::Missing | Problem::Invalid { .. }) => {
            format!("`{field}` (a string) is required")
        }
        ("scope", Problem::Unknown { .. }) => "`scope` must be run, agent, user or tenant".into(),
        ("value", Problem::Missing) => "`value` (any JSON) is required".into(),
        // The rest are integers.
        (_, Problem::Invalid { .. }) => format!("`{field}` must be an integer"),
        _ => return None,
    })
}

/// Whether the agent's `memory_scopes` has `scope`.
fn allow(scope: &str, allowed: &[String]) -> Result<(), String> {
    if allowed.iter().any(|a| a == scope) {
        Ok(())
    } else if allowed.is_empty() {
        Err("this agent has no memory scopes (memory_scopes is empty)".to_owned())
    } else {
        Err(format!(
            "scope `{scope}` is not allowed for this agent; allowed: {}",
            allowed.join(", ")
        ))
    }
}

/// Reads a call's input: its op, then the op's fields in order, any scope named checked
/// against `allowed` before it is read as a scope.
pub(super) fn read(input: &Value, allowed: &[String]) -> Result<MemoryInput, String> {
    let op = read_op(input, words)?;
    let check = |field: &str, value: &Value| match value.as_str() {
        Some(scope) if field == "scope" => allow(scope, allowed),
        _ => Ok(()),
    };
    Reading::new(fields(op), words).check(&check).read(input)
}

/// One entry as the model sees it.
#[derive(Serialize)]
struct Entry {
    key: String,
    value: Value,
    version: i64,
    expires_at: Option<String>,
    updated_at: String,
}

impl From<v1::MemoryEntry> for Entry {
    fn from(e: v1::MemoryEntry) -> Self {
        Self {
            value: serde_json::from_str(&e.value_json).unwrap_or(Value::Null),
            key: e.key,
            version: e.version,
            expires_at: e.expires_at,
            updated_at: e.updated_at,
        }
    }
}

/// A search hit: the entry and its score.
#[derive(Serialize)]
struct Hit {
    #[serde(flatten)]
    entry: Option<Entry>,
    score: f64,
}

/// What each op answers.
#[derive(Serialize)]
#[serde(untagged)]
enum Answer {
    Found {
        found: bool,
        entry: Entry,
    },
    Missing {
        found: bool,
        key: String,
    },
    Stored {
        stored: bool,
        entry: Entry,
    },
    Deleted {
        deleted: bool,
        version: i64,
    },
    Counted {
        entry: Entry,
    },
    Listed {
        entries: Vec<Entry>,
        next_cursor: Option<String>,
    },
    Hits {
        hits: Vec<Hit>,
    },
}

async fn memory(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Abort> {
    Ok(match run_op(ctx, input).await {
        Ok(Ok(answer)) => ToolOutput::json(&answer),
        Ok(Err(out)) => out,
        Err(abort) => return Err(abort),
    })
}

async fn run_op(ctx: &ToolCtx<'_>, input: &Value) -> Result<Result<Answer, ToolOutput>, Abort> {
    macro_rules! tri {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(out) => return Ok(Err(out)),
            }
        };
    }
    let allowed = &ctx.spec().memory_scopes;
    let input = tri!(read(input, allowed).map_err(ToolOutput::error));
    // Checked while reading too; said again here, where it guards the call.
    tri!(allow(input.scope.as_str(), allowed).map_err(ToolOutput::error));
    let scope = input.scope.as_str().to_owned();
    let scope_id = scope_id(ctx, input.scope);
    let client = weft_proto::transport::memory_client(ctx.substrate_transport());
    let key = || needs(input.key.clone(), "`key` (a string)");
    let op_key = Some(ctx.exactly_once_key());
    let agent = Some(ctx.agent_name().to_owned());
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
    let out = match input.op {
        MemoryOp::Get => {
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
                Ok(r) => Answer::Found {
                    found: true,
                    entry: r.into_inner().into(),
                },
                // A missing key, not a refused scope (also NOT_FOUND, naming no field).
                Err(s)
                    if s.code() == tonic::Code::NotFound
                        && weft_core::Error::from(&s).param.as_deref() == Some("key") =>
                {
                    Answer::Missing { found: false, key }
                }
                Err(s) => return substrate_error(&s).map(Err),
            }
        }
        MemoryOp::Set => {
            let value = tri!(needs(input.value.as_ref(), "`value` (any JSON)"));
            let e = rpc!(
                set,
                v1::MemorySetRequest {
                    scope,
                    scope_id,
                    key: tri!(key()),
                    value_json: value.to_string(),
                    ttl_seconds: input.ttl_seconds,
                    if_version: input.if_version,
                    embed: input.embed.unwrap_or(false),
                    op_key,
                    agent,
                }
            );
            Answer::Stored {
                stored: true,
                entry: e.into(),
            }
        }
        MemoryOp::Delete => {
            let r = rpc!(
                delete,
                v1::MemoryDeleteRequest {
                    scope,
                    scope_id,
                    key: tri!(key()),
                    if_version: input.if_version,
                    op_key,
                    agent,
                }
            );
            Answer::Deleted {
                deleted: r.deleted,
                version: r.version,
            }
        }
        MemoryOp::Incr => {
            let e = rpc!(
                incr,
                v1::MemoryIncrRequest {
                    scope,
                    scope_id,
                    key: tri!(key()),
                    by: input.by.unwrap_or(1),
                    ttl_seconds: input.ttl_seconds,
                    op_key,
                    agent,
                }
            );
            Answer::Counted { entry: e.into() }
        }
        MemoryOp::List => {
            let limit = input.limit.unwrap_or(100).clamp(1, 1000);
            let r = rpc!(
                list,
                v1::MemoryListRequest {
                    scope,
                    scope_id,
                    prefix: input.prefix.clone().unwrap_or_default(),
                    cursor: input.cursor.clone(),
                    limit: u32::try_from(limit).unwrap_or(100),
                }
            );
            Answer::Listed {
                entries: r.entries.into_iter().map(Entry::from).collect(),
                next_cursor: r.next_cursor,
            }
        }
        MemoryOp::Search => {
            let query = tri!(needs(input.query.clone(), "`query` (a string)"));
            let top_k = input.top_k.unwrap_or(5).clamp(1, 100);
            let r = rpc!(
                search,
                v1::MemorySearchRequest {
                    scope,
                    scope_id,
                    query,
                    top_k: u32::try_from(top_k).unwrap_or(5),
                }
            );
            Answer::Hits {
                hits: r
                    .hits
                    .into_iter()
                    .map(|h| Hit {
                        entry: h.entry.map(Entry::from),
                        score: h.score,
                    })
                    .collect(),
            }
        }
    };
    Ok(Ok(out))
}
