//! Stored Responses API responses over time and size: a conversation lives as long as its
//! newest response (an expired response that a live one continues is still replayed, and the
//! sweeper keeps it), and a chain too long or too large for one continuation is a 400 naming
//! `previous_response_id`, never a 500 from the hop to the router.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::TestFleet;
use serde_json::{Value, json};
use weft_store::{Chain, NewResponse, ResponseStore};

async fn create(f: &TestFleet, body: Value) -> (u16, Value) {
    f.post("/v1/responses", &f.admin, body).await
}

/// Makes a stored response expire now, as the clock would.
async fn expire(f: &TestFleet, id: &str) {
    sqlx::query("UPDATE responses SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(id)
        .execute(&f.db.pool)
        .await
        .unwrap();
}

async fn count(f: &TestFleet, id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM responses WHERE id = $1")
        .bind(id)
        .fetch_one(&f.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_conversation_lives_as_long_as_its_newest_response() {
    let f = TestFleet::start().await;
    let script = "#mock {\"turns\": [], \"reply\": \"remembered\"}";
    let (s, first) = create(&f, json!({"model": "mock-1", "input": script})).await;
    assert_eq!(s, 200, "{first}");
    let first = first["id"].as_str().unwrap().to_owned();
    let (s, second) = create(
        &f,
        json!({"model": "mock-1", "input": "again", "previous_response_id": first}),
    )
    .await;
    assert_eq!(s, 200, "{second}");
    let second = second["id"].as_str().unwrap().to_owned();

    // The first expires: it is gone for reading, not for the conversation that continues it.
    expire(&f, &first).await;
    let (s, _) = f.get(&format!("/v1/responses/{first}"), &f.admin).await;
    assert_eq!(s, 404);
    let (s, third) = create(
        &f,
        json!({"model": "mock-1", "input": "more", "previous_response_id": second}),
    )
    .await;
    assert_eq!(s, 200, "{third}");
    assert_eq!(
        third["output"][0]["content"][0]["text"], "remembered",
        "the expired first turn's script was replayed: {third}"
    );
    let third = third["id"].as_str().unwrap().to_owned();

    // The sweeper keeps what a response continues; once the newest has expired, the whole
    // conversation goes, newest first.
    let store = ResponseStore::new(f.db.pool.clone());
    store.sweep_expired(1000).await.unwrap();
    assert_eq!(count(&f, &first).await, 1, "continued by a live response");
    expire(&f, &second).await;
    expire(&f, &third).await;
    let mut swept = 0;
    for _ in 0..5 {
        swept += store.sweep_expired(1000).await.unwrap();
    }
    assert_eq!(swept, 3);
    for id in [&first, &second, &third] {
        assert_eq!(count(&f, id).await, 0, "{id}");
    }
    // A continuation of a swept one is a 400 naming the field.
    let (s, e) = create(
        &f,
        json!({"model": "mock-1", "input": "x", "previous_response_id": third}),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "previous_response_id", "{e}");
}

#[tokio::test]
async fn chains_too_long_or_too_large_are_refused_before_the_model() {
    let f = TestFleet::start().await;
    let store = ResponseStore::new(f.db.pool.clone());
    let tenant = weft_core::TenantId::parse("default").unwrap();
    let later = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let subject = "admin";
    let me: Value = f.get("/v1/me", &f.admin).await.1;
    let subject = me["subject"].as_str().unwrap_or(subject).to_owned();
    let put = |id: String, prev: Option<String>, items: String| {
        let store = store.clone();
        let tenant = tenant.clone();
        let subject = subject.clone();
        async move {
            store
                .insert(NewResponse {
                    id: &id,
                    tenant: &tenant,
                    subject: &subject,
                    previous_id: prev.as_deref(),
                    items: &items,
                    response: "{}",
                    expires_at: later,
                })
                .await
                .unwrap();
        }
    };
    let turn = |text: &str| {
        json!([{"role": "user", "content": [{"type": "text", "text": text}]}]).to_string()
    };

    // Exactly MAX_CHAIN links read; one more is too long.
    let n = usize::try_from(weft_store::MAX_CHAIN).unwrap();
    let mut prev: Option<String> = None;
    for i in 0..=n {
        let id = format!("resp_long_{i}");
        put(id.clone(), prev.clone(), turn("x")).await;
        prev = Some(id);
    }
    match store
        .chain(&tenant, &subject, &format!("resp_long_{}", n - 1))
        .await
        .unwrap()
    {
        Chain::Found(turns) => assert_eq!(turns.len(), n),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store
            .chain(&tenant, &subject, &format!("resp_long_{n}"))
            .await
            .unwrap(),
        Chain::TooLong
    );
    let (s, e) = create(
        &f,
        json!({"model": "mock-1", "input": "x", "previous_response_id": format!("resp_long_{n}")}),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "previous_response_id", "{e}");

    // Three turns of 3 MiB: past the byte cap.
    let big = "y".repeat(3 << 20);
    put("resp_big_0".into(), None, turn(&big)).await;
    put("resp_big_1".into(), Some("resp_big_0".into()), turn(&big)).await;
    put("resp_big_2".into(), Some("resp_big_1".into()), turn(&big)).await;
    assert!(matches!(
        store.chain(&tenant, &subject, "resp_big_1").await.unwrap(),
        Chain::Found(_)
    ));
    assert_eq!(
        store.chain(&tenant, &subject, "resp_big_2").await.unwrap(),
        Chain::TooLarge
    );
    let (s, e) = create(
        &f,
        json!({"model": "mock-1", "input": "x", "previous_response_id": "resp_big_2"}),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("MiB"),
        "{e}"
    );
}
