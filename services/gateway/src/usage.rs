//! Usage: the writer that moves usage records from the JetStream usage stream into the `usage`
//! table, and `GET /v1/usage`, the per-tenant summary over that table.
//!
//! The writer acks a record only after the statement that stored it committed. A crash in
//! between loses nothing: the unacked records are redelivered (to this replica after a restart,
//! or to another one after the ack wait) and the table's primary key absorbs the second copy.
//! Every gateway replica runs one writer; they share one durable consumer, so each record goes
//! to one of them at a time.

use std::time::Duration;
use weft_core::rfc3339;

use async_nats::jetstream::{self, AckKind};
use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt as _;
use serde::Deserialize;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio_util::sync::CancellationToken;
use weft_api::common::{NextCursor, Timestamp};
use weft_api::usage::{GroupKey, UsageGroup, UsageSummary};
use weft_bus::Bus;
use weft_core::{Error, Principal, Scope, TenantId, UsageRecord};
use weft_store::usage::unstorable;
use weft_store::{GroupBy, StoreError, UsageRow, UsageStore};

use crate::AppState;
use crate::error::ApiError;

/// The most messages one pull takes (a message carries one record or up to 256).
const BATCH_MAX: usize = 500;
/// The most records one insert statement carries.
const INSERT_MAX: usize = 1_000;
/// How long the writer waits for more records once the first of a batch arrived.
const BATCH_WINDOW: Duration = Duration::from_millis(50);
/// The writer's backoff after a failure, doubling up to the cap.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Writes usage records from the usage stream to `store` until `shutdown`, then writes what it
/// already pulled and returns. Errors (NATS or Postgres unreachable) are logged and retried with
/// backoff; it never gives up on its own.
pub async fn run_usage_writer(bus: Bus, store: UsageStore, shutdown: CancellationToken) {
    let mut backoff = Backoff::default();
    tracing::info!("usage writer started");
    'subscribe: while !shutdown.is_cancelled() {
        let consumer = match bus.usage_consumer().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "usage writer cannot reach its consumer; retrying");
                if backoff.wait(&shutdown).await {
                    continue;
                }
                break;
            }
        };
        let mut messages = match consumer
            .stream()
            .max_messages_per_batch(BATCH_MAX)
            .messages()
            .await
        {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "usage writer cannot pull from jetstream; retrying");
                if backoff.wait(&shutdown).await {
                    continue;
                }
                break;
            }
        };
        loop {
            let first = tokio::select! {
                biased;
                () = shutdown.cancelled() => {
                    // Write what already arrived rather than leave it to the ack wait.
                    let mut batch = Vec::new();
                    gather(&mut messages, &mut batch).await;
                    write(&store, batch, &backoff).await;
                    break 'subscribe;
                }
                m = messages.next() => m,
            };
            let mut batch = match first {
                Some(Ok(m)) => vec![m],
                other => {
                    if let Some(Err(e)) = other {
                        tracing::warn!(error = %e, "usage pull failed; re-subscribing");
                    }
                    if backoff.wait(&shutdown).await {
                        continue 'subscribe;
                    }
                    break 'subscribe;
                }
            };
            gather(&mut messages, &mut batch).await;
            if write(&store, batch, &backoff).await {
                backoff.reset();
            } else if !backoff.wait(&shutdown).await {
                break 'subscribe;
            }
        }
    }
    tracing::info!("usage writer stopped");
}

/// Adds to `batch` whatever arrives within [`BATCH_WINDOW`], up to [`BATCH_MAX`] in all.
async fn gather(
    messages: &mut jetstream::consumer::pull::Stream,
    batch: &mut Vec<jetstream::Message>,
) {
    let deadline = tokio::time::Instant::now() + BATCH_WINDOW;
    while batch.len() < BATCH_MAX {
        match tokio::time::timeout_at(deadline, messages.next()).await {
            Ok(Some(Ok(m))) => batch.push(m),
            // A pull error (a missed heartbeat, say) ends the batch early; what the stream does
            // next (recover, or end) is seen by the caller's next pull.
            Ok(Some(Err(_)) | None) | Err(_) => break,
        }
    }
}

