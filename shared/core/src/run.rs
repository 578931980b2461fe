//! The vocabulary of agent runs (API.md, "Runs"): statuses, stop reasons, the typed run events
//! ([`RunEvent`]) whose `(kind, data)` pairs make up a transcript, and the [`RunSpec`] a run is
//! created with ([`RunSpec::resolve`], the one place an agent definition and a caller's
//! narrowing become a spec, for root runs and sub-runs alike).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::RunId;
use crate::agent::{AgentChannels, AgentContent, AgentSampling};
use crate::message::{Message, Usage};
use weft_api::plans::{CheckResult, ReasonCode, Task, TaskStatus, Verdict};

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$(Self::$variant),+];

            /// The snake_case wire name.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $wire),+ }
            }

            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum!(
    /// Where a run is in its life. `paused`: parked by a pause (of the run, its tenant or the
    /// fleet) until resumed.
    RunStatus {
        Queued => "queued",
        Running => "running",
        AwaitingInput => "awaiting_input",
        Paused => "paused",
        Succeeded => "succeeded",
        Failed => "failed",
        Cancelled => "cancelled",
    }
);

impl RunStatus {
    /// A run in a terminal status never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

wire_enum!(
    /// Why a run stopped.
    StopReason {
        EndTurn => "end_turn",
        MaxIterations => "max_iterations",
        MaxTokens => "max_tokens",
        Cancelled => "cancelled",
        Error => "error",
        Timeout => "timeout",
        BudgetExhausted => "budget_exhausted",
    }
);

impl StopReason {
    /// The terminal status a run that stopped for this reason ends in.
    pub fn final_status(self) -> RunStatus {
        match self {
            Self::EndTurn | Self::MaxIterations | Self::MaxTokens => RunStatus::Succeeded,
            Self::Cancelled => RunStatus::Cancelled,
            Self::Error | Self::Timeout | Self::BudgetExhausted => RunStatus::Failed,
        }
    }
}

wire_enum!(
    /// What a run event is. `TextDelta` is live only; every other kind is persisted in the
    /// transcript with a per-run `seq`.
    EventKind {
        RunStarted => "run_started",
        ProviderChosen => "provider_chosen",
        TextDelta => "text_delta",
        AssistantMessage => "assistant_message",
        ToolCall => "tool_call",
        ToolResult => "tool_result",
        Usage => "usage",
        Retry => "retry",
        ProviderFallback => "provider_fallback",
        AwaitingInput => "awaiting_input",
        UserInput => "user_input",
        Interruption => "interruption",
        SubRunStarted => "sub_run_started",
        SubRunFinished => "sub_run_finished",
        ContextCompacted => "context_compacted",
        CompactionRequested => "compaction_requested",
        Notice => "notice",
        Error => "error",
        RunFinished => "run_finished",
        ChannelPublish => "channel_publish",
        ChannelDelivery => "channel_delivery",
        FileChanged => "file_changed",
        PlanProposed => "plan_proposed",
        PlanRejected => "plan_rejected",
        PlanAwaitingApproval => "plan_awaiting_approval",
        PlanAccepted => "plan_accepted",
        TaskStarted => "task_started",
        TaskChecked => "task_checked",
        VerifierUnreadable => "verifier_unreadable",
        TaskVerified => "task_verified",
        VoteSplit => "vote_split",
        TaskRetrying => "task_retrying",
        TaskFinished => "task_finished",
        TaskControl => "task_control",
        OutcomeStale => "outcome_stale",
        PlanStalled => "plan_stalled",
        ReplanRequested => "replan_requested",
        BudgetExhausted => "budget_exhausted",
        PeerUpdate => "peer_update",
        HookDecision => "hook_decision",
        RunPaused => "run_paused",
        RunResumed => "run_resumed",
    }
);

wire_enum!(
    /// Who paused a run: the run itself (`POST /v1/runs/{id}/pause`), its tenant's drain, or
    /// the fleet's maintenance.
    PauseScope {
        Run => "run",
        Tenant => "tenant",
        Fleet => "fleet",
    }
);

macro_rules! run_events {
    ($($(#[$doc:meta])* $variant:ident($payload:ty)),+ $(,)?) => {
        /// One run event, typed. The transcript stores it as its [`EventKind`] name and its
        /// payload's JSON ([`RunEvent::kind`], [`RunEvent::data`]); [`RunEvent::parse`] reads
        /// that pair back. Serde's own form is `{"kind": …, "data": …}`.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind", content = "data", rename_all = "snake_case")]
        pub enum RunEvent {
            $($(#[$doc])* $variant($payload)),+
        }

        impl RunEvent {
            /// The event's kind.
            pub fn kind(&self) -> EventKind {
                match self {
                    $(Self::$variant(_) => EventKind::$variant),+
                }
            }

            /// The event's payload as stored and sent (`data`).
            pub fn data(&self) -> Value {
                match self {
                    $(Self::$variant(p) => serde_json::to_value(p).unwrap_or(Value::Null)),+
                }
            }

            /// Reads a stored `(kind, data)` pair. `None` for an unknown kind or a payload that
            /// is not what the kind carries.
            pub fn parse(kind: &str, data: &Value) -> Option<Self> {
                match EventKind::parse(kind)? {
                    $(EventKind::$variant => <$payload>::deserialize(data).ok().map(Self::$variant)),+
                }
            }
        }
    };
}

run_events!(
    /// The run was created (first event of every transcript).
    RunStarted(RunStarted),
    /// The router picked a provider for a model turn.
    ProviderChosen(ProviderChosen),
    /// Streamed text of the current turn; live only, never persisted.
    TextDelta(TextDelta),
    /// A whole model turn.
    AssistantMessage(AssistantMessage),
    /// One tool call of a turn.
    ToolCall(ToolCallEvent),
    /// The result of one tool call.
    ToolResult(ToolResultEvent),
    /// Token usage of one model turn.
    Usage(Usage),
    /// A retried step (shape not fixed yet).
    Retry(Value),
    /// A provider failed and the router moved to the next candidate.
    ProviderFallback(ProviderFallback),
    /// The run parked, waiting for input.
    AwaitingInput(AwaitingInput),
    /// Input from the caller.
    UserInput(UserInput),
    /// An `Interruption.ask` the run parks on.
    Interruption(Interruption),
    /// A sub-run started by an `Agent` call.
    SubRunStarted(SubRunStarted),
    /// A sub-run ended.
    SubRunFinished(SubRunFinished),
    /// The model's view was compacted: what it is sent from here on.
    ContextCompacted(ContextCompacted),
    /// A compaction was asked for (`POST /v1/runs/{id}/compact`, `Context {op: compact}`); it
    /// happens before the next model turn.
    CompactionRequested(CompactionRequested),
    /// An `Interruption {op: notify}`: a notice for the run's watchers; the run goes on.
    Notice(Notice),
    /// The run failed with this error.
    Error(ErrorEvent),
    /// The run ended (last event of a finished transcript).
    RunFinished(RunFinished),
    /// A `Channel` call published a message.
    ChannelPublish(ChannelPublish),
    /// A `Channel` call received a message.
    ChannelDelivery(ChannelDelivery),
    /// A file tool changed files of a volume.
    FileChanged(FileChanged),
    /// A plan run: a valid plan version was written.
    PlanProposed(PlanProposed),
    /// A plan run: a plan failed validation and goes back to its writer.
    PlanRejected(PlanRejected),
    /// A plan run parks until its plan is approved.
    PlanAwaitingApproval(PlanAwaitingApproval),
    /// A plan run: a plan version runs from here.
    PlanAccepted(PlanAccepted),
    /// A plan run: a task attempt started as a sub-run.
    TaskStarted(TaskStarted),
    /// A plan run: a task attempt's sub-run ended and its checks ran.
    TaskChecked(TaskChecked),
    /// A plan run: a verifier's answer was not a verdict; the verification runs again.
    VerifierUnreadable(VerifierUnreadable),
    /// A plan run: a task attempt's verdict.
    TaskVerified(TaskVerified),
    /// A plan run: a vote split; a person is asked.
    VoteSplit(VoteSplit),
    /// A plan run: a task gets another attempt.
    TaskRetrying(TaskRetrying),
    /// A plan run: a task ended (passed, failed or skipped).
    TaskFinished(TaskFinished),
    /// A plan run: a person's retry or skip of a task was taken.
    TaskControl(TaskControl),
    /// A plan run: an attempt started under an older plan version ended; ignored.
    OutcomeStale(OutcomeStale),
    /// The run parked at a step boundary because it was paused.
    RunPaused(RunPaused),
    /// A paused run was resumed and queued again.
    RunResumed(RunResumed),
    /// A plan run: no task can start.
    PlanStalled(PlanStalled),
    /// A plan run: a replan is asked for.
    ReplanRequested(ReplanRequested),
    /// A plan run ran out of a budget.
    BudgetExhausted(BudgetExhausted),
    /// An A2A peer's task, called as a tool, reported progress.
    PeerUpdate(PeerUpdate),
    /// A tool-use hook decided about a call (docs/hooks.md).
    HookDecision(HookDecision),
);

impl RunEvent {
    /// The stored pair: the kind's name and the payload.
    pub fn into_parts(self) -> (String, Value) {
        (self.kind().as_str().to_owned(), self.data())
    }
}

/// `run_started`. A root run carries `interactive` and `tools`; a sub-run `parent_run_id` and
/// `depth`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunStarted {
    pub agent: String,
    pub agent_hash: String,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interactive: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<i32>,
}

/// `run_paused`: the run parked at a step boundary (no tool call of it is running) and holds no
/// executor until resumed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunPaused {
    /// `run`, `tenant` or `fleet` ([`PauseScope`]).
    pub by: String,
    /// The executor that parked the run.
    pub executor: String,
}

/// `run_resumed`: a paused run was queued again.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunResumed {
    /// `run`, `tenant` or `fleet`: the pause that was lifted.
    pub by: String,
}

/// `context_compacted`: from here on the model is sent the first task (the messages of the
/// first `user_input`) verbatim, then `summary`, then the transcript's messages from
/// `first_kept_seq` on. Any executor folding the transcript rebuilds the same view.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContextCompacted {
    /// What the turns folded away said (it replaces any earlier summary).
    pub summary: String,
    /// The estimated tokens of the prompt before and after.
    pub before_tokens: u64,
    pub after_tokens: u64,
    /// The seq of the first message kept verbatim after the summary (a model turn's
    /// `assistant_message`), or the seq after the last event when none is kept.
    pub first_kept_seq: i64,
    /// `manual`, `auto` or `self`.
    pub trigger: String,
    /// Model turns folded into the summary by this compaction.
    pub folded_turns: u32,
    /// The model that wrote the summary.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub model: String,
}

/// `compaction_requested`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactionRequested {
    /// `manual` or `self`.
    pub trigger: String,
}

