//! The first messages of a plan run's role sub-runs: the planner, the replanner, a task's
//! attempt, and its verifier. What varies most (feedback on a previous try) comes first, the
//! goal last; a verifier sees the acceptance before the description.

use weft_core::plan::{
    CheckResult, PhaseMode, PlanLimits, PlanRejected, PlanSpec, Task, TaskState,
};

/// The JSON a plan is given as, for the planner and the replanner.
/// An example plan (concrete, so a small model copying it copies something valid): fields are
/// explained in [`PLAN_FIELDS`].
const PLAN_SHAPE: &str = r#"{"tasks": [{"id": "load", "description": "Read data.csv and write totals.json with the sum of each column", "depends_on": [], "writes": ["totals.json"], "checks": [{"check": "parses", "path": "totals.json", "format": "json"}], "acceptance": "totals.json holds one number per column of data.csv", "verify": "checks", "critical": true, "final": false}, {"id": "report", "description": "Write report.md naming the largest total in totals.json", "depends_on": ["load"], "writes": ["report.md"], "checks": [{"check": "non_empty", "path": "report.md"}], "acceptance": "report.md names the largest total", "verify": "llm", "critical": false, "final": true}]}"#;

const PLAN_FIELDS: &str = "id: short and unique; description: what to do, self-contained; depends_on: ids of this plan that must pass first; writes: globs of the files the task writes; checks: run on those files; acceptance: what a verifier holds the result to; critical: a failure replans the run; final: the last task";

const CHECK_KINDS: &str = "check kinds: exists {path}, non_empty {path}, parses {path, format: json|yaml|toml|csv}, matches {path, pattern}, not_matches {path, pattern}, json_eq {path, pointer, value}, sha256 {path, sha256}, no_placeholders {path}; verify: checks (checks only), llm (checks, then an independent verifier), vote (several verifiers)";

const VERDICT_SHAPE: &str = r#"{"verdict": "pass|fail|inconclusive", "reason_code": "ok|missing|incomplete|incorrect|check_failed|placeholder|off_task|cannot_verify|other", "confidence": 0.9, "issues": [{"path": "file", "check": "name", "message": "what is wrong"}], "missing": ["what is missing"], "feedback": "what the next attempt must do differently"}"#;

fn rejection(r: Option<&PlanRejected>) -> String {
    match r {
        None => String::new(),
        Some(r) => format!(
            "Your previous plan was refused:\n- {}\nYour previous answer was:\n{}\n\nFix every error and answer again.\n\n",
            r.errors.join("\n- "),
            r.output
        ),
    }
}

/// What a process adds before a role's message: its persona, and (for the planner) its phases —
/// to keep (`guided`) or to follow as an outline (`suggestive`).
pub(crate) fn process_preamble(spec: &PlanSpec, with_phases: bool) -> String {
    let mut out = String::new();
    if let Some(p) = spec.persona.as_deref().filter(|p| !p.trim().is_empty()) {
        out.push_str(p.trim());
        out.push_str("\n\n");
    }
    if with_phases && let Some(phases) = spec.phases.as_ref().filter(|p| !p.is_empty()) {
        let rule = match spec.phase_mode.unwrap_or_default() {
            PhaseMode::Guided => {
                "Your plan must keep every one of these phases as a task, with its id, \
                 description, dependencies, checks and verification; you may add tasks"
            }
            _ => "Use these phases as an outline; you may depart from them",
        };
        out.push_str(&format!(
            "{rule}:\n{}\n\n",
            serde_json::to_string(phases).unwrap_or_default()
        ));
    }
    out
}

/// The planner's message.
pub(crate) fn planner(
    goal: &str,
    spec: &PlanSpec,
    limits: &PlanLimits,
    rejected: Option<&PlanRejected>,
) -> String {
    let preamble = process_preamble(spec, true);
    format!(
        "{}{preamble}You are the planner of a plan run. Break the goal below into at most {} tasks with \
         dependencies; tasks that do not depend on each other run in parallel, and every result is \
         checked by something other than the agent that did it, so give each task checks on the \
         files it writes and an acceptance a verifier can judge.\nAnswer with JSON only, in this \
         shape (an example of two tasks; write your own):\n{PLAN_SHAPE}\n({PLAN_FIELDS}; {CHECK_KINDS})\n\nThe goal:\n{goal}",
        rejection(rejected),
        limits.max_tasks,
    )
}

