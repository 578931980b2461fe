//! Conversions between generated prost types and `weft-core` domain types.

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
    fn unspecified_role_is_refused() {
        let m = v1::Message {
            role: 0,
            content: vec![],
            name: None,
        };
        assert_eq!(message_from_proto(m), None);
    }
}
