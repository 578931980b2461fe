//! OpenAI's Responses API (`POST /v1/responses`), as weft's door writes it: the response object
//! and its output items, and the typed stream events from `response.created` to
//! `response.completed` (or `response.incomplete`, `response.failed`, `error`).
//!
//! Every type here is written by weft (and read back by the tests through `serde_json::Value`);
//! a request is read by the gateway's door, which checks each input item as it converts it.

use serde::Serialize;
use serde_json::Value;

/// `"response"`.
pub const OBJECT: &str = "response";

/// A response: the whole answer (and what `GET /v1/responses/{id}` returns), or the same object
/// as a stream's first and last events carry it.
#[derive(Clone, Debug, Serialize)]
pub struct Response<'a> {
    pub id: &'a str,
    /// Always `"response"`.
    pub object: &'static str,
    pub created_at: u64,
    /// `in_progress`, `completed`, `incomplete` or `failed`.
    pub status: &'static str,
    /// Always `false`: weft answers in the request.
    pub background: bool,
    pub error: Option<ErrorObject<'a>>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<&'a Value>,
    pub max_output_tokens: Option<u32>,
    pub model: &'a str,
    pub output: Vec<Item<'a>>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<&'a str>,
    pub reasoning: Reasoning<'a>,
    pub store: bool,
    pub temperature: Option<f64>,
    pub text: TextConfig<'a>,
    pub tool_choice: &'a Value,
    pub tools: &'a [Value],
    pub top_p: Option<f64>,
    /// Always `"disabled"`: a conversation too long for the model fails, it is never cut.
    pub truncation: &'static str,
    pub usage: Option<Usage>,
    pub user: Option<&'a str>,
    pub metadata: &'a Value,
}

/// Why a response is `failed`.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorObject<'a> {
    pub code: &'a str,
    pub message: &'a str,
}

/// Why a response is `incomplete`: `max_output_tokens` or `content_filter`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct IncompleteDetails {
    pub reason: &'static str,
}

/// The reasoning settings, echoed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Reasoning<'a> {
    pub effort: Option<&'a Value>,
    pub summary: Option<&'a Value>,
}

/// The text settings, echoed: `{"format": {"type": "text"}}` unless the request set one.
#[derive(Clone, Debug, Serialize)]
pub struct TextConfig<'a> {
    pub format: &'a Value,
}

/// Token counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub input_tokens_details: InputDetails,
    pub output_tokens: u64,
    pub output_tokens_details: OutputDetails,
    pub total_tokens: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InputDetails {
    pub cached_tokens: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OutputDetails {
    pub reasoning_tokens: u64,
}

/// An output item.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item<'a> {
    /// The assistant's text.
    Message {
        id: &'a str,
        /// `in_progress` or `completed`.
        status: &'static str,
        /// Always `"assistant"`.
        role: &'static str,
        content: Vec<Part<'a>>,
    },
    /// A call of one of the request's function tools.
    FunctionCall {
        id: &'a str,
        /// The id the tool's output names (`function_call_output.call_id`).
        call_id: &'a str,
        name: &'a str,
        /// JSON text, as the model wrote it.
        arguments: &'a str,
        status: &'static str,
    },
    /// The model's reasoning, as text (`reasoning_text`); a provider's signature over it
    /// travels as `encrypted_content`, so a continuation can send it back.
    Reasoning {
        id: &'a str,
        summary: [(); 0],
        content: Vec<Part<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<&'a str>,
        status: &'static str,
    },
}

/// A content part of an output item.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part<'a> {
    OutputText {
        text: &'a str,
        annotations: [(); 0],
        logprobs: [(); 0],
    },
    ReasoningText {
        text: &'a str,
    },
}

impl<'a> Part<'a> {
    pub fn output_text(text: &'a str) -> Self {
        Self::OutputText {
            text,
            annotations: [],
            logprobs: [],
        }
    }
}

