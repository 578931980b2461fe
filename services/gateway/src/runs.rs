//! The run routes: create (JSON or SSE), read, list, transcript pages, the live stream with
//! replay, cancel, input and interruption answers.
//!
//! Scopes: `runs:create` for every POST, `runs:read` for every GET, checked before the body is
//! read. Another tenant's run is a 404 on every route. Principals without `tenant:admin` see
//! only the runs they created.

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::StreamExt as _;
use serde::Deserialize;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::sync::mpsc;
use weft_api::common::{Nullable, Timestamp};
use weft_api::context::{RecallScope, SearchHits};
use weft_api::runs::{CompactAccepted, Run, RunEvent, RunEventPage, RunList};
use weft_bus::Dispatch;
use weft_core::run::{EventKind, RunStatus, StopReason};
use weft_core::{Error, ErrorCode, Principal, RunId, Scope};
use weft_store::{EventRecord, InputKind, RecallFrom, RunFilter, RunRecord};

// `POST /v1/runs` is read by the launcher (shared with the ingress's doors); weft-api's
// `CreateRun` mirrors it for the document (a test below holds the two together).
pub use weft_launch::CreateRun;
// The other bodies are the contract's types.
pub use weft_api::runs::{AnswerBody, CancelBody, InputBody};

use crate::AppState;
use crate::dialect::Sse;
use crate::error::ApiError;
use crate::extract::{NativeJson, NativePath, NativeQuery, OptionalNativeJson, ValidJson};

type Result<T> = std::result::Result<T, ApiError>;

/// Keepalive comments on run streams.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Chunks already waiting are joined into one write up to about this many bytes.
const JOIN_BYTES: usize = 64 * 1024;
/// How long a stream waits without any live event before re-reading the transcript, in case
/// a live message was lost (a publish that failed, a NATS reconnect). Streams wake on live
/// events; this is only the backstop, so an idle stream costs one query per interval.
const CATCH_UP: Duration = Duration::from_secs(30);
/// Events per transcript page read while replaying.
const PAGE: i64 = 500;

/// Run streams open on one gateway replica, per principal (`gateway.max_streams_per_principal`):
/// each holds a NATS subscription and a task, so one principal cannot open them without bound.
pub struct StreamSlots {
    max: u32,
    open: std::sync::Mutex<std::collections::HashMap<(String, String), u32>>,
}

/// One open stream; dropping it frees the slot.
pub struct StreamSlot {
    slots: std::sync::Arc<StreamSlots>,
    key: (String, String),
}

impl StreamSlots {
    pub fn new(max: u32) -> Self {
        Self {
            max,
            open: std::sync::Mutex::default(),
        }
    }

