//! Plan runs at the edge (docs/harness.md): the checks `POST /v1/runs` makes of a `mode: "plan"`
//! body, a plan run's plan (`GET /v1/runs/{id}/plan`, `…/versions/{v}`), its approval or edit
//! (`PUT /v1/runs/{id}/plan` with `If-Match`), a person's retry or skip of a task, and the
//! evaluation pass rates (`GET /v1/evaluations`).
//!
//! The executor's orchestrator owns the plan: these routes read its rows and transcript, and
//! queue decisions for it (an approval, a control), waking the run as `POST /v1/runs/{id}/input`
//! does. Scopes are the run routes' (`runs:read` for GET, `runs:create` for the rest), and
//! another tenant's run is a 404, never a 403.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::header::{ETAG, IF_MATCH};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::Value;
use weft_api::plans::{EvaluationList, PlanDecision, PlanStatus, PlanView, TaskControlAccepted};
use weft_bus::Dispatch;
use weft_core::plan::{PlanLimits, PlanSpec, PlanState, Task, TaskStatus};
use weft_core::run::RunStatus;
use weft_core::{Error, ErrorCode, Principal};
use weft_store::{Approved, PlanRow, RunRecord};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{NativeJson, NativePath, NativeQuery, ValidJson};
use crate::runs::{bus_err, created, reread, run_id, status, store_err, visible_run};

pub(crate) mod create;

use create::{check_agents, check_phases, check_tasks, invalid};

type Result<T> = std::result::Result<T, PlanError>;

/// Events of a run folded into its plan's state at most: a plan run's transcript holds a few
/// events per task attempt, so this is far above any plan `max_tasks` allows.
const MAX_FOLDED_EVENTS: i64 = 20_000;
/// Events per transcript page read while folding.
const FOLD_PAGE: i64 = 1000;

/// The plan routes (the bearer layer is added by the caller; the scope is the run routes').
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route(
            "/v1/runs/{id}/plan",
            get(get_plan_handler).put(decide_plan_handler),
        )
        .route(
            "/v1/runs/{id}/plan/versions/{version}",
            get(plan_version_handler),
        )
        .route(
            "/v1/runs/{id}/plan/tasks/{task}/retry",
            post(retry_task_handler),
        )
        .route(
            "/v1/runs/{id}/plan/tasks/{task}/skip",
            post(skip_task_handler),
        )
        .route("/v1/evaluations", get(evaluations_handler))
        .route_layer(axum::middleware::from_fn(crate::runs::require_run_scope))
}

// --- errors ------------------------------------------------------------------------------------

/// An error of a plan route: weft's native error, or a failed (412) or missing (428) `If-Match`,
/// which no [`ErrorCode`] maps to. All three answer in the native shape.
#[derive(Debug)]
pub enum PlanError {
    Api(Error),
    /// `If-Match` names another version than the current one: 412 `precondition_failed`.
    Stale(Error),
    /// `If-Match` is missing: 428 `precondition_required`.
    Required(Error),
}

impl From<Error> for PlanError {
    fn from(e: Error) -> Self {
        PlanError::Api(e)
    }
}

impl From<ApiError> for PlanError {
    fn from(e: ApiError) -> Self {
        PlanError::Api(e.0)
    }
}

impl IntoResponse for PlanError {
    fn into_response(self) -> Response {
        let (status, code, e) = match self {
            PlanError::Api(e) => return ApiError::native(e).into_response(),
            PlanError::Stale(e) => (StatusCode::PRECONDITION_FAILED, "precondition_failed", e),
            PlanError::Required(e) => (
                StatusCode::PRECONDITION_REQUIRED,
                "precondition_required",
                e,
            ),
        };
        let mut body = e.native_body();
        body["error"]["code"] = code.into();
        (status, Json(body)).into_response()
    }
}

// --- reading a plan ----------------------------------------------------------------------------

/// A plan run this principal may see, with its plan spec; any other run is a 404.
async fn plan_run(st: &AppState, p: &Principal, id: &str) -> Result<(RunRecord, PlanSpec)> {
    let run = visible_run(st, p, id).await?;
    let plan = match run.spec.get("plan") {
        None | Some(Value::Null) => None,
        Some(v) => Some(<PlanSpec as Deserialize>::deserialize(v).map_err(|e| {
            tracing::error!(run = %run.id, error = %e, "a plan run's stored plan spec does not read");
            Error::internal()
        })?),
    };
    let Some(plan) = plan else {
        return Err(Error::not_found(format!(
            "run `{id}` is not a plan run (it was created without `mode: \"plan\"`)"
        ))
        .into());
    };
    Ok((run, plan))
}

