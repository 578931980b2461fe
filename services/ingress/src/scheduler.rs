//! The scheduler: every replica ticks, claims due slots in one short transaction
//! ([`weft_store::ScheduleStore::claim_due`]) and makes their runs after the commit, with an
//! idempotency key derived from (schedule, kind, fire time) as the backstop. A sweep hands
//! fires claimed by a replica that died before making their runs to another, and runs the
//! `on_complete` actions of fires whose runs have ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft_core::def::DefContent as _;
use weft_core::schedule::{
    CompiledSchedule, OnComplete, Overlap, ScheduleContent, TemplateVars, format_fire_at, render,
};
use weft_core::{Error, ErrorCode, RunId, TenantId};
use weft_launch::{CreateRun, Input};
use weft_proto::v1;
use weft_store::{ClaimedFire, Decision, DueSchedule, FinishedFire, ScheduleStore};

use crate::{Ingress, brief, door_principal};

/// Parsed schedule content by version hash, so a tick does not re-parse cron expressions.
#[derive(Default)]
pub struct Compiled {
    by_hash: Mutex<HashMap<String, Arc<(ScheduleContent, CompiledSchedule)>>>,
}

impl Compiled {
    fn get(
        &self,
        hash: &str,
        content: &str,
    ) -> Result<Arc<(ScheduleContent, CompiledSchedule)>, Error> {
        if let Ok(m) = self.by_hash.lock()
            && let Some(c) = m.get(hash)
        {
            return Ok(c.clone());
        }
        let parsed = ScheduleContent::from_json_str(content)?;
        let compiled = parsed.compile()?;
        let entry = Arc::new((parsed, compiled));
        if let Ok(mut m) = self.by_hash.lock() {
            if m.len() > 10_000 {
                m.clear();
            }
            m.insert(hash.to_owned(), entry.clone());
        }
        Ok(entry)
    }
}

/// Which slots of `due` to claim (the policy: catch-up, `max_fires`, overlap).
pub fn decide(
    due: &DueSchedule,
    compiled: &Compiled,
    grace: Duration,
    per_tick: usize,
) -> Decision {
    let entry = match compiled.get(&due.def_hash, &due.content) {
        Ok(e) => e,
        Err(e) => {
            return Decision {
                retire: Some(format!("the definition no longer compiles: {}", e.message)),
                ..Decision::default()
            };
        }
    };
    let (content, cron) = &*entry;
    let plan = cron.plan(
        due.next_fire_at,
        due.now,
        content.catch_up_max,
        grace,
        per_tick.max(1),
    );
    let next = plan.next.or_else(|| cron.next_after(due.now));
    // The overlap policy first: with `skip`, only the first slot of a batch may fire, and only
    // when no run of this schedule is still going; the others are recorded as skipped.
    let mut marked: Vec<(time::OffsetDateTime, bool)> = match content.overlap {
        Overlap::Allow => plan.fires.into_iter().map(|t| (t, true)).collect(),
        Overlap::Skip => plan
            .fires
            .into_iter()
            .enumerate()
            .map(|(i, t)| (t, i == 0 && !due.busy))
            .collect(),
    };
    // `max_fires` counts fires that made a run; skipped slots do not use it up.
    let mut retire = None;
    if let Some(max) = content.max_fires {
        let mut left = max.saturating_sub(u64::try_from(due.cron_fires).unwrap_or(0));
        let mut keep = marked.len();
        for (i, (_, fire)) in marked.iter().enumerate() {
            if left == 0 {
                keep = i;
                break;
            }
            if *fire {
                left -= 1;
            }
        }
        marked.truncate(keep);
        if left == 0 {
            retire = Some("max_fires reached".to_owned());
        }
    }
    if next.is_none() && retire.is_none() {
        retire = Some("the cron has no further fire times".to_owned());
    }
    Decision {
        fires: marked,
        skipped_unrecorded: i64::try_from(plan.skipped).unwrap_or(i64::MAX),
        next_fire_at: next,
        retire,
        on_complete: !content.on_complete.is_empty(),
    }
}