/// `notice`: a non-blocking message from the run to whoever watches it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Notice {
    pub tool_use_id: String,
    pub message: String,
}

/// `provider_chosen`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderChosen {
    pub provider: String,
    pub model: String,
    /// Candidates that failed before this one.
    pub fallbacks: u32,
}

/// `text_delta`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TextDelta {
    pub text: String,
}

/// `assistant_message`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    pub message: Message,
    /// The OpenAI-style finish reason (`stop`, `tool_calls`, `length`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

/// `tool_call`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallEvent {
    pub id: String,
    pub name: String,
    /// The arguments as JSON, or the raw text when the model produced invalid JSON.
    #[serde(default)]
    pub input: Value,
}

/// `tool_result`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResultEvent {
    pub tool_use_id: String,
    #[serde(default)]
    pub name: String,
    /// The text the model sees.
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub is_error: bool,
    /// Whether the result was recorded before and reused rather than produced again.
    #[serde(default)]
    pub reused: bool,
}

/// `provider_fallback`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderFallback {
    pub provider: String,
    pub model: String,
    /// The weft error code of the failure.
    pub code: String,
    pub message: String,
}

/// `awaiting_input`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AwaitingInput {
    /// `end_turn` or `interruption`.
    pub reason: String,
    /// The pending interruption (`null` when none).
    pub interrupt: Option<Value>,
    /// The executor that parked the run.
    pub executor: String,
}

