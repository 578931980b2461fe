//! OpenAI's Chat Completions and Embeddings.
//!
//! - The answer, the whole completion (`chat.completion`) and the streamed chunk
//!   (`chat.completion.chunk`), as weft's `/v1/chat/completions` writes them and as
//!   OpenAI-compatible upstreams (and the test fakes that stand in for them) send them.
//! - The request the router's `openai` and `deepseek` drivers send ([`ChatRequest`],
//!   [`EmbeddingsRequest`]); its message and tool shapes are shared with Ollama's.
//! - [`read`]: an upstream's answer as the router reads it, leniently.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Extra;

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

/// A chat-completions request, as weft sends it.
/// `Default` is an empty request: no model, no messages, nothing optional set.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool<'a>>,
    /// The caller's `tool_choice`, as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub stop: &'a [String],
    /// The caller's `response_format`, as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<&'a str>,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// The caller's unmodelled fields, minus those [`ChatRequest::owns`].
    #[serde(flatten)]
    pub extra: Extra<'a>,
}

impl ChatRequest<'_> {
    /// Whether the field `key` is weft's to write: set here, or (`stream_options`) decided by
    /// weft whether set or not. A passed-through field of that name is left out.
    pub fn owns(&self, key: &str) -> bool {
        match key {
            "model" | "messages" | "stream" | "stream_options" => true,
            "tools" => !self.tools.is_empty(),
            "tool_choice" => self.tool_choice.is_some(),
            "temperature" => self.temperature.is_some(),
            "top_p" => self.top_p.is_some(),
            "max_tokens" => self.max_tokens.is_some(),
            "seed" => self.seed.is_some(),
            "presence_penalty" => self.presence_penalty.is_some(),
            "frequency_penalty" => self.frequency_penalty.is_some(),
            "stop" => !self.stop.is_empty(),
            "response_format" => self.response_format.is_some(),
            "user" => self.user.is_some(),
            _ => false,
        }
    }
}

/// `stream_options`: weft always asks for the usage chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StreamOptions {
    pub include_usage: bool,
}

/// One message of a request.
#[derive(Clone, Debug, Serialize)]
pub struct Message<'a> {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: &'a str,
    /// Always written; `null` for an assistant message that only calls tools.
    pub content: Option<Content<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    /// DeepSeek: the reasoning of an earlier assistant message, sent back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall<'a>>,
    /// On a `tool` message: the call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<Cow<'a, str>>,
}

impl<'a> Message<'a> {
    /// A message of `role` with text `content` and nothing else.
    pub fn text(role: &'a str, content: Cow<'a, str>) -> Self {
        Self {
            role,
            content: Some(Content::Text(content)),
            name: None,
            reasoning_content: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A message's content: text, or parts (text and images).
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Content<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<ContentPart<'a>>),
}

/// One part of a user message.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl<'a> },
}

#[derive(Clone, Debug, Serialize)]
pub struct ImageUrl<'a> {
    pub url: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<&'a str>,
}

/// A tool offered to the model: `{"type": "function", "function": {…}}`.
#[derive(Clone, Debug, Serialize)]
pub struct Tool<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub function: FunctionDef<'a>,
}

impl<'a> Tool<'a> {
    pub fn function(name: &'a str, description: &'a str, parameters: &'a Value) -> Self {
        Self {
            kind: "function",
            function: FunctionDef {
                name,
                description,
                parameters,
            },
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct FunctionDef<'a> {
    pub name: &'a str,
    pub description: &'a str,
    /// The JSON schema of the arguments, as the caller gave it.
    pub parameters: &'a Value,
}

/// A `tool_choice` as weft hands it on: `"none"`, `"auto"`, `"required"`, or a named function,
/// `{"type": "function", "function": {"name": …}}`. The native and Anthropic-compatible doors
/// write their callers' choices in this shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolChoice<'a> {
    None,
    Auto,
    Required,
    Function(&'a str),
}

impl Serialize for ToolChoice<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Named<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            function: Name<'a>,
        }
        #[derive(Serialize)]
        struct Name<'a> {
            name: &'a str,
        }
        match *self {
            Self::None => s.serialize_str("none"),
            Self::Auto => s.serialize_str("auto"),
            Self::Required => s.serialize_str("required"),
            Self::Function(name) => Named {
                kind: "function",
                function: Name { name },
            }
            .serialize(s),
        }
    }
}

