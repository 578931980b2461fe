//! Ollama's native API: the `/api/chat` request the router's `ollama` driver sends and the answer
//! it reads (one JSON object per NDJSON line, or one object with `"stream": false`), and
//! `/api/embed`. Tools are offered in OpenAI's shape ([`crate::openai::Tool`]).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::lenient::{self, F32s, Obj};

/// An `/api/chat` request.
#[derive(Clone, Debug, Serialize)]
pub struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<crate::openai::Tool<'a>>,
    /// Always written: Ollama streams unless told otherwise.
    pub stream: bool,
    #[serde(skip_serializing_if = "Options::is_empty")]
    pub options: Options<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<Format<'a>>,
    /// Passed through from the caller: `true`, `false` or a level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub think: Option<&'a Value>,
    /// Passed through from the caller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<&'a Value>,
}

/// One message of a request.
#[derive(Clone, Debug, Serialize)]
pub struct Message<'a> {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: &'a str,
    pub content: Cow<'a, str>,
    /// Base64 images (no `data:` prefix).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall<'a>>,
    /// On a `tool` message: the call it answers (newer Ollama).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<Cow<'a, str>>,
    /// On a `tool` message: the function of the call it answers (older Ollama).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<&'a str>,
}

impl<'a> Message<'a> {
    /// A message of `role` with text `content` and nothing else.
    pub fn text(role: &'a str, content: Cow<'a, str>) -> Self {
        Self {
            role,
            content,
            images: Vec::new(),
            thinking: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
        }
    }
}

/// A call in an assistant message of the history.
#[derive(Clone, Debug, Serialize)]
pub struct ToolCall<'a> {
    pub id: Cow<'a, str>,
    pub function: FunctionCall<'a>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FunctionCall<'a> {
    pub name: &'a str,
    /// The arguments, a JSON object.
    pub arguments: Value,
}

/// `options`: sampling and the model's runtime settings; left out when empty.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Options<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_ctx: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_predict: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub stop: &'a [String],
    /// Passed through from the caller, as given (`null` included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat_penalty: Option<&'a Value>,
}

impl Options<'_> {
    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self.num_ctx.is_none()
            && self.num_predict.is_none()
            && self.temperature.is_none()
            && self.top_p.is_none()
            && self.seed.is_none()
            && self.presence_penalty.is_none()
            && self.frequency_penalty.is_none()
            && self.stop.is_empty()
            && self.top_k.is_none()
            && self.min_p.is_none()
            && self.repeat_penalty.is_none()
    }
}

/// `format`: `"json"`, or a JSON schema the answer must follow.
#[derive(Clone, Debug)]
pub enum Format<'a> {
    Json,
    Schema(&'a Value),
}

impl Serialize for Format<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Json => s.serialize_str("json"),
            Self::Schema(v) => v.serialize(s),
        }
    }
}

/// One answer object (a stream line, or the whole non-streamed answer), read leniently.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ChatResponse<'a> {
    /// Present, whatever its value: the upstream failed (a message, or any JSON).
    #[serde(default, deserialize_with = "lenient::present")]
    pub error: Option<Value>,
    #[serde(default, deserialize_with = "lenient::bool")]
    pub done: Option<bool>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub done_reason: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::object")]
    pub message: Option<AnswerMessage<'a>>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub prompt_eval_count: Option<u64>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub eval_count: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct AnswerMessage<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::array")]
    pub tool_calls: Option<Vec<Obj<AnswerCall<'a>>>>,
}

/// A tool call of an answer, whole.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct AnswerCall<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::object")]
    pub function: Option<AnswerFunction<'a>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct AnswerFunction<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub name: Option<Cow<'a, str>>,
    /// An object; some Ollama-compatible servers send the JSON text instead (`null` reads as
    /// absent).
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// An `/api/embed` request.
#[derive(Clone, Debug, Serialize)]
pub struct EmbedRequest<'a> {
    pub model: &'a str,
    pub input: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
}

/// An `/api/embed` answer, read leniently.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct EmbedResponse {
    #[serde(default, deserialize_with = "lenient::array")]
    pub embeddings: Option<Vec<F32s>>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub prompt_eval_count: Option<u64>,
}