fn no_plan_yet(id: &str) -> PlanError {
    Error::not_found(format!(
        "run `{id}` has no plan yet; its planner is writing one (a `plan_proposed` event in its stream says when it is there)"
    ))
    .into()
}

/// The plan versions of `run`, oldest first.
async fn rows(st: &AppState, run: &RunRecord) -> Result<Vec<PlanRow>> {
    Ok(st
        .runs
        .plan_rows(&run.tenant, run.id)
        .await
        .map_err(store_err)?)
}

/// The run's transcript folded into its plan's state (at most [`MAX_FOLDED_EVENTS`] events).
async fn fold(st: &AppState, run: &RunRecord, limits: &PlanLimits) -> Result<PlanState> {
    let mut state = PlanState::new(limits.clone());
    let mut from = 1;
    let mut read = 0;
    while read < MAX_FOLDED_EVENTS {
        let page = st
            .runs
            .events(run.id, from, FOLD_PAGE.min(MAX_FOLDED_EVENTS - read))
            .await
            .map_err(store_err)?;
        let Some(last) = page.last().map(|e| e.seq) else {
            break;
        };
        for e in &page {
            state.apply(&e.kind, &e.data);
        }
        read += i64::try_from(page.len()).unwrap_or(i64::MAX);
        if i64::try_from(page.len()).unwrap_or(0) < FOLD_PAGE {
            return Ok(state);
        }
        from = last + 1;
    }
    if read >= MAX_FOLDED_EVENTS {
        tracing::warn!(run = %run.id, "a plan run's transcript is longer than the plan view folds; later task states are not shown");
    }
    Ok(state)
}

/// A plan version's tasks as stored.
fn row_tasks(run: &RunRecord, row: &PlanRow) -> Result<Vec<Task>> {
    Vec::<Task>::deserialize(&row.tasks).map_err(|e| {
        tracing::error!(run = %run.id, version = row.version, error = %e, "a stored plan version does not read");
        PlanError::Api(Error::internal())
    })
}

fn plan_status(run: &RunRecord, row: &PlanRow) -> Result<PlanStatus> {
    match row.status.as_str() {
        "proposed" => Ok(PlanStatus::Proposed),
        "accepted" => Ok(PlanStatus::Accepted),
        "superseded" => Ok(PlanStatus::Superseded),
        other => {
            tracing::error!(run = %run.id, version = row.version, status = other, "a stored plan version has an unknown status");
            Err(Error::internal().into())
        }
    }
}

/// The tokens every sub-run of `run` has used so far (each role's, and their own sub-runs'),
/// as its budget counts them: never less than its events recorded.
async fn tokens(st: &AppState, run: &RunRecord, state: &PlanState) -> Result<u64> {
    let usage = st
        .runs
        .subtree_usage(&run.tenant, run.id)
        .await
        .map_err(store_err)?;
    Ok(usage.total_tokens.max(state.tokens))
}

/// A plan version with each task's state from the folded transcript, and the plan's `tokens`.
fn view(
    run: &RunRecord,
    plan: &PlanSpec,
    row: &PlanRow,
    state: &PlanState,
    tokens: u64,
) -> Result<PlanView> {
    let tasks = row_tasks(run, row)?;
    Ok(PlanView {
        run_id: run_id(run.id),
        run_status: status(run.status),
        version: row.version,
        status: plan_status(run, row)?,
        approved_by: row.approved_by.clone(),
        replans: state.replans,
        tokens,
        process: plan.process.clone(),
        process_version: plan.process_version.clone(),
        tasks: weft_core::plan::task_views(state, &tasks),
        created_at: created(row.created_at),
    })
}

/// A plan view with its `ETag` (`"<version>"`).
fn with_etag(code: StatusCode, v: PlanView) -> Response {
    let tag = HeaderValue::from_str(&format!("\"{}\"", v.version)).ok();
    let mut resp = (code, Json(v)).into_response();
    if let Some(t) = tag {
        resp.headers_mut().insert(ETAG, t);
    }
    resp
}

/// `GET /v1/runs/{id}/plan`: the newest version.
#[tracing::instrument(skip_all, fields(tenant = %p.tenant))]
pub async fn get_plan_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
) -> Result<Response> {
    let (run, plan) = plan_run(&st, &p, &id).await?;
    let rows = rows(&st, &run).await?;
    let Some(row) = rows.last() else {
        return Err(no_plan_yet(&id));
    };
    let state = fold(&st, &run, &plan.limits).await?;
    let tokens = tokens(&st, &run, &state).await?;
    Ok(with_etag(
        StatusCode::OK,
        view(&run, &plan, row, &state, tokens)?,
    ))
}

