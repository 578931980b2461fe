//! `weft-gateway`: the public HTTP edge as its own process.

use std::process::ExitCode;

use clap::Parser;
use weft_config::{CommonArgs, Overrides};

/// The weft gateway (HTTP). Needs WEFT_AUTH__INTERNAL_JWT_SECRET shared with the router.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    /// Address to listen on, e.g. 127.0.0.1:8787.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// The router's gRPC URL, e.g. http://127.0.0.1:8788.
    #[arg(long)]
    router_url: Option<String>,
    /// Postgres URL (overrides database.url).
    #[arg(long)]
    database_url: Option<String>,
    /// Write {"url": …} to this file once serving.
    #[arg(long)]
    ready_file: Option<std::path::PathBuf>,
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("weft-gateway: {msg}");
    ExitCode::from(code)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.set("gateway", "listen", cli.listen)
        .set("gateway", "router_url", cli.router_url.as_deref())
        .set("database", "url", cli.database_url.as_deref());
    let (config, _guard) = match weft_telemetry::start("weft-gateway", &cli.common, o) {
        Ok(started) => started,
        Err(e) => return fail(2, e),
    };
    let secret = match config.required_jwt_secret("router") {
        Ok(s) => s,
        Err(e) => return fail(2, e),
    };
    let jwt = weft_auth::InternalJwt::from_secret(secret.expose().as_bytes());
    let listener = match tokio::net::TcpListener::bind(config.gateway.listen).await {
        Ok(l) => l,
        Err(e) => {
            return fail(
                1,
                format!("cannot listen on {}: {e}", config.gateway.listen),
            );
        }
    };
    let router = match weft_gateway::router_channel(&config.gateway.router_url) {
        Ok(r) => r,
        Err(e) => return fail(2, e),
    };
    let substrate = match weft_gateway::router_channel(&config.gateway.substrate_url) {
        Ok(r) => r,
        Err(e) => return fail(2, e),
    };
    let state = match weft_gateway::connect(&config, jwt, router, substrate).await {
        Ok(s) => s,
        Err(e) => return fail(1, e),
    };
    let url = match listener.local_addr() {
        Ok(a) => format!("http://{a}"),
        Err(e) => return fail(1, format!("cannot read the bound address: {e}")),
    };
    if let Some(path) = &cli.ready_file
        && let Err(e) = std::fs::write(path, serde_json::json!({ "url": url }).to_string())
    {
        return fail(1, format!("cannot write {}: {e}", path.display()));
    }
    eprintln!("weft-gateway listening on {url}");
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(weft_telemetry::shutdown_on_signal(shutdown.clone()));
    match weft_gateway::serve(listener, state, config.gateway.max_body_bytes, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, e),
    }
}
