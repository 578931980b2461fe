//! Quotas and limits through the OpenAI front door: exact under concurrency, announced in
//! `x-ratelimit-*` headers (streams included), 429 with `Retry-After` when exhausted.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::TestFleet;
use futures::StreamExt as _;
use serde_json::{Value, json};

/// Token budgets are per fixed minute window. A test that counts what one window let through
/// starts early in a window, so the whole burst lands in it.
async fn wait_for_fresh_minute() {
    let into = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 60;
    if into > 40 {
        tokio::time::sleep(Duration::from_secs(61 - into)).await;
    }
}

async fn llm_token(f: &TestFleet, tenant: &str) -> String {
    let (s, t) = f.mint(&f.admin, tenant, &["llm:call"]).await;
    assert_eq!(s, 201, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn two_hundred_parallel_requests_never_overshoot_a_token_budget() {
    const BUDGET: u64 = 600;
    let f = TestFleet::start_with(|c| {
        c.router.limits.tenant.tokens_per_minute = Some(BUDGET);
    })
    .await;
    let token = llm_token(&f, "acme").await;
    wait_for_fresh_minute().await;
    let body = json!({
        "model": "mock-1",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "count the tokens of this short request please"}],
    });
    let calls: Vec<_> = (0..200)
        .map(|_| {
            let http = f.http.clone();
            let url = format!("{}/v1/chat/completions", f.url);
            let (token, body) = (token.clone(), body.clone());
            tokio::spawn(async move {
                let r = http
                    .post(url)
                    .bearer_auth(token)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let retry_after = r
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_owned());
                let v: Value = r.json().await.unwrap();
                (status, retry_after, v)
            })
        })
        .collect();
    let (mut ok, mut limited, mut served) = (0u64, 0u64, 0u64);
    for c in calls {
        let (status, retry_after, v) = c.await.unwrap();
        match status {
            200 => {
                ok += 1;
                served += v["usage"]["total_tokens"].as_u64().unwrap();
            }
            429 => {
                limited += 1;
                assert_eq!(v["error"]["code"], "rate_limited", "{v}");
                let secs: u64 = retry_after
                    .expect("429 carries Retry-After")
                    .parse()
                    .unwrap();
                assert!((1..=65).contains(&secs), "Retry-After {secs}");
            }
            other => panic!("unexpected status {other}: {v}"),
        }
    }
    // One request reserves its estimated input (46 bytes / 3 + 4 = 20) plus max_tokens (16).
    let reservation = 36;
    assert!(ok > 0 && limited > 0, "ok {ok}, limited {limited}");
    assert!(
        served <= BUDGET + reservation,
        "served {served} tokens against a budget of {BUDGET}"
    );
    // Reconciling gives back what a call reserved and did not use, so more calls fit than
    // BUDGET / reservation; the tokens served are what is bounded.
    eprintln!("admitted {ok}, limited {limited}, served {served} of {BUDGET} tokens");
    f.stop().await;
}

