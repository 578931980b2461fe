//! The `gemini` driver: Google's Gemini API over plain HTTP (reqwest). `POST
//! {base}/models/{model}:generateContent`, `:streamGenerateContent?alt=sse` (data-only SSE, each
//! event a whole `GenerateContentResponse`) and `:batchEmbedContents`, with the key in
//! `x-goog-api-key`. `base_url` includes the API version (`…/v1beta`).
//!
//! How weft's model maps: system and developer messages, wherever they stand, join
//! `systemInstruction` in order (Gemini has no system role inside `contents`); a tool result is a
//! `functionResponse` naming the function of the call it answers, with its output under
//! `response.content` (`response.error` when `is_error`); every tool-call id goes out through
//! [`tool_call_id`], and a call Gemini returns without an id gets `call_<turn>_<index>`, where
//! `turn` counts the assistant messages before it, so ids stay distinct across a conversation.
//!
//! What does not cross over, and why:
//! - Reasoning blocks are dropped from requests: Gemini does not take earlier thoughts back as
//!   text, only as opaque `thoughtSignature`s on parts, which weft's history does not carry yet
//!   (answers' signatures are ignored). Models that validate signatures on the function calls of
//!   the current turn (Gemini 3) will refuse a replayed tool loop until weft carries them.
//! - `user` and a message's `name` have no Gemini field and change nothing about the answer:
//!   dropped. An image's `detail` is a hint; Gemini picks its own resolution.
//! - Response parts that are neither text, thought nor function call (executable code, inline
//!   media) have no weft event and are skipped.
//! - Gemini reports no usage for embeddings: [`GeminiProvider::embed`] reports zero tokens.
//!
//! Parameters that do change behaviour and have no Gemini equivalent are refused with a 400.

use std::collections::{HashMap, VecDeque};

use std::borrow::Cow;

use serde_json::{Map, Value};
use weft_config::HttpProviderConfig;
use weft_core::Error;
use weft_core::message::{ContentBlock, FinishReason, Message, Role, Usage};
use weft_wire::gemini::{self as wire, Part};
use weft_wire::lenient;

#[cfg(test)]
use serde_json::json;

use super::http::{Fault, Fold, KeyStyle, Upstream};
use super::{EventStream, ProviderError, Unsupported, tool_call_id};
use crate::types::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult};

const KIND: &str = "gemini";

/// Every conformance case passes. Gemini sends each function call whole (no argument
/// fragments); the tool-call cases assert the assembled arguments, which that satisfies.
pub const UNSUPPORTED: &[Unsupported] = &[];

/// One configured Gemini provider.
pub struct GeminiProvider {
    up: Upstream,
}

impl GeminiProvider {
    /// Builds the driver and its connection pool. Fails when `api_key_env` names an unset
    /// variable, so a misconfiguration shows at start, not on the first request.
    pub fn new(name: &str, cfg: &HttpProviderConfig) -> Result<Self, String> {
        let up = Upstream::new(name, cfg, KeyStyle::Header("x-goog-api-key"), &[])?;
        // The model is part of the path, so the URL is made per call; a `base_url` that makes
        // no valid URL still fails here, at start.
        up.endpoint("/models/m:generateContent")?;
        Ok(Self { up })
    }

    /// The URL of `method` on `model`. A model name that makes no valid URL (from the
    /// operator's configuration) fails like an unreachable provider: the next candidate is
    /// tried, and the caller is not shown the provider's address.
    fn url(&self, model: &str, method: &str) -> Result<reqwest::Url, ProviderError> {
        self.up
            .endpoint(&format!("/{}:{method}", resource(model)))
            .map_err(|e| {
                tracing::warn!(provider = %self.up.name, error = %e, "no valid URL for this model");
                ProviderError::retryable(weft_core::Error::new(
                    weft_core::ErrorCode::UpstreamError,
                    format!(
                        "provider `{}`: the model name makes no valid URL; check router.providers.{}.models",
                        self.up.name, self.up.name
                    ),
                ))
            })
    }

    /// One model turn, streamed from the upstream or not as `req.stream` says.
    pub async fn chat(&self, model: &str, req: &ChatRequest) -> Result<EventStream, ProviderError> {
        let body = request(req)?;
        let turn = req
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        if req.stream {
            let url = self.url(model, "streamGenerateContent?alt=sse")?;
            let resp = self.up.post(&url, &body).await?;
            Ok(self.up.sse(resp, StreamState::new(turn)))
        } else {
            let resp = self
                .up
                .post(&self.url(model, "generateContent")?, &body)
                .await?;
            let bytes = self.up.body(resp).await?;
            let events = response_events(&bytes, turn)
                .ok_or_else(|| ProviderError::retryable(self.up.malformed_error()))?;
            Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
        }
    }

    /// Embeddings through `batchEmbedContents`, one request per input, in input order.
    pub async fn embed(
        &self,
        model: &str,
        req: &EmbedRequest,
    ) -> Result<EmbedResult, ProviderError> {
        let vectors = if req.input.is_empty() {
            Vec::new()
        } else {
            let name = resource(model);
            let body = embed_request(&name, req);
            let resp = self
                .up
                .post(&self.url(model, "batchEmbedContents")?, &body)
                .await?;
            let v: wire::BatchEmbedResponse = self.up.read(resp).await?;
            let malformed = || ProviderError::retryable(self.up.malformed_error());
            let vectors = v
                .embeddings
                .ok_or_else(malformed)?
                .into_iter()
                .map(|e| e.0.and_then(|e| e.values))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(malformed)?;
            if vectors.len() != req.input.len() {
                return Err(malformed());
            }
            vectors
        };
        Ok(EmbedResult {
            provider: self.up.name.clone(),
            model: model.to_owned(),
            vectors,
            // Gemini's embedding responses carry no token counts, and estimating them would
            // put invented numbers into accounting: zero says "not reported".
            usage: Usage::default(),
        })
    }
}

/// The `batchEmbedContents` body for the model resource `name`: one request per input.
pub(crate) fn embed_request<'a>(
    name: &'a str,
    req: &'a EmbedRequest,
) -> wire::BatchEmbedRequest<'a> {
    wire::BatchEmbedRequest {
        requests: req
            .input
            .iter()
            .map(|text| wire::EmbedRequest {
                model: name,
                content: wire::EmbedContent {
                    parts: [Part::Text(text)],
                },
                output_dimensionality: req.dimensions,
            })
            .collect(),
    }
}

