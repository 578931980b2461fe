//! Tokens and tenants: who may mint what, tenant isolation, and revocation.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::TestFleet;
use serde_json::json;

#[tokio::test]
async fn me_reports_the_principal_of_the_token() {
    let f = TestFleet::start().await;
    let (s, me) = f.get("/v1/me", &f.admin).await;
    assert_eq!(s, 200);
    assert_eq!(
        me,
        json!({"tenant": "default", "subject": "bootstrap-admin", "scopes": ["admin"]})
    );
}

#[tokio::test]
async fn tenant_admins_mint_only_inside_their_tenant_and_scopes() {
    let f = TestFleet::start().await;
    let (s, ta) = f.mint(&f.admin, "acme", &["tenant:admin"]).await;
    assert_eq!(s, 201, "{ta}");
    let ta = ta["token"].as_str().unwrap().to_owned();
    assert!(ta.starts_with("wft_"));

    let (s, t) = f.mint(&ta, "acme", &["llm:call", "runs:create"]).await;
    assert_eq!(s, 201, "{t}");
    assert_eq!(t["tenant"], "acme");

    let (s, e) = f.mint(&ta, "other", &["llm:call"]).await;
    assert_eq!(s, 403, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("own tenant")
    );

    let (s, e) = f.mint(&ta, "acme", &["admin"]).await;
    assert_eq!(s, 403, "{e}");

    let user = t["token"].as_str().unwrap();
    let (s, _) = f.mint(user, "acme", &["llm:call"]).await;
    assert_eq!(s, 403, "a plain token cannot mint");

    let (s, e) = f.mint(&f.admin, "acme", &["bogus"]).await;
    assert_eq!(s, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("bogus"));
}

#[tokio::test]
async fn tenants_do_not_see_each_others_tokens() {
    let f = TestFleet::start().await;
    let (_, a) = f.mint(&f.admin, "acme", &["tenant:admin"]).await;
    let (_, b) = f.mint(&f.admin, "beta", &["tenant:admin"]).await;
    let (_, b_user) = f
        .mint(b["token"].as_str().unwrap(), "beta", &["llm:call"])
        .await;
    let a_token = a["token"].as_str().unwrap();

    let (s, list) = f.get("/v1/tokens", a_token).await;
    assert_eq!(s, 200);
    let tenants: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tenant"].as_str().unwrap())
        .collect();
    assert!(
        !tenants.is_empty() && tenants.iter().all(|t| *t == "acme"),
        "{tenants:?}"
    );
    assert!(
        list.to_string()
            .find("wft_")
            .is_none_or(|_| !list.to_string().contains(a_token)),
        "secrets are never listed"
    );

    let other = b_user["id"].as_str().unwrap();
    let r = f
        .http
        .delete(format!("{}/v1/tokens/{other}", f.url))
        .bearer_auth(a_token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        404,
        "another tenant's token is a 404, not a 403"
    );
    let (s, _) = f
        .post(
            "/v1/chat/completions",
            b_user["token"].as_str().unwrap(),
            json!({"model": "mock-1", "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(s, 200, "the token survived the cross-tenant revoke attempt");
}

#[tokio::test]
async fn a_revoked_token_is_refused_here_at_once_and_on_another_replica_within_the_ttl() {
    let f = TestFleet::start_with(|c| c.gateway.token_cache_ttl_ms = 300).await;
    // A second replica on the same database, with a warm cache of its own.
    let mut c2 = common::config(&f.db);
    c2.gateway.token_cache_ttl_ms = 300;
    let replica = weft::Fleet::start(c2).await.unwrap();
    let (_, t) = f.mint(&f.admin, "acme", &["llm:call"]).await;
    let token = t["token"].as_str().unwrap();
    let me_on = |url: String| {
        let http = f.http.clone();
        let token = token.to_owned();
        async move {
            http.get(format!("{url}/v1/me"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(me_on(f.url.clone()).await, 200);
    assert_eq!(me_on(replica.url()).await, 200);

    let r = f
        .http
        .delete(format!("{}/v1/tokens/{}", f.url, t["id"].as_str().unwrap()))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        me_on(f.url.clone()).await,
        401,
        "the replica that revoked forgets at once"
    );

    // The other replica notices when its cache entry lapses; wait on that, bounded.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if me_on(replica.url()).await == 401 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the other replica kept honouring a revoked token"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn expired_tokens_and_past_expiry_are_refused() {
    let f = TestFleet::start().await;
    let (s, e) = f
        .post("/v1/tokens", &f.admin, json!({"name": "x", "subject": "s", "scopes": ["llm:call"], "expires_at": "2001-01-01T00:00:00Z"}))
        .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "expires_at");
    let (s, e) = f
        .post(
            "/v1/tokens",
            &f.admin,
            json!({"name": "x", "subject": "s", "scopes": ["llm:call"], "colour": "red"}),
        )
        .await;
    assert_eq!(s, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("colour"));
}

#[tokio::test]
async fn the_bootstrap_token_is_minted_once_and_read_back_later() {
    let f = TestFleet::start().await;
    let again = weft::Fleet::start(common::config(&f.db)).await.unwrap();
    assert!(!again.minted);
    assert_eq!(again.admin_token.as_deref(), Some(f.admin.as_str()));
}

#[tokio::test]
async fn bad_list_queries_get_weft_errors() {
    let f = TestFleet::start().await;
    let (s, e) = f.get("/v1/tokens?tenant=Not%20A%20Slug", &f.admin).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["code"], "invalid_request");
    let (s, e) = f.get("/v1/tokens?colour=red", &f.admin).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "colour");
    let (s, _) = f.get("/v1/tokens?tenant=default", &f.admin).await;
    assert_eq!(s, 200);
}
