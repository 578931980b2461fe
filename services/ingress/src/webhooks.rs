//! The webhook receiver, `POST /v1/_webhooks/{tenant}/{name}` (outside bearer auth; each
//! definition says how deliveries are signed). The order is the contract:
//!
//! 1. resolve the definition from the URL — unknown, disabled or retired: an opaque 404;
//! 2. read the raw body under the definition's cap — 413 past it;
//! 3. verify the signature over the raw bytes, in constant time — any failure: an opaque 401;
//! 4. dedupe by delivery id — a replay of an accepted delivery: 200 with the original run;
//!    an id is burned only once a delivery is accepted;
//! 5. parse (JSON, or a form body as Slack sends) — 400; map — 400;
//! 6. rate limit, fleet-wide in Redis — 429 with `Retry-After`;
//! 7. deliver: start a run (202 `{run_id, delivery_id}`; `?sync=true` waits for the result when
//!    the definition allows it) or publish to a channel.
//!
//! The tenant comes from the URL and the agent, channel and tier from the definition; the
//! payload only ever becomes the run's input (as untrusted content), user and metadata.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use weft_coord::{QuotaCounter, QuotaVerdict};
use weft_core::def::DefContent as _;
use weft_core::webhook::{Mapped, WebhookContent, WebhookTarget};
use weft_core::{Error, ErrorCode, RunId, TenantId};
use weft_launch::{CreateRun, Input, InputPart};
use weft_proto::v1;

use crate::verify::{self, Rejection};
use crate::{Ingress, brief, door_principal};

/// Webhook definitions by (tenant, name), kept briefly so a burst of deliveries costs one
/// substrate call per second per webhook. Absent definitions are kept too.
type CachedDef = (Instant, Option<Arc<WebhookContent>>);

pub struct DefCache {
    ttl: Duration,
    map: Mutex<HashMap<(String, String), CachedDef>>,
}

impl DefCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &(String, String)) -> Option<Option<Arc<WebhookContent>>> {
        let m = self.map.lock().ok()?;
        m.get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, d)| d.clone())
    }

    fn put(&self, key: (String, String), def: Option<Arc<WebhookContent>>) {
        if let Ok(mut m) = self.map.lock() {
            if m.len() > 50_000 {
                m.retain(|_, (at, _)| at.elapsed() < self.ttl);
            }
            m.insert(key, (Instant::now(), def));
        }
    }
}

/// The active, enabled definition of webhook `name` of `tenant`, or `None`.
async fn resolve(
    ing: &Ingress,
    tenant: &TenantId,
    name: &str,
) -> Result<Option<Arc<WebhookContent>>, Error> {
    let key = (tenant.as_str().to_owned(), name.to_owned());
    if let Some(hit) = ing.defs.get(&key) {
        return Ok(hit);
    }
    let p = door_principal(tenant, format!("webhook:{name}"));
    let req = ing.launcher.internal(
        &p,
        v1::GetDefRequest {
            kind: v1::DefKind::Webhook as i32,
            name: name.to_owned(),
            version: None,
        },
    )?;
    let mut client = ing.launcher.substrate.clone();
    let found = match ing.launcher.deadline(client.get_def(req)).await {
        Ok(v) if !v.retired => Some(Arc::new(WebhookContent::from_json_str(&v.content_json)?)),
        Ok(_) => None,
        Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::InvalidRequest) => None,
        Err(e) => return Err(e),
    };
    let found = found.filter(|d| d.enabled);
    ing.defs.put(key, found.clone());
    Ok(found)
}

/// A weft error as an HTTP response (`{"error":{code,message}}`, `Retry-After` when set).
pub fn error_response(e: &Error) -> Response {
    let status =
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, Json(e.native_body())).into_response();
    if let Some(after) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(
            &(after.as_secs() + u64::from(after.subsec_nanos() > 0))
                .max(1)
                .to_string(),
        )
    {
        resp.headers_mut().insert("retry-after", v);
    }
    resp
}

fn opaque_not_found() -> Error {
    Error::not_found("no such webhook")
}

fn bad_url() -> Error {
    Error::invalid(
        "not a webhook URL: POST /v1/_webhooks/{tenant}/{name}, with a tenant and a webhook name of a-z, 0-9, '_' and '-'",
    )
}

/// An answer sent before the body was read: the connection cannot carry another request, so
/// say so (`Connection: close`) instead of dropping it under a keep-alive client.
pub fn closing(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert("connection", HeaderValue::from_static("close"));
    resp
}

