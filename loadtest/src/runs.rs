//! The `runs` scenario: N closed-loop workers, each starting an agent run (`POST /v1/runs`),
//! following it on `GET /v1/runs/{id}/stream` until `run_finished`, and starting the next.
//!
//! A measured run is a mock script of three model turns and two `Context` tool calls, so it
//! exercises dispatch, the executor loop, tools, the transcript and the live stream without a
//! real model. Every `--cancel-every`-th run of a worker is instead a long run on a slow model,
//! cancelled as soon as its stream shows `provider_chosen` (an executor holds it by then); the
//! cancel-ack time is from sending the cancel to reading `run_finished` with status
//! `cancelled`, with the stream read while the cancel request is in flight.
//!
//! Time is a warm-up (runs started are not recorded) and then the measured window, as in
//! `chat`; each run has a `--timeout`, so the scenario always ends by itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http::Method;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::api::{Api, CallError, EventStream, is_path_safe, snippet};
use crate::cli::RunsArgs;
use crate::report::{ErrorKind, Failure, Failures, Summary, histogram, micros};
use crate::rss::{self, Memory};

/// Model turns and tool results of the measured run's script, checked on every run so a run
/// that "succeeds" without doing the work does not pass.
const TURNS: u32 = 3;
const TOOL_RESULTS: u32 = 2;
/// After a failure a worker waits this long before its next run, so a server refusing at once
/// is not hammered in a tight loop (and the report is not a count of fast refusals).
const BACKOFF: Duration = Duration::from_millis(50);
/// How long to wait for the end of a stream's body after `run_finished` so its connection can
/// be reused.
const DRAIN: Duration = Duration::from_secs(1);

/// A `#mock` line: turn k makes the tool calls of `turns[k]`, then the model answers `reply`.
fn mock_script(turns: &[Value], reply: &str) -> String {
    format!("#mock {}", json!({"turns": turns, "reply": reply}))
}

/// The measured run's input: turn 1 calls `Context` (time), turn 2 calls `Context` (self),
/// turn 3 replies.
pub fn quick_script() -> String {
    mock_script(
        &[
            json!([{"name": "Context", "input": {"op": "time"}}]),
            json!([{"name": "Context", "input": {"op": "self"}}]),
        ],
        "done",
    )
}

/// The cancelled run's input: `turns` turns of one `Context` call each, then a reply of `words`
/// words.
pub fn slow_script(turns: u32, words: u32) -> String {
    let turn = json!([{"name": "Context", "input": {"op": "time"}}]);
    let turns: Vec<Value> = (0..turns).map(|_| turn.clone()).collect();
    let reply = vec!["word"; words as usize].join(" ");
    mock_script(&turns, &reply)
}

/// The `POST /v1/runs` body.
pub fn run_body(agent: &str, input: &str) -> Value {
    json!({"agent": agent, "input": input})
}