/// `user_input`: a text, or whole messages (a run created with `messages`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UserInput {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
}

impl UserInput {
    /// Input of one text.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            messages: None,
        }
    }
}

/// `interruption`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Interruption {
    /// `int_<tool_use_id>`.
    pub id: String,
    pub tool_use_id: String,
    pub question: String,
}

/// `sub_run_started`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubRunStarted {
    pub run_id: RunId,
    pub agent: String,
    pub tool_use_id: String,
    /// The child's index within its `Agent` call.
    pub index: usize,
}

/// `sub_run_finished`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubRunFinished {
    pub run_id: RunId,
    pub status: RunStatus,
    pub stop_reason: Option<StopReason>,
}

/// `error`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorEvent {
    pub code: String,
    pub message: String,
}

/// `run_finished`. The executor writes `iterations` and `executor`; a run cancelled while no
/// executor held it gets `reason` instead.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunFinished {
    pub status: RunStatus,
    pub stop_reason: StopReason,
    #[serde(default)]
    pub usage: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `peer_update`: what an A2A peer said about its task while a tool call of this run waited
/// on it (a status and its message, or an artifact). Written with the call's result (before
/// it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PeerUpdate {
    pub tool_use_id: String,
    /// The `a2a_peer` definition.
    pub peer: String,
    /// The peer's task id.
    pub task_id: String,
    /// The task's state (`TASK_STATE_WORKING`, …), or `artifact` for an artifact.
    pub state: String,
    /// The status message's (or the artifact's) text.
    pub text: String,
}