/// `GET /v1/runs/{id}/plan/versions/{version}`.
#[tracing::instrument(skip_all, fields(tenant = %p.tenant))]
pub async fn plan_version_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath((id, version)): NativePath<(String, String)>,
) -> Result<Response> {
    let (run, plan) = plan_run(&st, &p, &id).await?;
    let Ok(n) = version.parse::<u32>() else {
        return Err(invalid(
            format!("`version` must be a plan version number (1, 2, …), got {version:?}"),
            "version",
        )
        .into());
    };
    let rows = rows(&st, &run).await?;
    let Some(row) = rows.iter().find(|r| r.version == n) else {
        return Err(Error::not_found(format!(
            "run `{id}` has no plan version {n}; GET /v1/runs/{id}/plan gives the newest"
        ))
        .into());
    };
    let state = fold(&st, &run, &plan.limits).await?;
    let tokens = tokens(&st, &run, &state).await?;
    Ok(with_etag(
        StatusCode::OK,
        view(&run, &plan, row, &state, tokens)?,
    ))
}

// --- waking a run --------------------------------------------------------------------------------

/// Admits a parked run before a change that wakes it, as `POST /v1/runs/{id}/input` does:
/// `true` when this call took the slot (and gives it back if nothing wakes).
async fn admit_parked(st: &AppState, p: &Principal, run: &RunRecord) -> Result<bool> {
    if run.status != RunStatus::AwaitingInput {
        return Ok(false);
    }
    Ok(st.launcher.admit(p, run.id).await?)
}

/// After a change for the run's orchestrator: a parked run becomes queued and is dispatched; a
/// run that was not parked (running, or woken by someone else who holds its slot) gives back
/// the slot taken for nothing, and its executor is told.
async fn wake(st: &AppState, p: &Principal, run: &RunRecord, took: bool) -> Result<()> {
    let woke = match st.runs.wake_if_parked(run.id).await {
        Ok(w) => w,
        Err(e) => {
            if took {
                let _ = st.coord.release(&p.tenant, run.id).await;
            }
            return Err(store_err(e).into());
        }
    };
    dispatch_or_notify(st, p, run, took, woke).await
}

/// A run this call woke is dispatched; one it did not wake gives back the slot taken for
/// nothing, and its executor is told.
async fn dispatch_or_notify(
    st: &AppState,
    p: &Principal,
    run: &RunRecord,
    took: bool,
    woke: bool,
) -> Result<()> {
    if woke {
        st.bus
            .dispatch(&Dispatch {
                run_id: run.id,
                tenant: run.tenant.clone(),
            })
            .await
            .map_err(|e| bus_err(&e))?;
    } else {
        if took {
            let _ = st.coord.release(&p.tenant, run.id).await;
        }
        let _ = st.coord.notify_input(run.id).await;
    }
    Ok(())
}

// --- PUT /v1/runs/{id}/plan ----------------------------------------------------------------------

/// The plan version `If-Match` names: `"3"`, `3` or `W/"3"`.
fn if_match(headers: &HeaderMap) -> Result<u32> {
    let Some(v) = headers.get(IF_MATCH) else {
        return Err(PlanError::Required(invalid(
            "`If-Match` is required: send the version you decided on, as the ETag of GET /v1/runs/{id}/plan gives it (`If-Match: \"1\"`)",
            "If-Match",
        )));
    };
    let text = v.to_str().unwrap_or_default().trim();
    let bare = text.strip_prefix("W/").unwrap_or(text);
    let bare = bare
        .strip_prefix('"')
        .and_then(|b| b.strip_suffix('"'))
        .unwrap_or(bare);
    bare.parse::<u32>().map_err(|_| {
        invalid(
            format!(
                "`If-Match` must be a plan version as the plan's ETag gives it (`\"3\"`), got {text:?}"
            ),
            "If-Match",
        )
        .into()
    })
}

