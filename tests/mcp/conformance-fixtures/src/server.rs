//! `weft-mcp-conformance-server`: every fixture the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, tests/mcp/) expects of a server under test — the
//! `test_*` tools, resources, templates, prompts, completion, logging, sampling and elicitation
//! on the 2025-11-25 wire, and the 2026-07-28 diagnostics and SEP-2322 `input_required` tools —
//! served through weft's own transport and session layers,
//! [`weft_mcp_face::streamable`], with the face's default `Host`/`Origin` rules and,
//! given `--database-url`, the Postgres session store the gateway uses.
//!
//! ```text
//! weft-mcp-conformance-server [--listen 127.0.0.1:0] [--port-file F] [--database-url URL]
//! ```
//! Serves `http://<listen>/mcp`; the bound port is written (atomically) to `--port-file`.
//! A test fixture only: this package is no dependency of any production crate.

// SEP-2577 deprecates logging, sampling and roots; the 2025-11-25 suite still tests them.
#![expect(
    deprecated,
    reason = "the suite's 2025-11-25 fixtures use logging and sampling"
)]

mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientResult,
    CompleteRequestParams, CompleteResult, ContentBlock, CreateMessageRequest,
    CreateMessageRequestParams, ElicitRequest, ElicitRequestParams, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, InputRequests, InputRequiredResult,
    InputResponses, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ServerCapabilities, ServerConfig, ServerRequest, SetLevelRequestParams,
    SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// A 1x1 PNG.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// A WAV file of 8 silent samples.
const WAV: &str =
    "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA";

#[derive(Parser)]
#[command(about = "MCP conformance fixture server on weft's transport and session layers")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write the bound port here once listening.
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// Keep 2025-11-25 sessions in this Postgres database (weft's `mcp_sessions` table;
    /// migrations are applied), as the gateway does.
    #[arg(long)]
    database_url: Option<String>,
}

/// A list whose `list_changed` notification the trigger tools cause.
#[derive(Clone, Copy, Debug)]
enum ListChange {
    Tools,
    Prompts,
}

/// The handler. rmcp clones it per session; the clones share the codec and the change channel.
#[derive(Clone)]
struct Fixtures {
    codec: Arc<state::Codec>,
    changes: broadcast::Sender<ListChange>,
}

impl Fixtures {
    fn new() -> Self {
        Self {
            codec: Arc::new(state::Codec::random()),
            changes: broadcast::channel(64).0,
        }
    }
}

/// A model value from its wire JSON (the fixtures are written the way the suite spells them).
fn de<T: DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v)
        .map_err(|e| ErrorData::internal_error(format!("fixture does not parse: {e}"), None))
}

/// A complete result from its wire JSON. `resultType` is spelled out: a result deserialized
/// without it has none, and rmcp adds only the cache hints for 2026-07-28 peers (for older
/// peers it strips `resultType` again).
fn result<T: DeserializeOwned>(mut v: Value) -> Result<T, ErrorData> {
    if let Some(o) = v.as_object_mut() {
        o.insert("resultType".into(), json!("complete"));
    }
    de(v)
}

fn text(s: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s.into())])
}

fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

fn empty_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

