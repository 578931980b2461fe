//! What the substrate's tests share: the substrate's parts over a test database, for its gRPC
//! routes (`weft_substrate::grpc_service`).

#![allow(
    clippy::unwrap_used,
    reason = "integration tests: a panic is how a test fails"
)]
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::time::Duration;

use weft_substrate::channels::ChannelStore;
use weft_substrate::memory::{MemoryStore, Quotas, SearchMode};
use weft_substrate::volumes::blobs::Blobs;
use weft_substrate::volumes::{Caps, VolumeStore};
use weft_substrate::{ChannelHub, DefStore, Memory, Parts, Volumes};

fn nats_url() -> String {
    std::env::var("WEFT_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// A memory over `defs`' database with 1 MiB quotas, exact search and no router.
pub fn memory(defs: &DefStore) -> Memory {
    Memory::new(
        MemoryStore::new(
            defs.pool().clone(),
            Quotas {
                tenant_bytes: 1 << 20,
                agent_bytes: 1 << 20,
            },
        ),
        None,
        SearchMode::Exact,
    )
}

/// A channel hub over `defs`' database, waking through NATS under `prefix`.
pub async fn channels(defs: &DefStore, prefix: &str) -> ChannelHub {
    let bus = weft_bus::Bus::connect(&nats_url(), prefix).await.unwrap();
    ChannelHub::new(ChannelStore::new(defs.pool().clone()), bus, 100)
}

/// Volumes over `defs`' database with the default caps and every blob in Postgres.
pub fn volumes(defs: &DefStore) -> Volumes {
    let caps = Caps::from_config(&weft_config::VolumesConfig::default());
    Volumes::new(
        VolumeStore::new(
            defs.pool().clone(),
            Blobs::postgres(defs.pool().clone()),
            caps,
        ),
        defs.clone(),
    )
}

/// The parts with the given memory and channels.
pub fn assemble(defs: DefStore, memory: Memory, channels: ChannelHub) -> Parts {
    let volumes = volumes(&defs);
    Parts {
        defs,
        memory,
        channels,
        volumes,
        memory_sweep_every: Duration::from_secs(30),
        volumes_sweep_every: Duration::from_secs(60),
        webhook_secret_prefix: "WEFT_WEBHOOK_".into(),
        hook_secret_prefix: "WEFT_HOOK_".into(),
    }
}

/// Every part over `defs`' database, with defaults.
pub async fn parts(defs: DefStore, prefix: &str) -> Parts {
    let m = memory(&defs);
    let c = channels(&defs, prefix).await;
    assemble(defs, m, c)
}
