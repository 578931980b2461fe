//! The block-based front doors of a running fleet, against the embedded `mock` provider: the
//! Anthropic-compatible `/v1/messages` (answers, Anthropic's SSE events, tool use, its error
//! shape, `x-api-key`) and the native `/v1/llm/chat` (answers, its SSE events, tool use, strict
//! fields, scope).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::TestFleet;
use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use serde_json::{Value, json};

const WEATHER: &str = "get_weather";

fn anthropic_tools() -> Value {
    json!([{"name": WEATHER, "description": "weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}])
}

fn native_tools() -> Value {
    json!([{"name": WEATHER, "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])
}

/// A `#mock` script making two parallel tool calls on the first turn.
fn two_calls_script() -> String {
    let script = json!({"turns": [[
        {"name": WEATHER, "input": {"city": "Paris"}},
        {"name": "get_time", "input": {"tz": "Europe/Paris"}},
    ]]});
    format!("#mock {script}")
}

/// POSTs with `x-api-key` (as Anthropic's SDKs do) and returns status, headers and body.
async fn post_api_key(
    f: &TestFleet,
    path: &str,
    key: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = f
        .http
        .post(format!("{}{path}", f.url))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

/// The SSE events of a streamed answer, as (event name, JSON data).
async fn events(f: &TestFleet, path: &str, body: &Value) -> Vec<(String, Value)> {
    let r = f
        .http
        .post(format!("{}{path}", f.url))
        .bearer_auth(&f.admin)
        .json(body)
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
    r.bytes_stream()
        .eventsource()
        .map(|e| {
            let e = e.unwrap();
            (e.event, serde_json::from_str(&e.data).unwrap())
        })
        .collect()
        .await
}

fn names(ev: &[(String, Value)]) -> Vec<&str> {
    ev.iter().map(|(n, _)| n.as_str()).collect()
}

/// The SSE event names with consecutive repeats collapsed (`content_block_delta` × N → one).
fn collapsed(ev: &[(String, Value)]) -> Vec<&str> {
    let mut out: Vec<&str> = names(ev);
    out.dedup();
    out
}

fn assert_anthropic_error(body: &Value, kind: &str, mention: &str) {
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], kind, "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains(mention), "{mention:?} not in {body}");
}

// --- /v1/messages -----------------------------------------------------------------------------

#[tokio::test]
async fn messages_answers_in_anthropic_shape() {
    let f = TestFleet::start().await;
    let body = json!({
        "model": "mock-1", "max_tokens": 64,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}],
        "metadata": {"user_id": "u-1"}, "top_k": 5,
    });
    let (s, headers, m) = post_api_key(&f, "/v1/messages", &f.admin, &body).await;
    assert_eq!(s, 200, "{m}");
    assert!(headers.contains_key("x-request-id"));
    assert!(m["id"].as_str().unwrap().starts_with("msg_"), "{m}");
    assert_eq!(m["type"], "message");
    assert_eq!(m["role"], "assistant");
    assert_eq!(m["model"], "mock-1");
    assert_eq!(
        m["content"],
        json!([{"type": "text", "text": "echo: hi there"}])
    );
    assert_eq!(m["stop_reason"], "end_turn");
    assert_eq!(m["stop_sequence"], Value::Null);
    assert!(m["usage"]["input_tokens"].as_u64().unwrap() > 0, "{m}");
    assert!(m["usage"]["output_tokens"].as_u64().unwrap() > 0, "{m}");
    assert_eq!(m["usage"]["cache_read_input_tokens"], 0);
    assert_eq!(m["usage"]["cache_creation_input_tokens"], 0);

    // An alias and a tier resolve through the router like any model; the answer names the
    // model as requested.
    for model in ["default", "tier:fast"] {
        let mut b = body.clone();
        b["model"] = json!(model);
        let (s, _, m) = post_api_key(&f, "/v1/messages", &f.admin, &b).await;
        assert_eq!((s, m["model"].as_str()), (200, Some(model)), "{m}");
    }
}

#[tokio::test]
async fn a_messages_stream_sends_anthropics_events_in_order() {
    let f = TestFleet::start().await;
    let body = json!({"model": "default", "max_tokens": 64, "stream": true,
                      "messages": [{"role": "user", "content": "one two three"}]});
    let ev = events(&f, "/v1/messages", &body).await;
    assert_eq!(
        collapsed(&ev),
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{ev:?}"
    );
    for (name, data) in &ev {
        assert_eq!(
            data["type"],
            name.as_str(),
            "each payload's type is its event name"
        );
    }
    let start = &ev[0].1["message"];
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["model"], "default");
    assert_eq!(start["stop_reason"], Value::Null);
    assert_eq!(ev[1].1["index"], 0);
    assert_eq!(
        ev[1].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    let text: String = ev
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["index"], 0);
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, "echo: one two three");
    let delta = &ev[ev.len() - 2].1;
    assert_eq!(
        delta["delta"],
        json!({"stop_reason": "end_turn", "stop_sequence": null})
    );
    assert!(
        delta["usage"]["input_tokens"].as_u64().unwrap() > 0,
        "{delta}"
    );
    assert!(
        delta["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{delta}"
    );
}

#[tokio::test]
async fn parallel_tool_calls_stream_as_consecutive_tool_use_blocks() {
    let f = TestFleet::start().await;
    let body = json!({"model": "mock-1", "max_tokens": 64, "stream": true, "tools": anthropic_tools(),
                      "messages": [{"role": "user", "content": two_calls_script()}]});
    let ev = events(&f, "/v1/messages", &body).await;
    let shape: Vec<(&str, Option<u64>)> = ev
        .iter()
        .map(|(n, d)| (n.as_str(), d["index"].as_u64()))
        .collect();
    assert_eq!(
        shape,
        [
            ("message_start", None),
            ("content_block_start", Some(0)),
            ("content_block_delta", Some(0)),
            ("content_block_stop", Some(0)),
            ("content_block_start", Some(1)),
            ("content_block_delta", Some(1)),
            ("content_block_stop", Some(1)),
            ("message_delta", None),
            ("message_stop", None),
        ],
        "{ev:?}"
    );
    let block = &ev[1].1["content_block"];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], WEATHER);
    assert_eq!(block["input"], json!({}));
    assert!(!block["id"].as_str().unwrap().is_empty());
    assert_eq!(ev[2].1["delta"]["type"], "input_json_delta");
    let args: Value =
        serde_json::from_str(ev[2].1["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    assert_eq!(ev[4].1["content_block"]["name"], "get_time");
    assert_eq!(ev[7].1["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn a_tool_use_round_trip_through_messages_reaches_an_answer() {
    let f = TestFleet::start().await;
    let user = json!({"role": "user", "content": "weather in Paris?"});
    let first = json!({"model": "mock-1", "max_tokens": 64, "tools": anthropic_tools(),
                       "tool_choice": {"type": "any"}, "messages": [user]});
    let (s, _, a) = post_api_key(&f, "/v1/messages", &f.admin, &first).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["stop_reason"], "tool_use");
    let call = &a["content"][0];
    assert_eq!(call["type"], "tool_use", "{a}");
    assert_eq!(call["name"], WEATHER);
    assert!(call["input"].is_object(), "input is parsed JSON: {a}");
    let second = json!({"model": "mock-1", "max_tokens": 64, "tools": anthropic_tools(), "messages": [
        user,
        {"role": "assistant", "content": a["content"]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call["id"], "content": [{"type": "text", "text": "18C sunny"}]},
        ]},
    ]});
    let (s, _, b) = post_api_key(&f, "/v1/messages", &f.admin, &second).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["stop_reason"], "end_turn");
    assert_eq!(
        b["content"],
        json!([{"type": "text", "text": "the tool returned: 18C sunny"}])
    );
    // A script's arguments come back parsed.
    let scripted = json!({"model": "mock-1", "max_tokens": 64, "tools": anthropic_tools(),
                          "messages": [{"role": "user", "content": two_calls_script()}]});
    let (_, _, c) = post_api_key(&f, "/v1/messages", &f.admin, &scripted).await;
    assert_eq!(c["content"][0]["input"], json!({"city": "Paris"}), "{c}");
    assert_eq!(
        c["content"][1]["input"],
        json!({"tz": "Europe/Paris"}),
        "{c}"
    );
}

#[tokio::test]
async fn bad_messages_requests_get_anthropics_error_shape_naming_the_field() {
    let f = TestFleet::start().await;
    let user = json!([{"role": "user", "content": "x"}]);
    let cases: Vec<(Value, u16, &str, &str)> = vec![
        (
            json!({"model": "mock-1", "messages": user}),
            400,
            "invalid_request_error",
            "max_tokens",
        ),
        (
            json!({"model": "mock-1", "max_tokens": 5, "messages": user,
                   "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            400,
            "invalid_request_error",
            "tools[0].type",
        ),
        (
            json!({"model": "mock-1", "max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "document", "source": {"type": "text", "data": "x"}}]}]}),
            400,
            "invalid_request_error",
            "messages[0].content[0].type",
        ),
        (
            json!({"model": "mock-1", "max_tokens": 5, "messages": "nope"}),
            400,
            "invalid_request_error",
            "messages",
        ),
        (
            json!({"model": "nope-model", "max_tokens": 5, "messages": user}),
            404,
            "not_found_error",
            "nope-model",
        ),
    ];
    for (body, status, kind, mention) in cases {
        let (s, _, err) = post_api_key(&f, "/v1/messages", &f.admin, &body).await;
        assert_eq!(s, status, "{body} -> {err}");
        assert_anthropic_error(&err, kind, mention);
    }
    let r = f
        .http
        .post(format!("{}/v1/messages", f.url))
        .header("x-api-key", &f.admin)
        .header("content-type", "application/json")
        .body("{\"model\":")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_anthropic_error(
        &r.json().await.unwrap(),
        "invalid_request_error",
        "not valid JSON",
    );
}

#[tokio::test]
async fn messages_auth_accepts_x_api_key_and_refuses_in_anthropic_shape() {
    let f = TestFleet::start().await;
    let body =
        json!({"model": "mock-1", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]});
    // Bearer works as well as x-api-key (Claude Code may send either).
    let (s, m) = f.post("/v1/messages", &f.admin, body.clone()).await;
    assert_eq!(s, 200, "{m}");
    let (s, _, err) = post_api_key(&f, "/v1/messages", "wft_not-a-real-token", &body).await;
    assert_eq!(s, 401);
    assert_anthropic_error(&err, "authentication_error", "");
    let r = f
        .http
        .post(format!("{}/v1/messages", f.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_anthropic_error(
        &r.json().await.unwrap(),
        "authentication_error",
        "x-api-key",
    );

    let (s, t) = f.mint(&f.admin, "acme", &["runs:read"]).await;
    assert_eq!(s, 201, "{t}");
    let token = t["token"].as_str().unwrap();
    let (s, _, err) = post_api_key(&f, "/v1/messages", token, &body).await;
    assert_eq!(s, 403);
    assert_anthropic_error(&err, "permission_error", "llm:call");
    let (s, _, err) = post_api_key(&f, "/v1/messages", token, &json!({"bad": true})).await;
    assert_eq!(s, 403, "the scope is checked before the body: {err}");

    let (s, t) = f.mint(&f.admin, "acme", &["llm:call"]).await;
    assert_eq!(s, 201, "{t}");
    let (s, _, m) = post_api_key(&f, "/v1/messages", t["token"].as_str().unwrap(), &body).await;
    assert_eq!(s, 200, "{m}");
}

#[tokio::test]
async fn count_tokens_estimates_the_input() {
    let f = TestFleet::start().await;
    let body = json!({"model": "mock-1", "system": "s".repeat(40), "tools": anthropic_tools(),
                      "messages": [{"role": "user", "content": "u".repeat(400)}]});
    let (s, _, c) = post_api_key(&f, "/v1/messages/count_tokens", &f.admin, &body).await;
    assert_eq!(s, 200, "{c}");
    let n = c["input_tokens"].as_u64().unwrap();
    assert!((110..200).contains(&n), "{c}");
}

// --- /v1/llm/chat -----------------------------------------------------------------------------

#[tokio::test]
async fn llm_chat_answers_in_the_native_shape() {
    let f = TestFleet::start().await;
    let body = json!({"model": "default", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello native"}]},
    ], "sampling": {"temperature": 0.2, "max_tokens": 32}});
    let (s, a) = f.post("/v1/llm/chat", &f.admin, body).await;
    assert_eq!(s, 200, "{a}");
    assert!(!a["id"].as_str().unwrap().is_empty());
    assert_eq!(a["provider"], "mock");
    assert_eq!(a["model"], "mock-1");
    assert_eq!(a["fallbacks"], json!([]));
    assert_eq!(
        a["message"],
        json!({"role": "assistant", "content": [{"type": "text", "text": "echo: hello native"}]})
    );
    assert_eq!(a["finish_reason"], "stop");
    let u = &a["usage"];
    assert!(u["prompt_tokens"].as_u64().unwrap() > 0, "{a}");
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
    );
    assert_eq!(u["cache_read_tokens"], 0);
}

#[tokio::test]
async fn an_llm_chat_stream_sends_the_native_events_in_order() {
    let f = TestFleet::start().await;
    let body = json!({"model": "mock-1", "stream": true,
                      "messages": [{"role": "user", "content": "one two three"}]});
    let ev = events(&f, "/v1/llm/chat", &body).await;
    assert_eq!(
        collapsed(&ev),
        [
            "provider_chosen",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "done"
        ],
        "{ev:?}"
    );
    assert_eq!(ev[0].1, json!({"provider": "mock", "model": "mock-1"}));
    assert_eq!(ev[1].1, json!({"index": 0, "block": {"type": "text"}}));
    let text: String = ev
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["index"], 0);
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, "echo: one two three");
    let (_, stop) = &ev[ev.len() - 3];
    assert_eq!(stop, &json!({"index": 0}));
    let (_, delta) = &ev[ev.len() - 2];
    assert_eq!(delta["finish_reason"], "stop");
    assert!(
        delta["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{delta}"
    );
    assert_eq!(ev.last().unwrap().1, json!({}));

    // Parallel tool calls: one tool_use block each, opened and closed in turn.
    let body = json!({"model": "mock-1", "stream": true, "tools": native_tools(),
                      "messages": [{"role": "user", "content": two_calls_script()}]});
    let ev = events(&f, "/v1/llm/chat", &body).await;
    let shape: Vec<(&str, Option<u64>)> = ev
        .iter()
        .map(|(n, d)| (n.as_str(), d["index"].as_u64()))
        .collect();
    assert_eq!(
        shape,
        [
            ("provider_chosen", None),
            ("content_block_start", Some(0)),
            ("content_block_delta", Some(0)),
            ("content_block_stop", Some(0)),
            ("content_block_start", Some(1)),
            ("content_block_delta", Some(1)),
            ("content_block_stop", Some(1)),
            ("message_delta", None),
            ("done", None),
        ],
        "{ev:?}"
    );
    assert_eq!(ev[1].1["block"]["type"], "tool_use");
    assert_eq!(ev[1].1["block"]["name"], WEATHER);
    assert_eq!(ev[2].1["delta"]["type"], "input_json_delta");
    assert_eq!(ev[4].1["block"]["name"], "get_time");
    assert_eq!(ev[7].1["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn a_tool_use_round_trip_through_llm_chat_reaches_an_answer() {
    let f = TestFleet::start().await;
    let user = json!({"role": "user", "content": "weather?"});
    let first = json!({"model": "mock-1", "tools": native_tools(), "tool_choice": "required",
                       "messages": [user]});
    let (s, a) = f.post("/v1/llm/chat", &f.admin, first).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["finish_reason"], "tool_calls");
    let call = &a["message"]["content"][0];
    assert_eq!(call["type"], "tool_use", "{a}");
    assert_eq!(call["name"], WEATHER);
    assert!(call["input"].is_object());
    let second = json!({"model": "mock-1", "tools": native_tools(), "messages": [
        user,
        a["message"],
        {"role": "tool", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "sunny"}]},
    ]});
    let (s, b) = f.post("/v1/llm/chat", &f.admin, second).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["finish_reason"], "stop");
    assert_eq!(
        b["message"]["content"],
        json!([{"type": "text", "text": "the tool returned: sunny"}])
    );
}

#[tokio::test]
async fn llm_chat_is_strict_and_names_the_field() {
    let f = TestFleet::start().await;
    let user = json!([{"role": "user", "content": "x"}]);
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"model": "mock-1", "messages": user, "temprature": 1}),
            "temprature",
        ),
        (
            json!({"model": "mock-1", "messages": user, "sampling": {"temp": 1}}),
            "sampling.temp",
        ),
        (
            json!({"model": "mock-1", "messages": user, "sampling": {"temperature": 7}}),
            "sampling.temperature",
        ),
        (
            json!({"model": "mock-1", "messages": [{"role": "user", "content": "x", "tool_calls": []}]}),
            "messages[0].tool_calls",
        ),
        (
            json!({"model": "mock-1", "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "b"}]}]}),
            "messages[0].content[0]",
        ),
        (
            json!({"model": "mock-1", "messages": user, "tools": native_tools(),
                   "tool_choice": {"type": "tool", "name": "nope"}}),
            "tool_choice.name",
        ),
    ];
    for (body, param) in cases {
        let (s, err) = f.post("/v1/llm/chat", &f.admin, body.clone()).await;
        assert_eq!(s, 400, "{body} -> {err}");
        assert_eq!(err["error"]["code"], "invalid_request", "{err}");
        assert_eq!(err["error"]["param"], param, "{body} -> {err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(param),
            "{err}"
        );
    }
    let (_, err) = f
        .post(
            "/v1/llm/chat",
            &f.admin,
            json!({"model": "mock-1", "messages": user, "temprature": 1}),
        )
        .await;
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`extra`"),
        "the error says where provider fields go: {err}"
    );
    // `extra` itself is accepted and forwarded.
    let (s, a) = f
        .post(
            "/v1/llm/chat",
            &f.admin,
            json!({"model": "mock-1", "messages": user, "extra": {"top_k": 3}}),
        )
        .await;
    assert_eq!(s, 200, "{a}");
}

