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
//! [`Registry::builtin`].

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
    ) -> BoxFuture<'a, Result<Vec<Value>, Stop>>;
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