/// `hook_decision`: what one tool-use hook decided about a call (docs/hooks.md). A pre hook's
/// is written before the tool runs, with the decision's record in the tool ledger; a post
/// hook's with the call's result (before it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HookDecision {
    pub tool_use_id: String,
    pub tool: String,
    /// The `hook` definition.
    pub hook: String,
    pub phase: weft_api::hooks::HookPhase,
    pub decision: weft_api::hooks::HookVerdict,
    /// The receiver's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why no usable answer came (the receiver down, a timeout, a non-2xx, an unreadable
    /// answer): the hook's `fail_mode` decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// `channel_publish`: a `Channel` call published `payload` to `channel` at `seq`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChannelPublish {
    pub tool_use_id: String,
    pub channel: String,
    /// The message's position in the channel.
    pub seq: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

/// `channel_delivery`: a `Channel` call received the message at `seq` of `channel`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChannelDelivery {
    pub tool_use_id: String,
    pub channel: String,
    pub seq: i64,
    /// The reader's cursor after this message, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

/// `file_changed`: a file tool call (`Write`, `Edit`, `Move`, `Delete`) made change `change_id`
/// of the volume bound as `volume`. Written with the call's result (before it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FileChanged {
    /// The binding name (`run` for the run tree's own volume).
    pub volume: String,
    pub tool_use_id: String,
    pub change_id: String,
    pub files: Vec<ChangedFile>,
}

/// One file of a [`FileChanged`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChangedFile {
    pub path: String,
    /// `None` where the file did not exist before.
    pub before_sha: Option<String>,
    /// `None` where the file does not exist after.
    pub after_sha: Option<String>,
    /// A unified diff (empty for a binary file or a move), possibly cut short.
    pub diff: String,
}

// --- plan runs' events (docs/harness.md; the step function over them is `crate::plan`) ------

/// Who wrote a plan version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanSource {
    #[default]
    Planner,
    /// the caller's `plan.tasks`
    Caller,
    Replanner,
    /// an edit through `PUT /v1/runs/{id}/plan`
    Person,
}

/// How a verdict was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyTier {
    #[default]
    Checks,
    Llm,
    Vote,
    Human,
}

/// `plan_proposed`: version `version` of the plan, valid, as written by `source`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanProposed {
    pub version: u32,
    pub source: PlanSource,
    pub tasks: Vec<Task>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run_id: Option<RunId>,
    /// tokens the writing sub-run used
    #[serde(default)]
    pub tokens: u64,
}

/// `plan_rejected`: a plan (or a replan) that failed validation; it goes back to its writer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanRejected {
    /// the writer's try, from 1
    pub attempt: u32,
    pub source: PlanSource,
    pub errors: Vec<String>,
    /// what the writer answered (cut short)
    #[serde(default)]
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run_id: Option<RunId>,
    #[serde(default)]
    pub tokens: u64,
}