/// The tools, in a fixed order (2026-07-28 checks that repeated lists agree).
fn tools() -> Vec<Value> {
    let t = |name: &str, description: &str, schema: Value| json!({"name": name, "description": description, "inputSchema": schema});
    vec![
        t(
            "test_simple_text",
            "Returns a simple text response",
            empty_schema(),
        ),
        t(
            "test_image_content",
            "Returns an image (a 1x1 PNG)",
            empty_schema(),
        ),
        t(
            "test_audio_content",
            "Returns audio (a short WAV)",
            empty_schema(),
        ),
        t(
            "test_embedded_resource",
            "Returns an embedded text resource",
            empty_schema(),
        ),
        t(
            "test_multiple_content_types",
            "Returns text, an image and an embedded resource",
            empty_schema(),
        ),
        t(
            "test_tool_with_logging",
            "Sends three log messages while it runs",
            empty_schema(),
        ),
        t(
            "test_error_handling",
            "Always returns a tool error",
            empty_schema(),
        ),
        t(
            "test_tool_with_progress",
            "Reports progress 0, 50 and 100 of 100",
            empty_schema(),
        ),
        t(
            "test_sampling",
            "Asks the client's model (sampling/createMessage) and returns its answer",
            json!({"type": "object", "properties": {"prompt": {"type": "string", "description": "The prompt to send"}}, "required": ["prompt"]}),
        ),
        t(
            "test_elicitation",
            "Asks the user (elicitation/create) for a username and an email",
            json!({"type": "object", "properties": {"message": {"type": "string", "description": "The message to show the user"}}, "required": ["message"]}),
        ),
        t(
            "test_elicitation_sep1034_defaults",
            "Elicitation whose fields have defaults (SEP-1034)",
            empty_schema(),
        ),
        t(
            "test_elicitation_sep1330_enums",
            "Elicitation with every enum form (SEP-1330)",
            empty_schema(),
        ),
        t(
            "json_schema_2020_12_tool",
            "A tool whose input schema uses JSON Schema 2020-12 keywords",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"},
                    "email": {"type": "string"}
                },
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]},
                "else": {"required": ["email"]},
                "additionalProperties": false
            }),
        ),
        t(
            "test_custom_header",
            "Its `region` argument travels in the Mcp-Param-Region header too (SEP-2243)",
            json!({"type": "object", "properties": {"region": {"type": "string", "description": "A region", "x-mcp-header": "Region"}}, "required": ["region"]}),
        ),
        t(
            "test_missing_capability",
            "Needs the client's sampling capability",
            empty_schema(),
        ),
        t(
            "test_streaming_elicitation",
            "Needs the user's input, asked for with input_required",
            empty_schema(),
        ),
        t(
            "test_logging_tool",
            "Logs only when the request asks for a log level",
            empty_schema(),
        ),
        t(
            "test_trigger_tool_change",
            "Announces a change of the tool list to listeners",
            empty_schema(),
        ),
        t(
            "test_trigger_prompt_change",
            "Announces a change of the prompt list to listeners",
            empty_schema(),
        ),
        t(
            "test_input_required_result_elicitation",
            "input_required: asks the user's name",
            empty_schema(),
        ),
        t(
            "test_input_required_result_sampling",
            "input_required: asks the client's model",
            empty_schema(),
        ),
        t(
            "test_input_required_result_list_roots",
            "input_required: asks the client's roots",
            empty_schema(),
        ),
        t(
            "test_input_required_result_request_state",
            "input_required with an integrity-protected requestState",
            empty_schema(),
        ),
        t(
            "test_input_required_result_multiple_inputs",
            "input_required: elicitation, sampling and roots at once",
            empty_schema(),
        ),
        t(
            "test_input_required_result_multi_round",
            "input_required over two rounds",
            empty_schema(),
        ),
        t(
            "test_input_required_result_tampered_state",
            "input_required; a tampered requestState is refused",
            empty_schema(),
        ),
        t(
            "test_input_required_result_capabilities",
            "input_required only for what the client declared",
            empty_schema(),
        ),
    ]
}

// --- input requests (SEP-2322) and their answers ---------------------------------------------

fn elicit(message: &str, properties: Value, required: &[&str]) -> Value {
    json!({"method": "elicitation/create", "params": {
        "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required}
    }})
}

fn sample(prompt: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "maxTokens": max_tokens
    }})
}

fn roots() -> Value {
    json!({"method": "roots/list", "params": {}})
}

fn input_required(
    requests: Value,
    state: Option<String>,
) -> Result<InputRequiredResult, ErrorData> {
    Ok(InputRequiredResult::new(
        Some(de::<InputRequests>(requests)?),
        state,
    ))
}

/// An answer to an elicitation.
enum Elicited {
    /// `accept` with its content.
    Accepted(Map<String, Value>),
    /// `decline` or `cancel`.
    Refused(String),
}

/// The well-formed answer to elicitation `key`, if any.
fn elicited(responses: Option<&InputResponses>, key: &str) -> Option<Elicited> {
    let r = responses?.get(key)?.as_object()?;
    match r.get("action")?.as_str()? {
        "accept" => Some(Elicited::Accepted(r.get("content")?.as_object()?.clone())),
        a @ ("decline" | "cancel") => Some(Elicited::Refused(a.to_owned())),
        _ => None,
    }
}

