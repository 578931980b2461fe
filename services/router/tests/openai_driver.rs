//! The `openai` driver and the fallback logic against a fake OpenAI-compatible upstream that
//! speaks the real wire format.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use std::collections::BTreeMap;

use futures::StreamExt as _;
use weft_config::{OpenAiProviderConfig, ProviderConfig, RouterConfig};
use weft_core::ErrorCode;
use weft_core::message::{ContentBlock, FinishReason, Message, Role, ToolSpec};
use weft_router::types::Sampling;
use weft_router::{ChatEvent, ChatRequest, EmbedRequest, Routing};
use weft_testkit::{Behavior, FakeUpstream};

fn provider(up: &FakeUpstream) -> OpenAiProviderConfig {
    OpenAiProviderConfig {
        models: vec!["m".into()],
        max_retries: 2,
        backoff_ms: 1,
        max_retry_after_secs: 2,
        first_byte_timeout_secs: 1,
        ..OpenAiProviderConfig::new(up.base_url.clone())
    }
}

fn routing(providers: Vec<(&str, OpenAiProviderConfig)>, chain: &[&str]) -> Routing {
    let mut cfg = RouterConfig {
        providers: BTreeMap::new(),
        ..Default::default()
    };
    for (name, p) in providers {
        cfg.providers.insert(name.into(), ProviderConfig::Openai(p));
    }
    cfg.aliases.insert(
        "chain".into(),
        chain.iter().map(|s| s.to_string()).collect(),
    );
    cfg.tiers.clear();
    Routing::from_config(&cfg).unwrap()
}

fn request(model: &str, stream: bool) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        messages: vec![Message {
            role: Role::User,
            content: vec![ContentBlock::text("hello world")],
            name: None,
        }],
        stream,
        ..Default::default()
    }
}

async fn events(r: &Routing, req: &ChatRequest) -> Vec<Result<ChatEvent, weft_core::Error>> {
    r.chat(req).await.unwrap().collect().await
}

