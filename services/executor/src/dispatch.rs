//! Dispatch, lease and heartbeat: one JetStream dispatch message becomes a fenced lease on its
//! run, a heartbeat that keeps the lease, the JetStream message and the admission slot alive,
//! and a [`Driver`] that works the run; how the run ended decides the message's ack. A run the
//! launcher of this process created already leased ([`work_local`]) is worked the same way,
//! without a message.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use serde::Deserialize;
use tokio::sync::{Mutex, Semaphore};
use tokio_util::sync::CancellationToken;
use weft_core::run::RunSpec;
use weft_core::{Principal, RunId, Scope, Scopes, TenantId};
use weft_store::{Lease, LeaseRefused, RunStoreError};

use crate::Inner;
use crate::driver::{Driver, Outcome};

/// Handles one dispatch message.
pub(crate) async fn handle(inner: Arc<Inner>, msg: jetstream::Message, stop: CancellationToken) {
    let Some(d) = weft_bus::decode_dispatch(&msg.payload) else {
        tracing::warn!("dropping an undecodable dispatch message");
        let _ = msg.ack_with(AckKind::Term).await;
        return;
    };
    // One driver per run in a process. A dispatch of a run this process is already working on
    // (the sweeper's duplicate, or a wake-up sent while the driver that parked the run is still
    // letting go of it) comes back a little later: by then the run has either ended (the
    // message is acked then) or been let go (and is taken again).
    let Some((cancel, input)) = inner.hold(d.run_id) else {
        let _ = msg
            .ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
            .await;
        return;
    };
    let ttl = i64::try_from(inner.cfg.lease_ttl_ms).unwrap_or(i64::MAX);
    let lease = match inner.store.acquire_lease(d.run_id, &inner.owner, ttl).await {
        Ok(Ok(lease)) => lease,
        Ok(Err(refused)) => {
            inner.unhold(d.run_id);
            match refused {
                LeaseRefused::Missing | LeaseRefused::NotRunnable(_) => {
                    let _ = msg.ack().await;
                }
                LeaseRefused::Held { remaining_ms } => {
                    // The holder may be dead: look again once its lease would have lapsed.
                    let wait =
                        Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0) + 250);
                    let _ = msg.ack_with(AckKind::Nak(Some(wait))).await;
                }
            }
            return;
        }
        Err(e) => {
            inner.unhold(d.run_id);
            tracing::warn!(run_id = %d.run_id, error = %e, "cannot take a lease");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
            return;
        }
    };
    let msg = Arc::new(msg);
    let outcome = work(
        inner,
        lease,
        None,
        Carrier::Message(msg.clone()),
        cancel,
        input,
        stop,
    )
    .await;
    match outcome {
        Outcome::Done => {
            let _ = msg.ack().await;
        }
        Outcome::LeaseLost => {}
        Outcome::Released => {
            let _ = msg.ack_with(AckKind::Nak(None)).await;
        }
        Outcome::Retry => {
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
        }
    }
}

