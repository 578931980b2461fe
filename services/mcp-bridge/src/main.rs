//! `weft-mcp-bridge`: the MCP bridge's client side as its own process (the executor reaches
//! it at `executor.mcp_bridge_url`). weft's MCP server face is served by the gateway at `/mcp`.

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::{Args, Parser};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_config::{CommonArgs, Config, FlagLayer, Overrides};
use weft_telemetry::boot::{Boot, BootError, Face, Service, boot};

/// The weft MCP bridge (gRPC): a pool of sessions to the MCP servers defined in the substrate,
/// for the executor's runs. Needs WEFT_AUTH__INTERNAL_JWT_SECRET shared with the fleet.
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
    mcp_bridge: BridgeFlags,
}

impl FlagLayer for Flags {}

#[derive(Args, Serialize, Debug)]
struct BridgeFlags {
    /// Address to listen on, e.g. 127.0.0.1:8790 (mcp_bridge.listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<std::net::SocketAddr>,
    /// The substrate's gRPC URL (overrides mcp_bridge.substrate_url).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    substrate_url: Option<String>,
}

struct Bridge {
    listener: TcpListener,
    bridge: weft_mcp_bridge::Bridge,
    jwt: weft_auth::InternalJwt,
    health: weft_telemetry::health::Readiness,
}

impl Service for Bridge {
    type Args = ();
    const GRPC_SERVICES: &'static [&'static str] = weft_mcp_bridge::GRPC_SERVICES;

    fn ports(config: &Config, (): &()) -> Vec<(std::net::SocketAddr, Face)> {
        vec![(config.mcp_bridge.listen, Face::Grpc)]
    }

    async fn connect(config: Config, (): (), boot: &Boot) -> Result<Self, BootError> {
        let secret = config
            .required_jwt_secret("gateway")
            .map_err(BootError::config)?;
        let jwt = weft_auth::InternalJwt::from_secret(secret.expose().as_bytes());
        let substrate = weft_proto::transport::channel(&config.mcp_bridge.substrate_url)
            .map_err(BootError::config)?;
        let bridge = weft_mcp_bridge::Bridge::new(&config, substrate).map_err(BootError::config)?;
        let listener = boot.listen(config.mcp_bridge.listen).await?;
        Ok(Self {
            listener,
            bridge,
            jwt,
            health: boot.health.clone(),
        })
    }

    async fn serve(self, shutdown: CancellationToken) -> Result<(), BootError> {
        weft_mcp_bridge::serve(self.listener, self.bridge, self.jwt, self.health, shutdown)
            .await
            .map_err(BootError::failed)
    }
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft-mcp-bridge", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.flags(&cli.flags);
    boot::<Bridge>("weft-mcp-bridge", &cli.common, o, ()).await
}
