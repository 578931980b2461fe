//! `/v1/processes…`: processes, the eight definition routes ([`crate::defs`]) over
//! [`ProcessContent`].
//!
//! A process is a versioned recipe for plan runs (docs/harness.md, "Processes"): a persona, phases
//! with dependencies, deliverables and checks, how binding the phases are ([`PhaseMode`]),
//! verification defaults, required and excluded tools, limits, and test cases that
//! `weft process test <name>` runs. A plan run names one with `plan.process`.
//!
//! The content types live here once (serde, JSON Schema); weft-core (`weft_core::process`)
//! validates them and stores them as a definition kind.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::defs::{DefContentSchema, def_ops};
use crate::op::Op;
use crate::plans::{Check, PhaseMode, PlanLimits, Task, VerifyMode};

/// A process's content (hashed into its version; every field present in the canonical JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[schemars(transform = required)]
#[schemars(extend("example" = {
    "description": "Turn a CSV into a checked report",
    "persona": "You are a careful analyst. Cite the numbers you use.",
    "phase_mode": "strict",
    "phases": [
        {"id": "load", "description": "Summarise data.csv into summary.json", "deliverables": ["summary.json"],
         "checks": [{"check": "parses", "path": "summary.json", "format": "json"}]},
        {"id": "report", "description": "Write report.md from summary.json", "depends_on": ["load"],
         "deliverables": ["report.md"], "acceptance": "names the three largest regions", "verify": "llm", "final": true}
    ],
    "verification": {"default_verify": "checks"},
    "tools": {"required": ["Write"], "excluded": ["HTTP"]},
    "limits": {"max_attempts": 2},
    "tests": [{"name": "smoke", "input": "Report on data.csv", "expect": {"status": "succeeded", "passed": ["load", "report"]}}]
}))]
pub struct ProcessContent {
    /// what the process is for, shown in listings
    #[schemars(length(min = 1, max = 4096))]
    pub description: String,
    /// text put before the planner's message and each task attempt's (a role, house rules)
    #[schemars(length(max = 20000))]
    pub persona: String,
    /// how binding the phases are (default `strict`)
    pub phase_mode: PhaseMode,
    /// the phases, a plan's tasks in all but name
    #[schemars(length(min = 1, max = 100))]
    pub phases: Vec<Phase>,
    #[schemars(transform = crate::defs::no_default)]
    pub verification: Verification,
    #[schemars(transform = crate::defs::no_default)]
    pub tools: ProcessTools,
    /// the plan run's budgets; a field left out keeps the plan default, and a caller's `limits`
    /// may only narrow them
    #[schemars(transform = crate::defs::no_default)]
    pub limits: ProcessLimits,
    /// the cases `weft process test` runs
    #[schemars(length(max = 20))]
    pub tests: Vec<ProcessTest>,
}

crate::objects_only!(ProcessContent);

/// `description` and `phases` have no default worth having: a put must give them.
fn required(s: &mut schemars::Schema) {
    crate::defs::require(s, &["description", "phases"]);
}

/// One phase of a process: a plan task whose deliverables are files it must write.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct Phase {
    /// unique in the process: 1-64 characters of a-z, A-Z, 0-9, `_`, `-` and `.`; the task id
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"))]
    pub id: String,
    /// what to do, for the agent doing it
    #[schemars(length(min = 1, max = 20000))]
    pub description: String,
    /// phases that must pass first
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// files the phase writes (relative paths, no globs): each becomes a write of the task and
    /// an `exists` check
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub deliverables: Vec<String>,
    /// checks run without a model, besides the deliverables' `exists`
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub checks: Vec<Check>,
    /// what a verifier holds the result to
    #[serde(default)]
    #[schemars(length(max = 20000))]
    pub acceptance: String,
    /// how the result is verified (default: `verification.default_verify`, else `checks`)
    #[serde(default)]
    pub verify: Option<VerifyMode>,
    /// out of attempts, it replans the run (or fails it)
    #[serde(default)]
    pub critical: bool,
    /// the last phase: runs after every other has ended, and nothing may depend on it
    #[serde(default)]
    pub r#final: bool,
    /// the agent that does it (default: the run's agent)
    #[serde(default)]
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$"))]
    pub agent: Option<String>,
}

crate::objects_only!(Phase);

/// A process's verification defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[schemars(inline)]
pub struct Verification {
    /// the `verify` of a phase that gives none (default `checks`)
    pub default_verify: Option<VerifyMode>,
    /// verifiers in a vote (3-7; default 3)
    #[schemars(range(min = 3, max = 7))]
    pub votes: Option<u32>,
}

crate::objects_only!(Verification);

/// The tools of a process's plan runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[schemars(inline)]
pub struct ProcessTools {
    /// tools the run's agent and every phase's agent must have (a run without them is a 400)
    #[schemars(length(max = 64), inner(length(min = 1, max = 200), regex(pattern = r"^[A-Za-z0-9_*-]+$")), extend("uniqueItems" = true))]
    pub required: Vec<String>,
    /// tools (names or `*` globs) taken from every task attempt's sub-run
    #[schemars(length(max = 64), inner(length(min = 1, max = 200), regex(pattern = r"^[A-Za-z0-9_*-]+$")), extend("uniqueItems" = true))]
    pub excluded: Vec<String>,
}

