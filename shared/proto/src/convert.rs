//! Conversions between generated prost types and `weft-core` domain types.

use weft_core::Error;
use weft_core::chat::{ChatEvent, ChatRequest, EmbedRequest, Fallback, Sampling};
use weft_core::message::{ContentBlock, FinishReason, Message, Role, ToolSpec, Usage};

use crate::v1;

pub fn role_to_proto(r: Role) -> v1::Role {
    match r {
        Role::System => v1::Role::System,
        Role::Developer => v1::Role::Developer,
        Role::User => v1::Role::User,
        Role::Assistant => v1::Role::Assistant,
        Role::Tool => v1::Role::Tool,
    }
}

/// `None` for `ROLE_UNSPECIFIED` or an unknown value.
pub fn role_from_proto(r: i32) -> Option<Role> {
    match v1::Role::try_from(r).ok()? {
        v1::Role::Unspecified => None,
        v1::Role::System => Some(Role::System),
        v1::Role::Developer => Some(Role::Developer),
        v1::Role::User => Some(Role::User),
        v1::Role::Assistant => Some(Role::Assistant),
        v1::Role::Tool => Some(Role::Tool),
    }
}

pub fn block_to_proto(b: &ContentBlock) -> v1::ContentBlock {
    use v1::content_block::Block;
    let block = match b {
        ContentBlock::Text { text } => Block::Text(v1::TextBlock { text: text.clone() }),
        ContentBlock::Image { url, detail } => Block::Image(v1::ImageBlock {
            url: url.clone(),
            detail: detail.clone(),
        }),
        ContentBlock::ToolUse {
            id,
            name,
            input_json,
        } => Block::ToolUse(v1::ToolUseBlock {
            id: id.clone(),
            name: name.clone(),
            input_json: input_json.clone(),
        }),
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => Block::ToolResult(v1::ToolResultBlock {
            tool_use_id: tool_use_id.clone(),
            content: content.iter().map(block_to_proto).collect(),
            is_error: *is_error,
        }),
        ContentBlock::Reasoning { text, signature } => Block::Reasoning(v1::ReasoningBlock {
            text: text.clone(),
            signature: signature.clone(),
        }),
    };
    v1::ContentBlock { block: Some(block) }
}

/// `None` for an empty block.
pub fn block_from_proto(b: v1::ContentBlock) -> Option<ContentBlock> {
    use v1::content_block::Block;
    Some(match b.block? {
        Block::Text(t) => ContentBlock::Text { text: t.text },
        Block::Image(i) => ContentBlock::Image {
            url: i.url,
            detail: i.detail,
        },
        Block::ToolUse(t) => ContentBlock::ToolUse {
            id: t.id,
            name: t.name,
            input_json: t.input_json,
        },
        Block::ToolResult(t) => ContentBlock::ToolResult {
            tool_use_id: t.tool_use_id,
            content: t.content.into_iter().filter_map(block_from_proto).collect(),
            is_error: t.is_error,
        },
        Block::Reasoning(r) => ContentBlock::Reasoning {
            text: r.text,
            signature: r.signature,
        },
    })
}

pub fn message_to_proto(m: &Message) -> v1::Message {
    v1::Message {
        role: role_to_proto(m.role) as i32,
        content: m.content.iter().map(block_to_proto).collect(),
        name: m.name.clone(),
    }
}

/// `None` when the role is missing.
pub fn message_from_proto(m: v1::Message) -> Option<Message> {
    Some(Message {
        role: role_from_proto(m.role)?,
        content: m.content.into_iter().filter_map(block_from_proto).collect(),
        name: m.name,
    })
}

pub fn tool_to_proto(t: &ToolSpec) -> v1::ToolSpec {
    v1::ToolSpec {
        name: t.name.clone(),
        description: t.description.clone(),
        parameters_json: t.parameters.to_string(),
    }
}

/// Invalid JSON parameters become an empty object schema.
pub fn tool_from_proto(t: v1::ToolSpec) -> ToolSpec {
    ToolSpec {
        name: t.name,
        description: t.description,
        parameters: serde_json::from_str(&t.parameters_json)
            .unwrap_or_else(|_| serde_json::json!({"type": "object"})),
    }
}

pub fn usage_to_proto(u: Usage) -> v1::Usage {
    v1::Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        total_tokens: u.total_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens,
    }
}

pub fn usage_from_proto(u: v1::Usage) -> Usage {
    Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        total_tokens: u.total_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens,
    }
}

pub fn finish_to_proto(f: FinishReason) -> v1::FinishReason {
    match f {
        FinishReason::Stop => v1::FinishReason::Stop,
        FinishReason::Length => v1::FinishReason::Length,
        FinishReason::ToolCalls => v1::FinishReason::ToolCalls,
        FinishReason::ContentFilter => v1::FinishReason::ContentFilter,
    }
}

