//! The checker: once the load and the faults have stopped and the fleet has settled, it reads
//! the final state from Postgres (and from the load's own records) and lists every violation
//! of weft's promises.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sqlx::{PgPool, Row as _};

use crate::load::{Accepted, CHANNEL, QUOTA_RPM, REST_CHANNEL, TENANT_A, Tally};

pub struct Report {
    /// (invariant, checked count, violations).
    pub lines: Vec<(String, u64, Vec<String>)>,
}

impl Report {
    pub fn violations(&self) -> usize {
        self.lines.iter().map(|(_, _, v)| v.len()).sum()
    }

    fn add(&mut self, what: &str, checked: u64, violations: Vec<String>) {
        self.lines.push((what.to_owned(), checked, violations));
    }
}

/// Waits until every accepted run has ended (or `within` passes).
pub async fn settle(db: &PgPool, accepted: &[Accepted], within: Duration) -> usize {
    let ids: Vec<uuid::Uuid> = accepted.iter().filter_map(|a| a.id.parse().ok()).collect();
    let deadline = Instant::now() + within;
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM runs WHERE (id = ANY($1) OR root_run_id = ANY($1))
               AND status NOT IN ('succeeded', 'failed', 'cancelled')",
        )
        .bind(&ids)
        .fetch_one(db)
        .await
        .unwrap_or(i64::MAX);
        if open == 0 || Instant::now() > deadline {
            return usize::try_from(open).unwrap_or(usize::MAX);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn check(
    db: &PgPool,
    tally: &Tally,
    echo: &HashMap<String, u32>,
    chat_token_subject: &str,
    started: std::time::SystemTime,
    held: Duration,
    injected: &crate::faults::Injected,
) -> anyhow::Result<Report> {
    let redis_restarts = injected.redis_restarts.as_slice();
    let router_kills_while_nats_away = injected.router_kills_while_nats_away();
    let mut r = Report { lines: Vec::new() };
    let accepted = tally.accepted();
    let ids: Vec<uuid::Uuid> = accepted.iter().filter_map(|a| a.id.parse().ok()).collect();

    // 1. Every accepted run ended, and so did every sub-run.
    let rows = sqlx::query(
        "SELECT id::text, status FROM runs WHERE id = ANY($1) OR root_run_id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?;
    let mut status: HashMap<String, String> = HashMap::new();
    for row in &rows {
        status.insert(row.try_get(0)?, row.try_get(1)?);
    }
    let mut v = Vec::new();
    for a in &accepted {
        match status.get(&a.id).map(String::as_str) {
            None => v.push(format!(
                "accepted run {} ({}) is not in the database",
                a.id, a.kind
            )),
            Some(s) if !["succeeded", "failed", "cancelled"].contains(&s) => {
                v.push(format!("run {} ({}) never ended: {s}", a.id, a.kind));
            }
            Some(_) => {}
        }
    }
    for (id, s) in &status {
        if !["succeeded", "failed", "cancelled"].contains(&s.as_str())
            && !accepted.iter().any(|a| &a.id == id)
        {
            v.push(format!("sub-run {id} never ended: {s}"));
        }
    }
    r.add(
        "every accepted run (and sub-run) ended",
        u64::try_from(rows.len()).unwrap_or(0),
        v,
    );

    // 2. Event seqs: 1..n with no gap and no duplicate (the key forbids duplicates of a seq;
    //    a gap or a second run_finished would show a lost or repeated write).
    let gaps = sqlx::query(
        "SELECT run_id::text, min(seq), max(seq), count(*), count(*) FILTER (WHERE kind = 'run_finished')
           FROM run_events WHERE run_id IN (SELECT id FROM runs WHERE id = ANY($1) OR root_run_id = ANY($1))
          GROUP BY run_id",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?;
    let mut v = Vec::new();
    for row in &gaps {
        let (id, min, max, n, finished): (String, i64, i64, i64, i64) = (
            row.try_get(0)?,
            row.try_get(1)?,
            row.try_get(2)?,
            row.try_get(3)?,
            row.try_get(4)?,
        );
        if min != 1 || max != n {
            v.push(format!("run {id}: seqs {min}..{max} but {n} events"));
        }
        if finished > 1 {
            v.push(format!("run {id}: {finished} run_finished events"));
        }
        if let Some(s) = status.get(&id)
            && ["succeeded", "failed", "cancelled"].contains(&s.as_str())
            && finished != 1
        {
            v.push(format!(
                "run {id} is {s} with {finished} run_finished events"
            ));
        }
    }
    r.add(
        "event seqs without gap or duplicate, one run_finished",
        u64::try_from(gaps.len()).unwrap_or(0),
        v,
    );

    // 3. No tool call answered twice; every tool call of a finished run answered once.
    let dup = sqlx::query(
        "SELECT e.run_id::text, e.data->>'tool_use_id', count(*) FROM run_events e
          WHERE e.kind = 'tool_result' AND e.run_id IN (SELECT id FROM runs WHERE id = ANY($1) OR root_run_id = ANY($1))
          GROUP BY 1, 2 HAVING count(*) > 1",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?;
    let calls: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM run_events WHERE kind = 'tool_call' AND run_id IN (SELECT id FROM runs WHERE id = ANY($1) OR root_run_id = ANY($1))",
    )
    .bind(&ids)
    .fetch_one(db)
    .await?;
    let mut v: Vec<String> = dup
        .iter()
        .map(|row| {
            format!(
                "run {} tool call {} has {} results",
                row.try_get::<String, _>(0).unwrap_or_default(),
                row.try_get::<String, _>(1).unwrap_or_default(),
                row.try_get::<i64, _>(2).unwrap_or_default()
            )
        })
        .collect();
    let ledger_dup: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT run_id, tool_use_id FROM tool_ledger GROUP BY 1, 2 HAVING count(*) > 1) d",
    )
    .fetch_one(db)
    .await?;
    if ledger_dup > 0 {
        v.push(format!("{ledger_dup} tool calls have two ledger rows"));
    }
    let unanswered = sqlx::query(
        "SELECT c.run_id::text, c.data->>'id' FROM run_events c JOIN runs r ON r.id = c.run_id
          WHERE c.kind = 'tool_call' AND r.status = 'succeeded' AND (r.id = ANY($1) OR r.root_run_id = ANY($1))
            AND NOT EXISTS (SELECT 1 FROM run_events t WHERE t.run_id = c.run_id AND t.kind = 'tool_result'
                             AND t.data->>'tool_use_id' = c.data->>'id')",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?;
    for row in &unanswered {
        v.push(format!(
            "succeeded run {} left tool call {:?} unanswered",
            row.try_get::<String, _>(0).unwrap_or_default(),
            row.try_get::<Option<String>, _>(1).unwrap_or_default()
        ));
    }
    r.add(
        "no tool result recorded twice; every call of a succeeded run answered",
        u64::try_from(calls).unwrap_or(0),
        v,
    );

    // 4. Effectful calls: an HTTP POST was made at most once (the echo server counts bodies),
    //    and one that started without a recorded result was answered "outcome unknown".
    let mut v: Vec<String> = echo
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(body, n)| format!("effectful POST {body:?} was made {n} times"))
        .collect();
    // A call the fleet lost track of mid-way is answered "outcome unknown" (then recorded,
    // like any result); a succeeded run has no call left unanswered in its ledger.
    let unknown: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM run_events WHERE kind = 'tool_result' AND data->>'content' LIKE '%is unknown%'
            AND run_id IN (SELECT id FROM runs WHERE id = ANY($1) OR root_run_id = ANY($1))",
    )
    .bind(&ids)
    .fetch_one(db)
    .await?;
    let unknown = u64::try_from(unknown).unwrap_or(0);
    let open_calls = sqlx::query(
        "SELECT l.run_id::text, l.tool_use_id FROM tool_ledger l JOIN runs r ON r.id = l.run_id
          WHERE l.status = 'started' AND r.status = 'succeeded'",
    )
    .fetch_all(db)
    .await?;
    for row in &open_calls {
        v.push(format!(
            "succeeded run {} left call {} started in its ledger",
            row.try_get::<String, _>(0).unwrap_or_default(),
            row.try_get::<String, _>(1).unwrap_or_default()
        ));
    }
    let posts = u64::try_from(echo.len()).unwrap_or(0);
    r.add(
        &format!("effectful calls made at most once ({posts} POSTs); interrupted ones reported outcome-unknown ({unknown})"),
        posts + unknown,
        v,
    );

    // 5. Exactly-once state writes of succeeded runs: the memory key and the channel message.
    let succeeded: Vec<u64> = accepted
        .iter()
        .filter(|a| a.kind == "worker" && status.get(&a.id).is_some_and(|s| s == "succeeded"))
        .map(|a| a.n)
        .collect();
    let mem = tenant_memory(db).await?;
    let published = published(db, CHANNEL).await?;
    let mut v = Vec::new();
    for n in &succeeded {
        if mem.get(&format!("k{n}")).map(String::as_str) != Some(n.to_string().as_str()) {
            v.push(format!(
                "memory k{n} of a succeeded run is {:?}",
                mem.get(&format!("k{n}"))
            ));
        }
        match published.get(&format!("{{\"n\":{n}}}")) {
            Some(1) => {}
            other => v.push(format!(
                "the publish of succeeded run {n} is stored {other:?} times"
            )),
        }
    }
    for (payload, count) in &published {
        if *count > 1 {
            v.push(format!("channel message {payload} stored {count} times"));
        }
    }
    let seq_gaps: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT m.partition, max(m.seq) - min(m.seq) + 1 - count(*) AS gap
           FROM channel_messages m JOIN channels c ON c.id = m.channel_id
          WHERE c.tenant_id = $1 AND c.name = $2 GROUP BY 1) g WHERE gap <> 0",
    )
    .bind(TENANT_A)
    .bind(CHANNEL)
    .fetch_one(db)
    .await?;
    if seq_gaps > 0 {
        v.push(format!("{seq_gaps} channel partitions have seq gaps"));
    }
    r.add(
        "memory writes and channel publishes of succeeded runs stored exactly once; channel seqs contiguous",
        u64::try_from(succeeded.len() * 2).unwrap_or(0),
        v,
    );

    // 6. Usage: every chat the client saw succeed has one record; none beyond what was tried.
    let attempts = tally
        .chat_attempts
        .load(std::sync::atomic::Ordering::Relaxed);
    let ok = tally.chat_ok.load(std::sync::atomic::Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut records: i64;
    loop {
        records = sqlx::query_scalar(
            "SELECT count(*) FROM usage WHERE tenant_id = $1 AND subject = $2 AND kind = 'chat'",
        )
        .bind(TENANT_A)
        .bind(chat_token_subject)
        .fetch_one(db)
        .await?;
        if u64::try_from(records).unwrap_or(0) >= ok || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let records = u64::try_from(records).unwrap_or(0);
    let mut v = Vec::new();
    // A router killed while NATS is away (or catching up) holds records NATS has not taken:
    // the usage spool keeps them for the routers that remain (docs/providers.md, Publishing).
    // Such kills are counted to show the window was exercised; a missing record is a violation.
    if records < ok {
        v.push(format!(
            "{ok} chats succeeded but {records} usage records ({router_kills_while_nats_away} routers killed while NATS was away)"
        ));
    }
    if records > attempts {
        v.push(format!(
            "{records} usage records for {attempts} chats tried (doubled)"
        ));
    }
    r.add(
        &format!(
            "usage: {ok} ≤ {records} records ≤ {attempts} tried; {router_kills_while_nats_away} routers killed while NATS was away"
        ),
        ok,
        v,
    );

    // 7. Schedules: every 2-s slot from the first fire to the end of the load (less the
    //    misfire grace) fired once, and each fire made at most one run, which ended.
    let fires = sqlx::query(
        "SELECT extract(epoch FROM f.fire_at)::float8, f.status, f.run_id::text, r.status
           FROM schedule_fires f JOIN schedules s ON s.id = f.schedule_id
           LEFT JOIN runs r ON r.id = f.run_id
          WHERE s.tenant_id = $1 AND s.name = 'tick' AND f.kind = 'cron' ORDER BY f.fire_at",
    )
    .bind(TENANT_A)
    .fetch_all(db)
    .await?;
    let mut v = Vec::new();
    let slots: Vec<f64> = fires
        .iter()
        .filter_map(|r| r.try_get::<f64, _>(0).ok())
        .collect();
    let start = started
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let last_due = start + held.as_secs_f64() - 6.0;
    if let Some(first) = slots.first().copied() {
        let mut want = (first.max(start) / 2.0).ceil() * 2.0;
        while want <= last_due {
            if !slots.iter().any(|s| (s - want).abs() < 0.001) {
                v.push(format!("slot {want:.0} never fired"));
            }
            want += 2.0;
        }
    } else {
        v.push("the schedule never fired".to_owned());
    }
    let load_end = start + held.as_secs_f64();
    for row in &fires {
        // The schedule goes on firing while the fleet settles; a fire after the load stopped
        // may not have run yet when this reads, and is not judged.
        if row.try_get::<f64, _>(0).unwrap_or_default() > load_end {
            continue;
        }
        let fire_status: String = row.try_get(1).unwrap_or_default();
        let run_status: Option<String> = row.try_get(3).unwrap_or_default();
        if fire_status == "dispatched"
            && !matches!(
                run_status.as_deref(),
                Some("succeeded" | "failed" | "cancelled")
            )
        {
            v.push(format!(
                "the fire at {:.0} has run {:?} in state {run_status:?}",
                row.try_get::<f64, _>(0).unwrap_or_default(),
                row.try_get::<Option<String>, _>(2).unwrap_or_default()
            ));
        }
    }
    let doubled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT spec->'metadata'->>'fire_id' FROM runs
          WHERE tenant_id = $1 AND spec->'metadata' ? 'fire_id' GROUP BY 1 HAVING count(*) > 1) d",
    )
    .bind(TENANT_A)
    .fetch_one(db)
    .await?;
    if doubled > 0 {
        v.push(format!("{doubled} schedule fires made more than one run"));
    }
    r.add(
        "schedule slots fired exactly once, each fire one run that ended",
        u64::try_from(slots.len()).unwrap_or(0),
        v,
    );

    // 8. Webhooks: a delivery id answered one run, however often it was sent, and that run
    //    ended.
    let deliveries = tally
        .deliveries
        .lock()
        .map(|m| m.clone())
        .unwrap_or_default();
    let mut v = Vec::new();
    let mut runs_of_deliveries = Vec::new();
    for (id, runs) in &deliveries {
        let mut distinct = runs.clone();
        distinct.sort();
        distinct.dedup();
        if distinct.len() > 1 {
            v.push(format!(
                "delivery {id} answered {} different runs",
                distinct.len()
            ));
        }
        runs_of_deliveries.extend(distinct.iter().filter_map(|r| r.parse::<uuid::Uuid>().ok()));
    }
    let per_delivery = sqlx::query(
        "SELECT spec->'metadata'->>'delivery_id', count(*), count(*) FILTER (WHERE status IN ('succeeded', 'failed', 'cancelled'))
           FROM runs WHERE tenant_id = $1 AND spec->'metadata'->>'webhook' = 'hook' GROUP BY 1",
    )
    .bind(TENANT_A)
    .fetch_all(db)
    .await?;
    for row in &per_delivery {
        let (id, n, ended): (Option<String>, i64, i64) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        if n > 1 {
            v.push(format!("delivery {id:?} made {n} runs"));
        }
        if ended < n {
            v.push(format!("the run of delivery {id:?} never ended"));
        }
    }
    for id in deliveries.keys() {
        if !per_delivery.iter().any(|row| {
            row.try_get::<Option<String>, _>(0)
                .ok()
                .flatten()
                .as_deref()
                == Some(id.as_str())
        }) {
            v.push(format!("accepted delivery {id} has no run"));
        }
    }
    r.add(
        "webhook deliveries: one run per delivery id, replays answered with it, every run ended",
        u64::try_from(deliveries.len()).unwrap_or(0),
        v,
    );

    // 9. The quota: in each UTC minute, the quota tenant's admitted calls stay within its
    //    requests_per_minute; in the minute Redis restarted empty, within twice it (the
    //    documented bound: the counters of the current windows are lost with Redis's data).
    let (checked, v) = quota_windows(tally, redis_restarts);
    r.add(
        &format!(
            "quota: admitted calls per minute ≤ requests_per_minute ({QUOTA_RPM}), ≤ 2× in a minute Redis restarted"
        ),
        checked,
        v,
    );

    // 10. REST writes: an acknowledged memory write is there; an acknowledged publish is
    //     stored once, and no publish (acknowledged or retried) twice; the counter holds every
    //     acknowledged increment and no more than were sent.
    let (checked, v) = rest_writes(db, tally).await?;
    r.add(
        "REST writes: acknowledged memory sets kept, publishes with op_key stored once, increments in [acked, sent]",
        checked,
        v,
    );

    // 11. The load reached the fleet: a checker that checked nothing proves nothing.
    let quota_admitted = tally
        .quota_calls
        .lock()
        .map(|c| c.iter().filter(|c| c.2 == 200).count())
        .unwrap_or(0);
    let reached = [
        ("chat calls answered", ok),
        ("runs accepted", u64::try_from(accepted.len()).unwrap_or(0)),
        (
            "webhook deliveries accepted",
            u64::try_from(deliveries.len()).unwrap_or(0),
        ),
        (
            "isolation probes",
            tally.probes.load(std::sync::atomic::Ordering::Relaxed),
        ),
        (
            "REST writes acknowledged",
            u64::try_from(tally.rest_acked.lock().map(|a| a.len()).unwrap_or(0)).unwrap_or(0),
        ),
        (
            "quota tenant calls admitted",
            u64::try_from(quota_admitted).unwrap_or(0),
        ),
    ];
    let v = reached
        .iter()
        .filter(|(_, n)| *n == 0)
        .map(|(what, _)| format!("no {what}: that part of the load never reached the fleet"))
        .collect();
    r.add(
        "the load reached the fleet (each kind of work done at least once)",
        u64::try_from(reached.len()).unwrap_or(0),
        v,
    );

    // 12. Violations the load saw as it ran (isolation, admission while Redis was down).
    let seen = tally
        .violations
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    let probes = tally.probes.load(std::sync::atomic::Ordering::Relaxed);
    r.add(
        "seen during the load (tenant isolation probes, admission with Redis down)",
        probes,
        seen,
    );

    Ok(r)
}

