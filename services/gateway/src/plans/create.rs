//! The checks `POST /v1/runs` makes of a `mode: "plan"` body before the launcher sees it, and
//! the checks of a plan (tasks, phases, role agents) it shares with a person's edit.

use crate::AppState;
use crate::error::ApiError;
use serde_json::Value;
use std::collections::BTreeMap;
use weft_core::plan::{PlanLimits, PlanSpec, RunMode, Task, VerifyMode};
use weft_core::{Error, ErrorCode, Principal};
use weft_launch::CreateRun;
use weft_proto::v1;

pub(super) fn invalid(message: impl Into<String>, param: impl Into<String>) -> Error {
    Error::invalid(message).with_param(param)
}

// --- POST /v1/runs with mode "plan" ------------------------------------------------------------

/// The checks `POST /v1/runs` makes of a plan run's body before the launcher sees it: the goal
/// is given as `input`, the run is not interactive, `plan.tasks` (when given) is a valid plan,
/// a task verified by a model has a verifier, and every role names an agent of the caller's
/// tenant. `plan` without `mode: "plan"` is refused.
///
/// `plan.process` names a process of the caller's tenant (another tenant's is unknown, as an
/// unknown agent is): it is resolved here, once, into the plan the run stores, so the executor
/// never reads it ([`apply_process`]). The fields that resolution sets may not come from the
/// caller.
pub async fn check_create(
    st: &AppState,
    p: &Principal,
    body: &mut CreateRun,
) -> std::result::Result<(), ApiError> {
    match body.mode {
        RunMode::Loop if body.plan.is_some() => {
            return Err(ApiError::native(invalid(
                "`plan` is read only with `mode: \"plan\"`: add `\"mode\": \"plan\"` to run the plan harness, or leave `plan` out",
                "plan",
            )));
        }
        RunMode::Loop => return Ok(()),
        RunMode::Plan => {}
    }
    let has_goal = match &body.input {
        None => false,
        Some(weft_launch::Input::Text(t)) => !t.trim().is_empty(),
        Some(weft_launch::Input::Parts(parts)) => parts.iter().any(|part| match part {
            weft_launch::InputPart::Text { text } | weft_launch::InputPart::Untrusted { text } => {
                !text.trim().is_empty()
            }
        }),
    };
    if !has_goal {
        return Err(ApiError::native(invalid(
            "`input` is the plan's goal: give it with mode \"plan\"",
            "input",
        )));
    }
    if body.interactive {
        return Err(ApiError::native(invalid(
            "a plan run cannot be `interactive`: it parks only to have its plan approved (`plan.approval: \"before_execute\"`); leave `interactive` out",
            "interactive",
        )));
    }
    let plan = body.plan.get_or_insert_with(PlanSpec::default);
    refuse_process_fields(plan).map_err(ApiError::native)?;
    let errors = weft_core::plan::limit_errors(&plan.limits);
    if !errors.is_empty() {
        return Err(ApiError::native(invalid(errors.join("; "), "plan.limits")));
    }
    let process = match plan.process.clone() {
        None => None,
        Some(name) => Some(
            apply_process(st, p, plan, &name)
                .await
                .map_err(ApiError::native)?,
        ),
    };
    let tasks_param = if process.is_some() {
        "plan.process"
    } else {
        "plan.tasks"
    };
    for tasks in [&plan.tasks, &plan.phases].into_iter().flatten() {
        check_tasks(tasks, &plan.limits, plan.verifier.as_deref(), tasks_param)
            .map_err(ApiError::native)?;
    }
    let mut roles: Vec<(String, &str)> = Vec::new();
    for (field, name) in [
        ("planner", &plan.planner),
        ("verifier", &plan.verifier),
        ("replanner", &plan.replanner),
    ] {
        if let Some(name) = name {
            roles.push((format!("plan.{field}"), name));
        }
    }
    let (list, field) = match (&plan.tasks, &plan.phases) {
        (_, Some(phases)) => (phases, "plan.process.phases"),
        (Some(tasks), None) if process.is_some() => (tasks, "plan.process.phases"),
        (Some(tasks), None) => (tasks, "plan.tasks"),
        (None, None) => (&Vec::new(), "plan.tasks"),
    };
    for (i, t) in list.iter().enumerate() {
        if let Some(agent) = &t.agent {
            roles.push((format!("{field}[{i}].agent"), agent));
        }
    }
    let tools = check_agents(st, p, &roles)
        .await
        .map_err(ApiError::native)?;
    if let Some(name) = &plan.process
        && !plan.tools_required.is_empty()
    {
        check_required_tools(st, p, name, &body.agent, plan, list, tools)
            .await
            .map_err(ApiError::native)?;
    }
    Ok(())
}

