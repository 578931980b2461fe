//! The embedded `mock` provider: deterministic, configurable per model, no key and no network.
//!
//! Behaviour of one turn: after a `tool` message it reports the tool's output; when tools are
//! offered (and `tool_choice` is not `none`) it calls one tool with the configured arguments;
//! otherwise it echoes the last user message. A user or system message may carry a script
//! instead — a line `#mock {"turns": [[{"name": "T", "input": {…}}, …], …], "reply": "…"}` —
//! and then turn k after it makes the tool calls of `turns[k]` (in parallel when several) and,
//! once the turns are used up, answers `reply` (or echoes). Tool-call ids are derived from the
//! conversation (`call_<turn>_<i>`), so a run resumed elsewhere gets the same ids. Latency, jitter, per-token delay and 429/500
//! injection rates come from config, drawn from a seeded sequence so runs are repeatable.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use weft_config::{MockModelConfig, MockProviderConfig};
use weft_core::message::{FinishReason, Role, Usage};
use weft_core::{Error, ErrorCode};

use super::{Case, EventStream, ProviderError, Unsupported};
use crate::types::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult};

/// The mock has no upstream wire, so the wire-level failure cases cannot happen to it.
pub const UNSUPPORTED: &[Unsupported] = &[
    Unsupported {
        case: Case::BrokenStream,
        reason: "the mock has no upstream connection to break",
    },
    Unsupported {
        case: Case::Malformed,
        reason: "the mock has no upstream body to be malformed",
    },
];

pub struct MockProvider {
    name: String,
    models: BTreeMap<String, MockModel>,
}

struct MockModel {
    cfg: MockModelConfig,
    calls: AtomicU64,
}

impl MockProvider {
    pub fn new(name: &str, cfg: &MockProviderConfig) -> Self {
        Self {
            name: name.to_owned(),
            models: cfg
                .models
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        MockModel {
                            cfg: v.clone(),
                            calls: AtomicU64::new(0),
                        },
                    )
                })
                .collect(),
        }
    }

    pub fn has_model(&self, model: &str) -> bool {
        self.models.contains_key(model)
    }

    fn model(&self, model: &str) -> Result<&MockModel, ProviderError> {
        self.models.get(model).ok_or_else(|| {
            ProviderError::fatal(
                Error::new(
                    ErrorCode::ModelNotFound,
                    format!("mock provider `{}` has no model `{model}`", self.name),
                )
                .with_param("model"),
            )
        })
    }

    pub async fn chat(&self, model: &str, req: &ChatRequest) -> Result<EventStream, ProviderError> {
        let m = self.model(model)?;
        let draw = m.draw();
        m.delay(draw).await;
        self.inject(m, draw)?;
        let plan = plan_turn(&m.cfg, req);
        let prompt_tokens = estimate_tokens(req);
        let token_delay = Duration::from_millis(m.cfg.token_delay_ms);
        let mut events: Vec<ChatEvent> = Vec::new();
        let completion_tokens;
        match plan {
            Turn::Text(text) => {
                // One word is one token; `max_tokens` cuts the answer like a real model's.
                let mut words: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
                let cap = req.sampling.max_tokens.map_or(usize::MAX, |m| m as usize);
                let finish = if words.len() > cap {
                    words.truncate(cap);
                    FinishReason::Length
                } else {
                    FinishReason::Stop
                };
                completion_tokens = words.len() as u64;
                events.extend(words.into_iter().map(ChatEvent::TextDelta));
                events.push(ChatEvent::Usage(usage(prompt_tokens, completion_tokens)));
                events.push(ChatEvent::Finish(finish));
            }
            Turn::ToolCalls(calls) => {
                completion_tokens = 8 * calls.len() as u64;
                let turn = turn_number(req);
                for (i, (name, arguments)) in (0u32..).zip(calls) {
                    events.push(ChatEvent::ToolCallStart {
                        index: i,
                        id: format!("call_{turn}_{i}"),
                        name,
                    });
                    events.push(ChatEvent::ToolCallDelta {
                        index: i,
                        arguments,
                    });
                }
                events.push(ChatEvent::Usage(usage(prompt_tokens, completion_tokens)));
                events.push(ChatEvent::Finish(FinishReason::ToolCalls));
            }
        }
        let stream = futures::stream::iter(events.into_iter().map(Ok));
        if token_delay.is_zero() {
            Ok(Box::pin(stream))
        } else {
            // Paced between events: the first piece of the answer comes at once, like a real
            // stream's first token, and each later one `token_delay` after the previous.
            Ok(Box::pin(stream.enumerate().then(
                move |(i, e)| async move {
                    if i > 0 {
                        tokio::time::sleep(token_delay).await;
                    }
                    e
                },
            )))
        }
    }

    pub async fn embed(
        &self,
        model: &str,
        req: &EmbedRequest,
    ) -> Result<EmbedResult, ProviderError> {
        let m = self.model(model)?;
        let draw = m.draw();
        m.delay(draw).await;
        self.inject(m, draw)?;
        let dims = req.dimensions.unwrap_or(m.cfg.embedding_dims).max(1);
        let vectors = req.input.iter().map(|s| embed_text(s, dims)).collect();
        let tokens: u64 = req
            .input
            .iter()
            .map(|s| (s.len() as u64).div_ceil(4).max(1))
            .sum();
        Ok(EmbedResult {
            provider: self.name.clone(),
            model: model.to_owned(),
            vectors,
            usage: Usage::new(tokens, 0),
        })
    }

    fn inject(&self, m: &MockModel, draw: u64) -> Result<(), ProviderError> {
        let r = unit(draw);
        if r < m.cfg.error_rate_429 {
            return Err(ProviderError::rate_limited(
                &self.name,
                Some(Duration::from_secs(1)),
            ));
        }
        if r < m.cfg.error_rate_429 + m.cfg.error_rate_500 {
            return Err(ProviderError::retryable(Error::new(
                ErrorCode::UpstreamError,
                format!("provider `{}` failed (injected 500)", self.name),
            )));
        }
        Ok(())
    }
}