/// An accepted elicitation's string field `field`.
fn elicited_str(
    responses: Option<&InputResponses>,
    key: &str,
    field: &str,
) -> Option<Result<String, String>> {
    match elicited(responses, key)? {
        Elicited::Accepted(c) => c.get(field)?.as_str().map(|s| Ok(s.to_owned())),
        Elicited::Refused(a) => Some(Err(a)),
    }
}

/// The text of a well-formed sampling answer to `key`.
fn sampled(responses: Option<&InputResponses>, key: &str) -> Option<String> {
    let r = responses?.get(key)?.as_object()?;
    if r.get("role")?.as_str()? != "assistant" {
        return None;
    }
    let content = r.get("content")?;
    let blocks = content
        .as_array()
        .cloned()
        .unwrap_or_else(|| vec![content.clone()]);
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    (!texts.is_empty()).then(|| texts.join(""))
}

/// The root URIs of a well-formed roots/list answer to `key`.
fn rooted(responses: Option<&InputResponses>, key: &str) -> Option<Vec<String>> {
    let roots = responses?.get(key)?.get("roots")?.as_array()?;
    roots
        .iter()
        .map(|r| r.get("uri").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

fn client_caps(ctx: &RequestContext<RoleServer>) -> ClientCapabilities {
    ctx.client_capabilities().unwrap_or_default()
}

fn missing(capability: &str) -> Result<ErrorData, ErrorData> {
    Ok(ErrorData::missing_required_client_capability(de(
        json!({ capability: {} }),
    )?))
}

/// A log level's rank (RFC 5424 order, debug lowest).
fn rank(level: LoggingLevel) -> usize {
    let name = serde_json::to_value(level).unwrap_or(Value::Null);
    [
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    ]
    .iter()
    .position(|l| name == *l)
    .unwrap_or(0)
}

impl Fixtures {
    /// The 2025-11-25 tools that ask the client with a server→client request.
    async fn ask_client(
        &self,
        ctx: &RequestContext<RoleServer>,
        request: ServerRequest,
    ) -> Result<Value, String> {
        let answer: ClientResult = ctx
            .peer
            .send_request(request)
            .await
            .map_err(|e| format!("the client did not answer: {e}"))?;
        serde_json::to_value(answer).map_err(|e| e.to_string())
    }

    async fn elicitation_tool(
        &self,
        ctx: &RequestContext<RoleServer>,
        params: Value,
    ) -> Result<CallToolResult, ErrorData> {
        let params: ElicitRequestParams = de(params)?;
        Ok(
            match self
                .ask_client(
                    ctx,
                    ServerRequest::ElicitRequest(ElicitRequest::new(params)),
                )
                .await
            {
                Ok(v) => text(format!(
                    "User response: action={}, content={}",
                    v["action"].as_str().unwrap_or("?"),
                    v.get("content").cloned().unwrap_or(Value::Null)
                )),
                Err(e) => CallToolResult::error(vec![ContentBlock::text(e)]),
            },
        )
    }

    async fn log(&self, ctx: &RequestContext<RoleServer>, level: LoggingLevel, message: &str) {
        let _ = ctx
            .peer
            .notify_logging_message(
                LoggingMessageNotificationParam::new(level, json!(message))
                    .with_logger("weft-mcp-conformance"),
            )
            .await;
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let responses = request.input_responses.as_ref();
        let name = request.name.as_ref();
        let done = |r: CallToolResult| Ok(CallToolResponse::Complete(r));
        let ask = |requests: Value, state: Option<String>| {
            input_required(requests, state).map(CallToolResponse::InputRequired)
        };
        match name {
            "test_simple_text" => done(text("This is a simple text response for testing.")),
            "test_image_content" => done(result(json!({"content": [
                {"type": "image", "data": PNG, "mimeType": "image/png"}
            ]}))?),
            "test_audio_content" => done(result(json!({"content": [
                {"type": "audio", "data": WAV, "mimeType": "audio/wav"}
            ]}))?),
            "test_embedded_resource" => done(result(json!({"content": [
                {"type": "resource", "resource": {"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}}
            ]}))?),
            "test_multiple_content_types" => done(result(json!({"content": [
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}
            ]}))?),
            "test_tool_with_logging" => {
                self.log(&ctx, LoggingLevel::Info, "Tool execution started").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                self.log(&ctx, LoggingLevel::Info, "Tool processing data").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                self.log(&ctx, LoggingLevel::Info, "Tool execution completed").await;
                done(text("Tool with logging executed successfully"))
            }
            "test_error_handling" => done(CallToolResult::error(vec![ContentBlock::text(
                "This tool intentionally returns an error for testing",
            )])),
            "test_tool_with_progress" => {
                if let Some(token) = ctx.meta.get_progress_token() {
                    for (i, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                        if i > 0 {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        let mut p = ProgressNotificationParam::new(token.clone(), progress);
                        p.total = Some(100.0);
                        let _ = ctx.peer.notify_progress(p).await;
                    }
                }
                done(text("Tool with progress executed successfully"))
            }
            "test_sampling" => {
                let prompt = args.get("prompt").and_then(Value::as_str).unwrap_or("Hello");
                let params: CreateMessageRequestParams = de(sample(prompt, 100)["params"].take())?;
                done(
                    match self
                        .ask_client(&ctx, ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params)))
                        .await
                    {
                        Ok(v) => {
                            let answer = v["content"]["text"].as_str().map_or_else(|| v["content"].to_string(), str::to_owned);
                            text(format!("LLM response: {answer}"))
                        }
                        Err(e) => CallToolResult::error(vec![ContentBlock::text(e)]),
                    },
                )
            }
            "test_elicitation" => {
                let message = args.get("message").and_then(Value::as_str).unwrap_or("Please provide your information");
                done(
                    self.elicitation_tool(
                        &ctx,
                        json!({"message": message, "requestedSchema": {"type": "object", "properties": {
                            "username": {"type": "string", "description": "User's response"},
                            "email": {"type": "string", "description": "User's email address"}
                        }, "required": ["username", "email"]}}),
                    )
                    .await?,
                )
            }
            "test_elicitation_sep1034_defaults" => done(
                self.elicitation_tool(
                    &ctx,
                    json!({"message": "Please review and update the form fields with defaults", "requestedSchema": {"type": "object", "properties": {
                        "name": {"type": "string", "description": "User name", "default": "John Doe"},
                        "age": {"type": "integer", "description": "User age", "default": 30},
                        "score": {"type": "number", "description": "User score", "default": 95.5},
                        "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
                        "verified": {"type": "boolean", "description": "Verification status", "default": true}
                    }}}),
                )
                .await?,
            ),
            "test_elicitation_sep1330_enums" => done(
                self.elicitation_tool(
                    &ctx,
                    json!({"message": "Please select options from the enum fields", "requestedSchema": {"type": "object", "properties": {
                        "untitledSingle": {"type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"]},
                        "titledSingle": {"type": "string", "description": "Select one option with titles", "oneOf": [
                            {"const": "value1", "title": "First Option"},
                            {"const": "value2", "title": "Second Option"},
                            {"const": "value3", "title": "Third Option"}
                        ]},
                        "legacyEnum": {"type": "string", "description": "Select one option (legacy)", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                        "untitledMulti": {"type": "array", "description": "Select multiple options", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                        "titledMulti": {"type": "array", "description": "Select multiple options with titles", "items": {"anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"}
                        ]}}
                    }}}),
                )
                .await?,
            ),
            "json_schema_2020_12_tool" => done(text(format!("Received: {}", Value::Object(args)))),
            // rmcp's transport checks the header against the body (via get_tool) before this runs.
            "test_custom_header" => done(text(format!(
                "region: {}",
                args.get("region").and_then(Value::as_str).unwrap_or_default()
            ))),
            "test_missing_capability" => {
                if client_caps(&ctx).sampling.is_none() {
                    return Err(missing("sampling")?);
                }
                match sampled(responses, "sample") {
                    Some(answer) => done(text(format!("The client's model said: {answer}"))),
                    None if is_modern(&ctx) => ask(json!({"sample": sample("Say hello", 20)}), None),
                    None => done(text("The client declares sampling")),
                }
            }
            "test_streaming_elicitation" => {
                if client_caps(&ctx).elicitation.is_none() {
                    return Err(missing("elicitation")?);
                }
                match elicited_str(responses, "user_input", "value") {
                    Some(Ok(v)) => done(text(format!("You said: {v}"))),
                    Some(Err(action)) => done(text(format!("No input ({action})"))),
                    None => ask(
                        json!({"user_input": elicit("Please type something", json!({"value": {"type": "string"}}), &["value"])}),
                        None,
                    ),
                }
            }
            "test_logging_tool" => {
                // SEP-2575: log only when the request asked for a level, and only at or above it.
                if let Some(level) = ctx.meta.log_level()
                    && rank(LoggingLevel::Info) >= rank(level)
                {
                    self.log(&ctx, LoggingLevel::Info, "test_logging_tool ran").await;
                }
                done(text("Logging tool executed"))
            }
            "test_trigger_tool_change" => {
                let _ = self.changes.send(ListChange::Tools);
                done(text("The tool list changed"))
            }
            "test_trigger_prompt_change" => {
                let _ = self.changes.send(ListChange::Prompts);
                done(text("The prompt list changed"))
            }
            "test_input_required_result_elicitation" => match elicited_str(responses, "user_name", "name") {
                Some(Ok(name)) => done(text(format!("Hello, {name}!"))),
                Some(Err(action)) => done(text(format!("No name given ({action})."))),
                // Missing, wrong or malformed answers: ask again (SEP-2322).
                None => ask(
                    json!({"user_name": elicit("What is your name?", json!({"name": {"type": "string"}}), &["name"])}),
                    None,
                ),
            },
            "test_input_required_result_sampling" => match sampled(responses, "capital_question") {
                Some(answer) => done(text(format!("The model answered: {answer}"))),
                None => ask(json!({"capital_question": sample("What is the capital of France?", 100)}), None),
            },
            "test_input_required_result_list_roots" => match rooted(responses, "client_roots") {
                Some(roots) => done(text(format!("The client's roots: {}", roots.join(", ")))),
                None => ask(json!({"client_roots": roots()}), None),
            },
            "test_input_required_result_request_state" | "test_input_required_result_tampered_state" => {
                let confirm = || {
                    ask(
                        json!({"confirm": elicit("Please confirm", json!({"ok": {"type": "boolean"}}), &["ok"])}),
                        Some(self.codec.seal(name, 1, Value::Null)),
                    )
                };
                let Some(sealed) = request.request_state.as_deref() else {
                    return confirm();
                };
                // A state that fails the check is an error, never a new round.
                let (round, _) = self.codec.open(name, sealed)?;
                match elicited(responses, "confirm") {
                    Some(Elicited::Accepted(c)) if round == 1 => {
                        done(text(format!("state-ok: confirmed ok={}", c.get("ok").cloned().unwrap_or(Value::Null))))
                    }
                    Some(Elicited::Refused(action)) if round == 1 => done(text(format!("state-ok: {action}"))),
                    _ => confirm(),
                }
            }
            "test_input_required_result_multiple_inputs" => {
                let all = || {
                    ask(
                        json!({
                            "user_name": elicit("What is your name?", json!({"name": {"type": "string"}}), &["name"]),
                            "greeting": sample("Generate a greeting", 50),
                            "client_roots": roots()
                        }),
                        Some(self.codec.seal(name, 1, Value::Null)),
                    )
                };
                let Some(sealed) = request.request_state.as_deref() else {
                    return all();
                };
                self.codec.open(name, sealed)?;
                match (
                    elicited_str(responses, "user_name", "name"),
                    sampled(responses, "greeting"),
                    rooted(responses, "client_roots"),
                ) {
                    (Some(who), Some(greeting), Some(roots)) => done(text(format!(
                        "name: {}; greeting: {greeting}; roots: {}",
                        who.unwrap_or_else(|a| format!("({a})")),
                        roots.join(", ")
                    ))),
                    _ => all(),
                }
            }
            "test_input_required_result_multi_round" => {
                let step1 = || {
                    ask(
                        json!({"step1": elicit("Step 1: What is your name?", json!({"name": {"type": "string"}}), &["name"])}),
                        Some(self.codec.seal(name, 1, Value::Null)),
                    )
                };
                let step2 = |who: &str| {
                    ask(
                        json!({"step2": elicit("Step 2: What is your favorite color?", json!({"color": {"type": "string"}}), &["color"])}),
                        Some(self.codec.seal(name, 2, json!({"name": who}))),
                    )
                };
                let Some(sealed) = request.request_state.as_deref() else {
                    return step1();
                };
                match self.codec.open(name, sealed)? {
                    (1, _) => match elicited_str(responses, "step1", "name") {
                        Some(who) => step2(&who.unwrap_or_else(|a| format!("({a})"))),
                        None => step1(),
                    },
                    (_, data) => {
                        let who = data["name"].as_str().unwrap_or_default().to_owned();
                        match elicited_str(responses, "step2", "color") {
                            Some(color) => done(text(format!(
                                "{who}'s favorite color is {}",
                                color.unwrap_or_else(|a| format!("({a})"))
                            ))),
                            None => step2(&who),
                        }
                    }
                }
            }
            "test_input_required_result_capabilities" => {
                // Only what the client declared (SEP-2322): elicitation, else sampling, else roots.
                let caps = client_caps(&ctx);
                if let Some(who) = elicited_str(responses, "user_name", "name") {
                    return done(text(format!("Hello, {}!", who.unwrap_or_else(|a| format!("({a})")))));
                }
                if let Some(answer) = sampled(responses, "greeting") {
                    return done(text(format!("The model greeted: {answer}")));
                }
                if let Some(roots) = rooted(responses, "client_roots") {
                    return done(text(format!("The client's roots: {}", roots.join(", "))));
                }
                if caps.elicitation.is_some() {
                    ask(json!({"user_name": elicit("What is your name?", json!({"name": {"type": "string"}}), &["name"])}), None)
                } else if caps.sampling.is_some() {
                    ask(json!({"greeting": sample("Generate a greeting", 50)}), None)
                } else if caps.roots.is_some() {
                    ask(json!({"client_roots": roots()}), None)
                } else {
                    Err(missing("elicitation")?)
                }
            }
            other => Err(ErrorData::invalid_params(format!("no tool `{other}`"), None)),
        }
    }
}

fn resources() -> Value {
    json!({"resources": [
        {"uri": "test://static-text", "name": "static-text", "description": "A static text resource", "mimeType": "text/plain"},
        {"uri": "test://static-binary", "name": "static-binary", "description": "A static binary resource (a PNG)", "mimeType": "image/png"},
        {"uri": "test://watched-resource", "name": "watched-resource", "description": "A resource clients may subscribe to", "mimeType": "text/plain"}
    ]})
}

fn prompts() -> Value {
    json!({"prompts": [
        {"name": "test_simple_prompt", "description": "A prompt without arguments"},
        {"name": "test_prompt_with_arguments", "description": "A prompt with two required arguments", "arguments": [
            {"name": "arg1", "description": "The first argument", "required": true},
            {"name": "arg2", "description": "The second argument", "required": true}
        ]},
        {"name": "test_prompt_with_embedded_resource", "description": "A prompt that embeds a resource", "arguments": [
            {"name": "resourceUri", "description": "The URI of the resource to embed", "required": true}
        ]},
        {"name": "test_prompt_with_image", "description": "A prompt with an image"},
        {"name": "test_input_required_result_prompt", "description": "input_required: asks the user for context"}
    ]})
}

fn str_arg(args: Option<&Map<String, Value>>, name: &str) -> Result<String, ErrorData> {
    args.and_then(|a| a.get(name))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ErrorData::invalid_params(format!("`{name}` (a string) is required"), None))
}

