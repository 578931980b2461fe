//! MCP tools: the tools of the external MCP servers a run's agent mounts (`mcp_servers`), as
//! `mcp__<server>__<tool>`, called through the MCP bridge (`weft.v1.McpBridge`).
//!
//! Which tools a run sees: for each server in the agent's `mcp_servers`, the bridge's list
//! (already narrowed by the server definition's `tools`), kept where the run's `tools` has a
//! matching entry (`mcp__<server>__<tool>` or a glob of the tool part, `mcp__github__get_*`).
//! The list is taken once per lease, at the first turn.
//!
//! The side-effect class comes from the tool's annotations: `readOnlyHint` → read-only,
//! `idempotentHint` → idempotent (both re-run on resume), anything else effectful (an
//! unfinished call becomes "outcome unknown"). Every failure — the server down, a timeout, the
//! tool's own error — is a tool result with `is_error`, never a crashed run.
//!
//! Credentials (`POST /v1/runs` `credentials`) are read from Redis and sent to the bridge with
//! each request; the bridge substitutes them into headers and redacts their values from what it
//! hands back, so they reach neither the transcript nor the model.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use weft_core::agent::AgentContent;
use weft_core::mcp::glob_matches;
use weft_core::message::ToolSpec;
use weft_proto::v1;

use super::RunHost;
use super::{Abort, Mount, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// The longest the bridge may take to list a server's tools (it gives up on the server itself
/// after `mcp_bridge.connect_timeout_ms`).
const LIST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// The longest one call through the bridge may take: above the largest `timeout_ms` a server
/// definition may have (10 minutes), which the bridge enforces.
const CALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(660);

/// The prefix of every MCP tool name.
pub const PREFIX: &str = "mcp__";

/// `mcp__<server>__<tool>` split into (server, tool).
pub fn split(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix(PREFIX)?.split_once("__")
}

/// Whether the run's `tools` entries let it use `server`'s `tool`.
pub fn permitted(allowed: &[String], server: &str, tool: &str) -> bool {
    allowed.iter().any(|a| match split(a) {
        Some((s, pattern)) => s == server && glob_matches(pattern, tool),
        None => false,
    })
}

/// One mounted tool.
pub struct McpTool {
    name: String,
    server: String,
    tool: String,
    spec: ToolSpec,
    class: SideEffect,
}

impl McpTool {
    fn from_info(server: &str, t: v1::McpToolInfo) -> Self {
        let name = format!("{PREFIX}{server}__{}", t.name);
        let parameters = serde_json::from_str::<Value>(&t.input_schema_json)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| serde_json::json!({"type": "object"}));
        let class = if t.read_only {
            SideEffect::ReadOnly
        } else if t.idempotent {
            SideEffect::Idempotent
        } else {
            SideEffect::Effectful
        };
        Self {
            spec: ToolSpec {
                name: name.clone(),
                description: t.description,
                parameters,
            },
            name,
            server: server.to_owned(),
            tool: t.name,
            class,
        }
    }
}

/// Mounts into `out` the tools of the agent's MCP servers that the run may use.
pub(crate) async fn mount(run: &dyn RunHost, def: &AgentContent, out: &mut Mount) {
    let allowed = &run.spec().tools;
    let servers: Vec<&String> = def
        .mcp_servers
        .iter()
        .filter(|s| {
            allowed
                .iter()
                .any(|a| split(a).is_some_and(|(server, _)| server == s.as_str()))
        })
        .collect();
    if servers.is_empty() {
        return;
    }
    let credentials = run.credentials().await;
    let client = weft_proto::transport::mcp_bridge_client(run.inner().mcp_bridge.clone());
    for server in servers {
        let msg = v1::McpListToolsRequest {
            server: server.clone(),
            credentials: credentials
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        let listed = match weft_auth::rpc::request(&run.inner().jwt, run.principal(), msg) {
            Ok(mut req) => {
                // The bridge bounds connecting and listing itself; this bounds the bridge.
                req.set_timeout(LIST_DEADLINE);
                client.clone().list_tools(req).await
            }
            Err(e) => Err(tonic::Status::internal(e.message)),
        };
        match listed {
            Ok(r) => {
                for t in r.into_inner().tools {
                    if permitted(allowed, server, &t.name) {
                        out.tools.push(Arc::new(McpTool::from_info(server, t)));
                    }
                }
            }
            Err(s) => {
                let e = weft_core::Error::from(&s);
                tracing::warn!(server = %server, error = %e.message, "mcp server could not be mounted");
                out.failed.insert(server.clone(), e.message);
            }
        }
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn side_effect(&self, _input: &Value) -> SideEffect {
        self.class
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move {
            let credentials = ctx.host().credentials().await;
            let msg = v1::McpCallToolRequest {
                server: self.server.clone(),
                tool: self.tool.clone(),
                arguments_json: if input.is_object() {
                    input.to_string()
                } else {
                    "{}".into()
                },
                credentials: credentials
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            };
            let mut req = match ctx.internal(msg) {
                Ok(r) => r,
                Err(e) => return Err(Abort::infra(e.message)),
            };
            req.set_timeout(CALL_DEADLINE);
            let mut client =
                weft_proto::transport::mcp_bridge_client(ctx.inner().mcp_bridge.clone());
            let out = match client.call_tool(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    ToolOutput {
                        text: r.text,
                        is_error: r.is_error,
                    }
                }
                Err(s) => ToolOutput::error(format!(
                    "MCP server `{}`: {}",
                    self.server,
                    weft_core::Error::from(&s).message
                )),
            };
            Ok(ToolOutcome::Done(out))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_and_globs_decide() {
        assert_eq!(
            split("mcp__github__get_issue"),
            Some(("github", "get_issue"))
        );
        assert_eq!(split("HTTP"), None);
        let allowed = vec!["mcp__github__get_*".to_owned(), "Memory".to_owned()];
        assert!(permitted(&allowed, "github", "get_issue"));
        assert!(!permitted(&allowed, "github", "delete_repo"));
        assert!(!permitted(&allowed, "gitlab", "get_issue"));
    }
}
