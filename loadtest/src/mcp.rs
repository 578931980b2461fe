//! The `mcp` scenario: N closed-loop workers calling the `echo` tool of an MCP server (see
//! [`crate::mcp_server`]), either
//!
//! - `--target direct`: on the server itself, one rmcp client session per worker, over
//!   streamable HTTP with a reqwest client set up as the bridge's pool sets up its own; or
//! - `--target bridge`: through weft's MCP bridge, `weft.v1.McpBridge/CallTool` over one gRPC
//!   channel, exactly as the executor's MCP tool makes the call: a fresh client on the shared
//!   channel per call, the arguments as a JSON string, no credentials, and the run's principal
//!   (tenant, subject, the scopes `dispatch.rs` gives a run) signed as an internal JWT in the
//!   `authorization` metadata. The bridge looks the definition `--server` up in the tenant and
//!   calls the server on its pooled session (one for all workers: same tenant, version and
//!   credentials).
//!
//! One more target takes the bridge apart, for profiling:
//!
//! - `--target bridge-hop`: `CallTool` with `arguments_json` `[]`, which the bridge answers with
//!   a tool error after checking the JWT and looking the definition up, before the pool: the gRPC
//!   hop and the bridge's front half, no MCP call. That answer counts as the success.
//!
//! The targets that link the bridge into the generator's process (`pool`, `bridge-in-process`)
//! are `weft-mcp-profile`'s (loadtest/mcp-profile), which runs its calls through [`measure`]
//! with its own [`EchoCall`]s, so its reports have this scenario's shape. This crate talks to a
//! running fleet only and links no service.
//!
//! A call succeeds when it answers the exact text sent (`<--text> <worker>:<n>`) and is no tool
//! error. Latency is from sending the call to its result. Time is a warm-up (calls made, not
//! recorded, but counted in `calls_incl_warmup` so a script can divide a process's CPU time over
//! the whole run by it) and then the measured window.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::future::BoxFuture;
use hdrhistogram::Histogram;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ContentBlock, Implementation,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt as _};
use serde::Serialize;
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;
use weft_api::base::Scope;
use weft_auth::Principal;
use weft_proto::transport::GrpcTransport;
use weft_proto::v1;

use crate::cli::{McpArgs, McpCallerArgs, McpLoadArgs, McpTarget};
use crate::mcp_server::ECHO;
use crate::report::{Failure, Failures, Summary, histogram, micros};

/// After a failed call a worker waits this long before its next one.
const BACKOFF: Duration = Duration::from_millis(20);
/// What the bridge answers (as a tool error) to arguments that are not a JSON object
/// (`services/mcp-bridge/src/grpc.rs`): the `bridge-hop` target's expected answer.
const NOT_AN_OBJECT: &str = "the tool's arguments must be a JSON object";

/// The client side of a direct session: declares what the bridge's pool declares (no
/// capabilities).
#[derive(Clone)]
pub struct BenchClient;

impl ClientHandler for BenchClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("weft-loadtest", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// What the bridge calls need, shared by every worker.
pub struct BridgeCaller {
    transport: GrpcTransport,
    jwt: weft_auth::InternalJwt,
    principal: Principal,
    server: String,
    /// `bridge-hop`: send `[]` as the arguments and expect the bridge's refusal.
    hop: bool,
}

impl BridgeCaller {
    /// As `McpTool::call` in the executor: a request with the internal JWT, a client on the
    /// shared transport, `CallTool`.
    async fn echo(&self, text: &str) -> Result<String, Failure> {
        let msg = v1::McpCallToolRequest {
            server: self.server.clone(),
            tool: ECHO.to_owned(),
            arguments_json: if self.hop {
                "[]".to_owned()
            } else {
                json!({"text": text}).to_string()
            },
            credentials: Default::default(),
        };
        let mut req = tonic::Request::new(msg);
        let token = self
            .jwt
            .sign(&self.principal)
            .map_err(|e| Failure::new("sign", Some(e.message)))?;
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| Failure::new("sign", Some("not a header value".into())))?;
        req.metadata_mut().insert("authorization", value);
        let mut client = weft_proto::transport::mcp_bridge_client(self.transport.clone());
        match client.call_tool(req).await {
            Ok(r) => {
                let r = r.into_inner();
                if self.hop && r.is_error && r.text == NOT_AN_OBJECT {
                    // The refusal expected: the call went through the bridge's front half.
                    Ok(text.to_owned())
                } else if r.is_error {
                    Err(Failure::new("tool_error", Some(r.text)))
                } else {
                    Ok(r.text)
                }
            }
            Err(s) => Err(Failure::new(
                format!("grpc_{}", grpc_code_name(s.code())),
                Some(s.message().to_owned()),
            )),
        }
    }
}

