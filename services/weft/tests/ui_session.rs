//! The web UI's session: a token traded for an HttpOnly, `SameSite=Strict` cookie, acting as the
//! token's principal on the native routes, with a CSRF token for state-changing calls; ended by
//! logout, by expiry, and by revoking its token. A session of tenant B sees nothing of tenant A.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::TestFleet;
use reqwest::{Method, header};
use serde_json::{Value, json};

struct Answer {
    status: u16,
    json: Value,
    set_cookie: Option<String>,
}

/// One request with the session cookie `cookie` (if any), the CSRF token `csrf` (if any) and
/// extra headers.
async fn call(
    f: &TestFleet,
    method: Method,
    path: &str,
    cookie: Option<&str>,
    csrf: Option<&str>,
    body: Option<Value>,
    extra: &[(&str, &str)],
) -> Answer {
    let mut req = f.http.request(method, format!("{}{path}", f.url));
    if let Some(c) = cookie {
        req = req.header(header::COOKIE, format!("weft_session={c}"));
    }
    if let Some(t) = csrf {
        req = req.header("x-csrf-token", t);
    }
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let set_cookie = r
        .headers()
        .get(header::SET_COOKIE)
        .map(|v| v.to_str().unwrap().to_owned());
    Answer {
        status,
        set_cookie,
        json: r.json().await.unwrap_or(Value::Null),
    }
}

/// `POST /ui/api/session` with `body`, the session cookie `cookie` (if any) and extra headers.
async fn post_login(
    f: &TestFleet,
    cookie: Option<&str>,
    body: Value,
    extra: &[(&str, &str)],
) -> Answer {
    call(
        f,
        Method::POST,
        "/ui/api/session",
        cookie,
        None,
        Some(body),
        extra,
    )
    .await
}

/// Logs in with `token`; the session cookie's value and the CSRF token.
async fn login(f: &TestFleet, token: &str) -> (String, String) {
    let a = post_login(f, None, json!({"token": token}), &[]).await;
    assert_eq!(a.status, 201, "{}", a.json);
    let set = a.set_cookie.expect("a Set-Cookie");
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set.contains(attr), "{set} lacks {attr}");
    }
    assert!(!set.contains("Secure"), "plain http is not Secure: {set}");
    assert!(!set.contains(token), "the cookie is not the token");
    let value = set
        .strip_prefix("weft_session=")
        .and_then(|s| s.split(';').next())
        .unwrap()
        .to_owned();
    assert!(value.starts_with("wfs_"), "{value}");
    let csrf = a.json["csrf_token"].as_str().unwrap().to_owned();
    assert!(!a.json.to_string().contains(token), "{}", a.json);
    (value, csrf)
}

