//! `weft-substrate`: the definitions service as its own process.

use std::process::ExitCode;

use clap::Parser;
use weft_config::{CommonArgs, Overrides};

/// The weft substrate (gRPC): versioned agent definitions and channels (Postgres, and NATS for
/// channel wake-ups). Needs WEFT_AUTH__INTERNAL_JWT_SECRET
/// shared with the gateway.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    /// Address to listen on, e.g. 127.0.0.1:8789.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Postgres URL (overrides database.url).
    #[arg(long)]
    database_url: Option<String>,
    /// A folder of `<name>.md` agent definitions to load at start (substrate.agents_dir).
    #[arg(long)]
    agents_dir: Option<std::path::PathBuf>,
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("weft-substrate: {msg}");
    ExitCode::from(code)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.set("substrate", "listen", cli.listen)
        .set("database", "url", cli.database_url.as_deref())
        .set(
            "substrate",
            "agents_dir",
            cli.agents_dir.as_ref().map(|p| p.display()),
        );
    let (config, _guard) = match weft_telemetry::start("weft-substrate", &cli.common, o) {
        Ok(started) => started,
        Err(e) => return fail(2, e),
    };
    let secret = match config.required_jwt_secret("gateway") {
        Ok(s) => s,
        Err(e) => return fail(2, e),
    };
    let jwt = weft_auth::InternalJwt::from_secret(secret.expose().as_bytes());
    let listener = match tokio::net::TcpListener::bind(config.substrate.listen).await {
        Ok(l) => l,
        Err(e) => {
            return fail(
                1,
                format!("cannot listen on {}: {e}", config.substrate.listen),
            );
        }
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(weft_telemetry::shutdown_on_signal(shutdown.clone()));
    match weft_substrate::run(listener, config, jwt, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ weft_substrate::SubstrateError::Boot(_)) => fail(2, e),
        Err(e) => {
            tracing::error!(error = %e, "substrate failed");
            fail(1, e)
        }
    }
}