/// `PUT /v1/runs/{id}/plan` with `If-Match: "<version>"`: approves the proposed plan as it is,
/// or as edited (a new version), and wakes the run parked on it.
#[tracing::instrument(skip_all, fields(tenant = %p.tenant))]
pub async fn decide_plan_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
    headers: HeaderMap,
    ValidJson(body): NativeJson<PlanDecision>,
) -> Result<Response> {
    let (run, plan) = plan_run(&st, &p, &id).await?;
    // A body that could never be accepted is a 400 whatever version it names.
    let edit = match &body.tasks {
        None => None,
        Some(tasks) => {
            check_tasks(tasks, &plan.limits, plan.verifier.as_deref(), "tasks")?;
            check_phases(&plan, tasks)?;
            let roles: Vec<(String, &str)> = tasks
                .iter()
                .enumerate()
                .filter_map(|(i, t)| Some((format!("tasks[{i}].agent"), t.agent.as_deref()?)))
                .collect();
            check_agents(&st, &p, &roles).await?;
            Some(serde_json::to_value(tasks).map_err(|_| Error::internal())?)
        }
    };
    let version = if_match(&headers)?;
    let took = admit_parked(&st, &p, &run).await?;
    let approved = st
        .runs
        .approve_plan(&p.tenant, run.id, version, edit.as_ref(), &p.subject)
        .await;
    let refusal = match approved {
        Ok(Approved::Done(row)) => {
            wake(&st, &p, &run, took).await?;
            let run = reread(&st, &p, run).await?;
            let state = fold(&st, &run, &plan.limits).await?;
            let tokens = tokens(&st, &run, &state).await?;
            return Ok(with_etag(
                StatusCode::OK,
                view(&run, &plan, &row, &state, tokens)?,
            ));
        }
        Ok(Approved::NotFound) => no_plan_yet(&id),
        Ok(Approved::Stale(current)) => PlanError::Stale(invalid(
            format!(
                "`If-Match` names version {version}, but the plan's current version is {current}; GET /v1/runs/{id}/plan again and decide on that version"
            ),
            "If-Match",
        )),
        Ok(Approved::NotWaiting) => PlanError::Api(Error::new(
            ErrorCode::Conflict,
            format!(
                "the plan of run `{id}` is not waiting for approval (it was approved already, or the run is not parked on it)"
            ),
        )),
        Err(e) => PlanError::Api(store_err(e).0),
    };
    if took {
        let _ = st.coord.release(&p.tenant, run.id).await;
    }
    Err(refusal)
}

// --- retry and skip ------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Control {
    Retry,
    Skip,
}

impl Control {
    fn as_str(self) -> &'static str {
        match self {
            Control::Retry => "retry",
            Control::Skip => "skip",
        }
    }
}

/// `POST /v1/runs/{id}/plan/tasks/{task}/retry`.
#[tracing::instrument(skip_all, fields(tenant = %p.tenant))]
pub async fn retry_task_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath((id, task)): NativePath<(String, String)>,
) -> Result<(StatusCode, Json<TaskControlAccepted>)> {
    control(&st, &p, &id, task, Control::Retry).await
}

/// `POST /v1/runs/{id}/plan/tasks/{task}/skip`.
#[tracing::instrument(skip_all, fields(tenant = %p.tenant))]
pub async fn skip_task_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath((id, task)): NativePath<(String, String)>,
) -> Result<(StatusCode, Json<TaskControlAccepted>)> {
    control(&st, &p, &id, task, Control::Skip).await
}

/// Queues a person's retry or skip of `task` (a task of the newest plan) for the run's
/// orchestrator, which takes it between batches, and wakes the run if it is parked.
async fn control(
    st: &AppState,
    p: &Principal,
    id: &str,
    task: String,
    action: Control,
) -> Result<(StatusCode, Json<TaskControlAccepted>)> {
    let (run, plan) = plan_run(st, p, id).await?;
    let rows = rows(st, &run).await?;
    let Some(row) = rows.last() else {
        return Err(no_plan_yet(id));
    };
    if !row_tasks(&run, row)?.iter().any(|t| t.id == task) {
        return Err(Error::not_found(format!(
            "the plan of run `{id}` has no task `{task}`; GET /v1/runs/{id}/plan lists its tasks"
        ))
        .into());
    }
    if run.status.is_terminal() {
        return Err(Error::new(
            ErrorCode::Conflict,
            format!(
                "run `{id}` has ended ({}); start a new run to do the task again",
                run.status.as_str()
            ),
        )
        .into());
    }
    let state = fold(st, &run, &plan.limits).await?.state_of(&task);
    let now = state.status;
    // A task whose vote split waits for a person may be retried instead of answered.
    let asked = state.split.is_some() && !now.is_terminal();
    let refused = match action {
        Control::Retry if now != TaskStatus::Failed && !asked => {
            Some("only a failed task, or one whose vote split waits for a person, can be retried")
        }
        Control::Skip if now == TaskStatus::Passed => Some("a task that passed cannot be skipped"),
        _ => None,
    };
    if let Some(why) = refused {
        return Err(Error::new(
            ErrorCode::Conflict,
            format!(
                "task `{task}` is {}: {why}",
                serde_json::to_value(now)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ),
        )
        .into());
    }
    let took = admit_parked(st, p, &run).await?;
    // The control and the run's wake commit together, also when the run is parked on a
    // question to a person (a split vote): the orchestrator takes the control first.
    let woke = match st
        .runs
        .add_plan_control(&p.tenant, run.id, &task, action.as_str(), &p.subject)
        .await
    {
        Ok(w) => w,
        Err(e) => {
            if took {
                let _ = st.coord.release(&p.tenant, run.id).await;
            }
            return Err(store_err(e).into());
        }
    };
    dispatch_or_notify(st, p, &run, took, woke).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(TaskControlAccepted {
            run_id: run_id(run.id),
            task,
            action: action.as_str().to_owned(),
        }),
    ))
}