impl ServerHandler for Fixtures {
    fn get_info(&self) -> ServerConfig {
        let capabilities: ServerCapabilities = serde_json::from_value(json!({
            "completions": {},
            "logging": {},
            "prompts": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "tools": {"listChanged": true}
        }))
        .unwrap_or_default();
        ServerConfig::new(capabilities).with_server_info(Implementation::new(
            "weft-mcp-conformance",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if is_modern(&ctx) {
            return Err(ErrorData::method_not_found::<
                rmcp::model::SetLevelRequestMethod,
            >());
        }
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let v = serde_json::to_value(&request).unwrap_or(Value::Null);
        let prefix = v["argument"]["value"].as_str().unwrap_or_default();
        let values: Vec<&str> = ["test", "testValue1", "testValue2"]
            .into_iter()
            .filter(|c| c.starts_with(prefix))
            .collect();
        result(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = tools()
            .into_iter()
            .map(de::<Tool>)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    /// The tool's definition, which the streamable HTTP transport uses to check SEP-2243
    /// `Mcp-Param-*` headers against the arguments.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools()
            .into_iter()
            .find(|t| t["name"] == name)
            .and_then(|t| de(t).ok())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, ctx).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        result(resources())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        result(json!({"resourceTemplates": [{
            "uriTemplate": "test://template/{id}/data",
            "name": "template",
            "description": "A resource template with an id parameter",
            "mimeType": "application/json"
        }]}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let contents = match uri {
            "test://static-text" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."})
            }
            "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG}),
            "test://watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "The watched resource's current content."})
            }
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
                .filter(|id| !id.is_empty() && !id.contains('/'))
            {
                Some(id) => json!({"uri": uri, "mimeType": "application/json", "text": json!({
                    "id": id, "templateTest": true, "data": format!("Data for ID: {id}")
                }).to_string()}),
                None => {
                    return Err(ErrorData::resource_not_found(
                        format!("no resource {uri}"),
                        Some(json!({ "uri": uri })),
                    ));
                }
            },
        };
        Ok(ReadResourceResponse::Complete(
            result::<ReadResourceResult>(json!({"contents": [contents]}))?,
        ))
    }

    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // The SDK narrows it to what was requested and what get_info advertises.
        Some(requested.clone())
    }

    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.changes.subscribe();
        let sink = ctx.sink().clone();
        loop {
            tokio::select! {
                () = ctx.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    // A change the subscription did not ask for is refused by the sink: fine.
                    Ok(ListChange::Tools) => { let _ = sink.notify_tool_list_changed().await; }
                    Ok(ListChange::Prompts) => { let _ = sink.notify_prompt_list_changed().await; }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        result(prompts())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let args = request.arguments.as_ref();
        let messages = match request.name.as_str() {
            "test_simple_prompt" => json!([
                {"role": "user", "content": {"type": "text", "text": "This is a simple prompt for testing."}}
            ]),
            "test_prompt_with_arguments" => {
                let (a1, a2) = (str_arg(args, "arg1")?, str_arg(args, "arg2")?);
                json!([{"role": "user", "content": {"type": "text", "text": format!("Prompt with arguments: arg1='{a1}', arg2='{a2}'")}}])
            }
            "test_prompt_with_embedded_resource" => {
                let uri = str_arg(args, "resourceUri")?;
                json!([
                    {"role": "user", "content": {"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain", "text": "Embedded resource content for testing."}}},
                    {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}
                ])
            }
            "test_prompt_with_image" => json!([
                {"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}
            ]),
            "test_input_required_result_prompt" => {
                match elicited_str(request.input_responses.as_ref(), "user_context", "context") {
                    Some(context) => {
                        let context = context.unwrap_or_else(|a| format!("none ({a})"));
                        json!([{"role": "user", "content": {"type": "text", "text": format!("Answer using this context: {context}")}}])
                    }
                    None => {
                        return Ok(GetPromptResponse::InputRequired(input_required(
                            json!({"user_context": elicit("What context should the prompt use?", json!({"context": {"type": "string"}}), &["context"])}),
                            None,
                        )?));
                    }
                }
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no prompt `{other}`"),
                    None,
                ));
            }
        };
        Ok(GetPromptResponse::Complete(result::<GetPromptResult>(
            json!({"messages": messages}),
        )?))
    }
}

