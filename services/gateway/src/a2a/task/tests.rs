use serde_json::json;

use super::*;

fn ev(seq: i64, kind: &str, data: Value) -> Value {
    json!({"seq": seq, "kind": kind, "data": data})
}

fn said(text: &str, tool: bool) -> Value {
    let mut content = vec![json!({"type": "text", "text": text})];
    if tool {
        content
            .push(json!({"type": "tool_use", "id": "t1", "name": "Context", "input_json": "{}"}));
    }
    json!({"message": {"role": "assistant", "content": content}})
}

fn states(evs: &[StreamResponse]) -> Vec<String> {
    evs.iter()
        .map(|e| match e {
            StreamResponse::Task(t) => format!("task:{}", state_name(t.status.state)),
            StreamResponse::StatusUpdate(s) => state_name(s.status.state).to_owned(),
            StreamResponse::ArtifactUpdate(a) => format!(
                "artifact:{}",
                a.artifact.parts[0].text.clone().unwrap_or_default()
            ),
            StreamResponse::Message(_) => "message".into(),
        })
        .collect()
}

fn run_through(events: &[Value]) -> (Vec<StreamResponse>, bool) {
    let mut tr = Translator::new("r1".into(), "c1".into());
    let mut out = Vec::new();
    for e in events {
        let (evs, end) = tr.on(e);
        out.extend(evs);
        if end {
            return (out, true);
        }
    }
    (out, false)
}

#[test]
fn a_run_that_succeeds_streams_working_then_its_answer_then_completed() {
    let (out, end) = run_through(&[
        ev(1, "run_started", json!({})),
        ev(2, "user_input", json!({"text": "hi"})),
        ev(0, "text_delta", json!({"text": "lo"})),
        ev(3, "assistant_message", said("looking", true)),
        ev(4, "tool_call", json!({})),
        ev(5, "assistant_message", said("the answer", false)),
        ev(
            6,
            "run_finished",
            json!({"status": "succeeded", "stop_reason": "end_turn"}),
        ),
        ev(7, "run_started", json!({})),
    ]);
    assert!(end);
    assert_eq!(
        states(&out),
        [
            "TASK_STATE_WORKING",
            "TASK_STATE_WORKING",
            "artifact:the answer",
            "TASK_STATE_COMPLETED"
        ]
    );
    let StreamResponse::StatusUpdate(s) = &out[1] else {
        panic!("not a status")
    };
    assert_eq!(s.status.message.as_ref().unwrap().text(), "looking");
    assert_eq!((s.task_id.as_str(), s.context_id.as_str()), ("r1", "c1"));
    assert!(s.status.timestamp.as_deref().unwrap().contains('T'));
}

#[test]
fn an_interruption_ends_the_stream_with_its_question() {
    let (out, end) = run_through(&[
        ev(1, "run_started", json!({})),
        ev(
            2,
            "interruption",
            json!({"id": "int_1", "question": "which colour?"}),
        ),
        ev(3, "awaiting_input", json!({"reason": "interruption"})),
    ]);
    assert!(end);
    assert_eq!(
        states(&out),
        ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]
    );
    let StreamResponse::StatusUpdate(s) = &out[1] else {
        panic!("not a status")
    };
    let m = s.status.message.as_ref().unwrap();
    assert_eq!((m.role, m.text().as_str()), (Role::Agent, "which colour?"));
}

#[test]
fn failures_and_cancellations_end_the_stream() {
    let (out, _) = run_through(&[
        ev(
            1,
            "error",
            json!({"code": "upstream", "message": "provider down"}),
        ),
        ev(
            2,
            "run_finished",
            json!({"status": "failed", "stop_reason": "error"}),
        ),
    ]);
    assert_eq!(states(&out), ["TASK_STATE_WORKING", "TASK_STATE_FAILED"]);
    let StreamResponse::StatusUpdate(s) = &out[1] else {
        panic!("not a status")
    };
    assert_eq!(s.status.message.as_ref().unwrap().text(), "provider down");
    let (out, _) = run_through(&[ev(
        1,
        "run_finished",
        json!({"status": "cancelled", "stop_reason": "cancelled"}),
    )]);
    assert_eq!(states(&out), ["TASK_STATE_CANCELED"]);
}