impl MockModel {
    /// The next value of this model's seeded sequence.
    fn draw(&self) -> u64 {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        splitmix64(self.cfg.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    async fn delay(&self, draw: u64) {
        let jitter = if self.cfg.jitter_ms == 0 {
            0
        } else {
            splitmix64(draw) % (self.cfg.jitter_ms + 1)
        };
        let total = self.cfg.latency_ms + jitter;
        if total > 0 {
            tokio::time::sleep(Duration::from_millis(total)).await;
        }
    }
}

enum Turn {
    Text(String),
    /// `(name, JSON arguments)` of each call.
    ToolCalls(Vec<(String, String)>),
}

/// A `#mock` script: tool calls per turn, then a reply.
#[derive(serde::Deserialize)]
struct Script {
    #[serde(default)]
    turns: Vec<Vec<ScriptCall>>,
    reply: Option<String>,
}

#[derive(serde::Deserialize)]
struct ScriptCall {
    name: String,
    #[serde(default)]
    input: serde_json::Value,
}

/// The newest script in the conversation and how many assistant turns followed it.
fn find_script(req: &ChatRequest) -> Option<(Script, usize)> {
    let (at, script) = req.messages.iter().enumerate().rev().find_map(|(i, m)| {
        if !matches!(m.role, Role::User | Role::System) {
            return None;
        }
        let text = m.text();
        let line = text.lines().find_map(|l| l.trim().strip_prefix("#mock "))?;
        serde_json::from_str::<Script>(line).ok().map(|s| (i, s))
    })?;
    let after = req.messages[at..]
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count();
    // Turns a compaction folded out of the view still count.
    let shown = req
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count();
    Some((script, after + (turn_number(req) - shown)))
}

/// The number of this turn: the assistant messages before it, or — when a compaction folded
/// some of them away — one more than the highest turn named by a tool-call id it made
/// (`call_<turn>_<i>`), so ids never repeat within a run.
fn turn_number(req: &ChatRequest) -> usize {
    let shown = req
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count();
    let named = req
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            weft_core::message::ContentBlock::ToolUse { id, .. } => id
                .strip_prefix("call_")
                .and_then(|r| r.split('_').next())
                .and_then(|t| t.parse::<usize>().ok())
                .map(|t| t + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    shown.max(named)
}

fn plan_turn(cfg: &MockModelConfig, req: &ChatRequest) -> Turn {
    if let Some((script, k)) = find_script(req) {
        if let Some(calls) = script.turns.get(k) {
            return Turn::ToolCalls(
                calls
                    .iter()
                    .map(|c| {
                        let args = if c.input.is_null() {
                            "{}".to_owned()
                        } else {
                            c.input.to_string()
                        };
                        (c.name.clone(), args)
                    })
                    .collect(),
            );
        }
        if let Some(reply) = script.reply {
            return Turn::Text(reply);
        }
    }
    let last = req.messages.last();
    if let Some(m) = last.filter(|m| m.role == Role::Tool) {
        return Turn::Text(format!("the tool returned: {}", m.text()));
    }
    let choice = req.tool_choice.as_ref();
    let none = choice.and_then(|c| c.as_str()) == Some("none");
    if cfg.tool_calls && !none && !req.tools.is_empty() {
        let named = choice
            .and_then(|c| c.pointer("/function/name"))
            .and_then(|n| n.as_str())
            .filter(|n| req.tools.iter().any(|t| t.name == *n));
        let name = named.map_or_else(|| req.tools[0].name.clone(), str::to_owned);
        let args = if cfg.tool_arguments.trim() == "{}" {
            let schema = req
                .tools
                .iter()
                .find(|t| t.name == name)
                .map(|t| &t.parameters);
            let mut text = last_user_text(req);
            if text.len() > 200 {
                let mut at = 200;
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                text.truncate(at);
            }
            schema
                .map(|s| arguments_for(s, &text).to_string())
                .unwrap_or_else(|| "{}".to_owned())
        } else {
            cfg.tool_arguments.clone()
        };
        return Turn::ToolCalls(vec![(name, args)]);
    }
    Turn::Text(format!("echo: {}", last_user_text(req)))
}

fn last_user_text(req: &ChatRequest) -> String {
    req.messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| m.text())
        .unwrap_or_default()
}

/// Arguments that satisfy a tool's JSON schema as far as a model without a script can: every
/// required property, with its `const`, its first `enum` value, its `default`, or a value of
/// its type (the first free string gets the user's words, so a `query` asks what was asked).
/// Optional properties are left out. Without a schema of an object: `{}`. The schema is the
/// caller's, so the work is bounded: at most [`MAX_GENERATED`] values, 8 levels deep and 2 items
/// an array; past that a value is `null`.
fn arguments_for(schema: &serde_json::Value, user_text: &str) -> serde_json::Value {
    use serde_json::{Map, Value};
    struct Gen<'a> {
        text: Option<&'a str>,
        budget: usize,
    }
    fn value_of(s: &Value, g: &mut Gen<'_>, depth: u8) -> Value {
        if g.budget == 0 || depth > 8 {
            return Value::Null;
        }
        g.budget -= 1;
        if let Some(v) = s.get("const") {
            return v.clone();
        }
        if let Some(v) = s
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|e| e.first())
        {
            return v.clone();
        }
        if let Some(v) = s.get("default") {
            return v.clone();
        }
        let ty = match s.get("type") {
            Some(Value::String(t)) => t.as_str(),
            // `["string", "null"]`: the first type that is not null.
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .find(|t| *t != "null")
                .unwrap_or("null"),
            _ if s.get("properties").is_some() => "object",
            _ => match s
                .get("anyOf")
                .or_else(|| s.get("oneOf"))
                .and_then(Value::as_array)
                .and_then(|a| a.first())
            {
                Some(first) => return value_of(first, g, depth + 1),
                None => "null",
            },
        };
        match ty {
            "string" => {
                let min = s.get("minLength").and_then(Value::as_u64).unwrap_or(0);
                let words = g.text.take().filter(|t| !t.trim().is_empty());
                let v = words.map_or_else(|| "example".to_owned(), str::to_owned);
                let pad = usize::try_from(min.min(1024))
                    .unwrap_or(0)
                    .saturating_sub(v.chars().count());
                Value::String(format!("{v}{}", "x".repeat(pad)))
            }
            "integer" | "number" => s
                .get("minimum")
                .or_else(|| s.get("exclusiveMinimum"))
                .cloned()
                .unwrap_or_else(|| Value::from(1)),
            "boolean" => Value::Bool(false),
            "array" => {
                let min = s
                    .get("minItems")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    .min(2);
                let item = s.get("items").cloned().unwrap_or(Value::Null);
                Value::Array((0..min).map(|_| value_of(&item, g, depth + 1)).collect())
            }
            "object" => object_of(s, g, depth + 1),
            _ => Value::Null,
        }
    }
    fn object_of(s: &Value, g: &mut Gen<'_>, depth: u8) -> Value {
        let mut out = Map::new();
        let props = s.get("properties").and_then(Value::as_object);
        for name in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if out.contains_key(name) {
                continue;
            }
            let prop = props.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
            let v = value_of(prop, g, depth);
            out.insert(name.to_owned(), v);
        }
        Value::Object(out)
    }
    let mut g = Gen {
        text: Some(user_text),
        budget: MAX_GENERATED,
    };
    match schema {
        Value::Object(_) => object_of(schema, &mut g, 0),
        _ => Value::Object(Map::new()),
    }
}