fn grpc_code_name(code: tonic::Code) -> String {
    format!("{code:?}").to_lowercase()
}

/// A way to the `echo` tool defined outside this crate (`weft-mcp-profile`'s in-process
/// targets): answers the tool's text, or the failure.
pub trait EchoCall: Send + Sync {
    fn echo<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<String, Failure>>;
}

/// One worker's way to the tool.
pub enum Caller {
    Direct(RunningService<RoleClient, BenchClient>),
    Bridge(Arc<BridgeCaller>),
    Other(Arc<dyn EchoCall>),
}

impl Caller {
    async fn echo(&self, text: &str) -> Result<String, Failure> {
        match self {
            Self::Direct(session) => {
                let mut args = serde_json::Map::new();
                args.insert("text".into(), text.into());
                let params = CallToolRequestParams::new(ECHO).with_arguments(args);
                let r = session
                    .peer()
                    .call_tool(params)
                    .await
                    .map_err(|e| Failure::new("call", Some(e.to_string())))?;
                let out = r
                    .content
                    .iter()
                    .map(|b| match b {
                        ContentBlock::Text(t) => t.text.clone(),
                        other => serde_json::to_string(other).unwrap_or_default(),
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                if r.is_error.unwrap_or(false) {
                    Err(Failure::new("tool_error", Some(out)))
                } else {
                    Ok(out)
                }
            }
            Self::Bridge(b) => b.echo(text).await,
            Self::Other(o) => o.echo(text).await,
        }
    }

    /// One timed call that must answer `text`.
    async fn timed(&self, text: &str, timeout: Duration) -> Result<Duration, Failure> {
        let t = Instant::now();
        match tokio::time::timeout(timeout, self.echo(text)).await {
            Err(_) => Err(Failure::new("timeout", None)),
            Ok(Err(f)) => Err(f),
            Ok(Ok(got)) if got == text => Ok(t.elapsed()),
            Ok(Ok(got)) => Err(Failure::new(
                "mismatch",
                Some(format!("sent {text:?}, got {got:?}")),
            )),
        }
    }

    async fn close(self) {
        if let Self::Direct(session) = self {
            // Ends the session on the server too (DELETE on the session id).
            let _ = session.cancel().await;
        }
    }
}

/// The JSON report.
#[derive(Debug, Serialize)]
pub struct McpReport {
    pub scenario: &'static str,
    /// `direct`, `bridge` or `bridge-hop`; `pool` or `bridge-in-process` from
    /// `weft-mcp-profile`.
    pub target: &'static str,
    /// The MCP server's URL (direct, pool), the bridge's (bridge, bridge-hop) or the
    /// substrate's (bridge-in-process).
    pub url: String,
    /// The server definition called through the bridge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    pub tool: &'static str,
    pub concurrency: u32,
    /// MCP sessions the generator opened itself (direct: one per worker; otherwise none: the
    /// pool, here or in the bridge, holds one session for all workers).
    pub sessions: u32,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub threads: u16,
    /// Measured calls, successes and errors.
    pub calls: u64,
    pub errors: u64,
    pub error_kinds: BTreeMap<String, u64>,
    pub error_samples: BTreeMap<String, String>,
    /// Successful calls per second of `duration_s`.
    pub calls_per_s: f64,
    /// Calls made over warm-up and window together (successful or not), the preflight call
    /// included.
    pub calls_incl_warmup: u64,
    /// Successful calls: from sending the call to its result, in µs.
    pub latency_us: Option<Summary>,
    /// The generator's own CPU time (user + system) over the whole run, from
    /// `/proc/self/stat`, and per call made.
    pub generator_cpu_s: Option<f64>,
    pub generator_cpu_us_per_call: Option<f64>,
}

fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

async fn open_direct(url: &str, sessions: u32) -> anyhow::Result<Vec<Caller>> {
    // Set up as the bridge's pool sets up its client (minus its address-checking resolver,
    // which a literal 127.0.0.1 never reaches).
    let http = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("build the HTTP client")?;
    let mut out = Vec::new();
    for i in 0..sessions {
        let transport = StreamableHttpClientTransport::with_client(
            http.clone(),
            StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
        );
        let session = BenchClient
            .serve(transport)
            .await
            .with_context(|| format!("open MCP session {} of {sessions} with {url}", i + 1))?;
        out.push(Caller::Direct(session));
    }
    Ok(out)
}

/// The principal a run carries (services/executor/src/dispatch.rs), written in the public
/// contract's terms and read back as `weft_auth`'s (its fields are the internal JWT's claims).
#[derive(Serialize)]
struct RunPrincipal<'a> {
    tenant: &'a str,
    subject: &'a str,
    scopes: [Scope; 9],
}

fn run_principal(args: &McpCallerArgs) -> anyhow::Result<Principal> {
    let p = RunPrincipal {
        tenant: &args.tenant,
        subject: &args.subject,
        scopes: Scope::RUN,
    };
    serde_json::to_value(&p)
        .and_then(serde_json::from_value)
        .with_context(|| format!("--tenant `{}`", args.tenant))
}

/// Calls to the bridge's gRPC service on `transport` (a channel to a running bridge, or
/// `weft-mcp-profile`'s in-process one), signed with `--jwt-secret`; with `hop`, the
/// `bridge-hop` call.
pub fn bridge_caller(
    args: &McpCallerArgs,
    transport: GrpcTransport,
    hop: bool,
) -> anyhow::Result<Arc<BridgeCaller>> {
    let secret = jwt_secret(args)?;
    Ok(Arc::new(BridgeCaller {
        transport,
        jwt: weft_auth::InternalJwt::from_secret(secret.as_bytes()),
        principal: run_principal(args)?,
        server: args.server.clone(),
        hop,
    }))
}

/// `--jwt-secret`, which the bridge calls need.
pub fn jwt_secret(args: &McpCallerArgs) -> anyhow::Result<&str> {
    args.jwt_secret
        .as_deref()
        .filter(|s| !s.is_empty())
        .context("the bridge targets need --jwt-secret (or WEFT_LOADTEST_JWT_SECRET): the fleet's auth.internal_jwt_secret")
}

/// What [`measure`] runs: the workers' callers and what the report says about them.
pub struct Setup {
    pub target: &'static str,
    /// See [`McpReport::url`].
    pub url: String,
    pub server: Option<String>,
    /// See [`McpReport::sessions`].
    pub sessions: u32,
    /// One per worker.
    pub callers: Vec<Caller>,
    /// The process's CPU seconds before the set-up ([`crate::cpu::self_seconds`]).
    pub cpu0: Option<f64>,
}

pub async fn run(args: &McpArgs) -> anyhow::Result<McpReport> {
    let cpu0 = crate::cpu::self_seconds();
    let setup = match args.target {
        McpTarget::Direct => {
            let url = args.url.clone().context("--target direct needs --url")?;
            eprintln!(
                "mcp: opening {} MCP session(s) with {url}",
                args.load.concurrency
            );
            Setup {
                target: "direct",
                callers: open_direct(&url, args.load.concurrency).await?,
                url,
                server: None,
                sessions: args.load.concurrency,
                cpu0,
            }
        }
        McpTarget::Bridge | McpTarget::BridgeHop => {
            let url = args
                .bridge_url
                .clone()
                .context("--target bridge needs --bridge-url")?;
            let transport =
                weft_proto::transport::channel(&url).map_err(|e| anyhow::anyhow!("{e}"))?;
            let b = bridge_caller(&args.caller, transport, args.target == McpTarget::BridgeHop)?;
            Setup {
                target: if args.target == McpTarget::BridgeHop {
                    "bridge-hop"
                } else {
                    "bridge"
                },
                callers: (0..args.load.concurrency)
                    .map(|_| Caller::Bridge(b.clone()))
                    .collect(),
                url,
                server: Some(args.caller.server.clone()),
                sessions: 0,
                cpu0,
            }
        }
    };
    measure(&args.load, setup).await
}

/// The closed loop over `setup.callers`: a preflight call, the warm-up, the measured window.
pub async fn measure(load: &McpLoadArgs, setup: Setup) -> anyhow::Result<McpReport> {
    let Setup {
        target,
        url,
        server,
        sessions,
        callers,
        cpu0,
    } = setup;
    let args = load;
    let sent = Arc::new(AtomicU64::new(0));
    if !args.no_preflight
        && let Some(first) = callers.first()
    {
        sent.fetch_add(1, Ordering::Relaxed);
        if let Err(f) = first
            .timed(&format!("{} preflight", args.text), args.timeout)
            .await
        {
            anyhow::bail!(
                "the preflight call to `{ECHO}` failed ({}){}",
                f.kind,
                f.detail.map(|d| format!(": {d}")).unwrap_or_default()
            );
        }
    }
    eprintln!(
        "mcp: {target} → {url}, concurrency {} for {:?} after {:?} warm-up",
        args.concurrency, args.duration, args.warmup
    );
    let t0 = Instant::now();
    let measure_start = t0 + args.warmup;
    let end = measure_start + args.duration;
    let shared = Arc::new(Mutex::new((histogram()?, Failures::default())));
    let mut tasks = JoinSet::new();
    for (w, caller) in callers.into_iter().enumerate() {
        let (sent, shared) = (sent.clone(), shared.clone());
        let (prefix, timeout) = (args.text.clone(), args.timeout);
        tasks.spawn(async move {
            let mut hist = histogram()?;
            let mut failures = Failures::default();
            let mut n: u64 = 0;
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                n += 1;
                let text = format!("{prefix} {w}:{n}");
                let outcome = caller.timed(&text, timeout).await;
                sent.fetch_add(1, Ordering::Relaxed);
                let failed = outcome.is_err();
                if now >= measure_start {
                    match outcome {
                        Ok(d) => hist.saturating_record(micros(d).max(1)),
                        Err(f) => failures.add(f),
                    }
                }
                if failed {
                    tokio::time::sleep(BACKOFF).await;
                }
            }
            caller.close().await;
            let mut into = shared
                .lock()
                .map_err(|_| anyhow::anyhow!("the recorder lock was poisoned"))?;
            into.0.add(&hist).context("merge histograms")?;
            for (kind, count) in failures.counts() {
                for _ in 0..*count {
                    into.1.add(Failure::new(
                        kind.clone(),
                        failures.samples().get(kind).cloned(),
                    ));
                }
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a load worker failed")??;
    }
    let window = Instant::now().saturating_duration_since(measure_start);
    let cpu = cpu0
        .zip(crate::cpu::self_seconds())
        .map(|(a, b)| (b - a).max(0.0));
    let rec = shared
        .lock()
        .map_err(|_| anyhow::anyhow!("the recorder lock was poisoned"))?;
    let (hist, failures): &(Histogram<u64>, Failures) = &rec;
    let seconds = window.as_secs_f64().max(f64::EPSILON);
    let ok = hist.len();
    let calls_incl_warmup = sent.load(Ordering::Relaxed);
    Ok(McpReport {
        scenario: "mcp",
        target,
        url,
        server,
        tool: ECHO,
        concurrency: args.concurrency,
        sessions,
        warmup_s: round(args.warmup.as_secs_f64(), 3),
        duration_s: round(seconds, 3),
        threads: args.threads,
        calls: ok + failures.total(),
        errors: failures.total(),
        error_kinds: failures.counts().clone(),
        error_samples: failures.samples().clone(),
        calls_per_s: round(ok as f64 / seconds, 1),
        calls_incl_warmup,
        latency_us: Summary::of(hist),
        generator_cpu_s: cpu.map(|c| round(c, 3)),
        generator_cpu_us_per_call: cpu
            .filter(|_| calls_incl_warmup > 0)
            .map(|c| round(c * 1e6 / calls_incl_warmup as f64, 1)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(tenant: &str) -> McpCallerArgs {
        McpCallerArgs {
            server: "bench".into(),
            jwt_secret: Some("s".into()),
            tenant: tenant.into(),
            subject: "me".into(),
        }
    }

    #[test]
    fn bridge_calls_are_made_as_a_run() {
        let p = serde_json::to_value(run_principal(&caller("default")).unwrap()).unwrap();
        assert_eq!(p["tenant"], "default");
        assert_eq!(p["subject"], "me");
        assert_eq!(
            p["scopes"],
            serde_json::json!([
                "runs:create",
                "runs:read",
                "memory:read",
                "memory:write",
                "channels:publish",
                "channels:read",
                "llm:call",
                "volumes:read",
                "volumes:write"
            ])
        );
        let e = run_principal(&caller("Bad Tenant")).unwrap_err();
        assert!(format!("{e:#}").contains("is not valid"), "{e:#}");
        assert!(
            jwt_secret(&McpCallerArgs {
                jwt_secret: Some(String::new()),
                ..caller("default")
            })
            .is_err()
        );
    }
}
