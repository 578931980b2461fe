//! `weft-substrate`: the definitions service as its own process.

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::{Args, Parser};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_config::{CommonArgs, Config, FlagLayer, Overrides};
use weft_telemetry::boot::{Boot, BootError, Face, Service, boot};
use weft_telemetry::health::{Dependency, Readiness};

/// The weft substrate (gRPC): versioned agent definitions and channels (Postgres, and NATS for
/// channel wake-ups). Needs WEFT_AUTH__INTERNAL_JWT_SECRET
/// shared with the gateway.
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
    substrate: SubstrateFlags,
    #[command(flatten)]
    database: weft_config::DatabaseFlags,
}

impl FlagLayer for Flags {}

#[derive(Args, Serialize, Debug)]
struct SubstrateFlags {
    /// Address to listen on, e.g. 127.0.0.1:8789 (substrate.listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<std::net::SocketAddr>,
    /// A folder of `<name>.md` agent definitions to load at start (substrate.agents_dir).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    agents_dir: Option<std::path::PathBuf>,
}

/// The substrate, bound and connected.
struct Substrate {
    listener: TcpListener,
    parts: weft_substrate::Parts,
    jwt: weft_auth::InternalJwt,
    health: Readiness,
}

impl Service for Substrate {
    type Args = ();
    const DEPENDENCIES: &'static [Dependency] = &[Dependency::Postgres, Dependency::Nats];
    const GRPC_SERVICES: &'static [&'static str] = weft_substrate::GRPC_SERVICES;

    fn ports(config: &Config, (): &()) -> Vec<(std::net::SocketAddr, Face)> {
        vec![(config.substrate.listen, Face::Grpc)]
    }

    async fn connect(config: Config, (): (), boot: &Boot) -> Result<Self, BootError> {
        let secret = config
            .required_jwt_secret("gateway")
            .map_err(BootError::config)?;
        let jwt = weft_auth::InternalJwt::from_secret(secret.expose().as_bytes());
        let listener = boot.listen(config.substrate.listen).await?;
        let parts = weft_substrate::connect_all(&config, jwt.clone())
            .await
            .map_err(|e| match e {
                weft_substrate::SubstrateError::Boot(_) => BootError::config(e),
                e => BootError::failed(e),
            })?;
        Ok(Self {
            listener,
            parts,
            jwt,
            health: boot.health.clone(),
        })
    }

    async fn serve(self, shutdown: CancellationToken) -> Result<(), BootError> {
        weft_substrate::serve(self.listener, self.parts, self.jwt, self.health, shutdown)
            .await
            .map_err(BootError::failed)
    }
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft-substrate", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.flags(&cli.flags);
    boot::<Substrate>("weft-substrate", &cli.common, o, ()).await
}
