//! The `chat` scenario: a closed loop (N workers, each sending its next request when the last
//! one finished) or an open loop (arrivals at a fixed rate whatever the latency, timed from their
//! scheduled send so a slow server cannot hide its queueing: no coordinated omission).
//!
//! Time is split into a warm-up, whose requests are sent but not recorded, and the measured
//! window. Both loops stop starting requests at the end of the window or after
//! `--max-requests` measured requests; each request is bounded by `--timeout`, so a run always
//! ends by itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cli::ChatArgs;
use crate::client::{Target, TargetSpec};
use crate::report::{ErrorKind, Load, Recorder, Report, RunInfo, ServerCost};

/// Tokio's timer has millisecond ticks and, on a busy or virtual machine, fires one to two
/// milliseconds after the deadline. The open loop therefore wakes this much before a request's
/// scheduled time and sends it then: a request sent early is timed from its actual send, a
/// request sent late from its schedule, so lateness (the generator or the machine falling
/// behind) always counts and timer granularity does not.
const LOOKAHEAD: Duration = Duration::from_millis(2);

/// When the phases begin and end, and how many measured requests may start.
#[derive(Clone, Copy)]
struct Plan {
    start: Instant,
    measure_start: Instant,
    end: Instant,
    max_requests: Option<u64>,
}

impl Plan {
    /// Whether a request starting (or scheduled) at `at` is measured, and whether it may start
    /// at all: `None` once the run is over.
    fn admit(&self, at: Instant, issued: &AtomicU64) -> Option<bool> {
        if at >= self.end {
            return None;
        }
        if at < self.measure_start {
            return Some(false);
        }
        if let Some(max) = self.max_requests
            && issued.fetch_add(1, Ordering::Relaxed) >= max
        {
            return None;
        }
        Some(true)
    }
}

pub async fn run(args: &ChatArgs) -> anyhow::Result<Report> {
    let load = match (args.concurrency, args.rate) {
        (Some(c), None) => Load::Concurrency(c),
        (None, Some(r)) => Load::Rate {
            per_second: r,
            max_in_flight: args.max_in_flight,
        },
        _ => anyhow::bail!("give exactly one of --concurrency and --rate"),
    };
    let connections = match load {
        Load::Concurrency(c) => c,
        Load::Rate { max_in_flight, .. } => max_in_flight,
    };
    let target = Arc::new(Target::new(&TargetSpec {
        url: &args.url,
        token: args.token.as_deref(),
        model: &args.model,
        prompt: &args.prompt,
        stream: args.stream,
        door: args.door,
        timeout: args.timeout,
        connections: usize::try_from(connections).unwrap_or(usize::MAX),
        headers: &args.headers,
    })?);
    if !args.no_preflight {
        target
            .preflight()
            .await
            .context("preflight request failed")?;
    }
    let info = RunInfo {
        url: args.url.clone(),
        model: args.model.clone(),
        stream: args.stream,
        load,
        warmup: args.warmup,
        threads: args.threads,
    };
    eprintln!(
        "chat: {} against {} for {:?} after {:?} warm-up{}",
        match load {
            Load::Concurrency(c) => format!("concurrency {c}"),
            Load::Rate { per_second, .. } => format!("{per_second}/s"),
        },
        args.url,
        args.duration,
        args.warmup,
        if args.stream { ", streaming" } else { "" },
    );

    let t0 = Instant::now();
    let plan = Plan {
        start: t0,
        measure_start: t0 + args.warmup,
        end: t0 + args.warmup + args.duration,
        max_requests: args.max_requests,
    };
    // The servers' CPU at the start of the measured window, read while the load runs.
    let pids = args.server_pids.clone();
    if !pids.is_empty() && crate::cpu::processes_seconds(&pids).is_none() {
        anyhow::bail!("--server-pid {pids:?}: cannot read /proc/<pid>/stat (is it running?)");
    }
    let cpu_at_start = tokio::spawn({
        let pids = pids.clone();
        async move {
            tokio::time::sleep_until(plan.measure_start).await;
            crate::cpu::processes_seconds(&pids)
        }
    });
    let recorder = match load {
        Load::Concurrency(c) => closed_loop(&target, plan, c).await?,
        Load::Rate {
            per_second,
            max_in_flight,
        } => open_loop(&target, plan, per_second, max_in_flight).await?,
    };
    let window = Instant::now().saturating_duration_since(plan.measure_start);
    let cpu_at_end = crate::cpu::processes_seconds(&pids);
    let mut report = Report::new(&info, &recorder, window);
    if !pids.is_empty()
        && let (Ok(Some(a)), Some(b)) = (cpu_at_start.await, cpu_at_end)
    {
        report.server = Some(ServerCost::new(
            &pids,
            b - a,
            report.requests,
            window.as_secs_f64(),
        ));
    }
    Ok(report)
}

