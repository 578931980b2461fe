//! In-process live events: when a run's executor and a stream of it share a process (`weft up`),
//! the stream reads the events from memory ([`LiveHub::watch`]) and uses NATS only for runs held
//! elsewhere. Delivery is at most once, as on NATS: a watcher whose buffer is full misses the
//! step and finds it in the transcript by its seq.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;
use weft_core::RunId;

use crate::LiveEvent;

/// The events of one step (or one live-only delta), in seq order.
pub type LiveBatch = Arc<[LiveEvent]>;

/// Steps a watcher may fall behind before it misses one (and reads it from the transcript).
const WATCH_BUFFER: usize = 64;

/// Runs worked on by this process and the streams watching them. Cheap to clone.
#[derive(Clone, Default)]
pub struct LiveHub {
    runs: Arc<Mutex<HashMap<RunId, Vec<mpsc::Sender<LiveBatch>>>>>,
}

/// A run registered with [`LiveHub::hold`]; dropping it ends every watcher's channel.
pub struct HubHold {
    hub: LiveHub,
    run: RunId,
}

impl Drop for HubHold {
    fn drop(&mut self) {
        self.hub.lock().remove(&self.run);
    }
}

impl std::fmt::Debug for LiveHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveHub")
            .field("runs", &self.lock().len())
            .finish()
    }
}

impl LiveHub {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Vec<mpsc::Sender<LiveBatch>>>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `run` as worked on in this process until the returned guard drops.
    pub fn hold(&self, run: RunId) -> HubHold {
        self.lock().entry(run).or_default();
        HubHold {
            hub: self.clone(),
            run,
        }
    }

    /// The live events of `run` while this process works on it, `None` otherwise. The channel ends
    /// when the run leaves the process; the watcher then reads the transcript for what it missed.
    pub fn watch(&self, run: RunId) -> Option<mpsc::Receiver<LiveBatch>> {
        let mut runs = self.lock();
        let watchers = runs.get_mut(&run)?;
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        watchers.push(tx);
        Some(rx)
    }

    /// Hands a step's events to `run`'s watchers here (none is the common case: one lookup).
    pub fn publish(&self, run: RunId, batch: &LiveBatch) {
        let mut runs = self.lock();
        let Some(watchers) = runs.get_mut(&run) else {
            return;
        };
        // A watcher that went away is forgotten; one that is full misses this step.
        watchers.retain(|w| {
            !matches!(
                w.try_send(batch.clone()),
                Err(mpsc::error::TrySendError::Closed(_))
            )
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn batch(seq: i64) -> LiveBatch {
        Arc::from(vec![LiveEvent {
            seq,
            kind: "k".into(),
            persisted: true,
            data: serde_json::Value::Null,
        }])
    }

    #[tokio::test]
    async fn watchers_of_a_held_run_get_its_steps_until_it_leaves() {
        let hub = LiveHub::new();
        let run = RunId::new();
        assert!(hub.watch(run).is_none(), "not held here");
        let hold = hub.hold(run);
        let mut a = hub.watch(run).unwrap();
        let mut b = hub.watch(run).unwrap();
        hub.publish(run, &batch(1));
        assert_eq!(a.recv().await.unwrap()[0].seq, 1);
        assert_eq!(b.recv().await.unwrap()[0].seq, 1);
        drop(b);
        hub.publish(run, &batch(2));
        assert_eq!(a.recv().await.unwrap()[0].seq, 2);
        assert_eq!(hub.lock()[&run].len(), 1, "a closed watcher is forgotten");
        drop(hold);
        assert!(a.recv().await.is_none(), "the channel ends with the hold");
        assert!(hub.watch(run).is_none());
    }

    #[tokio::test]
    async fn a_full_watcher_misses_steps_without_holding_up_the_run() {
        let hub = LiveHub::new();
        let run = RunId::new();
        let _hold = hub.hold(run);
        let mut w = hub.watch(run).unwrap();
        for seq in 0..(WATCH_BUFFER as i64 + 10) {
            hub.publish(run, &batch(seq));
        }
        let mut got = 0;
        while let Ok(b) = w.try_recv() {
            assert_eq!(b[0].seq, got);
            got += 1;
        }
        assert_eq!(
            got, WATCH_BUFFER as i64,
            "the rest is read from the transcript"
        );
    }
}
