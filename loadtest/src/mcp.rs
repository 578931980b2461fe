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
//! Two more targets take the bridge apart, for profiling:
//!
//! - `--target pool`: the bridge's own session pool ([`weft_mcp_bridge::pool::Pool`]) in this
//!   process, with a definition made here, answering through the bridge's `result_text`: the
//!   bridge's MCP half without gRPC, JWT or definition lookups.
//! - `--target bridge-hop`: `CallTool` with `arguments_json` `[]`, which the bridge answers with
//!   a tool error after checking the JWT and looking the definition up, before the pool: the gRPC
//!   hop and the bridge's front half, no MCP call. That answer counts as the success.
//!
//! And `--target bridge-in-process` measures the arrangement `weft up` runs: the bridge in the
//! caller's process (here the generator's), its gRPC service called through
//! `weft_proto::transport::in_process` (same codec and JWT check, no socket), with definitions
//! read from `--substrate-url`.
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
use weft_core::mcp::{McpServerContent, McpTransport};
use weft_core::{Principal, Scope, Scopes, TenantId};
use weft_mcp_bridge::pool::{Pool, ServerRef};
use weft_proto::transport::GrpcTransport;
use weft_proto::v1;

use crate::cli::{McpArgs, McpTarget};
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
struct BenchClient;

