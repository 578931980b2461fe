//! `weft router`: only the provider router.

use std::process::ExitCode;

use clap::Args;
use weft_config::Overrides;

use super::fail;

/// `weft router`'s flags.
#[derive(Args, Debug)]
pub struct RouterArgs {
    /// Router gRPC address.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
}

impl RouterArgs {
    /// The config these flags override.
    pub fn overrides(&self, o: &mut Overrides) {
        o.set("router", "listen", self.listen);
    }
}

/// Runs the router until SIGINT/SIGTERM.
pub async fn run(config: weft_config::Config) -> ExitCode {
    match weft_router::run_until_signal(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
