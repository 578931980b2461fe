//! `weft router`: only the provider router.

use std::process::ExitCode;

use clap::Args;

/// `weft router`'s flags.
#[derive(Args, Debug)]
pub struct RouterArgs {
    // router.listen.
    #[command(flatten)]
    pub listen: weft_config::RouterListenFlags,
}

/// Runs the router until SIGINT/SIGTERM, in the services' boot shape (it waits for Redis and
/// NATS, answering health meanwhile).
pub async fn run(config: weft_config::Config) -> ExitCode {
    weft_telemetry::boot::run::<weft_router::RouterService>("weft", config, ()).await
}
