//! Golden files for what each driver sends: the request body of representative calls, as the
//! bytes `Upstream::post` puts on the wire, pinned under `golden/` and compared as JSON values
//! (`serde_json::Value` equality, so field order and whitespace do not count). A change to what
//! a driver sends shows up as a diff of these files; after reviewing it, regenerate them with
//! `UPDATE_GOLDEN=1 cargo test -p weft-router golden`.

use std::path::PathBuf;

use serde_json::{Map, Value, json};
use weft_core::message::{ContentBlock, Message, Role, ToolSpec};

use super::testing::{msg, tool_result, tool_use};
use super::{anthropic, deepseek, gemini, http, ollama, openai};
use crate::types::{ChatRequest, EmbedRequest, Sampling};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden")
}

/// Compares the body `sent` with the golden file `name` as JSON values (or writes the file, with
/// `UPDATE_GOLDEN=1`); returns the mismatch, if any.
fn check(name: &str, sent: &[u8]) -> Option<String> {
    let path = dir().join(name);
    let actual: Value = match serde_json::from_slice(sent) {
        Ok(v) => v,
        Err(e) => return Some(format!("{name}: the driver sent a body that is not JSON: {e}")),
    };
    let pretty = serde_json::to_string_pretty(&actual).unwrap() + "\n";
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(dir()).unwrap();
        std::fs::write(&path, pretty).unwrap();
        return None;
    }
    let want = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            return Some(format!(
                "{name}: {e} (create it with UPDATE_GOLDEN=1 cargo test -p weft-router golden)"
            ));
        }
    };
    match serde_json::from_str::<Value>(&want) {
        Ok(want) if want == actual => None,
        Ok(_) => Some(format!(
            "{name} differs (review, then UPDATE_GOLDEN=1 cargo test -p weft-router golden):\n--- golden\n{want}--- now\n{pretty}"
        )),
        Err(e) => Some(format!("{name}: the golden file is not JSON: {e}")),
    }
}

fn text(role: Role, t: &str) -> Message {
    msg(role, vec![ContentBlock::text(t)])
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Current weather in a city.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city's name."}},
                "required": ["city"],
            }),
        },
        ToolSpec {
            name: "get_time".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {}}),
        },
    ]
}

/// A streamed turn after a tool loop: system and developer instructions, a user question, an
/// assistant message with signed reasoning, text and a tool call (with an id most providers
/// reject, so it must go out normalised), the tool's result and a follow-up question; two tools,
/// `tool_choice: auto`, sampling and a user id.
fn tools_stream() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![
            text(Role::System, "Be brief."),
            text(Role::Developer, "Answer in English."),
            text(Role::User, "What's the weather in Paris?"),
            msg(
                Role::Assistant,
                vec![
                    ContentBlock::Reasoning {
                        text: "The user wants the weather; call the tool.".into(),
                        signature: Some("sig-1".into()),
                    },
                    ContentBlock::text("Let me check."),
                    tool_use("call.1/x", "get_weather", r#"{"city": "Paris"}"#),
                ],
            ),
            msg(Role::Tool, vec![tool_result("call.1/x", "18°C and sunny")]),
            text(Role::User, "Thanks! And the time there?"),
        ],
        tools: tools(),
        tool_choice: Some(json!("auto")),
        sampling: Sampling {
            temperature: Some(0.5),
            top_p: Some(0.9),
            max_tokens: Some(256),
            stop: vec!["END".into()],
            ..Sampling::default()
        },
        user: Some("u-1".into()),
        stream: true,
        ..ChatRequest::default()
    }
}

