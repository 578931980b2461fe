//! `weft migrate`: create the database when it is missing and apply pending migrations.

use std::process::ExitCode;

use super::fail;

/// Migrates and says so.
pub async fn run(config: &weft_config::Config) -> ExitCode {
    let migrated = async {
        let pool = weft_store::connect(config.database.url.expose(), 2).await?;
        weft_store::migrate(&pool).await
    };
    match migrated.await {
        Ok(()) => {
            println!("migrations applied");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
