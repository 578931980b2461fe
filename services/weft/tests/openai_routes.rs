//! The OpenAI-compatible routes of a running fleet: answers, streams, and every error shape.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::TestFleet;
use futures::StreamExt as _;
use serde_json::{Value, json};

fn chat(model: &str, content: Value) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": content}]})
}

#[tokio::test]
async fn a_completion_answers_with_usage_and_a_request_id() {
    let f = TestFleet::start().await;
    let r = f
        .http
        .post(format!("{}/v1/chat/completions", f.url))
        .bearer_auth(&f.admin)
        .json(&chat("mock-1", json!([{"type": "text", "text": "hi"}])))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-request-id"));
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "echo: hi");
    assert!(body["usage"]["total_tokens"].as_u64().unwrap() > 0);

    // A caller's own request id is kept, on a success and on an error alike; without one, each
    // request gets a fresh UUID.
    for (model, status) in [("mock-1", 200), ("no-such-model", 404)] {
        let r = f
            .http
            .post(format!("{}/v1/chat/completions", f.url))
            .bearer_auth(&f.admin)
            .header("x-request-id", "caller-trace-42")
            .json(&chat(model, json!("hi")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{model}");
        assert_eq!(r.headers()["x-request-id"], "caller-trace-42", "{model}");
    }
    let ids: Vec<String> =
        futures::future::join_all((0..2).map(|_| f.http.get(format!("{}/healthz", f.url)).send()))
            .await
            .into_iter()
            .map(|r| {
                r.unwrap().headers()["x-request-id"]
                    .to_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
    assert_ne!(ids[0], ids[1]);
    assert!(uuid::Uuid::parse_str(&ids[0]).is_ok(), "{}", ids[0]);
}

#[tokio::test]
async fn a_stream_ends_with_one_usage_chunk_then_done() {
    let f = TestFleet::start().await;
    let mut body = chat("default", json!("one two three"));
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = f
        .http
        .post(format!("{}/v1/chat/completions", f.url))
        .bearer_auth(&f.admin)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    use eventsource_stream::Eventsource as _;
    let events: Vec<String> = r
        .bytes_stream()
        .eventsource()
        .map(|e| e.unwrap().data)
        .collect()
        .await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let with_usage: Vec<&Value> = chunks.iter().filter(|c| !c["usage"].is_null()).collect();
    assert_eq!(with_usage.len(), 1);
    assert_eq!(with_usage[0], chunks.last().unwrap());
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "echo: one two three");
}

#[tokio::test]
async fn bad_input_gets_a_4xx_in_openai_shape_naming_the_field() {
    let f = TestFleet::start_with(|c| c.gateway.max_body_bytes = 2048).await;
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            json!({"model": "mock-1", "messages": "nope"}),
            400,
            "messages",
        ),
        (json!({"messages": []}), 400, "model"),
        (
            json!({"model": "mock-1", "messages": [{"role": "robot", "content": "x"}]}),
            400,
            "messages[0]",
        ),
        (json!({"model": "mock-1", "messages": []}), 400, "messages"),
        (
            json!({"model": "mock-1", "messages": [{"role": "user", "content": "x"}], "temperature": 9}),
            400,
            "temperature",
        ),
        (
            json!({"model": "mock-1", "messages": [{"role": "user", "content": "x"}], "n": 3}),
            400,
            "n",
        ),
        (
            json!({"model": "mock-1", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval"}]}),
            400,
            "tools[0]",
        ),
        (chat("gpt-nope", json!("x")), 404, "gpt-nope"),
    ];
    for (body, status, mention) in cases {
        let (s, err) = f.post("/v1/chat/completions", &f.admin, body.clone()).await;
        assert_eq!(s, status, "{body} -> {err}");
        let e = &err["error"];
        assert!(
            e["message"].as_str().unwrap().contains(mention),
            "{body} -> {err}"
        );
        assert!(e["type"].is_string() && e["code"].is_string(), "{err}");
        assert!(e.as_object().unwrap().contains_key("param"), "{err}");
    }
    let url = format!("{}/v1/chat/completions", f.url);
    let big = chat("mock-1", json!("x".repeat(4096)));
    let r = f
        .http
        .post(&url)
        .bearer_auth(&f.admin)
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let r = f
        .http
        .post(&url)
        .bearer_auth(&f.admin)
        .header("content-type", "text/plain")
        .body("hi")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let r = f
        .http
        .post(&url)
        .bearer_auth(&f.admin)
        .header("content-type", "application/json")
        .body("{\"model\":")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
}

#[tokio::test]
async fn missing_or_bad_tokens_are_401_in_openai_shape() {
    let f = TestFleet::start().await;
    for token in ["", "wft_not-a-real-token", "sk-openai-style"] {
        let (s, body) = f
            .post("/v1/chat/completions", token, chat("mock-1", json!("x")))
            .await;
        assert_eq!(s, 401, "{token:?}");
        assert_eq!(body["error"]["type"], "authentication_error");
    }
    let (s, body) = f.get("/v1/models", "wft_nope").await;
    assert_eq!(
        (s, body["error"]["code"].as_str()),
        (401, Some("unauthenticated"))
    );
}

#[tokio::test]
async fn a_tool_call_round_trip_reaches_a_final_answer() {
    let f = TestFleet::start().await;
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    let first = json!({"model": "mock-1", "messages": [{"role": "user", "content": "weather?"}], "tools": tools});
    let (s, a) = f.post("/v1/chat/completions", &f.admin, first).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["choices"][0]["finish_reason"], "tool_calls");
    let call = &a["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let second = json!({"model": "mock-1", "tools": tools, "messages": [
        {"role": "user", "content": "weather?"},
        a["choices"][0]["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
    ]});
    let (s, b) = f.post("/v1/chat/completions", &f.admin, second).await;
    assert_eq!(s, 200, "{b}");
    assert!(
        b["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("sunny")
    );
}

#[tokio::test]
async fn embeddings_and_models_answer_in_openai_shape() {
    let f = TestFleet::start().await;
    let (s, e) = f
        .post(
            "/v1/embeddings",
            &f.admin,
            json!({"model": "mock-1", "input": ["a", "b"], "dimensions": 8}),
        )
        .await;
    assert_eq!(s, 200, "{e}");
    assert_eq!(e["data"].as_array().unwrap().len(), 2);
    assert_eq!(e["data"][1]["embedding"].as_array().unwrap().len(), 8);
    let (_, b) = f
        .post(
            "/v1/embeddings",
            &f.admin,
            json!({"model": "mock-1", "input": "a", "encoding_format": "base64"}),
        )
        .await;
    assert!(b["data"][0]["embedding"].is_string());
    let (s, m) = f.get("/v1/models", &f.admin).await;
    assert_eq!(s, 200);
    let ids: Vec<&str> = m["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"mock-1") && ids.contains(&"default") && ids.contains(&"tier:fast"),
        "{ids:?}"
    );
}

#[tokio::test]
async fn a_token_without_llm_call_cannot_call_models() {
    let f = TestFleet::start().await;
    let (s, t) = f.mint(&f.admin, "acme", &["runs:read"]).await;
    assert_eq!(s, 201, "{t}");
    let (s, body) = f
        .post(
            "/v1/chat/completions",
            t["token"].as_str().unwrap(),
            chat("mock-1", json!("x")),
        )
        .await;
    assert_eq!(s, 403);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("llm:call")
    );
    let (s, _) = f
        .post(
            "/v1/chat/completions",
            t["token"].as_str().unwrap(),
            json!({"messages": "bad"}),
        )
        .await;
    assert_eq!(s, 403, "the scope is checked before the body");
}