/// Stores the records of a batch of messages (each message carries one record or several),
/// at most [`INSERT_MAX`] records per statement, and settles every message: acked once all its
/// records are stored or dropped as unstorable, terminated when it is no usage message at
/// all, handed back (nak) when the database failed before all its records were stored (those
/// already stored are absorbed by the primary key when it comes back). `false` when the
/// database failed.
async fn write(store: &UsageStore, batch: Vec<jetstream::Message>, backoff: &Backoff) -> bool {
    let mut messages = Vec::with_capacity(batch.len());
    let mut records = Vec::new();
    for m in batch {
        match decode(&m) {
            Some(recs) => {
                records.extend(recs);
                // Each message with the number of records stored once it is done.
                messages.push((m, records.len()));
            }
            None => settle(&m, AckKind::Term).await,
        }
    }
    let mut acked = 0;
    let mut stored = 0;
    for chunk in records.chunks(INSERT_MAX) {
        if !insert(store, chunk).await {
            for (m, _) in &messages[acked..] {
                settle(m, AckKind::Nak(Some(backoff.delay))).await;
            }
            return false;
        }
        stored += chunk.len();
        while let Some((m, _)) = messages.get(acked).filter(|(_, end)| *end <= stored) {
            settle(m, AckKind::Ack).await;
            acked += 1;
        }
    }
    // Messages whose records were all dropped (or that carried none).
    for (m, _) in &messages[acked..] {
        settle(m, AckKind::Ack).await;
    }
    true
}

/// Inserts `records` in one statement; when the database refuses one of them (which fails the
/// whole statement), writes them one at a time and drops the refused ones. `false` when the
/// database failed otherwise (unreachable, say): nothing is settled then.
async fn insert(store: &UsageStore, records: &[UsageRecord]) -> bool {
    match store.insert_batch(records).await {
        Ok(written) => {
            count_written(written, records.len());
            true
        }
        Err(e) if is_poison(&e) => {
            tracing::warn!(error = %e, records = records.len(), "a usage batch was refused; writing its records one by one");
            for rec in records {
                match store.insert_batch(std::slice::from_ref(rec)).await {
                    Ok(written) => count_written(written, 1),
                    Err(e) if is_poison(&e) => {
                        tracing::error!(record = %rec.id, error = %e, "dropping a usage record the database refuses");
                        metrics::counter!("weft_usage_records_malformed_total").increment(1);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "writing usage records failed; they will be redelivered");
                        metrics::counter!("weft_usage_write_errors_total").increment(1);
                        return false;
                    }
                }
            }
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, records = records.len(), "writing usage records failed; they will be redelivered");
            metrics::counter!("weft_usage_write_errors_total").increment(1);
            false
        }
    }
}

/// The storable records of a message; a record that does not decode or can never be stored is
/// logged and counted as malformed and left out. `None` when the payload is no usage message
/// at all (neither a record nor an array).
fn decode(m: &jetstream::Message) -> Option<Vec<UsageRecord>> {
    let recs = match weft_bus::decode_usage(&m.payload) {
        Ok(recs) => recs,
        Err(e) => {
            tracing::error!(stream_seq = ?seq(m), error = %e, "dropping a malformed usage message");
            metrics::counter!("weft_usage_records_malformed_total").increment(1);
            return None;
        }
    };
    let storable = recs
        .into_iter()
        .filter_map(|rec| {
            let why = match &rec {
                Ok(rec) => unstorable(rec).map(|why| format!("record {}: {why}", rec.id)),
                Err(e) => Some(e.to_string()),
            };
            match why {
                None => rec.ok(),
                Some(why) => {
                    tracing::error!(stream_seq = ?seq(m), error = %why, "dropping a malformed usage record");
                    metrics::counter!("weft_usage_records_malformed_total").increment(1);
                    None
                }
            }
        })
        .collect();
    Some(storable)
}