#[tokio::test]
async fn a_session_acts_as_its_token_with_csrf_and_ends_on_logout_or_revocation() {
    let f = TestFleet::start().await;
    let (s, minted) = f
        .mint(&f.admin, "acme", &["tenant:admin", "runs:create"])
        .await;
    assert_eq!(s, 201, "{minted}");
    let token = minted["token"].as_str().unwrap().to_owned();
    let token_id = minted["id"].as_str().unwrap().to_owned();

    let (cookie, csrf) = login(&f, &token).await;

    // The session says who it is, and the native routes take the cookie in place of a token.
    let me = call(
        &f,
        Method::GET,
        "/ui/api/session",
        Some(&cookie),
        None,
        None,
        &[],
    )
    .await;
    assert_eq!(me.status, 200, "{}", me.json);
    assert_eq!(me.json["tenant"], "acme");
    assert_eq!(me.json["csrf_token"], csrf.as_str());
    let me = call(&f, Method::GET, "/v1/me", Some(&cookie), None, None, &[]).await;
    assert_eq!((me.status, &me.json["tenant"]), (200, &json!("acme")));

    // A state-changing call needs the CSRF token: without it, or with another, 403.
    let agent = json!({"model": "mock-1", "system_prompt": "hi"});
    for bad in [None, Some("not-the-token")] {
        let a = call(
            &f,
            Method::PUT,
            "/v1/agents/ui-made",
            Some(&cookie),
            bad,
            Some(agent.clone()),
            &[],
        )
        .await;
        assert_eq!(a.status, 403, "{}", a.json);
        assert!(
            a.json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("x-csrf-token"),
            "{}",
            a.json
        );
    }
    let a = call(
        &f,
        Method::PUT,
        "/v1/agents/ui-made",
        Some(&cookie),
        Some(&csrf),
        Some(agent),
        &[],
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.json);

    // A request that names a token acts as that token, never as the session; a malformed
    // `Authorization` is refused rather than replaced by the session.
    let (_, other) = f.mint(&f.admin, "other", &["runs:read"]).await;
    let other = other["token"].as_str().unwrap().to_owned();
    let bearer = format!("Bearer {other}");
    let a = call(
        &f,
        Method::GET,
        "/v1/me",
        Some(&cookie),
        None,
        None,
        &[("authorization", bearer.as_str())],
    )
    .await;
    assert_eq!((a.status, &a.json["tenant"]), (200, &json!("other")));
    for bad in ["Basic dXNlcjpwYXNz", "Bearer "] {
        let a = call(
            &f,
            Method::GET,
            "/v1/me",
            Some(&cookie),
            None,
            None,
            &[("authorization", bad)],
        )
        .await;
        assert_eq!(a.status, 401, "{bad}: {}", a.json);
    }

    // The OpenAI and Anthropic doors take tokens only.
    let a = call(
        &f,
        Method::GET,
        "/v1/models",
        Some(&cookie),
        None,
        None,
        &[],
    )
    .await;
    assert_eq!(a.status, 401, "{}", a.json);

    // Logging out needs the CSRF token, ends the session and clears the cookie.
    let a = call(
        &f,
        Method::DELETE,
        "/ui/api/session",
        Some(&cookie),
        None,
        None,
        &[],
    )
    .await;
    assert_eq!(a.status, 403, "{}", a.json);
    let a = call(
        &f,
        Method::DELETE,
        "/ui/api/session",
        Some(&cookie),
        Some(&csrf),
        None,
        &[],
    )
    .await;
    assert_eq!(a.status, 204);
    assert!(a.set_cookie.unwrap().contains("Max-Age=0"));
    for path in ["/ui/api/session", "/v1/me"] {
        let a = call(&f, Method::GET, path, Some(&cookie), None, None, &[]).await;
        assert_eq!(a.status, 401, "{path}: {}", a.json);
    }

    // Logging in again from a browser that holds a session ends that session.
    let (first, _) = login(&f, &token).await;
    let a = post_login(&f, Some(&first), json!({"token": token}), &[]).await;
    assert_eq!(a.status, 201, "{}", a.json);
    let a = call(&f, Method::GET, "/v1/me", Some(&first), None, None, &[]).await;
    assert_eq!(
        a.status, 401,
        "the replaced session still works: {}",
        a.json
    );

    // Revoking the token ends its other sessions at once.
    let (cookie, _) = login(&f, &token).await;
    let a = call(&f, Method::GET, "/v1/me", Some(&cookie), None, None, &[]).await;
    assert_eq!(a.status, 200);
    let (s, r) = f
        .send(
            Method::DELETE,
            &format!("/v1/tokens/{token_id}"),
            &f.admin,
            None,
        )
        .await;
    assert!((200..300).contains(&s), "{s} {r}");
    for path in ["/ui/api/session", "/v1/me"] {
        let a = call(&f, Method::GET, path, Some(&cookie), None, None, &[]).await;
        assert_eq!(a.status, 401, "{path}: {}", a.json);
    }
    // And the revoked token cannot log in again.
    let a = post_login(&f, None, json!({"token": token}), &[]).await;
    assert_eq!(a.status, 401, "{}", a.json);
}