    /// A slot for `p`, or a 429 when it already has the maximum open here.
    pub fn take(
        self: &std::sync::Arc<Self>,
        p: &Principal,
    ) -> std::result::Result<StreamSlot, Error> {
        let key = (p.tenant.as_str().to_owned(), p.subject.clone());
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = open.entry(key.clone()).or_insert(0);
        if *n >= self.max {
            return Err(Error::new(
                ErrorCode::RateLimited,
                format!(
                    "you already have {} run streams open on this gateway (gateway.max_streams_per_principal); close one, or read the transcript with GET /v1/runs/{{id}}/events",
                    self.max
                ),
            )
            .with_retry_after(Duration::from_secs(1)));
        }
        *n += 1;
        Ok(StreamSlot {
            slots: self.clone(),
            key,
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self
            .slots
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// The run routes (the bearer layer is added by the caller).
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/runs", post(create_run_handler).get(list_runs_handler))
        .route("/v1/runs/{id}", get(get_run_handler))
        .route("/v1/runs/{id}/events", get(run_events_handler))
        .route("/v1/runs/{id}/stream", get(stream_run_handler))
        .route("/v1/runs/{id}/cancel", post(cancel_run_handler))
        .route("/v1/runs/{id}/input", post(input_handler))
        .route("/v1/runs/{id}/compact", post(compact_handler))
        .route("/v1/runs/{id}/search", get(search_handler))
        .route(
            "/v1/runs/{id}/interrupts/{interrupt_id}",
            post(answer_interrupt_handler),
        )
        .route_layer(axum::middleware::from_fn(require_run_scope))
}

/// `runs:create` for writes, `runs:read` for reads — before any body is parsed.
pub(crate) async fn require_run_scope(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let scope = if req.method() == Method::GET {
        Scope::RunsRead
    } else {
        Scope::RunsCreate
    };
    match req
        .extensions()
        .get::<Principal>()
        .map(|p| p.require(scope))
    {
        Some(Ok(())) => next.run(req).await,
        Some(Err(e)) => ApiError::native(e).into_response(),
        None => ApiError::native(Error::unauthenticated("missing bearer token")).into_response(),
    }
}

fn ts(t: OffsetDateTime) -> Option<Timestamp> {
    t.format(&Rfc3339).ok().map(Timestamp)
}

/// A creation time: always formattable (it was set by this system, within RFC 3339's years).
pub(crate) fn created(t: OffsetDateTime) -> Timestamp {
    ts(t).unwrap_or_else(|| Timestamp(String::new()))
}

pub(crate) fn run_id(id: RunId) -> weft_api::runs::RunId {
    weft_api::runs::RunId(id.to_string())
}

/// A status as the contract spells it.
pub fn status(s: RunStatus) -> weft_api::runs::RunStatus {
    use weft_api::runs::RunStatus as Api;
    match s {
        RunStatus::Queued => Api::Queued,
        RunStatus::Running => Api::Running,
        RunStatus::AwaitingInput => Api::AwaitingInput,
        RunStatus::Paused => Api::Paused,
        RunStatus::Succeeded => Api::Succeeded,
        RunStatus::Failed => Api::Failed,
        RunStatus::Cancelled => Api::Cancelled,
    }
}

fn stop_reason(s: StopReason) -> weft_api::runs::StopReason {
    use weft_api::runs::StopReason as Api;
    match s {
        StopReason::EndTurn => Api::EndTurn,
        StopReason::MaxIterations => Api::MaxIterations,
        StopReason::MaxTokens => Api::MaxTokens,
        StopReason::Cancelled => Api::Cancelled,
        StopReason::Error => Api::Error,
        StopReason::Timeout => Api::Timeout,
        StopReason::BudgetExhausted => Api::BudgetExhausted,
    }
}

/// The public view of a run.
pub fn run_view(r: &RunRecord) -> Run {
    Run {
        run_id: run_id(r.id),
        status: status(r.status),
        agent: r.agent_name.clone(),
        agent_hash: r.agent_hash.clone(),
        parent_run_id: r.parent_run_id.map(run_id),
        root_run_id: run_id(r.root_run_id),
        depth: r.depth,
        interactive: r.interactive,
        stop_reason: r.stop_reason.map(stop_reason),
        usage: r.usage.clone(),
        iterations: r.iterations,
        metadata: r.spec.get("metadata").cloned().unwrap_or(Value::Null),
        pending_interrupt: r.pending_interrupt.clone(),
        error: r.error.clone(),
        created_at: created(r.created_at),
        started_at: r.started_at.and_then(ts),
        finished_at: r.finished_at.and_then(ts),
        paused_by: r.paused_by.map(pause_scope),
    }
}

pub(crate) fn pause_scope(s: weft_core::run::PauseScope) -> weft_api::runs::PauseScope {
    use weft_api::runs::PauseScope as Api;
    use weft_core::run::PauseScope;
    match s {
        PauseScope::Run => Api::Run,
        PauseScope::Tenant => Api::Tenant,
        PauseScope::Fleet => Api::Fleet,
    }
}

pub(crate) fn store_err(e: weft_store::RunStoreError) -> ApiError {
    match e {
        weft_store::RunStoreError::Store(s) => ApiError::native(s.to_api()),
        weft_store::RunStoreError::StaleLease(_) => ApiError::native(Error::internal()),
    }
}

pub(crate) fn bus_err(e: &weft_bus::BusError) -> ApiError {
    tracing::warn!(error = %e, "nats unavailable");
    ApiError::native(Error::unavailable(
        "run dispatch (NATS) is unavailable; retry shortly",
    ))
}

fn admission_err(e: &weft_coord::CoordError) -> ApiError {
    tracing::warn!(error = %e, "admission unavailable");
    ApiError::native(Error::new(
        ErrorCode::AdmissionUnavailable,
        "admission is unavailable (Redis is unreachable), so no run can start; retry shortly",
    ))
}

fn not_found(id: &str) -> ApiError {
    ApiError::native(Error::not_found(format!("no run `{id}`")))
}

/// Parses a run id; a malformed one is a 404 like any unknown id.
fn parse_id(id: &str) -> Result<RunId> {
    id.parse::<RunId>().map_err(|_| not_found(id))
}

/// The run if this principal may see it: same tenant, and its own unless a tenant admin.
pub(crate) async fn visible_run(st: &AppState, p: &Principal, id: &str) -> Result<RunRecord> {
    let rid = parse_id(id)?;
    let run = st
        .runs
        .get(&p.tenant, rid)
        .await
        .map_err(store_err)?
        .ok_or_else(|| not_found(id))?;
    if !sees_all(p) && run.subject != p.subject {
        return Err(not_found(id));
    }
    Ok(run)
}

fn sees_all(p: &Principal) -> bool {
    p.is_admin() || p.scopes.contains(Scope::TenantAdmin)
}

/// `POST /v1/runs`.
#[tracing::instrument(skip_all, fields(tenant = %p.tenant))]
pub async fn create_run_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    headers: HeaderMap,
    ValidJson(mut body): NativeJson<CreateRun>,
) -> Result<Response> {
    crate::plans::create::check_create(&st, &p, &mut body).await?;
    let wants_sse = body.stream
        || headers
            .get("accept")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/event-stream"));
    // The stream's slot is taken first, so a refused stream never leaves a run behind.
    let slot = if wants_sse {
        Some(st.streams.take(&p).map_err(ApiError::native)?)
    } else {
        None
    };
    let (run, created) = st
        .launcher
        .create_run(&p, body)
        .await
        .map_err(ApiError::native)?;
    if let Some(slot) = slot {
        let mut resp = stream_response(st, run.id, 1, slot).into_response();
        // The run's id before the first frame, so a client can cancel or re-attach at once.
        if let Ok(v) = axum::http::HeaderValue::from_str(&run.id.to_string()) {
            resp.headers_mut().insert("x-weft-run-id", v);
        }
        return Ok(resp);
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(run_view(&run))).into_response())
}

/// `GET /v1/runs/{id}`.
pub async fn get_run_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
) -> Result<Json<Run>> {
    Ok(Json(run_view(&visible_run(&st, &p, &id).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    agent: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
    since: Option<String>,
}

/// `GET /v1/runs`.
pub async fn list_runs_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativeQuery(q): NativeQuery<ListQuery>,
) -> Result<Json<RunList>> {
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
            ApiError::native(Error::invalid(format!(
                "`status` must be one of queued, running, awaiting_input, succeeded, failed, cancelled; got {s:?}"
            )).with_param("status"))
        })?),
    };
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::native(
            Error::invalid(format!("`limit` must be between 1 and 500, got {limit}"))
                .with_param("limit"),
        ));
    }
    let before = match q.cursor.as_deref() {
        None => None,
        Some(c) => Some(c.parse::<RunId>().map_err(|_| {
            ApiError::native(
                Error::invalid("`cursor` must be the `next_cursor` of a previous page")
                    .with_param("cursor"),
            )
        })?),
    };
    let since = match q.since.as_deref() {
        None => None,
        Some(t) => Some(OffsetDateTime::parse(t, &Rfc3339).map_err(|_| {
            ApiError::native(
                Error::invalid(format!(
                    "`since` must be an RFC 3339 time such as 2026-11-28T09:00:00Z; got {t:?}"
                ))
                .with_param("since"),
            )
        })?),
    };
    let filter = RunFilter {
        subject: (!sees_all(&p)).then(|| p.subject.clone()),
        status,
        agent: q.agent,
        before,
        since,
        limit,
    };
    let runs = st.runs.list(&p.tenant, &filter).await.map_err(store_err)?;
    let next = (runs.len() == usize::try_from(limit).unwrap_or(0))
        .then(|| runs.last().map(|r| r.id))
        .flatten();
    let data: Vec<Run> = runs.iter().map(run_view).collect();
    // `runs`: the old key, kept one release beside the list envelope's `data`.
    Ok(Json(RunList {
        runs: data.clone(),
        data,
        next_cursor: Nullable(next.map(|id| id.to_string())),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    from_seq: Option<i64>,
    limit: Option<i64>,
}

fn event_view(e: &EventRecord) -> RunEvent {
    RunEvent {
        seq: e.seq,
        kind: e.kind.clone(),
        data: e.data.clone(),
        created_at: created(e.created_at),
    }
}

/// `GET /v1/runs/{id}/events`.
pub async fn run_events_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
    NativeQuery(q): NativeQuery<EventsQuery>,
) -> Result<Json<RunEventPage>> {
    let run = visible_run(&st, &p, &id).await?;
    let limit = q.limit.unwrap_or(PAGE);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::native(
            Error::invalid(format!("`limit` must be between 1 and 1000, got {limit}"))
                .with_param("limit"),
        ));
    }
    let from = q.from_seq.unwrap_or(1).max(1);
    let events = st
        .runs
        .events(run.id, from, limit)
        .await
        .map_err(store_err)?;
    let next = events.last().map(|e| e.seq + 1);
    let data: Vec<RunEvent> = events.iter().map(event_view).collect();
    // `events` and `next_seq`: the old keys, kept one release beside the list envelope's
    // `data` and `next_cursor` (the `from_seq` of the next page).
    Ok(Json(RunEventPage {
        run_id: run_id(run.id),
        status: status(run.status),
        events: data.clone(),
        data,
        next_cursor: next,
        next_seq: Nullable(next),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    from_seq: Option<i64>,
}

/// `GET /v1/runs/{id}/stream?from_seq=N` (or `Last-Event-ID: N-1`).
pub async fn stream_run_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
    NativeQuery(q): NativeQuery<StreamQuery>,
    headers: HeaderMap,
) -> Result<Response> {
    let run = visible_run(&st, &p, &id).await?;
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok());
    let from = q.from_seq.or(last_id.map(|l| l + 1)).unwrap_or(1).max(1);
    let slot = st.streams.take(&p).map_err(ApiError::native)?;
    Ok(stream_response(st, run.id, from, slot).into_response())
}

