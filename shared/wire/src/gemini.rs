//! Google's Gemini API: the `GenerateContentRequest` the router's `gemini` driver sends to
//! `:generateContent` and `:streamGenerateContent`, the `GenerateContentResponse` it reads (whole,
//! or one per SSE event), and `:batchEmbedContents`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::lenient::{self, First, Obj};

/// A `GenerateContentRequest`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_instruction: Option<Instruction<'a>>,
    pub contents: Vec<Content<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_config: Option<ToolConfig<'a>>,
    #[serde(skip_serializing_if = "GenerationConfig::is_empty")]
    pub generation_config: GenerationConfig<'a>,
}

/// `systemInstruction`: parts without a role.
#[derive(Clone, Debug, Serialize)]
pub struct Instruction<'a> {
    pub parts: Vec<Part<'a>>,
}

/// One turn: `user` or `model`.
#[derive(Clone, Debug, Serialize)]
pub struct Content<'a> {
    pub role: &'a str,
    pub parts: Vec<Part<'a>>,
}

/// One part of a turn, `{"<kind>": …}`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Part<'a> {
    Text(&'a str),
    InlineData(Blob<'a>),
    FileData(FileData<'a>),
    FunctionCall(FunctionCall<'a>),
    FunctionResponse(FunctionResponse<'a>),
}

/// Inline bytes, base64.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Blob<'a> {
    pub mime_type: &'a str,
    pub data: &'a str,
}

/// A file by URI (`https://`, `gs://`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileData<'a> {
    pub file_uri: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<&'a str>,
}

/// A call the model made, sent back in the history.
#[derive(Clone, Debug, Serialize)]
pub struct FunctionCall<'a> {
    pub name: &'a str,
    /// The arguments, a JSON object.
    pub args: Value,
    pub id: Cow<'a, str>,
}

/// A function's result, answering the call of the same `id`.
#[derive(Clone, Debug, Serialize)]
pub struct FunctionResponse<'a> {
    pub name: &'a str,
    pub id: Cow<'a, str>,
    pub response: FunctionResult,
}

/// `{"content": …}`, or `{"error": …}` for a failed call (the key Gemini documents for it).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionResult {
    Content(Value),
    Error(Value),
}

/// `tools`: one entry holding the function declarations.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool<'a> {
    pub function_declarations: Vec<FunctionDeclaration<'a>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FunctionDeclaration<'a> {
    pub name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub description: &'a str,
    /// Left out for a function without arguments: Gemini refuses an object schema with no
    /// properties.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

/// `toolConfig`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolConfig<'a> {
    pub function_calling_config: FunctionCallingConfig<'a>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionCallingConfig<'a> {
    /// `AUTO`, `NONE` or `ANY`.
    pub mode: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_function_names: Option<[&'a str; 1]>,
}

/// `generationConfig`; left out of the request when empty.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i32>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_mime_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
    /// Passed through from the caller's `top_k`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<&'a Value>,
    /// Passed through from the caller's `thinking_config`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_config: Option<&'a Value>,
}

impl GenerationConfig<'_> {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        self.temperature.is_none()
            && self.top_p.is_none()
            && self.max_output_tokens.is_none()
            && self.presence_penalty.is_none()
            && self.frequency_penalty.is_none()
            && self.seed.is_none()
            && self.stop_sequences.is_empty()
            && self.response_mime_type.is_none()
            && self.response_schema.is_none()
            && self.top_k.is_none()
            && self.thinking_config.is_none()
    }
}

/// A `GenerateContentResponse` (a whole answer, or one event of a stream), read leniently.
/// `candidates`, `usageMetadata`, `promptFeedback` and `error` are `Some` whenever present,
/// whatever their value: a body with none of the first three is not a response.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Response<'a> {
    /// The first candidate (weft asks for one).
    #[serde(default, borrow, deserialize_with = "lenient::present")]
    pub candidates: Option<First<Candidate<'a>>>,
    #[serde(default, deserialize_with = "lenient::present")]
    pub usage_metadata: Option<Obj<UsageMetadata>>,
    #[serde(default, borrow, deserialize_with = "lenient::present")]
    pub prompt_feedback: Option<Obj<PromptFeedback<'a>>>,
    #[serde(default, borrow, deserialize_with = "lenient::present")]
    pub error: Option<Obj<Error<'a>>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::object")]
    pub content: Option<CandidateContent<'a>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub finish_reason: Option<Cow<'a, str>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct CandidateContent<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::array")]
    pub parts: Option<Vec<Obj<AnswerPart<'a>>>>,
}

/// A part of an answer: text, a thought (`thought: true`), or a function call.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerPart<'a> {
    /// Present, whatever its value.
    #[serde(default, borrow, deserialize_with = "lenient::present")]
    pub function_call: Option<Obj<AnswerCall<'a>>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub text: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "lenient::bool")]
    pub thought: Option<bool>,
}

/// A function call of an answer, whole.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct AnswerCall<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub id: Option<Cow<'a, str>>,
    /// The arguments (`null` reads as absent).
    #[serde(default)]
    pub args: Option<Value>,
}

/// `usageMetadata`.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageMetadata {
    #[serde(default, deserialize_with = "lenient::u64")]
    pub prompt_token_count: Option<u64>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub tool_use_prompt_token_count: Option<u64>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub candidates_token_count: Option<u64>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub thoughts_token_count: Option<u64>,
    #[serde(default, deserialize_with = "lenient::u64")]
    pub cached_content_token_count: Option<u64>,
}

/// `promptFeedback`: a `blockReason` means the prompt was blocked.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptFeedback<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub block_reason: Option<Cow<'a, str>>,
}

/// An error reported inside a stream.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Error<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub message: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub status: Option<Cow<'a, str>>,
}

/// A `batchEmbedContents` request: one request per input.
#[derive(Clone, Debug, Serialize)]
pub struct BatchEmbedRequest<'a> {
    pub requests: Vec<EmbedRequest<'a>>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EmbedRequest<'a> {
    /// The model's resource name (`models/…`).
    pub model: &'a str,
    pub content: EmbedContent<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_dimensionality: Option<u32>,
}

/// The one text to embed.
#[derive(Clone, Debug, Serialize)]
pub struct EmbedContent<'a> {
    pub parts: [Part<'a>; 1],
}

/// A `batchEmbedContents` answer, read leniently.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct BatchEmbedResponse {
    #[serde(default, deserialize_with = "lenient::array")]
    pub embeddings: Option<Vec<Obj<ContentEmbedding>>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ContentEmbedding {
    #[serde(default, deserialize_with = "lenient::f32s")]
    pub values: Option<Vec<f32>>,
}
