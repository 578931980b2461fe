//! `weft router`: only the provider router.

use std::process::ExitCode;

use clap::Args;

use super::fail;

/// `weft router`'s flags.
#[derive(Args, Debug)]
pub struct RouterArgs {
    // router.listen.
    #[command(flatten)]
    pub listen: weft_config::RouterListenFlags,
}

/// Runs the router until SIGINT/SIGTERM.
pub async fn run(config: weft_config::Config) -> ExitCode {
    match weft_router::run_until_signal(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