#[tokio::test]
async fn llm_chat_needs_llm_call_before_the_body_is_read() {
    let f = TestFleet::start().await;
    let (s, t) = f.mint(&f.admin, "acme", &["runs:read"]).await;
    assert_eq!(s, 201, "{t}");
    let token = t["token"].as_str().unwrap();
    for body in [
        json!({"model": "mock-1", "messages": [{"role": "user", "content": "x"}]}),
        json!({"bad": true}),
    ] {
        let (s, err) = f.post("/v1/llm/chat", token, body).await;
        assert_eq!(s, 403, "{err}");
        assert_eq!(err["error"]["code"], "permission_denied");
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("llm:call")
        );
    }
    let (s, err) = f
        .post(
            "/v1/llm/chat",
            "wft_nope",
            json!({"model": "mock-1", "messages": []}),
        )
        .await;
    assert_eq!(
        (s, err["error"]["code"].as_str()),
        (401, Some("unauthenticated"))
    );
}

#[tokio::test]
async fn the_openapi_document_lists_the_front_doors() {
    let f = TestFleet::start().await;
    let doc: Value = reqwest::get(format!("{}/v1/openapi.json", f.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in ["/v1/messages", "/v1/messages/count_tokens", "/v1/llm/chat"] {
        assert!(doc["paths"][path]["post"].is_object(), "{path}");
    }
    for schema in [
        "MessagesRequest",
        "AnthropicError",
        "LlmChatRequest",
        "LlmChatResponse",
    ] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
}

// --- failures from a real wire ----------------------------------------------------------------

/// A fleet whose provider `fake` is an OpenAI-compatible fake upstream (no retries), with the
/// alias `chain` = fake first, then the mock.
async fn with_fake_upstream() -> (TestFleet, weft_testkit::FakeUpstream) {
    let up = weft_testkit::FakeUpstream::start().await;
    let base_url = up.base_url.clone();
    let f = TestFleet::start_with(move |c| {
        c.router.providers.insert(
            "fake".into(),
            weft_config::ProviderConfig::Openai(weft_config::HttpProviderConfig {
                models: vec!["fake-model".into()],
                max_retries: 0,
                backoff_ms: 1,
                first_byte_timeout_secs: 5,
                ..weft_config::HttpProviderConfig::new(base_url)
            }),
        );
        // Try the failing candidate on every call rather than cooling it down.
        c.router.cooldown_secs = 0;
        c.router.aliases.insert(
            "chain".into(),
            vec!["fake/fake-model".into(), "mock/mock-1".into()],
        );
    })
    .await;
    (f, up)
}

#[tokio::test]
async fn a_stream_broken_upstream_ends_in_an_error_event() {
    let (f, up) = with_fake_upstream().await;
    up.set_default(weft_testkit::Behavior::BreakMidStream);
    let user = json!([{"role": "user", "content": "hello there friend"}]);

    let body =
        json!({"model": "fake/fake-model", "max_tokens": 32, "stream": true, "messages": user});
    let ev = events(&f, "/v1/messages", &body).await;
    assert_eq!(ev[0].0, "message_start", "{ev:?}");
    let (name, data) = ev.last().unwrap();
    assert_eq!(name, "error", "{ev:?}");
    assert_eq!(data["type"], "error");
    assert_eq!(data["error"]["type"], "api_error", "{data}");
    assert!(data["error"]["message"].is_string());
    assert!(!names(&ev).contains(&"message_stop"));

    let body = json!({"model": "fake/fake-model", "stream": true, "messages": user});
    let ev = events(&f, "/v1/llm/chat", &body).await;
    assert_eq!(ev[0].0, "provider_chosen", "{ev:?}");
    let (name, data) = ev.last().unwrap();
    assert_eq!(name, "error", "{ev:?}");
    assert_eq!(data["error"]["code"], "upstream_error", "{data}");
    assert!(!names(&ev).contains(&"done"));
}

#[tokio::test]
async fn llm_chat_reports_the_candidates_that_failed_before_one_answered() {
    let (f, up) = with_fake_upstream().await;
    up.set_default(weft_testkit::Behavior::Fail {
        status: 500,
        retry_after: None,
    });
    let user = json!([{"role": "user", "content": "hi"}]);
    let (s, a) = f
        .post(
            "/v1/llm/chat",
            &f.admin,
            json!({"model": "chain", "messages": user}),
        )
        .await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(
        (a["provider"].as_str(), a["model"].as_str()),
        (Some("mock"), Some("mock-1"))
    );
    let fb = a["fallbacks"].as_array().unwrap();
    assert_eq!(fb.len(), 1, "{a}");
    assert_eq!(
        (fb[0]["provider"].as_str(), fb[0]["model"].as_str()),
        (Some("fake"), Some("fake-model"))
    );
    assert!(
        fb[0]["code"].is_string() && fb[0]["message"].is_string(),
        "{a}"
    );

    let body = json!({"model": "chain", "stream": true, "messages": user});
    let ev = events(&f, "/v1/llm/chat", &body).await;
    assert_eq!(
        &names(&ev)[..2],
        ["provider_fallback", "provider_chosen"],
        "{ev:?}"
    );
    assert_eq!(ev[0].1["provider"], "fake");
    assert_eq!(ev[1].1, json!({"provider": "mock", "model": "mock-1"}));
    assert_eq!(ev.last().unwrap().0, "done");

    // The Anthropic door hides the fallback and answers from the candidate that worked.
    let (s, _, m) = post_api_key(
        &f,
        "/v1/messages",
        &f.admin,
        &json!({"model": "chain", "max_tokens": 16, "messages": user}),
    )
    .await;
    assert_eq!(s, 200, "{m}");
    assert_eq!(m["content"][0]["text"], "echo: hi");
    assert_eq!(m["model"], "chain");
}

#[tokio::test]
async fn an_upstream_429_is_a_rate_limit_error_with_retry_after() {
    let (f, up) = with_fake_upstream().await;
    up.set_default(weft_testkit::Behavior::Fail {
        status: 429,
        retry_after: Some(7),
    });
    let user = json!([{"role": "user", "content": "hi"}]);
    let (s, headers, err) = post_api_key(
        &f,
        "/v1/messages",
        &f.admin,
        &json!({"model": "fake/fake-model", "max_tokens": 16, "messages": user}),
    )
    .await;
    assert_eq!(s, 429, "{err}");
    assert_eq!(headers["retry-after"], "7");
    assert_anthropic_error(&err, "rate_limit_error", "");

    let r = f
        .http
        .post(format!("{}/v1/llm/chat", f.url))
        .bearer_auth(&f.admin)
        .json(&json!({"model": "fake/fake-model", "stream": true, "messages": user}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"]["code"], "rate_limited", "{err}");

    // The Responses door: OpenAI's shape, stream or not, and nothing stored.
    for stream in [false, true] {
        let r = f
            .http
            .post(format!("{}/v1/responses", f.url))
            .bearer_auth(&f.admin)
            .json(&json!({"model": "fake/fake-model", "input": "hi", "stream": stream}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 429, "stream={stream}");
        assert_eq!(r.headers()["retry-after"], "7");
        let err: Value = r.json().await.unwrap();
        assert_eq!(err["error"]["code"], "rate_limited", "{err}");
        assert_eq!(err["error"]["type"], "rate_limit_error", "{err}");
    }
}

#[tokio::test]
async fn the_doors_copy_the_rate_limit_headers_streams_included() {
    let f = TestFleet::start_with(|c| {
        c.router.limits.subject.requests_per_minute = Some(100);
    })
    .await;
    let user = json!([{"role": "user", "content": "hi"}]);
    for (path, mut body) in [
        (
            "/v1/messages",
            json!({"model": "mock-1", "max_tokens": 16, "messages": user}),
        ),
        ("/v1/llm/chat", json!({"model": "mock-1", "messages": user})),
        (
            "/v1/responses",
            json!({"model": "mock-1", "input": "hi", "store": false}),
        ),
    ] {
        for stream in [false, true] {
            body["stream"] = json!(stream);
            let r = f
                .http
                .post(format!("{}{path}", f.url))
                .bearer_auth(&f.admin)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{path}");
            let h = r.headers();
            assert_eq!(
                h.get("x-ratelimit-limit-requests")
                    .map(|v| v.to_str().unwrap()),
                Some("100"),
                "{path} stream={stream}: {h:?}"
            );
            assert!(h.contains_key("x-ratelimit-remaining-requests"));
            // Read the body to its end so the call is complete.
            let _ = r.bytes().await.unwrap();
        }
    }
}

/// llama.cpp's own words when the model writes a tool call its template's parser refuses.
const UNREADABLE: &str =
    "The model produced output that does not match the expected peg-native format";

#[tokio::test]
async fn a_model_output_its_provider_cannot_read_is_asked_again_with_a_note() {
    let (f, up) = with_fake_upstream().await;
    // At the door: the upstream's error mid-stream is `model_output_invalid`, not a generic
    // upstream failure.
    up.push(weft_testkit::Behavior::ErrorMidStream(UNREADABLE.into()));
    let user = json!([{"role": "user", "content": "hi"}]);
    let body = json!({"model": "fake/fake-model", "stream": true, "messages": user});
    let ev = events(&f, "/v1/llm/chat", &body).await;
    let (name, data) = ev.last().unwrap();
    assert_eq!(name, "error", "{ev:?}");
    assert_eq!(data["error"]["code"], "model_output_invalid", "{data}");
    assert!(
        data["error"]["message"]
            .as_str()
            .unwrap()
            .contains("peg-native"),
        "{data}"
    );

    // In a run: the turn is asked again with a note naming the tools, and the run goes on.
    common::put_agent(
        &f,
        &f.admin,
        "small",
        json!({"model": "fake/fake-model", "tools": ["Context"]}),
    )
    .await;
    up.push(weft_testkit::Behavior::ErrorMidStream(UNREADABLE.into()));
    up.push(weft_testkit::Behavior::Text("done after a note".into()));
    let before = up.calls();
    let run = common::create(&f, &f.admin, json!({"agent": "small", "input": "go"})).await;
    let frames = common::stream(&f, &f.admin, &run, "", None).await;
    let last = &frames.last().unwrap().2["data"];
    assert_eq!(last["status"], "succeeded", "{last}");
    assert_eq!(up.calls() - before, 2);
    let rec = up.recorded();
    let second = &rec[rec.len() - 1].body["messages"];
    let note = second.as_array().unwrap().last().unwrap();
    assert_eq!(note["role"], "user", "{second}");
    let text = note["content"].as_str().unwrap();
    assert!(
        text.contains("could not be read")
            && text.contains("peg-native")
            && text.contains("Context"),
        "{text}"
    );
    // The note is not in the transcript: the run's messages are the input and the answer.
    let kinds: Vec<String> = common::persisted(&frames)
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "user_input").count(),
        1,
        "{kinds:?}"
    );

    // Three unreadable answers in a row: the run fails with that error, after two notes.
    for _ in 0..3 {
        up.push(weft_testkit::Behavior::ErrorMidStream(UNREADABLE.into()));
    }
    let before = up.calls();
    let run = common::create(&f, &f.admin, json!({"agent": "small", "input": "go"})).await;
    let frames = common::stream(&f, &f.admin, &run, "", None).await;
    let last = &frames.last().unwrap().2["data"];
    assert_eq!(last["status"], "failed", "{last}");
    let err = frames
        .iter()
        .find(|(_, k, _)| k == "error")
        .expect("an error event");
    assert_eq!(err.2["data"]["code"], "model_output_invalid", "{:?}", err.2);
    assert_eq!(up.calls() - before, 3);
}
