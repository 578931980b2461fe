//! Pause, drain and resume (docs/operations.md): a run's pause and resume
//! (`/v1/runs/{id}/pause|resume`), a tenant's drain and resume (`/v1/tenants/{tenant}/…`, its
//! tenant admin or an operator), the fleet's maintenance (`/v1/fleet/…`, operators), and the
//! mirror that keeps Redis's pause keys (read by admission) equal to Postgres's `pauses` (the
//! record) whatever Redis lost.

use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use time::format_description::well_known::Rfc3339;
use tokio_util::sync::CancellationToken;
use weft_api::common::Timestamp;
use weft_api::operations::{DrainRuns, DrainStatus, DrainTransition};
use weft_api::runs::Run;
use weft_bus::Dispatch;
use weft_coord::ControlOp;
use weft_core::run::{EventKind, RunStatus};
use weft_core::{Error, Principal, RunId, Scope, TenantId};
use weft_store::{FLEET, Resumed};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::NativePath;
use crate::runs::{reread, run_view, store_err, visible_run, with_live_descendants};

type Result<T> = std::result::Result<T, ApiError>;

/// How often a replica makes Redis's pause keys match Postgres's drains.
const MIRROR_EVERY: Duration = Duration::from_secs(5);

/// The drains shown with a status.
const TRANSITIONS_SHOWN: i64 = 20;

/// The operator's routes, and a run's pause and resume (the bearer layer is added by the
/// caller; the run routes' scope check too).
pub fn routes() -> axum::Router<AppState> {
    let runs = axum::Router::new()
        .route("/v1/runs/{id}/pause", post(pause_run_handler))
        .route("/v1/runs/{id}/resume", post(resume_run_handler))
        .route_layer(axum::middleware::from_fn(crate::runs::require_run_scope));
    axum::Router::new()
        .merge(runs)
        .route(
            "/v1/tenants/{tenant}/drain",
            post(drain_tenant_handler).get(tenant_status_handler),
        )
        .route("/v1/tenants/{tenant}/resume", post(resume_tenant_handler))
        .route(
            "/v1/fleet/drain",
            post(drain_fleet_handler).get(fleet_status_handler),
        )
        .route("/v1/fleet/resume", post(resume_fleet_handler))
}

/// Tells the executors holding `runs` that they are asked to park them (`Pause`), or no longer
/// (`Resume`). Best effort: the record is in Postgres, which a lease, a resubscribed executor,
/// the grace's end and `GET …/drain` read again.
async fn tell(st: &AppState, runs: &[RunId], op: ControlOp) {
    for run in runs {
        if let Err(e) = st.coord.tell(*run, op).await {
            tracing::warn!(error = %e, run = %run, "a run's executor was not told of its pause; it reads it again from Postgres");
            return;
        }
    }
}

/// Publishes a `run_resumed` the store appended to the run's live watchers.
fn publish_resumed(st: &AppState, run: RunId, seq: i64, data: serde_json::Value) {
    let live: weft_bus::LiveBatch = vec![weft_bus::LiveEvent {
        seq,
        kind: EventKind::RunResumed.as_str().to_owned(),
        persisted: true,
        data,
    }]
    .into();
    st.hub.publish(run, &live);
    let bus = st.bus.clone();
    tokio::spawn(async move {
        if let Err(e) = bus.publish_events(run, &live).await {
            tracing::debug!(error = %e, "run_resumed not published; watchers read it from the transcript");
        }
    });
}

/// Dispatches a run queued again by a resume.
pub(crate) async fn dispatch(st: &AppState, run: RunId, tenant: &TenantId) -> Result<()> {
    st.bus
        .dispatch(&Dispatch {
            run_id: run,
            tenant: tenant.clone(),
        })
        .await
        .map_err(|e| crate::runs::bus_err(&e))
}

/// The tenant of a tenant route, if the caller administers it (another tenant is a 404).
fn administered(p: &Principal, tenant: &str) -> Result<TenantId> {
    p.require(Scope::TenantAdmin).map_err(ApiError::native)?;
    let tenant = TenantId::parse(tenant).map_err(|e| ApiError::native(e.with_param("tenant")))?;
    if !p.administers(&tenant) {
        return Err(ApiError::native(
            Error::not_found(format!(
                "no tenant `{tenant}` is visible to you; a tenant admin drains only its own tenant"
            ))
            .with_param("tenant"),
        ));
    }
    Ok(tenant)
}

fn operator(p: &Principal) -> Result<()> {
    p.require(Scope::Admin).map_err(ApiError::native)
}