async fn closed_loop(target: &Arc<Target>, plan: Plan, workers: u32) -> anyhow::Result<Recorder> {
    let issued = Arc::new(AtomicU64::new(0));
    // One recorder for all workers (a recorder's histograms are a few hundred KiB, too much to
    // keep per worker at high concurrency); the lock is held only to record.
    let shared = Arc::new(Mutex::new(Recorder::new()?));
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        let target = target.clone();
        let issued = issued.clone();
        let shared = shared.clone();
        tasks.spawn(async move {
            loop {
                let start = Instant::now();
                let Some(measured) = plan.admit(start, &issued) else {
                    break;
                };
                let outcome = target.send(start).await;
                if measured && let Ok(mut rec) = shared.lock() {
                    rec.record(outcome);
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a load worker failed")?;
    }
    into_recorder(&shared)
}

/// The recorder out of its lock, once every task that shared it has finished.
fn into_recorder(shared: &Mutex<Recorder>) -> anyhow::Result<Recorder> {
    let rec = shared
        .lock()
        .map_err(|_| anyhow::anyhow!("the recorder lock was poisoned"))?;
    let mut total = Recorder::new()?;
    total.merge(&rec)?;
    Ok(total)
}

async fn open_loop(
    target: &Arc<Target>,
    plan: Plan,
    per_second: f64,
    max_in_flight: u32,
) -> anyhow::Result<Recorder> {
    let issued = AtomicU64::new(0);
    let slots = Arc::new(Semaphore::new(
        usize::try_from(max_in_flight).unwrap_or(usize::MAX),
    ));
    let shared = Arc::new(Mutex::new(Recorder::new()?));
    let mut tasks = JoinSet::new();
    let mut n: u64 = 0;
    // Offsets are computed from the start, not accumulated, so rounding never drifts the rate.
    while let Ok(offset) = Duration::try_from_secs_f64(n as f64 / per_second) {
        let scheduled = plan.start + offset;
        let Some(measured) = plan.admit(scheduled, &issued) else {
            break;
        };
        tokio::time::sleep_until(scheduled.checked_sub(LOOKAHEAD).unwrap_or(scheduled)).await;
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                let target = target.clone();
                let shared = shared.clone();
                tasks.spawn(async move {
                    let sent = Instant::now();
                    let lag = sent.saturating_duration_since(scheduled);
                    let origin = sent.min(scheduled);
                    let outcome = target.send(origin).await;
                    drop(permit);
                    if measured && let Ok(mut rec) = shared.lock() {
                        rec.record(outcome);
                        rec.record_send_lag(lag);
                    }
                });
            }
            Err(_) => {
                if measured && let Ok(mut rec) = shared.lock() {
                    rec.record(Err(ErrorKind::Dropped));
                }
            }
        }
        // Reap finished tasks so the set stays as small as the in-flight count.
        while let Some(done) = tasks.try_join_next() {
            done.context("a request task failed")?;
        }
        n += 1;
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a request task failed")?;
    }
    into_recorder(&shared)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use weft_testkit::{Behavior, FakeUpstream};

    use super::*;
    use crate::cli::{Cli, Command};

    fn args(url: &str, extra: &[&str]) -> ChatArgs {
        let mut argv = vec!["weft-loadtest", "chat", "--url", url, "--model", "m"];
        argv.extend_from_slice(&["--warmup", "0s", "--duration", "30s"]);
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Chat(a) => a,
            _ => panic!("expected chat"),
        }
    }

    #[tokio::test]
    async fn closed_loop_stops_at_max_requests() {
        let up = FakeUpstream::start().await;
        for stream in [false, true] {
            let mut extra = vec!["--concurrency", "3", "--max-requests", "25"];
            if stream {
                extra.push("--stream");
            }
            let report = run(&args(&up.base_url, &extra)).await.unwrap();
            assert_eq!(report.requests, 25, "stream {stream}");
            assert_eq!(report.errors, 0, "{:?}", report.error_kinds);
            assert!(report.latency_us.is_some() && report.ttfb_us.is_some());
            assert_eq!(report.concurrency, Some(3));
        }
        let body = &up.recorded()[0].body;
        assert_eq!(body["model"], "m");
    }

    #[tokio::test]
    async fn open_loop_stops_at_max_requests() {
        let up = FakeUpstream::start().await;
        let report = run(&args(
            &up.base_url,
            &["--rate", "500", "--max-requests", "20", "--stream"],
        ))
        .await
        .unwrap();
        assert_eq!(report.requests, 20);
        assert_eq!(report.errors, 0, "{:?}", report.error_kinds);
        assert_eq!(report.rate, Some(500.0));
        assert!(report.send_lag_us.is_some());
    }

    #[tokio::test]
    async fn failures_are_counted_by_kind() {
        let up = FakeUpstream::start().await;
        up.push(Behavior::Fail {
            status: 503,
            retry_after: None,
        });
        up.push(Behavior::BreakMidStream);
        up.push(Behavior::Malformed);
        let report = run(&args(
            &up.base_url,
            &[
                "--concurrency",
                "1",
                "--max-requests",
                "5",
                "--stream",
                "--no-preflight",
            ],
        ))
        .await
        .unwrap();
        assert_eq!(report.requests, 5);
        assert_eq!(report.errors, 3, "{:?}", report.error_kinds);
        assert_eq!(report.error_kinds.get("status_503"), Some(&1));
        // The malformed event is `invalid`; the broken stream is `request` or `body` depending on
        // whether the server had flushed the head before the connection broke.
        assert_eq!(report.error_kinds.get("invalid"), Some(&1));
    }

    #[tokio::test]
    async fn preflight_explains_a_refusal() {
        let up = FakeUpstream::start().await;
        up.push(Behavior::Fail {
            status: 401,
            retry_after: None,
        });
        let err = run(&args(&up.base_url, &["--concurrency", "1"]))
            .await
            .unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("401"), "{msg}");
    }
}