/// The SSE stream of a run from `from_seq`: the transcript replayed from Postgres, then live
/// events — from memory while an executor of this process works on the run, from NATS
/// otherwise — deduplicated and gap-filled by seq, until the run finishes.
///
/// Frames are written a step at a time: the events of one executor step (or one transcript page,
/// or one NATS message) are serialized into one buffer and go out as one body chunk, and chunks
/// already waiting when the body is polled are joined into the same write.
fn stream_response(st: AppState, run: RunId, from_seq: i64, slot: StreamSlot) -> Response {
    // As many chunks as there were events before: a `text_delta` is a chunk of its own.
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(async move {
        // Held for as long as the stream's task runs: it ends when the run finishes or the
        // client goes away.
        let tx = tx;
        let mut out = Sse::default();
        if let Err(e) = pump(&st, run, from_seq, &tx, &mut out).await {
            out.json(
                Some("error"),
                &weft_api::ErrorBody {
                    code: e.code.as_str().into(),
                    message: e.message,
                    kind: None,
                    param: None,
                },
            );
            flush(&mut out, &tx).await;
        }
        // The slot goes back before the sender closes: a client that has read the end of its
        // stream can open another at once.
        drop(slot);
        drop(tx);
    });
    let body = futures::stream::unfold(Body { rx }, |mut b| async move {
        let chunk = b.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), b))
    });
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