/// One stream event; written as `event: <name>` with the event (its `type` the same name and a
/// `sequence_number` counting from 0) as the data.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type")]
pub enum Event<'a> {
    #[serde(rename = "response.created")]
    Created {
        sequence_number: u64,
        response: &'a Response<'a>,
    },
    #[serde(rename = "response.in_progress")]
    InProgress {
        sequence_number: u64,
        response: &'a Response<'a>,
    },
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded {
        sequence_number: u64,
        output_index: u32,
        item: Item<'a>,
    },
    #[serde(rename = "response.output_item.done")]
    OutputItemDone {
        sequence_number: u64,
        output_index: u32,
        item: Item<'a>,
    },
    #[serde(rename = "response.content_part.added")]
    ContentPartAdded {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        content_index: u32,
        part: Part<'a>,
    },
    #[serde(rename = "response.content_part.done")]
    ContentPartDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        content_index: u32,
        part: Part<'a>,
    },
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        content_index: u32,
        delta: &'a str,
        logprobs: [(); 0],
    },
    #[serde(rename = "response.output_text.done")]
    OutputTextDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        content_index: u32,
        text: &'a str,
        logprobs: [(); 0],
    },
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningTextDelta {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        content_index: u32,
        delta: &'a str,
    },
    #[serde(rename = "response.reasoning_text.done")]
    ReasoningTextDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        content_index: u32,
        text: &'a str,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        delta: &'a str,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionCallArgumentsDone {
        sequence_number: u64,
        item_id: &'a str,
        output_index: u32,
        name: &'a str,
        arguments: &'a str,
    },
    #[serde(rename = "response.completed")]
    Completed {
        sequence_number: u64,
        response: &'a Response<'a>,
    },
    #[serde(rename = "response.incomplete")]
    Incomplete {
        sequence_number: u64,
        response: &'a Response<'a>,
    },
    #[serde(rename = "response.failed")]
    Failed {
        sequence_number: u64,
        response: &'a Response<'a>,
    },
    /// A failure mid-stream (followed by `response.failed`).
    #[serde(rename = "error")]
    Error {
        sequence_number: u64,
        code: &'a str,
        message: &'a str,
        param: Option<&'a str>,
    },
}

impl Event<'_> {
    /// The SSE event name: the event's `type`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Created { .. } => "response.created",
            Self::InProgress { .. } => "response.in_progress",
            Self::OutputItemAdded { .. } => "response.output_item.added",
            Self::OutputItemDone { .. } => "response.output_item.done",
            Self::ContentPartAdded { .. } => "response.content_part.added",
            Self::ContentPartDone { .. } => "response.content_part.done",
            Self::OutputTextDelta { .. } => "response.output_text.delta",
            Self::OutputTextDone { .. } => "response.output_text.done",
            Self::ReasoningTextDelta { .. } => "response.reasoning_text.delta",
            Self::ReasoningTextDone { .. } => "response.reasoning_text.done",
            Self::FunctionCallArgumentsDelta { .. } => "response.function_call_arguments.delta",
            Self::FunctionCallArgumentsDone { .. } => "response.function_call_arguments.done",
            Self::Completed { .. } => "response.completed",
            Self::Incomplete { .. } => "response.incomplete",
            Self::Failed { .. } => "response.failed",
            Self::Error { .. } => "error",
        }
    }
}

/// `DELETE /v1/responses/{id}`'s answer.
#[derive(Clone, Debug, Serialize)]
pub struct Deleted<'a> {
    pub id: &'a str,
    /// Always `"response"`.
    pub object: &'static str,
    pub deleted: bool,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn events_carry_their_type_and_sequence_number() {
        let e = Event::OutputTextDelta {
            sequence_number: 3,
            item_id: "msg_1",
            output_index: 0,
            content_index: 0,
            delta: "hi",
            logprobs: [],
        };
        assert_eq!(e.name(), "response.output_text.delta");
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"type": "response.output_text.delta", "sequence_number": 3, "item_id": "msg_1",
                   "output_index": 0, "content_index": 0, "delta": "hi", "logprobs": []})
        );
        let call = Item::FunctionCall {
            id: "fc_1",
            call_id: "call_1",
            name: "f",
            arguments: "{}",
            status: "completed",
        };
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
                   "arguments": "{}", "status": "completed"})
        );
    }
}