// --- GET /v1/evaluations ---------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationsQuery {
    agent: Option<String>,
    version: Option<String>,
}

/// `GET /v1/evaluations?agent=…&version=…`: pass rates per definition version of an agent of
/// the caller's tenant, newest version first.
#[tracing::instrument(skip_all, fields(tenant = %p.tenant))]
pub async fn evaluations_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativeQuery(q): NativeQuery<EvaluationsQuery>,
) -> Result<Json<EvaluationList>> {
    let agent = match q.agent {
        Some(a) if !a.is_empty() => a,
        _ => {
            return Err(invalid(
                "`agent` is required: the name of the agent whose evaluations to aggregate (`?agent=coder`)",
                "agent",
            )
            .into());
        }
    };
    if q.version.as_deref() == Some("") {
        return Err(invalid(
            "`version` is empty: give a definition content hash, or leave it out for every version",
            "version",
        )
        .into());
    }
    let list = st
        .runs
        .evaluation_list(&p.tenant, &agent, q.version.as_deref())
        .await
        .map_err(store_err)?;
    Ok(Json(list))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_core::plan::VerifyMode;

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(IF_MATCH, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn if_match_reads_a_version_quoted_bare_or_weak() {
        assert_eq!(if_match(&headers("\"3\"")).unwrap(), 3);
        assert_eq!(if_match(&headers("3")).unwrap(), 3);
        assert_eq!(if_match(&headers("W/\"3\"")).unwrap(), 3);
        assert_eq!(if_match(&headers(" \"0\" ")).unwrap(), 0);
        assert!(matches!(
            if_match(&HeaderMap::new()),
            Err(PlanError::Required(_))
        ));
        for bad in ["*", "\"x\"", "\"-1\"", "\"3", ""] {
            match if_match(&headers(bad)) {
                Err(PlanError::Api(e)) => {
                    assert_eq!(e.code, ErrorCode::InvalidRequest, "{bad}");
                    assert_eq!(e.param.as_deref(), Some("If-Match"), "{bad}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_failed_or_missing_if_match_answers_in_the_native_shape() {
        let stale = PlanError::Stale(invalid("old", "If-Match")).into_response();
        assert_eq!(stale.status(), StatusCode::PRECONDITION_FAILED);
        let missing = PlanError::Required(invalid("none", "If-Match")).into_response();
        assert_eq!(missing.status(), StatusCode::PRECONDITION_REQUIRED);
    }

    #[test]
    fn tasks_are_held_to_the_validator_and_need_a_verifier_to_be_verified_by_a_model() {
        let task = |id: &str, deps: &[&str], verify: VerifyMode| Task {
            id: id.into(),
            description: "do it".into(),
            depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
            agent: None,
            writes: Vec::new(),
            checks: Vec::new(),
            acceptance: String::new(),
            verify,
            votes: None,
            critical: false,
            r#final: false,
        };
        let limits = PlanLimits::default();
        let cycle = [
            task("a", &["b"], VerifyMode::Checks),
            task("b", &["a"], VerifyMode::Checks),
            task("c", &["nowhere"], VerifyMode::Checks),
        ];
        let e = check_tasks(&cycle, &limits, None, "plan.tasks").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("plan.tasks"));
        assert!(
            e.message.contains("unknown task `nowhere`")
                && e.message
                    .contains("; the dependencies form a cycle: a -> b -> a"),
            "{}",
            e.message
        );
        let llm = [task("a", &[], VerifyMode::Llm)];
        let e = check_tasks(&llm, &limits, None, "plan.tasks").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("plan.verifier"));
        assert!(e.message.contains("`a`"), "{}", e.message);
        check_tasks(&llm, &limits, Some("checker"), "plan.tasks").unwrap();
    }
}
