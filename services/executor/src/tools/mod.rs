//! The tools a run may call: one [`Tool`] trait, one [`Registry`] built once per executor.
//!
//! A tool says what it is (name, JSON schema, [`SideEffect`] class) and does one call with a
//! [`ToolCtx`]. Everything around the call is decided once, in [`crate::orchestrate`], from the
//! class and the run's spec — never per tool: default-deny (a run sees only the tools in its
//! spec's `tools`, the agent's list narrowed by the caller), the ledger rules (reuse a recorded
//! result; re-run a read-only or idempotent call that never finished; report an effectful one
//! as "outcome unknown"), and the ledger's `idempotent` column.
//!
//! Adding a tool is one file in this folder implementing [`Tool`] and one line in
//! [`Registry::builtin`]. Its input is a type in `weft_api::tools`, read with [`parse_input`];
//! the schema the model sees is `weft_api::tools::input_schema` of that type.

pub mod agent;
pub mod channel;
pub mod context;
pub mod http;
pub mod interruption;
pub mod mcp;
pub mod memory;
pub mod skill;

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use weft_core::agent::AgentContent;
use weft_core::message::ToolSpec;
use weft_core::run::{RunEvent, RunSpec};
use weft_core::{Error, Principal, RunId, TenantId};
use weft_store::RunRecord;

use crate::Inner;
use crate::machine::ToolCall;
use crate::stop::Stop;

/// What one tool call hands back to the model.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolOutput {
    /// The result text (JSON text for structured results).
    pub text: String,
    /// Whether the call failed; the model sees the text either way.
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: false,
        }
    }

    /// A structured result, as JSON text.
    pub fn json(result: &impl Serialize) -> Self {
        // Plain structs of strings, numbers and JSON values always serialize.
        Self::ok(
            serde_json::to_value(result)
                .unwrap_or(Value::Null)
                .to_string(),
        )
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
        }
    }
}

/// What repeating a call does, which decides what happens to a call that started but whose
/// result was never recorded (the executor died mid-call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SideEffect {
    /// Only reads: run it again.
    ReadOnly,
    /// Changes something, but a repeat (with the same call id) changes nothing more: run it
    /// again.
    Idempotent,
    /// A repeat could do it twice: never run it again; the model is told the outcome is unknown.
    Effectful,
}

impl SideEffect {
    /// Whether a call of this class that never finished may simply run again (the ledger's
    /// `idempotent` column).
    pub fn is_rerunnable(self) -> bool {
        !matches!(self, Self::Effectful)
    }
}

/// How a call ended.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutcome {
    /// The result the model sees.
    Done(ToolOutput),
    /// Park the run on this question (`Interruption.ask`); the answer becomes the call's result
    /// when the run resumes.
    Ask { question: String },
}

impl From<ToolOutput> for ToolOutcome {
    fn from(out: ToolOutput) -> Self {
        Self::Done(out)
    }
}

/// The run cannot go on here (lease lost, shutting down, an infrastructure failure): the call
/// is abandoned and the run resumes from its ledger, here or elsewhere. A failure the model
/// should see is a [`ToolOutput::error`] instead.
#[derive(Debug)]
pub struct Abort(pub(crate) Stop);

impl Abort {
    /// An infrastructure failure (a peer unreachable): the run is retried later.
    pub fn infra(detail: impl Into<String>) -> Self {
        Self(Stop::Infra(detail.into()))
    }
}

impl From<Stop> for Abort {
    fn from(s: Stop) -> Self {
        Self(s)
    }
}

/// One tool. Implementations live in `tools/<name>.rs` and are listed in [`Registry::builtin`].
pub trait Tool: Send + Sync {
    /// The name the model calls it by and agents list it under.
    fn name(&self) -> &str;

    /// The schema the model sees (`name` equal to [`Tool::name`]).
    fn spec(&self) -> ToolSpec;

    /// What a repeat of this call would do; may depend on the input (HTTP GET vs POST).
    fn side_effect(&self, input: &Value) -> SideEffect;

    /// Does one call. Bad input and failures the model can act on are
    /// `Ok(ToolOutcome::Done(ToolOutput::error(..)))`; `Err` abandons the run here.
    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>>;
}

/// What a call may use of the run it belongs to. The run's driver implements it; the tools see
/// only this, so they do not depend on the driver (which depends on them).
pub(crate) trait RunHost: Send + Sync {
    /// The executor's shared state: the run store, bus, coordination, config and clients.
    fn inner(&self) -> &Inner;
    /// The run's identity, sent to peers as an internal JWT.
    fn principal(&self) -> &Principal;
    /// The run's record as leased.
    fn record(&self) -> &RunRecord;
    /// The run's spec.
    fn spec(&self) -> &RunSpec;
    /// The run's credentials (read once per lease).
    fn credentials(&self) -> BoxFuture<'_, Arc<std::collections::BTreeMap<String, String>>>;
    /// Starts sub-runs of this run for the call `tool_use_id` and waits for their results.
    fn spawn_children<'a>(
        &'a self,
        tool_use_id: &'a str,
        items: Vec<(String, String)>,
    ) -> BoxFuture<'a, Result<Vec<agent::ChildOutcome>, Stop>>;
}

