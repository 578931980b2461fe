//! `weft-ingress`: the scheduler and the webhook receiver as their own process. Run as many as
//! you like against one database: each fire happens once (docs/ingress.md).

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::Parser;
use weft_config::{CommonArgs, Overrides};
use weft_telemetry::boot::boot;

/// The weft ingress: fires cron schedules (exactly once across replicas) and receives signed
/// webhooks at POST /v1/_webhooks/{tenant}/{name}. Needs WEFT_AUTH__INTERNAL_JWT_SECRET shared
/// with the fleet, and each webhook's secret in the environment variable its `secret_env` names.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    /// Address the webhook receiver listens on, e.g. 127.0.0.1:8791.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// The substrate's gRPC URL (overrides ingress.substrate_url).
    #[arg(long)]
    substrate_url: Option<String>,
    /// Postgres URL (overrides database.url).
    #[arg(long)]
    database_url: Option<String>,
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft-ingress", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.set("ingress", "listen", cli.listen)
        .set("ingress", "substrate_url", cli.substrate_url.as_deref())
        .set("database", "url", cli.database_url.as_deref());
    boot::<weft_ingress::IngressService>("weft-ingress", &cli.common, o, ()).await
}
