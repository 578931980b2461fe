//! `weft mcp --upstream <url>`: weft as a stdio MCP server for clients that launch their
//! servers (Claude Desktop, Claude Code), forwarding to a running fleet. The tools are the same
//! as on `<gateway>/mcp` ([`weft_mcp_face`]); each one is a call to the fleet's HTTP API
//! with the token from `WEFT_TOKEN` (or `--token-env`). The API is stateless, so nothing is lost
//! when the fleet restarts or a connection drops: the next call simply goes through, and a call
//! made while the fleet is down answers, as a tool error, that it is unreachable and where.
//!
//! Nothing but MCP is written to standard output; diagnostics go to standard error.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use rmcp::ServiceExt as _;
use serde_json::Value;
use weft_mcp_face::{Caller, Face, UpResponse, Upstream};

/// `weft mcp`'s flags.
#[derive(Args, Debug)]
pub struct McpArgs {
    /// The fleet's base URL (its gateway), e.g. http://127.0.0.1:8787.
    #[arg(long)]
    upstream: String,
    /// The environment variable holding the `wft_` token to act with.
    #[arg(long, default_value = "WEFT_TOKEN")]
    token_env: String,
}

/// The fleet's HTTP API over the network.
struct HttpUpstream {
    base: String,
    client: reqwest::Client,
}

impl Upstream for HttpUpstream {
    fn call(
        &self,
        method: http::Method,
        path: String,
        bearer: String,
        body: Option<Value>,
    ) -> BoxFuture<'static, Result<UpResponse, String>> {
        let url = format!("{}{path}", self.base);
        let mut req = self.client.request(method, url).bearer_auth(bearer);
        if let Some(b) = body {
            req = req.json(&b);
        }
        self.send(req)
    }

    fn call_raw(
        &self,
        method: http::Method,
        path: String,
        bearer: String,
        headers: http::HeaderMap,
        body: Option<weft_mcp_face::Bytes>,
    ) -> BoxFuture<'static, Result<UpResponse, String>> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .client
            .request(method, url)
            .bearer_auth(bearer)
            .headers(headers);
        if let Some(b) = body {
            req = req.body(b);
        }
        self.send(req)
    }
}

impl HttpUpstream {
    /// Sends `req` to the fleet; a failure to reach it says where it looked.
    fn send(&self, req: reqwest::RequestBuilder) -> BoxFuture<'static, Result<UpResponse, String>> {
        let base = self.base.clone();
        Box::pin(async move {
            let resp = req.send().await.map_err(|e| {
                let cause = std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
                format!(
                    "weft at {base} is unreachable ({cause}); is the fleet running (`weft up`), and is --upstream right?"
                )
            })?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = resp
                .bytes_stream()
                .map(|r| r.map_err(|e| format!("the answer from weft broke off: {e}")))
                .boxed();
            Ok(UpResponse {
                status,
                headers,
                body,
            })
        })
    }
}

/// Serves MCP on stdin/stdout until the client closes it.
pub async fn run(args: &McpArgs) -> ExitCode {
    let Ok(token) = std::env::var(&args.token_env) else {
        eprintln!(
            "weft mcp: set {} to a weft token (wft_…); mint one with `weft token create`",
            args.token_env
        );
        return ExitCode::from(2);
    };
    let base = args.upstream.trim_end_matches('/').to_owned();
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        eprintln!("weft mcp: --upstream must be an http:// or https:// URL, got {base:?}");
        return ExitCode::from(2);
    }
    let client = match reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .build()
    {
        Ok(c) => c,
        Err(e) => return super::fail(format!("mcp: {e}")),
    };
    // Say early (on stderr, which MCP clients show in their logs) if the fleet is not there or
    // the token is refused; keep serving either way, since the fleet may come up later.
    match client
        .get(format!("{base}/v1/me"))
        .bearer_auth(&token)
        .send()
        .await
    {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => eprintln!(
            "weft mcp: {base} refused the token (HTTP {}); calls will fail until it is valid",
            r.status().as_u16()
        ),
        Err(e) => eprintln!(
            "weft mcp: weft at {base} is unreachable ({e}); calls will fail until it is up"
        ),
    }
    let upstream: Arc<dyn Upstream> = Arc::new(HttpUpstream { base, client });
    let face = Face::for_caller(
        upstream,
        Caller {
            principal: None,
            bearer: token,
        },
    );
    let service = match face.serve(rmcp::transport::stdio()).await {
        Ok(s) => s,
        Err(e) => return super::fail(format!("mcp: the client did not start a session: {e}")),
    };
    match service.waiting().await {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => super::fail(format!("mcp: {e}")),
    }
}
