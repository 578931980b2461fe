//! Dispatch, lease and heartbeat: one JetStream dispatch message becomes a fenced lease on its
//! run, a heartbeat that keeps the lease, the JetStream message and the admission slot alive,
//! and a [`Driver`] that works the run; how the run ended decides the message's ack.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use tokio::sync::{Mutex, Semaphore};
use tokio_util::sync::CancellationToken;
use weft_core::{Principal, Scope, Scopes};
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
    let run_id = lease.run.id;
    let msg = Arc::new(msg);

    let lost = CancellationToken::new();
    let beat_stop = CancellationToken::new();
    let heartbeat = tokio::spawn(heartbeat(
        inner.clone(),
        lease.clone(),
        msg.clone(),
        lost.clone(),
        beat_stop.clone(),
    ));
    let span = tracing::info_span!("run", run_id = %run_id, tenant = %lease.run.tenant, epoch = lease.epoch);
    let driver = Driver {
        inner: inner.clone(),
        principal: Principal {
            tenant: lease.run.tenant.clone(),
            subject: lease.run.subject.clone(),
            // What a run may touch beyond these is decided by its agent (memory_scopes, channels,
            // skills), checked by the tools before they call the substrate.
            scopes: Scopes::new([
                Scope::RunsCreate,
                Scope::RunsRead,
                Scope::LlmCall,
                Scope::MemoryRead,
                Scope::MemoryWrite,
                Scope::ChannelsPublish,
                Scope::ChannelsRead,
            ]),
            token_id: None,
        },
        spec: serde_json::from_value(lease.run.spec.clone()).unwrap_or_default(),
        lease,
        cancel,
        input,
        lost,
        stop,
        seq: Mutex::new(0),
        children: Arc::new(Semaphore::new(1)),
        mounted: tokio::sync::OnceCell::new(),
        credentials: tokio::sync::OnceCell::new(),
        unstarted: std::sync::Mutex::default(),
    };
    let outcome = tracing::Instrument::instrument(driver.drive(), span).await;
    beat_stop.cancel();
    let _ = heartbeat.await;
    inner.unhold(run_id);
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

/// Renews the lease, tells JetStream the work goes on, and keeps the admission slot, until
/// `stop`; cancels `lost` when the lease is gone.
async fn heartbeat(
    inner: Arc<Inner>,
    lease: Lease,
    msg: Arc<jetstream::Message>,
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
        match inner
            .store
            .renew_lease(lease.run.id, lease.epoch, ttl)
            .await
        {
            Ok(()) => {}
            Err(RunStoreError::StaleLease(_)) => {
                tracing::warn!("lease lost; stopping this run here");
                lost.cancel();
                return;
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew the lease"),
        }
        let _ = msg.ack_with(AckKind::Progress).await;
        // Renews only a slot the run holds: a parent that lent its slot to its sub-runs has none.
        let _ = inner
            .coord
            .renew(&lease.run.tenant, lease.run.id, inner.admission_lease)
            .await;
    }
}