/// The API resource of a model: `models/{model}`, or the name as given when it already names a
/// resource (`tunedModels/…`, `models/…`).
fn resource(model: &str) -> String {
    if model.contains('/') {
        model.to_owned()
    } else {
        format!("models/{model}")
    }
}

fn invalid(message: String, param: impl Into<String>) -> ProviderError {
    ProviderError::fatal(Error::invalid(message).with_param(param))
}

/// The `GenerateContentRequest` body for one turn, as JSON (for tests and the fuzz targets; a
/// call sends [`request`]'s typed body).
pub fn request_body(req: &ChatRequest) -> Result<Value, ProviderError> {
    Ok(serde_json::to_value(request(req)?).unwrap_or(Value::Null))
}

/// The `GenerateContentRequest` body for one turn.
pub(crate) fn request(req: &ChatRequest) -> Result<wire::Request<'_>, ProviderError> {
    let (system, contents) = contents(&req.messages)?;
    let mut tools = Vec::new();
    if !req.tools.is_empty() {
        let declarations = req
            .tools
            .iter()
            .map(|t| {
                let params = gemini_schema(&t.parameters);
                // A function without arguments is declared without `parameters`: Gemini
                // refuses an object schema with no properties.
                let has_properties = params
                    .get("properties")
                    .and_then(Value::as_object)
                    .is_some_and(|p| !p.is_empty());
                let is_object = params.get("type").is_none_or(|t| t == "object");
                wire::FunctionDeclaration {
                    name: &t.name,
                    description: &t.description,
                    parameters: (has_properties || !is_object).then_some(params),
                }
            })
            .collect();
        tools.push(wire::Tool {
            function_declarations: declarations,
        });
    }
    let tool_config = req.tool_choice.as_ref().map(tool_config).transpose()?;
    Ok(wire::Request {
        system_instruction: (!system.is_empty()).then_some(wire::Instruction { parts: system }),
        contents,
        tools,
        tool_config,
        generation_config: generation_config(req)?,
    })
}

/// System parts and the `contents` list. Roles map to `user` and `model`; tool results travel
/// as `functionResponse` parts of a `user` content; consecutive contents of one role are merged,
/// so parallel tool results answer their calls in a single content as Gemini requires.
fn contents(
    messages: &[Message],
) -> Result<(Vec<Part<'_>>, Vec<wire::Content<'_>>), ProviderError> {
    let mut system = Vec::new();
    let mut out: Vec<wire::Content<'_>> = Vec::new();
    // Normalised call id → function name: a functionResponse must name its function.
    let mut call_names: HashMap<Cow<'_, str>, &str> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        if matches!(m.role, Role::System | Role::Developer) {
            for b in &m.content {
                match b {
                    ContentBlock::Text { text } => system.push(Part::Text(text)),
                    ContentBlock::Reasoning { .. } => {}
                    _ => {
                        return Err(invalid(
                            format!(
                                "`messages[{i}]`: gemini providers take only text in system and developer messages"
                            ),
                            format!("messages[{i}].content"),
                        ));
                    }
                }
            }
            continue;
        }
        let role = if m.role == Role::Assistant {
            "model"
        } else {
            "user"
        };
        let mut parts = Vec::new();
        for b in &m.content {
            match b {
                ContentBlock::Text { text } => {
                    if !text.is_empty() {
                        parts.push(Part::Text(text));
                    }
                }
                ContentBlock::Image { url, .. } => parts.push(image_part(url, i)?),
                ContentBlock::ToolUse {
                    id,
                    name,
                    input_json,
                } => {
                    let id = tool_call_id(id);
                    call_names.insert(id.clone(), name.as_str());
                    parts.push(Part::FunctionCall(wire::FunctionCall {
                        name,
                        args: call_args(name, input_json, i)?,
                        id,
                    }));
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => {
                    let id = tool_call_id(tool_use_id);
                    let Some(name) = call_names.get(&id).copied() else {
                        return Err(invalid(
                            format!(
                                "`messages[{i}]` answers tool call `{tool_use_id}`, which no earlier assistant message made; gemini providers need the call to name the function"
                            ),
                            format!("messages[{i}]"),
                        ));
                    };
                    let text: String = content
                        .iter()
                        .filter_map(|c| match c {
                            ContentBlock::Text { text } => Some(text.as_str()),
                            _ => None,
                        })
                        .collect();
                    // `error` is the key Gemini documents for a failed call; any other key is
                    // read as the function's output.
                    let value = result_value(text);
                    let response = if *is_error {
                        wire::FunctionResult::Error(value)
                    } else {
                        wire::FunctionResult::Content(value)
                    };
                    parts.push(Part::FunctionResponse(wire::FunctionResponse {
                        name,
                        id,
                        response,
                    }));
                    for c in content {
                        if let ContentBlock::Image { url, .. } = c {
                            parts.push(image_part(url, i)?);
                        }
                    }
                }
                // Thoughts are not replayed (see the module docs).
                ContentBlock::Reasoning { .. } => {}
            }
        }
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(c) if c.role == role => c.parts.extend(parts),
            _ => out.push(wire::Content { role, parts }),
        }
    }
    Ok((system, out))
}

/// A tool call's arguments as the object Gemini's `args` must be.
fn call_args(name: &str, input_json: &str, i: usize) -> Result<Value, ProviderError> {
    let raw = input_json.trim();
    if raw.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(Value::Null) => Ok(Value::Object(Map::new())),
        _ => Err(invalid(
            format!(
                "`messages[{i}]`: the arguments of tool call `{name}` are not a JSON object, which gemini providers require"
            ),
            format!("messages[{i}]"),
        )),
    }
}

/// A tool result as a JSON value: structured results (objects, arrays) go as JSON, the rest as
/// the text itself.
fn result_value(text: String) -> Value {
    match serde_json::from_str::<Value>(&text) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
        _ => Value::String(text),
    }
}

/// An image part: `data:` URLs inline, `http(s)://` and `gs://` URLs by reference.
fn image_part(url: &str, i: usize) -> Result<Part<'_>, ProviderError> {
    let bad = |why: &str| {
        invalid(
            format!("`messages[{i}]`: image url {why}"),
            format!("messages[{i}].content"),
        )
    };
    if let Some(rest) = url.strip_prefix("data:") {
        let (meta, data) = rest
            .split_once(',')
            .ok_or_else(|| bad("is a data URL without data"))?;
        let mut fields = meta.split(';');
        let mime = fields.next().unwrap_or_default();
        if mime.is_empty() || !fields.any(|f| f == "base64") {
            return Err(bad(
                "must be a base64 data URL with a media type (data:image/png;base64,…)",
            ));
        }
        return Ok(Part::InlineData(wire::Blob {
            mime_type: mime,
            data,
        }));
    }
    if ["https://", "http://", "gs://"]
        .iter()
        .any(|p| url.starts_with(p))
    {
        return Ok(Part::FileData(wire::FileData {
            file_uri: url,
            mime_type: mime_from_url(url),
        }));
    }
    Err(bad("must be a data:, http(s):// or gs:// URL"))
}

