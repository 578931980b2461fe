use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::json;

use super::*;

#[test]
fn a_signature_is_the_standard_webhooks_spec_example() {
    // github.com/standard-webhooks/standard-webhooks, spec/standard-webhooks.md.
    let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let sig = sign(
        &key,
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1_614_265_330,
        br#"{"test": 2432232314}"#,
    )
    .unwrap();
    assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

fn hook(name: &str, phase: HookPhase, url: String, fail_mode: FailMode) -> Hook {
    Hook {
        name: name.into(),
        content: HookContent {
            description: String::new(),
            phase,
            agents: vec!["*".into()],
            tools: vec!["Memory".into(), "mcp__*".into()],
            url,
            fail_mode,
            timeout_ms: Some(300),
            secret_env: None,
        },
    }
}

fn hooks(exempt: &[&str]) -> Hooks {
    let cfg = ExecutorConfig {
        http_private_exempt: exempt.iter().map(|s| (*s).to_owned()).collect(),
        ..ExecutorConfig::default()
    };
    Hooks::new(&cfg).unwrap()
}

fn who() -> Subject<'static> {
    Subject {
        run_id: "r1".into(),
        tenant: "acme",
        agent: "triage",
        tool_use_id: "c1",
        tool: "Memory",
    }
}

/// A receiver on 127.0.0.1: `/allow`, `/deny`, `/rewrite` (pre: adds `"seen": <hook>` to the
/// input; post: upper-cases the result), `/slow`, `/500`, `/garbage`; counts calls.
async fn receiver() -> (String, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    async fn answer(
        State(calls): State<Arc<AtomicUsize>>,
        uri: axum::http::Uri,
        headers: HeaderMap,
        Json(body): Json<HookCall>,
    ) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        calls.fetch_add(1, Ordering::SeqCst);
        assert!(headers.contains_key("webhook-id") && headers.contains_key("webhook-timestamp"));
        match uri.path() {
            "/allow" => Json(json!({"decision": "allow"})).into_response(),
            "/deny" => Json(json!({"decision": "deny", "reason": "not today"})).into_response(),
            "/rewrite" if body.kind == CALL_PRE => {
                let mut input = body.input.as_object().cloned().unwrap_or_default();
                input.insert("seen".into(), json!(body.hook));
                Json(json!({"decision": "rewrite", "input": input})).into_response()
            }
            "/rewrite" => Json(json!({
                "decision": "rewrite",
                "result": body.result.unwrap_or_default().to_uppercase()
            }))
            .into_response(),
            "/slow" => {
                // Never answers: the call's timeout is what ends it.
                std::future::pending::<axum::response::Response>().await
            }
            "/garbage" => "yes".into_response(),
            _ => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        }
    }
    let app = axum::Router::new()
        .fallback(axum::routing::post(answer))
        .with_state(calls.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    (format!("http://{addr}"), calls)
}

#[tokio::test]
async fn pre_hooks_run_in_order_rewrite_the_input_and_stop_at_a_deny() {
    let (url, calls) = receiver().await;
    let h = hooks(&["127.0.0.1/32"]);
    let a = hook(
        "a",
        HookPhase::Pre,
        format!("{url}/rewrite"),
        FailMode::Closed,
    );
    let b = hook("b", HookPhase::Pre, format!("{url}/deny"), FailMode::Closed);
    let c = hook(
        "c",
        HookPhase::Pre,
        format!("{url}/allow"),
        FailMode::Closed,
    );
    let rec = h.pre(&[&a, &c], &who(), json!({"op": "get"})).await;
    assert_eq!(rec.input, json!({"op": "get", "seen": "a"}));
    assert!(rec.denied.is_none());
    let verdicts: Vec<_> = rec.decisions.iter().map(|d| d.decision).collect();
    assert_eq!(verdicts, [HookVerdict::Rewrite, HookVerdict::Allow]);
    // A deny stops the chain: `c` is never called.
    let before = calls.load(Ordering::SeqCst);
    let rec = h.pre(&[&a, &b, &c], &who(), json!({"op": "get"})).await;
    assert_eq!(calls.load(Ordering::SeqCst) - before, 2);
    assert_eq!(rec.denied.as_deref(), Some("denied by hook `b`: not today"));
    // The record reads back from a ledger row.
    let row = json!({"pre": serde_json::to_value(&rec).unwrap()});
    assert_eq!(PreRecord::from_ledger(Some(&row)), Some(rec));
    assert_eq!(PreRecord::from_ledger(Some(&json!({"post": {}}))), None);
}

