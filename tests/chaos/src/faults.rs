//! The fault schedule: a random replica of a random service killed (-9) every few seconds and
//! restarted; and in every cycle (the run, up to 5 minutes, then each 5 minutes) Redis, NATS and
//! Postgres restarted in turn (Postgres by a crash: immediate stop), one executor frozen
//! (SIGSTOP) past its lease and thawed, and the namespaced executor and gateway replicas
//! partitioned past the lease and healed. While Redis is down, admission must fail closed:
//! `POST /v1/runs` answers 503 and nothing is accepted.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng as _;
use rand::seq::IndexedRandom as _;
use serde_json::json;
use tokio::sync::Mutex;

use crate::api::Api;
use crate::fleet::{Fleet, SERVICES, wait_port};
use crate::load::Tally;

#[derive(Default, Debug)]
pub struct Injected {
    /// Faults by kind (`kill -9 executor`, `restart redis`, …).
    pub by_kind: BTreeMap<String, u64>,
    /// What the fleet answered while Redis was down: status → count.
    pub redis_down_answers: BTreeMap<u16, u64>,
    pub log: Vec<String>,
    /// "lease lost" lines the frozen executor logged after it was thawed.
    pub stale_lease_refusals: usize,
    /// "lease lost" lines the partitioned executor logged from the cut until a lease after the
    /// heal.
    pub partition_lease_lost: usize,
    /// NATS outages, (down, back up) in Unix milliseconds.
    pub nats_outages: Vec<(u64, u64)>,
    /// When a router replica was killed, in Unix milliseconds.
    pub router_kills: Vec<u64>,
    /// When Redis went down, in Unix milliseconds (it comes back empty: the quota check allows
    /// for it).
    pub redis_restarts: Vec<u64>,
}

/// How long after NATS is back a router may still hold usage records it could not write
/// (it publishes again every second, three times).
const NATS_CATCH_UP_MS: u64 = 10_000;

impl Injected {
    /// Router kills while NATS was down or catching up: each may lose the usage records the
    /// router held for NATS, the loss window docs/providers.md documents.
    pub fn router_kills_while_nats_away(&self) -> usize {
        self.router_kills
            .iter()
            .filter(|k| {
                self.nats_outages
                    .iter()
                    .any(|(down, up)| **k >= *down && **k <= up + NATS_CATCH_UP_MS)
            })
            .count()
    }

    fn count(&mut self, kind: &str, t0: Instant, detail: &str) {
        *self.by_kind.entry(kind.to_owned()).or_default() += 1;
        self.log.push(format!(
            "{:>6.1}s {kind} {detail}",
            t0.elapsed().as_secs_f64()
        ));
    }
}

/// The longest cycle of the fault schedule.
const CYCLE: Duration = Duration::from_secs(300);

pub struct Plan {
    pub duration: Duration,
    pub kill_every: Duration,
    pub lease_ttl: Duration,
}