fn seq(m: &jetstream::Message) -> Option<u64> {
    m.info().ok().map(|i| i.stream_sequence)
}

fn count_written(written: u64, records: usize) {
    metrics::counter!("weft_usage_records_written_total").increment(written);
    let records = u64::try_from(records).unwrap_or(u64::MAX);
    metrics::counter!("weft_usage_records_duplicate_total")
        .increment(records.saturating_sub(written));
}

/// An error that writing the same records again would repeat: a value Postgres refuses (SQLSTATE
/// class 22, data exception) or cannot encode. Anything else (unreachable, missing table) is
/// worth retrying.
fn is_poison(e: &StoreError) -> bool {
    match e {
        StoreError::Db(sqlx::Error::Encode(_)) => true,
        StoreError::Db(sqlx::Error::Database(d)) => d.code().is_some_and(|c| c.starts_with("22")),
        _ => false,
    }
}

/// Acks (or naks, or terminates) one message. A lost ack only means a redelivery, which the
/// table absorbs, so failures are logged and not retried.
async fn settle(m: &jetstream::Message, kind: AckKind) {
    if let Err(e) = m.ack_with(kind).await {
        tracing::warn!(stream_seq = ?seq(m), error = %e, "settling a usage message failed; it will be redelivered");
    }
}

struct Backoff {
    delay: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { delay: BACKOFF_MIN }
    }
}

impl Backoff {
    fn reset(&mut self) {
        self.delay = BACKOFF_MIN;
    }

    /// Sleeps the current delay and doubles it; `false` when `shutdown` came first.
    async fn wait(&mut self, shutdown: &CancellationToken) -> bool {
        let d = self.delay;
        self.delay = (d * 2).min(BACKOFF_MAX);
        tokio::select! {
            () = shutdown.cancelled() => false,
            () = tokio::time::sleep(d) => true,
        }
    }
}

type Result<T> = std::result::Result<T, ApiError>;

/// The routes; mounted inside the bearer-authenticated native router.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/v1/usage", get(usage_handler))
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    group_by: Option<String>,
    from: Option<String>,
    to: Option<String>,
    tenant: Option<String>,
}

/// A validated `GET /v1/usage` query.
#[derive(Debug, PartialEq)]
struct UsageParams {
    tenant: Option<TenantId>,
    from: OffsetDateTime,
    to: OffsetDateTime,
    group_by: Vec<GroupBy>,
}

/// How far back `from` reaches when it is not given.
const DEFAULT_SPAN: time::Duration = time::Duration::hours(24);

fn allowed_group_by() -> String {
    GroupBy::ALL.map(GroupBy::as_str).join(", ")
}

/// `from` or `to`: absent, or an RFC 3339 time. An empty value is refused, not taken as absent.
fn time_param(key: &str, raw: Option<&str>) -> std::result::Result<Option<OffsetDateTime>, Error> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    if raw.is_empty() {
        return Err(Error::invalid(format!(
            "`{key}` is empty; give an RFC 3339 time such as 2026-11-22T00:00:00Z, or leave it out"
        ))
        .with_param(key));
    }
    // An unencoded `+` in an offset arrives as a space; RFC 3339 has no spaces.
    OffsetDateTime::parse(&raw.replace(' ', "+"), &Rfc3339)
        .map(Some)
        .map_err(|_| {
            Error::invalid(format!(
                "`{key}` must be an RFC 3339 time such as 2026-11-22T00:00:00Z, got `{raw}`"
            ))
            .with_param(key)
        })
}