#[tokio::test]
async fn post_hooks_run_in_reverse_and_may_withhold_the_result() {
    let (url, _) = receiver().await;
    let h = hooks(&["127.0.0.1/32"]);
    let up = hook(
        "up",
        HookPhase::Post,
        format!("{url}/rewrite"),
        FailMode::Closed,
    );
    let deny = hook(
        "deny",
        HookPhase::Post,
        format!("{url}/deny"),
        FailMode::Closed,
    );
    let input = json!({"op": "get"});
    let out = h.post(&[&up], &who(), &input, "quiet".into(), false).await;
    assert_eq!((out.text.as_str(), out.is_error), ("QUIET", false));
    assert_eq!(out.record["rewritten"], true);
    // Reverse order: `up` (registered second) first, then `deny` withholds what it wrote.
    let out = h
        .post(&[&deny, &up], &who(), &input, "quiet".into(), false)
        .await;
    assert!(out.is_error);
    assert_eq!(
        out.text,
        "the result was withheld by hook `deny`: not today"
    );
    let order: Vec<_> = out
        .events
        .iter()
        .map(|e| match e {
            RunEvent::HookDecision(d) => d.hook.clone(),
            _ => String::new(),
        })
        .collect();
    assert_eq!(order, ["up", "deny"]);
}

#[tokio::test]
async fn a_receiver_without_a_usable_answer_is_decided_by_the_fail_mode() {
    let (url, _) = receiver().await;
    let h = hooks(&["127.0.0.1/32"]);
    let dead = format!("http://127.0.0.1:{}/x", {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    });
    for (path, why) in [
        (format!("{url}/slow"), "no answer within 300 ms"),
        (format!("{url}/500"), "answered HTTP 500"),
        (format!("{url}/garbage"), "unreadable answer"),
        (dead, "unreachable"),
    ] {
        let closed = hook("p", HookPhase::Pre, path.clone(), FailMode::Closed);
        let rec = h.pre(&[&closed], &who(), json!({})).await;
        let d = &rec.decisions[0];
        assert_eq!(d.decision, HookVerdict::Deny, "{path}");
        assert!(d.failure.as_deref().unwrap().contains(why), "{path}: {d:?}");
        assert!(rec.denied.unwrap().contains("fails closed"));
        let open = hook("p", HookPhase::Pre, path.clone(), FailMode::Open);
        let rec = h.pre(&[&open], &who(), json!({"k": 1})).await;
        assert_eq!(rec.decisions[0].decision, HookVerdict::Allow, "{path}");
        assert!(rec.decisions[0].failure.is_some() && rec.denied.is_none());
        assert_eq!(rec.input, json!({"k": 1}));
    }
}

#[tokio::test]
async fn loopback_and_metadata_addresses_are_refused_unless_exempt() {
    let (url, calls) = receiver().await;
    let h = hooks(&[]);
    for target in [
        format!("{url}/allow"),
        "http://169.254.169.254/latest/meta-data".to_owned(),
        "http://[::1]:9/x".to_owned(),
        "http://localhost:9/x".to_owned(),
    ] {
        let p = hook("p", HookPhase::Pre, target.clone(), FailMode::Closed);
        let rec = h.pre(&[&p], &who(), json!({})).await;
        let failure = rec.decisions[0].failure.clone().unwrap();
        assert!(
            failure.contains("egress guard") || failure.contains("a loopback address"),
            "{target}: {failure}"
        );
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "nothing reached the receiver"
    );
}

#[test]
fn hooks_apply_by_phase_agent_and_tool_in_registration_order() {
    let mk = |name: &str, phase, tools: &[&str], agents: &[&str]| Hook {
        name: name.into(),
        content: HookContent {
            agents: agents.iter().map(|s| (*s).to_owned()).collect(),
            tools: tools.iter().map(|s| (*s).to_owned()).collect(),
            ..hook(name, phase, "https://h.example".into(), FailMode::Open).content
        },
    };
    let all = [
        mk("one", HookPhase::Pre, &["Memory"], &["*"]),
        mk("two", HookPhase::Post, &["Memory"], &["*"]),
        mk("three", HookPhase::Pre, &["mcp__gh__*"], &["triage"]),
        mk("four", HookPhase::Pre, &["*"], &["*"]),
    ];
    let names = |v: Vec<&Hook>| v.iter().map(|h| h.name.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(applicable(&all, HookPhase::Pre, "triage", "Memory")),
        ["one", "four"]
    );
    assert_eq!(
        names(applicable(&all, HookPhase::Pre, "triage", "mcp__gh__issue")),
        ["three", "four"]
    );
    assert_eq!(
        names(applicable(&all, HookPhase::Pre, "other", "mcp__gh__issue")),
        ["four"]
    );
    assert_eq!(
        names(applicable(&all, HookPhase::Post, "x", "Memory")),
        ["two"]
    );
}
