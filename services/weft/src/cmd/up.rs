//! `weft up`: the whole fleet in one process on loopback.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::fail;

/// The addresses `weft up` listens on (`weft doctor` takes the same flags, to check them).
pub type ListenArgs = weft_config::FleetListenFlags;

/// `weft up`'s flags.
#[derive(Args, Debug)]
pub struct UpArgs {
    // gateway.listen, router.listen and substrate.listen.
    #[command(flatten)]
    pub listen: ListenArgs,
    /// Write {"url", "admin_token"} as JSON to this file once serving.
    #[arg(long)]
    ready_file: Option<PathBuf>,
}

/// Starts the fleet, prints how to reach it, and runs until SIGINT/SIGTERM.
pub async fn run(config: weft_config::Config, args: UpArgs) -> ExitCode {
    let ready_file = args.ready_file;
    let token_file = config.bootstrap.token_file.clone();
    let config_mcp_enabled = config.mcp.enabled;
    let fleet = match weft::Fleet::start(config).await {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    // Signals are handled from here on, before anyone is told the fleet is up.
    let stop = fleet.shutdown_token();
    tokio::spawn(weft_telemetry::shutdown_on_signal(stop.clone()));
    let url = fleet.url();
    println!("weft is up");
    println!("url: {url}");
    if weft_gateway::ui::built() {
        println!("ui: {url}/ui (sign in with the admin token below; docs/ui.md)");
    } else {
        println!(
            "ui: not in this build ({url}/ui answers 503 ui_not_built); `deploy/local/up.sh` builds it"
        );
    }
    if config_mcp_enabled {
        println!("mcp: {url}/mcp (streamable HTTP, the same bearer token; docs/mcp.md)");
    }
    match &fleet.admin_token {
        Some(t) if fleet.minted && fleet.saved => println!(
            "admin token: {t}\n  (saved to {}; printed only now, on the start that minted it)",
            token_file.display()
        ),
        Some(t) if fleet.minted => println!(
            "admin token: {t}\n  (could not be saved to {}: copy it now, it is shown once)",
            token_file.display()
        ),
        // Printed once, when minted: later starts say where it is, so it stays out of logs.
        Some(_) => println!(
            "admin token: in {} (minted on the first start)",
            token_file.display()
        ),
        None => println!(
            "admin token: minted on an earlier start and not found in {}; mint another with `weft token create --admin`",
            token_file.display()
        ),
    }
    println!(
        "try: curl -s {url}/v1/chat/completions -H \"authorization: Bearer $TOKEN\" -H 'content-type: application/json' -d '{{\"model\":\"mock-1\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
    );
    if let Some(path) = ready_file {
        let body = json!({ "url": url, "admin_token": fleet.admin_token });
        if let Err(e) = std::fs::write(&path, body.to_string()) {
            return fail(format!("cannot write {}: {e}", path.display()));
        }
    }
    stop.cancelled().await;
    eprintln!("weft: stopping");
    fleet.stop(Duration::from_secs(10)).await;
    ExitCode::SUCCESS
}