/// Checks `group_by`, `from`, `to` and `tenant`; `now` fills the defaults.
fn parse_params(q: &UsageQuery, now: OffsetDateTime) -> std::result::Result<UsageParams, Error> {
    let mut group_by = Vec::new();
    for name in q
        .group_by
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let g: GroupBy = name.parse().map_err(|_| {
            Error::invalid(format!(
                "unknown group_by value `{name}`; allowed: {}",
                allowed_group_by()
            ))
            .with_param("group_by")
        })?;
        if !group_by.contains(&g) {
            group_by.push(g);
        }
    }
    let to = time_param("to", q.to.as_deref())?.unwrap_or(now);
    let from = time_param("from", q.from.as_deref())?.unwrap_or(to - DEFAULT_SPAN);
    if from > to {
        return Err(Error::invalid(format!(
            "`from` ({}) is after `to` ({})",
            rfc3339(from),
            rfc3339(to)
        ))
        .with_param("from"));
    }
    let tenant = match q.tenant.as_deref() {
        Some(t) => Some(TenantId::parse(t).map_err(|e| e.with_param("tenant"))?),
        None => None,
    };
    Ok(UsageParams {
        tenant,
        from,
        to,
        group_by,
    })
}

fn timestamp(t: Option<OffsetDateTime>) -> Option<Timestamp> {
    t.map(|t| Timestamp(rfc3339(t)))
}

fn group_key(g: GroupBy) -> GroupKey {
    match g {
        GroupBy::Provider => GroupKey::Provider,
        GroupBy::Model => GroupKey::Model,
        GroupBy::RequestedModel => GroupKey::RequestedModel,
        GroupBy::Subject => GroupKey::Subject,
        GroupBy::Token => GroupKey::Token,
        GroupBy::Kind => GroupKey::Kind,
        GroupBy::Day => GroupKey::Day,
        GroupBy::Hour => GroupKey::Hour,
    }
}

/// One row as the API answers it: the keys grouped by (each present, maybe null), then the sums.
fn group(r: UsageRow, group_by: &[GroupBy]) -> UsageGroup {
    let mut g = UsageGroup {
        requests: r.requests,
        input_tokens: r.input_tokens,
        output_tokens: r.output_tokens,
        cache_read_tokens: r.cache_read_tokens,
        cache_write_tokens: r.cache_write_tokens,
        cost_usd: r.cost_usd,
        avg_latency_ms: r.avg_latency_ms,
        p95_latency_ms: r.p95_latency_ms,
        ..UsageGroup::default()
    };
    for key in group_by {
        match key {
            GroupBy::Provider => g.provider = Some(r.provider.clone()),
            GroupBy::Model => g.model = Some(r.model.clone()),
            GroupBy::RequestedModel => g.requested_model = Some(r.requested_model.clone()),
            GroupBy::Subject => g.subject = Some(r.subject.clone()),
            GroupBy::Token => g.token_id = Some(r.token_id.clone()),
            GroupBy::Kind => g.kind = Some(r.kind.clone()),
            GroupBy::Day => g.day = Some(timestamp(r.day)),
            GroupBy::Hour => g.hour = Some(timestamp(r.hour)),
        }
    }
    g
}

