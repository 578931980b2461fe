//! `weft executor`: only a run executor, in the services' shared boot shape.

use std::process::ExitCode;

/// Connects and runs the executor until SIGINT/SIGTERM.
pub async fn run(config: weft_config::Config) -> ExitCode {
    weft_telemetry::boot::run::<weft_executor::ExecutorService>("weft", config, ()).await
}