/// What a call can see and use: the run's identity and spec, the call's id, the executor's
/// shared clients, and the transcript (events emitted with the result).
pub struct ToolCtx<'a> {
    driver: &'a dyn RunHost,
    agent: &'a AgentContent,
    call: &'a ToolCall,
    iteration: u32,
    events: Mutex<Vec<RunEvent>>,
}

impl<'a> ToolCtx<'a> {
    pub(crate) fn new(
        driver: &'a dyn RunHost,
        agent: &'a AgentContent,
        call: &'a ToolCall,
        iteration: u32,
    ) -> Self {
        Self {
            driver,
            agent,
            call,
            iteration,
            events: Mutex::new(Vec::new()),
        }
    }

    /// The run this call belongs to.
    pub fn run_id(&self) -> RunId {
        self.driver.record().id
    }

    /// The model's id of this call.
    pub fn tool_use_id(&self) -> &str {
        &self.call.id
    }

    /// The key that makes a write of this call take effect once however often the call runs:
    /// `<run_id>:<tool_use_id>`.
    pub fn exactly_once_key(&self) -> String {
        format!("{}:{}", self.run_id(), self.call.id)
    }

    /// The run's tenant.
    pub fn tenant(&self) -> &TenantId {
        &self.driver.record().tenant
    }

    /// The user the run acts for.
    pub fn subject(&self) -> &str {
        &self.driver.record().subject
    }

    /// The run's agent, by name.
    pub fn agent_name(&self) -> &str {
        &self.driver.record().agent_name
    }

    /// The content hash of the run's agent version.
    pub fn agent_hash(&self) -> &str {
        &self.driver.record().agent_hash
    }

    /// The run's agent definition.
    pub fn agent(&self) -> &AgentContent {
        self.agent
    }

    /// The run's spec (tools, hosts, memory scopes, channel ACL, skills, limits).
    pub fn spec(&self) -> &RunSpec {
        self.driver.spec()
    }

    /// The run's record as leased (depth, parent, interactive…).
    pub fn run(&self) -> &RunRecord {
        self.driver.record()
    }

    /// Model turns taken so far.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// A gRPC request carrying the run's principal as an internal JWT (and the trace context),
    /// for the router or the substrate.
    pub fn internal<T>(&self, msg: T) -> Result<tonic::Request<T>, Error> {
        weft_auth::rpc::request(&self.driver.inner().jwt, self.driver.principal(), msg)
    }

    /// Appends `event` to the transcript, committed together with this call's result (before
    /// it). Events of a call that is abandoned are dropped with it.
    pub fn emit(&self, event: RunEvent) {
        if let Ok(mut events) = self.events.lock() {
            events.push(event);
        }
    }

    pub(crate) fn take_events(&self) -> Vec<RunEvent> {
        self.events
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }

    /// The transport to the substrate, to build a client of any of its gRPC services on
    /// (`weft_proto::transport`); send requests made by [`ToolCtx::internal`].
    pub fn substrate_transport(&self) -> weft_proto::transport::GrpcTransport {
        self.driver.inner().substrate_transport.clone()
    }

    /// The executor's shared state: the run store, bus, coordination, config and the router
    /// and substrate clients.
    pub(crate) fn inner(&self) -> &Inner {
        self.driver.inner()
    }

    /// The run, for tools that need its machinery (sub-runs, credentials).
    pub(crate) fn host(&self) -> &dyn RunHost {
        self.driver
    }
}

/// The tools this executor hosts, by name, built once at start-up.
#[derive(Clone, Default)]
pub struct Registry {
    /// In the order the model is shown them.
    tools: Vec<Arc<dyn Tool>>,
}

impl Registry {
    /// The built-in tools for this executor's config.
    pub fn builtin(cfg: &weft_config::ExecutorConfig) -> Result<Self, http::HttpToolError> {
        let mut r = Self::default();
        r.add(context::Context);
        r.add(agent::Agent);
        r.add(interruption::Interruption);
        r.add(http::HttpTool::new(cfg)?);
        r.add(memory::Memory);
        r.add(channel::Channel);
        r.add(skill::Skill);
        Ok(r)
    }

    /// Adds a tool (replacing one of the same name).
    pub fn add(&mut self, tool: impl Tool + 'static) {
        self.tools.retain(|t| t.name() != tool.name());
        self.tools.push(Arc::new(tool));
    }

