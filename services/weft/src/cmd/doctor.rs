//! `weft doctor`: check the config, Postgres, Redis, NATS and ports.

use std::process::ExitCode;

use weft_config::{CommonArgs, Overrides};

/// Prints one line per check; exit 1 if any failed.
pub async fn run(common: &CommonArgs, o: Overrides) -> ExitCode {
    use weft::doctor::Verdict;
    let checks = weft::doctor::run(common, o).await;
    for c in &checks {
        let v = match c.verdict {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        };
        println!("{v}  {:<22} {}", c.name, c.detail);
    }
    if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
