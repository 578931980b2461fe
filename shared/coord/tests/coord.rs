//! Admission and cancel against the machine's Redis, each test under its own key prefix.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use weft_coord::{Admission, Control, ControlOp, ControlSignal, Coord};
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
    // Re-admitting a member renews it rather than taking a slot.
    assert_eq!(
        c.admit(&acme, a, 2, lease).await.unwrap(),
        Admission::Admitted
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
