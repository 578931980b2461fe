//! Periodic sweeps (expired memory, ended runs' volumes, unreferenced blobs): rounds every
//! interval until shutdown, each round working through its backlog a batch at a time.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use weft_core::Error;

/// Runs `round` every `every` until `shutdown` is cancelled (a round that has started finishes).
pub(crate) async fn every_until<F, Fut>(every: Duration, shutdown: &CancellationToken, mut round: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        round().await;
    }
}

/// Calls `step` with `batch` until it handles fewer than `batch` items, fails (its error
/// already logged by the store's `into_api`) or `shutdown` is cancelled; how many it handled.
pub(crate) async fn in_batches<F, Fut>(batch: i64, shutdown: &CancellationToken, mut step: F) -> u64
where
    F: FnMut(i64) -> Fut,
    Fut: Future<Output = Result<u64, Error>>,
{
    let full = u64::try_from(batch).unwrap_or(0);
    let mut total = 0;
    loop {
        match step(batch).await {
            Ok(n) => {
                total += n;
                if n < full {
                    return total;
                }
            }
            Err(_) => return total,
        }
        if shutdown.is_cancelled() {
            return total;
        }
    }
}
