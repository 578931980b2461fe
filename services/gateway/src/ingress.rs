//! The ingress routes on the gateway: schedule operations (`run-now`, `pause`, `resume`,
//! `state`, `DELETE`), webhook triage (`deliveries`) and dry runs (`test`), and the webhook
//! receiver `POST /v1/_webhooks/{tenant}/{name}` (outside bearer auth: each definition says
//! how its deliveries are signed; see `weft_ingress::webhooks`). The definitions themselves are
//! served by [`crate::agents`] like every kind.

use axum::Extension;
use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use weft_api::common::Timestamp;
use weft_api::common::Uuid;
use weft_api::ingress::{RunNowResult, ScheduleFire, ScheduleState, WebhookDeliveries};
use weft_core::def::DefContent as _;
use weft_core::schedule::ScheduleContent;
use weft_core::webhook::WebhookContent;
use weft_core::{Error, Principal, Scope};
use weft_proto::v1;
use weft_store::ScheduleRow;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{NativeJson, NativePath, ValidJson};

type Result<T> = std::result::Result<T, ApiError>;

/// The bearer-authenticated routes (mounted in the native router).
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/schedules/{name}", delete(delete_schedule_handler))
        .route("/v1/schedules/{name}/state", get(state_handler))
        .route("/v1/schedules/{name}/run-now", post(run_now_handler))
        .route("/v1/schedules/{name}/pause", post(pause_handler))
        .route("/v1/schedules/{name}/resume", post(resume_handler))
        .route("/v1/webhooks/{name}/deliveries", get(deliveries_handler))
        .route("/v1/webhooks/{name}/test", post(test_handler))
}

/// The receiver (no bearer token).
pub fn receiver() -> axum::Router<AppState> {
    axum::Router::new().route("/v1/_webhooks/{tenant}/{name}", post(receive_handler))
}

fn ts(t: Option<OffsetDateTime>) -> Option<Timestamp> {
    t.and_then(|t| t.format(&Rfc3339).ok()).map(Timestamp)
}

fn uuid(id: uuid::Uuid) -> Uuid {
    Uuid(id.to_string())
}

fn not_found(name: &str) -> ApiError {
    ApiError::native(Error::not_found(format!(
        "no schedule `{name}`; create it with PUT /v1/schedules/{name}"
    )))
}

fn store(e: &weft_store::StoreError) -> ApiError {
    ApiError::native(e.to_api())
}

async fn schedule_row(st: &AppState, p: &Principal, name: &str) -> Result<ScheduleRow> {
    st.ingress
        .schedules
        .get(&p.tenant, name)
        .await
        .map_err(|e| store(&e))?
        .ok_or_else(|| not_found(name))
}

/// The live state of a schedule, with its most recent fires.
async fn state(st: &AppState, r: &ScheduleRow) -> Result<ScheduleState> {
    let fires = st
        .ingress
        .schedules
        .fires(r.id, 20)
        .await
        .map_err(|e| store(&e))?;
    let fires = fires
        .into_iter()
        .map(|f| ScheduleFire {
            fire_id: uuid(f.id),
            kind: f.kind,
            // A time that does not format (never, for a stored one) was null before too.
            fire_at: ts(Some(f.fire_at)).unwrap_or(Timestamp(String::new())),
            status: f.status,
            run_id: f.run_id.map(uuid),
            run_status: f.run_status,
            error: f.error,
            attempts: f.attempts,
            on_complete: f.on_complete,
            on_complete_result: f.on_complete_result,
        })
        .collect();
    Ok(ScheduleState {
        name: r.name.clone(),
        version: r.def_hash.clone(),
        enabled: r.enabled,
        paused: r.paused,
        retired: r.retired_at.is_some(),
        retired_at: ts(r.retired_at),
        retired_why: r.retired_why.clone(),
        next_fire_at: ts(r.next_fire_at),
        last_fire_at: ts(r.last_fire_at),
        last_run_id: r.last_run_id.map(uuid),
        last_run_status: r.last_run_status.clone(),
        fire_count: r.cron_fires + r.run_now_fires,
        cron_fires: r.cron_fires,
        run_now_fires: r.run_now_fires,
        skipped: r.skipped,
        fires,
    })
}

fn require_admin(p: &Principal) -> Result<()> {
    p.require(Scope::TenantAdmin).map_err(ApiError::native)
}

/// `GET /v1/schedules/{name}/state` (tenant admins: it names the schedule's runs).
pub async fn state_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
) -> Result<Response> {
    // The state names the schedule's runs, which only tenant admins may see.
    require_admin(&p)?;
    let r = schedule_row(&st, &p, &name).await?;
    Ok(Json(state(&st, &r).await?).into_response())
}

/// `POST /v1/schedules/{name}/run-now`: a distinct fire now (not a move of `next_fire_at`).
pub async fn run_now_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
) -> Result<Response> {
    require_admin(&p)?;
    let out = weft_ingress::scheduler::run_now(&st.ingress, &p.tenant, &name)
        .await
        .map_err(ApiError::native)?;
    let Some((fire, run, error)) = out else {
        return Err(not_found(&name));
    };
    Ok((
        StatusCode::ACCEPTED,
        Json(RunNowResult {
            schedule: name,
            fire_id: uuid(fire),
            run_id: run.map(uuid),
            error,
        }),
    )
        .into_response())
}

