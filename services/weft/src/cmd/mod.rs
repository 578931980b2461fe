//! The `weft` subcommands, one module each; `main.rs` only parses and dispatches.

pub mod api;
pub mod doctor;
pub mod executor;
pub mod hash;
pub mod mcp;
pub mod migrate;
pub mod pause;
pub mod process;
pub mod router;
pub mod run;
pub mod tenant;
pub mod token;
pub mod up;

use std::process::ExitCode;

use weft_store::TokenStore;

/// Prints `weft: <msg>` and fails (exit 1).
pub fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("weft: {msg}");
    ExitCode::FAILURE
}

/// The token store of an existing database, migrated. A database that does not exist is an
/// error, not created: no fleet could be using it, so a token minted there would be a token
/// nobody accepts.
pub async fn token_store(config: &weft_config::Config) -> Result<TokenStore, String> {
    let url = config.database.url.expose();
    let pool = match weft_store::connect_existing(url, 2).await {
        Ok(p) => p,
        Err(e) if weft_store::is_missing_database(&e) => {
            return Err(format!(
                "the database of database.url does not exist, so no fleet uses it; give the --database-url (or --config) your `weft up` runs with, or mint over HTTP: POST /v1/tokens ({})",
                token::shown_url(url)
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    weft_store::migrate(&pool)
        .await
        .map_err(|e| e.to_string())?;
    Ok(TokenStore::new(pool))
}