/// `plan_accepted`: version `version` runs from here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanAccepted {
    pub version: u32,
    /// the subject that approved it (`approval: before_execute`)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

/// `plan_awaiting_approval`: the run parks until `PUT /v1/runs/{id}/plan` approves `version`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanAwaitingApproval {
    pub version: u32,
}

/// `task_started`: attempt `attempt` of `task` runs as sub-run `child_run_id`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskStarted {
    pub task: String,
    pub attempt: u32,
    pub child_run_id: RunId,
    pub plan_version: u32,
    pub agent: String,
    /// the escalation model it runs on, when not its agent's own
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `task_checked`: the attempt's sub-run ended and its checks ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskChecked {
    pub task: String,
    pub attempt: u32,
    /// how the sub-run ended
    pub child_status: RunStatus,
    pub results: Vec<CheckResult>,
    /// the sub-run's last answer (cut short)
    #[serde(default)]
    pub output: String,
    #[serde(default)]
    pub tokens: u64,
}

/// `verifier_unreadable`: a verifier's answer was not a verdict; the verification runs again
/// (never the task).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerifierUnreadable {
    pub task: String,
    pub attempt: u32,
    /// the verification's try, from 1
    pub try_no: u32,
    pub verifier_run_id: RunId,
    pub error: String,
    /// what the verifier answered (cut short)
    #[serde(default)]
    pub output: String,
    #[serde(default)]
    pub tokens: u64,
}

/// `task_verified`: the attempt's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskVerified {
    pub task: String,
    pub attempt: u32,
    pub tier: VerifyTier,
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifier_run_ids: Vec<RunId>,
    #[serde(default)]
    pub tokens: u64,
}

/// `vote_split`: a vote's verifiers disagreed; a person settles it through an interruption
/// (`POST /v1/runs/{id}/interrupts/{interrupt_id}` with `pass` or `fail`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VoteSplit {
    pub task: String,
    pub attempt: u32,
    pub pass: u32,
    pub fail: u32,
    pub votes: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifier_run_ids: Vec<RunId>,
    #[serde(default)]
    pub tokens: u64,
}

impl VoteSplit {
    /// The tool-use id (and ledger key) of the question put to a person about this split.
    pub fn question_id(task: &str, attempt: u32) -> String {
        format!("vote:{task}:{attempt}")
    }
}

/// `task_retrying`: attempt `attempt` comes next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRetrying {
    pub task: String,
    /// the attempt about to start
    pub attempt: u32,
    pub reason_code: ReasonCode,
    /// carried to the attempt (empty for a fresh-context escalation)
    #[serde(default)]
    pub feedback: String,
    /// the model it escalates to, when it does
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `task_finished`: the task passed, failed (out of attempts, or no progress) or was skipped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskFinished {
    pub task: String,
    pub status: TaskStatus,
    pub attempts: u32,
    pub reason_code: ReasonCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// `outcome_stale`: an attempt started under an older plan version ended; it is ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutcomeStale {
    pub task: String,
    pub attempt: u32,
    pub plan_version: u32,
}

/// `plan_stalled`: no task can start and some never will without a new plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanStalled {
    pub version: u32,
    /// pending tasks that wait on a task that failed
    pub blocked: Vec<String>,
    pub failed: Vec<String>,
}

/// `replan_requested`: replan number `replan` is asked for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplanRequested {
    pub replan: u32,
    pub reason: String,
}

/// `budget_exhausted`: the run ends on budget `budget` (`tokens`, `wall_time`, `replans`,
/// `plan_tries`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetExhausted {
    pub budget: String,
    pub used: u64,
    pub limit: u64,
}

/// `task_retry_requested` / a person's `retry` or `skip`, taken from the run's controls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskControl {
    pub task: String,
    /// `retry` or `skip`
    pub action: String,
    pub by: String,
}