impl ToolChoice<'_> {
    /// The choice as a JSON value, as the chat contract carries it.
    pub fn to_value(self) -> Value {
        // Strings and a map with string keys: converting cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// `{"type": "object", "properties": {}}`: the parameters of a tool that takes no arguments.
pub fn no_arguments_schema() -> Value {
    let mut schema = serde_json::Map::new();
    schema.insert("type".to_owned(), Value::from("object"));
    schema.insert(
        "properties".to_owned(),
        Value::Object(serde_json::Map::new()),
    );
    Value::Object(schema)
}

/// An embeddings request.
#[derive(Clone, Debug, Serialize)]
pub struct EmbeddingsRequest<'a> {
    pub model: &'a str,
    pub input: &'a [String],
    /// Always `float`: weft hands vectors on as numbers.
    pub encoding_format: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<&'a str>,
}

/// An embeddings answer, as weft's `/v1/embeddings` writes it.
#[derive(Clone, Debug, Serialize)]
pub struct EmbeddingsAnswer<'a> {
    /// Always `"list"`.
    pub object: &'a str,
    pub data: Vec<Embedding<'a>>,
    pub model: &'a str,
    pub usage: EmbeddingsUsage,
}

/// One input's vector.
#[derive(Clone, Debug, Serialize)]
pub struct Embedding<'a> {
    /// Always `"embedding"`.
    pub object: &'a str,
    /// The input's position in the request.
    pub index: usize,
    pub embedding: Vector<'a>,
}

impl<'a> Embedding<'a> {
    pub fn new(index: usize, embedding: Vector<'a>) -> Self {
        Self {
            object: "embedding",
            index,
            embedding,
        }
    }
}

/// A vector as the caller's `encoding_format` asks for it.
#[derive(Clone, Debug)]
pub enum Vector<'a> {
    /// Numbers (`float`). Each is written as the `f64` its `f32` widens to, as weft has always
    /// written them (`0.1f32` as `0.10000000149011612`); a client reading `f32`s gets the
    /// provider's values back exactly either way.
    Float(&'a [f32]),
    /// The little-endian `f32`s, base64-encoded (`base64`).
    Base64(String),
}

impl Serialize for Vector<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Float(v) => s.collect_seq(v.iter().map(|f| f64::from(*f))),
            Self::Base64(text) => s.serialize_str(text),
        }
    }
}

/// An embeddings call's token counts (there is no completion).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EmbeddingsUsage {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
}

/// `GET /v1/models`' answer.
#[derive(Clone, Debug, Serialize)]
pub struct ModelList<'a> {
    /// Always `"list"`.
    pub object: &'a str,
    pub data: Vec<Model<'a>>,
}

/// One model a caller may name.
#[derive(Clone, Debug, Serialize)]
pub struct Model<'a> {
    pub id: &'a str,
    /// Always `"model"`.
    pub object: &'a str,
    /// Unix seconds; weft writes `0`, as it does not know when a provider made the model.
    pub created: u64,
    pub owned_by: &'a str,
    /// weft's addition: whether `id` is a `model`, an `alias` or a `tier`.
    pub weft_kind: &'a str,
}

/// An upstream's answer as the router's drivers read it: every field optional and read
/// [leniently](crate::lenient), so that the driver, not the parser, decides what a usable answer
/// needs. The same shapes cover DeepSeek's additions (`reasoning_content`,
/// `prompt_cache_hit_tokens`).
pub mod read {
    use std::borrow::Cow;

    use serde::Deserialize;

    use crate::lenient::{self, Obj};

