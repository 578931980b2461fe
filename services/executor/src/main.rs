//! `weft-executor`: the run executor as its own process.

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::Parser;
use weft_config::{CommonArgs, Overrides};

/// The weft run executor. Pulls runs from JetStream and runs them; needs
/// WEFT_AUTH__INTERNAL_JWT_SECRET shared with the router and substrate.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    /// The router's gRPC URL, e.g. http://127.0.0.1:8788.
    #[arg(long)]
    router_url: Option<String>,
    /// The substrate's gRPC URL, e.g. http://127.0.0.1:8789.
    #[arg(long)]
    substrate_url: Option<String>,
    /// Serve Prometheus /metrics on this address.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft-executor", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.set("executor", "router_url", cli.router_url)
        .set("executor", "substrate_url", cli.substrate_url)
        .set("executor", "metrics_listen", cli.metrics_listen);
    weft_telemetry::boot::boot::<weft_executor::ExecutorService>(
        "weft-executor",
        &cli.common,
        o,
        (),
    )
    .await
}