/// A stream's body: the pump's chunks, those already waiting joined into one write, and a
/// keepalive comment when nothing was written for [`KEEPALIVE`].
struct Body {
    rx: mpsc::Receiver<Bytes>,
}

impl Body {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        let first = match tokio::time::timeout(KEEPALIVE, self.rx.recv()).await {
            Ok(chunk) => chunk?,
            Err(_) => return Some(Bytes::from_static(b": keepalive\n\n")),
        };
        let Ok(second) = self.rx.try_recv() else {
            return Some(first);
        };
        let mut joined = Vec::with_capacity(first.len() + second.len());
        joined.extend_from_slice(&first);
        joined.extend_from_slice(&second);
        while joined.len() < JOIN_BYTES
            && let Ok(more) = self.rx.try_recv()
        {
            joined.extend_from_slice(&more);
        }
        Some(Bytes::from(joined))
    }
}

/// The data of a run stream frame.
#[derive(serde::Serialize)]
struct FrameData<'a> {
    // In the order `json!` wrote them before (sorted): a frame's bytes did not change.
    data: &'a Value,
    kind: &'a str,
    seq: i64,
}

/// Writes the frame of one event: `id: <seq>`, `event: <kind>`, `data: {"data","kind","seq"}`.
fn push_frame(out: &mut Sse, seq: i64, kind: &str, data: &Value) {
    out.id(seq);
    out.json(Some(kind), &FrameData { data, kind, seq });
}

/// Hands the frames written to the body; false when the client went away.
async fn flush(out: &mut Sse, tx: &mpsc::Sender<Bytes>) -> bool {
    match out.take() {
        None => !tx.is_closed(),
        Some(chunk) => tx.send(chunk).await.is_ok(),
    }
}

/// Writes transcript events after `*last` until none are left, a page per chunk; `Some(true)`
/// when the run finished, `None` when the client went away.
async fn catch_up(
    st: &AppState,
    run: RunId,
    last: &mut i64,
    tx: &mpsc::Sender<Bytes>,
    out: &mut Sse,
) -> std::result::Result<Option<bool>, Error> {
    loop {
        let page = st
            .runs
            .events(run, *last + 1, PAGE)
            .await
            .map_err(|e| store_err(e).0)?;
        let n = page.len();
        let mut finished = false;
        for e in page {
            *last = e.seq;
            push_frame(out, e.seq, &e.kind, &e.data);
            if e.kind == EventKind::RunFinished.as_str() {
                finished = true;
                break;
            }
        }
        if !flush(out, tx).await {
            return Ok(None);
        }
        if finished {
            return Ok(Some(true));
        }
        if i64::try_from(n).unwrap_or(0) < PAGE {
            return Ok(Some(false));
        }
    }
}

/// What a live event did to a stream.
enum Flow {
    Go,
    /// The run finished, or the client went away.
    End,
}