/// The fields of `plan` that only [`apply_process`] sets.
fn refuse_process_fields(plan: &PlanSpec) -> std::result::Result<(), Error> {
    for (field, set) in [
        ("process_version", plan.process_version.is_some()),
        ("phase_mode", plan.phase_mode.is_some()),
        ("phases", plan.phases.is_some()),
        ("persona", plan.persona.is_some()),
        ("tools_required", !plan.tools_required.is_empty()),
        ("tools_excluded", !plan.tools_excluded.is_empty()),
    ] {
        if set {
            return Err(invalid(
                format!(
                    "`plan.{field}` is set by weft from `plan.process`; leave it out, and name a process (PUT /v1/processes/{{name}}) with `plan.process` instead"
                ),
                format!("plan.{field}"),
            ));
        }
    }
    if plan.process.is_some() && plan.tasks.is_some() {
        return Err(invalid(
            "`plan.process` and `plan.tasks` are two plans: give the process, or the tasks, not both",
            "plan.tasks",
        ));
    }
    Ok(())
}

/// Resolves process `name` of the caller's tenant (its active version) into `plan`: a `strict`
/// process's phases become `tasks`; a `guided` or `suggestive` one's become `phases` for the
/// planner; `phase_mode`, the persona and the tools are recorded; the limits are the process's,
/// narrowed by the caller's ([`weft_core::process::merge_limits`]). An unknown process and
/// another tenant's are the same 400.
async fn apply_process(
    st: &AppState,
    p: &Principal,
    plan: &mut PlanSpec,
    name: &str,
) -> std::result::Result<weft_core::process::ProcessContent, Error> {
    use weft_core::def::DefContent as _;
    use weft_core::process::{PhaseMode, ProcessContent};
    let req = st.internal(
        p,
        v1::GetDefRequest {
            kind: v1::DefKind::Process.into(),
            name: name.to_owned(),
            version: None,
        },
    )?;
    let mut client = st.substrate.clone();
    let v = match st.substrate_call(client.get_def(req)).await {
        Ok(v) => v,
        // A name that is not a valid process name names no process either.
        Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::InvalidRequest) => {
            return Err(invalid(
                format!(
                    "plan.process: unknown process `{name}`; create it with PUT /v1/processes/{name}, or name a process of this tenant"
                ),
                "plan.process",
            ));
        }
        Err(e) => return Err(e),
    };
    if v.retired {
        return Err(invalid(
            format!(
                "plan.process: process `{name}` is retired; activate a version with POST /v1/processes/{name}/activate"
            ),
            "plan.process",
        ));
    }
    let process = ProcessContent::from_json_str(&v.content_json).map_err(|e| {
        tracing::error!(process = %name, version = %v.hash, error = %e.message, "a stored process does not read");
        Error::internal()
    })?;
    plan.limits = weft_core::process::merge_limits(&plan.limits, &process.limits);
    plan.process_version = Some(v.hash.clone());
    plan.phase_mode = Some(process.phase_mode);
    plan.persona = (!process.persona.trim().is_empty()).then(|| process.persona.clone());
    plan.tools_required.clone_from(&process.tools.required);
    plan.tools_excluded.clone_from(&process.tools.excluded);
    match process.phase_mode {
        PhaseMode::Strict => plan.tasks = Some(process.tasks()),
        PhaseMode::Guided | PhaseMode::Suggestive => plan.phases = Some(process.tasks()),
    }
    Ok(process)
}

/// Every tool process `name` requires is one the agent doing each phase has (a name in its
/// `tools`, or a glob there matching it): the phase's own agent, else the run's. An unknown run
/// agent is left to the launcher, which answers for it as for any run.
async fn check_required_tools(
    st: &AppState,
    p: &Principal,
    name: &str,
    run_agent: &str,
    plan: &PlanSpec,
    phases: &[Task],
    mut tools: BTreeMap<String, Vec<String>>,
) -> std::result::Result<(), Error> {
    if phases.iter().any(|t| t.agent.is_none())
        && !tools.contains_key(run_agent)
        && let Some(state) = agent_state(st, p, run_agent).await?
    {
        tools.insert(run_agent.to_owned(), state.tools);
    }
    for t in phases {
        let agent = t.agent.as_deref().unwrap_or(run_agent);
        let Some(has) = tools.get(agent) else {
            continue;
        };
        for need in &plan.tools_required {
            if !has
                .iter()
                .any(|pattern| weft_core::mcp::glob_matches(pattern, need))
            {
                return Err(invalid(
                    format!(
                        "plan.process: process `{name}` requires tool `{need}`, which agent `{agent}` (doing phase `{}`) does not have; add it to the agent's `tools`, or run the process with an agent that has it",
                        t.id
                    ),
                    "plan.process",
                ));
            }
        }
    }
    Ok(())
}