/// The idempotency key of a fire's run: one per (schedule, kind, fire time).
pub fn fire_key(f: &ClaimedFire) -> String {
    format!(
        "schedule:{}:{}:{}",
        f.schedule_id,
        f.kind,
        f.fire_at.unix_timestamp_nanos() / 1000
    )
}

/// Whether a failure to make a run may succeed later (the fire stays claimed and is retried).
fn transient(e: &Error) -> bool {
    matches!(
        e.code,
        ErrorCode::Unavailable
            | ErrorCode::AdmissionUnavailable
            | ErrorCode::TenantPaused
            | ErrorCode::TenantConcurrencyExhausted
            | ErrorCode::UpstreamTimeout
            | ErrorCode::Internal
    )
}

/// Makes the run of one claimed fire.
async fn make_run(ing: &Ingress, f: &ClaimedFire) -> Result<RunId, Error> {
    let content = ScheduleContent::from_json_str(&f.content)?;
    let tenant = TenantId::parse(&f.tenant)?;
    let p = door_principal(&tenant, format!("schedule:{}", f.name));
    let mut metadata = content.metadata.clone();
    metadata.insert("schedule".into(), json!(f.name));
    metadata.insert("fire_at".into(), json!(format_fire_at(f.fire_at)));
    metadata.insert("fire_kind".into(), json!(f.kind));
    metadata.insert("fire_id".into(), json!(f.id));
    let body = CreateRun {
        agent: content.agent,
        input: Some(Input::Text(content.input)),
        metadata: Some(Value::Object(metadata)),
        idempotency_key: Some(fire_key(f)),
        ..CreateRun::default()
    };
    ing.launcher
        .create_run(&p, body)
        .await
        .map(|(run, _)| run.id)
}

/// Makes the runs of claimed fires, at most `dispatch_concurrency` at once, and records them.
/// Returns how many runs exist now.
pub async fn dispatch(ing: &Ingress, fires: Vec<ClaimedFire>) -> usize {
    if fires.is_empty() {
        return 0;
    }
    let results: Vec<(ClaimedFire, Result<RunId, Error>)> = futures::stream::iter(fires)
        .map(|f| async move {
            // Each fire starts a trace of its own: the run's lease joins it (docs/operations.md).
            let span = tracing::info_span!(parent: None, "schedule_fire", tenant = %f.tenant, schedule = %f.name, fire_id = %f.id);
            let r = tracing::Instrument::instrument(make_run(ing, &f), span).await;
            (f, r)
        })
        .buffer_unordered(ing.cfg.dispatch_concurrency.max(1))
        .collect()
        .await;
    let mut done = Vec::with_capacity(results.len());
    for (f, r) in results {
        match r {
            Ok(run) => done.push((f.id, run.0)),
            Err(e) => {
                let last =
                    u32::try_from(f.attempts + 1).unwrap_or(u32::MAX) >= ing.cfg.max_fire_attempts;
                let permanent = !transient(&e) || last;
                tracing::warn!(schedule = %f.name, fire = %f.id, error = %e.message, permanent, "a scheduled run could not be made");
                metrics::counter!("weft_schedule_fire_errors_total").increment(1);
                if let Err(se) = ing.schedules.mark_failed(f.id, &brief(&e), permanent).await {
                    tracing::warn!(error = %se, "recording a failed fire");
                }
            }
        }
    }
    let n = done.len();
    // Unrecorded runs are safe: the fire stays claimed, a sweep re-dispatches it and the
    // idempotency key returns the same run.
    if let Err(e) = ing.schedules.mark_dispatched(&done).await {
        tracing::warn!(error = %e, "recording dispatched fires");
    }
    metrics::counter!("weft_schedule_fires_total").increment(u64::try_from(n).unwrap_or(0));
    n
}

/// One claim: up to `claim_batch` due schedules, their slots claimed and dispatched. Returns
/// how many fires were claimed (the caller claims again while a batch comes back full).
pub async fn tick(ing: &Ingress, compiled: &Compiled) -> Result<(usize, bool), Error> {
    let grace = Duration::from_millis(ing.cfg.misfire_grace_ms);
    let per_tick = usize::try_from(ing.cfg.max_fires_per_tick).unwrap_or(100);
    let batch = i64::from(ing.cfg.claim_batch.max(1));
    let mut seen = 0usize;
    let mut decide_one = |due: &DueSchedule| {
        seen += 1;
        decide(due, compiled, grace, per_tick)
    };
    let fires = ing
        .schedules
        .claim_due(batch, &ing.replica, &mut decide_one)
        .await
        .map_err(|e| e.to_api())?;
    let full = i64::try_from(seen).unwrap_or(0) >= batch;
    let n = fires.len();
    dispatch(ing, fires).await;
    Ok((n, full))
}

