//! The `usage` table against a real Postgres, one fresh database per test: batch inserts are
//! idempotent and summaries group, filter and sum as documented.
//!
//! The tests use the multi-thread runtime: `TestDb`'s drop closes its pool from another thread
//! while blocking this one.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use time::OffsetDateTime;
use uuid::Uuid;
use weft_core::{TenantId, UsageRecord};
use weft_store::usage::unstorable;
use weft_store::{GroupBy, UsageStore};
use weft_testkit::TestDb;

/// 2026-11-22T10:00:00Z.
const T0_MS: i64 = 1_795_341_600_000;
const HOUR_MS: i64 = 3_600_000;

fn rec(tenant: &str, model: &str, at_ms: i64, input: u64, output: u64) -> UsageRecord {
    UsageRecord {
        id: Uuid::now_v7(),
        at_ms,
        tenant: tenant.into(),
        subject: "svc".into(),
        token_id: None,
        kind: "chat".into(),
        provider: "mock".into(),
        model: model.into(),
        requested_model: model.into(),
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: 1,
        cache_write_tokens: 0,
        latency_ms: 100,
        cost_usd: 0.25,
        outcome: "ok".into(),
    }
}

fn ts(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap()
}

fn tenant(s: &str) -> TenantId {
    TenantId::parse(s).unwrap()
}

async fn count(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM usage")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn insert_batch_is_idempotent() {
    let db = TestDb::new().await;
    let store = UsageStore::new(db.pool.clone());
    let mut a = rec("acme", "m1", T0_MS, 10, 5);
    a.token_id = Some("tok-1".into());
    let b = rec("acme", "m2", T0_MS + 1, 20, 7);
    let batch = vec![a.clone(), b.clone()];

    assert_eq!(store.insert_batch(&batch).await.unwrap(), 2);
    // The same batch again (a redelivery after a crash before the ack) writes nothing.
    assert_eq!(store.insert_batch(&batch).await.unwrap(), 0);
    // A batch mixing old and new records writes only the new ones.
    let c = rec("acme", "m1", T0_MS + 2, 1, 1);
    assert_eq!(
        store.insert_batch(&[b.clone(), c.clone()]).await.unwrap(),
        1
    );
    // The same id twice in one batch is one row.
    let d = rec("acme", "m1", T0_MS + 3, 1, 1);
    assert_eq!(
        store.insert_batch(&[d.clone(), d.clone()]).await.unwrap(),
        1
    );
    assert_eq!(store.insert_batch(&[]).await.unwrap(), 0);
    assert_eq!(count(&db).await, 4);

    // What is stored is what was sent.
    assert_eq!(store.get(a.id).await.unwrap(), Some(a));
    assert_eq!(store.get(c.id).await.unwrap(), Some(c));
    assert_eq!(store.get(Uuid::now_v7()).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unstorable_record_fails_its_batch_and_writes_nothing() {
    let db = TestDb::new().await;
    let store = UsageStore::new(db.pool.clone());
    let good = rec("acme", "m1", T0_MS, 1, 1);
    let mut nul = rec("acme", "m1", T0_MS, 1, 1);
    nul.subject = "a\0b".into();
    let far = rec("acme", "m1", i64::MAX, 1, 1);
    assert!(unstorable(&good).is_none());
    assert!(unstorable(&nul).unwrap().contains("NUL"));
    assert!(unstorable(&far).unwrap().contains("at_ms"));
    assert!(store.insert_batch(&[good.clone(), nul]).await.is_err());
    assert!(store.insert_batch(&[good, far]).await.is_err());
    assert_eq!(count(&db).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn summaries_group_sum_and_stay_in_the_tenant_and_range() {
    let db = TestDb::new().await;
    let store = UsageStore::new(db.pool.clone());
    let mut with_token = rec("acme", "m1", T0_MS, 10, 1);
    with_token.token_id = Some("tok-1".into());
    let records = vec![
        with_token,
        rec("acme", "m1", T0_MS + 10, 20, 2),
        rec("acme", "m2", T0_MS + HOUR_MS, 40, 4),
        // Outside [from, to): `to` is exclusive.
        rec("acme", "m2", T0_MS + 2 * HOUR_MS, 1000, 1000),
        // Before `from`.
        rec("acme", "m2", T0_MS - 1, 1000, 1000),
        // Another tenant, inside the range.
        rec("globex", "m1", T0_MS + 5, 500, 500),
    ];
    assert_eq!(store.insert_batch(&records).await.unwrap(), 6);
    let (from, to) = (ts(T0_MS), ts(T0_MS + 2 * HOUR_MS));

    // No grouping: one row with every total.
    let s = store.summary(&tenant("acme"), from, to, &[]).await.unwrap();
    assert!(!s.truncated);
    assert_eq!(s.rows.len(), 1);
    let all = &s.rows[0];
    assert_eq!(
        (
            all.requests,
            all.input_tokens,
            all.output_tokens,
            all.cache_read_tokens
        ),
        (3, 70, 7, 3)
    );
    assert!((all.cost_usd - 0.75).abs() < 1e-9);
    assert!((all.avg_latency_ms - 100.0).abs() < 1e-9);
    assert_eq!(all.model, None);

    // By model.
    let s = store
        .summary(&tenant("acme"), from, to, &[GroupBy::Model])
        .await
        .unwrap();
    let got: Vec<_> = s
        .rows
        .iter()
        .map(|r| (r.model.clone().unwrap(), r.requests, r.input_tokens))
        .collect();
    assert_eq!(got, vec![("m1".into(), 2, 30), ("m2".into(), 1, 40)]);
    assert!(
        s.rows
            .iter()
            .all(|r| r.provider.is_none() && r.hour.is_none())
    );

    // By hour and provider: UTC hour buckets, oldest first.
    let s = store
        .summary(
            &tenant("acme"),
            from,
            to,
            &[GroupBy::Hour, GroupBy::Provider],
        )
        .await
        .unwrap();
    let got: Vec<_> = s
        .rows
        .iter()
        .map(|r| (r.hour.unwrap(), r.provider.clone().unwrap(), r.requests))
        .collect();
    assert_eq!(
        got,
        vec![
            (ts(T0_MS), "mock".to_owned(), 2),
            (ts(T0_MS + HOUR_MS), "mock".to_owned(), 1)
        ]
    );

    // By token: calls without one are their own group.
    let s = store
        .summary(&tenant("acme"), from, to, &[GroupBy::Token])
        .await
        .unwrap();
    let got: Vec<_> = s
        .rows
        .iter()
        .map(|r| (r.token_id.clone(), r.requests))
        .collect();
    assert_eq!(got, vec![(Some("tok-1".into()), 1), (None, 2)]);

    // The other tenant sees only its own row; a tenant without calls sees nothing.
    let s = store
        .summary(&tenant("globex"), from, to, &[GroupBy::Model])
        .await
        .unwrap();
    assert_eq!(s.rows.len(), 1);
    assert_eq!(s.rows[0].input_tokens, 500);
    let s = store
        .summary(&tenant("nobody"), from, to, &[])
        .await
        .unwrap();
    assert!(s.rows.is_empty());
}

#[test]
fn group_by_names_round_trip() {
    for g in GroupBy::ALL {
        assert_eq!(g.as_str().parse::<GroupBy>().unwrap(), g);
    }
    let e = "tenant".parse::<GroupBy>().unwrap_err();
    assert_eq!(e.to_string(), "unknown group_by value `tenant`");
}