/// Counts the quota tenant's admitted calls per minute window. A call is placed in a window
/// only when it was sent and answered within it (the router charged it somewhere in between);
/// calls across a boundary are left out, so the count is a lower bound of what was admitted.
fn quota_windows(tally: &Tally, redis_restarts: &[u64]) -> (u64, Vec<String>) {
    let calls = tally
        .quota_calls
        .lock()
        .map(|c| c.clone())
        .unwrap_or_default();
    let mut per_minute: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    let mut refused = 0u64;
    for (sent, answered, status) in &calls {
        let (m0, m1) = (sent / 60_000, answered / 60_000);
        if *status == 429 {
            refused += 1;
        }
        if *status == 200 && m0 == m1 {
            *per_minute.entry(m0).or_default() += 1;
        }
    }
    let mut v = Vec::new();
    for (minute, n) in &per_minute {
        let restarted = redis_restarts.iter().any(|t| t / 60_000 == *minute);
        let bound = if restarted { 2 * QUOTA_RPM } else { QUOTA_RPM };
        if *n > bound {
            v.push(format!(
                "minute {minute}: {n} calls admitted, over the bound of {bound}{}",
                if restarted {
                    " (Redis restarted in it)"
                } else {
                    ""
                }
            ));
        }
    }
    // The limit must have applied: some minute saw more calls sent than it allows, and none was
    // refused.
    let mut sent_per_minute: std::collections::BTreeMap<u64, u64> =
        std::collections::BTreeMap::new();
    for (sent, _, _) in &calls {
        *sent_per_minute.entry(sent / 60_000).or_default() += 1;
    }
    let restarted_in = |minute: u64| redis_restarts.iter().any(|t| t / 60_000 == minute);
    // A minute Redis restarted in may admit twice the limit without refusing any.
    let pressed = sent_per_minute.iter().any(|(m, n)| {
        *n > if restarted_in(*m) {
            2 * QUOTA_RPM
        } else {
            QUOTA_RPM
        }
    });
    if refused == 0 && pressed {
        v.push(format!(
            "the quota tenant made {} calls at twice its limit and none was refused (429): the limit did not apply",
            calls.len()
        ));
    }
    (u64::try_from(calls.len()).unwrap_or(0), v)
}