/// Writes one live event: a live-only delta after the event it follows, a persisted event in seq
/// order (a gap is filled from the transcript, a duplicate dropped). The caller flushes.
async fn deliver(
    st: &AppState,
    run: RunId,
    ev: &weft_bus::LiveEvent,
    last: &mut i64,
    tx: &mpsc::Sender<Bytes>,
    out: &mut Sse,
) -> std::result::Result<Flow, Error> {
    if !ev.persisted {
        // Live-only deltas belong after the event they follow.
        if ev.seq >= *last {
            push_frame(out, ev.seq, &ev.kind, &ev.data);
        }
        return Ok(Flow::Go);
    }
    if ev.seq <= *last {
        return Ok(Flow::Go);
    }
    if ev.seq > *last + 1 {
        // A gap: the transcript has what we missed (it commits in seq order).
        return Ok(match catch_up(st, run, last, tx, out).await? {
            None | Some(true) => Flow::End,
            Some(false) => Flow::Go,
        });
    }
    *last = ev.seq;
    push_frame(out, ev.seq, &ev.kind, &ev.data);
    if ev.kind == EventKind::RunFinished.as_str() {
        return Ok(Flow::End);
    }
    Ok(Flow::Go)
}

/// Writes a batch of live events (one step, one NATS message) as one chunk; `End` when the run
/// finished or the client went away.
async fn deliver_all<'a>(
    st: &AppState,
    run: RunId,
    batch: impl IntoIterator<Item = &'a weft_bus::LiveEvent>,
    last: &mut i64,
    tx: &mpsc::Sender<Bytes>,
    out: &mut Sse,
) -> std::result::Result<Flow, Error> {
    let mut flow = Flow::Go;
    for ev in batch {
        flow = deliver(st, run, ev, last, tx, out).await?;
        if let Flow::End = flow {
            break;
        }
    }
    if !flush(out, tx).await {
        return Ok(Flow::End);
    }
    Ok(flow)
}

async fn pump(
    st: &AppState,
    run: RunId,
    from_seq: i64,
    tx: &mpsc::Sender<Bytes>,
    out: &mut Sse,
) -> std::result::Result<(), Error> {
    let mut last = from_seq - 1;
    // A run an executor of this process works on: its events come through memory, and the
    // transcript is read once more when it leaves (finished, parked, handed back).
    if let Some(mut local) = st.hub.watch(run) {
        match catch_up(st, run, &mut last, tx, out).await? {
            None | Some(true) => return Ok(()),
            Some(false) => {}
        }
        loop {
            let batch = tokio::select! {
                b = local.recv() => b,
                () = tx.closed() => return Ok(()),
            };
            let Some(batch) = batch else { break };
            if let Flow::End = deliver_all(st, run, batch.iter(), &mut last, tx, out).await? {
                return Ok(());
            }
        }
    }
    // Subscribe first, then replay: anything published meanwhile is either in the replay or
    // arrives live with a seq the replay already covered (dropped as a duplicate).
    let mut sub = st
        .bus
        .subscribe_events(run)
        .await
        .map_err(|e| bus_err(&e).0)?;
    match catch_up(st, run, &mut last, tx, out).await? {
        None | Some(true) => return Ok(()),
        Some(false) => {}
    }
    loop {
        let msg = tokio::select! {
            m = sub.next() => m,
            () = tokio::time::sleep(CATCH_UP) => {
                // Quiet: read the transcript in case a live message was lost.
                match catch_up(st, run, &mut last, tx, out).await? {
                    None | Some(true) => return Ok(()),
                    Some(false) => continue,
                }
            }
            () = tx.closed() => return Ok(()),
        };
        let Some(msg) = msg else { return Ok(()) };
        let events = weft_bus::decode_events(&msg.payload);
        if let Flow::End = deliver_all(st, run, events.iter(), &mut last, tx, out).await? {
            return Ok(());
        }
    }
}

/// `POST /v1/runs/{id}/cancel`: flags the run in Redis and tells its executor; a run nobody
/// holds is ended here. Cascades to sub-runs.
pub async fn cancel_run_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
    OptionalNativeJson(body): OptionalNativeJson<CancelBody>,
) -> Result<(StatusCode, Json<Run>)> {
    let run = visible_run(&st, &p, &id).await?;
    if run.status.is_terminal() {
        return Ok((StatusCode::OK, Json(run_view(&run))));
    }
    let reason = body.reason;
    let targets = with_live_descendants(&st, &p, run.id).await?;
    for target in targets {
        st.coord
            .cancel(target)
            .await
            .map_err(|e| admission_err(&e))?;
        // Sub-runs hold slots of their own, so every run ended here gives its slot back.
        if let Some((seq, data)) = st
            .runs
            .cancel_unheld_event(target, reason.as_deref())
            .await
            .map_err(store_err)?
        {
            let _ = st.coord.release(&p.tenant, target).await;
            // No executor holds the run, so none will tell its watchers it ended: a stream
            // open on it (a parked run's) would otherwise wait for nothing.
            let live: weft_bus::LiveBatch = vec![weft_bus::LiveEvent {
                seq,
                kind: "run_finished".into(),
                persisted: true,
                data,
            }]
            .into();
            st.hub.publish(target, &live);
            if let Err(e) = st.bus.publish_events(target, &live).await {
                tracing::debug!(error = %e, "run_finished not published; watchers read it from the transcript");
            }
        }
    }
    let now = reread(&st, &p, run).await?;
    let code = if now.status.is_terminal() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((code, Json(run_view(&now))))
}

