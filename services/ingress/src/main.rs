//! `weft-ingress`: the scheduler and the webhook receiver as their own process. Run as many as
//! you like against one database: each fire happens once (docs/ingress.md).

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::Parser;
use serde::Serialize;
use weft_config::{CommonArgs, FlagLayer, Overrides};
use weft_telemetry::boot::boot;

/// The weft ingress: fires cron schedules (exactly once across replicas) and receives signed
/// webhooks at POST /v1/_webhooks/{tenant}/{name}. Needs WEFT_AUTH__INTERNAL_JWT_SECRET shared
/// with the fleet, and each webhook's secret in the environment variable its `secret_env` names.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    flags: Flags,
}

/// The config keys the flags set, a field per section.
#[derive(clap::Args, Serialize, Debug)]
struct Flags {
    #[command(flatten)]
    ingress: IngressFlags,
    #[command(flatten)]
    database: weft_config::DatabaseFlags,
}

impl FlagLayer for Flags {}

#[derive(clap::Args, Serialize, Debug)]
struct IngressFlags {
    /// Address the webhook receiver listens on, e.g. 127.0.0.1:8791 (ingress.listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<std::net::SocketAddr>,
    /// The substrate's gRPC URL (overrides ingress.substrate_url).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    substrate_url: Option<String>,
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft-ingress", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.flags(&cli.flags);
    boot::<weft_ingress::IngressService>("weft-ingress", &cli.common, o, ()).await
}