pub fn finish_from_proto(f: i32) -> FinishReason {
    match v1::FinishReason::try_from(f) {
        Ok(v1::FinishReason::Length) => FinishReason::Length,
        Ok(v1::FinishReason::ToolCalls) => FinishReason::ToolCalls,
        Ok(v1::FinishReason::ContentFilter) => FinishReason::ContentFilter,
        _ => FinishReason::Stop,
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn json_field(s: &str, field: &str) -> Result<Option<serde_json::Value>, Error> {
    if s.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(s)
        .map(Some)
        .map_err(|_| Error::invalid(format!("`{field}` is not valid JSON")).with_param(field))
}

/// The proto request for a chat turn (the gRPC hop to a router in another process).
pub fn chat_request_to_proto(r: ChatRequest) -> v1::ChatRequest {
    let json_str = |v: Option<serde_json::Value>| v.map(|v| v.to_string()).unwrap_or_default();
    let s = r.sampling;
    v1::ChatRequest {
        model: r.model,
        messages: r.messages.iter().map(message_to_proto).collect(),
        tools: r.tools.iter().map(tool_to_proto).collect(),
        tool_choice_json: json_str(r.tool_choice),
        sampling: Some(v1::Sampling {
            temperature: s.temperature,
            top_p: s.top_p,
            max_tokens: s.max_tokens,
            stop: s.stop,
            seed: s.seed,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
        }),
        response_format_json: json_str(r.response_format),
        user: r.user.unwrap_or_default(),
        extra_json: if r.extra.is_empty() {
            String::new()
        } else {
            serde_json::Value::Object(r.extra).to_string()
        },
        provider_hint: r.provider_hint,
        tier_hint: r.tier_hint,
        stream: r.stream,
    }
}

/// The chat turn a proto request asks for; a 400 naming the field when it is malformed.
pub fn chat_request_from_proto(r: v1::ChatRequest) -> Result<ChatRequest, Error> {
    let mut messages = Vec::with_capacity(r.messages.len());
    for (i, m) in r.messages.into_iter().enumerate() {
        messages.push(message_from_proto(m).ok_or_else(|| {
            Error::invalid(format!("messages[{i}].role is missing"))
                .with_param(format!("messages[{i}].role"))
        })?);
    }
    let extra = match json_field(&r.extra_json, "extra")? {
        Some(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let s = r.sampling.unwrap_or_default();
    Ok(ChatRequest {
        tool_choice: json_field(&r.tool_choice_json, "tool_choice")?,
        response_format: json_field(&r.response_format_json, "response_format")?,
        model: r.model,
        messages,
        tools: r.tools.into_iter().map(tool_from_proto).collect(),
        sampling: Sampling {
            temperature: s.temperature,
            top_p: s.top_p,
            max_tokens: s.max_tokens,
            stop: s.stop,
            seed: s.seed,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
        },
        user: non_empty(r.user),
        extra,
        provider_hint: r.provider_hint,
        tier_hint: r.tier_hint,
        stream: r.stream,
    })
}

/// The proto event for a chat event.
pub fn event_to_proto(e: ChatEvent) -> v1::ChatEvent {
    use v1::chat_event::Event;
    let event = match e {
        ChatEvent::ProviderChosen {
            provider,
            model,
            fallbacks,
        } => Event::ProviderChosen(v1::ProviderChosen {
            provider,
            model,
            fallbacks,
        }),
        ChatEvent::TextDelta(text) => Event::TextDelta(v1::TextDelta { text }),
        ChatEvent::ReasoningDelta(text) => Event::ReasoningDelta(v1::ReasoningDelta { text }),
        ChatEvent::ReasoningSignature(signature) => {
            Event::ReasoningSignature(v1::ReasoningSignature { signature })
        }
        ChatEvent::Fallback(Fallback {
            provider,
            model,
            code,
            message,
        }) => Event::ProviderFallback(v1::ProviderFallback {
            provider,
            model,
            code,
            message,
        }),
        ChatEvent::ToolCallStart { index, id, name } => {
            Event::ToolCallStart(v1::ToolCallStart { index, id, name })
        }
        ChatEvent::ToolCallDelta { index, arguments } => {
            Event::ToolCallDelta(v1::ToolCallDelta { index, arguments })
        }
        ChatEvent::Usage(u) => Event::Usage(usage_to_proto(u)),
        ChatEvent::Finish(f) => Event::Finish(v1::Finish {
            reason: finish_to_proto(f) as i32,
        }),
    };
    v1::ChatEvent { event: Some(event) }
}

/// The chat event a proto event carries; `None` for an empty one (nothing to act on).
pub fn event_from_proto(e: v1::ChatEvent) -> Option<ChatEvent> {
    use v1::chat_event::Event;
    Some(match e.event? {
        Event::ProviderChosen(c) => ChatEvent::ProviderChosen {
            provider: c.provider,
            model: c.model,
            fallbacks: c.fallbacks,
        },
        Event::TextDelta(t) => ChatEvent::TextDelta(t.text),
        Event::ReasoningDelta(t) => ChatEvent::ReasoningDelta(t.text),
        Event::ReasoningSignature(s) => ChatEvent::ReasoningSignature(s.signature),
        Event::ProviderFallback(f) => ChatEvent::Fallback(Fallback {
            provider: f.provider,
            model: f.model,
            code: f.code,
            message: f.message,
        }),
        Event::ToolCallStart(s) => ChatEvent::ToolCallStart {
            index: s.index,
            id: s.id,
            name: s.name,
        },
        Event::ToolCallDelta(d) => ChatEvent::ToolCallDelta {
            index: d.index,
            arguments: d.arguments,
        },
        Event::Usage(u) => ChatEvent::Usage(usage_from_proto(u)),
        Event::Finish(f) => ChatEvent::Finish(finish_from_proto(f.reason)),
    })
}

/// The proto request for an embedding call.
pub fn embed_request_to_proto(r: EmbedRequest) -> v1::EmbedRequest {
    v1::EmbedRequest {
        model: r.model,
        input: r.input,
        dimensions: r.dimensions,
        user: r.user.unwrap_or_default(),
        provider_hint: r.provider_hint,
        tier_hint: r.tier_hint,
    }
}

/// The embedding call a proto request asks for.
pub fn embed_request_from_proto(r: v1::EmbedRequest) -> EmbedRequest {
    EmbedRequest {
        model: r.model,
        input: r.input,
        dimensions: r.dimensions,
        user: non_empty(r.user),
        provider_hint: r.provider_hint,
        tier_hint: r.tier_hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_proto() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("hi"),
                ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "lookup".into(),
                    input_json: r#"{"q":1}"#.into(),
                },
                ContentBlock::ToolResult {
                    tool_use_id: "call_1".into(),
                    content: vec![ContentBlock::text("42")],
                    is_error: false,
                },
                ContentBlock::Reasoning {
                    text: "hmm".into(),
                    signature: Some("sig".into()),
                },
            ],
            name: Some("bot".into()),
        };
        assert_eq!(message_from_proto(message_to_proto(&m)), Some(m));
    }

    /// Found by the `chat_anthropic` fuzz target (fuzz/seeds/chat_anthropic/float-roundtrip.json):
    /// serde_json without `float_roundtrip` parsed the schema text the gateway wrote to a
    /// different number than the one it held (1.1e24 came back as 1.0999999999999999e24).
    #[test]
    fn tool_schemas_round_trip_exactly() {
        let parameters: serde_json::Value = serde_json::from_str(
            r#"{"a": 1099999999999999999999999, "b": 0.1, "c": 2.2250738585072014e-308, "d": 1.7976931348623157e308}"#,
        )
        .unwrap();
        let t = ToolSpec {
            name: "f".into(),
            description: String::new(),
            parameters,
        };
        assert_eq!(tool_from_proto(tool_to_proto(&t)), t);
    }

    #[test]
    fn chat_requests_and_events_round_trip_through_proto() {
        let mut extra = serde_json::Map::new();
        extra.insert("top_k".into(), serde_json::json!(5));
        let r = ChatRequest {
            model: "m".into(),
            messages: vec![Message {
                role: Role::User,
                content: vec![ContentBlock::text("hi")],
                name: None,
            }],
            tools: vec![],
            tool_choice: Some(serde_json::json!("auto")),
            sampling: Sampling {
                temperature: Some(0.5),
                stop: vec!["x".into()],
                ..Sampling::default()
            },
            response_format: None,
            user: Some("u".into()),
            extra,
            provider_hint: Some("p".into()),
            tier_hint: None,
            stream: true,
        };
        assert_eq!(
            chat_request_from_proto(chat_request_to_proto(r.clone())).unwrap(),
            r
        );
        for e in [
            ChatEvent::ProviderChosen {
                provider: "p".into(),
                model: "m".into(),
                fallbacks: 1,
            },
            ChatEvent::Fallback(Fallback {
                provider: "q".into(),
                model: "n".into(),
                code: "upstream_error".into(),
                message: "down".into(),
            }),
            ChatEvent::TextDelta("a".into()),
            ChatEvent::ReasoningDelta("r".into()),
            ChatEvent::ReasoningSignature("s".into()),
            ChatEvent::ToolCallStart {
                index: 1,
                id: "c".into(),
                name: "f".into(),
            },
            ChatEvent::ToolCallDelta {
                index: 1,
                arguments: "{}".into(),
            },
            ChatEvent::Usage(Usage::new(1, 2)),
            ChatEvent::Finish(FinishReason::Length),
        ] {
            assert_eq!(event_from_proto(event_to_proto(e.clone())), Some(e));
        }
    }

    #[test]
    fn unspecified_role_is_refused() {
        let m = v1::Message {
            role: 0,
            content: vec![],
            name: None,
        };
        assert_eq!(message_from_proto(m), None);
    }
}