fn opaque_unauthorized() -> Error {
    Error::unauthenticated("the webhook signature did not verify")
}

/// The secret of `def`, from the environment variable it names, which must lie in `tenant`'s
/// namespace under the operator's prefix (`weft_core::webhook::secret_namespace`): no other
/// variable of the process is ever read for a tenant.
fn secret(ing: &Ingress, tenant: &TenantId, def: &WebhookContent) -> Result<String, Rejection> {
    if def
        .validate_secret_namespace(&ing.cfg.secret_env_prefix, tenant)
        .is_err()
    {
        return Err(Rejection::BadSecret);
    }
    std::env::var(&def.secret_env).map_err(|_| Rejection::BadSecret)
}

/// What is wrong with `def`'s secret when it cannot be used, for its owner: outside the
/// tenant's namespace (never looked at, so nothing of the operator's environment is told), not
/// set on this process, or `None` when set (then the scheme refused its value).
fn secret_problem(ing: &Ingress, tenant: &TenantId, def: &WebhookContent) -> Option<String> {
    if let Err(e) = def.validate_secret_namespace(&ing.cfg.secret_env_prefix, tenant) {
        return Some(format!("{}; it is never read", e.message));
    }
    std::env::var_os(&def.secret_env).is_none().then(|| {
        format!(
            "the environment variable `{}` is not set on this host; set it on every gateway and ingress process",
            def.secret_env
        )
    })
}

/// The delivery id: the envelope's (or the definition's header), else a hash of the body (a
/// re-sent identical body is the same delivery).
fn delivery_id(verified: Option<String>, body: &[u8]) -> String {
    verified.unwrap_or_else(|| format!("sha256:{}", hex::encode(Sha256::digest(body))))
}

/// A short, fixed-length form of a delivery id for keys.
fn id_digest(id: &str) -> String {
    hex::encode(&Sha256::digest(id.as_bytes())[..16])
}

/// The payload: JSON, or a form body (Slack slash commands) as an object of strings, with a
/// `payload` field that holds JSON (Slack interactivity) parsed.
pub fn parse_payload(headers: &HeaderMap, body: &[u8]) -> Result<Value, Error> {
    let form = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/x-www-form-urlencoded"));
    if form {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body).map_err(|_| {
            Error::invalid("the body is not a valid form (application/x-www-form-urlencoded)")
        })?;
        let mut obj = serde_json::Map::new();
        for (k, v) in pairs {
            let value = if k == "payload" {
                serde_json::from_str(&v).unwrap_or(Value::String(v))
            } else {
                Value::String(v)
            };
            obj.insert(k, value);
        }
        return Ok(Value::Object(obj));
    }
    serde_json::from_slice(body).map_err(|e| {
        Error::invalid(format!(
            "the body is not valid JSON ({e}); send JSON, or a form with content-type application/x-www-form-urlencoded"
        ))
    })
}

fn now_rfc3339() -> String {
    OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_default()
}

/// Records one verdict for triage (ids, verdict, time, run; never a payload or a secret).
async fn triage(ing: &Ingress, tenant: &TenantId, name: &str, entry: Value) {
    let key = ing.coord.keys().webhook_triage(tenant, name);
    let ttl = Duration::from_secs(u64::from(ing.cfg.delivery_retention_days.max(1)) * 86_400);
    if let Err(e) = ing
        .coord
        .push_recent(&key, &entry.to_string(), ing.cfg.triage_keep, ttl)
        .await
    {
        tracing::debug!(error = %e, "webhook triage not recorded");
    }
}

/// Records one verdict given before the sender proved it holds the secret (`unauthorized`, or
/// `too_large` before the body could be verified) apart from the triage list, which keeps only
/// what verified: unsigned POSTs cannot push real deliveries out of it. Each is counted, and
/// the last few are kept with their reasons.
async fn reject(ing: &Ingress, tenant: &TenantId, name: &str, verdict: &str, reason: &str) {
    let keys = ing.coord.keys();
    let ttl = Duration::from_secs(u64::from(ing.cfg.delivery_retention_days.max(1)) * 86_400);
    let at = now_rfc3339();
    let counted = ing
        .coord
        .count_in(
            &keys.webhook_rejects(tenant, name),
            verdict,
            &[("last_at", at.as_str())],
            ttl,
        )
        .await;
    let entry =
        json!({"verdict": verdict, "at": at, "delivery_id": null, "reason": reason}).to_string();
    let kept = ing
        .coord
        .push_recent(
            &keys.webhook_rejects_recent(tenant, name),
            &entry,
            ing.cfg.triage_keep,
            ttl,
        )
        .await;
    if let Err(e) = counted.and(kept) {
        tracing::debug!(error = %e, "webhook rejection not recorded");
    }
}

