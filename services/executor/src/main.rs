//! `weft-executor`: the run executor as its own process.

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::Parser;
use serde::Serialize;
use weft_config::{CommonArgs, FlagLayer, Overrides};

/// The weft run executor. Pulls runs from JetStream and runs them; needs
/// WEFT_AUTH__INTERNAL_JWT_SECRET shared with the router and substrate.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    flags: Flags,
}

/// The config keys the flags set, a field per section.
#[derive(clap::Args, Serialize, Debug)]
struct Flags {
    #[command(flatten)]
    executor: ExecutorFlags,
}

impl FlagLayer for Flags {}

#[derive(clap::Args, Serialize, Debug)]
struct ExecutorFlags {
    /// The router's gRPC URL, e.g. http://127.0.0.1:8788 (executor.router_url).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    router_url: Option<String>,
    /// The substrate's gRPC URL, e.g. http://127.0.0.1:8789 (executor.substrate_url).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    substrate_url: Option<String>,
    /// Serve Prometheus /metrics on this address (executor.metrics_listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics_listen: Option<std::net::SocketAddr>,
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft-executor", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.flags(&cli.flags);
    weft_telemetry::boot::boot::<weft_executor::ExecutorService>(
        "weft-executor",
        &cli.common,
        o,
        (),
    )
    .await
}
