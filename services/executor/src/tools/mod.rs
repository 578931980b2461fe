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
//! [`Registry::builtin`]. Its input is a type in `weft_api::tools`, read with a [`Reading`] of
//! the fields each op takes; the schema the model sees is `weft_api::tools::input_schema` of
//! that type.

pub mod a2a;
pub mod agent;
pub mod channel;
pub mod context;
pub mod evaluation;
pub mod exec;
pub mod files;
pub mod http;
pub mod interruption;
pub mod mcp;
pub mod memory;
pub mod recall;
pub mod skill;

use std::collections::BTreeMap;
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

/// What `Context {op: self}` reports of the run's context.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Gauge {
    /// The estimated prompt tokens of the last model turn's request.
    pub estimated_tokens: u64,
    /// The model's window, when known.
    pub window_tokens: Option<u32>,
    /// The prompt tokens the provider counted for the last turn.
    pub last_prompt_tokens: u64,
    pub compactions: u32,
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
    /// How full the run's context is (as of its last model turn) and the model's window.
    fn context_gauge(&self) -> BoxFuture<'_, Gauge>;
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

/// What a run mounted: its MCP and A2A tools, and the servers (and peers, as `a2a__<peer>`)
/// that could not be listed (a call to one of their tools is answered with why).
#[derive(Default)]
pub struct Mount {
    pub tools: Vec<Arc<dyn Tool>>,
    pub failed: BTreeMap<String, String>,
}

impl Mount {
    /// The mounted tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name).cloned()
    }
}

/// Lists the tools a run mounts: those of its agent's MCP servers ([`mcp::mount`]) and of the
/// A2A peers its `tools` names ([`a2a::mount`]).
pub(crate) async fn mount(run: &dyn RunHost, def: &AgentContent) -> Mount {
    let mut out = Mount::default();
    mcp::mount(run, def, &mut out).await;
    a2a::mount(run, &mut out).await;
    out
}

/// A call to a tool of a server or peer that could not be listed.
pub struct Unmounted {
    pub name: String,
    pub reason: String,
}

impl Tool for Unmounted {
    fn name(&self) -> &str {
        &self.name
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    fn side_effect(&self, _input: &Value) -> SideEffect {
        // Nothing is called: safe to repeat.
        SideEffect::ReadOnly
    }

    fn call<'a>(
        &'a self,
        _ctx: &'a ToolCtx<'a>,
        _input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move { Ok(ToolOutput::error(self.reason.clone()).into()) })
    }
}

/// The tools this executor hosts, by name, built once at start-up.
#[derive(Clone, Default)]
pub struct Registry {
    /// In the order the model is shown them.
    tools: Vec<Arc<dyn Tool>>,
    /// The client of the A2A peers' tools (mounted per run: [`a2a::mount`]).
    pub a2a: Option<a2a::A2aClient>,
}

