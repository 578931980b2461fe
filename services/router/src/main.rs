//! `weft-router`: the provider router as its own process.

use std::process::ExitCode;

use clap::Parser;
use weft_config::{CommonArgs, Overrides};

/// The weft provider router (gRPC). Needs WEFT_AUTH__INTERNAL_JWT_SECRET shared with the gateway.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    /// Address to listen on, e.g. 127.0.0.1:8788.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Serve Prometheus /metrics on this address, e.g. 127.0.0.1:8789.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("weft-router: {msg}");
    ExitCode::from(code)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.set("router", "listen", cli.listen)
        .set("router", "metrics_listen", cli.metrics_listen);
    let (config, _guard) = match weft_telemetry::start("weft-router", &cli.common, o) {
        Ok(started) => started,
        Err(e) => return fail(2, e),
    };
    match weft_router::run_until_signal(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "router failed");
            fail(1, e)
        }
    }
}