/// The most values [`arguments_for`] builds for one call.
const MAX_GENERATED: usize = 256;

fn estimate_tokens(req: &ChatRequest) -> u64 {
    let chars: usize = req.messages.iter().map(|m| m.text().len()).sum();
    (chars as u64).div_ceil(4).max(1)
}

fn usage(prompt: u64, completion: u64) -> Usage {
    Usage::new(prompt, completion)
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Maps a draw to [0, 1).
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// A deterministic unit-length vector for `s`.
fn embed_text(s: &str, dims: u32) -> Vec<f32> {
    let mut seed: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        seed = (seed ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let raw: Vec<f64> = (0..u64::from(dims))
        .map(|i| unit(splitmix64(seed ^ i)) * 2.0 - 1.0)
        .collect();
    let norm = raw
        .iter()
        .map(|x| x * x)
        .sum::<f64>()
        .sqrt()
        .max(f64::EPSILON);
    #[expect(
        clippy::cast_possible_truncation,
        reason = "embeddings are f32 by design"
    )]
    raw.into_iter().map(|x| (x / norm) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_core::message::{ContentBlock, Message, ToolSpec};

    fn provider(cfg: MockModelConfig) -> MockProvider {
        let mut models = BTreeMap::new();
        models.insert("m".to_owned(), cfg);
        MockProvider::new("mock", &MockProviderConfig { models })
    }

    fn user(text: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![ContentBlock::text(text)],
            name: None,
        }
    }

    async fn collect(p: &MockProvider, req: &ChatRequest) -> Vec<ChatEvent> {
        p.chat("m", req)
            .await
            .map_err(|e| e.error)
            .unwrap()
            .map(|e| e.unwrap())
            .collect()
            .await
    }

    #[tokio::test]
    async fn echoes_the_last_user_message_then_usage_then_finish() {
        let p = provider(MockModelConfig::default());
        let req = ChatRequest {
            messages: vec![user("hello there")],
            ..Default::default()
        };
        let ev = collect(&p, &req).await;
        let text: String = ev
            .iter()
            .filter_map(|e| match e {
                ChatEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "echo: hello there");
        assert!(matches!(ev[ev.len() - 2], ChatEvent::Usage(u) if u.total_tokens > 0));
        assert_eq!(ev.last(), Some(&ChatEvent::Finish(FinishReason::Stop)));
    }

    #[tokio::test]
    async fn calls_the_chosen_tool_and_then_reports_its_result() {
        let p = provider(MockModelConfig {
            tool_arguments: r#"{"city":"Paris"}"#.into(),
            ..Default::default()
        });
        let tool = |n: &str| ToolSpec {
            name: n.into(),
            description: String::new(),
            parameters: serde_json::json!({"type":"object"}),
        };
        let mut req = ChatRequest {
            messages: vec![user("weather?")],
            tools: vec![tool("a"), tool("b")],
            tool_choice: Some(serde_json::json!({"type":"function","function":{"name":"b"}})),
            ..Default::default()
        };
        let ev = collect(&p, &req).await;
        assert!(matches!(&ev[0], ChatEvent::ToolCallStart { name, .. } if name == "b"));
        assert!(
            matches!(&ev[1], ChatEvent::ToolCallDelta { arguments, .. } if arguments.contains("Paris"))
        );
        assert_eq!(ev.last(), Some(&ChatEvent::Finish(FinishReason::ToolCalls)));

        req.messages.push(Message {
            role: Role::Tool,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "call_mock_0".into(),
                content: vec![ContentBlock::text("sunny")],
                is_error: false,
            }],
            name: None,
        });
        let ev = collect(&p, &req).await;
        assert_eq!(ev[0], ChatEvent::TextDelta("the ".into()));
        req.messages.pop();
        req.tool_choice = Some(serde_json::json!("none"));
        assert!(matches!(
            collect(&p, &req).await[0],
            ChatEvent::TextDelta(_)
        ));
    }

    #[test]
    fn arguments_satisfy_the_required_part_of_the_schema() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "op": {"type": "string", "enum": ["get", "set"]},
                "limit": {"type": "integer", "minimum": 3},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}, "required": ["deep"]},
                "label": {"type": ["string", "null"]},
                "optional": {"type": "string"}
            },
            "required": ["query", "op", "limit", "tags", "opts", "label"]
        });
        assert_eq!(
            arguments_for(&schema, "weather in Paris"),
            serde_json::json!({
                "query": "weather in Paris", "op": "get", "limit": 3, "tags": ["example"],
                "opts": {"deep": false}, "label": "example"
            })
        );
        assert_eq!(
            arguments_for(&serde_json::json!({}), "x"),
            serde_json::json!({})
        );
        assert_eq!(
            arguments_for(&serde_json::Value::Null, "x"),
            serde_json::json!({})
        );
        // A caller's schema cannot make it build without bound: nested arrays of many items.
        let mut deep = serde_json::json!({"type": "string"});
        for _ in 0..12 {
            deep = serde_json::json!({"type": "array", "minItems": 8, "items": deep});
        }
        let huge = serde_json::json!({
            "type": "object", "properties": {"a": deep}, "required": ["a", "a", "a"]
        });
        let built = arguments_for(&huge, "x").to_string();
        assert!(built.len() < 4096, "{} bytes", built.len());
    }

    #[tokio::test]
    async fn error_injection_is_deterministic_for_a_seed() {
        let cfg = MockModelConfig {
            error_rate_429: 0.3,
            error_rate_500: 0.2,
            seed: 42,
            ..Default::default()
        };
        let req = ChatRequest {
            messages: vec![user("x")],
            ..Default::default()
        };
        let run = || async {
            let p = provider(cfg.clone());
            let mut codes = Vec::new();
            for _ in 0..200 {
                codes.push(p.chat("m", &req).await.err().map(|e| e.error.code));
            }
            codes
        };
        let a = run().await;
        assert_eq!(a, run().await);
        let n429 = a
            .iter()
            .filter(|c| **c == Some(ErrorCode::RateLimited))
            .count();
        let n500 = a
            .iter()
            .filter(|c| **c == Some(ErrorCode::UpstreamError))
            .count();
        assert!((30..90).contains(&n429), "{n429} 429s of 200 at rate 0.3");
        assert!((15..65).contains(&n500), "{n500} 500s of 200 at rate 0.2");
    }

    #[tokio::test]
    async fn embeddings_are_deterministic_unit_vectors() {
        let p = provider(MockModelConfig::default());
        let req = EmbedRequest {
            model: "m".into(),
            input: vec!["a".into(), "b".into(), "a".into()],
            dimensions: Some(8),
            ..Default::default()
        };
        let r = p.embed("m", &req).await.map_err(|e| e.error).unwrap();
        assert_eq!(r.vectors.len(), 3);
        assert_eq!(r.vectors[0].len(), 8);
        assert_eq!(r.vectors[0], r.vectors[2]);
        assert_ne!(r.vectors[0], r.vectors[1]);
        let norm: f32 = r.vectors[1].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
    }
}