/// Runs the schedule until `plan.duration` has passed; every process is running at the end.
pub async fn run(fleet: Arc<Mutex<Fleet>>, plan: Plan, a: Api, tally: Arc<Tally>) -> Injected {
    let t0 = Instant::now();
    let mut out = Injected::default();
    let d = plan.duration;
    // The other faults, at fixed fractions of each cycle: one cycle in a run of up to 5
    // minutes, so that a longer run (10 min, 1 h) goes through every fault again and again.
    let cycle = d.min(CYCLE);
    let cycles =
        u32::try_from((d.as_millis() / cycle.as_millis().max(1)).max(1)).unwrap_or(u32::MAX);
    let mut once: Vec<(Duration, &str)> = Vec::new();
    for k in 0..cycles {
        let base = cycle * k;
        for (frac, what) in [
            (0.2, "restart redis"),
            (0.3, "partition executor"),
            (0.4, "freeze executor"),
            (0.55, "restart nats"),
            (0.75, "restart postgres"),
            (0.85, "partition gateway"),
        ] {
            once.push((base + cycle.mul_f64(frac), what));
        }
    }
    let mut next_kill = t0 + plan.kill_every;
    let mut next_supervise = t0;
    let end = t0 + d;
    while Instant::now() < end {
        if let Some(&(at, what)) = once.first()
            && t0.elapsed() >= at
        {
            once.remove(0);
            match what {
                "restart redis" => restart_redis(&fleet, &a, &tally, &mut out, t0).await,
                "restart nats" => {
                    out.count("restart nats", t0, "down about 2s, a router killed 1.5s in");
                    let down = crate::load::unix_ms();
                    let port = stop_proc(&fleet, "nats").await;
                    // The routers hold the records of the calls they answered since: the one
                    // killed must have left them in the usage spool for the others.
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    kill_one(&fleet, Some("router"), &mut out, t0).await;
                    start_proc(&fleet, "nats", port, &mut out).await;
                    out.nats_outages.push((down, crate::load::unix_ms()));
                }
                "restart postgres" => {
                    let f = fleet.lock().await;
                    match f.postgres("restart").await {
                        Ok(()) => out.count("restart postgres (crash)", t0, ""),
                        Err(e) => out.log.push(format!("postgres restart failed: {e:#}")),
                    }
                }
                "freeze executor" => freeze_executor(&fleet, plan.lease_ttl, &mut out, t0).await,
                "partition executor" => {
                    partition(&fleet, "executor", plan.lease_ttl, &tally, &mut out, t0).await;
                }
                "partition gateway" => {
                    partition(&fleet, "gateway", plan.lease_ttl, &tally, &mut out, t0).await;
                }
                _ => {}
            }
            continue;
        }
        if Instant::now() >= next_kill {
            kill_one(&fleet, None, &mut out, t0).await;
            next_kill = Instant::now() + plan.kill_every;
        }
        if Instant::now() >= next_supervise {
            restart_exited(&fleet, &mut out, t0).await;
            next_supervise = Instant::now() + Duration::from_secs(1);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Anything that died on its own is started again, so the fleet can settle.
    restart_exited(&fleet, &mut out, t0).await;
    out
}

/// Starts again every process that exited on its own (one the harness killed is not running,
/// not exited), as a supervisor would: a replica that cannot start while NATS is down, say.
async fn restart_exited(fleet: &Arc<Mutex<Fleet>>, out: &mut Injected, t0: Instant) {
    let mut f = fleet.lock().await;
    for p in f.procs.iter_mut() {
        if let Some(status) = p.exited() {
            out.log.push(format!(
                "{:>6.1}s {} had exited ({status}); restarted",
                t0.elapsed().as_secs_f64(),
                p.name
            ));
            let _ = p.start().await;
        }
    }
}

/// Kills a random replica of `only`, or of a random service, and starts it again a moment
/// later.
async fn kill_one(
    fleet: &Arc<Mutex<Fleet>>,
    only: Option<&'static str>,
    out: &mut Injected,
    t0: Instant,
) {
    let (service, name) = {
        let f = fleet.lock().await;
        let mut rng = rand::rng();
        let Some(service) = only.or_else(|| SERVICES.choose(&mut rng).copied()) else {
            return;
        };
        let names: Vec<String> = f
            .procs
            .iter()
            .filter(|p| p.service == service)
            .map(|p| p.name.clone())
            .collect();
        let Some(name) = names.choose(&mut rng).cloned() else {
            return;
        };
        (service, name)
    };
    let down = Duration::from_millis(rand::rng().random_range(300..1500));
    {
        let mut f = fleet.lock().await;
        if let Some(p) = f.find(&name) {
            p.kill().await;
        }
    }
    out.count(&format!("kill -9 {service}"), t0, &name);
    if service == "router" {
        out.router_kills.push(crate::load::unix_ms());
    }
    tokio::time::sleep(down).await;
    let mut f = fleet.lock().await;
    if let Some(p) = f.find(&name)
        && let Err(e) = p.start().await
    {
        out.log.push(format!("restart {name} failed: {e:#}"));
    }
}

async fn restart_proc(fleet: &Arc<Mutex<Fleet>>, name: &str, down: Duration, out: &mut Injected) {
    let port = stop_proc(fleet, name).await;
    tokio::time::sleep(down).await;
    start_proc(fleet, name, port, out).await;
}

/// Kills `name`; its address, to wait on when it is started again.
async fn stop_proc(fleet: &Arc<Mutex<Fleet>>, name: &str) -> Option<(IpAddr, u16)> {
    let mut f = fleet.lock().await;
    let p = f.find(name)?;
    p.kill().await;
    p.port.map(|port| (p.ip, port))
}

/// Starts `name` again and waits until it listens on `port`.
async fn start_proc(
    fleet: &Arc<Mutex<Fleet>>,
    name: &str,
    port: Option<(IpAddr, u16)>,
    out: &mut Injected,
) {
    let mut f = fleet.lock().await;
    if let Some(p) = f.find(name)
        && let Err(e) = p.start().await
    {
        out.log.push(format!("restart {name} failed: {e:#}"));
    }
    drop(f);
    if let Some((ip, port)) = port
        && let Err(e) = wait_port(name, ip, port, Duration::from_secs(20)).await
    {
        out.log.push(format!("{e:#}"));
    }
}

/// Redis down for 3 s: while it is down, every `POST /v1/runs` must be refused (503) — admission
/// fails closed. The probe's answers are kept; the checker judges them.
async fn restart_redis(
    fleet: &Arc<Mutex<Fleet>>,
    a: &Api,
    tally: &Tally,
    out: &mut Injected,
    t0: Instant,
) {
    {
        let mut f = fleet.lock().await;
        let Some(p) = f.find("redis") else {
            return;
        };
        p.kill().await;
    }
    out.redis_restarts.push(crate::load::unix_ms());
    out.count("restart redis", t0, "down 3s");
    let down_until = Instant::now() + Duration::from_secs(3);
    // Give the fleet's connections a moment to notice, then probe.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut i = 0;
    while Instant::now() + Duration::from_millis(300) < down_until {
        i += 1;
        let ans = a
            .post(
                "/v1/runs",
                &json!({"agent": "leaf", "input": format!("while redis is down {i}"), "idempotency_key": format!("redis-down-{i}")}),
            )
            .await;
        *out.redis_down_answers.entry(ans.status).or_default() += 1;
        if ans.ok() {
            tally.violation(format!(
                "a run was admitted while Redis was down: {} {}",
                ans.status, ans.body
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep_until(down_until.into()).await;
    restart_proc(fleet, "redis", Duration::ZERO, out).await;
}

/// One executor frozen for 2.5 leases, then thawed: its lease has lapsed, another executor
/// has taken its runs, and its writes must be refused.
async fn freeze_executor(
    fleet: &Arc<Mutex<Fleet>>,
    lease: Duration,
    out: &mut Injected,
    t0: Instant,
) {
    let name = {
        let f = fleet.lock().await;
        let names: Vec<String> = f
            .procs
            .iter()
            .filter(|p| p.service == "executor" && p.pid().is_some())
            .map(|p| p.name.clone())
            .collect();
        let Some(n) = names.choose(&mut rand::rng()).cloned() else {
            return;
        };
        n
    };
    let frozen = lease.mul_f64(2.5);
    {
        let mut f = fleet.lock().await;
        if let Some(p) = f.find(&name)
            && p.signal("STOP").await.is_ok()
        {
            out.count(
                "freeze executor (SIGSTOP past its lease)",
                t0,
                &format!("{name} for {frozen:?}"),
            );
        }
    }
    tokio::time::sleep(frozen).await;
    let log = {
        let mut f = fleet.lock().await;
        let Some(p) = f.find(&name) else {
            return;
        };
        let _ = p.signal("CONT").await;
        p.log().to_path_buf()
    };
    // What it logs from here on: every write it tries under the lapsed lease is refused.
    let before = lease_lost_lines(&log);
    tokio::time::sleep(lease).await;
    out.stale_lease_refusals += lease_lost_lines(&log).saturating_sub(before);
}

/// The replica of `service` that runs in a network namespace cut from everything for 2.5
/// leases (the host end of its veth down), then healed. It keeps running all along: an
/// executor's lease lapses and another takes its runs; its writes after the heal must be
/// refused (the checker finds no duplicate; its "lease lost" lines are counted). A heal that
/// fails is a violation: the rest of the run would be judged with a replica cut off.
async fn partition(
    fleet: &Arc<Mutex<Fleet>>,
    service: &str,
    lease: Duration,
    tally: &Tally,
    out: &mut Injected,
    t0: Instant,
) {
    let found = {
        let f = fleet.lock().await;
        f.procs
            .iter()
            .filter(|p| p.service == service)
            .find_map(|p| {
                let (k, _) = p.space.as_ref()?;
                Some((*k, p.name.clone(), p.log().to_path_buf()))
            })
    };
    let Some((k, name, log)) = found else {
        out.log.push(format!(
            "no {service} replica runs in a network namespace: partition skipped"
        ));
        return;
    };
    let cut = lease.mul_f64(2.5);
    let before = lease_lost_lines(&log);
    {
        let f = fleet.lock().await;
        let Some(n) = &f.netns else {
            return;
        };
        if let Err(e) = n.link(k, false) {
            out.log.push(format!("partition {name}: {e:#}"));
            return;
        }
    }
    out.count(
        &format!("partition {service} (its link down past the lease)"),
        t0,
        &format!("{name} for {cut:?}"),
    );
    tokio::time::sleep(cut).await;
    {
        let f = fleet.lock().await;
        if let Some(n) = &f.netns
            && let Err(e) = n.link(k, true).or_else(|_| n.link(k, true))
        {
            tally.violation(format!(
                "the partition of {name} could not be healed: {e:#}"
            ));
        }
    }
    if service == "executor" {
        tokio::time::sleep(lease).await;
        out.partition_lease_lost += lease_lost_lines(&log).saturating_sub(before);
    }
}

fn lease_lost_lines(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .map(|t| t.lines().filter(|l| l.contains("lease lost")).count())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_kills_count_only_while_nats_is_away_or_catching_up() {
        let i = Injected {
            nats_outages: vec![(100_000, 102_000)],
            router_kills: vec![99_999, 100_000, 101_000, 112_000, 112_001],
            ..Injected::default()
        };
        assert_eq!(i.router_kills_while_nats_away(), 3);
        assert_eq!(Injected::default().router_kills_while_nats_away(), 0);
    }
}