async fn rest_writes(db: &PgPool, tally: &Tally) -> anyhow::Result<(u64, Vec<String>)> {
    let acked = tally
        .rest_acked
        .lock()
        .map(|a| a.clone())
        .unwrap_or_default();
    let mem = tenant_memory(db).await?;
    let published = published(db, REST_CHANNEL).await?;
    let mut v = Vec::new();
    for n in &acked {
        let key = format!("r{n}");
        if mem.get(&key).map(String::as_str) != Some(n.to_string().as_str()) {
            v.push(format!(
                "acknowledged memory write {key} = {n} reads {:?}",
                mem.get(&key)
            ));
        }
        if published
            .get(&format!("{{\"rest\":{n}}}"))
            .copied()
            .unwrap_or(0)
            != 1
        {
            v.push(format!(
                "acknowledged publish rest-{n} is stored {:?} times",
                published.get(&format!("{{\"rest\":{n}}}"))
            ));
        }
    }
    for (payload, count) in &published {
        if *count > 1 {
            v.push(format!(
                "publish {payload} (one op_key) stored {count} times"
            ));
        }
    }
    let (incr_acked, incr_sent) = (
        tally.incr_acked.load(std::sync::atomic::Ordering::Relaxed),
        tally.incr_sent.load(std::sync::atomic::Ordering::Relaxed),
    );
    let hits: u64 = mem.get("hits").and_then(|h| h.parse().ok()).unwrap_or(0);
    if hits < incr_acked || hits > incr_sent {
        v.push(format!(
            "the counter is {hits}: {incr_acked} increments acknowledged, {incr_sent} sent"
        ));
    }
    Ok((u64::try_from(acked.len() * 2).unwrap_or(0) + 1, v))
}

