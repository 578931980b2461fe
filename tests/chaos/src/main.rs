//! `weft-chaos`: the fleet under fire.
//!
//! `weft-chaos cluster` starts N replicas of every service as separate processes behind local
//! load balancers, on a Postgres, Redis and NATS of their own, prints the URL and the admin
//! token, and keeps them up until interrupted (`deploy/local/cluster.sh`).
//!
//! `weft-chaos run` does the same, then holds a steady mixed load while injecting faults, lets
//! the fleet settle, checks the final state against weft's promises and prints the load held,
//! the faults by kind and the violations found. It exits 1 on any violation
//! (`deploy/local/chaos.sh`; docs/reliability.md).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line harness: its report is its output"
)]

mod api;
mod check;
mod faults;
mod fleet;
mod lb;
mod load;
mod maintenance;
mod netns;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use tokio::sync::Mutex;

#[derive(Parser)]
#[command(
    version,
    about = "weft's fault harness: a multi-replica fleet, a mixed load, faults, and a checker"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Replicas of each service.
    #[arg(long, global = true, default_value_t = 2)]
    replicas: usize,
    /// Where the weft binaries are.
    #[arg(long, global = true, default_value = "target/debug")]
    bin_dir: PathBuf,
    /// Working folder (logs, the Postgres cluster, the NATS store); a fresh one is made inside.
    #[arg(long, global = true, default_value = "target/chaos")]
    work: PathBuf,
    /// The executors' lease, in milliseconds (a frozen executor is held for 2.5 of them).
    #[arg(long, global = true, default_value_t = 3000)]
    lease_ttl_ms: u64,
    /// Keep every replica on loopback: no network namespaces, so no partition is injected.
    /// Without root or iproute2 that is what happens anyway.
    #[arg(long, global = true)]
    no_partition: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the fleet and keep it up until Ctrl-C.
    Cluster,
    /// Load + faults + check.
    Run(RunArgs),
}

#[derive(clap::Args, Clone, Copy)]
struct RunArgs {
    /// How long the load and the faults last, e.g. 120s, 10m, 1h.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    duration: Duration,
    /// A replica is killed (-9) this often.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    kill_every: Duration,
    /// Run workers (each has one run with tools and a sub-run at a time).
    #[arg(long, default_value_t = 3)]
    run_workers: usize,
    /// Chat workers.
    #[arg(long, default_value_t = 4)]
    chat_workers: usize,
    /// Chat calls a second, at most, across the chat workers.
    #[arg(long, default_value_t = 40)]
    chat_rate: u32,
    /// How long the fleet may take to finish every accepted run after the faults stop.
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    settle: Duration,
    /// The fleet's maintenance (POST /v1/fleet/drain) begins this long into the load (0s: no
    /// maintenance); it is held this long once every run is parked, then resumed.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    maintenance_at: Duration,
    #[arg(long, default_value = "6s", value_parser = parse_duration)]
    maintenance_hold: Duration,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: write a number and s, m or h"))?;
    match unit {
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        "ms" => Ok(Duration::from_millis(n)),
        _ => Err(format!("{s:?}: the unit is s, m or h")),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match real_main(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weft-chaos: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn real_main(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let work = std::path::absolute(&cli.work)?.join(format!("{stamp}-{}", std::process::id()));
    // The last replica of the executor and of the gateway in network namespaces of their own,
    // to be partitioned (runs only; `cluster` keeps everything on loopback).
    let netns = if matches!(cli.cmd, Cmd::Run(_)) && !cli.no_partition && cli.replicas >= 2 {
        if fleet::is_root() {
            netns::Netns::create(2)
                .map_err(|e| {
                    println!(
                        "network namespaces unavailable ({e:#}): replicas share loopback, no partition"
                    );
                })
                .ok()
        } else {
            println!("not root: replicas share loopback, no partition");
            None
        }
    } else {
        None
    };
    let host = netns
        .as_ref()
        .map_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), |n| {
            std::net::IpAddr::V4(n.host)
        });
    let echo = load::Echo::start(host).await?;
    let spec = fleet::Spec {
        replicas: cli.replicas.max(1),
        bin_dir: std::path::absolute(&cli.bin_dir)?,
        work: work.clone(),
        lease_ttl_ms: cli.lease_ttl_ms,
    };
    let t_start = Instant::now();
    let fleet = fleet::Fleet::start(&spec, netns).await;
    let fleet = match fleet {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "the fleet did not start; logs in {}",
                work.join("logs").display()
            );
            return Err(e);
        }
    };
    println!(
        "fleet: {} replicas of each of {} services, up in {:.1}s\n  url: {}\n  admin token: {}\n  logs: {}",
        spec.replicas,
        fleet::SERVICES.len(),
        t_start.elapsed().as_secs_f64(),
        fleet.gateway_url,
        fleet.admin_token,
        work.join("logs").display()
    );
    let fleet = Arc::new(Mutex::new(fleet));
    let outcome = match cli.cmd {
        Cmd::Cluster => {
            interrupted().await;
            Ok(std::process::ExitCode::SUCCESS)
        }
        Cmd::Run(args) => {
            tokio::select! {
                outcome = run(
                    Arc::clone(&fleet),
                    &echo,
                    &args,
                    Duration::from_millis(cli.lease_ttl_ms),
                ) => outcome,
                sig = interrupted() => {
                    // The run (its load, its faults) is dropped here; what follows stops every
                    // process and removes the namespaces and the address the run made.
                    println!("weft-chaos: {sig}: stopping the fleet; no verdict");
                    Ok(std::process::ExitCode::from(130))
                }
            }
        }
    };
    fleet.lock().await.stop().await;
    // The database and the NATS store are only evidence while something failed; the logs stay.
    if matches!(&outcome, Ok(code) if *code == std::process::ExitCode::SUCCESS) {
        let _ = std::fs::remove_dir_all(work.join("pg"));
        let _ = std::fs::remove_dir_all(work.join("nats"));
    }
    outcome
}

