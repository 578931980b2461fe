//! The one internal message model every provider translates to and from: a message is a role and
//! a list of content blocks.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    Image {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    ToolUse {
        id: String,
        name: String,
        /// The arguments exactly as the model produced them (JSON text, possibly invalid).
        input_json: String,
    },
    ToolResult {
        tool_use_id: String,
        content: Vec<ContentBlock>,
        #[serde(default)]
        is_error: bool,
    },
    Reasoning {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
}

impl ContentBlock {
    pub fn text(s: impl Into<String>) -> Self {
        Self::Text { text: s.into() }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    /// All text blocks of the message, concatenated.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for b in &self.content {
            match b {
                ContentBlock::Text { text } => out.push_str(text),
                ContentBlock::ToolResult { content, .. } => {
                    for c in content {
                        if let ContentBlock::Text { text } = c {
                            out.push_str(text);
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// Bytes that count as one token in [`estimate_tokens`]: fewer than English prose needs (about
/// four), because JSON, code and ids split into more tokens, so that the estimate errs high.
pub const BYTES_PER_TOKEN: u64 = 3;

/// An estimate of the prompt tokens `messages` and `tools` take: their text's bytes over
/// [`BYTES_PER_TOKEN`], plus a few per message for its role and framing. A tokenizer-free
/// estimate, the same on every executor for the same request: what automatic compaction
/// compares with the model's window.
pub fn estimate_tokens(messages: &[Message], tools: &[ToolSpec]) -> u64 {
    fn block(b: &ContentBlock) -> usize {
        match b {
            ContentBlock::Text { text } | ContentBlock::Reasoning { text, .. } => text.len(),
            // An image's cost depends on its size and the provider; a fixed guess.
            ContentBlock::Image { .. } => 3 * 1000,
            ContentBlock::ToolUse {
                id,
                name,
                input_json,
            } => id.len() + name.len() + input_json.len(),
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => tool_use_id.len() + content.iter().map(block).sum::<usize>(),
        }
    }
    let mut bytes: usize = 0;
    for m in messages {
        bytes += 12 + m.content.iter().map(block).sum::<usize>();
    }
    for t in tools {
        bytes += t.name.len() + t.description.len() + t.parameters.to_string().len();
    }
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON schema of the arguments.
    pub parameters: serde_json::Value,
}

/// Token usage of one model call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens, cached ones included.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Input tokens served from the provider's prompt cache (part of `prompt_tokens`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache (part of `prompt_tokens`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if signature"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Usage from input and output counts, with the total their sum. Counts come from
    /// upstreams, so sums saturate rather than overflow.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
            ..Self::default()
        }
    }

    /// Adds another call's usage to this one.
    pub fn add(&mut self, other: &Self) {
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        add(&mut self.prompt_tokens, other.prompt_tokens);
        add(&mut self.completion_tokens, other.completion_tokens);
        add(&mut self.total_tokens, other.total_tokens);
        add(&mut self.cache_read_tokens, other.cache_read_tokens);
        add(&mut self.cache_write_tokens, other.cache_write_tokens);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
}

impl FinishReason {
    /// The OpenAI `finish_reason` string.
    pub fn as_openai(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
        }
    }

    pub fn from_openai(s: &str) -> Self {
        match s {
            "length" => Self::Length,
            "tool_calls" | "function_call" => Self::ToolCalls,
            "content_filter" => Self::ContentFilter,
            _ => Self::Stop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_blocks_are_tagged_by_type() {
        let b = ContentBlock::ToolUse {
            id: "call_1".into(),
            name: "get".into(),
            input_json: "{}".into(),
        };
        let v = serde_json::to_value(&b).unwrap();
        assert_eq!(v["type"], "tool_use");
        assert_eq!(serde_json::from_value::<ContentBlock>(v).unwrap(), b);
    }

    #[test]
    fn message_text_joins_text_blocks() {
        let m = Message {
            role: Role::User,
            content: vec![ContentBlock::text("a"), ContentBlock::text("b")],
            name: None,
        };
        assert_eq!(m.text(), "ab");
    }

    #[test]
    fn usage_sums_saturate() {
        let mut u = Usage::new(u64::MAX, 1);
        assert_eq!(u.total_tokens, u64::MAX);
        u.add(&Usage::new(1, 1));
        assert_eq!((u.prompt_tokens, u.completion_tokens), (u64::MAX, 2));
    }
}