fn text(ev: &[Result<ChatEvent, weft_core::Error>]) -> String {
    ev.iter()
        .filter_map(|e| match e {
            Ok(ChatEvent::TextDelta(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn usages(ev: &[Result<ChatEvent, weft_core::Error>]) -> usize {
    ev.iter()
        .filter(|e| matches!(e, Ok(ChatEvent::Usage(_))))
        .count()
}

#[tokio::test]
async fn plain_and_streamed_text_carry_exactly_one_usage() {
    let up = FakeUpstream::start().await;
    let r = routing(vec![("up", provider(&up))], &["up/m"]);
    for stream in [false, true] {
        let ev = events(&r, &request("m", stream)).await;
        assert_eq!(text(&ev), "echo: hello world", "stream={stream}");
        assert_eq!(usages(&ev), 1, "stream={stream}");
        assert_eq!(
            ev.last().unwrap().as_ref().unwrap(),
            &ChatEvent::Finish(FinishReason::Stop)
        );
        assert!(
            matches!(&ev[0], Ok(ChatEvent::ProviderChosen { provider, fallbacks: 0, .. }) if provider == "up")
        );
    }
    let sent = up.recorded();
    assert_eq!(
        sent[1].body["stream_options"]["include_usage"], true,
        "weft always asks for stream usage"
    );
}

#[tokio::test]
async fn streamed_tool_call_arguments_are_assembled_in_order() {
    let up = FakeUpstream::start().await;
    up.push(Behavior::ParallelToolCalls(vec![
        (
            "get_weather".into(),
            r#"{"city":"Paris","unit":"c"}"#.into(),
        ),
        ("get_time".into(), r#"{"tz":"CET"}"#.into()),
    ]));
    let r = routing(vec![("up", provider(&up))], &["up/m"]);
    let mut req = request("m", true);
    req.tools = vec![ToolSpec {
        name: "get_weather".into(),
        description: String::new(),
        parameters: serde_json::json!({"type":"object"}),
    }];
    let ev = events(&r, &req).await;
    let mut args: BTreeMap<u32, String> = BTreeMap::new();
    let mut names = Vec::new();
    for e in &ev {
        match e.as_ref().unwrap() {
            ChatEvent::ToolCallStart { index, name, id } => {
                assert!(!id.is_empty());
                names.push((*index, name.clone()));
            }
            ChatEvent::ToolCallDelta { index, arguments } => {
                args.entry(*index).or_default().push_str(arguments)
            }
            _ => {}
        }
    }
    assert_eq!(
        names,
        vec![(0, "get_weather".to_owned()), (1, "get_time".to_owned())]
    );
    let a0: serde_json::Value = serde_json::from_str(&args[&0]).unwrap();
    assert_eq!(a0["city"], "Paris");
    let a1: serde_json::Value = serde_json::from_str(&args[&1]).unwrap();
    assert_eq!(a1["tz"], "CET");
    assert_eq!(
        ev.last().unwrap().as_ref().unwrap(),
        &ChatEvent::Finish(FinishReason::ToolCalls)
    );
    assert_eq!(
        up.recorded()[0].body["tools"][0]["function"]["name"],
        "get_weather"
    );
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_on_the_same_candidate() {
    let up = FakeUpstream::start().await;
    up.push(Behavior::Fail {
        status: 429,
        retry_after: Some(1),
    });
    let r = routing(vec![("up", provider(&up))], &["up/m"]);
    let ev = events(&r, &request("m", false)).await;
    assert_eq!(text(&ev), "echo: hello world");
    assert_eq!(up.calls(), 2);
}

#[tokio::test]
async fn a_retry_after_beyond_the_limit_surfaces_as_429_with_the_hint() {
    let up = FakeUpstream::start().await;
    up.push(Behavior::Fail {
        status: 429,
        retry_after: Some(30),
    });
    let r = routing(vec![("up", provider(&up))], &["up/m"]);
    let err = r.chat(&request("m", false)).await.err().unwrap();
    assert_eq!(err.code, ErrorCode::RateLimited);
    assert_eq!(err.retry_after, Some(std::time::Duration::from_secs(30)));
    assert_eq!(
        up.calls(),
        1,
        "no retry when Retry-After exceeds max_retry_after_secs"
    );
}

#[tokio::test]
async fn a_500_before_the_first_byte_falls_back_to_the_next_candidate() {
    let bad = FakeUpstream::start().await;
    bad.set_default(Behavior::Fail {
        status: 500,
        retry_after: None,
    });
    let good = FakeUpstream::start().await;
    let mut p = provider(&bad);
    p.max_retries = 1;
    let r = routing(
        vec![("bad", p), ("good", provider(&good))],
        &["bad/m", "good/m"],
    );
    let ev = events(&r, &request("chain", true)).await;
    assert!(
        matches!(&ev[0], Ok(ChatEvent::Fallback(weft_router::types::Fallback { provider, code, .. })) if provider == "bad" && code == "upstream_error"),
        "{ev:?}"
    );
    assert!(
        matches!(&ev[1], Ok(ChatEvent::ProviderChosen { provider, fallbacks: 1, .. }) if provider == "good")
    );
    assert_eq!(text(&ev), "echo: hello world");
    assert_eq!(bad.calls(), 2, "one try plus one retry");
    assert_eq!(good.calls(), 1);
}

#[tokio::test]
async fn client_errors_are_not_retried_or_fallen_back() {
    let bad = FakeUpstream::start().await;
    bad.set_default(Behavior::Fail {
        status: 400,
        retry_after: None,
    });
    let good = FakeUpstream::start().await;
    let r = routing(
        vec![("bad", provider(&bad)), ("good", provider(&good))],
        &["bad/m", "good/m"],
    );
    let err = r.chat(&request("chain", false)).await.err().unwrap();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert!(
        err.message.contains("fake upstream failure 400"),
        "{}",
        err.message
    );
    assert_eq!((bad.calls(), good.calls()), (1, 0));
}

#[tokio::test]
async fn a_stream_that_breaks_mid_way_ends_with_an_error() {
    let up = FakeUpstream::start().await;
    up.push(Behavior::Text("one two three four".into()));
    up.push(Behavior::BreakMidStream);
    let r = routing(vec![("up", provider(&up))], &["up/m"]);
    let ok = events(&r, &request("m", true)).await;
    assert!(ok.iter().all(Result::is_ok));
    let ev = events(&r, &request("m", true)).await;
    let err = ev.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.code, ErrorCode::UpstreamError);
    assert!(
        !ev.iter().any(|e| matches!(e, Ok(ChatEvent::Finish(_)))),
        "a broken stream never reports a clean finish"
    );
}

#[tokio::test]
async fn malformed_upstream_bodies_are_upstream_errors() {
    let up = FakeUpstream::start().await;
    up.set_default(Behavior::Malformed);
    let mut p = provider(&up);
    p.max_retries = 0;
    let r = routing(vec![("up", p)], &["up/m"]);
    let err = r.chat(&request("m", false)).await.err().unwrap();
    assert_eq!(err.code, ErrorCode::UpstreamError);
    assert!(err.message.contains("malformed"));
    // A stream whose first chunk is malformed fails before its first event: for the caller that
    // is still before the first byte, so it is an error of the call (and another candidate could
    // have been tried), not an event.
    let err = r.chat(&request("m", true)).await.err().unwrap();
    assert_eq!(err.code, ErrorCode::UpstreamError);
    assert!(err.message.contains("malformed"));
}

#[tokio::test]
async fn a_stalled_upstream_times_out_instead_of_hanging() {
    let up = FakeUpstream::start().await;
    up.set_default(Behavior::Stall);
    let r = routing(vec![("up", provider(&up))], &["up/m"]);
    let err = r.chat(&request("m", false)).await.err().unwrap();
    assert_eq!(err.code, ErrorCode::UpstreamTimeout);
}

#[tokio::test]
async fn parameters_that_change_behaviour_reach_the_upstream() {
    let up = FakeUpstream::start().await;
    let r = routing(vec![("up", provider(&up))], &["up/m"]);
    let mut req = request("m", false);
    req.sampling = Sampling {
        max_tokens: Some(5),
        temperature: Some(0.2),
        seed: Some(7),
        stop: vec!["\n".into()],
        ..Default::default()
    };
    req.response_format = Some(serde_json::json!({"type": "json_object"}));
    req.extra
        .insert("logit_bias".into(), serde_json::json!({"50256": -100}));
    events(&r, &req).await;
    let body = &up.recorded()[0].body;
    assert_eq!(body["max_tokens"], 5);
    assert_eq!(body["seed"], 7);
    assert_eq!(body["stop"], serde_json::json!(["\n"]));
    assert_eq!(body["response_format"]["type"], "json_object");
    assert_eq!(body["logit_bias"]["50256"], -100);
}

#[tokio::test]
async fn embeddings_come_back_in_input_order() {
    let up = FakeUpstream::start().await;
    let r = routing(vec![("up", provider(&up))], &["up/m"]);
    let res = r
        .embed(&EmbedRequest {
            model: "m".into(),
            input: vec!["a".into(), "bbb".into()],
            dimensions: Some(3),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(res.vectors.len(), 2);
    assert_eq!(res.vectors[0].len(), 3);
    assert!(res.vectors[1][0] > res.vectors[0][0]);
    assert!(res.usage.total_tokens > 0);
}

#[tokio::test]
async fn the_api_key_is_sent_as_a_bearer_token() {
    let up = FakeUpstream::start().await;
    let var = format!("WEFT_TEST_KEY_{}", std::process::id());
    // SAFETY-relevant: set before any thread reads it; the name is unique to this test.
    #[expect(
        unsafe_code,
        reason = "test-only environment set-up with a unique variable name"
    )]
    unsafe {
        std::env::set_var(&var, "sk-test");
    }
    let mut p = provider(&up);
    p.api_key_env = Some(var);
    let r = routing(vec![("up", p)], &["up/m"]);
    events(&r, &request("m", false)).await;
    assert_eq!(
        up.recorded()[0].authorization.as_deref(),
        Some("Bearer sk-test")
    );
}

/// A chain whose first provider answers every call with `status`: checks that the second one
/// answered, each called once (the first not retried), and returns the first.
async fn answered_after_one_failure(status: u16) -> FakeUpstream {
    let bad = FakeUpstream::start().await;
    bad.set_default(Behavior::Fail {
        status,
        retry_after: None,
    });
    let good = FakeUpstream::start().await;
    let r = routing(
        vec![("bad", provider(&bad)), ("good", provider(&good))],
        &["bad/m", "good/m"],
    );
    let ev = events(&r, &request("chain", false)).await;
    assert_eq!(text(&ev), "echo: hello world");
    assert_eq!((bad.calls(), good.calls()), (1, 1));
    bad
}

#[tokio::test]
async fn refused_credentials_are_not_retried_but_fall_back() {
    answered_after_one_failure(401).await;
}

/// A provider call is not redirected (a POST followed as a GET is not the call asked for): the
/// redirect is an error naming it, not retried on that provider, and the next candidate answers.
#[tokio::test]
async fn redirects_are_not_followed_or_retried_but_fall_back() {
    let moved = answered_after_one_failure(307).await;

    let alone = routing(vec![("moved", provider(&moved))], &["moved/m"]);
    let Err(err) = alone.chat(&request("chain", false)).await else {
        panic!("a redirect answered");
    };
    assert_eq!(err.code, ErrorCode::UpstreamError);
    assert!(
        err.message.contains("redirect (status 307)") && err.message.contains("base_url"),
        "{}",
        err.message
    );
    assert_eq!(moved.calls(), 2);
}

#[tokio::test]
async fn a_stream_that_fails_before_its_first_event_falls_back() {
    let bad = FakeUpstream::start().await;
    bad.set_default(Behavior::Malformed);
    let good = FakeUpstream::start().await;
    let mut p = provider(&bad);
    p.max_retries = 0;
    let r = routing(
        vec![("bad", p), ("good", provider(&good))],
        &["bad/m", "good/m"],
    );
    let ev = events(&r, &request("chain", true)).await;
    assert!(
        matches!(&ev[0], Ok(ChatEvent::Fallback(weft_router::types::Fallback { provider, .. })) if provider == "bad"),
        "{ev:?}"
    );
    assert_eq!(text(&ev), "echo: hello world");
}