/// The replanner's message: why, the plan with each task's state, the rules.
pub(crate) fn replanner(
    goal: &str,
    reason: &str,
    version: u32,
    tasks: &[Task],
    state: &std::collections::BTreeMap<String, TaskState>,
    rejected: Option<&PlanRejected>,
) -> String {
    let current: Vec<serde_json::Value> = tasks
        .iter()
        .map(|t| {
            let s = state.get(&t.id).cloned().unwrap_or_default();
            let feedback = s
                .verdict
                .as_ref()
                .map(|v| v.feedback.clone())
                .unwrap_or_default();
            serde_json::json!({
                "task": t,
                "status": s.status,
                "attempts": s.attempt,
                "last_feedback": feedback,
            })
        })
        .collect();
    format!(
        "{}You are the replanner of a plan run: {reason}. Write the whole plan again so the goal \
         can still be reached. Rules: keep every task id; leave tasks that passed or were skipped \
         exactly as they are; change failed and pending tasks as needed and add new ones.\nThe \
         plan (version {version}) with each task's state, on one line:\n{}\nAnswer with JSON \
         only, in this shape (an example; write the whole plan):\n{PLAN_SHAPE}\n({PLAN_FIELDS}; {CHECK_KINDS})\n\nThe goal:\n{goal}",
        rejection(rejected),
        serde_json::Value::Array(current),
    )
}

/// The message of a task's attempt.
pub(crate) fn attempt(goal: &str, spec: &PlanSpec, task: &Task, feedback: &str) -> String {
    let mut out = String::new();
    if !feedback.trim().is_empty() {
        out.push_str(
            "Your previous attempt at this task did not pass verification. What to fix:\n",
        );
        out.push_str(feedback.trim());
        out.push_str("\n\n");
    }
    out.push_str(&process_preamble(spec, false));
    out.push_str(&format!(
        "You are doing one task of a larger plan.\nTask `{}`: {}\n",
        task.id, task.description
    ));
    if !task.acceptance.trim().is_empty() {
        out.push_str(&format!("Acceptance: {}\n", task.acceptance.trim()));
    }
    if !task.writes.is_empty() {
        out.push_str(&format!(
            "Files this task writes: {}\n",
            task.writes.join(", ")
        ));
    }
    if !task.checks.is_empty() {
        out.push_str(&format!(
            "Checks that will be run on the files: {}\n",
            serde_json::to_string(&task.checks).unwrap_or_default()
        ));
    }
    out.push_str("When you are done, answer with a short summary of what you did.\n\nThe plan's goal, for context:\n");
    out.push_str(goal);
    out
}

/// The verifier's message.
pub(crate) fn verifier(
    goal: &str,
    task: &Task,
    output: &str,
    checks: &[CheckResult],
    unreadable: Option<(&str, &str)>,
) -> String {
    let mut out = String::new();
    if let Some((error, previous)) = unreadable {
        out.push_str(&format!(
            "Your previous answer could not be read as a verdict ({error}). It was:\n{previous}\n\n"
        ));
    }
    out.push_str("The answer of the agent that did the task:\n");
    out.push_str(if output.trim().is_empty() {
        "(none)"
    } else {
        output
    });
    out.push_str(&format!(
        "\n\nYou verify one task of a plan, independently of the agent that did it. You may read \
         the files; you cannot change them.\nAcceptance: {}\nTask `{}`: {}\n",
        if task.acceptance.trim().is_empty() {
            "the task is done as described"
        } else {
            task.acceptance.trim()
        },
        task.id,
        task.description
    ));
    if !checks.is_empty() {
        out.push_str(&format!(
            "Checks without a model (all passed): {}\n",
            serde_json::to_string(checks).unwrap_or_default()
        ));
    }
    out.push_str(&format!(
        "Answer with JSON only, in exactly this shape:\n{VERDICT_SHAPE}\n`inconclusive` is never \
         a pass.\n\nThe plan's goal, for context:\n{goal}"
    ));
    out
}

#[cfg(test)]
mod tests {
    use weft_core::plan::{PlanLimits, parse::parse_plan, validate};

    use super::PLAN_SHAPE;

    #[test]
    fn the_example_plan_is_a_valid_plan() {
        // A small model copies the example; what it copies must at least be valid.
        let tasks = parse_plan(PLAN_SHAPE).unwrap();
        assert_eq!(
            validate(&tasks, &PlanLimits::default()),
            Vec::<String>::new()
        );
    }
}
