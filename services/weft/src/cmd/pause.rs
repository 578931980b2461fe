//! `weft pause`, `weft resume` and `weft status` (docs/operations.md "Pause, drain and
//! resume"): a run's pause, a tenant's drain or the fleet's maintenance, over the fleet's HTTP
//! API with the caller's token, as any client's calls go.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::Value;

use super::api::Api;

/// What `weft pause`, `resume` and `status` act on: one of a run, a tenant or the fleet.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// A run (and its sub-runs): it parks at its next step boundary.
    #[arg(long)]
    run: Option<String>,
    /// A tenant: its drain admits no new run and parks every running one (tenant:admin of it,
    /// or admin).
    #[arg(long)]
    tenant: Option<String>,
    /// The whole fleet (maintenance, admin only): every tenant drains, schedules hold their
    /// fires and webhooks answer 503.
    #[arg(long)]
    fleet: bool,
}

/// The fleet and the caller.
#[derive(Args, Debug)]
pub struct Fleet {
    /// The fleet's base URL (its gateway).
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    url: String,
    /// The `wft_` token to act with.
    #[arg(long, env = "WEFT_TOKEN", hide_env_values = true)]
    token: String,
    /// Print the fleet's JSON answer instead of a summary.
    #[arg(long)]
    json: bool,
}

/// `weft pause`'s arguments.
#[derive(Args, Debug)]
pub struct PauseArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    fleet: Fleet,
    /// Wait until the drain is complete (every run of the tenant or fleet parked), or the run
    /// paused, for at most this many seconds; exit 1 if it is not by then.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    wait: Option<u64>,
}

/// `weft resume`'s and `weft status`'s arguments.
#[derive(Args, Debug)]
pub struct TargetArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    fleet: Fleet,
}

/// How often `--wait` looks again.
const POLL: Duration = Duration::from_millis(500);

enum Scope<'a> {
    Run(&'a str),
    Tenant(&'a str),
    Fleet,
}

impl Target {
    fn scope(&self) -> Scope<'_> {
        match (&self.run, &self.tenant) {
            (Some(r), _) => Scope::Run(r),
            (None, Some(t)) => Scope::Tenant(t),
            (None, None) => Scope::Fleet,
        }
    }
}

impl Scope<'_> {
    /// The route of `action` (`pause`, `resume` or the status read).
    fn path(&self, action: &str) -> String {
        match (self, action) {
            (Self::Run(r), "status") => format!("/v1/runs/{r}"),
            (Self::Run(r), a) => format!("/v1/runs/{r}/{a}"),
            (Self::Tenant(t), "pause" | "status") => format!("/v1/tenants/{t}/drain"),
            (Self::Tenant(t), a) => format!("/v1/tenants/{t}/{a}"),
            (Self::Fleet, "pause" | "status") => "/v1/fleet/drain".to_owned(),
            (Self::Fleet, a) => format!("/v1/fleet/{a}"),
        }
    }
}

/// The error message of an answer, or its status.
fn message(status: u16, body: &Value) -> String {
    match body["error"]["message"].as_str() {
        Some(m) => format!("{status}: {m}"),
        None => format!("HTTP {status}"),
    }
}

/// One line saying where a run or a drain is.
fn summary(body: &Value) -> String {
    if let Some(run) = body["run_id"].as_str() {
        let by = body["paused_by"]
            .as_str()
            .map(|b| format!(" (pause asked by {b})"))
            .unwrap_or_default();
        return format!("run {run}: {}{by}", body["status"].as_str().unwrap_or("?"));
    }
    let scope = match body["scope"].as_str() {
        Some("*") => "fleet".to_owned(),
        Some(t) => format!("tenant {t}"),
        None => "?".to_owned(),
    };
    let runs = &body["runs"];
    let counts = format!(
        "running {}, queued {}, paused {}, awaiting input {}",
        runs["running"], runs["queued"], runs["paused"], runs["awaiting_input"]
    );
    if body["draining"].as_bool() == Some(true) {
        let done = if body["complete"].as_bool() == Some(true) {
            "complete"
        } else {
            "in progress"
        };
        format!(
            "{scope}: draining since {} (by {}), {done}; {counts}",
            body["since"].as_str().unwrap_or("?"),
            body["by"].as_str().unwrap_or("?")
        )
    } else {
        format!("{scope}: not draining; {counts}")
    }
}

/// Whether `--wait` is over.
fn settled(body: &Value) -> bool {
    if body["run_id"].is_string() {
        return body["status"].as_str() != Some("running")
            && body["status"].as_str() != Some("queued");
    }
    body["complete"].as_bool() == Some(true)
}

async fn call(api: &Api, method: reqwest::Method, path: &str) -> Result<Value, String> {
    let (status, body) = api.call(method, path, None).await?;
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        Err(message(status, &body))
    }
}

fn show(fleet: &Fleet, body: &Value) {
    if fleet.json {
        println!("{body}");
    } else {
        println!("{}", summary(body));
    }
}

/// `weft pause`.
pub async fn pause(a: &PauseArgs) -> ExitCode {
    let api = match Api::new(&a.fleet.url, &a.fleet.token) {
        Ok(api) => api,
        Err(e) => return super::fail(e),
    };
    let scope = a.target.scope();
    let mut body = match call(&api, reqwest::Method::POST, &scope.path("pause")).await {
        Ok(b) => b,
        Err(e) => return super::fail(e),
    };
    if let Some(secs) = a.wait {
        let until = Instant::now() + Duration::from_secs(secs);
        while !settled(&body) {
            if Instant::now() >= until {
                show(&a.fleet, &body);
                return super::fail(format!("not settled after {secs} s; `weft status` tells"));
            }
            tokio::time::sleep(POLL).await;
            body = match call(&api, reqwest::Method::GET, &scope.path("status")).await {
                Ok(b) => b,
                Err(e) => return super::fail(e),
            };
        }
    }
    show(&a.fleet, &body);
    ExitCode::SUCCESS
}

/// `weft resume`.
pub async fn resume(a: &TargetArgs) -> ExitCode {
    let api = match Api::new(&a.fleet.url, &a.fleet.token) {
        Ok(api) => api,
        Err(e) => return super::fail(e),
    };
    match call(
        &api,
        reqwest::Method::POST,
        &a.target.scope().path("resume"),
    )
    .await
    {
        Ok(body) => {
            show(&a.fleet, &body);
            ExitCode::SUCCESS
        }
        Err(e) => super::fail(e),
    }
}

/// `weft status`.
pub async fn status(a: &TargetArgs) -> ExitCode {
    let api = match Api::new(&a.fleet.url, &a.fleet.token) {
        Ok(api) => api,
        Err(e) => return super::fail(e),
    };
    match call(&api, reqwest::Method::GET, &a.target.scope().path("status")).await {
        Ok(body) => {
            show(&a.fleet, &body);
            ExitCode::SUCCESS
        }
        Err(e) => super::fail(e),
    }
}
