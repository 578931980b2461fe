//! Anthropic's Messages API (`POST /v1/messages`): the request the router's `anthropic` driver
//! sends, and the answer it reads, whole ([`Answer`]) or as SSE events ([`StreamEvent`]).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::lenient::{self, Obj};
use crate::{Extra, is_false};

/// A Messages API request.
#[derive(Clone, Debug, Serialize)]
pub struct Request<'a> {
    pub model: &'a str,
    /// System and developer instructions, as text blocks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<Block<'a>>,
    /// Alternating `user` and `assistant` turns.
    pub messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice<'a>>,
    /// Required by the API.
    pub max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata<'a>>,
    #[serde(skip_serializing_if = "is_false")]
    pub stream: bool,
    /// The caller's unmodelled fields (`thinking`, `top_k`, `service_tier`, …), minus those
    /// [`Request::owns`].
    #[serde(flatten)]
    pub extra: Extra<'a>,
}

impl Request<'_> {
    /// Whether the field `key` is weft's to write: set here, or decided by weft whether set or
    /// not (`stream`, and OpenAI's `parallel_tool_calls`, which becomes the tool choice's
    /// `disable_parallel_tool_use`). A passed-through field of that name is left out.
    pub fn owns(&self, key: &str) -> bool {
        match key {
            "model" | "messages" | "max_tokens" | "stream" | "parallel_tool_calls" => true,
            "system" => !self.system.is_empty(),
            "tools" => !self.tools.is_empty(),
            "tool_choice" => self.tool_choice.is_some(),
            "temperature" => self.temperature.is_some(),
            "top_p" => self.top_p.is_some(),
            "stop_sequences" => !self.stop_sequences.is_empty(),
            "metadata" => self.metadata.is_some(),
            _ => false,
        }
    }
}

/// `metadata`: the caller's end-user id, beside any other metadata the caller passed through.
#[derive(Clone, Debug, Serialize)]
pub struct Metadata<'a> {
    pub user_id: &'a str,
    #[serde(flatten)]
    pub rest: Extra<'a>,
}

impl<'a> Metadata<'a> {
    /// `user_id` added to the passed-through `metadata` (whose own `user_id`, if any, it
    /// replaces).
    pub fn new(user_id: &'a str, passed: Option<&'a Map<String, Value>>) -> Self {
        Self {
            user_id,
            rest: passed.map_or_else(Extra::default, |m| Extra::except(m, |k| k == "user_id")),
        }
    }
}

/// One turn of the conversation.
#[derive(Clone, Debug, Serialize)]
pub struct Message<'a> {
    /// `user` or `assistant`.
    pub role: &'a str,
    pub content: Vec<Block<'a>>,
}

/// A content block of a request.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block<'a> {
    Text {
        text: &'a str,
    },
    Image {
        source: ImageSource<'a>,
    },
    ToolUse {
        id: Cow<'a, str>,
        name: &'a str,
        /// The arguments, a JSON object.
        input: Value,
    },
    ToolResult {
        tool_use_id: Cow<'a, str>,
        /// Text and image blocks; left out when empty.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        content: Vec<Block<'a>>,
        #[serde(skip_serializing_if = "is_false")]
        is_error: bool,
    },
    /// Signed reasoning from an earlier answer, sent back.
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
}

/// Where an image comes from.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSource<'a> {
    Url { url: &'a str },
    Base64 { media_type: &'a str, data: &'a str },
}

/// A tool offered to the model.
#[derive(Clone, Debug, Serialize)]
pub struct Tool<'a> {
    pub name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub description: &'a str,
    pub input_schema: InputSchema<'a>,
}

/// A tool's `input_schema`, which must be an object schema.
#[derive(Clone, Debug)]
pub enum InputSchema<'a> {
    /// The caller's schema, as given.
    Given(&'a Value),
    /// `{"type": "object", "properties": {}}`, for a tool that takes no arguments.
    NoArguments,
}

impl Serialize for InputSchema<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        match self {
            Self::Given(v) => v.serialize(s),
            Self::NoArguments => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("type", "object")?;
                m.serialize_entry("properties", &Map::new())?;
                m.end()
            }
        }
    }
}

/// `tool_choice`: `auto`, `none`, `any`, or `tool` with its `name`.
#[derive(Clone, Debug, Serialize)]
pub struct ToolChoice<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    #[serde(skip_serializing_if = "is_false")]
    pub disable_parallel_tool_use: bool,
}

/// A whole answer (a `message` object), read leniently.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Answer<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::array")]
    pub content: Option<Vec<Obj<ContentBlock<'a>>>>,
    #[serde(default, deserialize_with = "lenient::object")]
    pub usage: Option<Usage>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub stop_reason: Option<Cow<'a, str>>,
}

/// A content block of an answer, or the start of one in a stream (`content_block`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ContentBlock<'a> {
    /// `text`, `thinking`, `tool_use`, `redacted_thinking`, server tool blocks, …
    #[serde(default, borrow, rename = "type", deserialize_with = "lenient::string")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub text: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub signature: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub name: Option<Cow<'a, str>>,
    /// A tool call's input (`null` reads as absent).
    #[serde(default)]
    pub input: Option<Value>,
}

/// Token counts; a stream reports cumulative counts, each event only some of them.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct Usage {
    #[serde(default, deserialize_with = "lenient::u64")]
    pub input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub output_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub cache_read_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub cache_creation_input_tokens: Option<u64>,
}

/// One SSE event of a streamed answer; which fields it has depends on `type`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamEvent<'a> {
    /// Names the event as well as the SSE `event:` line does.
    #[serde(default, borrow, rename = "type", deserialize_with = "lenient::string")]
    pub kind: Option<Cow<'a, str>>,
    /// `message_start`: present, whatever its value.
    #[serde(default, deserialize_with = "lenient::present")]
    pub message: Option<Obj<MessageStart>>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub index: Option<u64>,
    /// `content_block_start`: present, whatever its value.
    #[serde(default, borrow, deserialize_with = "lenient::present")]
    pub content_block: Option<Obj<ContentBlock<'a>>>,
    /// `content_block_delta` and `message_delta`: present, whatever its value.
    #[serde(default, borrow, deserialize_with = "lenient::present")]
    pub delta: Option<Obj<Delta<'a>>>,
    #[serde(default, deserialize_with = "lenient::object")]
    pub usage: Option<Usage>,
    #[serde(default, borrow, deserialize_with = "lenient::object")]
    pub error: Option<StreamError<'a>>,
}

/// `message_start`'s message: only its usage is read.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct MessageStart {
    #[serde(default, deserialize_with = "lenient::object")]
    pub usage: Option<Usage>,
}

/// What a `content_block_delta` adds to its block, or a `message_delta`'s `stop_reason`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Delta<'a> {
    /// `text_delta`, `thinking_delta`, `signature_delta`, `input_json_delta`, …
    #[serde(default, borrow, rename = "type", deserialize_with = "lenient::string")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub text: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub signature: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub stop_reason: Option<Cow<'a, str>>,
}

/// An `error` event's error.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamError<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub message: Option<Cow<'a, str>>,
    #[serde(default, borrow, rename = "type", deserialize_with = "lenient::string")]
    pub kind: Option<Cow<'a, str>>,
}