/// `GET /v1/usage?group_by=&from=&to=&tenant=`: the caller's tenant's usage in `[from, to)`.
/// Needs `tenant:admin` (or `admin`, which may name any `tenant`); another tenant is a 404.
#[tracing::instrument(skip_all)]
pub async fn usage_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    uri: Uri,
) -> Result<Response> {
    p.require(Scope::TenantAdmin).map_err(ApiError::native)?;
    // Parsed after the scope check, so a caller without `tenant:admin` learns nothing more.
    let q: UsageQuery =
        crate::extract::parse_query(uri.query().unwrap_or_default()).map_err(ApiError::native)?;
    let params = parse_params(&q, OffsetDateTime::now_utc()).map_err(ApiError::native)?;
    let tenant = params.tenant.unwrap_or_else(|| p.tenant.clone());
    if !p.administers(&tenant) {
        return Err(ApiError::native(
            Error::not_found(format!(
                "no usage of tenant `{tenant}` is visible to you; a tenant admin reads only its own tenant's usage"
            ))
            .with_param("tenant"),
        ));
    }
    let summary = UsageStore::new(st.pool.clone())
        .summary(&tenant, params.from, params.to, &params.group_by)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "reading usage failed");
            ApiError::native(e.to_api())
        })?;
    Ok(Json(UsageSummary {
        data: summary
            .rows
            .into_iter()
            .map(|r| group(r, &params.group_by))
            .collect(),
        next_cursor: NextCursor(None),
        tenant: tenant.to_string(),
        from: Timestamp(rfc3339(params.from)),
        to: Timestamp(rfc3339(params.to)),
        group_by: params.group_by.iter().copied().map(group_key).collect(),
        truncated: summary.truncated,
    })
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> UsageQuery {
        let mut q = UsageQuery::default();
        for (k, v) in pairs {
            let v = Some((*v).to_owned());
            match *k {
                "group_by" => q.group_by = v,
                "from" => q.from = v,
                "to" => q.to = v,
                "tenant" => q.tenant = v,
                _ => panic!("unknown parameter {k}"),
            }
        }
        q
    }

    fn t(s: &str) -> OffsetDateTime {
        OffsetDateTime::parse(s, &Rfc3339).unwrap()
    }

    #[test]
    fn defaults_are_the_last_24_hours_ungrouped() {
        let now = t("2026-11-22T12:00:00Z");
        let p = parse_params(&q(&[]), now).unwrap();
        assert_eq!(
            p,
            UsageParams {
                tenant: None,
                from: t("2026-11-21T12:00:00Z"),
                to: now,
                group_by: vec![]
            }
        );
        // `from` defaults to 24 h before `to`, not before now.
        let p = parse_params(&q(&[("to", "2026-01-02T00:00:00Z")]), now).unwrap();
        assert_eq!(p.from, t("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn group_by_is_parsed_deduplicated_and_checked() {
        let now = t("2026-11-22T12:00:00Z");
        let p = parse_params(&q(&[("group_by", "model, provider,model,,day")]), now).unwrap();
        assert_eq!(
            p.group_by,
            vec![GroupBy::Model, GroupBy::Provider, GroupBy::Day]
        );
        let e = parse_params(&q(&[("group_by", "model,tenant")]), now).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("group_by"));
        assert!(e.message.contains("`tenant`"), "{}", e.message);
        assert!(
            e.message
                .contains("provider, model, requested_model, subject, token, kind, day, hour"),
            "{}",
            e.message
        );
    }

    #[test]
    fn times_are_rfc3339_and_ordered() {
        let now = t("2026-11-22T12:00:00Z");
        // A `+` that was not percent-encoded arrives as a space.
        let p = parse_params(
            &q(&[
                ("from", "2026-11-22T01:00:00 01:00"),
                ("to", "2026-11-22T02:00:00+01:00"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(p.from, t("2026-11-22T00:00:00Z"));
        assert_eq!(p.to, t("2026-11-22T01:00:00Z"));
        let e = parse_params(&q(&[("from", "yesterday")]), now).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("from"));
        let e = parse_params(
            &q(&[
                ("from", "2026-11-22T02:00:00Z"),
                ("to", "2026-11-22T01:00:00Z"),
            ]),
            now,
        )
        .unwrap_err();
        assert!(e.message.contains("after"), "{}", e.message);
        let e = parse_params(&q(&[("tenant", "Not A Tenant")]), now).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tenant"));
    }

    #[test]
    fn empty_values_are_refused_not_taken_as_absent() {
        // The OpenAPI document says date-time and a tenant name; `?to=` is neither.
        let now = t("2026-11-22T12:00:00Z");
        for key in ["from", "to", "tenant"] {
            let e = parse_params(&q(&[(key, "")]), now).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(key), "{}", e.message);
        }
        // An empty group_by is no grouping, as documented.
        assert!(parse_params(&q(&[("group_by", "")]), now).is_ok());
    }
}