/// Webhook `name`'s unauthenticated verdicts: `{unauthorized, too_large, last_at, recent}`,
/// the counts over the retention and the last few (`{verdict, at, reason}`, newest first).
pub async fn rejected(ing: &Ingress, tenant: &TenantId, name: &str) -> Result<Value, Error> {
    let keys = ing.coord.keys();
    let unreachable = |e: weft_coord::CoordError| {
        tracing::warn!(error = %e, "triage read");
        Error::unavailable("the delivery log (Redis) is unreachable; retry shortly")
    };
    let h = ing
        .coord
        .counts(&keys.webhook_rejects(tenant, name))
        .await
        .map_err(unreachable)?;
    let recent: Vec<Value> = ing
        .coord
        .recent(&keys.webhook_rejects_recent(tenant, name))
        .await
        .map_err(unreachable)?
        .iter()
        .filter_map(|s| serde_json::from_str(s).ok())
        .collect();
    let count = |k: &str| h.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Ok(json!({
        "unauthorized": count("unauthorized"),
        "too_large": count("too_large"),
        "last_at": h.get("last_at"),
        "recent": recent,
    }))
}

/// The last verdicts of webhook `name`, newest first.
pub async fn deliveries(ing: &Ingress, tenant: &TenantId, name: &str) -> Result<Vec<Value>, Error> {
    let key = ing.coord.keys().webhook_triage(tenant, name);
    let raw = ing.coord.recent(&key).await.map_err(|e| {
        tracing::warn!(error = %e, "triage read");
        Error::unavailable("the delivery log (Redis) is unreachable; retry shortly")
    })?;
    Ok(raw
        .iter()
        .filter_map(|s| serde_json::from_str(s).ok())
        .collect())
}

/// Charges one delivery against the definition's rate limit (fleet-wide).
async fn rate_limit(
    ing: &Ingress,
    tenant: &TenantId,
    name: &str,
    def: &WebhookContent,
) -> Result<(), Error> {
    let Some(rl) = def.rate_limit else {
        return Ok(());
    };
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let now = u64::try_from(now).unwrap_or(0);
    let scope = format!("webhook:{tenant}:{name}");
    let keys = ing.coord.keys();
    let mut counters = vec![QuotaCounter {
        key: keys.quota(&scope, "rpm", now / 60),
        limit: u64::from(rl.per_minute),
        cost: 1,
        // The rest of this minute: a refused sender is told to come back when it ends.
        ttl: Duration::from_secs(60 - now % 60),
    }];
    if let Some(burst) = rl.burst {
        counters.push(QuotaCounter {
            key: keys.quota(&scope, "rps", now),
            limit: u64::from(burst),
            cost: 1,
            ttl: Duration::from_secs(1),
        });
    }
    match ing.coord.charge(&counters).await {
        Ok(QuotaVerdict::Granted { .. }) => Ok(()),
        Ok(QuotaVerdict::Denied { retry_after, .. }) => Err(Error::new(
            ErrorCode::RateLimited,
            format!("webhook `{name}` is over its rate limit; retry later"),
        )
        .with_retry_after(retry_after.max(Duration::from_secs(1)))),
        Err(e) => {
            tracing::warn!(error = %e, "webhook rate limit unavailable");
            Err(Error::unavailable(
                "rate limiting (Redis) is unreachable; retry shortly",
            ))
        }
    }
}

/// What one accepted delivery made.
struct Delivered {
    run_id: Option<RunId>,
    channel_seq: Option<i64>,
}

