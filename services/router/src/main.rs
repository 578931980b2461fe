//! `weft-router`: the provider router as its own process.

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::{Args, Parser};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_config::{CommonArgs, Config, FlagLayer, Overrides};
use weft_telemetry::boot::{Boot, BootError, Face, Service, boot};
use weft_telemetry::health::{Dependency, Readiness};

/// The weft provider router (gRPC). Needs WEFT_AUTH__INTERNAL_JWT_SECRET shared with the gateway.
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
    router: RouterFlags,
}

impl FlagLayer for Flags {}

#[derive(Args, Serialize, Debug)]
struct RouterFlags {
    /// Address to listen on, e.g. 127.0.0.1:8788 (router.listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<std::net::SocketAddr>,
    /// Serve Prometheus /metrics on this address, e.g. 127.0.0.1:8789 (router.metrics_listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics_listen: Option<std::net::SocketAddr>,
}

/// The router, bound and with its routing table built.
struct Router {
    listener: TcpListener,
    metrics: Option<TcpListener>,
    routing: std::sync::Arc<weft_router::Routing>,
    jwt: weft_auth::InternalJwt,
    health: Readiness,
}

impl Service for Router {
    type Args = ();
    const DEPENDENCIES: &'static [Dependency] = weft_router::DEPENDENCIES;
    const GRPC_SERVICES: &'static [&'static str] = weft_router::GRPC_SERVICES;

    fn ports(config: &Config, (): &()) -> Vec<(std::net::SocketAddr, Face)> {
        let mut ports = vec![(config.router.listen, Face::Grpc)];
        ports.extend(config.router.metrics_listen.map(|a| (a, Face::Http)));
        ports
    }

    async fn connect(config: Config, (): (), boot: &Boot) -> Result<Self, BootError> {
        let secret = config
            .required_jwt_secret("gateway")
            .map_err(BootError::config)?;
        let jwt = weft_auth::InternalJwt::from_secret(secret.expose().as_bytes());
        let listener = boot.listen(config.router.listen).await?;
        let metrics = match config.router.metrics_listen {
            Some(addr) => Some(boot.listen(addr).await?),
            None => None,
        };
        let routing = weft_router::connect(&config)
            .await
            .map_err(BootError::failed)?;
        Ok(Self {
            listener,
            metrics,
            routing,
            jwt,
            health: boot.health.clone(),
        })
    }

    async fn serve(self, shutdown: CancellationToken) -> Result<(), BootError> {
        if let Some(l) = self.metrics {
            tokio::spawn(weft_telemetry::health::serve_ops(
                l,
                self.health.clone(),
                shutdown.clone(),
            ));
        }
        weft_router::serve(self.listener, self.routing, self.jwt, self.health, shutdown)
            .await
            .map_err(BootError::failed)
    }
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft-router", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.flags(&cli.flags);
    boot::<Router>("weft-router", &cli.common, o, ()).await
}