#[tokio::test]
async fn streamed_responses_carry_rate_limit_headers_and_a_429_says_when_to_retry() {
    let f = TestFleet::start_with(|c| {
        c.router.limits.subject.requests_per_minute = Some(3);
        c.router.limits.tenant.tokens_per_minute = Some(100_000);
    })
    .await;
    let token = llm_token(&f, "acme").await;
    wait_for_fresh_minute().await;
    let call = |stream: bool| {
        f.http
            .post(format!("{}/v1/chat/completions", f.url))
            .bearer_auth(&token)
            .json(&json!({
                "model": "mock-1",
                "stream": stream,
                "max_tokens": 32,
                "messages": [{"role": "user", "content": "hello"}],
            }))
            .send()
    };
    let r = call(true).await.unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(
        h.get("content-type").unwrap().to_str().unwrap(),
        "text/event-stream"
    );
    let header = |name: &str| {
        h.get(name)
            .unwrap_or_else(|| panic!("{name} missing from {h:?}"))
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(header("x-ratelimit-limit-requests"), 3);
    assert_eq!(header("x-ratelimit-remaining-requests"), 2);
    assert_eq!(header("x-ratelimit-limit-tokens"), 100_000);
    assert!(header("x-ratelimit-remaining-tokens") < 100_000);
    // The stream itself is whole.
    let body = r.text().await.unwrap();
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");

    let r = call(false).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers().get("x-ratelimit-remaining-requests").unwrap(),
        "1"
    );
    assert_eq!(call(false).await.unwrap().status(), 200);
    let r = call(true).await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_some());
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("requests_per_minute"),
        "{v}"
    );
    // Another tenant's subject has its own budget.
    let other = llm_token(&f, "other").await;
    let r = f
        .http
        .post(format!("{}/v1/chat/completions", f.url))
        .bearer_auth(&other)
        .json(&json!({"model": "mock-1", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    f.stop().await;
}

#[tokio::test]
async fn a_call_larger_than_the_budget_is_a_400_that_says_what_to_lower() {
    let f = TestFleet::start_with(|c| {
        c.router.limits.token.tokens_per_minute = Some(50);
    })
    .await;
    let token = llm_token(&f, "acme").await;
    let (s, v) = f
        .post(
            "/v1/chat/completions",
            &token,
            json!({"model": "mock-1", "max_tokens": 500, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["param"], "max_tokens");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("lower max_tokens")
    );
    f.stop().await;
}

#[tokio::test]
async fn tenant_overlays_replace_tiers_for_that_tenant_only() {
    let f = TestFleet::start_with(|c| {
        let mut models = std::collections::BTreeMap::new();
        models.insert("big".to_owned(), weft_config::MockModelConfig::default());
        c.router.providers.insert(
            "premium".into(),
            weft_config::ProviderConfig::Mock(weft_config::MockProviderConfig { models }),
        );
        c.router.tenants.insert(
            "acme".into(),
            weft_config::TenantRouting {
                tiers: [("fast".to_owned(), vec!["premium/big".to_owned()])].into(),
                ..Default::default()
            },
        );
    })
    .await;
    let acme = llm_token(&f, "acme").await;
    let other = llm_token(&f, "other").await;
    for (token, want) in [(&acme, "big"), (&other, "mock-1")] {
        let r = f
            .http
            .post(format!("{}/v1/chat/completions", f.url))
            .bearer_auth(token)
            .json(&json!({"model": "tier:fast", "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut frames = r.bytes_stream();
        let first = frames.next().await.unwrap().unwrap();
        let text = String::from_utf8_lossy(&first);
        assert!(text.contains(&format!("\"model\":\"{want}\"")), "{text}");
    }
    f.stop().await;
}

#[tokio::test]
async fn a_provider_concurrency_cap_holds_and_frees_its_slot() {
    let up = weft_testkit::FakeUpstream::start().await;
    up.push(weft_testkit::Behavior::Stall);
    up.set_default(weft_testkit::Behavior::Echo);
    let base = up.base_url.clone();
    let f = TestFleet::start_with(move |c| {
        c.router.providers.insert(
            "capped".into(),
            weft_config::ProviderConfig::Openai(weft_config::HttpProviderConfig {
                models: vec!["m".into()],
                max_concurrency: Some(1),
                max_retries: 0,
                first_byte_timeout_secs: 3,
                ..weft_config::HttpProviderConfig::new(base)
            }),
        );
    })
    .await;
    let token = llm_token(&f, "acme").await;
    let body = json!({"model": "capped/m", "messages": [{"role": "user", "content": "hi"}]});
    // The first call holds the only slot while its upstream stalls.
    let first = {
        let (http, url, token, body) = (
            f.http.clone(),
            format!("{}/v1/chat/completions", f.url),
            token.clone(),
            body.clone(),
        );
        tokio::spawn(async move {
            http.post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while up.calls() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the first call never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (s, v) = f.post("/v1/chat/completions", &token, body.clone()).await;
    assert_eq!(s, 429, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("concurrency cap"),
        "{v}"
    );
    assert_eq!(up.calls(), 1, "the capped call never reached the upstream");
    // The stalled call times out and gives its slot back; the next call gets through.
    assert_eq!(first.await.unwrap(), 504);
    let (s, v) = f.post("/v1/chat/completions", &token, body).await;
    assert_eq!(s, 200, "{v}");
    f.stop().await;
}

#[tokio::test]
async fn embeddings_count_against_limits_and_carry_the_headers() {
    let f = TestFleet::start_with(|c| {
        c.router.limits.tenant.requests_per_minute = Some(2);
        c.router.limits.tenant.tokens_per_minute = Some(1000);
    })
    .await;
    let token = llm_token(&f, "acme").await;
    wait_for_fresh_minute().await;
    let embed = || {
        f.http
            .post(format!("{}/v1/embeddings", f.url))
            .bearer_auth(&token)
            .json(&json!({"model": "mock-1", "input": ["a short text"]}))
            .send()
    };
    let r = embed().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers().get("x-ratelimit-limit-requests").unwrap(), "2");
    assert_eq!(
        r.headers().get("x-ratelimit-remaining-requests").unwrap(),
        "1"
    );
    assert_eq!(r.headers().get("x-ratelimit-limit-tokens").unwrap(), "1000");
    assert_eq!(embed().await.unwrap().status(), 200);
    let r = embed().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_some());
    f.stop().await;
}