async fn deliver(
    ing: &Ingress,
    tenant: &TenantId,
    name: &str,
    def: &WebhookContent,
    id: &str,
    dedupe: &str,
    mapped: Mapped,
) -> Result<Delivered, Error> {
    let p = door_principal(tenant, format!("webhook:{name}"));
    let mut metadata = mapped.metadata;
    // Set last: the payload cannot override what weft records.
    if let Some(u) = &mapped.user {
        metadata.insert("user".into(), json!(u));
    }
    metadata.insert("webhook".into(), json!(name));
    metadata.insert("delivery_id".into(), json!(id));
    // Twins racing past the dedupe check make one run (or one message) through this key.
    let key = format!("webhook:{name}:{}", id_digest(dedupe));
    match def.target() {
        Some(WebhookTarget::Agent(agent)) => {
            let body = CreateRun {
                agent: agent.to_owned(),
                input: Some(Input::Parts(vec![InputPart::Untrusted {
                    text: mapped.input,
                }])),
                metadata: Some(Value::Object(metadata)),
                idempotency_key: Some(key),
                ..CreateRun::default()
            };
            let (run, _) = ing.launcher.create_run(&p, body).await?;
            Ok(Delivered {
                run_id: Some(run.id),
                channel_seq: None,
            })
        }
        Some(WebhookTarget::Channel(channel)) => {
            let payload = json!({
                "webhook": name,
                "delivery_id": id,
                "input": mapped.input,
                "user": mapped.user,
                "metadata": metadata,
            });
            let req = ing.launcher.internal(
                &p,
                v1::PublishRequest {
                    name: channel.to_owned(),
                    payload_json: payload.to_string(),
                    op_key: Some(key),
                    agent: None,
                    user: mapped.user.clone(),
                },
            )?;
            let mut c = ing.channels.clone();
            let out = ing.launcher.deadline(c.publish(req)).await?;
            Ok(Delivered {
                run_id: None,
                channel_seq: i64::try_from(out.seq).ok(),
            })
        }
        None => Err(Error::internal()),
    }
}

