//! Long runs: how a run keeps its model view inside the model's window (compaction and bounded
//! tool results, docs/runs.md "Long runs"), and reading back what was compacted away (`Recall`,
//! `GET /v1/runs/{id}/search`, docs/tools.md "Recall").
//!
//! [`Compaction`] is an agent content field (`compaction`) and a `POST /v1/runs` override; the
//! executor's fold, the `Context` and `Recall` tools and the gateway's routes all read these
//! types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Model turns kept verbatim after the summary, unless `keep_turns` says otherwise.
pub const DEFAULT_KEEP_TURNS: u32 = 4;
/// Bytes of one tool result the model sees, unless `result_max_bytes` says otherwise.
pub const DEFAULT_RESULT_MAX_BYTES: u32 = 32 * 1024;
/// Bytes of all the tool results of one turn the model sees, unless `turn_result_max_bytes` says
/// otherwise.
pub const DEFAULT_TURN_RESULT_MAX_BYTES: u32 = 128 * 1024;
/// The share of the window a compaction aims under when `auto_percent` is unset (a manual or
/// self-requested compaction of a model whose window is known).
pub const DEFAULT_TARGET_PERCENT: u8 = 80;

/// How a run keeps its model view inside the model's window. Every field is optional; `null`
/// (or the field left out) takes the default. Compaction never removes anything from the
/// transcript: it changes what the model is sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[schemars(extend("example" = {"auto_percent": 75, "keep_turns": 4, "model": "tier:cheap"}))]
pub struct Compaction {
    /// compact automatically before a model turn whose prompt would reach this percentage of the model's window; unset = never automatically (manual and self-requested compaction still work)
    #[schemars(range(min = 10, max = 95))]
    pub auto_percent: Option<u8>,
    /// model turns kept verbatim after the summary (default 4); fewer are kept when they alone would not fit
    #[schemars(range(min = 0, max = 64))]
    pub keep_turns: Option<u32>,
    /// the model, alias or tier:<name> that writes the summary; unset = the executor's `compaction_model`, else the run's model
    #[schemars(length(min = 1, max = 200))]
    pub model: Option<String>,
    /// the model's window in tokens, for a model the router has no window for (router.context_windows)
    #[schemars(range(min = 256, max = 10000000))]
    pub window_tokens: Option<u32>,
    /// bytes of one tool result the model sees (default 32768); a longer result is cut with a marker saying how to read the rest, and stays whole in the transcript
    #[schemars(range(min = 256, max = 16777216))]
    pub result_max_bytes: Option<u32>,
    /// bytes of all the tool results of one turn the model sees (default 131072)
    #[schemars(range(min = 256, max = 67108864))]
    pub turn_result_max_bytes: Option<u32>,
}

crate::objects_only!(Compaction);

impl Compaction {
    /// Model turns kept verbatim.
    pub fn keep_turns(&self) -> u32 {
        self.keep_turns.unwrap_or(DEFAULT_KEEP_TURNS)
    }

    /// Bytes of one tool result the model sees.
    pub fn result_max_bytes(&self) -> usize {
        self.result_max_bytes.unwrap_or(DEFAULT_RESULT_MAX_BYTES) as usize
    }

    /// Bytes of one turn's tool results the model sees.
    pub fn turn_result_max_bytes(&self) -> usize {
        self.turn_result_max_bytes
            .unwrap_or(DEFAULT_TURN_RESULT_MAX_BYTES) as usize
    }

    /// Checks what the schema cannot say in a way a person reads: the ranges, named by field.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(p) = self.auto_percent
            && !(10..=95).contains(&p)
        {
            return Err((
                "auto_percent",
                format!("`auto_percent` is a share of the window from 10 to 95, got {p}"),
            ));
        }
        if let Some(k) = self.keep_turns
            && k > 64
        {
            return Err(("keep_turns", format!("`keep_turns` is at most 64, got {k}")));
        }
        if let Some(m) = &self.model
            && (m.is_empty() || m.len() > 200)
        {
            return Err((
                "model",
                "`model` names a model, alias or tier:<name> of 1 to 200 bytes".to_owned(),
            ));
        }
        if let Some(w) = self.window_tokens
            && !(256..=10_000_000).contains(&w)
        {
            return Err((
                "window_tokens",
                format!("`window_tokens` is from 256 to 10000000, got {w}"),
            ));
        }
        for (field, v, max) in [
            ("result_max_bytes", self.result_max_bytes, 16_777_216),
            (
                "turn_result_max_bytes",
                self.turn_result_max_bytes,
                67_108_864,
            ),
        ] {
            if let Some(v) = v
                && !(256..=max).contains(&v)
            {
                return Err((
                    field,
                    format!("`{field}` is from 256 to {max} bytes, got {v}"),
                ));
            }
        }
        Ok(())
    }
}

/// What started a compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompactTrigger {
    /// `POST /v1/runs/{id}/compact`
    Manual,
    /// the prompt reached `auto_percent` of the window
    Auto,
    /// the model called `Context {"op": "compact"}`
    #[serde(rename = "self")]
    Own,
}

impl CompactTrigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Manual => "manual",
            Self::Auto => "auto",
            Self::Own => "self",
        }
    }
}

/// Where `Recall` and `GET /v1/runs/{id}/search` look: this run, or the earlier runs (the newest
/// [`RECALL_RUNS`]) the same user started in the same tenant — of the same agent (`agent`) or of
/// any (`user`). Another user's or tenant's runs are never searched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecallScope {
    #[default]
    Run,
    Agent,
    User,
}

impl RecallScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Agent => "agent",
            Self::User => "user",
        }
    }
}

/// How many earlier runs the `agent` and `user` scopes search (the newest first).
pub const RECALL_RUNS: i64 = 50;

/// `Recall`'s ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecallOp {
    Search,
    Range,
}

/// `Recall`: read the run's verbatim history back — by words (`search`) or by seq (`range`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RecallInput {
    pub op: RecallOp,
    /// search: the words to find (web-search syntax: "a phrase", -not, or)
    #[schemars(length(min = 1, max = 1000))]
    pub query: Option<String>,
    /// search: where to look (default run)
    pub scope: Option<RecallScope>,
    /// search: at most this many hits (default 5, at most 50)
    #[schemars(range(min = 1, max = 50))]
    pub limit: Option<u32>,
    /// range: the first seq to read
    #[schemars(range(min = 1))]
    pub from_seq: Option<i64>,
    /// range: the last seq to read (default from_seq)
    #[schemars(range(min = 1))]
    pub to_seq: Option<i64>,
    /// range: skip this many bytes of the text read (to go on where a cut result stopped)
    #[schemars(range(min = 0))]
    pub offset: Option<u64>,
    /// range: another run of this user's, found by search (default this run)
    pub run_id: Option<String>,
}

/// One search hit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchHit {
    pub run_id: String,
    pub seq: i64,
    /// the event's kind (user_input, assistant_message, tool_call, tool_result)
    pub kind: String,
    /// ts_rank of the hit; higher is better
    pub rank: f32,
    /// the words around the match
    pub snippet: String,
}

/// The answer of `GET /v1/runs/{id}/search` and of `Recall {"op": "search"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchHits {
    pub query: String,
    pub scope: RecallScope,
    /// the runs searched
    pub runs: usize,
    /// best first
    pub hits: Vec<SearchHit>,
}

/// `limit` of `GET /v1/runs/{id}/search`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct SearchLimit(#[schemars(range(min = 1, max = 50), extend("default" = 10))] pub u32);
