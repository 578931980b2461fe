//! `weft process test <name>`: runs a process's own test cases against a running fleet
//! (docs/harness.md, "Processes"). Each case is a plan run of the process (`plan.process`) with
//! the case's `input` as its goal, waited for, then compared with the case's `expect`: how the
//! run ended, and which phases passed. One line per case on standard output (`PASS <name>` or
//! `FAIL <name>: <why>`); exit 1 if any case failed or the process could not be tested.
//!
//! Everything goes through the fleet's HTTP API with the caller's token, as any client's calls
//! do: the process is read with `GET /v1/processes/{name}`, the runs are started with
//! `POST /v1/runs` and followed with `GET /v1/runs/{id}` and `GET /v1/runs/{id}/plan`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use weft_core::process::{ProcessContent, ProcessTest};

use super::api::Api;

/// `weft process`'s subcommands.
#[derive(Subcommand, Debug)]
pub enum ProcessCmd {
    /// Run a process's test cases (its `tests`) as plan runs on a fleet and compare each run
    /// with the case's `expect` (run status, phases passed). Prints `PASS <case>` or
    /// `FAIL <case>: <why>` per case; exits 1 if any case fails.
    Test(TestArgs),
}

/// `weft process test`'s arguments.
#[derive(Args, Debug)]
pub struct TestArgs {
    /// The process's name (its active version is tested).
    name: String,
    /// The agent each case's plan run is of: it does the phases that name no agent (and plans,
    /// for a guided or suggestive process, unless --planner is given).
    #[arg(long)]
    agent: String,
    /// The fleet's base URL (its gateway).
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    url: String,
    /// The `wft_` token to act with (scopes runs:create and runs:read).
    #[arg(long, env = "WEFT_TOKEN", hide_env_values = true)]
    token: String,
    /// Seconds each case's run may take; a run still going then is cancelled and its case
    /// fails.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    timeout: u64,
    /// The plan's verifier agent (phases verified by `llm` or `vote` need one).
    #[arg(long)]
    verifier: Option<String>,
    /// The plan's planner agent (guided and suggestive processes; default: --agent).
    #[arg(long)]
    planner: Option<String>,
}

/// How often a case's run is looked at.
const POLL: Duration = Duration::from_millis(500);

/// Runs `weft process …`.
pub async fn run(cmd: &ProcessCmd) -> ExitCode {
    match cmd {
        ProcessCmd::Test(a) => test(a).await,
    }
}

/// The error message of an answer, or its status.
fn message(status: u16, body: &Value) -> String {
    match body["error"]["message"].as_str() {
        Some(m) => format!("{status}: {m}"),
        None => format!("HTTP {status}"),
    }
}

async fn test(a: &TestArgs) -> ExitCode {
    let api = match Api::new(&a.url, &a.token) {
        Ok(api) => api,
        Err(e) => return super::fail(e),
    };
    let process = match read_process(&api, &a.name).await {
        Ok(p) => p,
        Err(e) => return super::fail(e),
    };
    if process.tests.is_empty() {
        return super::fail(format!(
            "process `{}` has no test cases; add some to its `tests` (PUT /v1/processes/{})",
            a.name, a.name
        ));
    }
    let mut failed = 0usize;
    for case in &process.tests {
        match run_case(&api, a, case).await {
            Ok(()) => println!("PASS {}", case.name),
            Err(why) => {
                failed += 1;
                println!("FAIL {}: {why}", case.name);
            }
        }
    }
    eprintln!(
        "weft: process `{}`: {} of {} cases passed",
        a.name,
        process.tests.len() - failed,
        process.tests.len()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The active version of process `name`.
async fn read_process(api: &Api, name: &str) -> Result<ProcessContent, String> {
    let (status, body) = api
        .call(reqwest::Method::GET, &format!("/v1/processes/{name}"), None)
        .await?;
    if status != 200 {
        return Err(format!(
            "cannot read process `{name}` ({})",
            message(status, &body)
        ));
    }
    serde_json::from_value(body["content"].clone()).map_err(|e| {
        format!("process `{name}` as the fleet answered it does not read ({e}); is this weft as new as the fleet?")
    })
}

/// One case: its run started, waited for and compared with its expectation.
async fn run_case(api: &Api, a: &TestArgs, case: &ProcessTest) -> Result<(), String> {
    let mut plan = json!({"process": a.name});
    if let Some(v) = &a.verifier {
        plan["verifier"] = json!(v);
    }
    if let Some(p) = &a.planner {
        plan["planner"] = json!(p);
    }
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            "/v1/runs",
            Some(json!({"agent": a.agent, "mode": "plan", "input": case.input, "plan": plan})),
        )
        .await?;
    let Some(run) = body["run_id"].as_str().filter(|_| status < 300) else {
        return Err(format!("the run was refused ({})", message(status, &body)));
    };
    let run_status = wait(api, run, Duration::from_secs(a.timeout)).await?;
    let (status, plan) = api
        .call(reqwest::Method::GET, &format!("/v1/runs/{run}/plan"), None)
        .await?;
    let tasks: Vec<(String, String)> = if status == 200 {
        plan["tasks"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| {
                        (
                            t["id"].as_str().unwrap_or_default().to_owned(),
                            t["status"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    } else {
        // A run that ended before any plan was accepted has none: no phase passed.
        Vec::new()
    };
    let mut why = Vec::new();
    let expected = case.expect.status.as_str();
    if run_status != expected {
        why.push(format!("the run {run_status}, expected {expected}"));
    }
    for id in &case.expect.passed {
        match tasks.iter().find(|(t, _)| t == id) {
            Some((_, s)) if s == "passed" => {}
            Some((_, s)) => why.push(format!("phase `{id}` {s}, expected passed")),
            None => why.push(format!("phase `{id}` is not in the run's plan")),
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(format!("{} (run {run})", why.join("; ")))
    }
}

/// Waits for run `run` to end and answers its final status; a run still going after `timeout`
/// is cancelled, and that is an error.
async fn wait(api: &Api, run: &str, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let (status, body) = api
            .call(reqwest::Method::GET, &format!("/v1/runs/{run}"), None)
            .await?;
        if status != 200 {
            return Err(format!(
                "cannot read run {run} ({})",
                message(status, &body)
            ));
        }
        let s = body["status"].as_str().unwrap_or_default();
        if matches!(s, "succeeded" | "failed" | "cancelled") {
            return Ok(s.to_owned());
        }
        if Instant::now() >= deadline {
            // Best effort: the case fails whether or not the cancel goes through.
            let _ = api
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/runs/{run}/cancel"),
                    Some(json!({"reason": "weft process test: timed out"})),
                )
                .await;
            return Err(format!(
                "run {run} did not end within {} s (status {s}); it was cancelled. Give more time with --timeout",
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}
