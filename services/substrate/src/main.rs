//! `weft-substrate`: the definitions service as its own process.

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::Parser;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_config::{CommonArgs, Config, Overrides};
use weft_telemetry::boot::{BootError, Service, boot};

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

/// The substrate, bound; it connects its store and loads its boot definitions as it starts
/// serving ([`weft_substrate::run`]).
struct Substrate {
    listener: TcpListener,
    config: Config,
    jwt: weft_auth::InternalJwt,
}

impl Service for Substrate {
    type Args = ();

    async fn connect(
        config: Config,
        (): (),
        _shutdown: CancellationToken,
    ) -> Result<Self, BootError> {
        let secret = config
            .required_jwt_secret("gateway")
            .map_err(BootError::config)?;
        let jwt = weft_auth::InternalJwt::from_secret(secret.expose().as_bytes());
        let listener = TcpListener::bind(config.substrate.listen)
            .await
            .map_err(|e| {
                BootError::failed(format!("cannot listen on {}: {e}", config.substrate.listen))
            })?;
        Ok(Self {
            listener,
            config,
            jwt,
        })
    }

    async fn serve(self, shutdown: CancellationToken) -> Result<(), BootError> {
        weft_substrate::run(self.listener, self.config, self.jwt, shutdown)
            .await
            .map_err(|e| match e {
                weft_substrate::SubstrateError::Boot(_) => BootError::config(e),
                e => BootError::failed(e),
            })
    }
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft-substrate", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.set("substrate", "listen", cli.listen)
        .set("database", "url", cli.database_url.as_deref())
        .set(
            "substrate",
            "agents_dir",
            cli.agents_dir.as_ref().map(|p| p.display()),
        );
    boot::<Substrate>("weft-substrate", &cli.common, o, ()).await
}
