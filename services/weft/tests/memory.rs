//! Memory over HTTP against a whole fleet (gateway → substrate gRPC → Postgres, embeddings from
//! the router's mock): scopes never cross users or tenants (including another tenant's run id),
//! scope checks, TTL expiry, `incr` under 100 concurrent callers, compare-and-set, listing with
//! a cursor, search ordering, and bad input as 400s naming the field.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::{Duration, Instant};

use common::TestFleet;
use reqwest::Method;
use serde_json::{Value, json};

async fn token(f: &TestFleet, tenant: &str, subject: &str, scopes: &[&str]) -> String {
    let (s, t) = f
        .post(
            "/v1/tokens",
            &f.admin,
            json!({"name": subject, "tenant": tenant, "subject": subject, "scopes": scopes}),
        )
        .await;
    assert_eq!(s, 201, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

const RW: [&str; 3] = ["memory:read", "memory:write", "runs:create"];

fn assert_param(status: u16, body: &Value, want_status: u16, param: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn scopes_never_cross_users_or_tenants() {
    let f = TestFleet::start().await;
    let alice = token(&f, "acme", "alice", &RW).await;
    let bob = token(&f, "acme", "bob", &RW).await;
    let eve = token(&f, "beta", "eve", &RW).await;
    let beta_admin = token(&f, "beta", "root", &["tenant:admin"]).await;
    let no_scope = token(&f, "acme", "alice", &["runs:read"]).await;

    let (s, e) = f
        .put(
            "/v1/memory/user/alice/city",
            &alice,
            json!({"value": {"name": "Lisbon"}}),
        )
        .await;
    assert_eq!(s, 200, "{e}");
    assert_eq!(
        (e["version"].as_i64(), &e["value"]),
        (Some(1), &json!({"name": "Lisbon"}))
    );
    assert!(
        e["expires_at"].is_null() && e["updated_at"].is_string(),
        "{e}"
    );
    let (s, e) = f.get("/v1/memory/user/alice/city", &alice).await;
    assert_eq!((s, &e["value"]["name"]), (200, &json!("Lisbon")));

    // Another user of the tenant, another tenant (even its admin): no such scope.
    for (who, path) in [
        (&bob, "/v1/memory/user/alice/city"),
        (&eve, "/v1/memory/user/alice/city"),
        (&eve, "/v1/memory/tenant/acme/city"),
        (&alice, "/v1/memory/tenant/beta/city"),
    ] {
        let (s, e) = f.get(path, who).await;
        assert_eq!(s, 404, "{path}: {e}");
        let (s, _) = f.put(path, who, json!({"value": 1})).await;
        assert_eq!(s, 404, "{path}");
        let (s, _) = f.send(Method::DELETE, path, who, None).await;
        assert_eq!(s, 404, "{path}");
    }
    let (s, _) = f.get("/v1/memory/user/alice", &bob).await;
    assert_eq!(s, 404);
    // Tenant B's admin may use any user id of B: B's `user/alice` is B's own, and A's stays.
    let (s, _) = f
        .put(
            "/v1/memory/user/alice/city",
            &beta_admin,
            json!({"value": "Oslo"}),
        )
        .await;
    assert_eq!(s, 200);
    let (s, e) = f.get("/v1/memory/user/alice/city", &alice).await;
    assert_eq!((s, &e["value"]["name"]), (200, &json!("Lisbon")));
    let (s, _) = f
        .post(
            "/v1/memory/search",
            &eve,
            json!({"scope": "user", "scope_id": "alice", "query": "x"}),
        )
        .await;
    assert_eq!(s, 404);

    // Run scope: alice's run is hers; bob and the other tenant cannot pass its id.
    let acme_admin = token(&f, "acme", "root", &["tenant:admin"]).await;
    common::put_agent(&f, &acme_admin, "helper", json!({"model": "mock-1"})).await;
    let run = common::create(&f, &alice, json!({"agent": "helper", "interactive": true})).await;
    let path = format!("/v1/memory/run/{run}/step");
    let (s, e) = f.post(&format!("{path}/incr"), &alice, json!({})).await;
    assert_eq!((s, e["value"].as_i64()), (200, Some(1)), "{e}");
    for who in [&bob, &eve, &beta_admin] {
        let (s, _) = f.get(&path, who).await;
        assert_eq!(s, 404);
        let (s, _) = f.post(&format!("{path}/incr"), who, json!({"by": 5})).await;
        assert_eq!(s, 404);
    }
    let (s, e) = f.get(&path, &alice).await;
    assert_eq!((s, e["value"].as_i64()), (200, Some(1)));

    // The tenant scope is shared by the tenant's users; agent scopes by name.
    let (s, _) = f
        .put(
            "/v1/memory/tenant/acme/motto",
            &alice,
            json!({"value": "hi"}),
        )
        .await;
    assert_eq!(s, 200);
    let (s, e) = f.get("/v1/memory/tenant/acme/motto", &bob).await;
    assert_eq!((s, &e["value"]), (200, &json!("hi")));
    let (s, _) = f.get("/v1/memory/agent/helper/motto", &eve).await;
    assert_eq!(s, 404, "beta's agent/helper is beta's own, and empty");

    // Scopes of the token: 403, before anything else.
    let (s, e) = f.get("/v1/memory/user/alice/city", &no_scope).await;
    assert_eq!(s, 403, "{e}");
    let read_only = token(&f, "acme", "alice", &["memory:read"]).await;
    let (s, _) = f
        .put(
            "/v1/memory/user/alice/city",
            &read_only,
            json!({"value": 2}),
        )
        .await;
    assert_eq!(s, 403);
    let (s, _) = f.get("/v1/memory/user/alice/city", &read_only).await;
    assert_eq!(s, 200);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ttl_incr_cas_and_list_over_http() {
    let f = TestFleet::start().await;
    let alice = token(&f, "acme", "alice", &RW).await;

    // TTL: gone within a deadline, never returned once expired.
    let (s, e) = f
        .put(
            "/v1/memory/user/alice/otp",
            &alice,
            json!({"value": "123456", "ttl_seconds": 1}),
        )
        .await;
    assert_eq!(s, 200);
    assert!(e["expires_at"].is_string(), "{e}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, _) = f.get("/v1/memory/user/alice/otp", &alice).await;
        if s == 404 {
            break;
        }
        assert_eq!(s, 200);
        assert!(
            Instant::now() < deadline,
            "a 1 s entry was still there after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // 100 concurrent increments: exactly +100.
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (http, url, alice) = (f.http.clone(), f.url.clone(), alice.clone());
        tasks.push(tokio::spawn(async move {
            http.post(format!("{url}/v1/memory/tenant/acme/visits/incr"))
                .bearer_auth(alice)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let (_, e) = f.get("/v1/memory/tenant/acme/visits", &alice).await;
    assert_eq!(
        (e["value"].as_i64(), e["version"].as_i64()),
        (Some(100), Some(100))
    );

    // Compare-and-set.
    let p = "/v1/memory/user/alice/doc";
    let (s, _) = f
        .put(p, &alice, json!({"value": "v1", "if_version": 0}))
        .await;
    assert_eq!(s, 200);
    let (s, e) = f
        .put(p, &alice, json!({"value": "v1 again", "if_version": 0}))
        .await;
    assert_eq!(s, 409, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("version 1"),
        "{e}"
    );
    let (s, e) = f
        .put(p, &alice, json!({"value": "v2", "if_version": 1}))
        .await;
    assert_eq!((s, e["version"].as_i64()), (200, Some(2)));
    let (s, _) = f
        .send(Method::DELETE, &format!("{p}?if_version=1"), &alice, None)
        .await;
    assert_eq!(s, 409);
    let (s, e) = f
        .send(Method::DELETE, &format!("{p}?if_version=2"), &alice, None)
        .await;
    assert_eq!((s, &e["deleted"]), (200, &json!(true)));

    // Listing by prefix with a cursor; a key with a slash, percent-encoded.
    for i in 0..7 {
        let (s, _) = f
            .put(
                &format!("/v1/memory/user/alice/todo%2F{i}"),
                &alice,
                json!({"value": i}),
            )
            .await;
        assert_eq!(s, 200);
    }
    let mut keys = Vec::new();
    let mut next = String::new();
    loop {
        let (s, page) = f
            .get(
                &format!("/v1/memory/user/alice?prefix=todo%2F&limit=3{next}"),
                &alice,
            )
            .await;
        assert_eq!(s, 200, "{page}");
        for e in page["data"].as_array().unwrap() {
            keys.push(e["key"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => next = format!("&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(
        keys,
        (0..7).map(|i| format!("todo/{i}")).collect::<Vec<_>>()
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_a_400_naming_the_field() {
    let f = TestFleet::start().await;
    let alice = token(&f, "acme", "alice", &RW).await;
    let k = "/v1/memory/user/alice/k";
    let (s, e) = f
        .put("/v1/memory/global/alice/k", &alice, json!({"value": 1}))
        .await;
    assert_param(s, &e, 400, "scope");
    let big = "x".repeat(64 * 1024);
    let (s, e) = f.put(k, &alice, json!({"value": big})).await;
    assert_param(s, &e, 400, "value");
    let (s, e) = f.put(k, &alice, json!({})).await;
    assert_param(s, &e, 400, "value");
    for ttl in [-1, 0] {
        let (s, e) = f
            .put(k, &alice, json!({"value": 1, "ttl_seconds": ttl}))
            .await;
        assert_param(s, &e, 400, "ttl_seconds");
    }
    let (s, e) = f
        .put(k, &alice, json!({"value": 1, "ttl_seconds": "soon"}))
        .await;
    assert_param(s, &e, 400, "ttl_seconds");
    let (s, e) = f
        .put("/v1/memory/user/alice/a%00b", &alice, json!({"value": 1}))
        .await;
    assert_param(s, &e, 400, "key");
    let (s, e) = f.put(k, &alice, json!({"value": "a\u{0}b"})).await;
    assert_param(s, &e, 400, "value");
    let (s, e) = f.get("/v1/memory/user/alice?limit=1001", &alice).await;
    assert_param(s, &e, 400, "limit");
    let (s, e) = f.get("/v1/memory/user/alice?cursor=nonsense", &alice).await;
    assert_param(s, &e, 400, "cursor");
    let (s, e) = f
        .post(
            "/v1/memory/search",
            &alice,
            json!({"scope": "user", "scope_id": "alice", "query": "q", "top_k": 101}),
        )
        .await;
    assert_param(s, &e, 400, "top_k");
    let (s, e) = f
        .post(
            "/v1/memory/search",
            &alice,
            json!({"scope": "planet", "scope_id": "alice", "query": "q"}),
        )
        .await;
    assert_param(s, &e, 400, "scope");
    let (s, e) = f.put(k, &alice, json!({"value": "text"})).await;
    assert_eq!(s, 200, "{e}");
    let (s, e) = f.post(&format!("{k}/incr"), &alice, json!({"by": 1})).await;
    assert_eq!(s, 409, "{e}");
    f.stop().await;
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[tokio::test(flavor = "multi_thread")]
async fn search_returns_the_nearest_entries_first() {
    let f = TestFleet::start().await;
    let alice = token(&f, "acme", "alice", &RW).await;
    let texts = [
        "apple pie",
        "banana bread",
        "cherry tart",
        "date loaf",
        "elderberry jam",
        "fig roll",
    ];
    for (i, t) in texts.iter().enumerate() {
        let (s, e) = f
            .put(
                &format!("/v1/memory/user/alice/recipe{i}"),
                &alice,
                json!({"value": t, "embed": true}),
            )
            .await;
        assert_eq!((s, &e["embedded"]), (200, &json!(true)), "{e}");
    }
    // Not embedded: never a hit.
    let (s, _) = f
        .put(
            "/v1/memory/user/alice/plain",
            &alice,
            json!({"value": "cherry tart"}),
        )
        .await;
    assert_eq!(s, 200);

    // The expected order, from the same embeddings the router's mock gives anyone.
    let query = "cherry tart";
    let mut inputs: Vec<&str> = vec![query];
    inputs.extend(texts);
    let (s, emb) = f
        .post(
            "/v1/embeddings",
            &f.admin,
            json!({"model": "default", "input": inputs}),
        )
        .await;
    assert_eq!(s, 200, "{emb}");
    let vectors: Vec<Vec<f64>> = emb["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect();
    let mut want: Vec<(f64, String)> = texts
        .iter()
        .enumerate()
        .map(|(i, _)| (cosine(&vectors[0], &vectors[i + 1]), format!("recipe{i}")))
        .collect();
    want.sort_by(|a, b| b.0.total_cmp(&a.0));

    let (s, r) = f
        .post(
            "/v1/memory/search",
            &alice,
            json!({"scope": "user", "scope_id": "alice", "query": query, "top_k": 4}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["mode"], "exact");
    let hits = r["data"].as_array().unwrap();
    let got: Vec<&str> = hits.iter().map(|h| h["key"].as_str().unwrap()).collect();
    let expected: Vec<&str> = want.iter().take(4).map(|(_, k)| k.as_str()).collect();
    assert_eq!(got, expected);
    assert_eq!(got[0], "recipe2", "the identical text is the nearest");
    assert!(
        (hits[0]["score"].as_f64().unwrap() - 1.0).abs() < 1e-4,
        "{}",
        hits[0]
    );
    for (h, (score, _)) in hits.iter().zip(&want) {
        assert!(
            (h["score"].as_f64().unwrap() - score).abs() < 1e-4,
            "{h} vs {score}"
        );
        assert_eq!(
            h["value"].as_str(),
            texts.iter().find(|t| **t == h["value"]).copied()
        );
    }
    // Another user sees none of it.
    let bob = token(&f, "acme", "bob", &RW).await;
    let (s, _) = f
        .post(
            "/v1/memory/search",
            &bob,
            json!({"scope": "user", "scope_id": "alice", "query": query}),
        )
        .await;
    assert_eq!(s, 404);
    f.stop().await;
}
