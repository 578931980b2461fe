//! `weft-mcp-profile`: the load generator's `mcp` scenario against the MCP bridge linked into
//! this process, for profiling. `weft-loadtest mcp` measures a running fleet from outside; the
//! two targets here take the bridge apart, so they link the service crate, which the load
//! generator itself does not:
//!
//! - `--target pool --url U`: the bridge's own session pool ([`weft_mcp_bridge::pool::Pool`])
//!   with a definition made here, answering through the bridge's `result_text`: the bridge's MCP
//!   half without gRPC, JWT or definition lookups.
//! - `--target bridge-in-process --substrate-url S`: the arrangement `weft up` runs, the bridge
//!   in the caller's process, its gRPC service called through
//!   `weft_proto::transport::in_process` (same codec and JWT check, no socket), with definitions
//!   read from the substrate, and the calls made as `weft-loadtest mcp --target bridge` makes
//!   them.
//!
//! The closed loop, the arguments it shares with `weft-loadtest mcp` and the JSON report are the
//! load generator's ([`weft_loadtest::mcp::measure`]), so `loadtest/bench.py mcp
//! --extra-targets` reads both alike.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use weft_core::mcp::{McpServerContent, McpTransport};
use weft_loadtest::cli::{McpCallerArgs, McpLoadArgs};
use weft_loadtest::mcp::{self, Caller, EchoCall, McpReport, Setup};
use weft_loadtest::mcp_server::ECHO;
use weft_loadtest::report::Failure;
use weft_mcp_bridge::pool::{Pool, ServerRef};

/// The load generator's `mcp` scenario with the MCP bridge in this process.
#[derive(Debug, Parser)]
#[command(name = "weft-mcp-profile", version, about)]
struct Cli {
    /// `pool`: the bridge's session pool calling `--url`; `bridge-in-process`: the whole bridge,
    /// reading definitions from `--substrate-url`.
    #[arg(long, value_enum)]
    target: Target,
    /// The MCP server's streamable HTTP endpoint (`--target pool`), e.g.
    /// `http://127.0.0.1:8791/mcp`.
    #[arg(long, required_if_eq("target", "pool"))]
    url: Option<String>,
    /// The substrate's gRPC URL (`--target bridge-in-process`), e.g. `http://127.0.0.1:8789`.
    #[arg(long, required_if_eq("target", "bridge-in-process"))]
    substrate_url: Option<String>,
    /// CIDRs the bridge may call although private (its `mcp_bridge.private_exempt`).
    #[arg(long, default_value = "127.0.0.1/32")]
    private_exempt: Vec<String>,
    #[command(flatten)]
    caller: McpCallerArgs,
    #[command(flatten)]
    load: McpLoadArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Target {
    /// The bridge's session pool, without gRPC or definition lookups.
    Pool,
    /// The bridge as `weft up` runs it, its gRPC service called in-process.
    BridgeInProcess,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let run = || -> anyhow::Result<()> {
        let report = weft_loadtest::runtime(cli.load.threads, false)?.block_on(run(&cli))?;
        weft_loadtest::emit(&report, cli.load.out.as_deref())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft-mcp-profile: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: &Cli) -> anyhow::Result<McpReport> {
    let cpu0 = weft_loadtest::cpu::self_seconds();
    let setup = match cli.target {
        Target::Pool => {
            let url = cli.url.clone().context("--target pool needs --url")?;
            let p: Arc<dyn EchoCall> = pool_caller(cli, &url)?;
            Setup {
                target: "pool",
                callers: (0..cli.load.concurrency)
                    .map(|_| Caller::Other(p.clone()))
                    .collect(),
                url,
                server: None,
                sessions: 0,
                cpu0,
            }
        }
        Target::BridgeInProcess => {
            let url = cli
                .substrate_url
                .clone()
                .context("--target bridge-in-process needs --substrate-url")?;
            let b = mcp::bridge_caller(&cli.caller, in_process_bridge(cli, &url)?, false)?;
            Setup {
                target: "bridge-in-process",
                callers: (0..cli.load.concurrency)
                    .map(|_| Caller::Bridge(b.clone()))
                    .collect(),
                url,
                server: Some(cli.caller.server.clone()),
                sessions: 0,
                cpu0,
            }
        }
    };
    mcp::measure(&cli.load, setup).await
}

/// The bridge's session pool in this process, called as the bridge's `grpc.rs` calls it.
struct PoolCaller {
    pool: Pool,
    content: McpServerContent,
    timeout: Duration,
    max_result_bytes: usize,
}

impl PoolCaller {
    async fn call(&self, text: &str) -> Result<String, Failure> {
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

impl EchoCall for PoolCaller {
    fn echo<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<String, Failure>> {
        self.call(text).boxed()
    }
}

fn pool_caller(cli: &Cli, url: &str) -> anyhow::Result<Arc<PoolCaller>> {
    let cfg = weft_config::McpBridgeConfig {
        private_exempt: vec!["127.0.0.1/32".into(), "::1/128".into()],
        ..Default::default()
    };
    let max_result_bytes = cfg.max_result_bytes;
    Ok(Arc::new(PoolCaller {
        pool: Pool::new(cfg).map_err(|e| anyhow::anyhow!("the bridge's pool: {e}"))?,
        max_result_bytes,
        content: McpServerContent {
            description: "weft-mcp-profile mcp".into(),
            transport: McpTransport::Http,
            url: Some(url.to_owned()),
            ..Default::default()
        },
        timeout: cli.load.timeout,
    }))
}

/// The transport `weft up` gives its executor, to a bridge living in this process.
fn in_process_bridge(
    cli: &Cli,
    substrate_url: &str,
) -> anyhow::Result<weft_proto::transport::GrpcTransport> {
    let secret = mcp::jwt_secret(&cli.caller)?;
    let mut config = weft_config::Config::default();
    config.mcp_bridge.private_exempt = cli.private_exempt.clone();
    let substrate =
        weft_proto::transport::channel(substrate_url).map_err(|e| anyhow::anyhow!("{e}"))?;
    let bridge = weft_mcp_bridge::Bridge::new(&config, substrate)
        .map_err(|e| anyhow::anyhow!("the in-process bridge: {e}"))?;
    let jwt = weft_auth::InternalJwt::from_secret(secret.as_bytes());
    Ok(weft_proto::transport::in_process(bridge.grpc_service(jwt)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("weft-mcp-profile").chain(args.iter().copied()))
    }

    #[test]
    fn targets_need_their_addresses() {
        assert!(parse(&["--target", "pool"]).is_err());
        assert!(parse(&["--target", "bridge-in-process"]).is_err());
        let cli = parse(&["--target", "pool", "--url", "http://h/mcp"]).unwrap();
        assert_eq!(cli.target, Target::Pool);
        assert_eq!(cli.load.concurrency, 1);
        let cli = parse(&[
            "--target",
            "bridge-in-process",
            "--substrate-url",
            "http://127.0.0.1:1",
            "--server",
            "s",
            "--concurrency",
            "8",
        ])
        .unwrap();
        assert_eq!(cli.target, Target::BridgeInProcess);
        assert_eq!(cli.caller.server, "s");
        assert_eq!(cli.private_exempt, ["127.0.0.1/32"]);
    }
}