#[tokio::test]
async fn the_stream_starts_with_the_snapshot_and_stops_at_the_end() {
    let body = [
        ": keepalive\n\n".to_owned(),
        format!("data: {}\n\n", ev(1, "run_started", json!({}))),
        format!(
            "data: {}\n\n",
            ev(2, "assistant_message", said("done", false))
        ),
        format!(
            "data: {}\n\n",
            ev(3, "run_finished", json!({"status": "succeeded"}))
        ),
        format!("data: {}\n\n", ev(4, "run_started", json!({}))),
    ]
    .concat();
    let frames = sse_read::frames(axum::body::Body::from(body).into_data_stream());
    let snapshot = Task {
        id: "r1".into(),
        ..Task::default()
    };
    let tr = Translator::new("r1".into(), "c1".into());
    let got: Vec<_> = translate(frames, tr, vec![StreamResponse::Task(snapshot)])
        .collect()
        .await;
    let got: Vec<StreamResponse> = got.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        states(&got),
        [
            "task:TASK_STATE_UNSPECIFIED",
            "TASK_STATE_WORKING",
            "artifact:done",
            "TASK_STATE_COMPLETED"
        ]
    );
    let broken = sse_read::frames(
        axum::body::Body::from(
            "event: error\ndata: {\"code\":\"unavailable\",\"message\":\"nats is down\"}\n\n",
        )
        .into_data_stream(),
    );
    let tr = Translator::new("r1".into(), "c1".into());
    let got: Vec<_> = translate(broken, tr, Vec::new()).collect().await;
    let f = got.into_iter().next().unwrap().unwrap_err();
    assert_eq!(f.rpc()["message"], "nats is down");
    assert_eq!(f.rpc()["data"][0]["metadata"]["weft_code"], "unavailable");
}

#[test]
fn a_task_is_its_run() {
    let run = json!({
        "run_id": "r1", "status": "awaiting_input", "agent": "a",
        "metadata": {"a2a_context_id": "c9"},
        "pending_interrupt": {"id": "int_1", "question": "name?"},
        "created_at": "2026-11-30T10:00:00Z"
    });
    let events = [
        ev(1, "run_started", json!({})),
        ev(2, "user_input", json!({"text": "hello"})),
        ev(3, "assistant_message", said("let me ask", true)),
    ];
    let t = task_of(&run, &events, None, Vec::new());
    assert_eq!((t.id.as_str(), t.context_id.as_str()), ("r1", "c9"));
    assert_eq!(t.status.state, TaskState::InputRequired);
    assert_eq!(t.status.message.as_ref().unwrap().text(), "name?");
    assert_eq!(t.history.len(), 2);
    assert_eq!(
        (t.history[0].role, t.history[0].text().as_str()),
        (Role::User, "hello")
    );
    assert_eq!(t.history[1].message_id, "r1:3");
    assert!(t.artifacts.is_empty());
    assert_eq!(task_of(&run, &events, Some(1), Vec::new()).history.len(), 1);
    assert!(
        task_of(&run, &events, Some(0), Vec::new())
            .history
            .is_empty()
    );

    let done = json!({"run_id": "r1", "status": "succeeded", "metadata": {"a2a_context_id": "c9"},
                      "finished_at": "2026-11-30T10:00:01Z"});
    let t = task_of(&done, &events, None, Vec::new());
    assert_eq!(t.status.state, TaskState::Completed);
    assert_eq!(t.artifacts[0].parts[0].text.as_deref(), Some("let me ask"));
    assert_eq!(t.status.timestamp.as_deref(), Some("2026-11-30T10:00:01Z"));
    let failed = json!({"run_id": "r1", "status": "failed", "error": {"message": "boom"}});
    let t = task_of(&failed, &[], None, Vec::new());
    assert_eq!(t.status.message.unwrap().text(), "boom");
    assert_eq!(
        t.context_id, "r1",
        "no context id in metadata: the run's id"
    );
}

#[test]
fn a_message_gives_a_run_its_text_and_data_but_not_files() {
    let m = |parts: Value| -> Message {
        serde_json::from_value(json!({"messageId": "m", "role": "ROLE_USER", "parts": parts}))
            .unwrap()
    };
    assert_eq!(
        input_text(&m(json!([{"text": "a"}, {"data": {"k": 1}}]))).unwrap(),
        "a\n\n{\"k\":1}"
    );
    let f = input_text(&m(json!([{"url": "https://x/y.png"}]))).unwrap_err();
    assert_eq!(f.kind, A2aError::ContentTypeNotSupported);
    let f = input_text(&m(json!([{"text": "a", "data": 1}]))).unwrap_err();
    assert_eq!(f.kind, A2aError::InvalidParams);
    let f = input_text(&m(json!([{"text": "  "}]))).unwrap_err();
    assert_eq!(f.kind, A2aError::InvalidParams);
}

#[test]
fn rest_errors_keep_their_status_where_it_says_more() {
    let mut h = HeaderMap::new();
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("3"));
    let body = br#"{"error":{"code":"tenant_concurrency_exhausted","message":"too many runs"}}"#;
    let f = Fail::of_rest(429, &h, body, A2aError::InvalidParams);
    assert_eq!(f.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(f.rpc()["code"], -32603);
    assert_eq!(f.rest_body()["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(f.rest().headers()[header::RETRY_AFTER], "3");
    let f = Fail::of_rest(404, &h, b"{}", A2aError::TaskNotFound);
    assert_eq!(
        (f.rpc()["code"].as_i64(), f.status()),
        (Some(-32001), StatusCode::NOT_FOUND)
    );
    assert_eq!(
        f.rest_body()["error"]["details"][0]["reason"],
        "TASK_NOT_FOUND"
    );
}
