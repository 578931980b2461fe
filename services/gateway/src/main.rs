//! `weft-gateway`: the public HTTP edge as its own process.

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::{Args, Parser};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use weft_config::{CommonArgs, Config, FlagLayer, Overrides};
use weft_telemetry::boot::{Boot, BootError, Face, Service, boot};
use weft_telemetry::health::Dependency;

/// The weft gateway (HTTP). Needs WEFT_AUTH__INTERNAL_JWT_SECRET shared with the router.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    flags: Flags,
    /// Write {"url": …} to this file once serving.
    #[arg(long)]
    ready_file: Option<std::path::PathBuf>,
}

/// The config keys the flags set, a field per section.
#[derive(Args, Serialize, Debug)]
struct Flags {
    #[command(flatten)]
    gateway: GatewayFlags,
    #[command(flatten)]
    database: weft_config::DatabaseFlags,
}

impl FlagLayer for Flags {}

#[derive(Args, Serialize, Debug)]
struct GatewayFlags {
    /// Address to listen on, e.g. 127.0.0.1:8787 (gateway.listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<std::net::SocketAddr>,
    /// The router's gRPC URL, e.g. http://127.0.0.1:8788 (gateway.router_url).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    router_url: Option<String>,
}

/// The gateway, bound and connected.
struct Gateway {
    listener: tokio::net::TcpListener,
    ready_file: Option<std::path::PathBuf>,
    state: weft_gateway::AppState,
    max_body_bytes: usize,
}

impl Service for Gateway {
    /// `--ready-file`.
    type Args = Option<std::path::PathBuf>;
    const DEPENDENCIES: &'static [Dependency] =
        &[Dependency::Postgres, Dependency::Redis, Dependency::Nats];

    fn ports(config: &Config, _: &Self::Args) -> Vec<(std::net::SocketAddr, Face)> {
        vec![(config.gateway.listen, Face::Http)]
    }

    async fn connect(
        config: Config,
        ready_file: Self::Args,
        boot: &Boot,
    ) -> Result<Self, BootError> {
        let secret = config
            .required_jwt_secret("router")
            .map_err(BootError::config)?;
        let jwt = weft_auth::InternalJwt::from_secret(secret.expose().as_bytes());
        let listener = boot.listen(config.gateway.listen).await?;
        let router =
            weft_gateway::router_channel(&config.gateway.router_url).map_err(BootError::config)?;
        let substrate = weft_gateway::router_channel(&config.gateway.substrate_url)
            .map_err(BootError::config)?;
        let state = weft_gateway::connect(&config, jwt, router, substrate)
            .await
            .map_err(BootError::failed)?;
        Ok(Self {
            listener,
            ready_file,
            state,
            max_body_bytes: config.gateway.max_body_bytes,
        })
    }

    async fn serve(self, shutdown: CancellationToken) -> Result<(), BootError> {
        let url = self
            .listener
            .local_addr()
            .map(|a| format!("http://{a}"))
            .map_err(|e| BootError::failed(format!("cannot read the bound address: {e}")))?;
        if let Some(path) = &self.ready_file {
            std::fs::write(path, serde_json::json!({ "url": url }).to_string())
                .map_err(|e| BootError::failed(format!("cannot write {}: {e}", path.display())))?;
        }
        eprintln!("weft-gateway listening on {url}");
        weft_gateway::serve(self.listener, self.state, self.max_body_bytes, shutdown)
            .await
            .map_err(BootError::failed)
    }
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft-gateway", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.flags(&cli.flags);
    boot::<Gateway>("weft-gateway", &cli.common, o, cli.ready_file).await
}
