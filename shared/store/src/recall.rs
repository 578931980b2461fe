//! Reading a run's verbatim history back (`Recall`, `GET /v1/runs/{id}/search`): Postgres
//! full-text search over the text of the conversation's events, ranked, with each hit's run and
//! seq, and reads of events by seq.
//!
//! The search runs over the events of the runs in scope, found by their primary key, with the
//! text search vector built at query time: nothing is indexed on the run loop's write path, so
//! appending events costs what it did. A run's own events are few enough for that; the `agent`
//! and `user` scopes look at the newest [`weft_api::context::RECALL_RUNS`] runs only. Each
//! event's first [`SEARCHED_BYTES`] of text are searched.

use serde_json::Value;
use uuid::Uuid;
use weft_api::context::{RECALL_RUNS, RecallScope, SearchHit, SearchHits};
use weft_core::{RunId, TenantId};

use crate::runs::{RunStore, RunStoreError};

/// The bytes of one event's text that are searched.
pub const SEARCHED_BYTES: i32 = 256 * 1024;

/// The event kinds whose text is the conversation.
const KINDS: [&str; 4] = [
    "user_input",
    "assistant_message",
    "tool_call",
    "tool_result",
];

/// Whose runs a search looks at: the run searched from, and the user and tenant it belongs to.
#[derive(Clone, Debug)]
pub struct RecallFrom<'a> {
    pub tenant: &'a TenantId,
    pub run: RunId,
    pub subject: &'a str,
    pub agent: &'a str,
}

/// One event read back by seq.
#[derive(Clone, Debug, PartialEq)]
pub struct RecalledEvent {
    pub seq: i64,
    pub kind: String,
    pub data: Value,
}