#[tokio::test]
async fn a_router_that_is_down_gives_503_with_a_clear_message() {
    let db = weft_testkit::TestDb::new().await;
    let config = common::config(&db);
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let jwt = weft::fleet::internal_jwt(&config);
    let router = weft_gateway::router_channel(&format!("http://{free}")).unwrap();
    let state = weft_gateway::connect(&config, jwt, router.clone(), router)
        .await
        .unwrap();
    let (_, token) = weft_gateway::tokens::create_token(
        &state.tokens,
        None,
        weft_gateway::tokens::CreateTokenInput {
            name: "t".into(),
            tenant: weft_core::TenantId::parse("acme").unwrap(),
            subject: "s".into(),
            scopes: weft_core::Scopes::parse_list("llm:call").unwrap(),
            expires_at: None,
            bootstrap: false,
        },
    )
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(weft_gateway::serve(listener, state, 1 << 20, stop.clone()));
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(&token)
        .json(&chat("mock-1", json!("x")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("router is unavailable"),
        "{body}"
    );
    let ready = reqwest::get(format!("{url}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 503);
    stop.cancel();
}

#[tokio::test]
async fn the_openapi_document_lists_every_route() {
    let f = TestFleet::start().await;
    let doc: Value = reqwest::get(format!("{}/v1/openapi.json", f.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in [
        "/v1/chat/completions",
        "/v1/embeddings",
        "/v1/models",
        "/v1/me",
        "/v1/tokens",
        "/v1/tokens/{id}",
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/openapi.json",
        "/v1/runs",
        "/v1/runs/{id}",
        "/v1/runs/{id}/events",
        "/v1/runs/{id}/stream",
        "/v1/runs/{id}/cancel",
        "/v1/runs/{id}/input",
        "/v1/runs/{id}/interrupts/{interrupt_id}",
        "/v1/agents/{name}",
    ] {
        assert!(
            doc["paths"].get(path).is_some(),
            "{path} missing from the OpenAPI document"
        );
    }
    let r = reqwest::get(format!("{}/v1/nope", f.url)).await.unwrap();
    assert_eq!(r.status(), 404);
    let metrics = reqwest::get(format!("{}/metrics", f.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("weft_gateway_requests_total"), "{metrics}");
}

#[tokio::test]
async fn the_tier_header_routes_chat_and_embeddings() {
    let f = TestFleet::start().await;
    for path in ["/v1/chat/completions", "/v1/embeddings"] {
        let body = json!({"model": "whatever", "input": "a", "messages": [{"role": "user", "content": "x"}]});
        let send = |tier: &'static str| {
            f.http
                .post(format!("{}{path}", f.url))
                .bearer_auth(&f.admin)
                .header("x-weft-tier", tier)
                .json(&body)
                .send()
        };
        assert_eq!(send("fast").await.unwrap().status(), 200, "{path}");
        assert_eq!(send("nope").await.unwrap().status(), 404, "{path}");
    }
}