crate::objects_only!(ProcessTools);

/// A process's plan limits: [`PlanLimits`] with every field optional (left out = the plan
/// default).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[schemars(inline)]
pub struct ProcessLimits {
    #[schemars(range(min = 1, max = 100))]
    pub max_tasks: Option<u32>,
    #[schemars(range(min = 1, max = 16))]
    pub max_parallel: Option<u32>,
    #[schemars(range(min = 1, max = 10))]
    pub max_attempts: Option<u32>,
    #[schemars(range(min = 0, max = 10))]
    pub max_replans: Option<u32>,
    /// 0 = no limit
    #[schemars(range(min = 0))]
    pub max_tokens: Option<u64>,
    /// 0 = no limit
    #[schemars(range(min = 0, max = 604_800))]
    pub max_wall_s: Option<u64>,
}

crate::objects_only!(ProcessLimits);

impl ProcessLimits {
    /// These limits over the plan defaults: each field left out is the default's.
    pub fn or_defaults(&self) -> PlanLimits {
        let d = PlanLimits::default();
        PlanLimits {
            max_tasks: self.max_tasks.unwrap_or(d.max_tasks),
            max_parallel: self.max_parallel.unwrap_or(d.max_parallel),
            max_attempts: self.max_attempts.unwrap_or(d.max_attempts),
            max_replans: self.max_replans.unwrap_or(d.max_replans),
            max_tokens: self.max_tokens.unwrap_or(d.max_tokens),
            max_wall_s: self.max_wall_s.unwrap_or(d.max_wall_s),
        }
    }
}

/// One test case of a process: a plan run of it with `input` as the goal, and what must come
/// of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct ProcessTest {
    /// unique in the process: 1-64 characters of a-z, A-Z, 0-9, `_`, `-` and `.`
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"))]
    pub name: String,
    /// the run's goal
    #[schemars(length(min = 1, max = 20000))]
    pub input: String,
    #[serde(default)]
    pub expect: Expectation,
}

crate::objects_only!(ProcessTest);

/// What a test case expects of its run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[schemars(inline)]
pub struct Expectation {
    /// how the run ends (default `succeeded`)
    pub status: ExpectedStatus,
    /// phases that must have passed
    pub passed: Vec<String>,
}

crate::objects_only!(Expectation);

/// How a test case's run must end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum ExpectedStatus {
    #[default]
    Succeeded,
    Failed,
}

impl ExpectedStatus {
    /// The run status it names: `succeeded` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExpectedStatus::Succeeded => "succeeded",
            ExpectedStatus::Failed => "failed",
        }
    }
}

impl ProcessContent {
    /// The phases as a plan's tasks, in order: each phase's fields carried over, its
    /// deliverables as its `writes` and as an `exists` check each (before its own checks, unless
    /// it gives that very check), `verify` defaulted from `verification.default_verify` (else
    /// `checks`), and `votes` from `verification.votes` for a phase verified by `vote`. This is
    /// the plan a `strict` process runs, and the outline a `guided` or `suggestive` one gives
    /// its planner.
    pub fn tasks(&self) -> Vec<Task> {
        self.phases
            .iter()
            .map(|ph| {
                let mut checks: Vec<Check> = ph
                    .deliverables
                    .iter()
                    .map(|path| Check::Exists { path: path.clone() })
                    .filter(|c| !ph.checks.contains(c))
                    .collect();
                checks.extend(ph.checks.iter().cloned());
                let verify = ph
                    .verify
                    .or(self.verification.default_verify)
                    .unwrap_or_default();
                Task {
                    id: ph.id.clone(),
                    description: ph.description.clone(),
                    depends_on: ph.depends_on.clone(),
                    agent: ph.agent.clone(),
                    writes: ph.deliverables.clone(),
                    checks,
                    acceptance: ph.acceptance.clone(),
                    verify,
                    votes: (verify == VerifyMode::Vote)
                        .then_some(self.verification.votes)
                        .flatten(),
                    critical: ph.critical,
                    r#final: ph.r#final,
                }
            })
            .collect()
    }
}

impl DefContentSchema for ProcessContent {
    const NAME: &'static str = "Process";
}

pub fn ops() -> Vec<Op> {
    def_ops::<ProcessContent>(&crate::def_texts!(
        path: "/v1/processes", tag: "processes", example: "csv-report",
        plural: "processes", a: "a process", noun: "process", put_a: "a process",
        put_description: "Scope: tenant:admin or admin. The body is the content fields: `description` and `phases` are required; the phases must form a valid plan (every error is listed). The same content returns the existing version (200, created=false) and makes it active; new content becomes the next version (201) with the previously active version as parent. A retired name is un-retired.",
        retire: "Retire a process (it stays readable; plan runs can no longer name it)",
    ))
}