    /// The tool called `name`, if hosted here.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name).cloned()
    }

    /// The tool called `name` if `allowed` (a run's spec) lists it and it is hosted here.
    pub fn allowed(&self, name: &str, allowed: &[String]) -> Option<Arc<dyn Tool>> {
        if allowed.iter().any(|a| a == name) {
            self.get(name)
        } else {
            None
        }
    }

    /// The specs of the built-in tools a run may call, in a stable order (MCP tools are
    /// mounted per run: [`mcp::mount`]).
    pub fn specs_for(&self, allowed: &[String]) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .filter(|t| allowed.iter().any(|a| a == t.name()))
            .map(|t| t.spec())
            .collect()
    }

    /// The names of the hosted tools.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name()).collect()
    }
}

/// Reads a call's input as the tool's input type (`weft_api::tools`). A bad input is a message
/// that names the field and says what it must be: "`key` is required", "`ttl_seconds` must be
/// an integer, got a string", "`op` must be one of get, set, …, got \"put\"".
pub(crate) fn read_input<T: DeserializeOwned>(input: &Value) -> Result<T, String> {
    if !input.is_object() {
        return Err(format!(
            "the input must be a JSON object of the fields in the tool's schema, got {}",
            json_type(input)
        ));
    }
    serde_path_to_error::deserialize(input).map_err(|e| input_error(input, e))
}

/// [`read_input`], a bad input being the call's error result.
pub(crate) fn parse_input<T: DeserializeOwned>(input: &Value) -> Result<T, ToolOutput> {
    read_input(input).map_err(ToolOutput::error)
}

/// serde's error at a path, in the words the tools use.
fn input_error(input: &Value, err: serde_path_to_error::Error<serde_json::Error>) -> String {
    use serde_path_to_error::Segment;
    let path = err.path().clone();
    let msg = err.into_inner().to_string();
    let field = match path.to_string() {
        p if p == "." => String::new(),
        p => p,
    };
    let at = path.iter().try_fold(input, |v, seg| match seg {
        Segment::Seq { index } => v.get(index),
        Segment::Map { key } => v.get(key.as_str()),
        _ => None,
    });
    // serde names fields and variants in backticks: "unknown variant `x`, expected `a` or `b`".
    let named = |text: &str| -> Vec<String> {
        text.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let (head, expected) = msg.split_once(", expected ").unwrap_or((&msg, ""));
    if head.starts_with("missing field `") {
        let name = named(head).concat();
        let name = if field.is_empty() {
            name
        } else {
            format!("{field}.{name}")
        };
        return format!("`{name}` is required");
    }
    if head.starts_with("unknown field `") {
        let takes: Vec<String> = named(expected).iter().map(|f| format!("`{f}`")).collect();
        return format!(
            "unknown field `{}`; the tool takes {}",
            named(head).concat(),
            takes.join(", ")
        );
    }
    if head.starts_with("unknown variant `") {
        let choices = match named(expected).as_slice() {
            [a, b] => format!("\"{a}\" or \"{b}\""),
            names => format!("one of {}", names.join(", ")),
        };
        let got = at.map_or_else(|| "nothing".to_owned(), Value::to_string);
        return format!("`{field}` must be {choices}, got {got}");
    }
    if !expected.is_empty() {
        let what = match expected {
            "i8" | "i16" | "i32" | "i64" => "an integer",
            "u8" | "u16" | "u32" | "u64" => "an integer from 0 up",
            "a sequence" => "an array",
            "a map" => "an object",
            "string or map" => "a string",
            e if e.starts_with("struct ") => "an object",
            e => e,
        };
        let got = match at {
            Some(v) if head.starts_with("invalid type") => json_type(v).to_owned(),
            Some(v) => v.to_string(),
            None => "nothing".to_owned(),
        };
        return format!("`{field}` must be {what}, got {got}");
    }
    format!("`{field}`: {msg}")
}

/// The JSON type of `v`, for messages (one spelling for the whole fleet).
pub(crate) use weft_core::names::json_kind as json_type;

/// A substrate error as the call's result, which the model can act on: bad input, not found,
/// a conflict, a quota, or the substrate being unavailable after [`with_retry`]'s retries. None
/// of them aborts the run: an error that would come back on every retry (a misconfigured
/// embedding model, say) would otherwise retry the run until its dispatch gave up.
pub(crate) fn substrate_error(s: &tonic::Status) -> Result<ToolOutput, Abort> {
    let e = Error::from(s);
    Ok(ToolOutput::error(match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => {
            format!(
                "the substrate is unavailable: {}; try again later",
                e.message
            )
        }
        _ => e.message,
    }))
}