/// Tenant A's tenant-scope memory: key → value (compact JSON).
async fn tenant_memory(db: &PgPool) -> anyhow::Result<HashMap<String, String>> {
    let rows = sqlx::query(
        "SELECT key, value_json FROM memory_entries WHERE tenant_id = $1 AND scope = 'tenant'",
    )
    .bind(TENANT_A)
    .fetch_all(db)
    .await?;
    Ok(rows
        .iter()
        .filter_map(|row| Some((row.try_get(0).ok()?, row.try_get(1).ok()?)))
        .collect())
}

/// The messages of tenant A's `channel`: payload → how many times it is stored.
async fn published(db: &PgPool, channel: &str) -> anyhow::Result<HashMap<String, i64>> {
    let rows = sqlx::query(
        "SELECT m.payload, count(*) FROM channel_messages m JOIN channels c ON c.id = m.channel_id
          WHERE c.tenant_id = $1 AND c.name = $2 GROUP BY 1",
    )
    .bind(TENANT_A)
    .bind(channel)
    .fetch_all(db)
    .await?;
    let mut out = HashMap::new();
    for row in &rows {
        out.insert(row.try_get(0)?, row.try_get(1)?);
    }
    Ok(out)
}

/// The maintenance's promises, read from Postgres: while every run was parked no run did any
/// work (no model turn, no tool call was recorded), every run the drain parked was resumed, and
/// the schedule's slots of the window were held until the resume.
pub async fn maintenance(
    db: &PgPool,
    w: &crate::maintenance::Window,
) -> anyhow::Result<(u64, Vec<String>)> {
    let mut v = w.violations.clone();
    if w.parked_at == 0.0 || w.resumed_at == 0.0 {
        return Ok((0, v));
    }
    // A step committed just as the drain completed may carry a time a hair later.
    let (from, to) = (w.parked_at + 1.0, w.resumed_at - 0.5);
    let worked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM run_events
          WHERE kind IN ('assistant_message', 'tool_call', 'tool_result')
            AND created_at > to_timestamp($1) AND created_at < to_timestamp($2)",
    )
    .bind(from)
    .bind(to)
    .fetch_one(db)
    .await?;
    if worked > 0 {
        v.push(format!(
            "{worked} model turns or tool calls were recorded while every run was parked"
        ));
    }
    let unresumed: Vec<String> = sqlx::query_scalar(
        "SELECT r.id::text FROM runs r
          WHERE EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.id AND e.kind = 'run_paused'
                          AND e.data->>'by' = 'fleet')
            AND NOT EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.id AND e.kind = 'run_resumed')
            AND r.status NOT IN ('cancelled')",
    )
    .fetch_all(db)
    .await?;
    for id in unresumed.iter().take(10) {
        v.push(format!(
            "run {id} was parked by the maintenance and never resumed"
        ));
    }
    let early: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM f.fire_at)::float8 FROM schedule_fires f
           JOIN schedules s ON s.id = f.schedule_id
          WHERE s.name = 'tick' AND f.kind = 'cron'
            AND f.fire_at > to_timestamp($1) AND f.fire_at < to_timestamp($2)
            AND f.claimed_at < to_timestamp($2)",
    )
    .bind(w.parked_at)
    .bind(w.resumed_at - 0.5)
    .fetch_all(db)
    .await?;
    for at in &early {
        v.push(format!(
            "the schedule's slot {at:.0} fired during the maintenance, not after it"
        ));
    }
    let paused_runs: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT run_id) FROM run_events WHERE kind = 'run_paused' AND data->>'by' = 'fleet'",
    )
    .fetch_one(db)
    .await?;
    Ok((u64::try_from(paused_runs).unwrap_or(0), v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(calls: &[(u64, u64, u16)]) -> Tally {
        let t = Tally::default();
        if let Ok(mut c) = t.quota_calls.lock() {
            c.extend_from_slice(calls);
        }
        t
    }

    /// `n` admitted calls inside minute `m` (sent and answered in it), and one refused.
    fn minute(m: u64, n: u64) -> Vec<(u64, u64, u16)> {
        let base = m * 60_000;
        let mut calls: Vec<_> = (0..n).map(|i| (base + i, base + i + 5, 200)).collect();
        calls.push((base + 59_000, base + 59_001, 429));
        calls
    }

    #[test]
    fn quota_windows_hold_the_limit_and_twice_it_where_redis_restarted() {
        let ok = tally(&minute(10, QUOTA_RPM));
        assert!(quota_windows(&ok, &[]).1.is_empty());
        let over = tally(&minute(10, QUOTA_RPM + 1));
        assert_eq!(quota_windows(&over, &[]).1.len(), 1);
        // A Redis restart in that minute allows up to twice the limit, not in another minute.
        assert!(quota_windows(&over, &[10 * 60_000 + 30_000]).1.is_empty());
        assert_eq!(quota_windows(&over, &[11 * 60_000]).1.len(), 1);
        let far_over = tally(&minute(10, 2 * QUOTA_RPM + 1));
        assert_eq!(quota_windows(&far_over, &[10 * 60_000]).1.len(), 1);
    }

    #[test]
    fn a_call_across_a_minute_boundary_counts_in_neither_and_no_429_is_a_violation() {
        let mut calls = minute(10, QUOTA_RPM);
        calls.push((10 * 60_000 + 59_990, 11 * 60_000 + 10, 200));
        assert!(quota_windows(&tally(&calls), &[]).1.is_empty());
        // Under the limit, no 429 is expected; over it, none at all means the limit did not apply.
        let under: Vec<_> = (0..5).map(|i| (i, i + 1, 200)).collect();
        assert!(quota_windows(&tally(&under), &[]).1.is_empty());
        let never_refused: Vec<_> = (0..=QUOTA_RPM).map(|i| (i, i + 1, 200)).collect();
        let v = quota_windows(&tally(&never_refused), &[]).1;
        assert!(v.iter().any(|l| l.contains("none was refused")), "{v:?}");
        // Unless Redis restarted in that minute: it may then admit twice the limit unrefused.
        assert!(quota_windows(&tally(&never_refused), &[1]).1.is_empty());
    }
}