impl RunStore {
    /// The runs a search from `from` looks at: the run itself (`run`), or the newest
    /// [`RECALL_RUNS`] runs of the same user in the same tenant — of the same agent (`agent`) or
    /// of any (`user`) — the run itself among them.
    pub async fn recall_runs(
        &self,
        from: &RecallFrom<'_>,
        scope: RecallScope,
    ) -> Result<Vec<RunId>, RunStoreError> {
        let agent = match scope {
            RecallScope::Run => return Ok(vec![from.run]),
            RecallScope::Agent => Some(from.agent),
            RecallScope::User => None,
        };
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM runs
             WHERE tenant_id = $1 AND subject = $2 AND ($3::text IS NULL OR agent_name = $3)
             ORDER BY id DESC LIMIT $4",
        )
        .bind(from.tenant.as_str())
        .bind(from.subject)
        .bind(agent)
        .bind(RECALL_RUNS)
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<RunId> = ids.into_iter().map(RunId).collect();
        if !out.contains(&from.run) {
            out.push(from.run);
        }
        Ok(out)
    }

    /// Full-text search (Postgres `websearch_to_tsquery`, the `simple` configuration: no
    /// stemming, any language) over the conversation events of `runs` in `tenant`, best first.
    /// An empty query or one of stop words only finds nothing.
    pub async fn search_events(
        &self,
        tenant: &TenantId,
        runs: &[RunId],
        query: &str,
        limit: u32,
    ) -> Result<Vec<SearchHit>, RunStoreError> {
        let ids: Vec<Uuid> = runs.iter().map(|r| r.0).collect();
        let rows: Vec<(Uuid, i64, String, f32, String)> = sqlx::query_as(
            "WITH q AS (SELECT websearch_to_tsquery('simple', $3) AS q),
             hits AS (
                 SELECT e.run_id, e.seq, e.kind, ts_rank(v.v, q.q) AS rank, t.txt
                 FROM run_events e
                 CROSS JOIN q
                 CROSS JOIN LATERAL (SELECT left(CASE
                     WHEN e.kind = 'tool_result' THEN e.data->>'content'
                     WHEN e.kind = 'user_input' AND e.data ? 'text' THEN e.data->>'text'
                     WHEN e.kind = 'tool_call' THEN concat(e.data->>'name', ' ', e.data->'input')
                     WHEN e.kind = 'assistant_message'
                         AND jsonb_typeof(e.data->'message'->'content') = 'array' THEN
                         (SELECT string_agg(coalesce(b->>'text',
                                     concat(b->>'name', ' ', b->>'input_json')), ' ')
                          FROM jsonb_array_elements(e.data->'message'->'content') b)
                     ELSE e.data::text END, $5) AS txt) t
                 CROSS JOIN LATERAL (SELECT to_tsvector('simple', t.txt) AS v) v
                 WHERE e.run_id = ANY($1) AND e.tenant_id = $2 AND e.kind = ANY($6)
                   AND numnode(q.q) > 0 AND v.v @@ q.q
                 ORDER BY rank DESC, e.run_id DESC, e.seq
                 LIMIT $4)
             SELECT hits.run_id, hits.seq, hits.kind, hits.rank,
                 ts_headline('simple', hits.txt, q.q,
                     'MaxWords=40, MinWords=12, MaxFragments=2, StartSel=«, StopSel=»')
             FROM hits CROSS JOIN q
             ORDER BY hits.rank DESC, hits.run_id DESC, hits.seq",
        )
        .bind(&ids)
        .bind(tenant.as_str())
        .bind(query)
        .bind(i64::from(limit))
        .bind(SEARCHED_BYTES)
        .bind(&KINDS[..])
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(run, seq, kind, rank, snippet)| SearchHit {
                run_id: RunId(run).to_string(),
                seq,
                kind,
                rank,
                snippet,
            })
            .collect())
    }

    /// A search from the run `from`, in `scope`: the hits, best first, and how many runs were
    /// searched (`Recall {op: search}` and `GET /v1/runs/{id}/search`).
    pub async fn recall_search(
        &self,
        from: &RecallFrom<'_>,
        scope: RecallScope,
        query: &str,
        limit: u32,
    ) -> Result<SearchHits, RunStoreError> {
        let runs = self.recall_runs(from, scope).await?;
        let hits = self.search_events(from.tenant, &runs, query, limit).await?;
        Ok(SearchHits {
            query: query.to_owned(),
            scope,
            runs: runs.len(),
            hits,
        })
    }

    /// Events `from..=to` of `run` in `tenant` (at most `max`), in seq order.
    pub async fn events_between(
        &self,
        tenant: &TenantId,
        run: RunId,
        from: i64,
        to: i64,
        max: i64,
    ) -> Result<Vec<RecalledEvent>, RunStoreError> {
        let rows: Vec<(i64, String, Value)> = sqlx::query_as(
            "SELECT seq, kind, data FROM run_events
             WHERE run_id = $1 AND tenant_id = $2 AND seq BETWEEN $3 AND $4
             ORDER BY seq LIMIT $5",
        )
        .bind(run.0)
        .bind(tenant.as_str())
        .bind(from)
        .bind(to)
        .bind(max)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(seq, kind, data)| RecalledEvent { seq, kind, data })
            .collect())
    }

    /// The seq of the run's last event (0 when it has none).
    pub async fn last_seq(&self, run: RunId) -> Result<i64, RunStoreError> {
        Ok(
            sqlx::query_scalar("SELECT COALESCE(max(seq), 0) FROM run_events WHERE run_id = $1")
                .bind(run.0)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Whether `run` belongs to the user `subject` in `tenant` (a run `Recall` may read).
    pub async fn run_of_user(
        &self,
        tenant: &TenantId,
        subject: &str,
        run: RunId,
    ) -> Result<bool, RunStoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1 AND tenant_id = $2 AND subject = $3)",
        )
        .bind(run.0)
        .bind(tenant.as_str())
        .bind(subject)
        .fetch_one(&self.pool)
        .await?)
    }
}

/// The text of an event as `Recall` reads it back: a tool result's content, an input's text, a
/// model turn's text and calls (`Name(<input>)`), a call; any other event's JSON.
pub fn event_text(kind: &str, data: &Value) -> String {
    use weft_core::run::RunEvent;
    match RunEvent::parse(kind, data) {
        Some(RunEvent::ToolResult(r)) => r.content,
        Some(RunEvent::UserInput(u)) => match (&u.text, &u.messages) {
            (Some(t), _) => t.clone(),
            (None, Some(m)) => m
                .iter()
                .map(weft_core::message::Message::text)
                .collect::<Vec<_>>()
                .join("\n"),
            (None, None) => String::new(),
        },
        Some(RunEvent::AssistantMessage(m)) => {
            let mut out = m.message.text();
            for b in &m.message.content {
                if let weft_core::message::ContentBlock::ToolUse {
                    name, input_json, ..
                } = b
                {
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    out.push_str(&format!("{name}({input_json})"));
                }
            }
            out
        }
        Some(RunEvent::ToolCall(c)) => format!("{}({})", c.name, c.input),
        _ => data.to_string(),
    }
}