/// Fires claimed but never made into runs (their replica died), taken over and dispatched.
pub async fn reclaim(ing: &Ingress) -> Result<usize, Error> {
    let older = i64::try_from(ing.cfg.reclaim_after_ms).unwrap_or(i64::MAX);
    let fires = ing
        .schedules
        .reclaim_stale(&ing.replica, older, 500)
        .await
        .map_err(|e| e.to_api())?;
    let n = fires.len();
    if n > 0 {
        tracing::info!(
            fires = n,
            "took over fires claimed by a replica that did not make their runs"
        );
        metrics::counter!("weft_schedule_fires_reclaimed_total")
            .increment(u64::try_from(n).unwrap_or(0));
    }
    dispatch(ing, fires).await;
    Ok(n)
}

/// The longest final text substituted into an `on_complete` template.
const FINAL_TEXT_BYTES: usize = 32 * 1024;

fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
    s
}

/// Runs the `on_complete` actions of one ended fire; the outcome per action.
async fn run_actions(ing: &Ingress, f: &FinishedFire) -> (bool, Value) {
    let content = match ScheduleContent::from_json_str(&f.content) {
        Ok(c) => c,
        Err(e) => return (false, json!({"error": brief(&e)})),
    };
    let final_text = ing
        .launcher
        .runs
        .last_assistant_text(RunId(f.run_id))
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    let final_text = cut(final_text, FINAL_TEXT_BYTES);
    let run_id = f.run_id.to_string();
    let vars = TemplateVars {
        final_text: &final_text,
        run_id: &run_id,
        run_status: &f.run_status,
        schedule_name: &f.name,
        fire_at: f.fire_at,
    };
    let Ok(tenant) = TenantId::parse(&f.tenant) else {
        return (false, json!({"error": "bad tenant"}));
    };
    let p = door_principal(&tenant, format!("schedule:{}", f.name));
    let mut all_ok = true;
    let mut out = Vec::new();
    for (i, action) in content.on_complete.iter().enumerate() {
        let op_key = format!("schedule-fire:{}:{i}", f.id);
        let r: Result<(), Error> = match action {
            OnComplete::ChannelPublish { channel, message } => {
                let payload = Value::String(cut(render(message, &vars), 60 * 1024)).to_string();
                let req = ing.launcher.internal(
                    &p,
                    v1::PublishRequest {
                        name: channel.clone(),
                        payload_json: payload,
                        op_key: Some(op_key),
                        agent: Some(content.agent.clone()),
                        user: None,
                    },
                );
                match req {
                    Ok(req) => {
                        let mut c = ing.channels.clone();
                        ing.launcher.deadline(c.publish(req)).await.map(|_| ())
                    }
                    Err(e) => Err(e),
                }
            }
            OnComplete::MemorySet {
                key,
                value,
                scope,
                ttl_seconds,
            } => {
                let scope_id = match scope {
                    weft_core::schedule::MemoryScope::Tenant => f.tenant.clone(),
                    weft_core::schedule::MemoryScope::Agent => content.agent.clone(),
                    weft_core::schedule::MemoryScope::Run => run_id.clone(),
                    weft_core::schedule::MemoryScope::User => format!("schedule:{}", f.name),
                };
                let value_json = Value::String(cut(render(value, &vars), 60 * 1024)).to_string();
                let req = ing.launcher.internal(
                    &p,
                    v1::MemorySetRequest {
                        scope: scope.as_str().to_owned(),
                        scope_id,
                        key: render(key, &vars),
                        value_json,
                        ttl_seconds: *ttl_seconds,
                        if_version: None,
                        embed: false,
                        op_key: Some(op_key),
                        agent: Some(content.agent.clone()),
                    },
                );
                match req {
                    Ok(req) => {
                        let mut c = ing.memory.clone();
                        ing.launcher.deadline(c.set(req)).await.map(|_| ())
                    }
                    Err(e) => Err(e),
                }
            }
        };
        let name = match action {
            OnComplete::ChannelPublish { .. } => "channel.publish",
            OnComplete::MemorySet { .. } => "memory.set",
        };
        match r {
            Ok(()) => out.push(json!({"action": name, "ok": true})),
            Err(e) => {
                all_ok = false;
                out.push(json!({"action": name, "ok": false, "error": brief(&e)}));
            }
        }
    }
    (all_ok, Value::Array(out))
}

