//! The sweeper: no run is left stranded. Every executor replica looks, each
//! `executor.sweep_interval_ms`, for runs that nothing is working on — `queued` past
//! `executor.sweep_after_ms` (the gateway died between the insert and the publish, a publish
//! failed, JetStream gave up after `max_deliver`), or `running` under a lease that lapsed that
//! long ago with no executor taking it over — and dispatches each again. A run that has lost its
//! executor `executor.max_deliver` times is ended `failed` instead, so a run that takes its
//! executors down cannot do so forever. Claims use `FOR UPDATE SKIP LOCKED`, so replicas never
//! sweep the same run at once; a duplicate dispatch is harmless (the lease decides who works).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use weft_bus::{Dispatch, LiveEvent};
use weft_core::run::RunStatus;
use weft_store::{RunStoreError, Swept};

use crate::Inner;

/// Runs claimed per sweep; more wait for the next one.
const BATCH: i64 = 256;

/// Sweeps until `stop`.
pub(crate) async fn run(inner: Arc<Inner>, stop: CancellationToken) {
    let every = Duration::from_millis(inner.cfg.sweep_interval_ms);
    loop {
        sample_backlog(&inner).await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        if let Err(e) = sweep_once(&inner).await {
            tracing::warn!(error = %e, "cannot sweep for stranded runs; trying again later");
        }
    }
}

/// Sets the dispatch queue's gauges (every replica reports the one shared consumer's backlog);
/// they keep their last value while NATS does not answer.
async fn sample_backlog(inner: &Inner) {
    match inner.bus.dispatch_backlog().await {
        Ok((pending, in_flight)) => {
            metrics::gauge!("weft_dispatch_pending").set(pending as f64);
            metrics::gauge!("weft_dispatch_in_flight").set(in_flight as f64);
        }
        Err(e) => tracing::debug!(error = %e, "cannot read the dispatch backlog"),
    }
}

/// One sweep: claims the stranded runs and dispatches or ends each. Returns how many it claimed.
pub(crate) async fn sweep_once(inner: &Inner) -> Result<usize, RunStoreError> {
    let after = i64::try_from(inner.cfg.sweep_after_ms).unwrap_or(i64::MAX);
    let max_lapses = i32::try_from(inner.cfg.max_deliver).unwrap_or(i32::MAX);
    let swept = inner.store.sweep(after, BATCH).await?;
    let n = swept.len();
    for s in swept {
        if s.status == RunStatus::Running
            && s.lapses.saturating_add(1) >= max_lapses
            && end(inner, &s, max_lapses).await
        {
            continue;
        }
        match inner
            .bus
            .dispatch(&Dispatch {
                run_id: s.id,
                tenant: s.tenant.clone(),
            })
            .await
        {
            Ok(()) => {
                metrics::counter!("weft_runs_swept_total", "action" => "dispatched").increment(1);
                tracing::warn!(run_id = %s.id, status = s.status.as_str(), "a stranded run was dispatched again");
            }
            // Claimed but not dispatched: the next sweep after the backoff tries again.
            Err(e) => tracing::warn!(run_id = %s.id, error = %e, "cannot dispatch a stranded run"),
        }
    }
    Ok(n)
}

/// Ends a run that lost its executor `max_lapses` times; false when it could not (an executor
/// took it meanwhile, or the database failed: then it is dispatched like any other).
async fn end(inner: &Inner, s: &Swept, max_lapses: i32) -> bool {
    let message = format!(
        "this run lost its executor {max_lapses} times (executor.max_deliver): each executor that took it stopped (crashed, or lost its database) before the run finished, so it was ended rather than take more executors down; look for run {} in the executors' logs, then start it again",
        s.id
    );
    let events = match inner
        .store
        .end_abandoned(s.id, max_lapses, "unavailable", &message)
        .await
    {
        Ok(Some(events)) => events,
        Ok(None) => return false,
        Err(e) => {
            tracing::warn!(run_id = %s.id, error = %e, "cannot end an abandoned run");
            return false;
        }
    };
    metrics::counter!("weft_runs_swept_total", "action" => "ended").increment(1);
    tracing::warn!(run_id = %s.id, lapses = s.lapses + 1, "a run that kept losing its executor was ended");
    let _ = inner.coord.release(&s.tenant, s.id).await;
    let _ = inner.coord.drop_credentials(s.id).await;
    let live: Vec<LiveEvent> = events
        .into_iter()
        .map(|e| LiveEvent {
            seq: e.seq,
            kind: e.kind,
            persisted: true,
            data: e.data,
        })
        .collect();
    let _ = inner.bus.publish_events(s.id, &live).await;
    // Its sub-runs would have nobody to report to.
    if let Ok(children) = inner.store.live_descendants(&s.tenant, s.id).await {
        for child in children {
            let _ = inner.coord.cancel(child).await;
            if let Ok(true) = inner
                .store
                .cancel_unheld(child, Some("parent failed"))
                .await
            {
                let _ = inner.coord.release(&s.tenant, child).await;
            }
        }
    }
    true
}