#[tokio::test]
async fn logins_from_other_origins_forged_cookies_and_ended_sessions_are_refused() {
    let f = TestFleet::start().await;
    let host = f.url.trim_start_matches("http://").to_owned();

    // A page of another origin cannot open a session; this host's own page can.
    let body = json!({"token": f.admin});
    let a = post_login(
        &f,
        None,
        body.clone(),
        &[("origin", "https://evil.example")],
    )
    .await;
    assert_eq!(a.status, 403, "{}", a.json);
    assert!(a.set_cookie.is_none());
    for bad in ["null", "http://127.0.0.1:1", "file://x"] {
        let a = post_login(&f, None, body.clone(), &[("origin", bad)]).await;
        assert_eq!(a.status, 403, "Origin {bad}: {}", a.json);
    }
    let own = format!("http://{host}");
    let a = post_login(&f, None, body, &[("origin", own.as_str())]).await;
    assert_eq!(a.status, 201, "{}", a.json);

    // A body that is not JSON, or not a token, is refused with a hint.
    let a = post_login(&f, None, json!({"token": "hunter2"}), &[]).await;
    assert_eq!(a.status, 401, "{}", a.json);
    assert!(
        a.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("wft_")
    );

    // Cookies that were never issued get 401, alike on the session route and the API.
    for forged in ["wfs_AAAA", "wft_not-a-session", ""] {
        for path in ["/ui/api/session", "/v1/me"] {
            let a = call(&f, Method::GET, path, Some(forged), None, None, &[]).await;
            assert_eq!(a.status, 401, "{forged:?} {path}: {}", a.json);
        }
    }

    // An expired session is refused.
    let (cookie, _) = login(&f, &f.admin).await;
    let pool = sqlx::PgPool::connect(&f.db.url).await.unwrap();
    sqlx::query("UPDATE ui_sessions SET expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    let a = call(&f, Method::GET, "/v1/me", Some(&cookie), None, None, &[]).await;
    assert_eq!(a.status, 401, "{}", a.json);

    // Secure behind a TLS terminator.
    let a = post_login(
        &f,
        None,
        json!({"token": f.admin}),
        &[("x-forwarded-proto", "https")],
    )
    .await;
    assert!(a.set_cookie.unwrap().contains("; Secure"));
}

#[tokio::test]
async fn a_session_of_tenant_b_sees_nothing_of_tenant_a() {
    let f = TestFleet::start().await;
    let (_, a_admin) = f
        .mint(&f.admin, "acme", &["tenant:admin", "runs:create"])
        .await;
    let a_admin = a_admin["token"].as_str().unwrap().to_owned();
    let (_, b_admin) = f
        .mint(&f.admin, "beta", &["tenant:admin", "runs:create"])
        .await;
    let b_admin = b_admin["token"].as_str().unwrap().to_owned();

    common::put_agent(
        &f,
        &a_admin,
        "acme-secret-agent",
        json!({"model": "mock-1", "system_prompt": "acme only"}),
    )
    .await;
    let (s, run) = f
        .post(
            "/v1/runs",
            &a_admin,
            json!({"agent": "acme-secret-agent", "input": "acme-secret-input"}),
        )
        .await;
    assert_eq!(s, 201, "{run}");
    let run_id = run["run_id"].as_str().unwrap().to_owned();

    let (cookie, _) = login(&f, &b_admin).await;
    for path in [
        "/v1/runs".to_owned(),
        "/v1/agents".to_owned(),
        "/v1/usage?group_by=subject".to_owned(),
        "/v1/tokens".to_owned(),
        format!("/v1/runs/{run_id}"),
        format!("/v1/runs/{run_id}/events"),
        "/v1/agents/acme-secret-agent".to_owned(),
    ] {
        let a = call(&f, Method::GET, &path, Some(&cookie), None, None, &[]).await;
        let text = a.json.to_string();
        // A's resources by name are not found (the message may echo the name asked for);
        // listings answer, without a trace of A.
        if path.contains(&run_id) || path.contains("acme-secret") {
            assert_eq!(a.status, 404, "{path}: {text}");
            continue;
        }
        assert_eq!(a.status, 200, "{path}: {text}");
        for secret in ["acme", &run_id] {
            assert!(!text.contains(secret), "{path} shows {secret}: {text}");
        }
    }
    // While tenant A's own session sees its run.
    let (cookie, _) = login(&f, &a_admin).await;
    let a = call(&f, Method::GET, "/v1/runs", Some(&cookie), None, None, &[]).await;
    assert!(a.json.to_string().contains(&run_id), "{}", a.json);
}