/// Works on a run the launcher of this process created already leased to this executor (the
/// in-process fast path): no dispatch message, the transcript known. A run handed back or
/// interrupted goes out as a dispatch like any other; if even that fails, the sweeper finds it
/// once its lease lapses.
pub(crate) async fn work_local(
    inner: Arc<Inner>,
    lease: Lease,
    events: Vec<(String, serde_json::Value)>,
    trace: Vec<(String, String)>,
    cancel: CancellationToken,
    input: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
) {
    let run_id = lease.run.id;
    let tenant = lease.run.tenant.clone();
    let outcome = work(
        inner.clone(),
        lease,
        Some(events),
        Carrier::Local(trace),
        cancel,
        input,
        stop.clone(),
    )
    .await;
    let wait = match outcome {
        Outcome::Done | Outcome::LeaseLost => return,
        Outcome::Released => Duration::ZERO,
        Outcome::Retry => Duration::from_secs(1),
    };
    if !wait.is_zero() {
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
    let d = weft_bus::Dispatch { run_id, tenant };
    if let Err(e) = inner.bus.dispatch(&d).await {
        tracing::warn!(run_id = %run_id, error = %e, "cannot dispatch a run handed back; the sweeper will");
    }
}

/// Where a lease comes from: a dispatch message (kept alive while the run is worked; its headers
/// carry the dispatcher's trace context), or the launcher of this process (the creating
/// request's trace context, as `(key, value)` pairs).
enum Carrier {
    Message(Arc<jetstream::Message>),
    Local(Vec<(String, String)>),
}

/// Works on a run under `lease` until it ends here: the heartbeat, the driver, the run's
/// registration with the process's live hub. `fresh` is the transcript of a run created leased
/// (nothing to read back); `from` where the lease came from.
async fn work(
    inner: Arc<Inner>,
    lease: Lease,
    fresh: Option<Vec<(String, serde_json::Value)>>,
    from: Carrier,
    cancel: CancellationToken,
    input: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
) -> Outcome {
    let run_id = lease.run.id;
    let hub_hold = inner.hub.hold(run_id);
    let lost = CancellationToken::new();
    let beat_stop = CancellationToken::new();
    let span = tracing::info_span!("run", run_id = %run_id, tenant = %lease.run.tenant, epoch = lease.epoch);
    // The lease joins the trace of whatever dispatched it (the request that created the run, a
    // schedule fire, a webhook, the lease before it); a redelivered message carries the same.
    let msg = match from {
        Carrier::Message(m) => {
            weft_bus::trace::adopt(&span, m.headers.as_ref());
            Some(m)
        }
        Carrier::Local(trace) => {
            weft_telemetry::adopt_trace_context_with(&span, |k| {
                trace.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
            });
            None
        }
    };
    let heartbeat = tokio::spawn(heartbeat(
        inner.clone(),
        LeaseKey {
            run_id,
            tenant: lease.run.tenant.clone(),
            epoch: lease.epoch,
        },
        msg,
        lost.clone(),
        beat_stop.clone(),
    ));
    let driver = Driver {
        inner: inner.clone(),
        principal: Principal {
            tenant: lease.run.tenant.clone(),
            subject: lease.run.subject.clone(),
            // What a run may touch beyond these is decided by its agent (memory_scopes, channels,
            // skills), checked by the tools before they call the substrate.
            scopes: Scopes::new(Scope::RUN),
            token_id: None,
            // The run's own calls act as its agent: its channel consumer and its exactly-once
            // publish keys are its agent's, out of reach of every token.
            agent: Some(lease.run.agent_name.clone()),
        },
        // Read in place: the stored spec is not copied to be parsed.
        spec: RunSpec::deserialize(&lease.run.spec).unwrap_or_default(),
        lease,
        fresh,
        cancel,
        input,
        lost,
        stop,
        seq: Arc::new(Mutex::new(0)),
        children: Arc::new(Semaphore::new(1)),
        mounted: tokio::sync::OnceCell::new(),
        credentials: tokio::sync::OnceCell::new(),
        unstarted: std::sync::Mutex::default(),
        deferred: std::sync::Mutex::default(),
        window: tokio::sync::OnceCell::new(),
        gauge: std::sync::Mutex::default(),
        tools_tokens: std::sync::OnceLock::new(),
        pause: inner.pause_flag(run_id),
    };
    // A run asked to pause before this lease (or leased while its tenant drains) parks at once.
    if driver.lease.run.paused_by.is_some() {
        driver.pause.send_replace(true);
    }
    let active = metrics::gauge!("weft_executor_runs_active");
    active.increment(1.0);
    let outcome = tracing::Instrument::instrument(driver.drive(), span).await;
    active.decrement(1.0);
    beat_stop.cancel();
    let _ = heartbeat.await;
    drop(hub_hold);
    inner.unhold(run_id);
    outcome
}

/// What the heartbeat needs of a lease: not the run's record (its spec and usage), which would
/// be copied once more per run for nothing.
struct LeaseKey {
    run_id: RunId,
    tenant: TenantId,
    epoch: i64,
}

/// Renews the lease, tells JetStream the work goes on, and keeps the admission slot, until
/// `stop`; cancels `lost` when the lease is gone.
async fn heartbeat(
    inner: Arc<Inner>,
    key: LeaseKey,
    msg: Option<Arc<jetstream::Message>>,
    lost: CancellationToken,
    stop: CancellationToken,
) {
    let every = Duration::from_millis(inner.cfg.heartbeat_ms);
    let ttl = i64::try_from(inner.cfg.lease_ttl_ms).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match inner.store.renew_lease(key.run_id, key.epoch, ttl).await {
            Ok(()) => {}
            Err(RunStoreError::StaleLease(_)) => {
                tracing::warn!("lease lost; stopping this run here");
                lost.cancel();
                return;
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew the lease"),
        }
        if let Some(msg) = &msg {
            let _ = msg.ack_with(AckKind::Progress).await;
        }
        // Renews only a slot the run holds: a parent that lent its slot to its sub-runs has none.
        let _ = inner
            .coord
            .renew(&key.tenant, key.run_id, inner.admission_lease)
            .await;
    }
}
