//! `mcp-server`: a local MCP server for the `mcp` scenario, so the bridge can be measured
//! against a server whose own cost is small and known, and the same server called directly.
//!
//! One tool, `echo {text}` (read-only, idempotent), answering the text as one text block. It is
//! served over streamable HTTP at `/mcp` with the MCP bridge's own layers
//! ([`weft_mcp_face::streamable`]: rmcp's service with the face's default `Host` rules,
//! in-memory sessions), inside axum, like the conformance fixture server.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use axum::serve::ListenerExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cli::McpServerArgs;
use crate::upstream::shutdown_signal;

/// The one tool's name.
pub const ECHO: &str = "echo";

/// The handler; rmcp clones it per session, the clones share the tool and the call count.
#[derive(Clone)]
struct Echo {
    tool: Arc<Tool>,
    calls: Arc<AtomicU64>,
}

fn echo_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {"text": {"type": "string", "description": "the text to answer"}},
        "required": ["text"]
    });
    let schema = match schema {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    Tool::new(ECHO, "Answers the text it is given.", Arc::new(schema)).with_annotations(
        ToolAnnotations::new()
            .read_only(true)
            .idempotent(true)
            .open_world(false),
    )
}

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("weft-loadtest-mcp-server", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![(*self.tool).clone()]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == ECHO).then(|| (*self.tool).clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != ECHO {
            return Err(ErrorData::invalid_params(
                format!("no tool `{}`; this server has only `{ECHO}`", request.name),
                None,
            ));
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        let text = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(Value::as_str);
        Ok(match text {
            Some(t) => CallToolResult::success(vec![ContentBlock::text(t.to_owned())]),
            None => CallToolResult::error(vec![ContentBlock::text(
                "`text` (a string) is required".to_owned(),
            )]),
        }
        .into())
    }
}

pub async fn run(args: &McpServerArgs) -> anyhow::Result<()> {
    let calls = Arc::new(AtomicU64::new(0));
    let handler = Echo {
        tool: Arc::new(echo_tool()),
        calls: calls.clone(),
    };
    let shutdown = CancellationToken::new();
    let service = weft_mcp_face::streamable(
        handler,
        &weft_config::McpServerFaceConfig::default(),
        None,
        shutdown.clone(),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("read the bound address")?;
    // TCP_NODELAY, as on every socket weft opens: rmcp writes a response's SSE frames one by
    // one, and with Nagle the second small write waits for the client's delayed ACK (~40 ms).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let url = format!("http://{addr}/mcp");
    eprintln!("mcp-server: serving {url} (tool `{ECHO}`)");
    if let Some(path) = &args.ready_file {
        write_ready(path, &url, &addr.to_string())?;
    }
    let stop = shutdown.clone();
    let server = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .into_future();
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => r.context("serve")?,
        r = shutdown_signal() => {
            r?;
            shutdown.cancel();
        }
    }
    eprintln!(
        "mcp-server: stopping after {} calls",
        calls.load(Ordering::Relaxed)
    );
    Ok(())
}

fn write_ready(path: &Path, url: &str, addr: &str) -> anyhow::Result<()> {
    let doc = json!({"url": url, "addr": addr});
    // Write then rename, so a script polling for the file never reads half of it.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{doc}\n")).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_echo_tool_is_read_only_and_needs_text() {
        let t = echo_tool();
        assert_eq!(t.name, ECHO);
        let a = t.annotations.unwrap();
        assert_eq!(a.read_only_hint, Some(true));
        assert_eq!(a.idempotent_hint, Some(true));
        assert_eq!(t.input_schema["required"], json!(["text"]));
    }
}