fn mime_from_url(url: &str) -> Option<&'static str> {
    let path = url.split(['?', '#']).next()?;
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "webp" => "image/webp",
        "gif" => "image/gif",
        "heic" => "image/heic",
        "heif" => "image/heif",
        "pdf" => "application/pdf",
        _ => return None,
    })
}

/// OpenAI-style `tool_choice` as Gemini's `toolConfig`.
fn tool_config(tc: &Value) -> Result<wire::ToolConfig<'_>, ProviderError> {
    let named = tc
        .get("type")
        .filter(|t| *t == "function")
        .and_then(|_| tc.get("function")?.get("name")?.as_str());
    let mode = |mode| wire::FunctionCallingConfig {
        mode,
        allowed_function_names: None,
    };
    let config = match (tc.as_str(), named) {
        (Some("auto"), _) => mode("AUTO"),
        (Some("none"), _) => mode("NONE"),
        (Some("required"), _) => mode("ANY"),
        (None, Some(name)) => wire::FunctionCallingConfig {
            mode: "ANY",
            allowed_function_names: Some([name]),
        },
        _ => {
            return Err(invalid(
                r#"`tool_choice` must be "auto", "none", "required" or {"type": "function", "function": {"name": …}}"#
                    .to_owned(),
                "tool_choice",
            ));
        }
    };
    Ok(wire::ToolConfig {
        function_calling_config: config,
    })
}

/// `generationConfig`: sampling, the response format, and the Gemini-specific extras.
fn generation_config(req: &ChatRequest) -> Result<wire::GenerationConfig<'_>, ProviderError> {
    let s = &req.sampling;
    let mut g = wire::GenerationConfig {
        temperature: s.temperature,
        top_p: s.top_p,
        max_output_tokens: s.max_tokens,
        presence_penalty: s.presence_penalty,
        frequency_penalty: s.frequency_penalty,
        stop_sequences: &s.stop,
        ..wire::GenerationConfig::default()
    };
    if let Some(seed) = s.seed {
        let seed = i32::try_from(seed).map_err(|_| {
            invalid(
                format!("`seed` must fit in 32 bits for gemini providers, got {seed}"),
                "seed",
            )
        })?;
        g.seed = Some(seed);
    }
    if let Some(rf) = &req.response_format {
        match rf.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("json_object") => {
                g.response_mime_type = Some("application/json");
            }
            Some("json_schema") => {
                let schema = rf
                    .get("json_schema")
                    .and_then(|j| j.get("schema"))
                    .filter(|s| s.is_object())
                    .ok_or_else(|| {
                        invalid(
                            "`response_format.json_schema.schema` must be a JSON schema object"
                                .to_owned(),
                            "response_format",
                        )
                    })?;
                g.response_mime_type = Some("application/json");
                g.response_schema = Some(gemini_schema(schema));
            }
            _ => {
                return Err(invalid(
                    r#"`response_format.type` must be "text", "json_object" or "json_schema""#
                        .to_owned(),
                    "response_format",
                ));
            }
        }
    }
    for (k, v) in &req.extra {
        match k.as_str() {
            _ if v.is_null() => {}
            "top_k" | "topK" => g.top_k = Some(v),
            // Gemini's JSON parser takes both spellings of the fields inside.
            "thinking_config" | "thinkingConfig" => g.thinking_config = Some(v),
            // Asking for what Gemini does anyway changes nothing.
            "parallel_tool_calls" if *v == Value::Bool(true) => {}
            "logprobs" if *v == Value::Bool(false) => {}
            _ => {
                return Err(ProviderError::unsupported(
                    KIND,
                    k,
                    "besides the standard parameters they take `top_k` and `thinking_config`",
                ));
            }
        }
    }
    Ok(g)
}

/// Nested `$ref` expansions allowed on one path of a schema.
const MAX_REF_DEPTH: usize = 16;
/// Times one `$ref` may be expanded inside itself before a recursive schema is cut off.
const MAX_REF_RECURSION: usize = 2;
/// `$ref` expansions in one whole schema: a tenant's schema must not blow up the router (a
/// chain of definitions that each reference the next twice doubles at every level).
const MAX_REF_EXPANSIONS: usize = 256;

/// The `$ref`s being expanded on the current path, and how many were expanded in all.
#[derive(Default)]
struct Refs {
    path: Vec<String>,
    expanded: usize,
}

/// A JSON schema reduced to the subset Gemini's `Schema` accepts: every local `$ref` inlined
/// (recursive ones cut off after a few levels as `{type: object}`), `allOf` merged into one
/// schema, `oneOf` read as `anyOf`, `type: [T, "null"]` and `anyOf` with a `null` branch as
/// `nullable`, `const` as a one-value `enum`, and every keyword Gemini lacks dropped.
pub fn gemini_schema(schema: &Value) -> Value {
    let mut node = convert(schema, schema, &mut Refs::default());
    tidy(&mut node);
    Value::Object(node)
}

/// Keywords copied as they are.
const KEPT: &[&str] = &[
    "description",
    "nullable",
    "enum",
    "format",
    "maxItems",
    "minItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "required",
    "propertyOrdering",
];