/// Waits for run `id` to end, up to `timeout`; the run as it stands then.
async fn await_run(
    ing: &Ingress,
    tenant: &TenantId,
    id: RunId,
    timeout: Duration,
) -> Result<Value, Error> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(20);
    loop {
        let run = ing
            .launcher
            .runs
            .get(tenant, id)
            .await
            .map_err(|_| Error::unavailable("the database is unreachable; try again shortly"))?
            .ok_or_else(Error::internal)?;
        if run.status.is_terminal() {
            let output = ing
                .launcher
                .runs
                .last_assistant_text(id)
                .await
                .ok()
                .flatten();
            return Ok(json!({"status": run.status, "output": output, "done": true}));
        }
        if Instant::now() >= deadline {
            return Ok(json!({"status": run.status, "output": null, "done": false}));
        }
        tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// Handles one delivery to `POST /v1/_webhooks/{tenant}/{name}` (see the module docs).
pub async fn receive(
    ing: &Ingress,
    tenant: &str,
    name: &str,
    sync: bool,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    // A URL that cannot name a webhook at all is a 400 (as on every route); one that could but
    // does not is the opaque 404.
    let Ok(tenant) = TenantId::parse(tenant) else {
        return closing(error_response(&bad_url().with_param("tenant")));
    };
    if weft_core::def::validate_def_name(weft_core::def::DefKind::Webhook, name).is_err() {
        return closing(error_response(&bad_url().with_param("name")));
    }
    let def = match resolve(ing, &tenant, name).await {
        Ok(Some(d)) => d,
        Ok(None) => return closing(error_response(&opaque_not_found())),
        Err(e) => return closing(error_response(&e)),
    };
    let started = Instant::now();
    let resp = receive_def(ing, &tenant, name, &def, sync, headers, body).await;
    metrics::histogram!("weft_webhook_delivery_seconds").record(started.elapsed().as_secs_f64());
    metrics::counter!("weft_webhook_deliveries_total", "status" => resp.status().as_u16().to_string()).increment(1);
    resp
}

async fn receive_def(
    ing: &Ingress,
    tenant: &TenantId,
    name: &str,
    def: &WebhookContent,
    sync: bool,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let verdict = |v: &str, id: Option<&str>, extra: Value| {
        let mut e = json!({"verdict": v, "at": now_rfc3339(), "delivery_id": id});
        if let (Some(m), Value::Object(x)) = (e.as_object_mut(), extra) {
            m.extend(x);
        }
        e
    };
    // 2. The raw body, under the cap.
    let cap = usize::try_from(def.effective_max_body_bytes()).unwrap_or(usize::MAX);
    let too_large = || {
        Error::new(
            ErrorCode::PayloadTooLarge,
            format!("the body is larger than this webhook's limit of {cap} bytes"),
        )
    };
    let declared = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > cap as u64) {
        reject(
            ing,
            tenant,
            name,
            "too_large",
            "declared length over the cap",
        )
        .await;
        return closing(error_response(&too_large()));
    }
    let bytes = match http_body_util::Limited::new(body, cap).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            reject(ing, tenant, name, "too_large", "body over the cap").await;
            return closing(error_response(&too_large()));
        }
    };
    // 3. Verify over the raw bytes.
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let verified =
        secret(ing, tenant, def).and_then(|s| verify::verify(def, &s, headers, &bytes, now));
    let verified = match verified {
        Ok(v) => v,
        Err(r) => {
            // The triage log names the real cause (its reader is the webhook's owner).
            let reason = match r {
                Rejection::BadSecret => {
                    tracing::warn!(webhook = %name, tenant = %tenant, namespace = %weft_core::webhook::secret_namespace(&ing.cfg.secret_env_prefix, tenant), "webhook secret missing or unusable: its secret_env must lie in the tenant's namespace and the variable must be set on this process");
                    secret_problem(ing, tenant, def).unwrap_or_else(|| r.reason())
                }
                _ => r.reason(),
            };
            reject(ing, tenant, name, "unauthorized", &reason).await;
            return error_response(&opaque_unauthorized());
        }
    };
    if sync && !def.allow_sync {
        return error_response(
            &Error::invalid(format!(
                "webhook `{name}` does not allow ?sync=true; set `allow_sync: true` on its definition"
            ))
            .with_param("sync"),
        );
    }
    let id_signed = verified.id_signed;
    let id = delivery_id(verified.delivery_id, &bytes);
    // An id the signature does not cover proves nothing (a replay can change or drop it): the
    // body's own id is burned too, and it is the one that makes the run, so one signed body
    // starts one run whatever id header came with it.
    let body_id = delivery_id(None, &bytes);
    let (run_id_key, other_id) = if id_signed || body_id == id {
        (id.as_str(), None)
    } else {
        (body_id.as_str(), Some(id.as_str()))
    };
    // 4. A replay of an accepted delivery (under any of its ids) answers with what it made.
    match ing
        .deliveries
        .find(tenant, name, run_id_key, other_id)
        .await
    {
        Ok(Some(a)) => return replayed(ing, tenant, name, def, &id, &a).await,
        Ok(None) => {}
        Err(e) => return error_response(&e.to_api()),
    }
    // 5. Parse and map.
    let mapped = match parse_payload(headers, &bytes).and_then(|payload| {
        def.mapping()
            .and_then(|m| m.apply(&payload).map_err(Error::invalid))
    }) {
        Ok(m) => m,
        Err(e) => {
            triage(
                ing,
                tenant,
                name,
                verdict("bad_payload", Some(&id), json!({"reason": e.message})),
            )
            .await;
            return error_response(&e);
        }
    };
    // 6. Rate limit.
    if let Err(e) = rate_limit(ing, tenant, name, def).await {
        let v = if e.code == ErrorCode::RateLimited {
            "rate_limited"
        } else {
            "unavailable"
        };
        triage(ing, tenant, name, verdict(v, Some(&id), json!({}))).await;
        return error_response(&e);
    }
    // 7. Deliver, then burn the id.
    let delivered = match deliver(ing, tenant, name, def, &id, run_id_key, mapped).await {
        Ok(d) => d,
        Err(e) => {
            triage(
                ing,
                tenant,
                name,
                verdict("failed", Some(&id), json!({"reason": brief(&e)})),
            )
            .await;
            return error_response(&for_sender(&e));
        }
    };
    let run_uuid = delivered.run_id.map(|r| r.0);
    // Every id in one statement: a replay under any of them is caught.
    let (accepted, first) = match ing
        .deliveries
        .accept(
            tenant,
            name,
            run_id_key,
            other_id,
            run_uuid,
            delivered.channel_seq,
        )
        .await
    {
        Ok(a) => a,
        Err(e) => return error_response(&e.to_api()),
    };
    if !first {
        return replayed(ing, tenant, name, def, &id, &accepted).await;
    }
    triage(
        ing,
        tenant,
        name,
        verdict("accepted", Some(&id), json!({"run_id": run_uuid})),
    )
    .await;
    match (delivered.run_id, def.target()) {
        (Some(run), _) => {
            if sync {
                let timeout = Duration::from_millis(u64::from(def.effective_sync_timeout_ms()));
                return match await_run(ing, tenant, run, timeout).await {
                    Ok(r) if r["done"] == json!(true) => (
                        StatusCode::OK,
                        Json(json!({"run_id": run, "delivery_id": id, "status": r["status"], "output": r["output"]})),
                    )
                        .into_response(),
                    Ok(r) => (
                        StatusCode::ACCEPTED,
                        Json(json!({"run_id": run, "delivery_id": id, "status": r["status"]})),
                    )
                        .into_response(),
                    Err(e) => error_response(&e),
                };
            }
            (
                StatusCode::ACCEPTED,
                Json(json!({"run_id": run, "delivery_id": id})),
            )
                .into_response()
        }
        (None, Some(WebhookTarget::Channel(ch))) => (
            StatusCode::ACCEPTED,
            Json(json!({"delivery_id": id, "channel": ch, "seq": delivered.channel_seq})),
        )
            .into_response(),
        _ => error_response(&Error::internal()),
    }
}