/// `run` and its sub-runs that have not ended (what a cancel or a pause reaches).
pub(crate) async fn with_live_descendants(
    st: &AppState,
    p: &Principal,
    run: RunId,
) -> Result<Vec<RunId>> {
    let mut targets = vec![run];
    targets.extend(
        st.runs
            .live_descendants(&p.tenant, run)
            .await
            .map_err(store_err)?,
    );
    Ok(targets)
}

/// `run` as it is now (after a wake, a cancel, a pause), or as it was read should it be gone.
pub(crate) async fn reread(st: &AppState, p: &Principal, run: RunRecord) -> Result<RunRecord> {
    Ok(st
        .runs
        .get(&p.tenant, run.id)
        .await
        .map_err(store_err)?
        .unwrap_or(run))
}

/// `POST /v1/runs/{id}/input`: steers a running run or wakes a parked one.
pub async fn input_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
    ValidJson(body): NativeJson<InputBody>,
) -> Result<(StatusCode, Json<Run>)> {
    let run = visible_run(&st, &p, &id).await?;
    if body.text.is_empty() {
        return Err(ApiError::native(
            Error::invalid("`text` must not be empty").with_param("text"),
        ));
    }
    if run.status == RunStatus::AwaitingInput && run.pending_interrupt.is_some() {
        return Err(ApiError::native(Error::new(
            ErrorCode::Conflict,
            "the run is waiting for an answer to an interruption; answer it with POST /v1/runs/{id}/interrupts/{interrupt_id}",
        )));
    }
    queue(&st, &p, &run, InputKind::Text, &body.text).await?;
    let now = reread(&st, &p, run).await?;
    Ok((StatusCode::ACCEPTED, Json(run_view(&now))))
}

/// Queues a pending input of `kind` for `run`: a parked run is admitted again (it takes one of
/// its tenant's slots) and dispatched; a running one is told input is waiting.
async fn queue(
    st: &AppState,
    p: &Principal,
    run: &RunRecord,
    kind: InputKind,
    text: &str,
) -> Result<()> {
    // Waking a parked run admits it again; steering a running one takes no slot.
    let took = if run.status == RunStatus::AwaitingInput {
        st.launcher
            .admit(p, run.id)
            .await
            .map_err(ApiError::native)?
    } else {
        false
    };
    let added = st.runs.add_pending(&p.tenant, run.id, kind, text).await;
    let woke = match added {
        Ok(Ok(true)) => true,
        Ok(Ok(false)) => {
            // Nothing woke (the run was running, or another input woke it first and took its
            // own slot): a slot taken here would be held by nobody.
            if took {
                let _ = st.coord.release(&p.tenant, run.id).await;
            }
            false
        }
        Err(e) => {
            if took {
                let _ = st.coord.release(&p.tenant, run.id).await;
            }
            return Err(store_err(e));
        }
        Ok(Err(status)) => {
            if took {
                let _ = st.coord.release(&p.tenant, run.id).await;
            }
            return Err(ApiError::native(Error::new(
                ErrorCode::Conflict,
                format!("the run has ended ({status}); start a new run"),
            )));
        }
    };
    if woke {
        st.bus
            .dispatch(&Dispatch {
                run_id: run.id,
                tenant: run.tenant.clone(),
            })
            .await
            .map_err(|e| bus_err(&e))?;
    } else {
        let _ = st.coord.notify_input(run.id).await;
    }
    Ok(())
}