/// The `status` of a `run_finished` frame's data (`{"seq", "kind", "data": {"status", …}}`).
fn finished_status(data: &str) -> String {
    serde_json::from_str::<Value>(data)
        .ok()
        .and_then(|v| v.pointer("/data/status")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Where a run is, for naming a timeout after the step it happened in.
struct Progress {
    phase: &'static str,
    /// StartRun latency, once the 201 arrived.
    start: Option<Duration>,
}

impl Progress {
    fn new() -> Self {
        Self {
            phase: "start",
            start: None,
        }
    }
}

enum Done {
    Run(Duration),
    Cancel(Duration),
}

/// The request bodies, serialised once and shared by every worker.
struct Bodies {
    quick: Bytes,
    slow: Bytes,
}

async fn start_run(
    api: &Api,
    body: Bytes,
    origin: Instant,
    progress: &mut Progress,
) -> Result<String, Failure> {
    progress.phase = "start";
    let v = api
        .json(Method::POST, "/v1/runs", Some(body), &[201])
        .await
        .map_err(|e| e.during("start"))?;
    progress.start = Some(origin.elapsed());
    match v.get("run_id").and_then(Value::as_str) {
        Some(id) if is_path_safe(id) => Ok(id.to_owned()),
        _ => Err(Failure::new(
            "start:invalid",
            Some(snippet(v.to_string().as_bytes())),
        )),
    }
}

async fn open_stream(api: &Api, id: &str, progress: &mut Progress) -> Result<EventStream, Failure> {
    progress.phase = "stream";
    api.stream(&format!("/v1/runs/{id}/stream"))
        .await
        .map_err(|e| e.during("stream"))
}

/// The next frame of a run stream; the end of the body before `run_finished` and the gateway's
/// own `error` event (one without an `id`, unlike the run's `error` events) are failures.
async fn next_frame(stream: &mut EventStream) -> Result<crate::sse::Frame, Failure> {
    let frame = stream
        .next()
        .await
        .map_err(|e| e.during("stream"))?
        .ok_or_else(|| CallError::from(ErrorKind::Incomplete).during("stream"))?;
    if frame.event == "error" && frame.id.is_none() {
        return Err(Failure::new(
            "stream:error",
            Some(snippet(frame.data.as_bytes())),
        ));
    }
    Ok(frame)
}

/// One measured run; its end-to-end latency.
async fn quick_run(api: &Api, body: Bytes, progress: &mut Progress) -> Result<Duration, Failure> {
    let origin = Instant::now();
    let id = start_run(api, body, origin, progress).await?;
    let mut stream = open_stream(api, &id, progress).await?;
    let (mut turns, mut tools) = (0u32, 0u32);
    loop {
        let frame = next_frame(&mut stream).await?;
        match frame.event.as_str() {
            "assistant_message" => turns += 1,
            "tool_result" => tools += 1,
            "run_finished" => {
                let e2e = origin.elapsed();
                stream.drain(DRAIN).await;
                let status = finished_status(&frame.data);
                if status != "succeeded" {
                    return Err(Failure::new(
                        format!("run:{status}"),
                        Some(snippet(frame.data.as_bytes())),
                    ));
                }
                if (turns, tools) != (TURNS, TOOL_RESULTS) {
                    return Err(Failure::new(
                        "run:transcript",
                        Some(format!(
                            "expected {TURNS} assistant messages and {TOOL_RESULTS} tool results, saw {turns} and {tools} (does the agent allow the Context tool?)"
                        )),
                    ));
                }
                return Ok(e2e);
            }
            _ => {}
        }
    }
}

/// One long run, cancelled once an executor holds it; the cancel-ack time.
async fn cancel_run(api: &Api, body: Bytes, progress: &mut Progress) -> Result<Duration, Failure> {
    let origin = Instant::now();
    let id = start_run(api, body, origin, progress).await?;
    let mut stream = open_stream(api, &id, progress).await?;
    loop {
        let frame = next_frame(&mut stream).await?;
        match frame.event.as_str() {
            "provider_chosen" => break,
            "run_finished" => {
                return Err(Failure::new(
                    "cancel:finished_before_cancel",
                    Some(snippet(frame.data.as_bytes())),
                ));
            }
            _ => {}
        }
    }
    progress.phase = "cancel";
    let path = format!("/v1/runs/{id}/cancel");
    let sent = Instant::now();
    // The stream is read while the cancel request is in flight, so `run_finished` is timed
    // when it arrives even if it beats the cancel's own response; a refused cancel ends the
    // wait at once.
    let cancel = async {
        api.call(
            Method::POST,
            &path,
            Some(Bytes::from_static(b"{\"reason\":\"weft-loadtest\"}")),
            &[200, 202],
        )
        .await
        .map_err(|e| e.during("cancel"))
    };
    let finished = async {
        loop {
            let frame = next_frame(&mut stream).await?;
            if frame.event == "run_finished" {
                return Ok::<_, Failure>((Instant::now(), frame.data));
            }
        }
    };
    let (_, (at, data)) = tokio::try_join!(cancel, finished)?;
    stream.drain(DRAIN).await;
    let status = finished_status(&data);
    if status != "cancelled" {
        return Err(Failure::new(
            format!("cancel:run_{status}"),
            Some(snippet(data.as_bytes())),
        ));
    }
    Ok(at.saturating_duration_since(sent))
}

/// One run of either kind within `timeout`; a timeout is named after the step it cut.
async fn one(
    api: &Api,
    bodies: &Bodies,
    cancel: bool,
    timeout: Duration,
    progress: &mut Progress,
) -> Result<Done, Failure> {
    let outcome = tokio::time::timeout(timeout, async {
        if cancel {
            cancel_run(api, bodies.slow.clone(), progress)
                .await
                .map(Done::Cancel)
        } else {
            quick_run(api, bodies.quick.clone(), progress)
                .await
                .map(Done::Run)
        }
    })
    .await;
    match outcome {
        Ok(r) => r,
        Err(_) => Err(Failure::new(format!("{}:timeout", progress.phase), None)),
    }
}

/// Outcomes of the measured runs.
struct Recorder {
    start: Histogram<u64>,
    end_to_end: Histogram<u64>,
    cancel_ack: Histogram<u64>,
    started: u64,
    completed: u64,
    cancel_runs: u64,
    cancelled: u64,
    failures: Failures,
}

impl Recorder {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            start: histogram()?,
            end_to_end: histogram()?,
            cancel_ack: histogram()?,
            started: 0,
            completed: 0,
            cancel_runs: 0,
            cancelled: 0,
            failures: Failures::default(),
        })
    }

    fn record(&mut self, cancel: bool, progress: &Progress, outcome: Result<Done, Failure>) {
        self.started += 1;
        if cancel {
            self.cancel_runs += 1;
        }
        if let Some(s) = progress.start {
            self.start.saturating_record(micros(s));
        }
        match outcome {
            Ok(Done::Run(d)) => {
                self.completed += 1;
                self.end_to_end.saturating_record(micros(d));
            }
            Ok(Done::Cancel(d)) => {
                self.cancelled += 1;
                self.cancel_ack.saturating_record(micros(d));
            }
            Err(f) => self.failures.add(f),
        }
    }
}

