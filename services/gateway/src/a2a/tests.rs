use serde_json::json;

use super::*;

#[test]
fn the_envelope_is_checked_before_the_method() {
    let e =
        envelope(json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}))
            .unwrap();
    assert_eq!(
        (e.method.as_str(), &e.params),
        ("GetTask", &json!({"id": "x"}))
    );
    for bad in [
        json!([{"jsonrpc": "2.0", "method": "GetTask"}]),
        json!({"jsonrpc": "1.0", "method": "GetTask"}),
        json!({"jsonrpc": "2.0", "method": 7}),
        json!({"jsonrpc": "2.0"}),
        json!("GetTask"),
    ] {
        let f = envelope(bad.clone())
            .err()
            .unwrap_or_else(|| panic!("{bad} passed"));
        assert_eq!(f.rpc()["code"], -32600, "{bad}");
    }
    let f = params::<GetTaskRequest>(json!([1])).unwrap_err();
    assert_eq!(f.rpc()["code"], -32602);
    let f = params::<GetTaskRequest>(json!({"historyLength": 2})).unwrap_err();
    assert_eq!(f.rpc()["code"], -32602, "id is required");
}

#[test]
fn another_major_version_is_refused() {
    let mut h = HeaderMap::new();
    assert!(check_version(&h).is_ok(), "no header: this version");
    for ok in ["1.0", "1", "1.0.0"] {
        h.insert(wire::VERSION_HEADER, HeaderValue::from_static(ok));
        assert!(check_version(&h).is_ok(), "{ok}");
    }
    h.insert(wire::VERSION_HEADER, HeaderValue::from_static("0.3"));
    let f = check_version(&h).unwrap_err();
    assert_eq!(f.rpc()["code"], -32009);
    assert_eq!(f.rest_body()["error"]["code"], 400);
}

#[test]
fn errors_echo_the_request_id() {
    let f = Fail::new(A2aError::TaskNotFound, "no task `x`");
    assert_eq!(
        rpc_error_body(&json!(7), &f),
        json!({"jsonrpc": "2.0", "id": 7, "error": {
            "code": -32001, "message": "no task `x`",
            "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                      "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org", "metadata": {}}]
        }})
    );
}
