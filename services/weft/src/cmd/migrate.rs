//! `weft migrate`: apply pending database migrations.

use std::process::ExitCode;

use super::{fail, token_store};

/// Migrates and says so.
pub async fn run(config: &weft_config::Config) -> ExitCode {
    match token_store(config).await {
        Ok(_) => {
            println!("migrations applied");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
