//! Admission and cancel against the machine's Redis, each test under its own key prefix.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use weft_coord::{Admission, Control, ControlOp, ControlSignal, Coord, QuotaCounter, QuotaVerdict};
use weft_core::{RunId, TenantId};

fn coord() -> Coord {
    let prefix = format!("t{}", uuid::Uuid::now_v7().simple());
    Coord::new("redis://127.0.0.1:6379", &prefix).unwrap()
}

#[tokio::test]
async fn admission_caps_each_tenant_and_frees_on_release() {
    let c = coord();
    let acme = TenantId::parse("acme").unwrap();
    let other = TenantId::parse("other").unwrap();
    let lease = Duration::from_secs(60);
    let (a, b, x) = (RunId::new(), RunId::new(), RunId::new());
    assert_eq!(
        c.admit(&acme, a, 2, lease).await.unwrap(),
        Admission::Admitted
    );
    assert_eq!(
        c.admit(&acme, b, 2, lease).await.unwrap(),
        Admission::Admitted
    );
    assert!(matches!(
        c.admit(&acme, RunId::new(), 2, lease).await.unwrap(),
        Admission::Full { .. }
    ));
    // Re-admitting a member renews it rather than taking a slot, and says so.
    assert_eq!(
        c.admit(&acme, a, 2, lease).await.unwrap(),
        Admission::AlreadyHeld
    );
    // Tenants do not share slots.
    assert_eq!(
        c.admit(&other, x, 2, lease).await.unwrap(),
        Admission::Admitted
    );
    c.release(&acme, a).await.unwrap();
    assert_eq!(
        c.admit(&acme, RunId::new(), 2, lease).await.unwrap(),
        Admission::Admitted
    );
    assert!(c.renew(&acme, b, lease).await.unwrap());
    assert!(
        !c.renew(&acme, a, lease).await.unwrap(),
        "a released slot is not renewed"
    );
}

#[tokio::test]
async fn expired_admission_leases_free_their_slots() {
    let c = coord();
    let t = TenantId::parse("acme").unwrap();
    assert_eq!(
        c.admit(&t, RunId::new(), 1, Duration::from_millis(50))
            .await
            .unwrap(),
        Admission::Admitted
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if c.admit(&t, RunId::new(), 1, Duration::from_secs(60))
            .await
            .unwrap()
            == Admission::Admitted
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lapsed lease never freed its slot"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_cancel_sets_the_flag_and_reaches_listeners() {
    let c = coord();
    let stop = CancellationToken::new();
    let mut rx = c.control_listener(stop.clone());
    assert_eq!(rx.recv().await, Some(ControlSignal::Resubscribed));
    let run = RunId::new();
    assert!(!c.is_cancelled(run).await.unwrap());
    c.cancel(run).await.unwrap();
    assert!(c.is_cancelled(run).await.unwrap());
    let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap();
    assert_eq!(
        got,
        Some(ControlSignal::Message(Control {
            run_id: run,
            op: ControlOp::Cancel
        }))
    );
    stop.cancel();
}

#[tokio::test]
async fn an_unreachable_redis_is_an_error_not_a_hang() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let c = Coord::new(&format!("redis://{closed}"), "x").unwrap();
    let t = TenantId::parse("acme").unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        c.admit(&t, RunId::new(), 1, Duration::from_secs(1)),
    )
    .await;
    assert!(r.expect("bounded").is_err());
}

#[tokio::test]
async fn concurrent_charges_never_pass_a_limit_together() {
    let c = coord();
    let key = c.keys().quota("tenant:acme", "tpm", 1);
    let counter = |cost| QuotaCounter {
        key: key.clone(),
        limit: 1000,
        cost,
        ttl: Duration::from_secs(60),
    };
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let c = c.clone();
            let q = counter(7);
            tokio::spawn(async move { c.charge(&[q]).await.unwrap() })
        })
        .collect();
    let mut granted = 0u64;
    for t in tasks {
        match t.await.unwrap() {
            QuotaVerdict::Granted { remaining } => {
                granted += 1;
                assert!(remaining[0] <= 1000);
            }
            QuotaVerdict::Denied { index, retry_after } => {
                assert_eq!(index, 0);
                assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(60));
            }
        }
    }
    // 1000 / 7 = 142 calls fit; not one more, not one fewer.
    assert_eq!(granted, 142);
    // Reconciling gives tokens back, and a zero-cost counter is never refused.
    c.adjust(std::slice::from_ref(&key), -994).await.unwrap();
    assert!(matches!(
        c.charge(&[counter(7)]).await.unwrap(),
        QuotaVerdict::Granted { .. }
    ));
    assert!(matches!(
        c.charge(&[counter(0)]).await.unwrap(),
        QuotaVerdict::Granted { .. }
    ));
}

#[tokio::test]
async fn a_charge_is_all_or_nothing_across_counters() {
    let c = coord();
    let a = c.keys().quota("tenant:acme", "rpm", 1);
    let b = c.keys().quota("subject:acme:bob", "rpm", 1);
    let q = |key: &String, limit| QuotaCounter {
        key: key.clone(),
        limit,
        cost: 1,
        ttl: Duration::from_secs(60),
    };
    assert_eq!(
        c.charge(&[q(&a, 5), q(&b, 1)]).await.unwrap(),
        QuotaVerdict::Granted {
            remaining: vec![4, 0]
        }
    );
    // b is full: a must not be charged for the refused call.
    assert!(matches!(
        c.charge(&[q(&a, 5), q(&b, 1)]).await.unwrap(),
        QuotaVerdict::Denied { index: 1, .. }
    ));
    assert_eq!(
        c.charge(&[q(&a, 5)]).await.unwrap(),
        QuotaVerdict::Granted { remaining: vec![3] }
    );
}