/// The JSON report of one `runs` scenario.
#[derive(Debug, Serialize)]
pub struct RunsReport {
    pub scenario: &'static str,
    pub url: String,
    pub agent: String,
    pub slow_agent: String,
    pub concurrency: u32,
    /// Every K-th run of a worker was a cancelled long run; 0 = none.
    pub cancel_every: u64,
    pub warmup_s: f64,
    pub threads: u16,
    /// From the end of the warm-up until the last measured run ended.
    pub duration_s: f64,
    /// Measured runs started (`POST /v1/runs` sent), of both kinds.
    pub runs_started: u64,
    /// Measured plain runs that finished `succeeded` with the expected transcript.
    pub runs_completed: u64,
    /// `runs_completed` per second of `duration_s`.
    pub runs_per_s: f64,
    pub failures: u64,
    /// `<phase>:<what>`: phase `start` (POST /v1/runs), `stream` (the run stream), `run` (the
    /// run ended other than `succeeded`, or without the expected transcript), `cancel`.
    pub failure_kinds: std::collections::BTreeMap<String, u64>,
    /// The first detail seen of each kind (an error body, the `run_finished` data).
    pub failure_samples: std::collections::BTreeMap<String, String>,
    /// Request → 201 of every measured `POST /v1/runs` that got one, both kinds.
    pub start_run_us: Option<Summary>,
    /// `POST /v1/runs` sent → `run_finished` read, plain runs that completed.
    pub end_to_end_us: Option<Summary>,
    /// Long runs started and cancelled.
    pub cancel_runs: u64,
    /// Of those, acknowledged: `run_finished` with status `cancelled`.
    pub cancels_acked: u64,
    /// Cancel sent → `run_finished` (`cancelled`) read.
    pub cancel_ack_us: Option<Summary>,
    pub executor_pid: Option<u32>,
    pub executor_memory_start: Option<Memory>,
    pub executor_memory_end: Option<Memory>,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One run of each kind before the load, with the reason when it fails: a wrong URL, token or
/// agent should stop the scenario at once rather than fill a report with failures.
async fn preflight(api: &Api, bodies: &Bodies, args: &RunsArgs) -> anyhow::Result<()> {
    let kinds: &[(bool, &str)] = if args.cancel_every > 0 {
        &[(false, "plain"), (true, "cancelled")]
    } else {
        &[(false, "plain")]
    };
    for &(cancel, what) in kinds {
        let mut progress = Progress::new();
        if let Err(f) = one(api, bodies, cancel, args.timeout, &mut progress).await {
            let agent = if cancel {
                &args.slow_agent
            } else {
                &args.agent
            };
            bail!(
                "the preflight {what} run (agent `{agent}`) failed with {}{}",
                f.kind,
                f.detail.map(|d| format!(": {d}")).unwrap_or_default()
            );
        }
    }
    Ok(())
}

pub async fn run(args: &RunsArgs) -> anyhow::Result<RunsReport> {
    // A worker has at most two requests in flight: its stream and a POST.
    let connections = usize::try_from(args.concurrency)
        .unwrap_or(usize::MAX)
        .saturating_mul(2);
    let api = Arc::new(Api::new(
        &args.weft.url,
        args.weft.token.as_deref(),
        connections,
    )?);
    let bodies = Arc::new(Bodies {
        quick: Bytes::from(serde_json::to_vec(&run_body(&args.agent, &quick_script()))?),
        slow: Bytes::from(serde_json::to_vec(&run_body(
            &args.slow_agent,
            &slow_script(args.slow_turns, args.slow_words),
        ))?),
    });
    if let Some(pid) = args.weft.executor_pid {
        rss::read(pid).context("--executor-pid")?;
    }
    if !args.no_preflight {
        preflight(&api, &bodies, args).await?;
    }
    eprintln!(
        "runs: concurrency {} against {} for {:?} after {:?} warm-up{}",
        args.concurrency,
        api.base(),
        args.duration,
        args.warmup,
        if args.cancel_every > 0 {
            format!(", every {}th run cancelled", args.cancel_every)
        } else {
            String::new()
        },
    );
    let memory_start = rss::read_opt(args.weft.executor_pid);

    let t0 = Instant::now();
    let measure_start = t0 + args.warmup;
    let end = measure_start + args.duration;
    let issued = Arc::new(AtomicU64::new(0));
    // One recorder for every worker, locked only to record (as in `chat`).
    let shared = Arc::new(Mutex::new(Recorder::new()?));
    let mut tasks = JoinSet::new();
    for _ in 0..args.concurrency {
        let (api, bodies, issued, shared) =
            (api.clone(), bodies.clone(), issued.clone(), shared.clone());
        let (cancel_every, timeout, max_runs) = (args.cancel_every, args.timeout, args.max_runs);
        tasks.spawn(async move {
            let mut n: u64 = 0;
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                let measured = now >= measure_start;
                if measured
                    && let Some(max) = max_runs
                    && issued.fetch_add(1, Ordering::Relaxed) >= max
                {
                    break;
                }
                n += 1;
                let cancel = cancel_every > 0 && n.is_multiple_of(cancel_every);
                let mut progress = Progress::new();
                let outcome = one(&api, &bodies, cancel, timeout, &mut progress).await;
                let failed = outcome.is_err();
                if measured && let Ok(mut rec) = shared.lock() {
                    rec.record(cancel, &progress, outcome);
                }
                if failed {
                    tokio::time::sleep(BACKOFF).await;
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a load worker failed")?;
    }
    let window = Instant::now().saturating_duration_since(measure_start);
    let memory_end = rss::read_opt(args.weft.executor_pid);

    let rec = shared
        .lock()
        .map_err(|_| anyhow::anyhow!("the recorder lock was poisoned"))?;
    let seconds = window.as_secs_f64();
    Ok(RunsReport {
        scenario: "runs",
        url: api.base().to_owned(),
        agent: args.agent.clone(),
        slow_agent: args.slow_agent.clone(),
        concurrency: args.concurrency,
        cancel_every: args.cancel_every,
        warmup_s: round3(args.warmup.as_secs_f64()),
        threads: args.weft.threads,
        duration_s: round3(seconds),
        runs_started: rec.started,
        runs_completed: rec.completed,
        runs_per_s: if seconds > 0.0 {
            (rec.completed as f64 / seconds * 10.0).round() / 10.0
        } else {
            0.0
        },
        failures: rec.failures.total(),
        failure_kinds: rec.failures.counts().clone(),
        failure_samples: rec.failures.samples().clone(),
        start_run_us: Summary::of(&rec.start),
        end_to_end_us: Summary::of(&rec.end_to_end),
        cancel_runs: rec.cancel_runs,
        cancels_acked: rec.cancelled,
        cancel_ack_us: Summary::of(&rec.cancel_ack),
        executor_pid: args.weft.executor_pid,
        executor_memory_start: memory_start,
        executor_memory_end: memory_end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script_json(s: &str) -> Value {
        serde_json::from_str(s.strip_prefix("#mock ").unwrap()).unwrap()
    }

    #[test]
    fn the_quick_script_is_three_turns_and_two_context_calls() {
        let s = script_json(&quick_script());
        let turns = s["turns"].as_array().unwrap();
        assert_eq!(turns.len() + 1, usize::try_from(TURNS).unwrap());
        let calls: Vec<&Value> = turns.iter().flat_map(|t| t.as_array().unwrap()).collect();
        assert_eq!(calls.len(), usize::try_from(TOOL_RESULTS).unwrap());
        assert_eq!(
            calls[0],
            &json!({"name": "Context", "input": {"op": "time"}})
        );
        assert_eq!(
            calls[1],
            &json!({"name": "Context", "input": {"op": "self"}})
        );
        assert_eq!(s["reply"], "done");
    }

    #[test]
    fn the_slow_script_has_the_asked_turns_and_words() {
        let s = script_json(&slow_script(50, 3));
        assert_eq!(s["turns"].as_array().unwrap().len(), 50);
        assert_eq!(s["turns"][49][0]["name"], "Context");
        assert_eq!(s["reply"], "word word word");
        let s = script_json(&slow_script(0, 100));
        assert_eq!(s["turns"].as_array().unwrap().len(), 0);
        assert_eq!(s["reply"].as_str().unwrap().split(' ').count(), 100);
        let body = run_body("bench-slow", &slow_script(2, 1));
        assert_eq!(body["agent"], "bench-slow");
        assert!(body["input"].as_str().unwrap().starts_with("#mock {"));
    }

    #[test]
    fn finished_status_reads_the_nested_data() {
        assert_eq!(
            finished_status(r#"{"seq":18,"kind":"run_finished","data":{"status":"succeeded"}}"#),
            "succeeded"
        );
        assert_eq!(finished_status(r#"{"seq":1}"#), "unknown");
        assert_eq!(finished_status("not json"), "unknown");
    }

    #[test]
    fn the_recorder_separates_plain_and_cancelled_runs() {
        let mut r = Recorder::new().unwrap();
        let started = Progress {
            phase: "stream",
            start: Some(Duration::from_micros(900)),
        };
        r.record(false, &started, Ok(Done::Run(Duration::from_millis(20))));
        r.record(true, &started, Ok(Done::Cancel(Duration::from_millis(3))));
        r.record(
            false,
            &Progress::new(),
            Err(Failure::new("start:status_429", Some("{}".into()))),
        );
        assert_eq!(
            (r.started, r.completed, r.cancel_runs, r.cancelled),
            (3, 1, 1, 1)
        );
        assert_eq!(r.start.len(), 2, "the refused POST has no StartRun latency");
        assert_eq!(r.failures.counts().get("start:status_429"), Some(&1));
        let ack = Summary::of(&r.cancel_ack).unwrap();
        assert!((3000..3010).contains(&ack.max), "{ack:?}");
    }
}
