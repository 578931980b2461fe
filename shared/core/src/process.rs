//! Processes (docs/harness.md, "Processes"): the `process` definition kind, a versioned recipe
//! for plan runs — a persona, phases with dependencies, deliverables and checks, how binding the
//! phases are ([`PhaseMode`]), verification defaults, required and excluded tools, limits and
//! test cases. The content types are the contract's ([`weft_api::processes`]); this module
//! validates them (every error at once, as the plan validator does), stores them as a
//! [`DefContent`], and holds the rules a plan run of a process follows: its limits under a
//! caller's ([`merge_limits`]) and what a planner's plan must keep of the phases
//! ([`phase_errors`]).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::Error;
use crate::def::{DefContent, DefKind};
use crate::plan::{PlanLimits, Task};

pub use weft_api::plans::PhaseMode;
pub use weft_api::processes::{
    Expectation, ExpectedStatus, Phase, ProcessContent, ProcessLimits, ProcessTest, ProcessTools,
    Verification,
};

/// Bounds enforced by [`validate`].
pub mod limits {
    /// `description`: required, at most this many bytes.
    pub const DESCRIPTION_BYTES: usize = 4096;
    /// `persona`, a phase's `description` and `acceptance`, a test's `input`.
    pub const TEXT_BYTES: usize = 20_000;
    /// A phase's deliverables and checks together (a task's `checks` bound).
    pub const PHASE_CHECKS: usize = 32;
    /// Entries of `tools.required` and of `tools.excluded`.
    pub const TOOLS: usize = 64;
    /// A tool name or glob.
    pub const TOOL_BYTES: usize = 200;
    /// Entries of `tests`.
    pub const TESTS: usize = 20;
}

impl DefContent for ProcessContent {
    const KIND: DefKind = DefKind::Process;

    fn from_json(value: Value) -> Result<Self, Error> {
        crate::def::from_json_fields("a process", value)
    }

    fn validate(&self) -> Result<(), Error> {
        validate(self)
    }

    fn description(&self) -> &str {
        &self.description
    }
}

/// Checks what types cannot, reporting every error at once (joined by `; `), each saying how
/// to fix it; `param` names the field of the first. The phases, converted by
/// [`ProcessContent::tasks`], must be a valid plan under the process's own limits
/// ([`crate::plan::validate`]).
pub fn validate(c: &ProcessContent) -> Result<(), Error> {
    // Stored text cannot hold U+0000.
    crate::storable::refuse_nul(c)?;
    let errors = errors(c);
    match errors.first() {
        None => Ok(()),
        Some((param, _)) => {
            let message = errors
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            Err(Error::invalid(message).with_param(param.clone()))
        }
    }
}

/// Every error of `c` as (field, message).
fn errors(c: &ProcessContent) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut err = |param: &str, message: String| out.push((param.to_owned(), message));
    if c.description.trim().is_empty() {
        err(
            "description",
            "`description` is empty; say in a sentence what the process is for".into(),
        );
    } else if c.description.len() > limits::DESCRIPTION_BYTES {
        err(
            "description",
            format!(
                "`description` is {} bytes; at most {} are allowed",
                c.description.len(),
                limits::DESCRIPTION_BYTES
            ),
        );
    }
    too_long(&mut err, "persona", &c.persona);
    limit_errors(&mut err, &c.limits);
    if let Some(v) = c.verification.votes
        && !(3..=7).contains(&v)
    {
        err(
            "verification.votes",
            format!("`verification.votes` must be between 3 and 7, got {v}"),
        );
    }
    tool_errors(&mut err, "tools.required", &c.tools.required);
    tool_errors(&mut err, "tools.excluded", &c.tools.excluded);
    for t in &c.tools.required {
        if c.tools
            .excluded
            .iter()
            .any(|x| crate::mcp::glob_matches(x, t))
        {
            err(
                "tools.excluded",
                format!(
                    "tool `{t}` is both required and excluded; take it out of one of `tools.required` and `tools.excluded`"
                ),
            );
        }
    }
    for (i, ph) in c.phases.iter().enumerate() {
        phase_field_errors(&mut err, i, ph);
    }
    if c.phases.is_empty() {
        err(
            "phases",
            "`phases` is empty; give at least one phase (`{\"id\", \"description\"}`)".into(),
        );
    } else {
        for e in crate::plan::validate(&c.tasks(), &c.limits.or_defaults()) {
            err("phases", format!("phases: {e}"));
        }
    }
    test_errors(&mut err, c);
    out
}