fn ts(t: time::OffsetDateTime) -> Timestamp {
    Timestamp(t.format(&Rfc3339).unwrap_or_default())
}

/// Where `scope`'s drain is, as `viewer` may see it: an operator's identity is shown to
/// operators and its own tenant only.
async fn status(st: &AppState, viewer: &Principal, scope: &str) -> Result<DrainStatus> {
    let shown = |tenant: &str, subject: String| {
        if viewer.is_admin() || tenant == viewer.tenant.as_str() {
            (tenant.to_owned(), subject)
        } else {
            ("".to_owned(), "an operator".to_owned())
        }
    };
    let pause = st.runs.pause_of(scope).await.map_err(store_err)?;
    let progress = st.runs.pause_progress(scope).await.map_err(store_err)?;
    let transitions = st
        .runs
        .transitions(scope, TRANSITIONS_SHOWN)
        .await
        .map_err(store_err)?;
    let draining = pause.is_some();
    Ok(DrainStatus {
        scope: scope.to_owned(),
        draining,
        since: pause.as_ref().map(|p| ts(p.since)),
        by: pause.map(|p| shown(&p.tenant, p.subject).1),
        complete: draining && progress.running == 0 && progress.queued == 0,
        runs: DrainRuns {
            running: progress.running,
            queued: progress.queued,
            paused: progress.paused,
            awaiting_input: progress.awaiting_input,
        },
        transitions: transitions
            .into_iter()
            .map(|t| {
                let (tenant, subject) = shown(&t.tenant, t.subject);
                DrainTransition {
                    action: t.action,
                    tenant,
                    subject,
                    at: ts(t.at),
                }
            })
            .collect(),
    })
}

/// Begins (or keeps) the drain of `scope`: admission refuses first, then every run is asked.
async fn drain(st: &AppState, p: &Principal, scope: &str) -> Result<DrainStatus> {
    let marked = st
        .runs
        .drain(scope, (&p.tenant, &p.subject))
        .await
        .map_err(store_err)?;
    // Admission refuses from here (best effort: the mirror sets the key within its period if
    // Redis cannot be reached now, and a run admitted meanwhile parks when leased).
    if let Err(e) = st.coord.set_pause(scope, true).await {
        tracing::warn!(error = %e, scope, "the drain's admission key was not set; the mirror sets it");
    }
    tracing::info!(scope, subject = %p.subject, runs = marked.held.len() + marked.unheld.len(), "drain began");
    // Runs admitted while the drain began (their admission passed before the key was set) are
    // asked now; held ones are told.
    let late = st.runs.drain_stragglers(scope).await.map_err(store_err)?;
    let mut held = marked.held;
    for r in late.held {
        if !held.contains(&r) {
            held.push(r);
        }
    }
    tell(st, &held, ControlOp::Pause).await;
    status(st, p, scope).await
}

/// While `scope` drains, the runs not told yet are told (again).
async fn nudge(st: &AppState, scope: &str) -> Result<()> {
    if st.runs.pause_of(scope).await.map_err(store_err)?.is_some() {
        let late = st.runs.drain_stragglers(scope).await.map_err(store_err)?;
        tell(st, &late.held, ControlOp::Pause).await;
    }
    Ok(())
}

/// Ends the drain of `scope`: admission first, then the runs it paused are queued again.
async fn resume(st: &AppState, p: &Principal, scope: &str) -> Result<DrainStatus> {
    let resumed = st
        .runs
        .resume_scope(scope, (&p.tenant, &p.subject))
        .await
        .map_err(store_err)?;
    if let Some(r) = resumed {
        tracing::info!(scope, subject = %p.subject, runs = r.queued.len(), "drain ended");
        tell(st, &r.unasked_held, ControlOp::Resume).await;
        for (run, tenant, seq, data) in r.queued {
            publish_resumed(st, run, seq, data);
            dispatch(st, run, &tenant).await?;
        }
    }
    // Admission admits again (best effort: the mirror clears the key if Redis cannot be
    // reached now).
    if let Err(e) = st.coord.set_pause(scope, false).await {
        tracing::warn!(error = %e, scope, "the drain's admission key was not cleared; the mirror clears it");
    }
    status(st, p, scope).await
}

/// `POST /v1/tenants/{tenant}/drain`.
pub async fn drain_tenant_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(tenant): NativePath<String>,
) -> Result<(StatusCode, Json<DrainStatus>)> {
    let tenant = administered(&p, &tenant)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(drain(&st, &p, tenant.as_str()).await?),
    ))
}

