use super::*;

fn card(v: Value) -> AgentCard {
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_jsonrpc_interface_of_version_one_is_chosen() {
    let c = card(json!({
        "name": "p", "description": "d", "version": "1", "capabilities": {},
        "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
        "supportedInterfaces": [
            {"url": "http://p/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://p/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://p/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ]
    }));
    assert_eq!(interface(&c), Some(("http://p/rpc".into(), true)));
    let rest_only = card(json!({
        "name": "p", "description": "d", "version": "1", "capabilities": {},
        "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
        "supportedInterfaces": [{"url": "http://p/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}]
    }));
    assert_eq!(interface(&rest_only), Some(("http://p/rest".into(), false)));
    let old = card(json!({
        "name": "p", "description": "d", "version": "1", "capabilities": {},
        "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
        "supportedInterfaces": [{"url": "http://p/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]
    }));
    assert_eq!(interface(&old), None);
}

#[test]
fn tools_are_permitted_by_peer_and_skill_glob() {
    let allowed = vec!["a2a__echo__*".to_owned(), "a2a__other__triage".to_owned()];
    assert!(permitted(&allowed, "echo", "anything"));
    assert!(permitted(&allowed, "other", "triage"));
    assert!(!permitted(&allowed, "other", "delete"));
    assert!(!permitted(&["mcp__echo__*".to_owned()], "echo", "x"));
}

#[test]
fn credentials_fill_headers_and_are_redacted() {
    let content = A2aPeerContent {
        card_url: "https://p.example".into(),
        headers: [(
            "Authorization".to_owned(),
            "Bearer ${run.credentials.k}".to_owned(),
        )]
        .into(),
        ..A2aPeerContent::default()
    };
    let creds: BTreeMap<String, String> = [("k".to_owned(), "s3cret-value".to_owned())].into();
    let h = headers_of(&content, &creds).unwrap();
    assert_eq!(h["authorization"], "Bearer s3cret-value");
    assert!(h["authorization"].is_sensitive());
    let e = headers_of(&content, &BTreeMap::new()).unwrap_err();
    assert!(e.contains("credential `k`"), "{e}");
    assert_eq!(
        redact("echo: s3cret-value!", &creds),
        "echo: [redacted: credential k]!"
    );
}

fn seen_of(events: Vec<Value>) -> Seen {
    let mut s = Seen::default();
    for e in events {
        take_event(e, true, &mut s).unwrap();
    }
    s
}

#[test]
fn a_streamed_task_becomes_the_result_and_its_updates() {
    let s = seen_of(vec![
        json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t1", "contextId": "c", "status": {"state": "TASK_STATE_SUBMITTED"}}}}),
        json!({"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": {"taskId": "t1", "contextId": "c",
            "status": {"state": "TASK_STATE_WORKING", "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "thinking"}]}}}}}),
        json!({"jsonrpc": "2.0", "id": 1, "result": {"artifactUpdate": {"taskId": "t1", "contextId": "c",
            "artifact": {"artifactId": "a", "parts": [{"text": "echo: "}]}}}}),
        json!({"jsonrpc": "2.0", "id": 1, "result": {"artifactUpdate": {"taskId": "t1", "contextId": "c", "append": true,
            "artifact": {"artifactId": "a", "parts": [{"text": "hi"}]}}}}),
        json!({"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": {"taskId": "t1", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED"}}}}),
    ]);
    let out = s.outcome("echo");
    assert!(!out.is_error);
    assert_eq!(out.text, "echo: hi");
    let states: Vec<&str> = s.updates.iter().map(|u| u.state.as_str()).collect();
    assert_eq!(
        states,
        [
            "TASK_STATE_WORKING",
            "artifact",
            "artifact",
            "TASK_STATE_COMPLETED"
        ]
    );
    assert_eq!(s.updates[0].text, "thinking");
}

#[test]
fn a_question_failure_or_error_is_said_plainly() {
    let s = seen_of(vec![json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {
        "id": "t9", "contextId": "c",
        "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "your name?"}]}}}}})]);
    let out = s.outcome("echo");
    assert!(!out.is_error);
    assert!(
        out.text.contains("your name?") && out.text.contains("\"t9\""),
        "{}",
        out.text
    );
    let s = seen_of(vec![
        json!({"result": {"task": {"id": "t", "contextId": "c",
        "status": {"state": "TASK_STATE_FAILED", "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "boom"}]}}}}, "jsonrpc": "2.0", "id": 1}),
    ]);
    let out = s.outcome("echo");
    assert!(out.is_error && out.text.contains("boom"), "{}", out.text);
    let mut s = Seen::default();
    let e = take_result(
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "no skill"}}),
        true,
        &mut s,
    )
    .unwrap_err();
    assert_eq!(e, "error -32602: no skill");
    let e = take_result(
        json!({"error": {"code": 404, "message": "Task not found"}}),
        false,
        &mut s,
    )
    .unwrap_err();
    assert!(e.contains("Task not found"));
    let s = seen_of(vec![
        json!({"jsonrpc": "2.0", "id": 1, "result": {"message": {
        "messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "plain reply"}]}}}),
    ]);
    assert_eq!(s.outcome("echo").text, "plain reply");
}

#[test]
fn ip_literals_are_checked_against_the_address_policy() {
    let cfg = ExecutorConfig::default();
    let c = A2aClient::new(&cfg).unwrap();
    assert!(c.check("http://127.0.0.1:9/card").is_err());
    assert!(c.check("http://[::1]:9/card").is_err());
    assert!(c.check("file:///etc/passwd").is_err());
    assert!(c.check("https://peer.example.com/card").is_ok());
    let exempt = ExecutorConfig {
        http_private_exempt: vec!["127.0.0.1/32".into()],
        ..ExecutorConfig::default()
    };
    assert!(
        A2aClient::new(&exempt)
            .unwrap()
            .check("http://127.0.0.1:9/card")
            .is_ok()
    );
}

#[test]
fn long_tool_names_fit_providers_and_stay_apart() {
    assert_eq!(tool_name("echo", "echo", "echo"), "a2a__echo__echo");
    let peer = "p".repeat(40);
    let a = tool_name(&peer, &"s".repeat(60), "a");
    let b = tool_name(&peer, &"s".repeat(60), "b");
    assert!(
        a.len() <= MAX_TOOL_NAME && b.len() <= MAX_TOOL_NAME,
        "{a} {b}"
    );
    assert_ne!(a, b);
    assert_eq!(split_tool(&a).map(|(p, _)| p), Some(peer.as_str()));
}

#[test]
fn headers_go_only_to_the_cards_origin() {
    assert!(same_origin(
        "https://p.example/a2a/rpc",
        "https://p.example/.well-known/agent-card.json"
    ));
    assert!(!same_origin(
        "https://evil.example/rpc",
        "https://p.example/card"
    ));
    assert!(!same_origin(
        "http://p.example/rpc",
        "https://p.example/card"
    ));
    assert!(!same_origin(
        "https://p.example:8443/rpc",
        "https://p.example/card"
    ));
}

#[test]
fn updates_are_bounded() {
    let mut s = Seen::default();
    for i in 0..(MAX_UPDATES + 50) {
        s.update(PeerUpdate {
            text: format!("{i}{}", "x".repeat(MAX_UPDATE_CHARS + 10)),
            ..PeerUpdate::default()
        });
    }
    assert_eq!(s.updates.len(), MAX_UPDATES);
    assert!(
        s.updates
            .last()
            .unwrap()
            .text
            .starts_with(&(MAX_UPDATES + 49).to_string())
    );
    assert!(s.updates[0].text.ends_with(" [cut]"));
}