/// Writes `port` to `path` atomically (readers never see a partial file).
fn write_port(path: &std::path::Path, port: u16) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{port}\n"))?;
    std::fs::rename(tmp, path)
}

async fn run(args: Args) -> Result<(), String> {
    let face = weft_config::McpServerFaceConfig::default();
    let store = match &args.database_url {
        Some(url) => {
            let pool = weft_store::connect(url, 8)
                .await
                .map_err(|e| format!("database: {e}"))?;
            weft_store::migrate(&pool)
                .await
                .map_err(|e| format!("database: {e}"))?;
            Some(weft_mcp_face::sessions::PgSessionStore::new(
                pool,
                Duration::from_secs(face.session_ttl_secs),
            ))
        }
        None => None,
    };
    let sessions = if store.is_some() {
        "postgres"
    } else {
        "memory"
    };
    let shutdown = CancellationToken::new();
    let service = weft_mcp_face::streamable(Fixtures::new(), &face, store, shutdown.clone());
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    if let Some(path) = &args.port_file {
        write_port(path, addr.port()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    eprintln!("weft-mcp-conformance-server: listening on http://{addr}/mcp (sessions: {sessions})");
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            Some(()) = async { match term.as_mut() { Some(t) => t.recv().await, None => std::future::pending().await } } => {}
        }
        stop.cancel();
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft-mcp-conformance-server: {e}");
            ExitCode::FAILURE
        }
    }
}
