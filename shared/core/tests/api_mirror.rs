//! weft-api's definition content types (which carry the OpenAPI schemas) mirror weft-core's
//! (which read, validate and hash definitions) field for field: the same JSON reads into both
//! and both write it back the same, defaults included, so the document describes what the
//! server stores and answers. Each kind's document example is also a valid definition.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use weft_core::def::DefContent;

/// `value` read by weft-core (and validated) and by weft-api, written back by each.
fn same<C: DefContent, A: Serialize + DeserializeOwned>(value: Value) {
    let core = C::from_json(value.clone()).unwrap_or_else(|e| panic!("{value}: {}", e.message));
    core.validate()
        .unwrap_or_else(|e| panic!("{value}: {}", e.message));
    let api: A = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{value}: {e}"));
    assert_eq!(
        serde_json::to_value(&core).unwrap(),
        serde_json::to_value(&api).unwrap(),
        "{value}"
    );
}

/// The example of a schema (`weft_api::json_schema::<T>()`), as the document gives it.
fn example(schema: Value) -> Value {
    let example = schema
        .get("example")
        .or_else(|| schema.get("examples").and_then(|e| e.get(0)))
        .cloned();
    example.unwrap_or_else(|| panic!("no example in {schema}"))
}

#[test]
fn agents() {
    use weft_api::agents::AgentContent as Api;
    use weft_core::agent::AgentContent as Core;
    same::<Core, Api>(example(weft_api::json_schema::<Api>()));
    same::<Core, Api>(json!({}));
    same::<Core, Api>(json!({
        "description": "triage", "tier": "fast", "system_prompt": "be brief",
        "tools": ["HTTP", "mcp__github__*"], "skills": ["summarise"], "mcp_servers": ["github"],
        "max_iterations": 1000, "max_tokens": 4096,
        "sampling": {"temperature": 0.2, "top_p": 1, "seed": -7, "stop": ["END"]},
        "memory_scopes": ["run", "tenant"], "channels": {"publish": ["a"], "subscribe": ["b.*"]},
        "max_concurrent_children": 64, "allowed_hosts": ["*.example.com"],
        "compaction": {"auto_percent": 80, "model": "tier:cheap"},
        "a2a": {"expose": true, "tags": ["support"], "examples": ["how do I rotate a key?"]}
    }));
    same::<Core, Api>(json!({"tools": ["a2a__support__*"], "a2a": {}}));
}

#[test]
fn a2a_peers() {
    use weft_api::a2a::A2aPeerContent as Api;
    use weft_core::a2a_peer::A2aPeerContent as Core;
    same::<Core, Api>(example(weft_api::json_schema::<Api>()));
    same::<Core, Api>(json!({"card_url": "https://peer.example/.well-known/agent-card.json"}));
}

#[test]
fn skills() {
    use weft_api::skills::SkillContent as Api;
    use weft_core::skill::SkillContent as Core;
    same::<Core, Api>(example(weft_api::json_schema::<Api>()));
    same::<Core, Api>(json!({"description": "d", "body": "b"}));
}

#[test]
fn mcp_servers() {
    use weft_api::mcp::McpServerContent as Api;
    use weft_core::mcp::McpServerContent as Core;
    same::<Core, Api>(example(weft_api::json_schema::<Api>()));
    same::<Core, Api>(json!({"url": "https://mcp.example.com/mcp", "timeout_ms": 1000}));
}

#[test]
fn schedules() {
    use weft_api::ingress::ScheduleContent as Api;
    use weft_core::schedule::ScheduleContent as Core;
    same::<Core, Api>(example(weft_api::json_schema::<Api>()));
    same::<Core, Api>(json!({"cron": "@daily", "agent": "a", "input": "go"}));
    same::<Core, Api>(json!({
        "cron": "*/30 * * * * *", "agent": "a", "input": "go", "metadata": {"k": [1]},
        "enabled": false, "max_fires": 3, "catch_up_max": 2, "overlap": "allow",
        "on_complete": [
            {"action": "memory.set", "key": "k", "value": "{{run.final_text}}"},
            {"action": "memory.set", "key": "k", "value": "v", "scope": "agent", "ttl_seconds": 60},
            {"action": "channel.publish", "channel": "c", "message": "{{run.id}}"}
        ]
    }));
}

#[test]
fn webhooks() {
    use weft_api::ingress::WebhookContent as Api;
    use weft_core::webhook::WebhookContent as Core;
    same::<Core, Api>(example(weft_api::json_schema::<Api>()));
    same::<Core, Api>(json!({
        "channel": "events", "signature": "standard-webhooks", "secret_env": "WEFT_WEBHOOK_A__B",
        "delivery_id_header": "x-id", "rate_limit": {"per_minute": 60}, "max_body_bytes": 1024,
        "tolerance_secs": 60, "allow_sync": false
    }));
    same::<Core, Api>(json!({
        "agent": "a", "secret_env": "WEFT_WEBHOOK_A__B", "header": "x-sig",
        "rate_limit": {"per_minute": 60, "burst": 5}, "allow_sync": true, "sync_timeout_ms": 5000
    }));
}
