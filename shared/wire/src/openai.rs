//! OpenAI's Chat Completions answer: the whole completion (`chat.completion`) and the streamed
//! chunk (`chat.completion.chunk`), as weft's `/v1/chat/completions` writes them and as
//! OpenAI-compatible upstreams (and the test fakes that stand in for them) send them.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// `"chat.completion"`.
pub const COMPLETION: &str = "chat.completion";
/// `"chat.completion.chunk"`.
pub const CHUNK: &str = "chat.completion.chunk";

/// Token counts of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

/// A whole completion.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletion<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub object: Cow<'a, str>,
    pub created: u64,
    #[serde(borrow)]
    pub model: Cow<'a, str>,
    #[serde(borrow)]
    pub choices: Vec<Choice<'a>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<Cow<'a, str>>,
}

/// The one choice of a completion (weft answers `n = 1` only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Choice<'a> {
    pub index: u32,
    #[serde(borrow)]
    pub message: AssistantMessage<'a>,
    #[serde(default, borrow)]
    pub finish_reason: Option<Cow<'a, str>>,
    /// Always `null` from weft.
    #[serde(default)]
    pub logprobs: Option<Logprobs>,
}

/// Log probabilities are not produced; the field is written as `null`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Logprobs {}

/// The assistant's message in a completion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage<'a> {
    #[serde(borrow)]
    pub role: Cow<'a, str>,
    /// `null` when the answer is only tool calls.
    #[serde(default, borrow)]
    pub content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall<'a>>,
    /// The model's reasoning (DeepSeek's name for it, which OpenAI-compatible clients read).
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<Cow<'a, str>>,
}

/// A tool call, whole (in a completion) or in pieces (in chunks, where `index` says which call a
/// piece belongs to and only the first piece has `id`, `type` and `function.name`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCall<'a> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub id: Option<Cow<'a, str>>,
    #[serde(
        default,
        borrow,
        rename = "type",
        skip_serializing_if = "Option::is_none"
    )]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub function: FunctionCall<'a>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall<'a> {
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub name: Option<Cow<'a, str>>,
    /// The arguments as JSON text, as the model wrote them.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Cow<'a, str>>,
}

impl<'a> ToolCall<'a> {
    /// A whole call, as a completion carries it.
    pub fn whole(id: &'a str, name: &'a str, arguments: &'a str) -> Self {
        Self {
            index: None,
            id: Some(Cow::Borrowed(id)),
            kind: Some(Cow::Borrowed("function")),
            function: FunctionCall {
                name: Some(Cow::Borrowed(name)),
                arguments: Some(Cow::Borrowed(arguments)),
            },
        }
    }

    /// The first piece of a streamed call: its id and name, no arguments yet.
    pub fn start(index: u32, id: &'a str, name: &'a str) -> Self {
        Self {
            index: Some(index),
            id: Some(Cow::Borrowed(id)),
            kind: Some(Cow::Borrowed("function")),
            function: FunctionCall {
                name: Some(Cow::Borrowed(name)),
                arguments: Some(Cow::Borrowed("")),
            },
        }
    }

    /// A later piece of a streamed call: more of its arguments.
    pub fn arguments(index: u32, arguments: &'a str) -> Self {
        Self {
            index: Some(index),
            id: None,
            kind: None,
            function: FunctionCall {
                name: None,
                arguments: Some(Cow::Borrowed(arguments)),
            },
        }
    }
}

/// One streamed chunk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionChunk<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub object: Cow<'a, str>,
    pub created: u64,
    #[serde(borrow)]
    pub model: Cow<'a, str>,
    #[serde(borrow)]
    pub choices: Vec<ChunkChoice<'a>>,
    /// With `stream_options.include_usage`: `null` on every chunk but the last, which has no
    /// choices and the usage. Left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nullable")]
    pub usage: Option<Option<Usage>>,
}

/// The choice of a chunk: what the chunk adds to the message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice<'a> {
    pub index: u32,
    #[serde(borrow)]
    pub delta: ChunkDelta<'a>,
    #[serde(default, borrow)]
    pub finish_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    pub logprobs: Option<Logprobs>,
}

/// What one chunk adds: each field is present only when the chunk carries it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChunkDelta<'a> {
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub role: Option<Cow<'a, str>>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub content: Option<Cow<'a, str>>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall<'a>>,
}

impl<'a> ChatCompletionChunk<'a> {
    /// A chunk whose one choice carries `delta` (and `finish_reason` on the last).
    pub fn one(
        id: &'a str,
        created: u64,
        model: &'a str,
        delta: ChunkDelta<'a>,
        finish_reason: Option<&'a str>,
        include_usage: bool,
    ) -> Self {
        Self {
            id: Cow::Borrowed(id),
            object: Cow::Borrowed(CHUNK),
            created,
            model: Cow::Borrowed(model),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason: finish_reason.map(Cow::Borrowed),
                logprobs: None,
            }],
            usage: include_usage.then_some(None),
        }
    }

    /// The last chunk of a stream with `include_usage`: no choices, the call's usage.
    pub fn usage(id: &'a str, created: u64, model: &'a str, usage: Usage) -> Self {
        Self {
            id: Cow::Borrowed(id),
            object: Cow::Borrowed(CHUNK),
            created,
            model: Cow::Borrowed(model),
            choices: Vec::new(),
            usage: Some(Some(usage)),
        }
    }
}

/// `Option<Option<T>>` where the outer `None` is "absent" and `Some(None)` is `null`.
mod nullable {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_write_only_what_they_carry() {
        let c = ChatCompletionChunk::one(
            "id",
            1,
            "m",
            ChunkDelta {
                content: Some("hi".into()),
                ..ChunkDelta::default()
            },
            None,
            false,
        );
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"id":"id","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null,"logprobs":null}]}"#
        );
        let c = ChatCompletionChunk::one("id", 1, "m", ChunkDelta::default(), Some("stop"), true);
        let v: serde_json::Value = serde_json::to_value(&c).unwrap();
        assert!(v["usage"].is_null() && v.as_object().unwrap().contains_key("usage"));
        let text = serde_json::to_string(&c).unwrap();
        let back: ChatCompletionChunk<'_> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn completions_read_what_upstreams_send() {
        let body = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt",
            "choices":[{"index":0,"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;
        let c: ChatCompletion<'_> = serde_json::from_str(body).unwrap();
        let call = &c.choices[0].message.tool_calls[0];
        assert_eq!(call.function.arguments.as_deref(), Some(r#"{"a":1}"#));
        assert_eq!(c.usage.unwrap().total_tokens, 7);
    }
}
