//! POST /a2a/rpc (A2A's JSON-RPC binding): a body decoded as the gateway's handler decodes it
//! before it calls anything (`weft_gateway::fuzzing::a2a_rpc`: the JSON, the id, the envelope,
//! the method, its params and a message's parts).
//!
//! Beyond "no panic": an error answer is a JSON-RPC 2.0 response whose `id` is a string, a
//! number or null, with one of A2A's or JSON-RPC's error codes and a message; a decoded message
//! gives a run a non-blank input; a decoded task call names a task.
#![expect(
    clippy::panic,
    reason = "fuzz targets are test code: a panic is how they report a broken property"
)]

use serde_json::Value;

/// The codes an answer may carry.
const CODES: [i64; 11] = [
    -32001, -32002, -32003, -32004, -32005, -32009, -32600, -32601, -32602, -32603, -32700,
];

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(body: &[u8]) {
    match weft_gateway::fuzzing::a2a_rpc(body) {
        Ok((method, input)) => match method.as_str() {
            "SendMessage" | "SendStreamingMessage" => {
                let text = input.unwrap_or_else(|| panic!("{method}: decoded without input"));
                assert!(!text.trim().is_empty(), "{method}: a blank run input");
            }
            "GetTask" | "CancelTask" => {
                assert!(input.is_some(), "{method}: decoded without a task id");
            }
            m => panic!("decoded a method weft does not serve: {m}"),
        },
        Err(answer) => {
            assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
            assert!(
                matches!(
                    answer["id"],
                    Value::String(_) | Value::Number(_) | Value::Null
                ),
                "an id that is not a string, a number or null: {answer}"
            );
            let code = answer["error"]["code"].as_i64().unwrap_or(0);
            assert!(CODES.contains(&code), "an unknown error code: {answer}");
            let message = answer["error"]["message"].as_str().unwrap_or("");
            assert!(!message.is_empty(), "an error without a message: {answer}");
            assert!(
                answer.get("result").is_none(),
                "an error with a result: {answer}"
            );
        }
    }
}
