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
    let secret = match config.required_jwt_secret("gateway") {
        Ok(s) => s,
        Err(e) => return fail(2, e),
    };
    let jwt = weft_auth::InternalJwt::from_secret(secret.expose().as_bytes());
    let listener = match tokio::net::TcpListener::bind(config.router.listen).await {
        Ok(l) => l,
        Err(e) => return fail(1, format!("cannot listen on {}: {e}", config.router.listen)),
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(weft_telemetry::shutdown_on_signal(shutdown.clone()));
    if let Some(addr) = config.router.metrics_listen {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                tokio::spawn(weft_telemetry::serve_metrics(l, shutdown.clone()));
            }
            Err(e) => return fail(1, format!("cannot serve metrics on {addr}: {e}")),
        }
    }
    match weft_router::run(listener, config, jwt, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "router failed");
            fail(1, e)
        }
    }
}
