//! The plan validator: every error of a plan at once, each saying how to fix it, so a planner
//! given them back can fix all in one try.

use std::collections::{BTreeMap, BTreeSet};

use weft_api::plans::{Check, PlanLimits, Task, TaskStatus};

use super::checks;
use super::state::TaskState;

/// Every error of `tasks` as a plan under `limits` (empty = valid): ids unique and well formed,
/// dependencies known and acyclic (a cycle is named), nothing depending on the `final` task
/// (of which there is at most one), each task's fields in bounds.
pub fn validate(tasks: &[Task], limits: &PlanLimits) -> Vec<String> {
    let mut errors = Vec::new();
    if tasks.is_empty() {
        errors.push("the plan has no tasks: give at least one".to_owned());
        return errors;
    }
    // Nothing more is looked at in a plan past its cap: every check below is bounded by it.
    let cap = limits.max_tasks.min(MAX_TASKS) as usize;
    if tasks.len() > cap {
        errors.push(format!(
            "the plan has {} tasks, more than `max_tasks` ({cap}): merge some",
            tasks.len(),
        ));
        return errors;
    }
    let mut seen = BTreeSet::new();
    for t in tasks {
        if !valid_id(&t.id) {
            errors.push(format!(
                "task id `{}` is not 1-64 characters of a-z, A-Z, 0-9, `_`, `-` and `.` starting with a letter or digit",
                t.id
            ));
        }
        if !seen.insert(t.id.as_str()) {
            errors.push(format!(
                "task id `{}` is used twice: ids must be unique",
                t.id
            ));
        }
        if t.description.trim().is_empty() {
            errors.push(format!("task `{}` has no description", t.id));
        }
        if let Some(v) = t.votes
            && !(3..=7).contains(&v)
        {
            errors.push(format!(
                "task `{}`: `votes` must be between 3 and 7, got {v}",
                t.id
            ));
        }
        for c in &t.checks {
            if let Some(e) = check_error(c) {
                errors.push(format!("task `{}`: {e}", t.id));
            }
        }
        for w in &t.writes {
            if w.is_empty() || w.starts_with('/') || w.split('/').any(|s| s == "..") {
                errors.push(format!(
                    "task `{}`: write glob `{w}` must be a relative path pattern without `..`",
                    t.id
                ));
            }
        }
    }
    let finals: Vec<&str> = tasks
        .iter()
        .filter(|t| t.r#final)
        .map(|t| t.id.as_str())
        .collect();
    if finals.len() > 1 {
        errors.push(format!(
            "tasks {} are all marked `final`: at most one task is final",
            quoted(&finals)
        ));
    }
    for t in tasks {
        let mut deps = BTreeSet::new();
        for d in &t.depends_on {
            if !deps.insert(d.as_str()) {
                errors.push(format!("task `{}` lists dependency `{d}` twice", t.id));
            }
            if d == &t.id {
                errors.push(format!("task `{}` depends on itself", t.id));
            } else if !seen.contains(d.as_str()) {
                errors.push(format!(
                    "task `{}` depends on unknown task `{d}`: depend only on ids of this plan",
                    t.id
                ));
            } else if finals.contains(&d.as_str()) {
                errors.push(format!(
                    "task `{}` depends on the final task `{d}`: nothing may depend on the final task",
                    t.id
                ));
            }
        }
    }
    if let Some(cycle) = find_cycle(tasks) {
        errors.push(format!(
            "the dependencies form a cycle: {}; break it",
            cycle.join(" -> ")
        ));
    }
    errors
}

/// The most tasks a plan may have, whatever its limits say.
pub const MAX_TASKS: u32 = 100;

/// Every limit of `limits` outside its range (empty = all in range), each saying the range.
pub fn limit_errors(limits: &PlanLimits) -> Vec<String> {
    let mut errors = Vec::new();
    let mut within = |name: &str, v: u64, lo: u64, hi: u64| {
        if v < lo || v > hi {
            errors.push(format!(
                "`plan.limits.{name}` must be between {lo} and {hi}, got {v}"
            ));
        }
    };
    within("max_tasks", limits.max_tasks.into(), 1, MAX_TASKS.into());
    within("max_parallel", limits.max_parallel.into(), 1, 16);
    within("max_attempts", limits.max_attempts.into(), 1, 10);
    within("max_replans", limits.max_replans.into(), 0, 10);
    within("max_wall_s", limits.max_wall_s, 0, 604_800);
    errors
}

/// The errors of `tasks` as a replan of `old` (valid on its own besides): every existing id
/// kept, and a task that passed (or was skipped) unchanged.
pub fn validate_replan(
    old: &[Task],
    state: &BTreeMap<String, TaskState>,
    tasks: &[Task],
    limits: &PlanLimits,
) -> Vec<String> {
    let mut errors = validate(tasks, limits);
    let by_id: BTreeMap<&str, &Task> = tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    for t in old {
        match by_id.get(t.id.as_str()) {
            None => errors.push(format!(
                "the replan drops task `{}`: keep every existing id (a task no longer needed can be made trivial, not removed)",
                t.id
            )),
            Some(new) => {
                let done = state
                    .get(&t.id)
                    .is_some_and(|s| matches!(s.status, TaskStatus::Passed | TaskStatus::Skipped));
                if done && *new != t {
                    errors.push(format!(
                        "the replan changes task `{}`, which has completed: leave completed tasks as they are",
                        t.id
                    ));
                }
            }
        }
    }
    errors
}

fn valid_id(id: &str) -> bool {
    let mut chars = id.chars();
    id.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn check_error(c: &Check) -> Option<String> {
    let path = c.path();
    if path.is_empty() || path.starts_with('/') || path.split('/').any(|s| s == ".." || s == ".") {
        return Some(format!(
            "check `{}` path `{path}` must be a relative path without `.` or `..` segments",
            c.name()
        ));
    }
    match c {
        Check::Matches { pattern, .. } | Check::NotMatches { pattern, .. } => {
            checks::compile(pattern).err().map(|e| {
                format!(
                    "check `{}` pattern `{pattern}` is not a valid regex: {e}",
                    c.name()
                )
            })
        }
        Check::Sha256 { sha256, .. } => (sha256.len() != 64
            || !sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| format!("check `sha256` of `{path}` needs 64 lowercase hex digits")),
        Check::JsonEq { pointer, .. } => {
            (!pointer.is_empty() && !pointer.starts_with('/')).then(|| {
                format!("check `json_eq` pointer `{pointer}` must be empty or start with `/`")
            })
        }
        _ => None,
    }
}

fn quoted(ids: &[&str]) -> String {
    ids.iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A dependency cycle, as the ids along it with the first repeated at the end; the first found
/// in plan order.
fn find_cycle(tasks: &[Task]) -> Option<Vec<String>> {
    // A duplicated id (reported on its own) keeps its first task's dependencies.
    let mut deps: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for t in tasks {
        deps.entry(t.id.as_str())
            .or_insert_with(|| t.depends_on.iter().map(String::as_str).collect());
    }
    // 0 = unseen, 1 = on the path, 2 = done.
    let mut mark: BTreeMap<&str, u8> = BTreeMap::new();
    for t in tasks {
        let mut path = Vec::new();
        if let Some(c) = visit(t.id.as_str(), &deps, &mut mark, &mut path) {
            return Some(c);
        }
    }
    None
}

fn visit<'a>(
    id: &'a str,
    deps: &BTreeMap<&'a str, Vec<&'a str>>,
    mark: &mut BTreeMap<&'a str, u8>,
    path: &mut Vec<&'a str>,
) -> Option<Vec<String>> {
    match mark.get(id).copied().unwrap_or(0) {
        2 => return None,
        1 => {
            let at = path.iter().position(|p| *p == id).unwrap_or(0);
            let mut cycle: Vec<String> = path[at..].iter().map(|s| (*s).to_owned()).collect();
            cycle.push(id.to_owned());
            return Some(cycle);
        }
        _ => {}
    }
    mark.insert(id, 1);
    path.push(id);
    for d in deps.get(id).map(Vec::as_slice).unwrap_or_default() {
        // Unknown dependencies are reported on their own.
        if deps.contains_key(d)
            && d != &id
            && let Some(c) = visit(d, deps, mark, path)
        {
            return Some(c);
        }
    }
    path.pop();
    mark.insert(id, 2);
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::globs_overlap;

    fn task(id: &str, deps: &[&str]) -> Task {
        Task {
            id: id.into(),
            description: format!("do {id}"),
            depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
            agent: None,
            writes: Vec::new(),
            checks: Vec::new(),
            acceptance: String::new(),
            verify: Default::default(),
            votes: None,
            critical: false,
            r#final: false,
        }
    }

    #[test]
    fn a_valid_plan_has_no_errors() {
        let plan = [task("a", &[]), task("b", &["a"]), task("c", &["a", "b"])];
        assert!(validate(&plan, &PlanLimits::default()).is_empty());
    }

    #[test]
    fn duplicates_unknown_deps_and_cycles_are_named() {
        let plan = [
            task("a", &["c"]),
            task("b", &["a"]),
            task("c", &["b"]),
            task("a", &[]),
            task("d", &["zz"]),
        ];
        let errors = validate(&plan, &PlanLimits::default());
        assert!(
            errors.iter().any(|e| e.contains("`a` is used twice")),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e.contains("unknown task `zz`")),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e.contains("cycle: a -> c -> b -> a")),
            "{errors:?}"
        );
    }

    #[test]
    fn nothing_may_depend_on_the_final_task() {
        let mut fin = task("end", &["a"]);
        fin.r#final = true;
        let plan = [task("a", &[]), fin, task("b", &["end"])];
        let errors = validate(&plan, &PlanLimits::default());
        assert_eq!(
            errors,
            vec!["task `b` depends on the final task `end`: nothing may depend on the final task"]
        );
    }

    #[test]
    fn a_replan_keeps_ids_and_completed_tasks() {
        let old = [task("a", &[]), task("b", &["a"])];
        let mut state = BTreeMap::new();
        state.insert(
            "a".to_owned(),
            TaskState {
                status: TaskStatus::Passed,
                ..TaskState::default()
            },
        );
        let mut changed = task("a", &[]);
        changed.description = "something else".into();
        let errors = validate_replan(&old, &state, &[changed], &PlanLimits::default());
        assert!(
            errors.iter().any(|e| e.contains("drops task `b`")),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e.contains("changes task `a`")),
            "{errors:?}"
        );
    }

    #[test]
    fn write_globs_overlap_conservatively() {
        assert!(globs_overlap("src/*.rs", "src/lib.rs"));
        assert!(globs_overlap("src/**", "src/a/b.rs"));
        assert!(globs_overlap("out.txt", "out.txt"));
        assert!(!globs_overlap("out.txt", "in.txt"));
        assert!(!globs_overlap("docs/*", "src/*"));
    }
}