/// What the sender learns of a delivery that verified but could not be delivered: whether to
/// retry, never the definition's internals (its agent, channel or the fix) — its owner reads
/// those in `GET /v1/webhooks/{name}/deliveries`. Nothing was burned: a retry is a new attempt.
fn for_sender(e: &Error) -> Error {
    let passing = matches!(
        e.code,
        ErrorCode::Unavailable
            | ErrorCode::AdmissionUnavailable
            | ErrorCode::TenantPaused
            | ErrorCode::TenantConcurrencyExhausted
            | ErrorCode::RateLimited
            | ErrorCode::UpstreamTimeout
    );
    if passing {
        Error::unavailable("the delivery could not be taken right now; retry later")
            .with_retry_after(e.retry_after.unwrap_or(Duration::from_secs(5)))
    } else {
        Error::internal()
    }
}

/// A replay of accepted delivery `id`: answered with what the first one made, and triaged the
/// first time only, so that one captured body sent again and again (GitHub signs no
/// timestamp) cannot push the other deliveries out of the triage list.
async fn replayed(
    ing: &Ingress,
    tenant: &TenantId,
    name: &str,
    def: &WebhookContent,
    id: &str,
    a: &weft_store::Accepted,
) -> Response {
    let key = ing
        .coord
        .keys()
        .webhook_replay_listed(tenant, name, &id_digest(id));
    let ttl = Duration::from_secs(u64::from(ing.cfg.delivery_retention_days.max(1)) * 86_400);
    // Redis unreachable: listed (the list is best-effort either way).
    if ing.coord.first_time(&key, ttl).await.unwrap_or(true) {
        let entry = json!({"verdict": "replayed", "at": now_rfc3339(), "delivery_id": id, "run_id": a.run_id});
        triage(ing, tenant, name, entry).await;
    }
    replay_response(id, def, a.run_id, a.channel_seq)
}

fn replay_response(
    id: &str,
    def: &WebhookContent,
    run: Option<uuid::Uuid>,
    seq: Option<i64>,
) -> Response {
    let body = match def.target() {
        Some(WebhookTarget::Channel(ch)) => {
            json!({"delivery_id": id, "channel": ch, "seq": seq, "replayed": true})
        }
        _ => json!({"run_id": run, "delivery_id": id, "replayed": true}),
    };
    (StatusCode::OK, Json(body)).into_response()
}

/// A dry run of one delivery against `def`, for the test route: whether it verifies (and why
/// not), its delivery id, and what the mapping makes of it. Nothing is delivered or burned.
pub fn dry_run(
    ing: &Ingress,
    tenant: &TenantId,
    def: &WebhookContent,
    headers: &HeaderMap,
    body: &[u8],
) -> Value {
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let verified =
        secret(ing, tenant, def).and_then(|s| verify::verify(def, &s, headers, body, now));
    let target = match def.target() {
        Some(WebhookTarget::Agent(a)) => json!({"agent": a}),
        Some(WebhookTarget::Channel(c)) => json!({"channel": c}),
        None => Value::Null,
    };
    let (verified_ok, reason, id) = match verified {
        Ok(v) => (true, None, Some(delivery_id(v.delivery_id, body))),
        // The owner's own misconfiguration, said plainly (the dry run is authenticated).
        Err(Rejection::BadSecret) => (
            false,
            Some(secret_problem(ing, tenant, def).unwrap_or_else(|| Rejection::BadSecret.reason())),
            None,
        ),
        Err(r) => (false, Some(r.reason()), None),
    };
    let mapped = parse_payload(headers, body).and_then(|p| {
        def.mapping()
            .and_then(|m| m.apply(&p).map_err(Error::invalid))
    });
    let mapped = match mapped {
        Ok(m) => json!({"input": m.input, "user": m.user, "metadata": m.metadata}),
        Err(e) => json!({"error": e.message}),
    };
    json!({
        "verified": verified_ok,
        "reason": reason,
        "delivery_id": id,
        "target": target,
        "mapped": mapped,
    })
}
