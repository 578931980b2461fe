//! The `parked` scenario: what an idle interactive run costs. It creates `--count`
//! interactive runs (at most `--in-flight` creates at once), waits until every one is
//! `awaiting_input` (listing `GET /v1/runs?status=awaiting_input&agent=…` page by page), and
//! reads the executor's memory before creating them, once all are parked, and after
//! `--settle`. A parked run should cost a row, not a task or an admission slot, so the memory
//! after parking is the number to watch.
//!
//! At the end the runs are cancelled (unless `--keep-parked`), which doubles as a measure of
//! cancelling runs nobody holds.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use futures::StreamExt as _;
use http::Method;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::api::{Api, CallError, is_path_safe, query_value, snippet};
use crate::cli::ParkedArgs;
use crate::report::{ErrorKind, Failure, Failures, Summary, histogram, micros};
use crate::rss::{self, Memory};

/// The list endpoint's largest page.
const PAGE: u32 = 500;
/// Runs looked at one by one when a poll made no progress (to find runs that ended instead of
/// parking, so the wait does not last until `--park-timeout`).
const STRAGGLERS: usize = 100;
/// Consecutive failed polls that end the wait: the list endpoint is broken, not slow.
const MAX_POLL_ERRORS: u32 = 3;

/// The JSON report of one `parked` scenario.
#[derive(Debug, Serialize)]
pub struct ParkedReport {
    pub scenario: &'static str,
    pub url: String,
    pub agent: String,
    /// Runs asked for.
    pub count: u32,
    pub in_flight: u32,
    /// Runs created (201).
    pub created: u64,
    /// Created runs seen `awaiting_input`.
    pub parked: u64,
    pub all_parked: bool,
    /// From the first create until the last one answered.
    pub create_s: f64,
    /// From the first create until every created run was seen parked (or the wait gave up).
    pub park_s: f64,
    /// Request → 201 of each create.
    pub create_us: Option<Summary>,
    pub failures: u64,
    /// `create:<what>` (the POST), `park:<status>` (a run ended instead of parking),
    /// `list:<what>` (polling), `cleanup:<what>` (the final cancel).
    pub failure_kinds: BTreeMap<String, u64>,
    pub failure_samples: BTreeMap<String, String>,
    pub executor_pid: Option<u32>,
    pub executor_memory_before: Option<Memory>,
    pub executor_memory_parked: Option<Memory>,
    pub executor_memory_settled: Option<Memory>,
    pub settle_s: f64,
    /// (RSS once parked − RSS before) / parked runs, and the same after the settle.
    pub rss_per_parked_run_bytes: Option<u64>,
    pub rss_per_parked_run_settled_bytes: Option<u64>,
    /// Runs cancelled at the end, and how long that took; `null` with `--keep-parked`.
    pub cleanup_cancelled: Option<u64>,
    pub cleanup_s: Option<f64>,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One `POST /v1/runs`: its latency and the run id.
async fn create_one(api: &Api, body: Bytes) -> Result<(Duration, String), Failure> {
    let origin = Instant::now();
    let v = api
        .json(Method::POST, "/v1/runs", Some(body), &[201])
        .await
        .map_err(|e| e.during("create"))?;
    let latency = origin.elapsed();
    match v.get("run_id").and_then(Value::as_str) {
        Some(id) if is_path_safe(id) => Ok((latency, id.to_owned())),
        _ => Err(Failure::new(
            "create:invalid",
            Some(snippet(v.to_string().as_bytes())),
        )),
    }
}

/// Lists every parked run of `agent` and removes those seen from `waiting`.
async fn poll_parked(
    api: &Api,
    agent: &str,
    waiting: &mut HashSet<String>,
) -> Result<(), CallError> {
    let mut cursor: Option<String> = None;
    while !waiting.is_empty() {
        let mut path = format!(
            "/v1/runs?status=awaiting_input&agent={}&limit={PAGE}",
            query_value(agent)
        );
        if let Some(c) = &cursor {
            path.push_str("&cursor=");
            path.push_str(&query_value(c));
        }
        let page = api.json(Method::GET, &path, None, &[200]).await?;
        let runs = page
            .get("runs")
            .and_then(Value::as_array)
            .ok_or_else(|| CallError {
                kind: ErrorKind::Invalid,
                detail: Some(snippet(page.to_string().as_bytes())),
            })?;
        for r in runs {
            if let Some(id) = r.get("run_id").and_then(Value::as_str) {
                waiting.remove(id);
            }
        }
        match page.get("next_cursor").and_then(Value::as_str) {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    Ok(())
}

/// Reads some of the runs still waiting one by one: a parked one is no longer waited for, and
/// one that ended (or was never there) is a `park:<status>` failure rather than a reason to
/// wait until the timeout.
async fn check_stragglers(
    api: &Api,
    waiting: &mut HashSet<String>,
    in_flight: usize,
    failures: &mut Failures,
) {
    let sample: Vec<String> = waiting.iter().take(STRAGGLERS).cloned().collect();
    let reads: Vec<(String, Result<Value, CallError>)> = futures::stream::iter(sample)
        .map(|id| async move {
            let r = api
                .json(Method::GET, &format!("/v1/runs/{id}"), None, &[200])
                .await;
            (id, r)
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    for (id, r) in reads {
        match r {
            Ok(run) => match run.get("status").and_then(Value::as_str) {
                Some("awaiting_input") => {
                    waiting.remove(&id);
                }
                Some(s @ ("succeeded" | "failed" | "cancelled")) => {
                    waiting.remove(&id);
                    failures.add(Failure::new(
                        format!("park:{s}"),
                        Some(snippet(run.to_string().as_bytes())),
                    ));
                }
                _ => {}
            },
            Err(e) if e.kind == ErrorKind::Status(404) => {
                waiting.remove(&id);
                failures.add(e.during("park"));
            }
            Err(_) => {}
        }
    }
}

/// Cancels the parked runs; how many acknowledged.
async fn cancel_all(
    api: &Api,
    ids: Vec<String>,
    in_flight: usize,
    timeout: Duration,
    failures: &mut Failures,
) -> u64 {
    let body = Bytes::from_static(b"{\"reason\":\"weft-loadtest parked cleanup\"}");
    let results: Vec<Result<(), Failure>> = futures::stream::iter(ids)
        .map(|id| {
            let body = body.clone();
            async move {
                let path = format!("/v1/runs/{id}/cancel");
                let call = api.call(Method::POST, &path, Some(body), &[200, 202]);
                match tokio::time::timeout(timeout, call).await {
                    Ok(r) => r.map(drop).map_err(|e| e.during("cleanup")),
                    Err(_) => Err(CallError::from(ErrorKind::Timeout).during("cleanup")),
                }
            }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let mut ok = 0;
    for r in results {
        match r {
            Ok(()) => ok += 1,
            Err(f) => failures.add(f),
        }
    }
    ok
}

/// (after − before) in bytes per run.
fn per_run(before: Option<Memory>, after: Option<Memory>, runs: u64) -> Option<u64> {
    let (b, a) = (before?, after?);
    (runs > 0).then(|| a.rss_kib.saturating_sub(b.rss_kib) * 1024 / runs)
}

pub async fn run(args: &ParkedArgs) -> anyhow::Result<ParkedReport> {
    let in_flight = usize::try_from(args.in_flight).unwrap_or(usize::MAX);
    let api = Api::new(&args.weft.url, args.weft.token.as_deref(), in_flight)?;
    let body = Bytes::from(serde_json::to_vec(
        &json!({"agent": args.agent, "input": args.input, "interactive": true}),
    )?);
    if let Some(pid) = args.weft.executor_pid {
        rss::read(pid).context("--executor-pid")?;
    }
    let memory_before = rss::read_opt(args.weft.executor_pid);
    eprintln!(
        "parked: creating {} interactive runs of `{}` on {} ({} in flight)",
        args.count,
        args.agent,
        api.base(),
        args.in_flight
    );

    let mut failures = Failures::default();
    let mut create = histogram()?;
    let mut ids: Vec<String> = Vec::with_capacity(usize::try_from(args.count).unwrap_or(0));
    let t0 = Instant::now();
    let timeout = args.timeout;
    let mut results = futures::stream::iter(0..args.count)
        .map(|_| {
            let body = body.clone();
            let api = &api;
            async move {
                match tokio::time::timeout(timeout, create_one(api, body)).await {
                    Ok(r) => r,
                    Err(_) => Err(CallError::from(ErrorKind::Timeout).during("create")),
                }
            }
        })
        .buffer_unordered(in_flight);
    while let Some(r) = results.next().await {
        match r {
            Ok((latency, id)) => {
                create.saturating_record(micros(latency));
                ids.push(id);
            }
            Err(f) => failures.add(f),
        }
    }
    drop(results);
    let create_s = t0.elapsed();
    if ids.is_empty() {
        bail!(
            "no run was created: {}",
            serde_json::to_string(failures.samples()).unwrap_or_default()
        );
    }
    eprintln!(
        "parked: created {} runs in {:.1} s ({} failed); waiting for them to park",
        ids.len(),
        create_s.as_secs_f64(),
        failures.total()
    );

    let mut waiting: HashSet<String> = ids.iter().cloned().collect();
    let wait_start = Instant::now();
    let mut poll_errors = 0;
    loop {
        let before = waiting.len();
        match poll_parked(&api, &args.agent, &mut waiting).await {
            Ok(()) => poll_errors = 0,
            Err(e) => {
                poll_errors += 1;
                failures.add(e.during("list"));
                if poll_errors >= MAX_POLL_ERRORS {
                    eprintln!(
                        "parked: listing runs failed {MAX_POLL_ERRORS} times in a row; giving up the wait"
                    );
                    break;
                }
            }
        }
        if waiting.is_empty() || wait_start.elapsed() >= args.park_timeout {
            break;
        }
        if waiting.len() == before {
            check_stragglers(&api, &mut waiting, in_flight, &mut failures).await;
            if waiting.is_empty() {
                break;
            }
        }
        eprintln!(
            "parked: {} of {} parked",
            ids.len() - waiting.len(),
            ids.len()
        );
        tokio::time::sleep(args.poll_interval).await;
    }
    let park_s = t0.elapsed();
    let memory_parked = rss::read_opt(args.weft.executor_pid);
    let failed_to_park: u64 = failures
        .counts()
        .iter()
        .filter(|(k, _)| k.starts_with("park:"))
        .map(|(_, v)| v)
        .sum();
    let parked = u64::try_from(ids.len() - waiting.len())
        .unwrap_or(u64::MAX)
        .saturating_sub(failed_to_park);
    eprintln!(
        "parked: {parked} of {} parked after {:.1} s; settling {:?}",
        ids.len(),
        park_s.as_secs_f64(),
        args.settle
    );
    tokio::time::sleep(args.settle).await;
    let memory_settled = rss::read_opt(args.weft.executor_pid);
    let all_parked = waiting.is_empty() && failed_to_park == 0;

    let (cleanup_cancelled, cleanup_s) = if args.keep_parked {
        (None, None)
    } else {
        let started = Instant::now();
        let n = cancel_all(&api, ids.clone(), in_flight, args.timeout, &mut failures).await;
        let s = started.elapsed();
        eprintln!("parked: cancelled {n} runs in {:.1} s", s.as_secs_f64());
        (Some(n), Some(round3(s.as_secs_f64())))
    };

    Ok(ParkedReport {
        scenario: "parked",
        url: api.base().to_owned(),
        agent: args.agent.clone(),
        count: args.count,
        in_flight: args.in_flight,
        created: u64::try_from(ids.len()).unwrap_or(u64::MAX),
        parked,
        all_parked,
        create_s: round3(create_s.as_secs_f64()),
        park_s: round3(park_s.as_secs_f64()),
        create_us: Summary::of(&create),
        failures: failures.total(),
        failure_kinds: failures.counts().clone(),
        failure_samples: failures.samples().clone(),
        executor_pid: args.weft.executor_pid,
        executor_memory_before: memory_before,
        executor_memory_parked: memory_parked,
        executor_memory_settled: memory_settled,
        settle_s: round3(args.settle.as_secs_f64()),
        rss_per_parked_run_bytes: per_run(memory_before, memory_parked, parked),
        rss_per_parked_run_settled_bytes: per_run(memory_before, memory_settled, parked),
        cleanup_cancelled,
        cleanup_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_per_run_is_the_growth_over_the_runs() {
        let m = |rss_kib| Memory {
            rss_kib,
            hwm_kib: rss_kib,
        };
        assert_eq!(per_run(Some(m(1000)), Some(m(2000)), 1024), Some(1000));
        assert_eq!(
            per_run(Some(m(2000)), Some(m(1000)), 10),
            Some(0),
            "shrinking is 0"
        );
        assert_eq!(per_run(None, Some(m(1000)), 10), None);
        assert_eq!(per_run(Some(m(1)), Some(m(2)), 0), None);
    }
}