fn too_long(err: &mut impl FnMut(&str, String), field: &str, text: &str) {
    if text.len() > limits::TEXT_BYTES {
        err(
            field,
            format!(
                "`{field}` is {} bytes; at most {} are allowed",
                text.len(),
                limits::TEXT_BYTES
            ),
        );
    }
}

fn limit_errors(err: &mut impl FnMut(&str, String), l: &ProcessLimits) {
    let ranges: [(&str, Option<u64>, u64, u64); 5] = [
        ("max_tasks", l.max_tasks.map(u64::from), 1, 100),
        ("max_parallel", l.max_parallel.map(u64::from), 1, 16),
        ("max_attempts", l.max_attempts.map(u64::from), 1, 10),
        ("max_replans", l.max_replans.map(u64::from), 0, 10),
        ("max_wall_s", l.max_wall_s, 0, 604_800),
    ];
    for (name, value, min, max) in ranges {
        if let Some(v) = value
            && !(min..=max).contains(&v)
        {
            err(
                &format!("limits.{name}"),
                format!("`limits.{name}` must be between {min} and {max}, got {v}"),
            );
        }
    }
}

fn tool_errors(err: &mut impl FnMut(&str, String), field: &str, tools: &[String]) {
    if tools.len() > limits::TOOLS {
        err(
            field,
            format!(
                "`{field}` has {} entries; at most {} are allowed",
                tools.len(),
                limits::TOOLS
            ),
        );
    }
    let mut seen = BTreeSet::new();
    for (i, t) in tools.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let sane = !t.is_empty()
            && t.len() <= limits::TOOL_BYTES
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'*' | b'-'));
        if !sane {
            let shown: String = t.escape_default().to_string().chars().take(80).collect();
            err(
                &at,
                format!(
                    "`{at}`: `{shown}` is not a tool name (at most {} bytes); use a built-in's name (`Write`) or `mcp__<server>__<tool>`, `*` as a wildcard",
                    limits::TOOL_BYTES
                ),
            );
        } else if !seen.insert(t.as_str()) {
            err(field, format!("`{field}` lists `{t}` twice"));
        }
    }
}

fn phase_field_errors(err: &mut impl FnMut(&str, String), i: usize, ph: &Phase) {
    let at = |f: &str| format!("phases[{i}].{f}");
    too_long(err, &at("description"), &ph.description);
    too_long(err, &at("acceptance"), &ph.acceptance);
    if let Some(agent) = &ph.agent
        && !crate::names::is_def_name(agent)
    {
        err(
            &at("agent"),
            format!(
                "phase `{}`: agent `{}` is not an agent name; use 1-64 characters of a-z, 0-9, '_' and '-'",
                ph.id,
                agent.escape_default()
            ),
        );
    }
    let mut seen = BTreeSet::new();
    for d in &ph.deliverables {
        let relative = !d.is_empty()
            && !d.starts_with('/')
            && d.split('/').all(|s| !s.is_empty() && s != "." && s != "..");
        if !relative {
            err(
                &at("deliverables"),
                format!(
                    "phase `{}`: deliverable `{}` must be a relative file path without empty, `.` or `..` parts",
                    ph.id,
                    d.escape_default()
                ),
            );
        } else if d.contains(['*', '?', '[', '{']) {
            err(
                &at("deliverables"),
                format!(
                    "phase `{}`: deliverable `{d}` is a pattern; name one file (check patterns with a `matches` check instead)",
                    ph.id
                ),
            );
        }
        if !seen.insert(d.as_str()) {
            err(
                &at("deliverables"),
                format!("phase `{}` lists deliverable `{d}` twice", ph.id),
            );
        }
    }
    let checks = ph.deliverables.len() + ph.checks.len();
    if checks > limits::PHASE_CHECKS {
        err(
            &at("checks"),
            format!(
                "phase `{}` has {checks} deliverables and checks together; at most {} are allowed",
                ph.id,
                limits::PHASE_CHECKS
            ),
        );
    }
}