impl Registry {
    /// The built-in tools for this executor's config (`volumes` for the file tools' and the
    /// `Exec` sandbox's caps).
    pub fn builtin(
        cfg: &weft_config::ExecutorConfig,
        volumes: &weft_config::VolumesConfig,
    ) -> Result<Self, http::HttpToolError> {
        let mut r = Self::default();
        r.add(context::Context);
        r.add(agent::Agent);
        r.add(interruption::Interruption);
        r.add(http::HttpTool::new(cfg)?);
        r.add(memory::Memory);
        r.add(channel::Channel);
        r.add(skill::Skill);
        r.add(evaluation::Evaluation);
        r.add(recall::Recall);
        r.add(files::read::Read);
        r.add(files::write::Write);
        r.add(files::edit::Edit);
        r.add(files::glob::Glob);
        r.add(files::grep::Grep);
        r.add(files::move_file::Move);
        r.add(files::delete::Delete);
        r.add(files::list::List);
        r.add(exec::Exec::new(volumes));
        r.a2a = Some(a2a::A2aClient::new(cfg)?);
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

    /// The specs of the built-in tools a run may call, in a stable order (MCP and A2A tools
    /// are mounted per run: [`mount`]).
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

/// How an op reads one field of its input (see [`Reading`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Field {
    /// Read if present (`null` is absent); a wrong type is an error.
    Opt(&'static str),
    /// Must be present and not `null`.
    Need(&'static str),
    /// Must be present; `null` is a value (`Memory`'s `value`, an HTTP `method` of `null`).
    NeedAny(&'static str),
    /// Read if present and of the right type, ignored otherwise: fields the tools read
    /// leniently before they were typed (`Memory`'s `embed`, `Channel`'s `mode`).
    Lenient(&'static str),
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Self::Opt(n) | Self::Need(n) | Self::NeedAny(n) | Self::Lenient(n) => n,
        }
    }
}

/// What is wrong with one field, for a tool's own wording ([`Words`]).
#[derive(Debug)]
pub(crate) enum Problem<'a> {
    /// Absent (or `null` where a value is needed).
    Missing,
    /// The wrong JSON type or a value out of range; `expected` is serde's ("i64", "a string").
    Invalid {
        got: Option<&'a Value>,
        expected: &'a str,
        /// The wrong JSON type, not a value out of range.
        wrong_type: bool,
    },
    /// Not one of the names the field takes (for `op`: also absent or not a string, then
    /// `got` is `None`).
    Unknown {
        got: Option<&'a Value>,
        choices: &'a [String],
    },
    /// A field the tool does not take (only where [`Reading::refuse_others`]).
    UnknownField,
}

/// A tool's own message for `field` (a path: `channels[1]`, `runs[0].input`) having
/// `problem`, or `None` for the common one. The tools' messages are older than their typed
/// inputs, and a model may have learnt them.
pub(crate) type Words = fn(field: &str, problem: &Problem<'_>) -> Option<String>;

/// No words of a tool's own.
pub(crate) fn common_words(_: &str, _: &Problem<'_>) -> Option<String> {
    None
}

/// A check of a field's raw value before the field is read (an ACL, an allow-list), so that
/// the checks fire in the order the fields are listed.
type Check<'a> = &'a (dyn Fn(&str, &Value) -> Result<(), String> + Sync);

/// How a tool reads one op's input: which fields, in which order their checks fire, and in
/// whose words. Fields not listed are dropped unread, so a wrong-typed field an op does not use
/// is ignored, as it was before the inputs were typed.
pub(crate) struct Reading<'a> {
    fields: &'a [Field],
    words: Words,
    check: Option<Check<'a>>,
    refuse_others: bool,
}

impl<'a> Reading<'a> {
    pub(crate) fn new(fields: &'a [Field], words: Words) -> Self {
        Self {
            fields,
            words,
            check: None,
            refuse_others: false,
        }
    }

    /// Runs `check` on each listed field's raw value just before reading it.
    pub(crate) fn check(mut self, check: Check<'a>) -> Self {
        self.check = Some(check);
        self
    }

    /// A field not listed is an error (before any other) instead of being dropped.
    pub(crate) fn refuse_others(mut self) -> Self {
        self.refuse_others = true;
        self
    }

    /// Reads `input` as the tool's input type (`weft_api::tools`). A bad input is a message
    /// naming the first bad field in the listed order: "`key` is required", "`ttl_seconds`
    /// must be an integer, got a string". An input that is not an object has no fields.
    pub(crate) fn read<T: DeserializeOwned>(&self, input: &Value) -> Result<T, String> {
        let empty = serde_json::Map::new();
        let obj = input.as_object().unwrap_or(&empty);
        if self.refuse_others
            && let Some(key) = obj
                .keys()
                .find(|k| !self.fields.iter().any(|f| f.name() == k.as_str()))
        {
            return Err(self.say(key, &Problem::UnknownField));
        }
        // The common case, a good input: one read of the listed fields, then the presence
        // rules and checks in order (with nothing ill-typed, they are the only problems the
        // walk below could report).
        let listed: serde_json::Map<String, Value> = self
            .fields
            .iter()
            .filter_map(|f| obj.get_key_value(f.name()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Ok(read) = <T as serde::Deserialize>::deserialize(&Value::Object(listed)) {
            for field in self.fields {
                let name = field.name();
                match (field, obj.get(name)) {
                    (Field::Need(_), None | Some(Value::Null)) | (Field::NeedAny(_), None) => {
                        return Err(self.say(name, &Problem::Missing));
                    }
                    (_, None) => {}
                    (_, Some(v)) => {
                        if let Some(check) = self.check {
                            check(name, v)?;
                        }
                    }
                }
            }
            return Ok(read);
        }
        // A bad input: field by field, in order, so that the first problem reported is the
        // first in the list; a field read alone can only fail on itself or on a required field
        // not yet added (ignored here: `Need` says it, or the whole read below does).
        let mut seen = serde_json::Map::new();
        for field in self.fields {
            let name = field.name();
            let value = match (field, obj.get(name)) {
                (Field::Need(_), None | Some(Value::Null)) | (Field::NeedAny(_), None) => {
                    return Err(self.say(name, &Problem::Missing));
                }
                (_, None) => continue,
                (_, Some(v)) => v,
            };
            if let Some(check) = self.check {
                check(name, value)?;
            }
            seen.insert(name.to_owned(), value.clone());
            let Err(e) = serde_path_to_error::deserialize::<_, T>(Value::Object(seen.clone()))
            else {
                continue;
            };
            if e.path().iter().next().is_none() && e.inner().to_string().starts_with("missing") {
                continue;
            }
            if matches!(field, Field::Lenient(_)) {
                seen.remove(name);
                continue;
            }
            return Err(self.error(obj, e));
        }
        let all = Value::Object(seen);
        serde_path_to_error::deserialize(&all).map_err(|e| self.error(obj, e))
    }

    /// [`Reading::read`], a bad input being the call's error result.
    pub(crate) fn parse<T: DeserializeOwned>(&self, input: &Value) -> Result<T, ToolOutput> {
        self.read(input).map_err(ToolOutput::error)
    }

    fn say(&self, field: &str, problem: &Problem<'_>) -> String {
        (self.words)(field, problem).unwrap_or_else(|| common_message(field, problem))
    }

    /// serde's error at a path, as a [`Problem`] in the tool's words.
    fn error(
        &self,
        input: &serde_json::Map<String, Value>,
        err: serde_path_to_error::Error<serde_json::Error>,
    ) -> String {
        use serde_path_to_error::Segment;
        let path = err.path().clone();
        let msg = err.into_inner().to_string();
        let field = match path.to_string() {
            p if p == "." => String::new(),
            p => p,
        };
        let mut segments = path.iter();
        let at = match segments.next() {
            Some(Segment::Map { key }) => input.get(key.as_str()),
            _ => None,
        };
        let at = segments.try_fold(at, |v, seg| match seg {
            Segment::Seq { index } => Some(v?.get(index)),
            Segment::Map { key } => Some(v?.get(key.as_str())),
            _ => None,
        });
        let at = at.flatten();
        let (head, expected) = msg.split_once(", expected ").unwrap_or((&msg, ""));
        if head.starts_with("missing field `") {
            let name = named(head).concat();
            let name = if field.is_empty() {
                name
            } else {
                format!("{field}.{name}")
            };
            return self.say(&name, &Problem::Missing);
        }
        if head.starts_with("unknown variant `") {
            let choices = named(expected);
            return self.say(
                &field,
                &Problem::Unknown {
                    got: at,
                    choices: &choices,
                },
            );
        }
        if !expected.is_empty() {
            let wrong_type = head.starts_with("invalid type");
            return self.say(
                &field,
                &Problem::Invalid {
                    got: at,
                    expected,
                    wrong_type,
                },
            );
        }
        format!("`{field}`: {msg}")
    }
}

/// The names serde puts in backticks: "unknown variant `x`, expected `a` or `b`".
fn named(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The message for a problem when a tool has no words of its own.
fn common_message(field: &str, problem: &Problem<'_>) -> String {
    match problem {
        Problem::Missing => format!("`{field}` is required"),
        Problem::UnknownField => format!("unknown field `{field}`"),
        Problem::Unknown { got, choices } => {
            let choices = match choices {
                [a, b] => format!("\"{a}\" or \"{b}\""),
                names => format!("one of {}", names.join(", ")),
            };
            let got = match got {
                Some(Value::String(s)) => format!("{s:?}"),
                Some(v) if field != "op" => v.to_string(),
                _ => "nothing".to_owned(),
            };
            format!("`{field}` must be {choices}, got {got}")
        }
        Problem::Invalid {
            got,
            expected,
            wrong_type,
        } => {
            let what = match *expected {
                "i8" | "i16" | "i32" | "i64" => "an integer",
                "u8" | "u16" | "u32" | "u64" => "an integer from 0 up",
                "a sequence" => "an array",
                "a map" => "an object",
                "string or map" => "a string",
                e if e.starts_with("struct ") => "an object",
                e => e,
            };
            let got = match got {
                Some(v) if *wrong_type => json_type(v).to_owned(),
                Some(v) => v.to_string(),
                None => "nothing".to_owned(),
            };
            format!("`{field}` must be {what}, got {got}")
        }
    }
}

/// Reads a call's `op` (an enum of `weft_api::tools`) from the raw input, before the fields
/// the op takes. An absent, non-string or unknown op is one [`Problem::Unknown`] on `op`:
/// "`op` must be one of get, set, …, got \"put\"" (or "got nothing").
pub(crate) fn read_op<Op: weft_api::tools::ToolOp>(
    input: &Value,
    words: Words,
) -> Result<Op, String> {
    let raw = input.get("op").filter(|v| v.is_string());
    if let Some(op) = raw.and_then(|v| serde_json::from_value(v.clone()).ok()) {
        return Ok(op);
    }
    let choices = Op::names();
    let problem = Problem::Unknown {
        got: raw,
        choices: &choices,
    };
    Err(words("op", &problem).unwrap_or_else(|| common_message("op", &problem)))
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

    /// Each case's message, which must equal the one the tool gave before its input was typed.
    fn check_messages(got: impl Fn(&Value) -> Result<(), String>, cases: &[(Value, &str)]) {
        for (input, want) in cases {
            assert_eq!(got(input).err().as_deref(), Some(*want), "{input}");
        }
    }

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn memory_messages_are_the_old_ones() {
        let allowed = strings(&["run", "agent", "user"]);
        let read = |input: &Value| memory::read(input, &allowed).map(drop);
        let ops = "`op` must be one of get, set, delete, list, incr, search, got";
        check_messages(
            read,
            &[
                (json!({"scope": "run"}), &format!("{ops} nothing")),
                (json!({"op": 5, "scope": "run"}), &format!("{ops} nothing")),
                (json!(["get", "run"]), &format!("{ops} nothing")),
                (
                    json!({"op": "put", "scope": "run"}),
                    &format!("{ops} \"put\""),
                ),
                (json!({"op": "get"}), "`scope` (a string) is required"),
                (
                    json!({"op": "get", "scope": 5}),
                    "`scope` (a string) is required",
                ),
                (
                    json!({"op": "get", "scope": "global", "key": "k"}),
                    "scope `global` is not allowed for this agent; allowed: run, agent, user",
                ),
                // The allow-list before the op's fields.
                (
                    json!({"op": "set", "scope": "tenant", "key": 5, "ttl_seconds": "x"}),
                    "scope `tenant` is not allowed for this agent; allowed: run, agent, user",
                ),
                (
                    json!({"op": "get", "scope": "run"}),
                    "`key` (a string) is required",
                ),
                (
                    json!({"op": "get", "scope": "run", "key": 5}),
                    "`key` (a string) is required",
                ),
                (
                    json!({"op": "delete", "scope": "run", "key": null}),
                    "`key` (a string) is required",
                ),
                // `value` before `key`, and before `ttl_seconds`.
                (
                    json!({"op": "set", "scope": "run", "ttl_seconds": "x"}),
                    "`value` (any JSON) is required",
                ),
                (
                    json!({"op": "set", "scope": "run", "key": "k", "value": 1, "ttl_seconds": "x"}),
                    "`ttl_seconds` must be an integer",
                ),
                (
                    json!({"op": "set", "scope": "run", "key": "k", "value": 1, "ttl_seconds": 1.5}),
                    "`ttl_seconds` must be an integer",
                ),
                (
                    json!({"op": "set", "scope": "run", "key": "k", "value": 1, "if_version": "1"}),
                    "`if_version` must be an integer",
                ),
                (
                    json!({"op": "incr", "scope": "run", "key": "k", "by": "2"}),
                    "`by` must be an integer",
                ),
                (
                    json!({"op": "list", "scope": "run", "limit": "10"}),
                    "`limit` must be an integer",
                ),
                (
                    json!({"op": "search", "scope": "run"}),
                    "`query` (a string) is required",
                ),
                (
                    json!({"op": "search", "scope": "run", "query": "q", "top_k": "5"}),
                    "`top_k` must be an integer",
                ),
            ],
        );
        check_messages(
            |input| memory::read(input, &[]).map(drop),
            &[(
                json!({"op": "get", "scope": "run", "key": "k"}),
                "this agent has no memory scopes (memory_scopes is empty)",
            )],
        );
        check_messages(
            |input| memory::read(input, &strings(&["global"])).map(drop),
            &[(
                json!({"op": "get", "scope": "global", "key": "k"}),
                "`scope` must be run, agent, user or tenant",
            )],
        );
    }

    #[test]
    fn memory_ignores_what_an_op_does_not_read() {
        let allowed = strings(&["run", "user"]);
        let read = |input: Value| memory::read(&input, &allowed).unwrap();
        let m = read(json!({
            "op": "get", "scope": "run", "key": "k", "limit": "10", "prefix": 5, "cursor": true,
            "embed": "yes", "ttl_seconds": "x", "by": [], "query": 1, "top_k": "5", "value": 1
        }));
        assert_eq!(
            (m.key.as_deref(), m.limit, m.value),
            (Some("k"), None, None)
        );
        let m = read(json!({"op": "list", "scope": "run", "prefix": 5, "cursor": 7, "limit": 3}));
        assert_eq!((m.prefix, m.cursor, m.limit), (None, None, Some(3)));
        let m = read(json!({
            "op": "set", "scope": "user", "scope_id": "mallory", "key": "k", "value": null,
            "embed": "yes", "limit": "x"
        }));
        assert_eq!((m.value, m.embed), (Some(Value::Null), None));
        let m = read(json!({"op": "set", "scope": "run", "key": "k", "value": 1, "embed": true}));
        assert_eq!(m.embed, Some(true));
    }

    fn acl() -> weft_core::agent::AgentChannels {
        weft_core::agent::AgentChannels {
            publish: strings(&["out.*"]),
            subscribe: strings(&["in", "jobs.*"]),
        }
    }

    #[test]
    fn channel_messages_are_the_old_ones() {
        let acl = acl();
        let read = |input: &Value| channel::read(input, &acl).map(drop);
        let ops = "`op` must be one of publish, read, ack, peek, await, got";
        let no_read = "this run may not read channel `secret`; its grants: in, jobs.*";
        check_messages(
            read,
            &[
                (json!({}), &format!("{ops} nothing")),
                (json!({"op": true}), &format!("{ops} nothing")),
                (json!({"op": "write"}), &format!("{ops} \"write\"")),
                (json!({"op": "publish"}), "`channel` (a string) is required"),
                (
                    json!({"op": "publish", "channel": 5}),
                    "`channel` (a string) is required",
                ),
                (
                    json!({"op": "publish", "channel": "in", "payload": 1}),
                    "this run may not publish to channel `in`; its grants: out.*",
                ),
                (
                    json!({"op": "publish", "channel": "out.a"}),
                    "`payload` (any JSON) is required",
                ),
                // The ACL before the other fields.
                (
                    json!({"op": "read", "channel": "secret", "max": -1}),
                    no_read,
                ),
                (
                    json!({"op": "read", "channel": "in", "max": -1}),
                    "`max` must be an integer from 0 to 1000",
                ),
                (
                    json!({"op": "read", "channel": "in", "max": 5000}),
                    "`max` must be an integer from 0 to 1000",
                ),
                (
                    json!({"op": "peek", "channel": "in", "max": "3"}),
                    "`max` must be an integer from 0 to 1000",
                ),
                (
                    json!({"op": "read", "channel": "in", "wait_ms": -1}),
                    "`wait_ms` must be an integer from 0 to 30000",
                ),
                (
                    json!({"op": "ack", "channel": "in"}),
                    "`cursor` (from a read) is required",
                ),
                (
                    json!({"op": "ack", "channel": "in", "cursor": 5}),
                    "`cursor` (from a read) is required",
                ),
                (
                    json!({"op": "await"}),
                    "`channels` (an array of channel names) is required",
                ),
                (
                    json!({"op": "await", "channels": "in"}),
                    "`channels` (an array of channel names) is required",
                ),
                (
                    json!({"op": "await", "channels": ["in", 5]}),
                    "`channels[1]` must be a string",
                ),
                (
                    json!({"op": "await", "channels": ["in", "secret", 5]}),
                    no_read,
                ),
                (
                    json!({"op": "await", "channels": ["in"], "n": -1}),
                    "`n` must be an integer from 0 to 64",
                ),
                // `n` (in range for its type, not for the tool) before `wait_ms`.
                (
                    json!({"op": "await", "channels": ["in"], "n": 100, "wait_ms": -1}),
                    "`n` must be an integer from 0 to 64",
                ),
                (
                    json!({"op": "await", "channels": ["in"], "wait_ms": 30001}),
                    "`wait_ms` must be an integer from 0 to 30000",
                ),
            ],
        );
    }

    #[test]
    fn channel_ignores_what_an_op_does_not_read() {
        let acl = acl();
        let read = |input: Value| channel::read(&input, &acl).unwrap();
        let c = read(json!({
            "op": "publish", "channel": "out.a", "payload": null, "wait_ms": -1, "max": "x",
            "mode": 5, "cursor": 3, "channels": 1, "n": -1
        }));
        assert_eq!(
            (c.payload, c.wait_ms, c.max),
            (Some(Value::Null), None, None)
        );
        let c = read(json!({"op": "await", "channels": ["in", "jobs.a"], "mode": 5, "channel": 1}));
        assert_eq!((c.mode, c.channels.map(|c| c.len())), (None, Some(2)));
        let c = read(json!({"op": "read", "channel": "in", "cursor": 5, "max": 10}));
        assert_eq!((c.cursor, c.max), (None, Some(10)));
    }

    #[test]
    fn agent_messages_are_the_old_ones() {
        let read = |input: &Value| agent::parse(input).map(drop);
        let spawn = "spawn needs `agent` and `input` (strings)";
        let runs = "parallel_spawn needs `runs`: [{agent, input}, …]";
        check_messages(
            read,
            &[
                (json!({}), "`op` must be \"spawn\" or \"parallel_spawn\""),
                (
                    json!({"op": "fork"}),
                    "`op` must be \"spawn\" or \"parallel_spawn\"",
                ),
                (
                    json!({"op": ["spawn"]}),
                    "`op` must be \"spawn\" or \"parallel_spawn\"",
                ),
                (json!({"op": "spawn", "agent": "a"}), spawn),
                (json!({"op": "spawn", "agent": "a", "input": 5}), spawn),
                (json!({"op": "spawn", "agent": null, "input": "i"}), spawn),
                (json!({"op": "parallel_spawn"}), runs),
                (json!({"op": "parallel_spawn", "runs": "x"}), runs),
                (
                    json!({"op": "parallel_spawn", "runs": [{"agent": "a"}]}),
                    "runs[0] needs `agent` and `input` (strings)",
                ),
                (
                    json!({"op": "parallel_spawn", "runs": [{"agent": "a", "input": "i"}, 5]}),
                    "runs[1] needs `agent` and `input` (strings)",
                ),
                (
                    json!({"op": "parallel_spawn", "runs": [
                        {"agent": "a", "input": "i"}, {"agent": 5, "input": "i"}
                    ]}),
                    "runs[1] needs `agent` and `input` (strings)",
                ),
            ],
        );
        let (_, items) =
            agent::parse(&json!({"op": "spawn", "agent": "a", "input": "i", "runs": 5})).unwrap();
        assert_eq!(items, [("a".to_owned(), "i".to_owned())]);
        let (_, items) = agent::parse(&json!({
            "op": "parallel_spawn", "runs": [{"agent": "a", "input": "i"}], "agent": 5, "input": []
        }))
        .unwrap();
        assert_eq!(items, [("a".to_owned(), "i".to_owned())]);
    }

    #[test]
    fn context_skill_and_interruption_read_as_before() {
        use weft_api::tools::ContextOp;
        check_messages(
            |input| read_op::<ContextOp>(input, common_words).map(drop),
            &[
                (
                    json!({}),
                    "`op` must be one of time, self, compact, got nothing",
                ),
                (
                    json!({"op": 1}),
                    "`op` must be one of time, self, compact, got nothing",
                ),
                (
                    json!({"op": "now"}),
                    "`op` must be one of time, self, compact, got \"now\"",
                ),
            ],
        );
        check_messages(
            |input| skill::read(input).map(drop),
            &[
                (json!({}), "`op` must be \"list\" or \"load\", got nothing"),
                (
                    json!({"op": "get"}),
                    "`op` must be \"list\" or \"load\", got \"get\"",
                ),
                (
                    json!({"op": "load"}),
                    "`name` (a skill from op=list) is required",
                ),
                (
                    json!({"op": "load", "name": 5}),
                    "`name` (a skill from op=list) is required",
                ),
            ],
        );
        let s = skill::read(&json!({"op": "load", "name": "n", "file": 5})).unwrap();
        assert_eq!((s.name.as_deref(), s.file), (Some("n"), None));
        assert!(skill::read(&json!({"op": "list", "name": 5, "file": []})).is_ok());
        // `op` is not looked at; a question that is not a string is none.
        let ask = interruption::question;
        assert_eq!(ask(&json!({"op": "Ask", "question": "why?"})), "why?");
        assert_eq!(ask(&json!({"op": 5, "question": "why?"})), "why?");
        assert_eq!(ask(&json!({"question": "why?"})), "why?");
        assert_eq!(ask(&json!({"op": "ask", "question": 5})), "");
        assert_eq!(ask(&json!(["why?"])), "");
    }

    /// Every built-in tool's schema, pinned: `testdata/tool_schemas.json`, compared as a value
    /// and rewritten with `UPDATE_GOLDEN=1`.
    #[test]
    fn tool_schemas_are_pinned() {
        use weft_api::tools::{
            ContextInput, DeleteInput, EditInput, GlobInput, GrepInput, HttpInput, ListInput,
            MoveInput, ReadInput, SkillInput, WriteInput, input_schema,
        };
        let got = json!({
            "Context": input_schema::<ContextInput>(),
            "Agent": input_schema::<AgentInput>(),
            "Interruption": input_schema::<InterruptionInput>(),
            "HTTP": input_schema::<HttpInput>(),
            "Memory": input_schema::<MemoryInput>(),
            "Channel": input_schema::<ChannelInput>(),
            "Skill": input_schema::<SkillInput>(),
            "Read": input_schema::<ReadInput>(),
            "Write": input_schema::<WriteInput>(),
            "Edit": input_schema::<EditInput>(),
            "Glob": input_schema::<GlobInput>(),
            "Grep": input_schema::<GrepInput>(),
            "Move": input_schema::<MoveInput>(),
            "Delete": input_schema::<DeleteInput>(),
            "List": input_schema::<ListInput>(),
            "Exec": input_schema::<weft_api::tools::ExecInput>(),
            "Evaluation": input_schema::<weft_api::tools::EvaluationInput>(),
            "Recall": input_schema::<weft_api::context::RecallInput>(),
        });
        // Every hosted tool is pinned.
        let hosted = Registry::builtin(
            &weft_config::ExecutorConfig::default(),
            &weft_config::VolumesConfig::default(),
        )
        .unwrap();
        for name in hosted.names() {
            assert!(got.get(name).is_some(), "{name} is not pinned");
        }
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
                    "op": {"type": "string", "enum": ["ask", "notify"]},
                    "question": {"type": "string", "description": "ask: the question"},
                    "message": {"type": "string", "description": "notify: the notice (at most 4096 characters)"}
                },
                "required": ["op"]
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