/// A non-streamed turn with an inline image and what else the provider takes: `extra`
/// pass-through fields, a response format, a named tool or a mode, the parameters it honours.
fn options(kind: &str) -> ChatRequest {
    let image = |url: &str| ContentBlock::Image {
        url: url.into(),
        detail: Some("low".into()),
    };
    let png = "data:image/png;base64,iVBORw0KGgo=";
    let mut user = msg(
        Role::User,
        vec![ContentBlock::text("What is in this image?"), image(png)],
    );
    user.name = Some("ada".into());
    let mut extra = Map::new();
    let mut req = ChatRequest {
        model: "m".into(),
        messages: vec![text(Role::System, "Describe images."), user],
        tools: tools(),
        sampling: Sampling {
            max_tokens: Some(100),
            temperature: Some(0.2),
            ..Sampling::default()
        },
        user: Some("u-2".into()),
        ..ChatRequest::default()
    };
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    match kind {
        "openai" => {
            extra.insert("logit_bias".into(), json!({"50256": -100}));
            extra.insert("parallel_tool_calls".into(), json!(false));
            extra.insert("stream_options".into(), json!({"include_usage": false}));
            req.tool_choice = Some(named);
            req.response_format = Some(json!({"type": "json_object"}));
            req.sampling.seed = Some(7);
            req.sampling.presence_penalty = Some(0.1);
            req.sampling.frequency_penalty = Some(-0.1);
        }
        "anthropic" => {
            req.messages[1]
                .content
                .push(image("https://example.com/cat.jpg"));
            extra.insert("parallel_tool_calls".into(), json!(false));
            extra.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": 1024}),
            );
            extra.insert("metadata".into(), json!({"trace": "t-1"}));
            extra.insert("stream".into(), json!(true));
            req.tool_choice = Some(named);
        }
        "gemini" => {
            req.messages[1]
                .content
                .push(image("https://example.com/cat.png?size=large"));
            extra.insert("top_k".into(), json!(40));
            extra.insert("thinking_config".into(), json!({"thinking_budget": 0}));
            req.tool_choice = Some(json!("required"));
            req.response_format = Some(json!({"type": "json_schema", "json_schema": {
                "name": "description",
                "schema": {
                    "type": "object",
                    "properties": {
                        "subject": {"type": ["string", "null"], "format": "email"},
                        "colours": {"type": "array", "items": {"enum": ["red", "green", 3]}},
                    },
                    "required": ["subject", "missing"],
                    "additionalProperties": false,
                },
            }}));
            req.sampling.seed = Some(7);
            req.sampling.stop = vec!["END".into()];
        }
        "deepseek" => {
            req.messages[1].content.truncate(1);
            extra.insert("thinking".into(), json!({"type": "disabled"}));
            req.tool_choice = Some(json!("none"));
            req.response_format = Some(json!({"type": "json_object"}));
            req.sampling.presence_penalty = Some(0.5);
        }
        "ollama" => {
            extra.insert("think".into(), json!("low"));
            extra.insert("keep_alive".into(), json!("5m"));
            extra.insert("top_k".into(), json!(40));
            extra.insert("min_p".into(), json!(null));
            req.tool_choice = Some(json!("none"));
            req.response_format = Some(json!({"type": "json_schema", "json_schema": {
                "schema": {"type": "object", "properties": {"subject": {"type": "string"}}},
            }}));
            req.sampling.seed = Some(7);
            req.sampling.stop = vec!["END".into()];
        }
        _ => unreachable!("{kind}"),
    }
    req.extra = extra;
    req
}

/// What each driver sends for `req`, as bytes.
fn chat_bytes(kind: &str, req: &ChatRequest) -> Vec<u8> {
    let body = match kind {
        "openai" => openai::chat_body("gpt-4o-mini", req),
        "anthropic" => anthropic::messages_body("claude-sonnet", req, 4096).unwrap(),
        "gemini" => gemini::request_body(req).unwrap(),
        "deepseek" => deepseek::chat_body("deepseek-chat", req).unwrap(),
        "ollama" => ollama::chat_body("llama3", req, Some(8192)).unwrap(),
        _ => unreachable!("{kind}"),
    };
    http::encode(&body).unwrap().to_vec()
}

const KINDS: [&str; 5] = ["openai", "anthropic", "gemini", "deepseek", "ollama"];

#[test]
fn golden_chat_request_bodies() {
    let mut bad = Vec::new();
    for kind in KINDS {
        bad.extend(check(
            &format!("{kind}-chat-tools-stream.json"),
            &chat_bytes(kind, &tools_stream()),
        ));
        bad.extend(check(
            &format!("{kind}-chat-options.json"),
            &chat_bytes(kind, &options(kind)),
        ));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}

#[test]
fn golden_embedding_request_bodies() {
    let req = EmbedRequest {
        model: "e".into(),
        input: vec!["first text".into(), "second \"quoted\" text".into()],
        dimensions: Some(256),
        user: Some("u-3".into()),
        ..EmbedRequest::default()
    };
    let bodies = [
        ("openai", openai::embed_body("text-embedding-3-small", &req)),
        ("gemini", gemini::embed_body("text-embedding-004", &req)),
        ("ollama", ollama::embed_body("nomic-embed-text", &req)),
    ];
    let mut bad = Vec::new();
    for (kind, body) in bodies {
        let bytes = http::encode(&body).unwrap();
        bad.extend(check(&format!("{kind}-embed.json"), &bytes));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}
