//! `weft-router`: the provider router as its own process.

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::{Args, Parser};
use serde::Serialize;
use weft_config::{CommonArgs, FlagLayer, Overrides};
use weft_telemetry::boot::boot;

/// The weft provider router (gRPC). Needs WEFT_AUTH__INTERNAL_JWT_SECRET shared with the gateway.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    flags: Flags,
}

/// The config keys the flags set, a field per section.
#[derive(Args, Serialize, Debug)]
struct Flags {
    #[command(flatten)]
    router: RouterFlags,
}

impl FlagLayer for Flags {}

#[derive(Args, Serialize, Debug)]
struct RouterFlags {
    /// Address to listen on, e.g. 127.0.0.1:8788 (router.listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<std::net::SocketAddr>,
    /// Serve Prometheus /metrics on this address, e.g. 127.0.0.1:8789 (router.metrics_listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics_listen: Option<std::net::SocketAddr>,
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft-router", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.flags(&cli.flags);
    boot::<weft_router::RouterService>("weft-router", &cli.common, o, ()).await
}
