//! An executor killed in the middle of MCP calls: the run resumes on another executor, where
//! the read-only call (`readOnlyHint`) is run again and the effectful one comes back as
//! "outcome unknown" — never repeated. The MCP server is an rmcp server in this test whose
//! tools block until released and count their calls; the MCP bridge is served in this test as
//! its own gRPC server, as `weft-mcp-bridge` would be; the executors are `weft executor`
//! processes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Proc, TestFleet, executor_process};
use futures::StreamExt as _;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// An MCP server whose two tools block until `release` turns true, recording each call.
#[derive(Clone)]
struct Blocker {
    calls: Arc<Mutex<Vec<String>>>,
    release: Arc<tokio::sync::watch::Sender<bool>>,
}

impl ServerHandler for Blocker {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, rmcp::ErrorData> {
        let schema = Arc::new(json!({"type": "object"}).as_object().unwrap().clone());
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("block_read", "reads, slowly", schema.clone())
                .with_annotations(ToolAnnotations::new().read_only(true)),
            Tool::new("block_write", "writes, slowly", schema)
                .with_annotations(ToolAnnotations::new().read_only(false).destructive(true)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        self.calls.lock().unwrap().push(request.name.to_string());
        let mut rx = self.release.subscribe();
        let _ = rx.wait_for(|released| *released).await;
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{} released",
            request.name
        ))])
        .into())
    }
}

fn executor(f: &TestFleet, bridge: std::net::SocketAddr) -> Proc {
    executor_process(
        f,
        &[("WEFT_EXECUTOR__MCP_BRIDGE_URL", format!("http://{bridge}"))],
    )
}

/// Waits (bounded) until `cond` holds.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn killing_an_executor_mid_mcp_call_reruns_the_read_and_not_the_write() {
    let f = TestFleet::start_with(|c| {
        c.executor.embedded = false;
        c.mcp_bridge.private_exempt = vec!["127.0.0.1/32".into()];
    })
    .await;
    let stop = CancellationToken::new();
    let _stop_on_drop = stop.clone().drop_guard();

    // The MCP server.
    let (release, _) = tokio::sync::watch::channel(false);
    let blocker = Blocker {
        calls: Arc::default(),
        release: Arc::new(release),
    };
    let face = weft_mcp_face::streamable(
        blocker.clone(),
        &weft_config::McpServerFaceConfig::default(),
        None,
        stop.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mcp_addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route_service("/mcp", face);
    let serve_stop = stop.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(serve_stop.cancelled_owned())
            .await
            .unwrap();
    });

    // The MCP bridge, as its own gRPC server.
    let substrate =
        weft_proto::transport::channel(&format!("http://{}", f.fleet.substrate_addr)).unwrap();
    let bridge = weft_mcp_bridge::Bridge::new(&f.config, substrate).unwrap();
    let jwt = weft_auth::InternalJwt::from_secret(
        f.config
            .auth
            .internal_jwt_secret
            .as_ref()
            .unwrap()
            .expose()
            .as_bytes(),
    );
    let bridge_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bridge_addr = bridge_listener.local_addr().unwrap();
    tokio::spawn(weft_mcp_bridge::serve(
        bridge_listener,
        bridge,
        jwt,
        weft_telemetry::health::Readiness::new(stop.clone()),
        stop.clone(),
    ));

    let (s, body) = f
        .put(
            "/v1/mcp-servers/blocker",
            &f.admin,
            json!({"url": format!("http://{mcp_addr}/mcp")}),
        )
        .await;
    assert_eq!(s, 201, "{body}");
    let (s, body) = f
        .put(
            "/v1/agents/mcp-worker",
            &f.admin,
            json!({"model": "mock-1", "mcp_servers": ["blocker"], "tools": ["mcp__blocker__*"]}),
        )
        .await;
    assert!(s == 201 || s == 200, "{body}");

    let a = executor(&f, bridge_addr);
    let b = executor(&f, bridge_addr);
    let script = json!({
        "turns": [[
            {"name": "mcp__blocker__block_write", "input": {}},
            {"name": "mcp__blocker__block_read", "input": {}}
        ]],
        "reply": "done"
    });
    let (s, r) = f
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": "mcp-worker", "input": format!("#mock {script}")}),
        )
        .await;
    assert_eq!(s, 201, "{r}");
    let run = r["run_id"].as_str().unwrap().to_owned();

    // Both calls are in flight at the MCP server: kill the executor that holds the run.
    until("both calls reach the MCP server", || {
        blocker.calls.lock().unwrap().len() >= 2
    })
    .await;
    let pool = sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap();
    let owner: Option<String> = sqlx::query_scalar("SELECT lease_owner FROM runs WHERE id = $1")
        .bind(uuid::Uuid::parse_str(&run).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    let owner = owner.expect("an executor holds the run mid-call");
    let (mut victim, _survivor) = if owner.starts_with(&format!("executor-{}-", a.0.id())) {
        (a, b)
    } else {
        (b, a)
    };
    victim.0.kill().unwrap();
    victim.0.wait().unwrap();
    // The calls may now finish at the server; the dead executor never records their results.
    blocker.release.send_replace(true);

    // The survivor finishes the run.
    let r = common::open_stream(&f, &run).await;
    let mut events = eventsource_stream::EventStream::new(r.bytes_stream());
    let mut results: Vec<Value> = Vec::new();
    let finished = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = events.next().await {
            let ev = ev.unwrap();
            let data: Value = serde_json::from_str(&ev.data).unwrap();
            if ev.event == "tool_result" {
                results.push(data["data"].clone());
            }
            if ev.event == "run_finished" {
                return data["data"].clone();
            }
        }
        panic!("the run's stream ended without run_finished");
    })
    .await
    .expect("the run finishes on the survivor");
    assert_eq!(finished["status"], "succeeded", "{finished}");

    let write = results
        .iter()
        .find(|r| r["name"] == "mcp__blocker__block_write")
        .expect("the write has a result");
    assert_eq!(write["is_error"], true, "{write}");
    assert!(
        write["content"]
            .as_str()
            .unwrap()
            .contains("outcome of this"),
        "{write}"
    );
    let read = results
        .iter()
        .find(|r| r["name"] == "mcp__blocker__block_read")
        .expect("the read has a result");
    assert_eq!(read["is_error"], false, "{read}");
    assert_eq!(read["content"], "block_read released", "{read}");

    let calls = blocker.calls.lock().unwrap().clone();
    let count = |name: &str| calls.iter().filter(|c| *c == name).count();
    assert_eq!(
        count("block_write"),
        1,
        "the effectful call ran again: {calls:?}"
    );
    assert_eq!(
        count("block_read"),
        2,
        "the read-only call was not re-run: {calls:?}"
    );
}
