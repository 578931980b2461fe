//! Channels over HTTP, on whole fleets with the real Postgres and NATS: create, publish, read,
//! ack, peek, await; a long-poll on one fleet woken by a publish through another; another
//! tenant's 404, a missing scope's 403, and 400s naming the field.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::{Duration, Instant};

use common::TestFleet;
use serde_json::{Value, json};

async fn token(f: &TestFleet, tenant: &str, scopes: &[&str]) -> String {
    let (s, t) = f.mint(&f.admin, tenant, scopes).await;
    assert_eq!(s, 201, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

fn param(body: &Value) -> &str {
    body["error"]["param"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn channels_over_http() {
    let f = TestFleet::start().await;
    let admin = token(&f, "acme", &["tenant:admin"]).await;
    let rw = token(&f, "acme", &["channels:publish", "channels:read"]).await;

    let (s, c) = f
        .put(
            "/v1/channels/jobs.eu",
            &admin,
            json!({"scope": "tenant", "ttl_seconds": 3600, "max_messages": 100}),
        )
        .await;
    assert_eq!(s, 201, "{c}");
    assert_eq!(c["created"], true);
    assert_eq!(c["scope"], "tenant");
    let (s, c) = f
        .put(
            "/v1/channels/jobs.eu",
            &admin,
            json!({"scope": "tenant", "max_messages": 50}),
        )
        .await;
    assert_eq!(s, 200, "{c}");
    assert_eq!(c["max_messages"], 50);
    let (s, e) = f
        .put("/v1/channels/jobs.eu", &admin, json!({"scope": "user"}))
        .await;
    assert_eq!(s, 409, "{e}");

    // Publish, read, ack.
    let (s, p1) = f
        .post(
            "/v1/channels/jobs.eu/publish",
            &rw,
            json!({"payload": {"job": 1}}),
        )
        .await;
    assert_eq!(s, 201, "{p1}");
    assert_eq!(p1["seq"], 1);
    let (s, p2) = f
        .post(
            "/v1/channels/jobs.eu/publish",
            &rw,
            json!({"payload": [2], "op_key": "k"}),
        )
        .await;
    assert_eq!(s, 201, "{p2}");
    let (s, again) = f
        .post(
            "/v1/channels/jobs.eu/publish",
            &rw,
            json!({"payload": [2], "op_key": "k"}),
        )
        .await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["replayed"], true);
    assert_eq!(again["cursor"], p2["cursor"]);

    let (s, r) = f.post("/v1/channels/jobs.eu/read", &rw, json!({})).await;
    assert_eq!(s, 200, "{r}");
    let payloads: Vec<&Value> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["payload"])
        .collect();
    assert_eq!(payloads, [&json!({"job": 1}), &json!([2])]);
    assert_eq!(r["cursor"], p2["cursor"]);
    // An empty body reads too.
    let resp = f
        .http
        .post(format!("{}/v1/channels/jobs.eu/read", f.url))
        .bearer_auth(&rw)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);

    let (s, a) = f
        .post(
            "/v1/channels/jobs.eu/ack",
            &rw,
            json!({"cursor": p2["cursor"]}),
        )
        .await;
    assert_eq!(s, 200, "{a}");
    let (s, e) = f
        .post(
            "/v1/channels/jobs.eu/ack",
            &rw,
            json!({"cursor": p1["cursor"]}),
        )
        .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(param(&e), "cursor");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("committed"),
        "{e}"
    );
    let (s, r) = f.post("/v1/channels/jobs.eu/read", &rw, json!({})).await;
    assert_eq!(s, 200);
    assert!(r["messages"].as_array().unwrap().is_empty(), "{r}");

    // A cursor from another channel.
    f.put("/v1/channels/other", &admin, json!({"scope": "tenant"}))
        .await;
    let (_, o) = f
        .post("/v1/channels/other/publish", &rw, json!({"payload": 0}))
        .await;
    let (s, e) = f
        .post(
            "/v1/channels/jobs.eu/read",
            &rw,
            json!({"cursor": o["cursor"]}),
        )
        .await;
    assert_eq!((s, param(&e)), (400, "cursor"), "{e}");
    let (s, e) = f
        .post(
            "/v1/channels/jobs.eu/ack",
            &rw,
            json!({"cursor": o["cursor"]}),
        )
        .await;
    assert_eq!((s, param(&e)), (400, "cursor"), "{e}");

    // Peek and list.
    let (s, pk) = f.get("/v1/channels/jobs.eu/peek?max=1", &rw).await;
    assert_eq!(s, 200, "{pk}");
    assert_eq!(pk["messages"][0]["seq"], 2);
    let (s, l) = f.get("/v1/channels", &rw).await;
    assert_eq!(s, 200);
    let names: Vec<&str> = l["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["jobs.eu", "other"]);

    // Await: `other` has an unread message for this consumer, jobs.eu does not.
    let (s, aw) = f
        .post(
            "/v1/channels/await",
            &rw,
            json!({"channels": ["jobs.eu", "other"], "mode": "any", "wait_ms": 0}),
        )
        .await;
    assert_eq!(s, 200, "{aw}");
    assert_eq!(aw["satisfied"], true);
    let (_, aw) = f
        .post(
            "/v1/channels/await",
            &rw,
            json!({"channels": ["jobs.eu", "other"], "mode": "all", "wait_ms": 0}),
        )
        .await;
    assert_eq!(aw["satisfied"], false, "{aw}");

    // Agent channels take `agent` in the body and the query.
    f.put("/v1/channels/mail", &admin, json!({"scope": "agent"}))
        .await;
    let (s, e) = f
        .post("/v1/channels/mail/publish", &rw, json!({"payload": 1}))
        .await;
    assert_eq!((s, param(&e)), (400, "agent"), "{e}");
    let (s, _) = f
        .post(
            "/v1/channels/mail/publish",
            &rw,
            json!({"payload": 1, "agent": "triage"}),
        )
        .await;
    assert_eq!(s, 201);
    let (s, pk) = f.get("/v1/channels/mail/peek?agent=triage", &rw).await;
    assert_eq!(s, 200);
    assert_eq!(pk["messages"].as_array().unwrap().len(), 1);
    let (s, pk) = f.get("/v1/channels/mail/peek?agent=writer", &rw).await;
    assert_eq!(s, 200);
    assert!(pk["messages"].as_array().unwrap().is_empty());

    // Bad input: 400 naming the field.
    let cases = [
        (
            "/v1/channels/jobs.eu/publish",
            json!({"payload": "x".repeat(70_000)}),
            "payload",
        ),
        ("/v1/channels/jobs.eu/publish", json!({}), "payload"),
        (
            "/v1/channels/jobs.eu/read",
            json!({"wait_ms": 30_001}),
            "wait_ms",
        ),
        ("/v1/channels/jobs.eu/read", json!({"max": 0}), "max"),
        (
            "/v1/channels/jobs.eu/read",
            json!({"wait_ms": -1}),
            "wait_ms",
        ),
        (
            "/v1/channels/jobs.eu/read",
            json!({"cursor": "forged"}),
            "cursor",
        ),
        (
            "/v1/channels/jobs.eu/ack",
            json!({"cursor": "AAAA"}),
            "cursor",
        ),
        (
            "/v1/channels/await",
            json!({"channels": ["jobs.eu"], "mode": "at_least"}),
            "n",
        ),
        (
            "/v1/channels/await",
            json!({"channels": [], "mode": "any"}),
            "channels",
        ),
        (
            "/v1/channels/await",
            json!({"channels": ["jobs.eu"], "mode": "some"}),
            "mode",
        ),
    ];
    for (path, body, field) in cases {
        let (s, e) = f.post(path, &rw, body.clone()).await;
        assert_eq!((s, param(&e)), (400, field), "{path} {body}: {e}");
    }
    for (body, field) in [
        (json!({"scope": "galaxy"}), "scope"),
        (json!({"scope": "tenant", "ttl_seconds": -1}), "ttl_seconds"),
        (json!({"scope": "tenant", "ttl_seconds": 0}), "ttl_seconds"),
        (
            json!({"scope": "tenant", "max_messages": 0}),
            "max_messages",
        ),
    ] {
        let (s, e) = f.put("/v1/channels/x", &admin, body.clone()).await;
        assert_eq!((s, param(&e)), (400, field), "{body}: {e}");
    }
    let (s, e) = f
        .put("/v1/channels/a..b", &admin, json!({"scope": "tenant"}))
        .await;
    assert_eq!((s, param(&e)), (400, "name"), "{e}");

    // Another tenant: 404 on every route naming acme's channel; a missing scope: 403.
    let beta = token(&f, "beta", &["tenant:admin"]).await;
    for (method, path, body) in [
        (
            "POST",
            "/v1/channels/jobs.eu/publish",
            json!({"payload": 1}),
        ),
        ("POST", "/v1/channels/jobs.eu/read", json!({})),
        (
            "POST",
            "/v1/channels/jobs.eu/ack",
            json!({"cursor": p1["cursor"]}),
        ),
        ("GET", "/v1/channels/jobs.eu/peek", Value::Null),
        (
            "POST",
            "/v1/channels/await",
            json!({"channels": ["jobs.eu"], "mode": "any"}),
        ),
        ("DELETE", "/v1/channels/jobs.eu", Value::Null),
    ] {
        let body = (!body.is_null()).then_some(body);
        let (s, e) = f.send(method.parse().unwrap(), path, &beta, body).await;
        assert_eq!(s, 404, "{method} {path}: {e}");
    }
    let (_, l) = f.get("/v1/channels", &beta).await;
    assert!(l["data"].as_array().unwrap().is_empty(), "{l}");
    let reader = token(&f, "acme", &["channels:read"]).await;
    let publisher = token(&f, "acme", &["channels:publish"]).await;
    let none = token(&f, "acme", &["runs:read"]).await;
    let (s, _) = f
        .post(
            "/v1/channels/jobs.eu/publish",
            &reader,
            json!({"payload": 1}),
        )
        .await;
    assert_eq!(s, 403);
    let (s, _) = f
        .post("/v1/channels/jobs.eu/read", &publisher, json!({}))
        .await;
    assert_eq!(s, 403);
    let (s, _) = f.get("/v1/channels", &none).await;
    assert_eq!(s, 403);
    let (s, _) = f
        .put("/v1/channels/new", &rw, json!({"scope": "tenant"}))
        .await;
    assert_eq!(s, 403);

    // Delete: gone, with a hint to create it.
    let (s, _) = f
        .send(reqwest::Method::DELETE, "/v1/channels/other", &admin, None)
        .await;
    assert_eq!(s, 204);
    let (s, e) = f.post("/v1/channels/other/read", &rw, json!({})).await;
    assert_eq!(s, 404);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("PUT /v1/channels/other"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_poll_is_woken_by_a_publish_through_another_fleet() {
    let a = TestFleet::start().await;
    let b = a.join(|_| {}).await;
    let admin = token(&a, "acme", &["tenant:admin"]).await;
    let rw = token(&a, "acme", &["channels:publish", "channels:read"]).await;
    let (s, _) = a
        .put("/v1/channels/wake", &admin, json!({"scope": "tenant"}))
        .await;
    assert_eq!(s, 201);

    let url = format!("{}/v1/channels/wake/read", a.url);
    let http = a.http.clone();
    let reader_token = rw.clone();
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        let r = http
            .post(url)
            .bearer_auth(reader_token)
            .json(&json!({"wait_ms": 20_000}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });
    // Whenever the publish lands (before the reader waits or during its wait), the read must
    // return it, well before its 20 s deadline.
    let (s, p) = b
        .post("/v1/channels/wake/publish", &rw, json!({"payload": "ping"}))
        .await;
    assert_eq!(s, 201, "{p}");
    let (s, r) = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the long-poll was not woken")
        .unwrap();
    assert_eq!(s, 200, "{r}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(r["messages"][0]["payload"], "ping", "{r}");
    assert_eq!(r["cursor"], p["cursor"]);
    b.stop().await;
}
