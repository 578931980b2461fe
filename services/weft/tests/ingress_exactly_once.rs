//! Exactly once across replicas, with no leader: three `weft ingress` processes tick against
//! one database and fire 2,000 schedule slots — 95 schedules firing every second until their
//! `max_fires` of 20, plus 100 `run-now` fires — while one replica is killed (SIGKILL) in the
//! middle. Every slot must have exactly one run: 0 double, 0 missed, counted from the `runs`
//! table (never from logs). No executor runs, so runs stay queued and are only counted.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{Proc, TestFleet};
use serde_json::json;

const SCHEDULES: usize = 95;
const MAX_FIRES: i64 = 20;
const RUN_NOW: usize = 100;

fn ingress_process(f: &TestFleet) -> Proc {
    let c = &f.config;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.arg("ingress")
        .env("WEFT_DATABASE__URL", c.database.url.expose())
        .env("WEFT_NATS__PREFIX", &c.nats.prefix)
        .env("WEFT_REDIS__PREFIX", &c.redis.prefix)
        .env(
            "WEFT_AUTH__INTERNAL_JWT_SECRET",
            c.auth.internal_jwt_secret.as_ref().unwrap().expose(),
        )
        .env(
            "WEFT_INGRESS__SUBSTRATE_URL",
            format!("http://{}", f.fleet.substrate_addr),
        )
        .env("WEFT_INGRESS__LISTEN", "127.0.0.1:0")
        // Three replicas beside other tests' fleets stay well inside Postgres's 100
        // connections (the default pool is 16 each).
        .env("WEFT_DATABASE__MAX_CONNECTIONS", "6")
        .env("WEFT_INGRESS__TICK_MS", "100")
        .env("WEFT_INGRESS__SWEEP_MS", "300")
        .env("WEFT_INGRESS__RECLAIM_AFTER_MS", "1500")
        .env("WEFT_GATEWAY__TENANT_MAX_CONCURRENT_RUNS", "1000000")
        .env("WEFT_TELEMETRY__LOG_LEVEL", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    Proc(cmd.spawn().unwrap())
}

async fn scalar(pool: &sqlx::PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn three_replicas_fire_every_slot_exactly_once_while_one_is_killed() {
    let f = TestFleet::start_with(|c| {
        c.ingress.embedded = false;
        c.executor.embedded = false;
        c.gateway.tenant_max_concurrent_runs = 1_000_000;
    })
    .await;
    let pool = sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap();
    let (s, body) = f
        .put("/v1/agents/ticker", &f.admin, json!({"model": "mock-1"}))
        .await;
    assert!(s == 201 || s == 200, "{body}");

    let mut replicas = vec![
        ingress_process(&f),
        ingress_process(&f),
        ingress_process(&f),
    ];
    for i in 0..SCHEDULES {
        let (s, body) = f
            .put(
                &format!("/v1/schedules/every-second-{i}"),
                &f.admin,
                json!({"cron": "* * * * * *", "timezone": "UTC", "agent": "ticker",
                       "input": "tick", "max_fires": MAX_FIRES, "catch_up_max": 1000}),
            )
            .await;
        assert_eq!(s, 201, "{body}");
    }

    // run-now fires, spread over the schedules while they are live; half of the cron slots
    // fired, one replica is killed.
    let target = i64::try_from(SCHEDULES).unwrap() * MAX_FIRES;
    let mut killed = false;
    for i in 0..RUN_NOW {
        let (s, body) = f
            .post(
                &format!("/v1/schedules/every-second-{}/run-now", i % SCHEDULES),
                &f.admin,
                json!({}),
            )
            .await;
        assert_eq!(s, 202, "{body}");
        assert!(body["run_id"].is_string(), "{body}");
        if !killed
            && scalar(
                &pool,
                "SELECT count(*) FROM schedule_fires WHERE kind = 'cron'",
            )
            .await
                >= target / 2
        {
            let mut victim = replicas.remove(0);
            victim.0.kill().unwrap();
            victim.0.wait().unwrap();
            killed = true;
        }
    }
    // Kill one mid-way if the run-now loop ended first.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    while !killed {
        if scalar(
            &pool,
            "SELECT count(*) FROM schedule_fires WHERE kind = 'cron'",
        )
        .await
            >= target / 2
        {
            let mut victim = replicas.remove(0);
            victim.0.kill().unwrap();
            victim.0.wait().unwrap();
            killed = true;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "cron fires never reached half"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Every schedule retires at max_fires, and every fire becomes a run.
    loop {
        let live = scalar(
            &pool,
            "SELECT count(*) FROM schedules WHERE retired_at IS NULL",
        )
        .await;
        let pending = scalar(
            &pool,
            "SELECT count(*) FROM schedule_fires WHERE status = 'claimed'",
        )
        .await;
        if live == 0 && pending == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not done: {live} schedules live, {pending} fires claimed without a run"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Counted from runs, one group per fire: a cron fire is its schedule's slot; a run-now fire
    // is its own (two can fall in the same second, which is all `fire_at` shows), named by the
    // fire's idempotency key (its time to the microsecond).
    let rows: Vec<(String, String, String, i64)> = sqlx::query_as(
        "SELECT spec->'metadata'->>'schedule', spec->'metadata'->>'fire_kind',
                min(spec->'metadata'->>'fire_at'), count(*)
         FROM runs WHERE subject LIKE 'schedule:%'
         GROUP BY 1, 2,
                  CASE WHEN spec->'metadata'->>'fire_kind' = 'run_now' THEN idempotency_key
                       ELSE spec->'metadata'->>'fire_at' END",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let doubles: Vec<_> = rows.iter().filter(|r| r.3 != 1).collect();
    assert!(
        doubles.is_empty(),
        "slots with more than one run: {doubles:?}"
    );
    let mut cron: BTreeMap<&str, BTreeSet<time::OffsetDateTime>> = BTreeMap::new();
    let mut run_now = 0usize;
    for (schedule, kind, at, _) in &rows {
        let at = time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
            .unwrap();
        match kind.as_str() {
            "cron" => {
                cron.entry(schedule).or_default().insert(at);
            }
            "run_now" => run_now += 1,
            other => panic!("unknown fire kind {other}"),
        }
    }
    assert_eq!(cron.len(), SCHEDULES, "every schedule fired");
    let mut missed = 0;
    for (schedule, slots) in &cron {
        assert_eq!(
            i64::try_from(slots.len()).unwrap(),
            MAX_FIRES,
            "{schedule}: {} cron runs",
            slots.len()
        );
        // Consecutive seconds: no slot between the first and the last was skipped.
        let first = *slots.iter().next().unwrap();
        let last = *slots.iter().next_back().unwrap();
        let span = (last - first).whole_seconds() + 1;
        missed += span - MAX_FIRES;
    }
    assert_eq!(missed, 0, "slots missed inside the fired spans");
    assert_eq!(run_now, RUN_NOW, "run-now fires, one run each");
    let total = scalar(
        &pool,
        "SELECT count(*) FROM runs WHERE subject LIKE 'schedule:%'",
    )
    .await;
    assert_eq!(total, target + i64::try_from(RUN_NOW).unwrap());
    // The fire rows agree: every one dispatched, none failed.
    let failed = scalar(
        &pool,
        "SELECT count(*) FROM schedule_fires WHERE status <> 'dispatched'",
    )
    .await;
    assert_eq!(failed, 0, "fires not dispatched");
    let reclaimed = scalar(
        &pool,
        "SELECT count(*) FROM schedule_fires WHERE attempts > 0",
    )
    .await;
    eprintln!(
        "{} runs for {} slots: 0 double, 0 missed; {reclaimed} fires taken over from the killed replica",
        total,
        target + i64::try_from(RUN_NOW).unwrap()
    );
    drop(replicas);
    f.stop().await;
}
