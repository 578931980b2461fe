//! `weft-router`: the provider router as its own process.

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::Parser;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_config::{CommonArgs, Config, Overrides};
use weft_telemetry::boot::{BootError, Service, boot};

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

/// The router, bound and with its routing table built.
struct Router {
    listener: TcpListener,
    routing: std::sync::Arc<weft_router::Routing>,
    jwt: weft_auth::InternalJwt,
}

impl Service for Router {
    type Args = ();

    async fn connect(
        config: Config,
        (): (),
        shutdown: CancellationToken,
    ) -> Result<Self, BootError> {
        let secret = config
            .required_jwt_secret("gateway")
            .map_err(BootError::config)?;
        let jwt = weft_auth::InternalJwt::from_secret(secret.expose().as_bytes());
        let listener = TcpListener::bind(config.router.listen).await.map_err(|e| {
            BootError::failed(format!("cannot listen on {}: {e}", config.router.listen))
        })?;
        if let Some(addr) = config.router.metrics_listen {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|e| BootError::failed(format!("cannot serve metrics on {addr}: {e}")))?;
            tokio::spawn(weft_telemetry::serve_metrics(l, shutdown));
        }
        let routing = weft_router::connect(&config)
            .await
            .map_err(BootError::failed)?;
        Ok(Self {
            listener,
            routing,
            jwt,
        })
    }

    async fn serve(self, shutdown: CancellationToken) -> Result<(), BootError> {
        weft_router::serve(self.listener, self.routing, self.jwt, shutdown)
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
    o.set("router", "listen", cli.listen)
        .set("router", "metrics_listen", cli.metrics_listen);
    boot::<Router>("weft-router", &cli.common, o, ()).await
}