fn test_errors(err: &mut impl FnMut(&str, String), c: &ProcessContent) {
    if c.tests.len() > limits::TESTS {
        err(
            "tests",
            format!(
                "`tests` has {} cases; at most {} are allowed",
                c.tests.len(),
                limits::TESTS
            ),
        );
    }
    let phases: BTreeSet<&str> = c.phases.iter().map(|p| p.id.as_str()).collect();
    let mut names = BTreeSet::new();
    for (i, t) in c.tests.iter().enumerate() {
        let at = |f: &str| format!("tests[{i}].{f}");
        let mut chars = t.name.chars();
        let valid = t.name.len() <= 64
            && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            err(
                &at("name"),
                format!(
                    "test name `{}` is not 1-64 characters of a-z, A-Z, 0-9, `_`, `-` and `.` starting with a letter or digit",
                    t.name.escape_default()
                ),
            );
        } else if !names.insert(t.name.as_str()) {
            err(
                &at("name"),
                format!(
                    "test `{}` is named twice: test names must be unique",
                    t.name
                ),
            );
        }
        if t.input.trim().is_empty() {
            err(
                &at("input"),
                format!(
                    "test `{}` has no `input`; give the goal its plan run starts with",
                    t.name
                ),
            );
        }
        too_long(err, &at("input"), &t.input);
        let mut passed = BTreeSet::new();
        for id in &t.expect.passed {
            if !phases.contains(id.as_str()) {
                err(
                    &at("expect.passed"),
                    format!(
                        "test `{}` expects unknown phase `{id}` to pass; name phases of this process",
                        t.name
                    ),
                );
            } else if !passed.insert(id.as_str()) {
                err(
                    &at("expect.passed"),
                    format!("test `{}` lists phase `{id}` twice", t.name),
                );
            }
        }
    }
}

/// The limits of a plan run of a process whose limits are `process`, asked for by a caller with
/// `caller`: each limit the caller left at its default takes the process's (or stays the
/// default when the process sets none), and a limit the caller set can only narrow the
/// process's: the smaller of the two, where 0 `max_tokens` or `max_wall_s` is no limit.
///
/// A caller's limit equal to its default counts as left out: the body does not tell them apart.
pub fn merge_limits(caller: &PlanLimits, process: &ProcessLimits) -> PlanLimits {
    let d = PlanLimits::default();
    let narrow = |c: u32, dc: u32, p: Option<u32>| match p {
        None => c,
        Some(p) if c == dc => p,
        Some(p) => c.min(p),
    };
    // 0 is no limit: the narrower of two is the non-zero smaller one.
    let narrow_unbounded = |c: u64, dc: u64, p: Option<u64>| match p {
        None => c,
        Some(p) if c == dc => p,
        Some(0) => c,
        Some(p) if c == 0 => p,
        Some(p) => c.min(p),
    };
    PlanLimits {
        max_tasks: narrow(caller.max_tasks, d.max_tasks, process.max_tasks),
        max_parallel: narrow(caller.max_parallel, d.max_parallel, process.max_parallel),
        max_attempts: narrow(caller.max_attempts, d.max_attempts, process.max_attempts),
        max_replans: narrow(caller.max_replans, d.max_replans, process.max_replans),
        max_tokens: narrow_unbounded(caller.max_tokens, d.max_tokens, process.max_tokens),
        max_wall_s: narrow_unbounded(caller.max_wall_s, d.max_wall_s, process.max_wall_s),
    }
}

