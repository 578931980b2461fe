//! Anthropic's Messages API (`POST /v1/messages`): the request the router's `anthropic` driver
//! sends, and the answer it reads, whole ([`Answer`]) or as SSE events ([`StreamEvent`]); and, in
//! [`write`], the answer weft's own Anthropic-compatible `/v1/messages` writes.

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

/// The answer as weft's Anthropic-compatible `/v1/messages` writes it: the `message` object, the
/// stream's events and `count_tokens`' answer, in the shapes of Anthropic's API reference. An
/// answer's text, thinking and tool-use blocks are the request's [`Block`]s, which have the same
/// shape.
pub mod write {
    use serde::Serialize;

    use super::Block;

    /// A whole answer, or (empty, with no stop reason) the one a stream's `message_start`
    /// opens.
    #[derive(Clone, Debug, Serialize)]
    pub struct Message<'a> {
        pub id: &'a str,
        /// Always `"message"`.
        #[serde(rename = "type")]
        pub kind: &'a str,
        /// Always `"assistant"`.
        pub role: &'a str,
        pub model: &'a str,
        pub content: Vec<Block<'a>>,
        /// `end_turn`, `max_tokens`, `tool_use`, `refusal`; `null` until the answer ends.
        pub stop_reason: Option<&'a str>,
        /// The stop sequence that matched; always `null` from weft, which does not know it.
        pub stop_sequence: Option<&'a str>,
        pub usage: Usage,
    }

    impl<'a> Message<'a> {
        /// The assistant's message `id`, naming `model`.
        pub fn new(
            id: &'a str,
            model: &'a str,
            content: Vec<Block<'a>>,
            stop_reason: Option<&'a str>,
            usage: Usage,
        ) -> Self {
            Self {
                id,
                kind: "message",
                role: "assistant",
                model,
                content,
                stop_reason,
                stop_sequence: None,
                usage,
            }
        }
    }

    /// Token counts: `input_tokens` excludes the cached input, which the other two count.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
    pub struct Usage {
        pub input_tokens: u64,
        pub cache_creation_input_tokens: u64,
        pub cache_read_input_tokens: u64,
        pub output_tokens: u64,
    }

    /// One event of a streamed answer; its `type` is also the SSE `event:` name
    /// ([`Event::name`]).
    #[derive(Clone, Debug, Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Event<'a> {
        MessageStart {
            message: Message<'a>,
        },
        /// A block opens: empty text, empty thinking, or a tool call with an empty `input`.
        ContentBlockStart {
            index: u32,
            content_block: Block<'a>,
        },
        ContentBlockDelta {
            index: u32,
            delta: Delta<'a>,
        },
        ContentBlockStop {
            index: u32,
        },
        /// The answer's end: its stop reason and the call's usage.
        MessageDelta {
            delta: MessageDelta<'a>,
            usage: Usage,
        },
        MessageStop,
        /// Also the body of an error answer (`{"type": "error", "error": {…}}`).
        Error {
            error: ErrorDetail<'a>,
        },
    }

    impl Event<'_> {
        /// The SSE `event:` name, the same as the `type`.
        pub fn name(&self) -> &'static str {
            match self {
                Self::MessageStart { .. } => "message_start",
                Self::ContentBlockStart { .. } => "content_block_start",
                Self::ContentBlockDelta { .. } => "content_block_delta",
                Self::ContentBlockStop { .. } => "content_block_stop",
                Self::MessageDelta { .. } => "message_delta",
                Self::MessageStop => "message_stop",
                Self::Error { .. } => "error",
            }
        }
    }

    /// What a `content_block_delta` adds to its block.
    #[derive(Clone, Debug, Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Delta<'a> {
        TextDelta {
            text: &'a str,
        },
        ThinkingDelta {
            thinking: &'a str,
        },
        SignatureDelta {
            signature: &'a str,
        },
        /// A piece of a tool call's JSON arguments.
        InputJsonDelta {
            partial_json: &'a str,
        },
    }

    /// `message_delta`'s `delta`.
    #[derive(Clone, Debug, Serialize)]
    pub struct MessageDelta<'a> {
        pub stop_reason: Option<&'a str>,
        /// Always `null` from weft (see [`Message::stop_sequence`]).
        pub stop_sequence: Option<&'a str>,
    }

    /// An error's `type` (`invalid_request_error`, `overloaded_error`, …) and message.
    #[derive(Clone, Debug, Serialize)]
    pub struct ErrorDetail<'a> {
        #[serde(rename = "type")]
        pub kind: &'a str,
        pub message: &'a str,
    }

    /// `POST /v1/messages/count_tokens`' answer.
    #[derive(Clone, Copy, Debug, Serialize)]
    pub struct TokenCount {
        pub input_tokens: u64,
    }

    #[cfg(test)]
    mod tests {
        use std::borrow::Cow;

        use serde_json::{Map, Value, json};

        use super::*;

        fn usage() -> Usage {
            Usage {
                input_tokens: 1,
                cache_creation_input_tokens: 2,
                cache_read_input_tokens: 3,
                output_tokens: 4,
            }
        }

        #[test]
        fn answers_have_anthropics_shape() {
            let m = Message::new(
                "msg_1",
                "claude",
                vec![
                    Block::Thinking {
                        thinking: "hm",
                        signature: "s",
                    },
                    Block::Text { text: "hi" },
                    Block::ToolUse {
                        id: Cow::Borrowed("t"),
                        name: "f",
                        input: Value::Object(Map::new()),
                    },
                ],
                Some("tool_use"),
                usage(),
            );
            assert_eq!(
                serde_json::to_value(&m).unwrap(),
                json!({
                    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
                    "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "text", "text": "hi"},
                        {"type": "tool_use", "id": "t", "name": "f", "input": {}},
                    ],
                    "stop_reason": "tool_use", "stop_sequence": null,
                    "usage": {"input_tokens": 1, "output_tokens": 4,
                              "cache_creation_input_tokens": 2, "cache_read_input_tokens": 3},
                })
            );
        }

        #[test]
        fn events_are_tagged_with_their_name() {
            let events = [
                (
                    Event::MessageStart {
                        message: Message::new("m", "c", Vec::new(), None, Usage::default()),
                    },
                    json!({"type": "message_start", "message": {
                        "id": "m", "type": "message", "role": "assistant", "model": "c",
                        "content": [], "stop_reason": null, "stop_sequence": null,
                        "usage": {"input_tokens": 0, "output_tokens": 0,
                                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
                    }}),
                ),
                (
                    Event::ContentBlockStart {
                        index: 1,
                        content_block: Block::Text { text: "" },
                    },
                    json!({"type": "content_block_start", "index": 1,
                           "content_block": {"type": "text", "text": ""}}),
                ),
                (
                    Event::ContentBlockDelta {
                        index: 2,
                        delta: Delta::InputJsonDelta { partial_json: "{" },
                    },
                    json!({"type": "content_block_delta", "index": 2,
                           "delta": {"type": "input_json_delta", "partial_json": "{"}}),
                ),
                (
                    Event::ContentBlockStop { index: 3 },
                    json!({"type": "content_block_stop", "index": 3}),
                ),
                (
                    Event::MessageDelta {
                        delta: MessageDelta {
                            stop_reason: Some("end_turn"),
                            stop_sequence: None,
                        },
                        usage: usage(),
                    },
                    json!({"type": "message_delta",
                           "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                           "usage": {"input_tokens": 1, "output_tokens": 4,
                                     "cache_creation_input_tokens": 2,
                                     "cache_read_input_tokens": 3}}),
                ),
                (Event::MessageStop, json!({"type": "message_stop"})),
                (
                    Event::Error {
                        error: ErrorDetail {
                            kind: "api_error",
                            message: "m",
                        },
                    },
                    json!({"type": "error", "error": {"type": "api_error", "message": "m"}}),
                ),
            ];
            for (event, want) in events {
                let got = serde_json::to_value(&event).unwrap();
                assert_eq!(got, want);
                assert_eq!(got["type"], event.name());
            }
        }
    }
}