/// What a run was asked to do, resolved when it is created ([`RunSpec::resolve`]: agent
/// defaults, then the caller's narrowing and overrides) and stored with the run. Never holds
/// credentials. Fields added later default, so the stored specs of older runs still load.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunSpec {
    /// The model string for the router (name, alias, `provider/model` or `tier:<name>`).
    pub model: String,
    /// The tools the run may call: the agent's list narrowed by the caller.
    pub tools: Vec<String>,
    /// The agent's outbound hosts for the HTTP tool; `None` = the operator's list.
    pub allowed_hosts: Option<Vec<String>>,
    /// The caller's narrowing of those; `None` = no narrowing, `[]` = no network. For a sub-run,
    /// its parent's effective list.
    pub caller_allowed_hosts: Option<Vec<String>>,
    pub sampling: AgentSampling,
    pub max_iterations: u32,
    pub max_tokens: Option<u32>,
    pub max_concurrent_children: u32,
    /// Caller metadata, returned as given.
    pub metadata: Value,
    /// The memory scopes the run may use (the agent's `memory_scopes`).
    pub memory_scopes: Vec<String>,
    /// The run's effective channel ACL: the agent's, intersected with the parent's for a
    /// sub-run (never wider than either).
    pub channels: AgentChannels,
    /// The skills the run may load (the agent's `skills`).
    pub skills: Vec<String>,
    /// The names of the credentials the run was given (`POST /v1/runs` `credentials`; the
    /// values are never stored — they live in Redis for the run's lifetime).
    pub credentials: Vec<String>,
    /// The volumes the run's file tools may use: the agent's bindings narrowed by the caller,
    /// and for a sub-run by its parent's (`ro` wins; a name must be in both).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::volume::VolumeBinding>,
    /// A plan run's roles, plan and budgets (`mode: "plan"`); `None` for the agent loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<weft_api::plans::PlanSpec>,
    /// The shape every model answer must have (OpenAI's `response_format`), where the provider
    /// constrains generation: set for a plan run's verifier without tools (its verdict).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    /// How the run keeps its model view inside the window: the caller's settings, else the
    /// agent's, else (a sub-run) its parent's. `None` = no automatic compaction and the default
    /// tool-result budgets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<weft_api::context::Compaction>,
    /// A code agent's whole-run wall clock in seconds (its `code.max_wall_s`); `None` for a model
    /// agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_s: Option<u32>,
}

/// A caller's narrowing of an agent definition, for [`RunSpec::resolve`]. `None` everywhere (the
/// default) takes the definition as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Narrowing {
    /// Only these of the agent's tools (names the agent lacks are dropped).
    pub tools: Option<Vec<String>>,
    /// Outbound hosts the caller allows (`[]` = no network); stored as `caller_allowed_hosts`.
    pub allowed_hosts: Option<Vec<String>>,
    /// An outer channel ACL (a parent run's): the run's ACL is the agent's intersected with it.
    pub channels: Option<AgentChannels>,
    /// Sampling overrides (set fields replace the agent's; a non-empty `stop` replaces its stop
    /// list).
    pub sampling: Option<AgentSampling>,
    /// At most this many model turns (never more than the agent allows).
    pub max_iterations: Option<u32>,
    /// Caller metadata, stored as given.
    pub metadata: Value,
    /// An outer list of volume bindings (a caller's, or a parent run's effective ones): the
    /// run's are the agent's narrowed by it ([`crate::volume::narrow_volumes`]).
    pub volumes: Option<Vec<crate::volume::VolumeBinding>>,
    /// Compaction settings that replace the agent's (a caller's); for a sub-run whose agent
    /// has none, its parent's are passed as `inherited`.
    pub compaction: Option<weft_api::context::Compaction>,
    /// The parent's settings, taken when neither the caller nor the agent set any.
    pub inherited_compaction: Option<weft_api::context::Compaction>,
}

