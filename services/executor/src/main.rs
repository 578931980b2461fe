//! `weft-executor`: the run executor as its own process.

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

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("weft-executor: {msg}");
    ExitCode::from(code)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.set("executor", "router_url", cli.router_url)
        .set("executor", "substrate_url", cli.substrate_url)
        .set("executor", "metrics_listen", cli.metrics_listen);
    let (config, _guard) = match weft_telemetry::start("weft-executor", &cli.common, o) {
        Ok(started) => started,
        Err(e) => return fail(2, e),
    };
    if let Some(addr) = config.executor.metrics_listen {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                tokio::spawn(weft_telemetry::serve_metrics(
                    l,
                    tokio_util::sync::CancellationToken::new(),
                ));
            }
            Err(e) => return fail(1, format!("cannot serve metrics on {addr}: {e}")),
        }
    }
    match weft_executor::run_until_signal(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ weft_executor::ExecutorError::Config(_)) => fail(2, e),
        Err(e) => {
            tracing::error!(error = %e, "executor failed");
            fail(1, e)
        }
    }
}
