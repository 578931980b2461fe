//! `weft-router`: the provider router as its own process.

use clap::Parser;

/// The weft provider router (gRPC). Needs WEFT_AUTH__INTERNAL_JWT_SECRET shared with the gateway.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// TOML config file (defaults, then this file, then WEFT_<SECTION>__<KEY> env, then flags).
    #[arg(long, env = "WEFT_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:8788.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Serve Prometheus /metrics on this address, e.g. 127.0.0.1:8789.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Log format: json or text.
    #[arg(long, value_parser = ["json", "text"])]
    log_format: Option<String>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let mut overrides = serde_json::json!({});
    let mut router = serde_json::Map::new();
    if let Some(l) = cli.listen {
        router.insert("listen".into(), l.to_string().into());
    }
    if let Some(l) = cli.metrics_listen {
        router.insert("metrics_listen".into(), l.to_string().into());
    }
    overrides["router"] = serde_json::Value::Object(router);
    if let Some(f) = &cli.log_format {
        overrides["telemetry"] = serde_json::json!({"log_format": f});
    }
    let config = match weft_config::Config::load(cli.config.as_deref(), overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft-router: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let _guard = match weft_telemetry::init("weft-router", &config.telemetry) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("weft-router: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let Some(secret) = config.auth.internal_jwt_secret.clone() else {
        eprintln!(
            "weft-router: auth.internal_jwt_secret is not set; set WEFT_AUTH__INTERNAL_JWT_SECRET to the same value as the gateway's"
        );
        return std::process::ExitCode::from(2);
    };
    let jwt = weft_auth::InternalJwt::new(
        secret.expose().as_bytes(),
        std::time::Duration::from_secs(60),
    );
    let listener = match tokio::net::TcpListener::bind(config.router.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "weft-router: cannot listen on {}: {e}",
                config.router.listen
            );
            return std::process::ExitCode::from(1);
        }
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(weft_telemetry::shutdown_on_signal(shutdown.clone()));
    if let Some(addr) = config.router.metrics_listen {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                tokio::spawn(weft_telemetry::serve_metrics(l, shutdown.clone()));
            }
            Err(e) => {
                eprintln!("weft-router: cannot serve metrics on {addr}: {e}");
                return std::process::ExitCode::from(1);
            }
        }
    }
    match weft_router::run(listener, config, jwt, shutdown).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "router failed");
            eprintln!("weft-router: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