impl ClientHandler for BenchClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("weft-loadtest", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// What the bridge calls need, shared by every worker.
struct BridgeCaller {
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

/// The bridge's session pool in this process (`--target pool`), called as `grpc.rs` calls it.
struct PoolCaller {
    pool: Pool,
    content: McpServerContent,
    timeout: Duration,
    max_result_bytes: usize,
}

impl PoolCaller {
    async fn echo(&self, text: &str) -> Result<String, Failure> {
        let server = ServerRef {
            tenant: "default",
            name: "bench",
            version: "bench",
            content: &self.content,
        };
        let mut args = serde_json::Map::new();
        args.insert("text".into(), text.into());
        let r = self
            .pool
            .call_tool(&server, &BTreeMap::new(), ECHO, args, self.timeout)
            .await
            .map_err(|e| Failure::new("pool", Some(e.to_string())))?;
        let out = weft_mcp_bridge::grpc::result_text(&r, self.max_result_bytes);
        if r.is_error.unwrap_or(false) {
            Err(Failure::new("tool_error", Some(out)))
        } else {
            Ok(out)
        }
    }
}

/// One worker's way to the tool.
enum Caller {
    Direct(RunningService<RoleClient, BenchClient>),
    Bridge(Arc<BridgeCaller>),
    Pool(Arc<PoolCaller>),
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
            Self::Pool(p) => p.echo(text).await,
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
    /// `direct`, `bridge`, `pool`, `bridge-hop` or `bridge-in-process`.
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

fn pool_caller(args: &McpArgs, url: &str) -> anyhow::Result<Arc<PoolCaller>> {
    let cfg = weft_config::McpBridgeConfig {
        private_exempt: vec!["127.0.0.1/32".into(), "::1/128".into()],
        ..Default::default()
    };
    let max_result_bytes = cfg.max_result_bytes;
    Ok(Arc::new(PoolCaller {
        pool: Pool::new(cfg).map_err(|e| anyhow::anyhow!("the bridge's pool: {e}"))?,
        max_result_bytes,
        content: McpServerContent {
            description: "weft-loadtest mcp".into(),
            transport: McpTransport::Http,
            url: Some(url.to_owned()),
            ..Default::default()
        },
        timeout: args.timeout,
    }))
}

/// `--target bridge-in-process`: the transport `weft up` gives its executor, to a bridge living
/// in this process.
fn in_process_bridge(args: &McpArgs, secret: &str) -> anyhow::Result<GrpcTransport> {
    let substrate_url = args
        .substrate_url
        .as_deref()
        .context("--target bridge-in-process needs --substrate-url")?;
    let mut config = weft_config::Config::default();
    config.mcp_bridge.private_exempt = args.private_exempt.clone();
    let substrate =
        weft_proto::transport::channel(substrate_url).map_err(|e| anyhow::anyhow!("{e}"))?;
    let bridge = weft_mcp_bridge::Bridge::new(&config, substrate)
        .map_err(|e| anyhow::anyhow!("the in-process bridge: {e}"))?;
    let jwt = weft_auth::InternalJwt::from_secret(secret.as_bytes());
    Ok(weft_proto::transport::in_process(bridge.grpc_service(jwt)))
}

fn bridge_caller(args: &McpArgs, url: &str) -> anyhow::Result<Arc<BridgeCaller>> {
    let secret = args
        .jwt_secret
        .as_deref()
        .filter(|s| !s.is_empty())
        .context("--target bridge needs --jwt-secret (or WEFT_LOADTEST_JWT_SECRET): the fleet's auth.internal_jwt_secret")?;
    let tenant = TenantId::parse(&args.tenant).map_err(|e| anyhow::anyhow!(e.message))?;
    let transport = if args.target == McpTarget::BridgeInProcess {
        in_process_bridge(args, secret)?
    } else {
        weft_proto::transport::channel(url).map_err(|e| anyhow::anyhow!("{e}"))?
    };
    Ok(Arc::new(BridgeCaller {
        transport,
        jwt: weft_auth::InternalJwt::from_secret(secret.as_bytes()),
        // The principal a run carries (services/executor/src/dispatch.rs).
        principal: Principal {
            tenant,
            subject: args.subject.clone(),
            scopes: Scopes::new([
                Scope::RunsCreate,
                Scope::RunsRead,
                Scope::LlmCall,
                Scope::MemoryRead,
                Scope::MemoryWrite,
                Scope::ChannelsPublish,
                Scope::ChannelsRead,
            ]),
            token_id: None,
            agent: None,
        },
        server: args.server.clone(),
        hop: args.target == McpTarget::BridgeHop,
    }))
}

pub async fn run(args: &McpArgs) -> anyhow::Result<McpReport> {
    let cpu0 = crate::cpu::self_seconds();
    let (callers, url) = match args.target {
        McpTarget::Direct => {
            let url = args.url.clone().context("--target direct needs --url")?;
            eprintln!(
                "mcp: opening {} MCP session(s) with {url}",
                args.concurrency
            );
            (open_direct(&url, args.concurrency).await?, url)
        }
        McpTarget::Pool => {
            let url = args.url.clone().context("--target pool needs --url")?;
            let p = pool_caller(args, &url)?;
            let callers = (0..args.concurrency)
                .map(|_| Caller::Pool(p.clone()))
                .collect();
            (callers, url)
        }
        McpTarget::Bridge | McpTarget::BridgeHop | McpTarget::BridgeInProcess => {
            let url = if args.target == McpTarget::BridgeInProcess {
                args.substrate_url
                    .clone()
                    .context("--target bridge-in-process needs --substrate-url")?
            } else {
                args.bridge_url
                    .clone()
                    .context("--target bridge needs --bridge-url")?
            };
            let b = bridge_caller(args, &url)?;
            let callers = (0..args.concurrency)
                .map(|_| Caller::Bridge(b.clone()))
                .collect();
            (callers, url)
        }
    };
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
        "mcp: {} → {url}, concurrency {} for {:?} after {:?} warm-up",
        target_name(args.target),
        args.concurrency,
        args.duration,
        args.warmup
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
        target: target_name(args.target),
        url,
        server: matches!(
            args.target,
            McpTarget::Bridge | McpTarget::BridgeHop | McpTarget::BridgeInProcess
        )
        .then(|| args.server.clone()),
        tool: ECHO,
        concurrency: args.concurrency,
        sessions: if args.target == McpTarget::Direct {
            args.concurrency
        } else {
            0
        },
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

fn target_name(t: McpTarget) -> &'static str {
    match t {
        McpTarget::Direct => "direct",
        McpTarget::Bridge => "bridge",
        McpTarget::Pool => "pool",
        McpTarget::BridgeHop => "bridge-hop",
        McpTarget::BridgeInProcess => "bridge-in-process",
    }
}