fn convert(s: &Value, root: &Value, refs: &mut Refs) -> Map<String, Value> {
    let Some(obj) = s.as_object() else {
        // `true` / `false` schemas say nothing Gemini can express.
        return Map::new();
    };
    if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
        let target = r.strip_prefix('#').and_then(|p| root.pointer(p));
        let too_deep = refs.path.len() >= MAX_REF_DEPTH
            || refs.expanded >= MAX_REF_EXPANSIONS
            || refs.path.iter().filter(|x| x.as_str() == r).count() >= MAX_REF_RECURSION;
        let referenced = match target {
            Some(t) if !too_deep => {
                refs.expanded += 1;
                refs.path.push(r.to_owned());
                let m = convert(t, root, refs);
                refs.path.pop();
                m
            }
            _ => {
                let mut m = Map::new();
                m.insert("type".into(), Value::from("object"));
                m
            }
        };
        // Keywords beside `$ref` (most often a description) refine what it points at.
        let siblings: Map<String, Value> = obj
            .iter()
            .filter(|(k, _)| k.as_str() != "$ref")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut out = convert(&Value::Object(siblings), root, refs);
        merge(&mut out, referenced);
        return out;
    }

    let mut out = Map::new();
    let mut nullable = false;
    match obj.get("type") {
        Some(Value::String(t)) if t == "null" => nullable = true,
        Some(Value::String(t)) => {
            out.insert("type".into(), Value::from(t.as_str()));
        }
        Some(Value::Array(types)) => {
            let named: Vec<&str> = types
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect();
            nullable |= named.len() < types.len();
            match named.as_slice() {
                [] => {}
                [one] => {
                    out.insert("type".into(), Value::from(*one));
                }
                many => {
                    let variants: Vec<Value> = many
                        .iter()
                        .map(|t| Value::Object(Map::from_iter([("type".into(), Value::from(*t))])))
                        .collect();
                    out.insert("anyOf".into(), Value::Array(variants));
                }
            }
        }
        _ => {}
    }
    for k in KEPT {
        if let Some(v) = obj.get(*k) {
            out.insert((*k).into(), v.clone());
        }
    }
    if let Some(c) = obj.get("const") {
        out.entry("enum")
            .or_insert_with(|| Value::Array(vec![c.clone()]));
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        let props: Map<String, Value> = props
            .iter()
            .map(|(k, v)| (k.clone(), Value::Object(convert(v, root, refs))))
            .collect();
        out.insert("properties".into(), Value::Object(props));
    }
    if let Some(items) = obj.get("items").filter(|i| i.is_object()) {
        out.insert("items".into(), Value::Object(convert(items, root, refs)));
    }
    let variants = obj
        .get("anyOf")
        .or_else(|| obj.get("oneOf"))
        .and_then(Value::as_array);
    if let Some(variants) = variants {
        let mut kept = Vec::new();
        for v in variants {
            let c = convert(v, root, refs);
            // What `{type: "null"}` becomes: a variant that only allows null.
            if c.len() == 1 && c.get("nullable") == Some(&Value::Bool(true)) {
                nullable = true;
            } else {
                kept.push(c);
            }
        }
        if kept.len() == 1 {
            if let Some(only) = kept.pop() {
                merge(&mut out, only);
            }
        } else if !kept.is_empty() {
            out.insert(
                "anyOf".into(),
                Value::Array(kept.into_iter().map(Value::Object).collect()),
            );
        }
    }
    if let Some(Value::Array(parts)) = obj.get("allOf") {
        for p in parts {
            let c = convert(p, root, refs);
            merge(&mut out, c);
        }
    }
    if nullable {
        out.insert("nullable".into(), Value::Bool(true));
    }
    out
}

/// Merges `other` into `base`: `properties` and `required` become unions (a property both
/// define is merged in turn); for any other keyword what `base` already has wins.
fn merge(base: &mut Map<String, Value>, other: Map<String, Value>) {
    for (k, v) in other {
        match (k.as_str(), base.get_mut(&k), v) {
            ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                for (name, schema) in theirs {
                    match (mine.get_mut(&name), schema) {
                        (Some(Value::Object(a)), Value::Object(b)) => merge(a, b),
                        (Some(_), _) => {}
                        (None, schema) => {
                            mine.insert(name, schema);
                        }
                    }
                }
            }
            ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                for r in theirs {
                    if !mine.contains(&r) {
                        mine.push(r);
                    }
                }
            }
            (_, Some(_), _) => {}
            (_, None, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// The checks that need the whole merged node: `required` only names properties it has,
/// `format` only values Gemini knows for the type, `enum` only strings.
fn tidy(node: &mut Map<String, Value>) {
    let names: Option<Vec<String>> = node
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect());
    match (&names, node.get_mut("required")) {
        (Some(names), Some(Value::Array(req))) => {
            req.retain(|r| r.as_str().is_some_and(|r| names.iter().any(|n| n == r)));
        }
        (None, Some(_)) => {
            node.remove("required");
        }
        _ => {}
    }
    if node
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        node.remove("required");
    }
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        if values.iter().all(Value::is_string) {
            node.entry("type").or_insert_with(|| Value::from("string"));
        } else {
            // Gemini's enums are strings only; say the values in words instead.
            let listed = values
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let described = match node.get("description").and_then(Value::as_str) {
                Some(d) if !d.is_empty() => format!("{d} (one of: {listed})"),
                _ => format!("One of: {listed}"),
            };
            node.insert("description".into(), Value::String(described));
            node.remove("enum");
        }
    }
    if let Some(format) = node.get("format").and_then(Value::as_str) {
        let known = match node.get("type").and_then(Value::as_str) {
            Some("string") => ["enum", "date-time"].contains(&format),
            Some("number") => ["float", "double"].contains(&format),
            Some("integer") => ["int32", "int64"].contains(&format),
            _ => false,
        };
        if !known {
            node.remove("format");
        }
    }
    if let Some(Value::Object(props)) = node.get_mut("properties") {
        for p in props.values_mut() {
            if let Value::Object(p) = p {
                tidy(p);
            }
        }
    }
    if let Some(Value::Object(items)) = node.get_mut("items") {
        tidy(items);
    }
    if let Some(Value::Array(variants)) = node.get_mut("anyOf") {
        for v in variants {
            if let Value::Object(v) = v {
                tidy(v);
            }
        }
    }
}

/// Weft's usage from Gemini's `usageMetadata`. Thoughts are output the caller pays for;
/// `promptTokenCount` already includes cached tokens.
fn usage(u: &wire::UsageMetadata) -> Usage {
    let n = |k: Option<u64>| k.unwrap_or(0);
    // Upstream counts: sums saturate rather than overflow.
    let prompt = n(u.prompt_token_count).saturating_add(n(u.tool_use_prompt_token_count));
    let completion = n(u.candidates_token_count).saturating_add(n(u.thoughts_token_count));
    Usage {
        cache_read_tokens: n(u.cached_content_token_count),
        ..Usage::new(prompt, completion)
    }
}

/// The state of one answer, shared by the non-streamed body and the stream's chunks.
struct Turn {
    /// Assistant messages before this answer: ids Gemini leaves out are `call_<turn>_<index>`,
    /// so they stay unique across a conversation's history.
    turn: usize,
    calls: u32,
    usage: Option<Usage>,
    finish: Option<String>,
    blocked: bool,
}

