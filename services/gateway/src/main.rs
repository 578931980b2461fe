//! `weft-gateway`: the public HTTP edge as its own process.

use std::process::ExitCode;

use clap::Parser;

/// The weft gateway (HTTP). Needs WEFT_AUTH__INTERNAL_JWT_SECRET shared with the router.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// TOML config file (defaults, then this file, then WEFT_<SECTION>__<KEY> env, then flags).
    #[arg(long, env = "WEFT_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:8787.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// The router's gRPC URL, e.g. http://127.0.0.1:8788.
    #[arg(long)]
    router_url: Option<String>,
    /// Postgres URL.
    #[arg(long)]
    database_url: Option<String>,
    /// Log format: json or text.
    #[arg(long, value_parser = ["json", "text"])]
    log_format: Option<String>,
    /// Write {"url": …} to this file once serving.
    #[arg(long)]
    ready_file: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut gw = serde_json::Map::new();
    if let Some(l) = cli.listen {
        gw.insert("listen".into(), l.to_string().into());
    }
    if let Some(u) = &cli.router_url {
        gw.insert("router_url".into(), u.clone().into());
    }
    let mut overrides = serde_json::json!({ "gateway": gw });
    if let Some(u) = &cli.database_url {
        overrides["database"] = serde_json::json!({ "url": u });
    }
    if let Some(f) = &cli.log_format {
        overrides["telemetry"] = serde_json::json!({ "log_format": f });
    }
    let fail = |code: u8, msg: String| {
        eprintln!("weft-gateway: {msg}");
        ExitCode::from(code)
    };
    let config = match weft_config::Config::load(cli.config.as_deref(), overrides) {
        Ok(c) => c,
        Err(e) => return fail(2, e.to_string()),
    };
    let _guard = match weft_telemetry::init("weft-gateway", &config.telemetry) {
        Ok(g) => g,
        Err(e) => return fail(2, e.to_string()),
    };
    let Some(secret) = config.auth.internal_jwt_secret.clone() else {
        return fail(2, "auth.internal_jwt_secret is not set; set WEFT_AUTH__INTERNAL_JWT_SECRET to the same value as the router's".into());
    };
    let jwt = weft_auth::InternalJwt::new(
        secret.expose().as_bytes(),
        std::time::Duration::from_secs(60),
    );
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
        Err(e) => return fail(2, e.to_string()),
    };
    let state = match weft_gateway::connect(&config, jwt, router).await {
        Ok(s) => s,
        Err(e) => return fail(1, e.to_string()),
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
        Err(e) => fail(1, e.to_string()),
    }
}