/// `GET /v1/tenants/{tenant}/drain`.
pub async fn tenant_status_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(tenant): NativePath<String>,
) -> Result<Json<DrainStatus>> {
    let tenant = administered(&p, &tenant)?;
    nudge(&st, tenant.as_str()).await?;
    Ok(Json(status(&st, &p, tenant.as_str()).await?))
}

/// `POST /v1/tenants/{tenant}/resume`.
pub async fn resume_tenant_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(tenant): NativePath<String>,
) -> Result<Json<DrainStatus>> {
    let tenant = administered(&p, &tenant)?;
    Ok(Json(resume(&st, &p, tenant.as_str()).await?))
}

/// `POST /v1/fleet/drain`.
pub async fn drain_fleet_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<(StatusCode, Json<DrainStatus>)> {
    operator(&p)?;
    Ok((StatusCode::ACCEPTED, Json(drain(&st, &p, FLEET).await?)))
}

/// `GET /v1/fleet/drain`.
pub async fn fleet_status_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Json<DrainStatus>> {
    operator(&p)?;
    nudge(&st, FLEET).await?;
    Ok(Json(status(&st, &p, FLEET).await?))
}

/// `POST /v1/fleet/resume`.
pub async fn resume_fleet_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Json<DrainStatus>> {
    operator(&p)?;
    Ok(Json(resume(&st, &p, FLEET).await?))
}

/// `POST /v1/runs/{id}/pause`: asks the run and its live sub-runs to park at their next step
/// boundary (docs/operations.md).
pub async fn pause_run_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
) -> Result<(StatusCode, Json<Run>)> {
    let run = visible_run(&st, &p, &id).await?;
    // A run parked by a drain is asked too: paused by itself as well, it stays paused when
    // the drain ends.
    if run.status.is_terminal() {
        return Ok((StatusCode::OK, Json(run_view(&run))));
    }
    let targets = with_live_descendants(&st, &p, run.id).await?;
    let marked = st
        .runs
        .request_pause(&p.tenant, &targets)
        .await
        .map_err(store_err)?;
    tell(&st, &marked.held, ControlOp::Pause).await;
    let now = reread(&st, &p, run).await?;
    let code = if now.status == RunStatus::Paused {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((code, Json(run_view(&now))))
}

/// `POST /v1/runs/{id}/resume`: resumes a run paused by itself, and its sub-runs paused with it.
pub async fn resume_run_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
) -> Result<Json<Run>> {
    let run = visible_run(&st, &p, &id).await?;
    let targets = with_live_descendants(&st, &p, run.id).await?;
    for (i, target) in targets.into_iter().enumerate() {
        match st
            .runs
            .resume_run(&p.tenant, target)
            .await
            .map_err(store_err)?
        {
            Ok(Resumed::Queued { seq, data }) => {
                publish_resumed(&st, target, seq, data);
                dispatch(&st, target, &p.tenant).await?;
            }
            Ok(Resumed::Unasked { held: true }) => {
                tell(&st, &[target], ControlOp::Resume).await;
            }
            Ok(Resumed::Unasked { held: false }) => {}
            // The run asked for is held by a drain: say so. A sub-run held by one is left.
            Err(weft_store::ResumeRefused::ScopePaused(scope)) if i == 0 => {
                return Err(ApiError::native(weft_launch::paused_err(
                    &p.tenant,
                    scope == weft_core::run::PauseScope::Fleet,
                )));
            }
            Err(_) => {}
        }
    }
    let now = reread(&st, &p, run).await?;
    Ok(Json(run_view(&now)))
}

/// Keeps Redis's pause keys set for Postgres's drains until `stop`: a Redis that restarted (and
/// lost them) refuses a draining tenant's runs again within [`MIRROR_EVERY`], and a key a failed
/// resume could not delete expires ([`weft_coord::PAUSE_KEY_TTL_SECS`]). (Runs admitted
/// meanwhile are paused when leased: the lease reads the drains from Postgres.)
pub async fn mirror_pauses(st: AppState, stop: CancellationToken) {
    let mut tick = tokio::time::interval(MIRROR_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let scopes = match st.runs.pauses().await {
            Ok(rows) => rows.into_iter().map(|r| r.scope).collect::<Vec<_>>(),
            Err(e) => {
                tracing::debug!(error = %e, "drains not read; mirroring later");
                continue;
            }
        };
        if let Err(e) = st.coord.mirror_pauses(&scopes).await {
            tracing::debug!(error = %e, "drains not mirrored to Redis; trying later");
        }
    }
}