impl Turn {
    fn new(turn: usize) -> Self {
        Self {
            turn,
            calls: 0,
            usage: None,
            finish: None,
            blocked: false,
        }
    }

    /// Applies one `GenerateContentResponse`; `false` when `v` is not one.
    fn apply(&mut self, v: &wire::Response<'_>, out: &mut VecDeque<ChatEvent>) -> bool {
        if v.candidates.is_none() && v.usage_metadata.is_none() && v.prompt_feedback.is_none() {
            return false;
        }
        // Streams repeat the running totals in every chunk: the last one is the answer's.
        if let Some(u) = v.usage_metadata.as_ref().and_then(|u| u.0.as_ref()) {
            self.usage = Some(usage(u));
        }
        if v.prompt_feedback
            .as_ref()
            .and_then(|f| f.0.as_ref())
            .is_some_and(|f| f.block_reason.is_some())
        {
            self.blocked = true;
        }
        let candidate = v.candidates.as_ref().and_then(|c| c.0.as_ref());
        let parts = candidate
            .and_then(|c| c.content.as_ref())
            .and_then(|c| c.parts.as_deref())
            .unwrap_or_default();
        for part in parts.iter().filter_map(|p| p.0.as_ref()) {
            if let Some(call) = &part.function_call {
                let call = call.0.as_ref();
                let Some(name) = call.and_then(|c| c.name.as_deref()) else {
                    return false;
                };
                let index = self.calls;
                self.calls += 1;
                let id = match call.and_then(|c| c.id.as_deref()).filter(|s| !s.is_empty()) {
                    Some(id) => tool_call_id(id).into_owned(),
                    None => format!("call_{}_{index}", self.turn),
                };
                let arguments = match call.and_then(|c| c.args.as_ref()) {
                    Some(a @ Value::Object(_)) => a.to_string(),
                    _ => "{}".to_owned(),
                };
                out.push_back(ChatEvent::ToolCallStart {
                    index,
                    id,
                    name: name.to_owned(),
                });
                out.push_back(ChatEvent::ToolCallDelta { index, arguments });
            } else if let Some(text) = part.text.as_deref().filter(|t| !t.is_empty()) {
                out.push_back(if part.thought == Some(true) {
                    ChatEvent::ReasoningDelta(text.to_owned())
                } else {
                    ChatEvent::TextDelta(text.to_owned())
                });
            }
        }
        if let Some(f) = candidate.and_then(|c| c.finish_reason.as_deref()) {
            self.finish = Some(f.to_owned());
        }
        true
    }

    /// Whether the upstream said the answer is over (a finish reason, or a blocked prompt).
    fn complete(&self) -> bool {
        self.finish.is_some() || self.blocked
    }

    /// Pushes the one usage record and the finish.
    fn end(&mut self, out: &mut VecDeque<ChatEvent>) {
        out.push_back(ChatEvent::Usage(self.usage.take().unwrap_or_default()));
        let finish = if self.blocked {
            FinishReason::ContentFilter
        } else {
            finish_reason(self.finish.as_deref(), self.calls > 0)
        };
        out.push_back(ChatEvent::Finish(finish));
    }
}