/// Runs pending `on_complete` actions of ended fires: one attempt each, the outcome recorded
/// (a failure is recorded, never retried forever).
pub async fn on_complete(ing: &Ingress) -> Result<usize, Error> {
    let (mut tx, fires) = ing
        .schedules
        .begin_on_complete(20)
        .await
        .map_err(|e| e.to_api())?;
    let n = fires.len();
    for f in &fires {
        let (ok, result) = run_actions(ing, f).await;
        if !ok {
            tracing::warn!(schedule = %f.name, fire = %f.id, "on_complete actions failed");
        }
        ScheduleStore::finish_on_complete(&mut tx, f.id, ok, &result)
            .await
            .map_err(|e| e.to_api())?;
    }
    tx.commit()
        .await
        .map_err(|e| weft_store::StoreError::from(e).to_api())?;
    Ok(n)
}

/// A run-now fire: claimed at once and dispatched in the caller's request. The fire id and its
/// run, or the error that kept the run from being made (the fire then stays for a sweep, or is
/// failed).
pub async fn run_now(
    ing: &Ingress,
    tenant: &TenantId,
    name: &str,
) -> Result<Option<(Uuid, Option<Uuid>, Option<String>)>, Error> {
    let row = ing
        .schedules
        .get(tenant, name)
        .await
        .map_err(|e| e.to_api())?;
    let Some(row) = row else {
        return Ok(None);
    };
    if row.retired_at.is_some() {
        return Err(Error::new(
            ErrorCode::Conflict,
            format!(
                "schedule `{name}` is retired ({}); put a new version to start it again",
                row.retired_why.as_deref().unwrap_or("retired")
            ),
        ));
    }
    let on_complete = ScheduleContent::from_json_str(&row.content)
        .map(|c| !c.on_complete.is_empty())
        .unwrap_or(false);
    let Some(fire) = ing
        .schedules
        .claim_run_now(tenant, name, &ing.replica, on_complete)
        .await
        .map_err(|e| e.to_api())?
    else {
        return Ok(None);
    };
    let id = fire.id;
    match make_run(ing, &fire).await {
        Ok(run) => {
            ing.schedules
                .mark_dispatched(&[(id, run.0)])
                .await
                .map_err(|e| e.to_api())?;
            Ok(Some((id, Some(run.0), None)))
        }
        Err(e) => {
            let permanent = !transient(&e);
            let _ = ing.schedules.mark_failed(id, &brief(&e), permanent).await;
            Ok(Some((id, None, Some(brief(&e)))))
        }
    }
}

/// The ticker of one replica, until `stop`: claims due slots every `tick_ms` (again at once
/// while batches come back full), and sweeps every `sweep_ms`.
pub async fn run(ing: Ingress, stop: CancellationToken) {
    let compiled = Compiled::default();
    let tick = Duration::from_millis(ing.cfg.tick_ms.max(10));
    let sweep = Duration::from_millis(ing.cfg.sweep_ms.max(10));
    // Replicas started together would tick in step; a random phase spreads them.
    let tick_ms = u64::try_from(tick.as_millis()).unwrap_or(250).max(1);
    let phase = Duration::from_millis(u64::from(rand_u16()) % tick_ms);
    tokio::select! {
        () = stop.cancelled() => return,
        () = tokio::time::sleep(phase) => {}
    }
    let mut last_sweep = Instant::now();
    let mut last_prune = Instant::now();
    loop {
        loop {
            match tick_once(&ing, &compiled).await {
                Some(true) if !stop.is_cancelled() => continue,
                _ => break,
            }
        }
        if last_sweep.elapsed() >= sweep {
            last_sweep = Instant::now();
            if let Err(e) = reclaim(&ing).await {
                tracing::warn!(error = %e.message, "reclaiming stale fires");
            }
            if let Err(e) = on_complete(&ing).await {
                tracing::warn!(error = %e.message, "on_complete sweep");
            }
        }
        if last_prune.elapsed() >= Duration::from_secs(3600) {
            last_prune = Instant::now();
            let _ = ing
                .deliveries
                .prune(i64::from(ing.cfg.delivery_retention_days))
                .await;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(tick) => {}
        }
    }
}

