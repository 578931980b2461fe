//! The `weft` subcommands, one module each; `main.rs` only parses and dispatches.

pub mod doctor;
pub mod executor;
pub mod hash;
pub mod mcp;
pub mod migrate;
pub mod router;
pub mod token;
pub mod up;

use std::process::ExitCode;

use weft_store::TokenStore;

/// Prints `weft: <msg>` and fails (exit 1).
pub fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("weft: {msg}");
    ExitCode::FAILURE
}

/// The token store, with the database migrated.
pub async fn token_store(
    config: &weft_config::Config,
) -> Result<TokenStore, weft_store::StoreError> {
    let pool = weft_store::connect(config.database.url.expose(), 2).await?;
    weft_store::migrate(&pool).await?;
    Ok(TokenStore::new(pool))
}