impl RunSpec {
    /// The spec of a run of agent `def` narrowed by `n`: the one rule for runs created over
    /// the API and for sub-runs. Narrowing never widens: tools, hosts, channels and iterations
    /// can only shrink; `memory_scopes` and `skills` are the agent's own.
    pub fn resolve(def: &AgentContent, n: Narrowing) -> RunSpec {
        let tools = match &n.tools {
            None => def.tools.clone(),
            Some(asked) => def
                .tools
                .iter()
                .filter(|t| asked.contains(t))
                .cloned()
                .collect(),
        };
        let mut sampling = def.sampling.clone();
        if let Some(s) = n.sampling {
            sampling.temperature = s.temperature.or(sampling.temperature);
            sampling.top_p = s.top_p.or(sampling.top_p);
            sampling.seed = s.seed.or(sampling.seed);
            if !s.stop.is_empty() {
                sampling.stop = s.stop;
            }
        }
        let channels = match &n.channels {
            None => def.channels.clone(),
            Some(outer) => crate::acl::intersect_channels(outer, &def.channels),
        };
        RunSpec {
            model: def.model_ref(),
            tools,
            allowed_hosts: def.allowed_hosts.clone(),
            caller_allowed_hosts: n.allowed_hosts,
            sampling,
            max_iterations: n
                .max_iterations
                .map_or(def.max_iterations, |m| m.min(def.max_iterations)),
            max_tokens: def.max_tokens,
            max_concurrent_children: def.max_concurrent_children,
            metadata: n.metadata,
            memory_scopes: def.memory_scopes.clone(),
            channels,
            skills: def.skills.clone(),
            credentials: Vec::new(),
            volumes: crate::volume::narrow_volumes(&def.volumes, n.volumes.as_deref()),
            plan: None,
            response_format: None,
            compaction: n
                .compaction
                .or_else(|| def.compaction.clone())
                .or(n.inherited_compaction),
            max_wall_s: def.code.as_ref().map(weft_api::code::CodeAgent::max_wall_s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_names_round_trip() {
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()), Some(*s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(*k));
        }
        assert_eq!(StopReason::Cancelled.final_status(), RunStatus::Cancelled);
    }

    /// The stored JSON of each event is what the untyped code wrote before (API.md's shapes).
    #[test]
    fn events_keep_their_wire_shape() {
        let id = RunId::new();
        let cases = [
            (
                RunEvent::RunStarted(RunStarted {
                    agent: "a".into(),
                    agent_hash: "sha256:x".into(),
                    model: "m".into(),
                    interactive: Some(false),
                    tools: Some(vec!["HTTP".into()]),
                    ..RunStarted::default()
                }),
                "run_started",
                json!({"agent": "a", "agent_hash": "sha256:x", "model": "m", "interactive": false, "tools": ["HTTP"]}),
            ),
            (
                RunEvent::RunStarted(RunStarted {
                    agent: "a".into(),
                    agent_hash: "h".into(),
                    model: "m".into(),
                    parent_run_id: Some(id),
                    depth: Some(1),
                    ..RunStarted::default()
                }),
                "run_started",
                json!({"agent": "a", "agent_hash": "h", "model": "m", "parent_run_id": id, "depth": 1}),
            ),
            (
                RunEvent::ToolResult(ToolResultEvent {
                    tool_use_id: "t".into(),
                    name: "HTTP".into(),
                    content: "ok".into(),
                    is_error: false,
                    reused: true,
                }),
                "tool_result",
                json!({"tool_use_id": "t", "name": "HTTP", "content": "ok", "is_error": false, "reused": true}),
            ),
            (
                RunEvent::AwaitingInput(AwaitingInput {
                    reason: "end_turn".into(),
                    interrupt: None,
                    executor: "e".into(),
                }),
                "awaiting_input",
                json!({"reason": "end_turn", "interrupt": null, "executor": "e"}),
            ),
            (
                RunEvent::UserInput(UserInput::text("hi")),
                "user_input",
                json!({"text": "hi"}),
            ),
            (
                RunEvent::SubRunFinished(SubRunFinished {
                    run_id: id,
                    status: RunStatus::Failed,
                    stop_reason: None,
                }),
                "sub_run_finished",
                json!({"run_id": id, "status": "failed", "stop_reason": null}),
            ),
            (
                RunEvent::RunFinished(RunFinished {
                    status: RunStatus::Succeeded,
                    stop_reason: StopReason::EndTurn,
                    usage: json!({"total_tokens": 1}),
                    iterations: Some(2),
                    executor: Some("e".into()),
                    reason: None,
                }),
                "run_finished",
                json!({"status": "succeeded", "stop_reason": "end_turn", "usage": {"total_tokens": 1}, "iterations": 2, "executor": "e"}),
            ),
            (
                RunEvent::Usage(Usage {
                    prompt_tokens: 3,
                    completion_tokens: 2,
                    total_tokens: 5,
                    ..Usage::default()
                }),
                "usage",
                json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
            ),
            (
                RunEvent::ChannelPublish(ChannelPublish {
                    tool_use_id: "t".into(),
                    channel: "a.b".into(),
                    seq: 7,
                    payload: None,
                }),
                "channel_publish",
                json!({"tool_use_id": "t", "channel": "a.b", "seq": 7}),
            ),
            (
                RunEvent::FileChanged(FileChanged {
                    volume: "run".into(),
                    tool_use_id: "t".into(),
                    change_id: "c".into(),
                    files: vec![ChangedFile {
                        path: "a.txt".into(),
                        before_sha: None,
                        after_sha: Some("ab".into()),
                        diff: "+x".into(),
                    }],
                }),
                "file_changed",
                json!({"volume": "run", "tool_use_id": "t", "change_id": "c", "files": [
                    {"path": "a.txt", "before_sha": null, "after_sha": "ab", "diff": "+x"}
                ]}),
            ),
        ];
        for (ev, kind, data) in cases {
            assert_eq!(ev.kind().as_str(), kind);
            assert_eq!(ev.data(), data, "{kind}");
            assert_eq!(RunEvent::parse(kind, &data), Some(ev.clone()), "{kind}");
            // Serde's tagged form agrees with the stored pair.
            assert_eq!(
                serde_json::to_value(&ev).unwrap(),
                json!({"kind": kind, "data": data})
            );
        }
    }

    #[test]
    fn unknown_or_malformed_events_do_not_parse() {
        assert_eq!(RunEvent::parse("no_such_kind", &json!({})), None);
        assert_eq!(
            RunEvent::parse("tool_result", &json!({"content": "x"})),
            None
        );
        assert_eq!(RunEvent::parse("assistant_message", &json!(null)), None);
        // The store's own `run_finished` (a run cancelled while unheld) reads.
        let stored =
            json!({"status": "cancelled", "stop_reason": "cancelled", "reason": null, "usage": {}});
        assert!(matches!(
            RunEvent::parse("run_finished", &stored),
            Some(RunEvent::RunFinished(_))
        ));
    }

    #[test]
    fn an_old_spec_loads_with_the_new_fields_empty() {
        let old = json!({"model": "m", "tools": ["Context"], "max_iterations": 3});
        let spec: RunSpec = serde_json::from_value(old).unwrap();
        assert_eq!(spec.tools, vec!["Context".to_owned()]);
        assert!(spec.memory_scopes.is_empty() && spec.skills.is_empty());
        assert_eq!(spec.channels, AgentChannels::default());
    }

    #[test]
    fn resolve_narrows_and_never_widens() {
        let def = AgentContent {
            tools: vec!["Context".into(), "HTTP".into()],
            max_iterations: 5,
            memory_scopes: vec!["user".into()],
            skills: vec!["s".into()],
            channels: AgentChannels {
                publish: vec!["a.*".into()],
                subscribe: vec!["x".into(), "y.*".into()],
            },
            ..AgentContent::default()
        };
        let root = RunSpec::resolve(&def, Narrowing::default());
        assert_eq!(root.tools, def.tools);
        assert_eq!(root.channels, def.channels);
        assert_eq!(root.memory_scopes, def.memory_scopes);
        assert_eq!(root.skills, def.skills);
        assert_eq!(root.max_iterations, 5);
        let narrowed = RunSpec::resolve(
            &def,
            Narrowing {
                tools: Some(vec!["HTTP".into(), "Agent".into()]),
                max_iterations: Some(50),
                allowed_hosts: Some(vec![]),
                channels: Some(AgentChannels {
                    publish: vec!["a.b.*".into()],
                    subscribe: vec!["y.z".into()],
                }),
                ..Narrowing::default()
            },
        );
        assert_eq!(narrowed.tools, vec!["HTTP".to_owned()]);
        assert_eq!(narrowed.max_iterations, 5);
        assert_eq!(narrowed.caller_allowed_hosts, Some(vec![]));
        assert_eq!(narrowed.channels.publish, vec!["a.b.*".to_owned()]);
        assert_eq!(narrowed.channels.subscribe, vec!["y.z".to_owned()]);
    }
}