/// One claim; `Some(true)` when the batch came back full (more may be due).
async fn tick_once(ing: &Ingress, compiled: &Compiled) -> Option<bool> {
    match tick(ing, compiled).await {
        Ok((_, full)) => Some(full),
        Err(e) => {
            tracing::warn!(error = %e.message, "schedule tick failed");
            None
        }
    }
}

/// A few random bits (a UUIDv7's random tail).
fn rand_u16() -> u16 {
    let b = uuid::Uuid::now_v7().into_bytes();
    u16::from_le_bytes([b[14], b[15]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn due(content: &str, cron_fires: i64, busy: bool, secs_late: i64) -> DueSchedule {
        let at = datetime!(2026-01-01 00:00:00 UTC);
        DueSchedule {
            id: Uuid::nil(),
            tenant: "t".into(),
            name: "s".into(),
            def_hash: format!("sha256:{content}"),
            content: content.into(),
            next_fire_at: at,
            cron_fires,
            busy,
            now: at + time::Duration::seconds(secs_late),
        }
    }

    fn run(content: &str, cron_fires: i64, busy: bool, secs_late: i64) -> Decision {
        let d = due(content, cron_fires, busy, secs_late);
        decide(&d, &Compiled::default(), Duration::from_secs(5), 10)
    }

    const EVERY_SECOND_MAX_2: &str =
        r#"{"cron":"* * * * * *","agent":"a","input":"x","max_fires":2,"overlap":"skip"}"#;

    #[test]
    fn a_skipped_slot_does_not_use_up_max_fires() {
        // One fire made, the previous run still going: the slot is skipped and the schedule
        // stays live for a later slot.
        let d = run(EVERY_SECOND_MAX_2, 1, true, 0);
        assert_eq!(d.fires.len(), 1);
        assert!(!d.fires[0].1, "{d:?}");
        assert_eq!(d.retire, None);
        assert!(d.next_fire_at.is_some());
        // Not busy: the slot fires and the schedule retires.
        let d = run(EVERY_SECOND_MAX_2, 1, false, 0);
        assert_eq!(d.fires.iter().filter(|f| f.1).count(), 1);
        assert_eq!(d.retire.as_deref(), Some("max_fires reached"));
    }

    #[test]
    fn max_fires_cuts_a_batch_of_allowed_slots() {
        let allow =
            r#"{"cron":"* * * * * *","agent":"a","input":"x","max_fires":2,"overlap":"allow"}"#;
        // Four on-time slots (0..=3 s, all within the grace), only two may fire.
        let d = run(allow, 0, false, 3);
        assert_eq!(d.fires.len(), 2, "{d:?}");
        assert!(d.fires.iter().all(|f| f.1));
        assert_eq!(d.retire.as_deref(), Some("max_fires reached"));
        // Under the cap: all fire, no retirement.
        let d = run(allow, 0, false, 0);
        assert_eq!(d.fires.len(), 1);
        assert_eq!(d.retire, None);
    }

    #[test]
    fn skip_fires_only_the_first_slot_of_a_batch() {
        let skip = EVERY_SECOND_MAX_2;
        let d = run(skip, 0, false, 3);
        let fired: Vec<bool> = d.fires.iter().map(|f| f.1).collect();
        // The first fires; the rest would overlap it and are skipped, and the cap is not used up.
        assert_eq!(fired.first(), Some(&true), "{d:?}");
        assert!(fired[1..].iter().all(|f| !f), "{d:?}");
        assert_eq!(d.retire, None);
    }
}