/// Waits for SIGINT or SIGTERM (what `timeout` sends) and names it.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return "SIGINT";
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

async fn run(
    fleet: Arc<Mutex<fleet::Fleet>>,
    echo: &load::Echo,
    args: &RunArgs,
    lease_ttl: Duration,
) -> anyhow::Result<std::process::ExitCode> {
    let (gateway, admin, replicas, database_url) = {
        let f = fleet.lock().await;
        (
            f.gateway_url.clone(),
            f.admin_token.clone(),
            f.gateway_replicas.clone(),
            f.database_url.clone(),
        )
    };
    let setup = Arc::new(load::prepare(&gateway, &admin, echo.addr).await?);
    let tally = Arc::new(load::Tally::default());
    let revoked_before =
        load::revocation_across_replicas(&setup, &replicas, Duration::from_secs(5)).await;

    let RunArgs {
        duration,
        kill_every,
        run_workers,
        chat_workers,
        chat_rate,
        settle,
        maintenance_at,
        maintenance_hold,
    } = *args;
    let t0 = Instant::now();
    let t0_wall = std::time::SystemTime::now();
    let stop = t0 + duration;
    let chat_every = Duration::from_secs_f64(chat_workers as f64 / chat_rate.max(1) as f64);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..run_workers {
        let (s, t) = (Arc::clone(&setup), Arc::clone(&tally));
        tasks.spawn(async move { load::runs_worker(&s, &t, stop).await });
    }
    for _ in 0..chat_workers {
        let (s, t) = (Arc::clone(&setup), Arc::clone(&tally));
        tasks.spawn(async move { load::chat_worker(&s, &t, stop, chat_every).await });
    }
    {
        let (s, t) = (Arc::clone(&setup), Arc::clone(&tally));
        tasks.spawn(async move { load::interactive_worker(&s, &t, stop, stop + settle).await });
        let (s, t) = (Arc::clone(&setup), Arc::clone(&tally));
        tasks.spawn(async move { load::cancel_worker(&s, &t, stop).await });
        let (s, t) = (Arc::clone(&setup), Arc::clone(&tally));
        tasks.spawn(async move { load::webhook_sender(&s, &t, stop).await });
        let (s, t, r) = (Arc::clone(&setup), Arc::clone(&tally), replicas.clone());
        tasks.spawn(async move { load::isolation_prober(&s, &r, &t, stop).await });
        let (s, t) = (Arc::clone(&setup), Arc::clone(&tally));
        tasks.spawn(async move { load::rest_writer(&s, &t, stop).await });
        // Twice the quota tenant's requests_per_minute.
        let per_sec = 2.0 * load::QUOTA_RPM as f64 / 60.0;
        let (s, t) = (Arc::clone(&setup), Arc::clone(&tally));
        tasks.spawn(async move { load::quota_worker(&s, &t, stop, per_sec).await });
    }
    let maintenance = (!maintenance_at.is_zero() && maintenance_at < duration).then(|| {
        let s = Arc::clone(&setup);
        tokio::spawn(
            async move { maintenance::run(&s, t0 + maintenance_at, maintenance_hold).await },
        )
    });
    let plan = faults::Plan {
        duration,
        kill_every,
        lease_ttl,
    };
    let injected = faults::run(
        Arc::clone(&fleet),
        plan,
        setup.a.clone(),
        Arc::clone(&tally),
    )
    .await;
    while tasks.join_next().await.is_some() {}
    let window = match maintenance {
        Some(m) => Some(m.await?),
        None => None,
    };
    let held = t0.elapsed();

    // Settle: every process up, every accepted run ended.
    let db = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&database_url)
        .await?;
    let accepted = tally.accepted();
    let t_settle = Instant::now();
    let open = check::settle(&db, &accepted, settle).await;
    let settled_in = t_settle.elapsed();
    let revoked_after =
        load::revocation_across_replicas(&setup, &replicas, Duration::from_secs(5)).await;
    if let Err(e) = &revoked_before {
        tally.violation(format!(
            "revocation across replicas, before the faults: {e}"
        ));
    }
    if let Err(e) = &revoked_after {
        tally.violation(format!("revocation across replicas, after the faults: {e}"));
    }
    if !injected.redis_down_answers.keys().any(|s| *s == 503) {
        tally.violation(format!(
            "while Redis was down, POST /v1/runs never answered 503: {:?}",
            injected.redis_down_answers
        ));
    }
    let echo_seen = echo.seen.lock().map(|m| m.clone()).unwrap_or_default();
    let mut report = check::check(
        &db,
        &tally,
        &echo_seen,
        "chaos-chat",
        t0_wall,
        held,
        &injected,
    )
    .await?;
    if let Some(w) = &window {
        let (parked, v) = check::maintenance(&db, w).await?;
        report.lines.push((
            "maintenance: nothing worked while every run was parked, every parked run resumed, the schedule held its slots until the resume, new runs and webhooks got 503 with Retry-After".to_owned(),
            parked,
            v,
        ));
    }

    // The report.
    let secs = held.as_secs_f64();
    let chat_ok = tally.chat_ok.load(Ordering::Relaxed);
    let chat_tried = tally.chat_attempts.load(Ordering::Relaxed);
    let by_kind = |k: &str| accepted.iter().filter(|a| a.kind == k).count();
    println!("\nload held for {secs:.0}s:");
    println!(
        "  chat: {chat_tried} tried, {chat_ok} answered ({} streamed) — {:.1} req/s",
        tally.stream_ok.load(Ordering::Relaxed),
        chat_tried as f64 / secs
    );
    println!(
        "  runs: {} accepted ({} with tools and a sub-run, {} interactive, {} cancelled) of {} started — {:.1} runs/s; {} interruptions answered, {} cancels sent",
        accepted.len(),
        by_kind("worker"),
        by_kind("interactive"),
        by_kind("cancelled"),
        tally.runs_attempted.load(Ordering::Relaxed),
        accepted.len() as f64 / secs,
        tally.interactive_answered.load(Ordering::Relaxed),
        tally.cancels_sent.load(Ordering::Relaxed),
    );
    println!(
        "  refused or cut calls (what a client retried): {:?}",
        tally.refusals.lock().map(|m| m.clone()).unwrap_or_default()
    );
    println!(
        "  webhooks: {} deliveries accepted ({} sends, each accepted one sent again with its delivery id)",
        tally.deliveries.lock().map(|m| m.len()).unwrap_or(0),
        tally.deliveries_sent.load(Ordering::Relaxed)
    );
    {
        let calls = tally
            .quota_calls
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        let admitted = calls.iter().filter(|c| c.2 == 200).count();
        let refused = calls.iter().filter(|c| c.2 == 429).count();
        println!(
            "  quota tenant: {} chat calls at {:.1}/s against {} a minute: {admitted} admitted, {refused} refused (429)",
            calls.len(),
            calls.len() as f64 / secs,
            load::QUOTA_RPM
        );
    }
    println!(
        "  REST writes: {} memory sets + publishes acknowledged of {} tried; {} of {} increments acknowledged",
        tally.rest_acked.lock().map(|a| a.len()).unwrap_or(0),
        tally.rest_tried.lock().map(|a| a.len()).unwrap_or(0),
        tally.incr_acked.load(Ordering::Relaxed),
        tally.incr_sent.load(Ordering::Relaxed)
    );
    println!("faults injected:");
    for (k, n) in &injected.by_kind {
        println!("  {n:>4}  {k}");
    }
    println!(
        "  while Redis was down, POST /v1/runs answered: {:?}",
        injected.redis_down_answers
    );
    println!(
        "  the frozen executor, thawed, found its lease lost {} times (its writes refused)",
        injected.stale_lease_refusals
    );
    println!(
        "  the partitioned executor, healed, found its lease lost {} times",
        injected.partition_lease_lost
    );
    println!(
        "  tenant isolation: {} reads of tenant A's runs as tenant B through each gateway replica, {} of B's run lists",
        tally.probes.load(Ordering::Relaxed),
        tally.list_probes.load(Ordering::Relaxed)
    );
    println!(
        "settled in {:.1}s ({open} runs still open); token revocation seen on the other replica in {:?} before, {:?} after",
        settled_in.as_secs_f64(),
        revoked_before,
        revoked_after
    );
    {
        let f = fleet.lock().await;
        let lost: Vec<String> = f
            .balancers
            .iter()
            .map(|(s, b)| format!("{s} {}", b.no_backend.load(Ordering::Relaxed)))
            .collect();
        println!(
            "  connections that found no replica up, by balancer: {}",
            lost.join(", ")
        );
    }
    println!("checks:");
    for (what, checked, v) in &report.lines {
        println!(
            "  [{}] {what} — {checked} checked, {} violations",
            if v.is_empty() { "ok" } else { "FAIL" },
            v.len()
        );
        for line in v.iter().take(10) {
            println!("        {line}");
        }
    }
    if let Some(w) = &window {
        println!("maintenance:");
        for l in &w.log {
            println!("  {l}");
        }
    }
    println!("fault log:");
    for l in &injected.log {
        println!("  {l}");
    }
    let violations = report.violations();
    println!("violations: {violations}");
    Ok(if violations == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