/// Calls the substrate, retrying a few times (0.2, 0.4, 0.8 s apart) while it answers
/// `Unavailable`: a restart or a brief overload is waited out inside the call.
pub(crate) async fn with_retry<T, F, Fut>(mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let mut delay = std::time::Duration::from_millis(200);
    for _ in 0..3 {
        match call().await {
            Err(s) if s.code() == tonic::Code::Unavailable => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            r => return r,
        }
    }
    call().await
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use weft_api::tools::{AgentInput, ChannelInput, InterruptionInput, MemoryInput};

    use super::*;

    fn err<T: DeserializeOwned>(input: Value) -> String {
        match read_input::<T>(&input) {
            Ok(_) => panic!("{input} was read"),
            Err(e) => e,
        }
    }

    #[test]
    fn input_errors_name_the_field_and_what_it_must_be() {
        let cases = [
            (
                err::<MemoryInput>(json!({"scope": "run"})),
                "`op` is required",
            ),
            (
                err::<MemoryInput>(json!({"op": "put", "scope": "run"})),
                "`op` must be one of get, set, delete, list, incr, search, got \"put\"",
            ),
            (
                err::<MemoryInput>(json!({"op": "set", "scope": "run", "ttl_seconds": "x"})),
                "`ttl_seconds` must be an integer, got a string",
            ),
            (
                err::<ChannelInput>(json!({"op": "await", "channels": ["a", 5]})),
                "`channels[1]` must be a string, got a number",
            ),
            (
                err::<ChannelInput>(json!({"op": "read", "max": -1})),
                "`max` must be an integer from 0 up, got -1",
            ),
            (
                err::<AgentInput>(json!({"op": "parallel_spawn", "runs": [{"agent": "a"}]})),
                "`runs[0].input` is required",
            ),
            (
                err::<AgentInput>(json!({"op": "fork"})),
                "`op` must be \"spawn\" or \"parallel_spawn\", got \"fork\"",
            ),
            (
                err::<MemoryInput>(json!(["get", "run"])),
                "the input must be a JSON object of the fields in the tool's schema, got an array",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn inputs_are_read_leniently() {
        // A field a tool does not take is ignored, `null` is a value where any JSON is, and an
        // ask without its op is still an ask.
        let m: MemoryInput = read_input(
            &json!({"op": "set", "scope": "user", "scope_id": "mallory", "key": "k", "value": null}),
        )
        .unwrap();
        assert_eq!(m.value, Some(Value::Null));
        let m: MemoryInput = read_input(&json!({"op": "get", "scope": "user"})).unwrap();
        assert_eq!(m.value, None);
        let i: InterruptionInput = read_input(&json!({"question": "why?"})).unwrap();
        assert_eq!((i.op, i.question.as_deref()), (None, Some("why?")));
    }

    /// Every built-in tool's schema, pinned: `testdata/tool_schemas.json`, compared as a value
    /// and rewritten with `UPDATE_GOLDEN=1`.
    #[test]
    fn tool_schemas_are_pinned() {
        use weft_api::tools::{ContextInput, HttpInput, SkillInput, input_schema};
        let got = json!({
            "Context": input_schema::<ContextInput>(),
            "Agent": input_schema::<AgentInput>(),
            "Interruption": input_schema::<InterruptionInput>(),
            "HTTP": input_schema::<HttpInput>(),
            "Memory": input_schema::<MemoryInput>(),
            "Channel": input_schema::<ChannelInput>(),
            "Skill": input_schema::<SkillInput>(),
        });
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/tools/testdata/tool_schemas.json"
        );
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
            std::fs::write(path, text).unwrap();
        }
        let want: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(got, want);
    }

    /// The schemas the model sees are schemars' with the generator's extras taken out: no
    /// `$schema`, `title`, `null` types or defaults, integer formats or type docs.
    #[test]
    fn tool_schemas_are_plain() {
        let spec = |t: &dyn Tool| t.spec().parameters;
        assert_eq!(
            spec(&interruption::Interruption),
            json!({
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": ["ask"]},
                    "question": {"type": "string"}
                },
                "required": ["op", "question"]
            })
        );
        assert_eq!(
            spec(&channel::Channel),
            json!({
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": ["publish", "read", "ack", "peek", "await"]},
                    "channel": {"type": "string"},
                    "payload": {"description": "any JSON value (publish)"},
                    "cursor": {"type": "string"},
                    "max": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "wait_ms": {"type": "integer", "minimum": 0, "maximum": 30000},
                    "channels": {"type": "array", "items": {"type": "string"}},
                    "mode": {"type": "string", "enum": ["any", "all", "at_least"]},
                    "n": {"type": "integer", "minimum": 1}
                },
                "required": ["op"]
            })
        );
    }
}