async fn set_paused(st: &AppState, p: &Principal, name: &str, paused: bool) -> Result<Response> {
    require_admin(p)?;
    let r = schedule_row(st, p, name).await?;
    if r.retired_at.is_some() {
        return Err(ApiError::native(Error::new(
            weft_core::ErrorCode::Conflict,
            format!(
                "schedule `{name}` is retired ({}); put a new version to start it again",
                r.retired_why.as_deref().unwrap_or("retired")
            ),
        )));
    }
    let next = if paused {
        None
    } else {
        ScheduleContent::from_json_str(&r.content)
            .and_then(|c| c.compile())
            .map_err(ApiError::native)?
            .next_after(OffsetDateTime::now_utc())
    };
    st.ingress
        .schedules
        .set_paused(&p.tenant, name, paused, next)
        .await
        .map_err(|e| store(&e))?;
    let r = schedule_row(st, p, name).await?;
    Ok(Json(state(st, &r).await?).into_response())
}

/// `POST /v1/schedules/{name}/pause`.
pub async fn pause_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
) -> Result<Response> {
    set_paused(&st, &p, &name, true).await
}

/// `POST /v1/schedules/{name}/resume`: from the next slot after now; slots passed while paused
/// are not caught up.
pub async fn resume_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
) -> Result<Response> {
    set_paused(&st, &p, &name, false).await
}

/// `DELETE /v1/schedules/{name}`: retires the definition (its versions stay for lineage) and
/// stops the schedule for good; fires already made keep their runs.
pub async fn delete_schedule_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
) -> Result<Response> {
    require_admin(&p)?;
    let req = st
        .internal(
            &p,
            v1::RetireDefRequest {
                kind: v1::DefKind::Schedule.into(),
                name,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.substrate.clone();
    st.substrate_call(client.retire_def(req))
        .await
        .map_err(ApiError::native)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The caller's own webhook definition (a 404 for another tenant's).
async fn webhook_def(st: &AppState, p: &Principal, name: &str) -> Result<WebhookContent> {
    let req = st
        .internal(
            p,
            v1::GetDefRequest {
                kind: v1::DefKind::Webhook.into(),
                name: name.to_owned(),
                version: None,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.substrate.clone();
    let v = st
        .substrate_call(client.get_def(req))
        .await
        .map_err(ApiError::native)?;
    WebhookContent::from_json_str(&v.content_json).map_err(ApiError::native)
}

/// `GET /v1/webhooks/{name}/deliveries`: the last verdicts of deliveries that verified (id,
/// verdict, time, run id; never a payload or a secret), newest first, and the counts of those
/// that did not (`rejected`).
pub async fn deliveries_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
) -> Result<Response> {
    require_admin(&p)?;
    webhook_def(&st, &p, &name).await?;
    let data = weft_ingress::webhooks::deliveries(&st.ingress, &p.tenant, &name)
        .await
        .map_err(ApiError::native)?;
    let rejected = weft_ingress::webhooks::rejected(&st.ingress, &p.tenant, &name)
        .await
        .map_err(ApiError::native)?;
    let body: WebhookDeliveries<Value, Value> = WebhookDeliveries {
        data,
        next_cursor: Default::default(),
        rejected,
    };
    Ok(Json(body).into_response())
}

/// A delivery to try: its headers and raw body (the contract's; the old name stays for the
/// gateway's tests).
pub use weft_api::ingress::WebhookTest as TestBody;

/// `POST /v1/webhooks/{name}/test` `{headers, body}`: a dry run — whether the delivery would
/// verify (and why not), its delivery id, and what the mapping makes of it. Nothing is started,
/// published or burned.
pub async fn test_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    ValidJson(body): NativeJson<TestBody>,
) -> Result<Response> {
    require_admin(&p)?;
    let def = webhook_def(&st, &p, &name).await?;
    if body.headers.len() > 64 {
        return Err(ApiError::native(
            Error::invalid("`headers` may have at most 64 entries").with_param("headers"),
        ));
    }
    let mut headers = HeaderMap::new();
    for (k, v) in &body.headers {
        let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()),
            HeaderValue::from_str(v),
        ) else {
            return Err(ApiError::native(
                Error::invalid(format!(
                    "header `{}` is not a valid HTTP header name and value",
                    k.escape_default()
                ))
                .with_param(format!("headers.{k}")),
            ));
        };
        headers.insert(k, v);
    }
    let out = weft_ingress::webhooks::dry_run(
        &st.ingress,
        &p.tenant,
        &def,
        &headers,
        body.body.as_bytes(),
    );
    Ok(Json(out).into_response())
}

/// `POST /v1/_webhooks/{tenant}/{name}[?sync=true]`.
pub async fn receive_handler(
    State(st): State<AppState>,
    axum::extract::Path((tenant, name)): axum::extract::Path<(String, String)>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    match weft_ingress::sync_param(q.as_deref()) {
        Ok(sync) => {
            weft_ingress::webhooks::receive(&st.ingress, &tenant, &name, sync, &headers, body).await
        }
        // Answered before the body is read: the connection closes.
        Err(e) => weft_ingress::webhooks::closing(weft_ingress::webhooks::error_response(&e)),
    }
}