    /// A whole completion.
    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct Completion<'a> {
        #[serde(default, borrow, deserialize_with = "lenient::array")]
        pub choices: Option<Vec<Obj<Choice<'a>>>>,
        #[serde(default, deserialize_with = "lenient::object")]
        pub usage: Option<Usage>,
    }

    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct Choice<'a> {
        #[serde(default, borrow, deserialize_with = "lenient::object")]
        pub message: Option<Message<'a>>,
        #[serde(default, borrow, deserialize_with = "lenient::string")]
        pub finish_reason: Option<Cow<'a, str>>,
    }

    /// A completion's message, or what a chunk adds to it (`delta`).
    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct Message<'a> {
        #[serde(default, borrow, deserialize_with = "lenient::string")]
        pub content: Option<Cow<'a, str>>,
        #[serde(default, borrow, deserialize_with = "lenient::string")]
        pub reasoning_content: Option<Cow<'a, str>>,
        #[serde(default, borrow, deserialize_with = "lenient::array")]
        pub tool_calls: Option<Vec<Obj<ToolCall<'a>>>>,
    }

    /// A tool call, whole or (in chunks) a piece of one.
    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct ToolCall<'a> {
        #[serde(default, deserialize_with = "lenient::u64")]
        pub index: Option<u64>,
        #[serde(default, borrow, deserialize_with = "lenient::string")]
        pub id: Option<Cow<'a, str>>,
        #[serde(default, borrow, deserialize_with = "lenient::object")]
        pub function: Option<Function<'a>>,
    }

    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct Function<'a> {
        #[serde(default, borrow, deserialize_with = "lenient::string")]
        pub name: Option<Cow<'a, str>>,
        #[serde(default, borrow, deserialize_with = "lenient::string")]
        pub arguments: Option<Cow<'a, str>>,
    }

    /// Token counts, with the cache reads as OpenAI (`prompt_tokens_details.cached_tokens`) and
    /// DeepSeek (`prompt_cache_hit_tokens`) report them.
    #[derive(Clone, Copy, Debug, Default, Deserialize)]
    pub struct Usage {
        #[serde(default, deserialize_with = "lenient::u64")]
        pub prompt_tokens: Option<u64>,
        #[serde(default, deserialize_with = "lenient::u64")]
        pub completion_tokens: Option<u64>,
        #[serde(default, deserialize_with = "lenient::u64")]
        pub total_tokens: Option<u64>,
        #[serde(default, deserialize_with = "lenient::u64")]
        pub prompt_cache_hit_tokens: Option<u64>,
        #[serde(default, deserialize_with = "lenient::object")]
        pub prompt_tokens_details: Option<TokensDetails>,
    }

    #[derive(Clone, Copy, Debug, Default, Deserialize)]
    pub struct TokensDetails {
        #[serde(default, deserialize_with = "lenient::u64")]
        pub cached_tokens: Option<u64>,
    }

    /// One `data:` payload of a stream: a chunk, or an error object.
    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct Chunk<'a> {
        #[serde(default, borrow, deserialize_with = "lenient::object")]
        pub error: Option<Error<'a>>,
        /// Present (even `null`) on every chunk of a stream with `include_usage`.
        #[serde(default, deserialize_with = "lenient::present")]
        pub usage: Option<Obj<Usage>>,
        #[serde(default, borrow, deserialize_with = "lenient::array")]
        pub choices: Option<Vec<Obj<ChunkChoice<'a>>>>,
    }

    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct ChunkChoice<'a> {
        #[serde(default, borrow, deserialize_with = "lenient::object")]
        pub delta: Option<Message<'a>>,
        #[serde(default, borrow, deserialize_with = "lenient::string")]
        pub finish_reason: Option<Cow<'a, str>>,
    }

    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct Error<'a> {
        #[serde(default, borrow, deserialize_with = "lenient::string")]
        pub message: Option<Cow<'a, str>>,
    }

    /// An embeddings answer.
    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct Embeddings {
        #[serde(default, deserialize_with = "lenient::array")]
        pub data: Option<Vec<Obj<Embedding>>>,
        #[serde(default, deserialize_with = "lenient::object")]
        pub usage: Option<Usage>,
    }

    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct Embedding {
        #[serde(default, deserialize_with = "lenient::f32s")]
        pub embedding: Option<Vec<f32>>,
        #[serde(default, deserialize_with = "lenient::u64")]
        pub index: Option<u64>,
    }

    /// A caller's OpenAI-style `tool_choice` naming a function:
    /// `{"type": "function", "function": {"name": …}}`.
    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct NamedToolChoice<'a> {
        #[serde(default, borrow, rename = "type", deserialize_with = "lenient::string")]
        pub kind: Option<Cow<'a, str>>,
        #[serde(default, borrow, deserialize_with = "lenient::object")]
        pub function: Option<Function<'a>>,
    }

    impl NamedToolChoice<'_> {
        /// The named function, if any.
        pub fn name(&self) -> Option<&str> {
            self.function.as_ref()?.name.as_deref()
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

    /// A request with every field set, and one with none: `owns` must claim exactly the fields
    /// the request writes (plus `stream_options`, which weft decides either way).
    #[test]
    fn requests_own_the_fields_they_write() {
        let v = serde_json::Value::Bool(true);
        let stop = ["x".to_owned()];
        let full = ChatRequest {
            model: "m",
            messages: vec![Message::text("user", Cow::Borrowed("hi"))],
            tools: vec![Tool::function("f", "d", &v)],
            tool_choice: Some(&v),
            temperature: Some(0.5),
            top_p: Some(0.5),
            max_tokens: Some(1),
            seed: Some(1),
            presence_penalty: Some(0.1),
            frequency_penalty: Some(0.1),
            stop: &stop,
            response_format: Some(&v),
            user: Some("u"),
            stream: true,
            stream_options: Some(StreamOptions {
                include_usage: true,
            }),
            extra: Extra::default(),
        };
        let empty = ChatRequest {
            tools: Vec::new(),
            tool_choice: None,
            temperature: None,
            top_p: None,
            max_tokens: None,
            seed: None,
            presence_penalty: None,
            frequency_penalty: None,
            stop: &[],
            response_format: None,
            user: None,
            stream: false,
            stream_options: None,
            ..full.clone()
        };
        for r in [&full, &empty] {
            let written = serde_json::to_value(r).unwrap();
            let written = written.as_object().unwrap();
            for k in written.keys() {
                assert!(r.owns(k), "{k} is written but not owned");
            }
            for k in [
                "tools",
                "tool_choice",
                "temperature",
                "seed",
                "stop",
                "user",
                "x",
            ] {
                assert_eq!(r.owns(k), written.contains_key(k), "{k}");
            }
        }
        let passed: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"model": "other", "user": "p", "logit_bias": {}}"#).unwrap();
        let mut r = empty;
        r.extra = Extra::except(&passed, |k| r.owns(k));
        let text = serde_json::to_string(&r).unwrap();
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["model"], "m");
        assert_eq!(back["user"], "p");
        assert_eq!(text.matches("\"model\"").count(), 1);
    }

    #[test]
    fn tool_choices_and_embeddings_have_openais_shape() {
        use serde_json::json;
        assert_eq!(ToolChoice::Required.to_value(), json!("required"));
        assert_eq!(
            ToolChoice::Function("f").to_value(),
            json!({"type": "function", "function": {"name": "f"}})
        );
        assert_eq!(
            no_arguments_schema(),
            json!({"type": "object", "properties": {}})
        );
        let values = [0.1_f32, -2.0];
        let a = EmbeddingsAnswer {
            object: "list",
            data: vec![
                Embedding::new(0, Vector::Float(&values)),
                Embedding::new(1, Vector::Base64("AAAA".into())),
            ],
            model: "e",
            usage: EmbeddingsUsage {
                prompt_tokens: 2,
                total_tokens: 2,
            },
        };
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"object": "list", "model": "e",
                   "data": [{"object": "embedding", "index": 0, "embedding": values},
                            {"object": "embedding", "index": 1, "embedding": "AAAA"}],
                   "usage": {"prompt_tokens": 2, "total_tokens": 2}})
        );
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