/// Every way `plan` (a planner's, a replanner's or a person's plan of a `guided` process run,
/// or a replan of a `strict` one) departs from the process's `phases` (as
/// [`ProcessContent::tasks`] made them): each phase must be a task of the plan, with the same
/// description, at least the phase's dependencies and checks, its writes, and the same
/// `verify`, `votes`, `critical`, `final` and `agent`. Tasks besides the phases are allowed.
/// Empty when the plan keeps every phase.
pub fn phase_errors(phases: &[Task], plan: &[Task]) -> Vec<String> {
    let mut errors = Vec::new();
    for ph in phases {
        let Some(t) = plan.iter().find(|t| t.id == ph.id) else {
            errors.push(format!(
                "the plan drops phase `{}`: keep every phase of the process as a task with its id",
                ph.id
            ));
            continue;
        };
        let mut differs = Vec::new();
        if t.description != ph.description {
            differs.push("its description");
        }
        if !ph.depends_on.iter().all(|d| t.depends_on.contains(d)) {
            differs.push("a dependency");
        }
        if !ph.checks.iter().all(|c| t.checks.contains(c)) {
            differs.push("a check");
        }
        if !ph.writes.iter().all(|w| t.writes.contains(w)) {
            differs.push("a write");
        }
        if t.verify != ph.verify || t.votes != ph.votes {
            differs.push("its verification");
        }
        if t.critical != ph.critical {
            differs.push("`critical`");
        }
        if t.r#final != ph.r#final {
            differs.push("`final`");
        }
        if t.agent != ph.agent {
            differs.push("its agent");
        }
        if !differs.is_empty() {
            errors.push(format!(
                "the plan changes phase `{}` ({}): keep a phase's description, dependencies, checks, writes, verification, `critical`, `final` and agent as the process gives them, and add tasks around it instead",
                ph.id,
                differs.join(", ")
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::{Check, VerifyMode};

    fn process(v: Value) -> ProcessContent {
        ProcessContent::from_json(v).unwrap()
    }

    fn two_phases() -> Value {
        json!({
            "description": "a report",
            "phases": [
                {"id": "load", "description": "load it", "deliverables": ["data/summary.json"],
                 "checks": [{"check": "parses", "path": "data/summary.json", "format": "json"}]},
                {"id": "report", "description": "write it", "depends_on": ["load"],
                 "deliverables": ["report.md"], "checks": [{"check": "exists", "path": "report.md"}],
                 "verify": "vote", "acceptance": "names three regions", "final": true}
            ],
            "verification": {"default_verify": "llm", "votes": 5},
            "tests": [{"name": "smoke", "input": "go", "expect": {"passed": ["load"]}}]
        })
    }

    #[test]
    fn phases_become_tasks_with_deliverables_as_writes_and_exists_checks() {
        let p = process(two_phases());
        validate(&p).unwrap();
        let tasks = p.tasks();
        assert_eq!(tasks.len(), 2);
        let load = &tasks[0];
        assert_eq!(load.id, "load");
        assert_eq!(load.writes, vec!["data/summary.json"]);
        assert_eq!(
            load.checks,
            vec![
                Check::Exists {
                    path: "data/summary.json".into()
                },
                Check::Parses {
                    path: "data/summary.json".into(),
                    format: crate::plan::Format::Json
                },
            ]
        );
        // The default verification applies to a phase that gives none; votes only to a vote.
        assert_eq!((load.verify, load.votes), (VerifyMode::Llm, None));
        let report = &tasks[1];
        assert_eq!(report.depends_on, vec!["load"]);
        // A deliverable whose `exists` check the phase already gives is checked once.
        assert_eq!(
            report.checks,
            vec![Check::Exists {
                path: "report.md".into()
            }]
        );
        assert_eq!((report.verify, report.votes), (VerifyMode::Vote, Some(5)));
        assert!(report.r#final && !report.critical);
        assert_eq!(report.acceptance, "names three regions");
        // Without verification defaults a phase is verified by its checks.
        let mut bare = p.clone();
        bare.verification = Verification::default();
        assert_eq!(bare.tasks()[0].verify, VerifyMode::Checks);
    }

    #[test]
    fn every_error_is_reported_at_once() {
        let p = process(json!({
            "description": "",
            "phases": [
                {"id": "a", "description": "x", "depends_on": ["b"], "deliverables": ["/abs", "*.md"]},
                {"id": "b", "description": "y", "depends_on": ["a"], "agent": "Bad Agent"},
                {"id": "b", "description": ""}
            ],
            "tools": {"required": ["Write", "bad tool"], "excluded": ["Wr*"]},
            "limits": {"max_attempts": 0},
            "verification": {"votes": 9},
            "tests": [
                {"name": "t", "input": " ", "expect": {"passed": ["zz"]}},
                {"name": "t", "input": "go"}
            ]
        }));
        let e = validate(&p).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("description"), "{}", e.message);
        for says in [
            "`description` is empty",
            "`limits.max_attempts` must be between 1 and 10, got 0",
            "`verification.votes` must be between 3 and 7, got 9",
            "`bad tool` is not a tool name",
            "tool `Write` is both required and excluded",
            "agent `Bad Agent` is not an agent name",
            "deliverable `/abs` must be a relative file path",
            "deliverable `*.md` is a pattern",
            "phases: task id `b` is used twice",
            "phases: task `b` has no description",
            "phases: the dependencies form a cycle: a -> b -> a; break it",
            "test `t` has no `input`",
            "test `t` expects unknown phase `zz` to pass",
            "test `t` is named twice",
        ] {
            assert!(e.message.contains(says), "{says:?} not in {}", e.message);
        }
    }

    #[test]
    fn a_process_needs_phases_within_its_own_limits() {
        let e = validate(&process(json!({"description": "d"}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("phases"));
        assert!(e.message.contains("`phases` is empty"), "{}", e.message);
        let mut v = two_phases();
        v["limits"] = json!({"max_tasks": 1});
        let e = validate(&process(v)).unwrap_err();
        assert!(
            e.message
                .contains("phases: the plan has 2 tasks, more than `max_tasks` (1)"),
            "{}",
            e.message
        );
        // Unknown fields are refused, naming the path.
        let e = ProcessContent::from_json(json!({"description": "d", "phases": [{"id": "a", "description": "x", "deliverable": []}]}))
            .unwrap_err();
        assert!(e.message.contains("deliverable"), "{}", e.message);
        assert!(
            e.param
                .as_deref()
                .is_some_and(|p| p.starts_with("phases[0]")),
            "{:?}: {}",
            e.param,
            e.message
        );
    }

    #[test]
    fn the_hash_covers_every_field_with_defaults() {
        let a = process(json!({"description": "d", "phases": [{"id": "a", "description": "x"}]}));
        let b = process(json!({
            "phases": [{"description": "x", "id": "a", "depends_on": [], "verify": null}],
            "description": "d", "phase_mode": "strict", "persona": "", "tests": []
        }));
        assert_eq!(a.hash(), b.hash());
        let text = a.canonical_json();
        for field in [
            "\"persona\":\"\"",
            "\"phase_mode\":\"strict\"",
            "\"limits\":{",
            "\"tools\":{\"excluded\":[],\"required\":[]}",
        ] {
            assert!(text.contains(field), "{field} not in {text}");
        }
        let mut c = a.clone();
        c.phase_mode = PhaseMode::Guided;
        assert_ne!(a.hash(), c.hash());
        assert_eq!(ProcessContent::KIND.as_str(), "process");
        assert_eq!(ProcessContent::KIND.plural(), "processes");
    }

    #[test]
    fn a_caller_narrows_the_process_limits_and_never_widens_them() {
        let process = ProcessLimits {
            max_tasks: Some(40),
            max_attempts: Some(2),
            max_tokens: Some(10_000),
            max_wall_s: Some(0),
            ..ProcessLimits::default()
        };
        // Left at the defaults: the process's, else the default.
        let l = merge_limits(&PlanLimits::default(), &process);
        assert_eq!(
            (l.max_tasks, l.max_attempts, l.max_parallel, l.max_tokens),
            (40, 2, 4, 10_000)
        );
        // Set: the narrower of the two (0 tokens or seconds is no limit).
        let caller = PlanLimits {
            max_tasks: 50,
            max_attempts: 1,
            max_parallel: 2,
            max_tokens: 50_000,
            max_wall_s: 60,
            ..PlanLimits::default()
        };
        let l = merge_limits(&caller, &process);
        assert_eq!(
            (
                l.max_tasks,
                l.max_attempts,
                l.max_parallel,
                l.max_tokens,
                l.max_wall_s
            ),
            (40, 1, 2, 10_000, 60)
        );
        let unbounded = ProcessLimits {
            max_tokens: Some(500),
            ..ProcessLimits::default()
        };
        let caller = PlanLimits {
            max_tokens: 100,
            ..PlanLimits::default()
        };
        assert_eq!(merge_limits(&caller, &unbounded).max_tokens, 100);
    }

    #[test]
    fn a_plan_must_keep_every_phase_and_may_add_tasks() {
        let phases = process(two_phases()).tasks();
        let mut plan = phases.clone();
        let mut extra = phases[0].clone();
        extra.id = "prepare".into();
        extra.depends_on.clear();
        plan.push(extra);
        plan[0].depends_on.push("prepare".into());
        plan[0].checks.push(Check::NonEmpty {
            path: "data/summary.json".into(),
        });
        assert!(phase_errors(&phases, &plan).is_empty());

        plan[1].checks.clear();
        plan[1].critical = true;
        let errors = phase_errors(&phases, &plan[1..]);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("drops phase `load`"), "{}", errors[0]);
        assert!(
            errors[1].contains("changes phase `report` (a check, `critical`)"),
            "{}",
            errors[1]
        );
    }
}
