//! The fleet's maintenance in the middle of the load (docs/operations.md "Pause, drain and
//! resume"): the operator drains the fleet while runs, schedules and webhooks keep coming and the
//! faults go on, waits until every run is parked, holds it for a while (new runs and signed
//! webhook deliveries must be refused with a 503 and `Retry-After`), then resumes. The checker
//! then reads from Postgres that nothing was admitted meanwhile, that the schedule's slots of the
//! window were fired after the resume and once each, and that every parked run was resumed and
//! ended.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::load::{Setup, TENANT_A, WEBHOOK_SECRET};

/// How long the drain may take to park every run (a tool call under way gets
/// `executor.pause_grace_ms`, 30 s by default; a lease lost to a kill lapses first).
const PARK_WITHIN: Duration = Duration::from_secs(120);

/// What the maintenance saw; the times are UNIX seconds of this host's clock.
#[derive(Debug, Default)]
pub struct Window {
    pub drained_at: f64,
    /// When the drain reported every run parked (0 if it never did).
    pub parked_at: f64,
    pub resumed_at: f64,
    /// Runs parked by the drain (the status's `paused` when it completed).
    pub parked: i64,
    pub log: Vec<String>,
    pub violations: Vec<String>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Calls `path` until it answers `want` (a replica may be down, Postgres restarting).
async fn until(s: &Setup, method: reqwest::Method, path: &str, want: u16) -> Option<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let a = s.admin.call(method.clone(), path, Some(&json!({}))).await;
        if a.status == want {
            return Some(a.body);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// A refusal as the maintenance wants it: 503, `Retry-After`, and (for a run) `tenant_paused`.
async fn refused(
    resp: reqwest::Result<reqwest::Response>,
    code: Option<&str>,
) -> Result<(), String> {
    let resp = resp.map_err(|e| format!("no answer ({e})"))?;
    let status = resp.status().as_u16();
    let retry = resp.headers().contains_key("retry-after");
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    let got = body["error"]["code"].as_str().unwrap_or("");
    if status != 503 || !retry || code.is_some_and(|c| c != got) {
        return Err(format!(
            "{status} {got} (Retry-After: {retry}), not 503 {} with Retry-After",
            code.unwrap_or("")
        ));
    }
    Ok(())
}

/// Starts the maintenance at `at`, holds it `hold` once every run is parked, and resumes.
pub async fn run(s: &Setup, at: Instant, hold: Duration) -> Window {
    let mut w = Window::default();
    tokio::time::sleep_until(at.into()).await;
    w.drained_at = now();
    let Some(first) = until(s, reqwest::Method::POST, "/v1/fleet/drain", 202).await else {
        w.violations
            .push("POST /v1/fleet/drain was never accepted".to_owned());
        return w;
    };
    w.log.push(format!(
        "maintenance began: {} running, {} queued",
        first["runs"]["running"], first["runs"]["queued"]
    ));
    // Every run parks (the status's GET also tells the runs not told yet).
    let deadline = Instant::now() + PARK_WITHIN;
    loop {
        let st = s.admin.get("/v1/fleet/drain").await;
        if st.status == 200 && st.body["complete"] == true {
            w.parked_at = now();
            w.parked = st.body["runs"]["paused"].as_i64().unwrap_or(0);
            w.log.push(format!(
                "every run parked in {:.1}s: {} paused, {} awaiting input",
                w.parked_at - w.drained_at,
                st.body["runs"]["paused"],
                st.body["runs"]["awaiting_input"]
            ));
            break;
        }
        if Instant::now() > deadline {
            w.violations.push(format!(
                "the drain did not park every run within {}s: {}",
                PARK_WITHIN.as_secs(),
                st.body
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Held: a new run, and a signed webhook delivery, are refused with a retry.
    let http = reqwest::Client::new();
    let new_run = http
        .post(format!("{}/v1/runs", s.a.base))
        .bearer_auth(s.a.token())
        .json(&json!({"agent": "leaf", "input": "during maintenance"}))
        .send()
        .await;
    if let Err(e) = refused(new_run, Some("tenant_paused")).await {
        w.violations
            .push(format!("a new run during maintenance: {e}"));
    }
    let body = json!({"text": "during maintenance"}).to_string();
    let sig = {
        use hmac::{Hmac, Mac as _};
        match Hmac::<sha2::Sha256>::new_from_slice(WEBHOOK_SECRET.as_bytes()) {
            Ok(mut mac) => {
                mac.update(body.as_bytes());
                hex::encode(mac.finalize().into_bytes())
            }
            Err(_) => String::new(),
        }
    };
    let delivery = http
        .post(format!("{}/v1/_webhooks/{TENANT_A}/hook", s.a.base))
        .header("content-type", "application/json")
        .header("x-signature", sig)
        .header("x-delivery", format!("maintenance-{}", now()))
        .body(body)
        .send()
        .await;
    if let Err(e) = refused(delivery, None).await {
        w.violations
            .push(format!("a webhook delivery during maintenance: {e}"));
    }
    tokio::time::sleep(hold).await;
    w.resumed_at = now();
    match until(s, reqwest::Method::POST, "/v1/fleet/resume", 200).await {
        Some(_) => w.log.push(format!(
            "maintenance ended after {:.1}s",
            w.resumed_at - w.drained_at
        )),
        None => w
            .violations
            .push("POST /v1/fleet/resume never succeeded".to_owned()),
    }
    w
}
