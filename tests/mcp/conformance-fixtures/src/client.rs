//! `weft-mcp-conformance-client <url>`: the MCP conformance suite's client under test, which is
//! the MCP bridge's own client — [`weft_mcp_bridge::pool::Pool`] with an `http` server
//! definition pointing at the suite's mock server — doing what a run does with a mounted
//! server: open a session, list the tools, call tools.
//!
//! The suite starts one mock server per scenario, names the scenario in
//! `MCP_CONFORMANCE_SCENARIO`, may pass `MCP_CONFORMANCE_CONTEXT` (JSON; `toolCalls` names the
//! calls to make) and appends the server's URL to the command line. Without `toolCalls` the
//! client calls every tool listed, with arguments made from each tool's input schema (what a
//! model would do with a tool it was given); `initialize` only opens the session, `sse-retry`
//! calls the scenario's `test_reconnection` (a second after the session opened, see below), and `json-schema-2020-12-preservation` hands the
//! focal tool's schema, as the bridge received it, to the scenario's echo tool.
//!
//! The bridge's client answers server requests as the bridge does for unattended runs: it
//! declares no sampling, elicitation or roots capability, declines elicitations, and
//! authenticates with the definition's static headers only (no OAuth). Exit status: 0 when the
//! session opened, the list arrived and every call got a result (a tool error is a result).
//! A test fixture only: this package is no dependency of any production crate.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Map, Value, json};
use weft_core::mcp::{McpServerContent, McpTransport};
use weft_mcp_bridge::pool::{Pool, ServerRef};

/// Arguments for a tool from its input schema: each required property gets a plain value of
/// its type.
fn arguments_for(schema: &Map<String, Value>) -> Map<String, Value> {
    let mut args = Map::new();
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        let ty = &schema["properties"][name]["type"];
        let value = match ty.as_str() {
            Some("integer") => json!(2),
            Some("number") => json!(3),
            Some("boolean") => json!(true),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => json!("test"),
        };
        args.insert(name.to_owned(), value);
    }
    args
}

async fn run(url: String, scenario: &str, context: &Value) -> Result<(), String> {
    let cfg = weft_config::McpBridgeConfig {
        // The suite's mock servers listen on localhost.
        private_exempt: vec!["127.0.0.1/32".into(), "::1/128".into()],
        connect_timeout_ms: 5_000,
        call_timeout_ms: 20_000,
        ..Default::default()
    };
    let pool = Pool::new(cfg).map_err(|e| e.to_string())?;
    let content = McpServerContent {
        description: "the MCP conformance suite's mock server".into(),
        transport: McpTransport::Http,
        url: Some(url),
        ..Default::default()
    };
    let server = ServerRef {
        tenant: "conformance",
        name: "suite",
        version: "1",
        content: &content,
    };
    let credentials = BTreeMap::new();
    let tools = pool
        .list_tools(&server, &credentials)
        .await
        .map_err(|e| format!("tools/list: {e}"))?;
    println!(
        "tools: {}",
        tools
            .iter()
            .map(|t| t.name.as_ref())
            .collect::<Vec<_>>()
            .join(", ")
    );

    let calls: Vec<(String, Map<String, Value>)> =
        if let Some(calls) = context["toolCalls"].as_array() {
            calls
                .iter()
                .filter_map(|c| {
                    Some((
                        c["name"].as_str()?.to_owned(),
                        c["arguments"].as_object().cloned().unwrap_or_default(),
                    ))
                })
                .collect()
        } else {
            match scenario {
                "initialize" => Vec::new(),
                "sse-retry" => vec![("test_reconnection".into(), Map::new())],
                // Hand back the focal tool's schema as the bridge received it, to show what the
                // bridge keeps of JSON Schema 2020-12 (it forwards these schemas to the model).
                "json-schema-2020-12-preservation" => tools
                    .iter()
                    .filter(|t| t.name == "json_schema_2020_12_tool")
                    .map(|t| {
                        let mut args = Map::new();
                        args.insert("schema".into(), Value::Object((*t.input_schema).clone()));
                        ("json_schema_echo".to_owned(), args)
                    })
                    .collect(),
                _ => tools
                    .iter()
                    .map(|t| (t.name.to_string(), arguments_for(&t.input_schema)))
                    .collect(),
            }
        };
    if scenario == "sse-retry" {
        // The scenario closes the tool's POST stream 50 ms into the call and times the *last*
        // GET it sees against its `retry: 500`; any GET that arrives while the call is pending
        // gets the result. The session's standalone GET stream is opened by a background task
        // after `initialized`: on a loaded machine it can arrive only after the call started,
        // take the result, and end the call before the POST stream's own reconnection (which
        // then never happens), so the scenario times the standalone GET as a reconnection that
        // came too early (CI saw -47 ms, one GET, no Last-Event-ID). Giving the standalone
        // stream time to open first leaves the reconnection as the only GET during the call.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut failed = 0;
    for (tool, args) in calls {
        match pool
            .call_tool(&server, &credentials, &tool, args, Duration::from_secs(20))
            .await
        {
            Ok(result) => println!(
                "{tool}: {}",
                serde_json::to_string(&result).unwrap_or_default()
            ),
            Err(e) => {
                eprintln!("{tool}: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        return Err(format!("{failed} call(s) failed"));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: weft-mcp-conformance-client URL (scenario in MCP_CONFORMANCE_SCENARIO)");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    match run(url, &scenario, &context).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft-mcp-conformance-client ({scenario}): {e}");
            ExitCode::FAILURE
        }
    }
}