fn finish_reason(raw: Option<&str>, called: bool) -> FinishReason {
    match raw {
        Some("MAX_TOKENS") => FinishReason::Length,
        Some(
            "SAFETY"
            | "RECITATION"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION",
        ) => FinishReason::ContentFilter,
        _ if called => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

/// Events of a non-streamed answer body; `None` when it is not a `GenerateContentResponse`.
pub(crate) fn response_events(body: &[u8], turn: usize) -> Option<Vec<ChatEvent>> {
    parse(&lenient::from_slice(body).ok()??, turn)
}

/// Events of a non-streamed answer, parsed; `None` when it is not a `GenerateContentResponse`.
#[cfg(test)]
pub(crate) fn parse_response(v: &Value, turn: usize) -> Option<Vec<ChatEvent>> {
    parse(&lenient::from_value(v)?, turn)
}

fn parse(v: &wire::Response<'_>, turn: usize) -> Option<Vec<ChatEvent>> {
    let mut t = Turn::new(turn);
    let mut out = VecDeque::new();
    if !t.apply(v, &mut out) {
        return None;
    }
    t.end(&mut out);
    Some(out.into())
}

/// Folds Gemini's SSE chunks into weft events. Gemini sends no end marker: the answer is
/// complete when a chunk carried a finish reason and the body then ends.
pub(crate) struct StreamState {
    turn: Turn,
}

impl StreamState {
    pub(crate) fn new(turn: usize) -> Self {
        Self {
            turn: Turn::new(turn),
        }
    }
}

impl Fold for StreamState {
    fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), Fault> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        // Parsed once, borrowing from `data`.
        let v: wire::Response<'_> = lenient::from_str(data)
            .map_err(|_| Fault::Malformed)?
            .unwrap_or_default();
        if let Some(e) = &v.error {
            let e = e.0.as_ref();
            let message = e
                .and_then(|e| e.message.as_deref())
                .or_else(|| e.and_then(|e| e.status.as_deref()))
                .unwrap_or("unknown error");
            return Err(Fault::Upstream(message.chars().take(300).collect()));
        }
        if self.turn.apply(&v, out) {
            Ok(())
        } else {
            Err(Fault::Malformed)
        }
    }

    fn is_done(&self) -> bool {
        false
    }

    fn at_end(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), Fault> {
        if !self.turn.complete() {
            return Err(Fault::EndedEarly);
        }
        self.turn.end(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing::{msg, tool_result as result, tool_use as call};
    use crate::types::Sampling;
    use weft_core::ErrorCode;
    use weft_core::message::ToolSpec;

    // ---- schema conversion ----

    #[test]
    fn refs_are_inlined_from_defs_and_definitions() {
        let s = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "home": {"$ref": "#/$defs/Address", "description": "where they live"},
                "work": {"$ref": "#/definitions/Address"}
            },
            "required": ["home"],
            "$defs": {"Address": {"type": "object", "title": "Address", "description": "an address",
                "properties": {"city": {"type": "string"}}, "required": ["city"],
                "additionalProperties": false}},
            "definitions": {"Address": {"type": "object", "properties": {"zip": {"type": "string"}}}}
        });
        assert_eq!(
            gemini_schema(&s),
            json!({
                "type": "object",
                "properties": {
                    "home": {"type": "object", "description": "where they live",
                        "properties": {"city": {"type": "string"}}, "required": ["city"]},
                    "work": {"type": "object", "properties": {"zip": {"type": "string"}}}
                },
                "required": ["home"]
            })
        );
    }

    #[test]
    fn recursive_refs_stop_at_a_depth_limit() {
        let s = json!({
            "$ref": "#/$defs/Node",
            "$defs": {"Node": {"type": "object", "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
            }}}
        });
        let g = gemini_schema(&s);
        let level2 = &g["properties"]["children"]["items"];
        assert_eq!(level2["properties"]["value"]["type"], "integer");
        // The third expansion is cut off.
        assert_eq!(
            level2["properties"]["children"]["items"],
            json!({"type": "object"})
        );
        // A self-reference through `#` is cut the same way.
        let s = json!({"type": "object", "properties": {"next": {"$ref": "#"}}});
        let g = gemini_schema(&s);
        assert_eq!(
            g["properties"]["next"]["properties"]["next"]["properties"]["next"],
            json!({"type": "object"})
        );
        assert!(!g.to_string().contains("$ref"));
    }

    #[test]
    fn a_schema_that_doubles_at_every_level_stays_bounded() {
        let mut defs = Map::new();
        for i in 0..40 {
            defs.insert(
                format!("D{i}"),
                json!({"type": "object", "properties": {
                    "a": {"$ref": format!("#/$defs/D{}", i + 1)},
                    "b": {"$ref": format!("#/$defs/D{}", i + 1)}
                }}),
            );
        }
        defs.insert("D40".into(), json!({"type": "string"}));
        let s = json!({"$ref": "#/$defs/D0", "$defs": defs});
        let g = gemini_schema(&s);
        assert!(g.to_string().len() < 100_000);
        assert_eq!(g["properties"]["a"]["properties"]["a"]["type"], "object");
    }

    #[test]
    fn all_of_is_merged_into_one_schema() {
        let s = json!({
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "integer"}}, "required": ["b", "a"]},
                {"required": ["c"]}
            ],
            "description": "both"
        });
        assert_eq!(
            gemini_schema(&s),
            json!({
                "type": "object",
                "description": "both",
                "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                "required": ["a", "b"]
            })
        );
    }

    #[test]
    fn unsupported_keywords_are_dropped_and_const_becomes_enum() {
        let s = json!({
            "$id": "x", "title": "T", "type": "object", "additionalProperties": false,
            "examples": [{}], "default": {},
            "properties": {
                "kind": {"const": "circle", "default": "circle"},
                "when": {"type": "string", "format": "date-time"},
                "mail": {"type": "string", "format": "email", "minLength": 3, "pattern": "@"},
                "n": {"type": "integer", "minimum": 1, "exclusiveMaximum": 9, "enum": [1, 2]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "uniqueItems": true}
            }
        });
        assert_eq!(
            gemini_schema(&s),
            json!({
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["circle"]},
                    "when": {"type": "string", "format": "date-time"},
                    "mail": {"type": "string", "minLength": 3, "pattern": "@"},
                    "n": {"type": "integer", "minimum": 1, "description": "One of: 1, 2"},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}
                }
            })
        );
    }

    #[test]
    fn null_types_become_nullable() {
        let s = json!({"type": "object", "properties": {
            "a": {"type": ["string", "null"], "description": "maybe"},
            "b": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}], "default": null},
            "c": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "d": {"type": ["string", "integer"]}
        }, "$defs": {"N": {"type": "number"}}});
        assert_eq!(
            gemini_schema(&s),
            json!({"type": "object", "properties": {
                "a": {"type": "string", "nullable": true, "description": "maybe"},
                "b": {"type": "number", "nullable": true},
                "c": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "d": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
            }})
        );
    }

    // ---- request translation ----

    fn weather_tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "get_weather".into(),
                description: "Weather for a city".into(),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"], "additionalProperties": false}),
            },
            ToolSpec {
                name: "now".into(),
                description: String::new(),
                parameters: json!({"type": "object", "properties": {}}),
            },
        ]
    }

    #[test]
    fn tool_round_trips_carry_names_and_normalised_ids() {
        let req = ChatRequest {
            messages: vec![
                msg(Role::System, vec![ContentBlock::text("Be brief.")]),
                msg(Role::Developer, vec![ContentBlock::text("No emoji.")]),
                msg(
                    Role::User,
                    vec![ContentBlock::text("Weather in Paris and Rome?")],
                ),
                msg(
                    Role::Assistant,
                    vec![
                        ContentBlock::Reasoning {
                            text: "two calls".into(),
                            signature: Some("sig".into()),
                        },
                        ContentBlock::text("Checking."),
                        call("call.1/x", "get_weather", r#"{"city":"Paris"}"#),
                        call("c2", "get_weather", ""),
                    ],
                ),
                msg(Role::Tool, vec![result("call.1/x", "18C sunny")]),
                msg(
                    Role::Tool,
                    vec![ContentBlock::ToolResult {
                        tool_use_id: "c2".into(),
                        content: vec![ContentBlock::text(r#"{"error":"no such city"}"#)],
                        is_error: true,
                    }],
                ),
            ],
            tools: weather_tools(),
            ..Default::default()
        };
        let b = request_body(&req).unwrap();
        assert_eq!(
            b["systemInstruction"],
            json!({"parts": [{"text": "Be brief."}, {"text": "No emoji."}]})
        );
        let id = tool_call_id("call.1/x");
        assert_eq!(
            b["contents"],
            json!([
                {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
                {"role": "model", "parts": [
                    {"text": "Checking."},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": id}},
                    {"functionCall": {"name": "get_weather", "args": {}, "id": "c2"}}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "get_weather", "id": id,
                        "response": {"content": "18C sunny"}}},
                    {"functionResponse": {"name": "get_weather", "id": "c2",
                        "response": {"error": {"error": "no such city"}}}}
                ]}
            ])
        );
        assert!(!b.to_string().contains("call.1/x"));
        assert_eq!(
            b["tools"],
            json!([{"functionDeclarations": [
                {"name": "get_weather", "description": "Weather for a city", "parameters":
                    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "now"}
            ]}])
        );
    }

    #[test]
    fn a_tool_result_without_its_call_is_refused() {
        let req = ChatRequest {
            messages: vec![
                msg(Role::User, vec![ContentBlock::text("hi")]),
                msg(Role::Tool, vec![result("ghost", "x")]),
            ],
            ..Default::default()
        };
        let e = request_body(&req).unwrap_err();
        assert!(!e.retryable);
        assert_eq!(e.error.code, ErrorCode::InvalidRequest);
        assert_eq!(e.error.param.as_deref(), Some("messages[1]"));
        assert!(e.error.message.contains("ghost"), "{}", e.error.message);

        let bad_args = ChatRequest {
            messages: vec![msg(Role::Assistant, vec![call("c", "f", "[1]")])],
            ..Default::default()
        };
        assert!(request_body(&bad_args).is_err());
    }

    #[test]
    fn images_go_inline_or_by_reference() {
        let req = ChatRequest {
            messages: vec![msg(
                Role::User,
                vec![
                    ContentBlock::Image {
                        url: "data:image/png;base64,iVBORw0K".into(),
                        detail: Some("high".into()),
                    },
                    ContentBlock::Image {
                        url: "https://example.com/cat.JPG?x=1".into(),
                        detail: None,
                    },
                    ContentBlock::text("what is this"),
                ],
            )],
            ..Default::default()
        };
        let b = request_body(&req).unwrap();
        assert_eq!(
            b["contents"][0]["parts"],
            json!([
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}},
                {"fileData": {"fileUri": "https://example.com/cat.JPG?x=1", "mimeType": "image/jpeg"}},
                {"text": "what is this"}
            ])
        );
        let bad = ChatRequest {
            messages: vec![msg(
                Role::User,
                vec![ContentBlock::Image {
                    url: "data:image/png,raw".into(),
                    detail: None,
                }],
            )],
            ..Default::default()
        };
        assert!(request_body(&bad).is_err());
    }

    #[test]
    fn sampling_and_formats_map_to_generation_config() {
        let mut extra = Map::new();
        extra.insert("top_k".into(), json!(40));
        extra.insert("thinking_config".into(), json!({"thinkingBudget": 0}));
        extra.insert("parallel_tool_calls".into(), json!(true));
        let req = ChatRequest {
            messages: vec![msg(Role::User, vec![ContentBlock::text("hi")])],
            tools: weather_tools(),
            tool_choice: Some(json!({"type": "function", "function": {"name": "get_weather"}})),
            sampling: Sampling {
                temperature: Some(0.5),
                top_p: Some(0.9),
                max_tokens: Some(64),
                stop: vec!["END".into()],
                seed: Some(7),
                presence_penalty: Some(0.1),
                frequency_penalty: Some(0.2),
            },
            response_format: Some(json!({"type": "json_schema", "json_schema": {"name": "x",
                "schema": {"type": "object", "properties": {"a": {"type": ["string", "null"]}},
                    "additionalProperties": false}}})),
            user: Some("u-1".into()),
            extra,
            ..Default::default()
        };
        let b = request_body(&req).unwrap();
        assert_eq!(
            b["generationConfig"],
            json!({
                "temperature": 0.5, "topP": 0.9, "maxOutputTokens": 64, "stopSequences": ["END"],
                "seed": 7, "presencePenalty": 0.1, "frequencyPenalty": 0.2, "topK": 40,
                "thinkingConfig": {"thinkingBudget": 0},
                "responseMimeType": "application/json",
                "responseSchema": {"type": "object", "properties": {"a": {"type": "string", "nullable": true}}}
            })
        );
        assert_eq!(
            b["toolConfig"],
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}})
        );
        assert!(!b.to_string().contains("u-1"));
        for (tc, mode) in [("auto", "AUTO"), ("none", "NONE"), ("required", "ANY")] {
            let r = ChatRequest {
                tool_choice: Some(json!(tc)),
                ..Default::default()
            };
            assert_eq!(
                request_body(&r).unwrap()["toolConfig"]["functionCallingConfig"],
                json!({"mode": mode})
            );
        }
        let json_object = ChatRequest {
            response_format: Some(json!({"type": "json_object"})),
            ..Default::default()
        };
        assert_eq!(
            request_body(&json_object).unwrap()["generationConfig"],
            json!({"responseMimeType": "application/json"})
        );
    }

    #[test]
    fn parameters_gemini_cannot_honour_are_refused() {
        let with_extra = |k: &str, v: Value| {
            let mut extra = Map::new();
            extra.insert(k.into(), v);
            ChatRequest {
                extra,
                ..Default::default()
            }
        };
        let e = request_body(&with_extra("logit_bias", json!({"1": 2}))).unwrap_err();
        assert_eq!(e.error.code, ErrorCode::InvalidRequest);
        assert_eq!(e.error.param.as_deref(), Some("logit_bias"));
        assert!(request_body(&with_extra("parallel_tool_calls", json!(false))).is_err());
        assert!(request_body(&with_extra("reasoning_effort", json!("low"))).is_err());
        assert!(request_body(&with_extra("logprobs", json!(null))).is_ok());

        let seed = ChatRequest {
            sampling: Sampling {
                seed: Some(1 << 40),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            request_body(&seed).unwrap_err().error.param.as_deref(),
            Some("seed")
        );
        let tc = ChatRequest {
            tool_choice: Some(json!("sometimes")),
            ..Default::default()
        };
        assert!(request_body(&tc).is_err());
        let rf = ChatRequest {
            response_format: Some(json!({"type": "xml"})),
            ..Default::default()
        };
        assert!(request_body(&rf).is_err());
    }

    // ---- responses ----

    fn fold(chunks: &[&str]) -> (Vec<ChatEvent>, Result<(), Fault>) {
        let mut s = StreamState::new(1);
        let mut out = VecDeque::new();
        for c in chunks {
            if let Err(f) = s.on_event("", c, &mut out) {
                return (out.into(), Err(f));
            }
        }
        let end = s.at_end(&mut out);
        (out.into(), end)
    }

    #[test]
    fn stream_chunks_fold_into_events_with_one_usage_at_the_end() {
        let (ev, end) = fold(&[
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"plan","thought":true}]}}],"usageMetadata":{"promptTokenCount":10,"totalTokenCount":10}}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"On it."},{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}]}}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":3,"totalTokenCount":13}}"#,
            "",
            r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"get_time","args":{"tz":"Europe/Paris"},"id":"fc.7"}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":10,"cachedContentTokenCount":4,"candidatesTokenCount":6,"thoughtsTokenCount":5,"totalTokenCount":21}}"#,
        ]);
        end.unwrap();
        assert_eq!(
            ev,
            vec![
                ChatEvent::ReasoningDelta("plan".into()),
                ChatEvent::TextDelta("On it.".into()),
                ChatEvent::ToolCallStart {
                    index: 0,
                    id: "call_1_0".into(),
                    name: "get_weather".into()
                },
                ChatEvent::ToolCallDelta {
                    index: 0,
                    arguments: r#"{"city":"Paris"}"#.into()
                },
                ChatEvent::ToolCallStart {
                    index: 1,
                    id: tool_call_id("fc.7").into_owned(),
                    name: "get_time".into()
                },
                ChatEvent::ToolCallDelta {
                    index: 1,
                    arguments: r#"{"tz":"Europe/Paris"}"#.into()
                },
                ChatEvent::Usage(Usage {
                    cache_read_tokens: 4,
                    ..Usage::new(10, 11)
                }),
                ChatEvent::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn incomplete_failed_and_malformed_streams_are_faults() {
        let (ev, end) = fold(&[r#"{"candidates":[{"content":{"parts":[{"text":"Hel"}]}}]}"#]);
        assert!(matches!(end, Err(Fault::EndedEarly)));
        assert!(!ev.iter().any(|e| matches!(e, ChatEvent::Finish(_))));
        let (_, end) = fold(&[
            r#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#,
        ]);
        assert!(matches!(end, Err(Fault::Upstream(m)) if m == "The model is overloaded."));
        let (_, end) = fold(&[r#"{"candidates":[{"content":{"parts":[{"text":"Hel"#]);
        assert!(matches!(end, Err(Fault::Malformed)));
        let (_, end) = fold(&[r#"{"choices":[]}"#]);
        assert!(matches!(end, Err(Fault::Malformed)));
    }

    #[test]
    fn finish_reasons_and_blocked_prompts_map() {
        let (ev, end) = fold(&[
            r#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":7,"totalTokenCount":7}}"#,
        ]);
        end.unwrap();
        assert_eq!(
            ev,
            vec![
                ChatEvent::Usage(Usage::new(7, 0)),
                ChatEvent::Finish(FinishReason::ContentFilter)
            ]
        );
        for (raw, want) in [
            ("MAX_TOKENS", FinishReason::Length),
            ("RECITATION", FinishReason::ContentFilter),
            ("PROHIBITED_CONTENT", FinishReason::ContentFilter),
            ("OTHER", FinishReason::Stop),
        ] {
            let body = json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": raw}]});
            let ev = parse_response(&body, 0).unwrap();
            assert_eq!(ev.last(), Some(&ChatEvent::Finish(want)), "{raw}");
            // No usageMetadata still yields exactly one (zero) usage record.
            assert_eq!(
                ev.iter()
                    .filter(|e| matches!(e, ChatEvent::Usage(_)))
                    .count(),
                1
            );
        }
        assert!(parse_response(&json!({"id": 1}), 0).is_none());
    }

    #[tokio::test]
    async fn embeddings_batch_one_request_per_input_and_report_zero_usage() {
        use weft_testkit::{FixtureServer, Kind};
        let dir = FixtureServer::fixture_dir(env!("CARGO_MANIFEST_DIR"), Kind::Gemini);
        let server = FixtureServer::start(Kind::Gemini, dir).await;
        let p = GeminiProvider::new("g", &HttpProviderConfig::new(server.base_url())).unwrap();
        let req = EmbedRequest {
            input: vec!["a".into(), "b".into()],
            dimensions: Some(4),
            user: Some("u".into()),
            ..Default::default()
        };
        let r = p.embed("text-embedding-004", &req).await.unwrap();
        assert_eq!(r.vectors.len(), 2);
        assert!(r.vectors.iter().all(|v| v.len() == 4));
        assert_ne!(r.vectors[0], r.vectors[1]);
        assert_eq!(r.usage, Usage::default());
        let sent = server.requests();
        assert_eq!(sent.len(), 1);
        assert_eq!(
            sent[0].path,
            "/v1beta/models/text-embedding-004:batchEmbedContents"
        );
        assert_eq!(
            sent[0].body["requests"][1],
            json!({"model": "models/text-embedding-004", "content": {"parts": [{"text": "b"}]},
                "outputDimensionality": 4})
        );
    }

    /// Splits an SSE body into its data payloads (enough for the fixtures).
    fn sse_data(body: &str) -> Vec<String> {
        body.replace("\r\n", "\n")
            .split("\n\n")
            .filter_map(|ev| {
                let data: Vec<&str> = ev
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                (!data.is_empty()).then(|| data.join("\n"))
            })
            .collect()
    }

    #[test]
    fn conformance_fixtures_fold_to_the_manifest_usage() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gemini");
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{dir}/manifest.json")).unwrap())
                .unwrap();
        for (file, want) in manifest["usage"].as_object().unwrap() {
            let body = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
            let events = if file.ends_with(".stream") {
                let chunks = sse_data(&body);
                let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
                let (ev, end) = fold(&refs);
                end.unwrap();
                ev
            } else {
                parse_response(&serde_json::from_str(&body).unwrap(), 0).unwrap()
            };
            let usages: Vec<&Usage> = events
                .iter()
                .filter_map(|e| match e {
                    ChatEvent::Usage(u) => Some(u),
                    _ => None,
                })
                .collect();
            assert_eq!(usages.len(), 1, "{file}");
            assert_eq!(usages[0].prompt_tokens, want["prompt_tokens"], "{file}");
            assert_eq!(
                usages[0].completion_tokens, want["completion_tokens"],
                "{file}"
            );
            assert_eq!(
                usages[0].cache_read_tokens, want["cache_read_tokens"],
                "{file}"
            );
        }
        let malformed = std::fs::read_to_string(format!("{dir}/malformed.stream")).unwrap();
        let chunks = sse_data(&malformed);
        let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
        assert!(fold(&refs).1.is_err());
    }

    /// Counts near u64::MAX saturate instead of overflowing (as the openai driver's did).
    #[test]
    fn usage_counts_at_the_edge_of_u64_saturate() {
        let v = json!({
            "candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": u64::MAX, "toolUsePromptTokenCount": 1,
                              "candidatesTokenCount": u64::MAX, "thoughtsTokenCount": 1},
        });
        let ev = parse_response(&v, 0).unwrap();
        let Some(ChatEvent::Usage(u)) = ev.iter().find(|e| matches!(e, ChatEvent::Usage(_))) else {
            panic!("no usage in {ev:?}");
        };
        assert_eq!(u.total_tokens, u64::MAX);
    }
}