/// `POST /v1/runs/{id}/compact`: compacts a parked run's context. The run wakes, compacts and
/// parks again; `context_compacted` (after `after_seq`) says what it did. A run working on a
/// turn is not stopped for it (409): the agent can ask with `Context {op: compact}`, and
/// `compaction.auto_percent` compacts before a turn that would not fit.
pub async fn compact_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
) -> Result<(StatusCode, Json<CompactAccepted>)> {
    let run = visible_run(&st, &p, &id).await?;
    let conflict = |m: String| Err(ApiError::native(Error::new(ErrorCode::Conflict, m)));
    if run.status.is_terminal() {
        return conflict(format!(
            "the run has ended ({}); a finished run's transcript is kept whole and GET /v1/runs/{{id}}/search reads it",
            run.status
        ));
    }
    if run.status != RunStatus::AwaitingInput {
        return conflict(format!(
            "the run is {}: a turn is in flight. Compact a run while it waits for input, have its agent call Context {{\"op\": \"compact\"}}, or set `compaction.auto_percent` on the agent or the run",
            run.status
        ));
    }
    if run.pending_interrupt.is_some() {
        return conflict(
            "the run waits for an answer to an interruption; answer it first with POST /v1/runs/{id}/interrupts/{interrupt_id}".to_owned(),
        );
    }
    let after_seq = st.runs.last_seq(run.id).await.map_err(store_err)?;
    queue(&st, &p, &run, InputKind::Compact, "").await?;
    let now = reread(&st, &p, run).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(CompactAccepted {
            run: run_view(&now),
            after_seq,
        }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchQuery {
    q: Option<String>,
    scope: Option<RecallScope>,
    limit: Option<u32>,
}

/// `GET /v1/runs/{id}/search?q=&scope=&limit=`: full-text search over the run's history, and by
/// scope its user's earlier runs (never another user's or tenant's).
pub async fn search_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
    NativeQuery(q): NativeQuery<SearchQuery>,
) -> Result<Json<SearchHits>> {
    let run = visible_run(&st, &p, &id).await?;
    let query = q.q.unwrap_or_default();
    if query.trim().is_empty() || query.len() > 1000 || query.contains('\0') {
        return Err(ApiError::native(
            Error::invalid(
                "`q` is 1 to 1000 bytes of words to find (no NUL), e.g. ?q=invoice+4711",
            )
            .with_param("q"),
        ));
    }
    let limit = q.limit.unwrap_or(10);
    if !(1..=50).contains(&limit) {
        return Err(ApiError::native(
            Error::invalid(format!("`limit` must be between 1 and 50, got {limit}"))
                .with_param("limit"),
        ));
    }
    let from = RecallFrom {
        tenant: &run.tenant,
        run: run.id,
        subject: &run.subject,
        agent: &run.agent_name,
    };
    let hits = st
        .runs
        .recall_search(&from, q.scope.unwrap_or_default(), &query, limit)
        .await
        .map_err(store_err)?;
    Ok(Json(hits))
}

/// `POST /v1/runs/{id}/interrupts/{interrupt_id}`: answers an `Interruption.ask`.
pub async fn answer_interrupt_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath((id, interrupt_id)): NativePath<(String, String)>,
    ValidJson(body): NativeJson<AnswerBody>,
) -> Result<(StatusCode, Json<Run>)> {
    let run = visible_run(&st, &p, &id).await?;
    let not_waiting = || {
        ApiError::native(Error::not_found(format!(
            "run `{id}` is not waiting on interruption `{interrupt_id}`"
        )))
    };
    // Only a run parked on this very interruption is admitted: anything else is a 404 that
    // touches no admission slot (a running run's slot stays its own).
    let pending = run
        .pending_interrupt
        .as_ref()
        .and_then(|i| i.get("id"))
        .and_then(Value::as_str);
    if run.status != RunStatus::AwaitingInput || pending != Some(interrupt_id.as_str()) {
        return Err(not_waiting());
    }
    let took = st
        .launcher
        .admit(&p, run.id)
        .await
        .map_err(ApiError::native)?;
    let answered = st
        .runs
        .answer_interrupt(&p.tenant, run.id, &interrupt_id, &body.answer)
        .await;
    if !matches!(answered, Ok(true)) {
        // Answered by someone else meanwhile (they hold the run's slot now), or a failure.
        if took {
            let _ = st.coord.release(&p.tenant, run.id).await;
        }
        return Err(answered
            .map_err(store_err)
            .err()
            .unwrap_or_else(not_waiting));
    }
    st.bus
        .dispatch(&Dispatch {
            run_id: run.id,
            tenant: run.tenant.clone(),
        })
        .await
        .map_err(|e| bus_err(&e))?;
    let now = reread(&st, &p, run).await?;
    Ok((StatusCode::ACCEPTED, Json(run_view(&now))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contracts_create_run_is_what_the_launcher_reads() {
        // weft-api's CreateRun documents the body the launcher reads: its example, and a body
        // with every field the contract has, are read here.
        let doc = weft_api::document();
        let example = &doc["components"]["schemas"]["CreateRun"]["example"];
        assert!(example.is_object(), "{example}");
        crate::extract::parse_native::<CreateRun>(example.to_string().as_bytes()).unwrap();
        let full = weft_api::runs::CreateRun {
            agent: "triage".into(),
            input: Some(weft_api::runs::Input::Parts(vec![
                weft_api::runs::InputPart::Text { text: "a".into() },
                weft_api::runs::InputPart::Untrusted { text: "b".into() },
            ])),
            messages: Some(vec![weft_api::runs::InputMessage {
                role: weft_api::runs::InputRole::Assistant,
                content: "c".into(),
            }]),
            tools: Some(vec!["t".into()]),
            allowed_hosts: Some(Vec::new()),
            interactive: true,
            metadata: Some(serde_json::json!({"k": 1})),
            sampling: Some(weft_api::common::AgentSampling {
                temperature: Some(0.5),
                top_p: Some(0.5),
                seed: Some(7),
                stop: vec!["x".into()],
            }),
            max_iterations: Some(3),
            credentials: Some([("key".to_owned(), "12345678".to_owned())].into()),
            idempotency_key: Some("k".into()),
            stream: true,
            volumes: Some(vec![weft_api::volumes::VolumeBinding {
                name: "run".into(),
                mode: weft_api::volumes::VolumeMode::Ro,
                default: true,
            }]),
            mode: weft_api::plans::RunMode::Plan,
            compaction: Some(weft_api::context::Compaction {
                auto_percent: Some(70),
                keep_turns: Some(2),
                model: Some("tier:cheap".into()),
                window_tokens: Some(4096),
                result_max_bytes: Some(1024),
                turn_result_max_bytes: Some(4096),
            }),
            plan: Some(weft_api::plans::PlanSpec {
                planner: Some("planner".into()),
                verifier: Some("checker".into()),
                voters: vec!["checker".into()],
                replanner: Some("replanner".into()),
                escalation: vec!["tier:strong".into()],
                tasks: Some(vec![weft_api::plans::Task {
                    id: "report".into(),
                    description: "write report.md".into(),
                    depends_on: Vec::new(),
                    agent: Some("writer".into()),
                    writes: vec!["report.md".into()],
                    checks: vec![weft_api::plans::Check::NonEmpty {
                        path: "report.md".into(),
                    }],
                    acceptance: "names the three largest rows".into(),
                    verify: weft_api::plans::VerifyMode::Vote,
                    votes: Some(3),
                    critical: true,
                    r#final: true,
                }]),
                approval: weft_api::plans::Approval::BeforeExecute,
                volume: Some("work".into()),
                limits: weft_api::plans::PlanLimits::default(),
                process: Some("csv-report".into()),
                process_version: Some("sha256:00".into()),
                phase_mode: Some(weft_api::plans::PhaseMode::Guided),
                phases: Some(Vec::new()),
                persona: Some("careful".into()),
                tools_required: vec!["Write".into()],
                tools_excluded: vec!["HTTP".into()],
            }),
        };
        let text = serde_json::to_string(&full).unwrap();
        let read: CreateRun = crate::extract::parse_native(text.as_bytes()).unwrap();
        assert!(
            read.stream && read.interactive && read.sampling.is_some(),
            "{text}"
        );
        assert!(
            read.mode == weft_core::plan::RunMode::Plan
                && read.plan.as_ref().and_then(|p| p.tasks.as_ref()).is_some(),
            "{text}"
        );
        // And the other way: a field the contract lacks is refused, as the mirror would.
        assert!(crate::extract::parse_native::<CreateRun>(br#"{"agent":"a","extra":1}"#).is_err());
    }

    #[test]
    fn a_run_reads_as_before() {
        // The typed view writes the JSON `json!` wrote: every key, nulls included.
        let id = RunId::new();
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let r = RunRecord {
            id,
            tenant: weft_core::TenantId::parse("default").unwrap(),
            subject: "alice".into(),
            agent_name: "triage".into(),
            agent_hash: "h".into(),
            parent_run_id: None,
            root_run_id: id,
            depth: 0,
            status: RunStatus::AwaitingInput,
            stop_reason: None,
            interactive: true,
            spec: serde_json::json!({}),
            idempotency_key: None,
            lease_epoch: 0,
            lease_owner: None,
            pending_interrupt: Some(serde_json::json!({"id": "i1"})),
            usage: serde_json::json!({"input_tokens": 1}),
            iterations: 2,
            error: None,
            created_at: now,
            started_at: Some(now),
            finished_at: None,
            paused_by: None,
        };
        let v = serde_json::to_value(run_view(&r)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "run_id": id,
                "status": "awaiting_input",
                "agent": "triage",
                "agent_hash": "h",
                "parent_run_id": null,
                "root_run_id": id,
                "depth": 0,
                "interactive": true,
                "stop_reason": null,
                "usage": {"input_tokens": 1},
                "iterations": 2,
                "metadata": null,
                "pending_interrupt": {"id": "i1"},
                "error": null,
                "created_at": "2027-01-15T08:00:00Z",
                "started_at": "2027-01-15T08:00:00Z",
                "finished_at": null,
            })
        );
        for s in RunStatus::ALL {
            assert_eq!(serde_json::to_value(status(*s)).unwrap(), s.as_str());
        }
        for s in StopReason::ALL {
            assert_eq!(serde_json::to_value(stop_reason(*s)).unwrap(), s.as_str());
        }
    }
}