/// A plan's tasks as a writer's plan is held to them: every validation error at once, and a
/// verifier for the tasks verified by a model.
pub(super) fn check_tasks(
    tasks: &[Task],
    limits: &PlanLimits,
    verifier: Option<&str>,
    param: &str,
) -> std::result::Result<(), Error> {
    // Each field within its bounds first, named by its path.
    for (i, t) in tasks
        .iter()
        .enumerate()
        .take(weft_core::plan::MAX_TASKS as usize)
    {
        let at = |f: &str| format!("{param}[{i}].{f}");
        let long = |f: &str, v: &str, max: usize| {
            (v.len() > max).then(|| {
                invalid(
                    format!("`{}` must be at most {max} bytes, got {}", at(f), v.len()),
                    at(f),
                )
            })
        };
        if let Some(e) = long("description", &t.description, 20_000)
            .or_else(|| long("acceptance", &t.acceptance, 20_000))
            .or_else(|| long("agent", t.agent.as_deref().unwrap_or_default(), 128))
        {
            return Err(e);
        }
        if let Some(v) = t.votes.filter(|v| !(3..=7).contains(v)) {
            return Err(invalid(
                format!("`{}` must be between 3 and 7, got {v}", at("votes")),
                at("votes"),
            ));
        }
    }
    let errors = weft_core::plan::validate(tasks, limits);
    if !errors.is_empty() {
        return Err(invalid(format!("{param}: {}", errors.join("; ")), param));
    }
    if verifier.is_none() {
        let wants: Vec<String> = tasks
            .iter()
            .filter(|t| matches!(t.verify, VerifyMode::Llm | VerifyMode::Vote))
            .map(|t| format!("`{}`", t.id))
            .collect();
        if !wants.is_empty() {
            return Err(invalid(
                format!(
                    "tasks {} ask for `verify: llm` or `vote`, which needs a verifier agent: name one as `plan.verifier`, or verify those tasks with `checks`",
                    wants.join(", ")
                ),
                "plan.verifier",
            ));
        }
    }
    Ok(())
}

/// A person's edit of a plan run of a `strict` or `guided` process keeps the process's phases,
/// as the planner's plan must ([`weft_core::process::phase_errors`]); the phases are the run's
/// first `tasks` (strict) or its `phases` (guided).
pub(super) fn check_phases(plan: &PlanSpec, tasks: &[Task]) -> std::result::Result<(), Error> {
    use weft_core::process::PhaseMode;
    let phases = match plan.phase_mode {
        Some(PhaseMode::Strict) => plan.tasks.as_deref(),
        Some(PhaseMode::Guided) => plan.phases.as_deref(),
        Some(PhaseMode::Suggestive) | None => None,
    };
    let errors = weft_core::process::phase_errors(phases.unwrap_or_default(), tasks);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(invalid(format!("tasks: {}", errors.join("; ")), "tasks"))
    }
}

/// Every `(field, agent)` names an active agent of the caller's tenant (resolved as the launcher
/// resolves a run's agent, so another tenant's agent is unknown). Each name is asked once. The
/// answer: each agent's `tools`.
pub(super) async fn check_agents(
    st: &AppState,
    p: &Principal,
    roles: &[(String, &str)],
) -> std::result::Result<BTreeMap<String, Vec<String>>, Error> {
    let mut known: BTreeMap<&str, Option<AgentState>> = BTreeMap::new();
    for (field, name) in roles {
        if !known.contains_key(name) {
            let state = agent_state(st, p, name).await?;
            known.insert(name, state);
        }
        match known.get(name).and_then(Option::as_ref) {
            None => {
                return Err(invalid(
                    format!(
                        "{field}: unknown agent `{name}`; create it with PUT /v1/agents/{name}, or name an agent of this tenant"
                    ),
                    field.as_str(),
                ));
            }
            Some(AgentState { retired: true, .. }) => {
                return Err(invalid(
                    format!(
                        "{field}: agent `{name}` is retired; activate a version with POST /v1/agents/{name}/activate"
                    ),
                    field.as_str(),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(known
        .into_iter()
        .filter_map(|(name, s)| Some((name.to_owned(), s?.tools)))
        .collect())
}

/// What the plan checks read of an agent's active version.
struct AgentState {
    retired: bool,
    /// its `tools` (names and globs)
    tools: Vec<String>,
}

/// Agent `name` of the caller's tenant; `None` when there is no such agent.
async fn agent_state(
    st: &AppState,
    p: &Principal,
    name: &str,
) -> std::result::Result<Option<AgentState>, Error> {
    let req = st.internal(
        p,
        v1::GetAgentRequest {
            name: name.to_owned(),
            version: None,
        },
    )?;
    let mut client = st.substrate.clone();
    match st.substrate_call(client.get_agent(req)).await {
        Ok(v) => {
            let tools = serde_json::from_str::<Value>(&v.content_json)
                .ok()
                .and_then(|c| c.get("tools").cloned())
                .and_then(|t| serde_json::from_value::<Vec<String>>(t).ok())
                .unwrap_or_default();
            Ok(Some(AgentState {
                retired: v.retired,
                tools,
            }))
        }
        // A name that is not a valid agent name names no agent either.
        Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::InvalidRequest) => Ok(None),
        Err(e) => Err(e),
    }
}
