//! The inputs of the executor's built-in tools (`Context`, `Agent`, `Interruption`, `HTTP`,
//! `Memory`, `Channel`, `Skill`, the file tools `Read`, `Write`, `Edit`, `Glob`, `Grep`,
//! `Move`, `Delete`, `List`, `Exec`, a command in a sandbox, and `Evaluation`, verdicts on
//! agents' work and their pass rates): what a model sends when it calls one. The executor reads a call's input into these types and shows the model
//! [`input_schema`] of each.
//!
//! Fields an op does not always need are optional here; the executor says which op needs them.
//! Inputs are read leniently (unknown fields are ignored: a model cannot name a scope id, but
//! writing one is harmless) except `HTTP`'s, which refuses them.

use std::collections::BTreeMap;

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::channels::AwaitMode;
use crate::face::MemoryScope;

/// `T`'s JSON Schema as a model sees it in a tool's `parameters`: definitions inlined, no
/// `$schema` or `title` (the tool's description says what it is), and an optional field is
/// its type, not its type or null.
pub fn input_schema<T: JsonSchema>() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.meta_schema = None;
    settings.inline_subschemas = true;
    let mut schema = SchemaGenerator::new(settings)
        .into_root_schema_for::<T>()
        .to_value();
    if let Value::Object(root) = &mut schema {
        root.remove("title");
        root.remove("description");
    }
    drop_null_types(&mut schema);
    schema
}

/// At every depth: `["string", "null"]` → `"string"`, no `null` in an `enum` and no
/// `"default": null` (an optional field is simply left out); no integer `format`s; no doc
/// comments of enum types (the values speak for themselves; a field's own description stays).
fn drop_null_types(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("default").is_some_and(Value::is_null) {
                m.remove("default");
            }
            if let Some(Value::Array(values)) = m.get_mut("enum") {
                values.retain(|v| !v.is_null());
                m.remove("description");
            }
            if let Some(Value::Array(types)) = m.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    m.insert("type".into(), only);
                }
            }
            if m.get("type").and_then(Value::as_str) == Some("integer") {
                m.remove("format");
            }
            for child in m.values_mut() {
                drop_null_types(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(drop_null_types),
        _ => {}
    }
}

/// A tool's `op` enum: read on its own before the fields the op takes, and named in full in the
/// message for a bad one.
pub trait ToolOp: for<'de> Deserialize<'de> + JsonSchema {
    /// The op names, in the schema's order.
    fn names() -> Vec<String> {
        input_schema::<Self>()
            .get("enum")
            .and_then(Value::as_array)
            .map(|names| {
                names
                    .iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl ToolOp for ContextOp {}
impl ToolOp for AgentOp {}
impl ToolOp for MemoryOp {}
impl ToolOp for ChannelOp {}
impl ToolOp for SkillOp {}
impl ToolOp for crate::context::RecallOp {}

/// Reads a present field as `Some`, `null` included (`Option<Value>` alone reads `null` as
/// absent).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Any JSON value.
fn any_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({})
}

/// `Context`'s ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextOp {
    Time,
    #[serde(rename = "self")]
    Own,
    Compact,
}

/// `Context`: facts about the run.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ContextInput {
    pub op: ContextOp,
}

/// `Interruption`'s ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterruptionOp {
    Ask,
    Notify,
}

/// `Interruption`: a question for the user (`ask`, the run waits for the answer) or a notice
/// for whoever watches the run (`notify`, the run goes on).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct InterruptionInput {
    // An input without it is read as an ask, as before it was typed.
    #[schemars(required)]
    pub op: Option<InterruptionOp>,
    // Read as optional so that a missing question and an empty one get the same answer.
    /// ask: the question
    pub question: Option<String>,
    /// notify: the notice (at most 4096 characters)
    pub message: Option<String>,
}

/// `Agent`'s ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentOp {
    Spawn,
    ParallelSpawn,
}

/// One sub-run: an agent and the message it starts with.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(description = "")]
pub struct AgentRun {
    pub agent: String,
    pub input: String,
}

/// `Agent`: `spawn` takes `agent` and `input`, `parallel_spawn` takes `runs`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct AgentInput {
    pub op: AgentOp,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub input: Option<String>,
    #[serde(default)]
    pub runs: Option<Vec<AgentRun>>,
}

/// The methods `HTTP` sends, named in any case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    Get,
    Post,
}

impl<'de> Deserialize<'de> for HttpMethod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = String::deserialize(d)?;
        if m.eq_ignore_ascii_case("GET") {
            Ok(Self::Get)
        } else if m.eq_ignore_ascii_case("POST") {
            Ok(Self::Post)
        } else {
            Err(serde::de::Error::unknown_variant(&m, &["GET", "POST"]))
        }
    }
}

/// A string or a JSON object.
fn string_or_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": ["string", "object"]})
}

/// `HTTP`: one request.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpInput {
    pub method: HttpMethod,
    /// an absolute http:// or https:// URL
    pub url: String,
    /// request headers by name
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// POST only: a string sent as is, or an object sent as JSON
    #[serde(default)]
    #[schemars(schema_with = "string_or_object")]
    pub body: Option<Value>,
}

/// `Memory`'s ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryOp {
    Get,
    Set,
    Delete,
    List,
    Incr,
    Search,
}

/// `Memory`: the scope is the run's own (never a scope id); which other fields an op needs is
/// in the tool's description.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct MemoryInput {
    pub op: MemoryOp,
    pub scope: MemoryScope,
    #[serde(default)]
    pub key: Option<String>,
    /// any JSON value (set)
    #[serde(default, deserialize_with = "present")]
    #[schemars(schema_with = "any_value")]
    pub value: Option<Value>,
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub ttl_seconds: Option<i64>,
    /// set/delete only if the entry is at this version (0: does not exist)
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub if_version: Option<i64>,
    #[serde(default)]
    pub embed: Option<bool>,
    #[serde(default)]
    pub by: Option<i64>,
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<i64>,
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub top_k: Option<i64>,
}

/// `Channel`'s ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChannelOp {
    Publish,
    Read,
    Ack,
    Peek,
    Await,
}

/// `Channel`: which fields an op needs is in the tool's description.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChannelInput {
    pub op: ChannelOp,
    #[serde(default)]
    pub channel: Option<String>,
    /// any JSON value (publish)
    #[serde(default, deserialize_with = "present")]
    #[schemars(schema_with = "any_value")]
    pub payload: Option<Value>,
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub max: Option<u32>,
    #[serde(default)]
    #[schemars(range(min = 0, max = 30000))]
    pub wait_ms: Option<u32>,
    #[serde(default)]
    pub channels: Option<Vec<String>>,
    #[serde(default)]
    pub mode: Option<AwaitMode>,
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub n: Option<u32>,
}

/// `Skill`'s ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SkillOp {
    List,
    Load,
}

/// `Skill`: `load` takes `name` and optionally `file`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SkillInput {
    pub op: SkillOp,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub file: Option<String>,
}

/// `Read`: a file of a volume, as numbered lines.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ReadInput {
    /// relative to the volume root, e.g. `src/main.rs`
    pub path: String,
    /// the first line to show, 1-based (default 1)
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// how many lines to show (default 2000)
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
    /// one of the run's bound volumes; omit it (or say `default`) for the run's default volume
    #[serde(default)]
    pub volume: Option<String>,
}

/// `Write`: a whole file's content.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WriteInput {
    /// relative to the volume root
    pub path: String,
    pub content: String,
    /// write only if the file's sha256 is this; "" = only if the file does not exist
    #[serde(default)]
    pub if_match: Option<String>,
    /// one of the run's bound volumes; omit it (or say `default`) for the run's default volume
    #[serde(default)]
    pub volume: Option<String>,
}

/// One replacement of an `Edit`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(description = "")]
pub struct EditOp {
    /// the text to replace, exactly as in the file (unique unless replace_all)
    pub old: String,
    pub new: String,
    /// replace every occurrence (default false: `old` must occur once)
    #[serde(default)]
    pub replace_all: Option<bool>,
}

/// `Edit`: replacements in a text file, all checked before any is applied.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct EditInput {
    /// relative to the volume root
    pub path: String,
    /// applied in order, each to the result of the one before
    #[schemars(length(min = 1))]
    pub edits: Vec<EditOp>,
    /// one of the run's bound volumes; omit it (or say `default`) for the run's default volume
    #[serde(default)]
    pub volume: Option<String>,
}

/// `Glob`: the paths matching a pattern, newest first.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct GlobInput {
    /// e.g. `**/*.rs`, `docs/*.md`
    pub pattern: String,
    /// one of the run's bound volumes; omit it (or say `default`) for the run's default volume
    #[serde(default)]
    pub volume: Option<String>,
}

/// What `Grep` answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrepMode {
    // The paths of files with a match.
    #[default]
    Files,
    // The matching lines (with `context` lines around them).
    Content,
    // Matches per file.
    Count,
}

/// `Grep`: lines matching a regex across a volume's text files.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct GrepInput {
    /// a regular expression (Rust `regex` syntax)
    pub pattern: String,
    /// only files whose path matches this glob, e.g. `**/*.py`
    #[serde(default)]
    pub glob: Option<String>,
    /// files (default): paths with a match; content: matching lines; count: matches per file
    #[serde(default)]
    pub mode: Option<GrepMode>,
    #[serde(default)]
    pub case_insensitive: Option<bool>,
    /// lines of context around each match (content mode)
    #[serde(default)]
    #[schemars(range(min = 0, max = 10))]
    pub context: Option<u32>,
    /// one of the run's bound volumes; omit it (or say `default`) for the run's default volume
    #[serde(default)]
    pub volume: Option<String>,
}

/// `Move`: renames a file.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct MoveInput {
    pub from: String,
    pub to: String,
    /// replace a file at `to` (default false: refused when one exists)
    #[serde(default)]
    pub overwrite: Option<bool>,
    /// one of the run's bound volumes; omit it (or say `default`) for the run's default volume
    #[serde(default)]
    pub volume: Option<String>,
}

/// `Delete`: removes a file.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DeleteInput {
    pub path: String,
    /// delete only if the file's sha256 is this
    #[serde(default)]
    pub if_match: Option<String>,
    /// one of the run's bound volumes; omit it (or say `default`) for the run's default volume
    #[serde(default)]
    pub volume: Option<String>,
}

/// `List`: the immediate children of a directory.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ListInput {
    /// a directory relative to the volume root (default: the root)
    #[serde(default)]
    pub path: Option<String>,
    /// one of the run's bound volumes; omit it (or say `default`) for the run's default volume
    #[serde(default)]
    pub volume: Option<String>,
}

/// `Exec`: a shell command in a sandbox over a checkout of a volume; the files it changes come
/// back to the volume as one change.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ExecInput {
    /// run with `sh -c` in the volume's root; no network, only the volume is writable
    pub command: String,
    /// seconds before the command is killed (default 60)
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_s: Option<u64>,
    /// one of the run's bound volumes; omit it (or say `default`) for the run's default volume
    #[serde(default)]
    pub volume: Option<String>,
}

/// `Evaluation`'s ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EvaluationOp {
    Submit,
    Get,
    Aggregate,
}

impl ToolOp for EvaluationOp {}

/// A JSON object of named numbers or short strings.
fn dimensions_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {"type": ["number", "string"]},
        "maxProperties": 32,
        "description": "named numbers or short strings, e.g. {\"correctness\": 0.9, \"style\": \"terse\"} (submit)"
    })
}

/// A verdict, as a plain string enum (the type's own schema documents its variants).
fn verdict_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": ["pass", "fail", "inconclusive"]})
}

/// A score.
fn score_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "number",
        "minimum": 0,
        "maximum": 1,
        "description": "from 0 to 1 (default: 1 for pass, 0 for fail, 0.5 for inconclusive)"
    })
}

/// `Evaluation`: `submit` takes `verdict` (and optionally `task`, `score`, `dimensions`,
/// `agent`), `get` takes `run_id` and `task`, `aggregate` takes `agent` and `version`. The
/// tenant is always the run's own.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct EvaluationInput {
    pub op: EvaluationOp,
    /// what was evaluated (submit: default "", the work as a whole; get: only this task's)
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "verdict_schema")]
    pub verdict: Option<crate::plans::VerdictKind>,
    #[serde(default)]
    #[schemars(schema_with = "score_schema")]
    pub score: Option<f64>,
    #[serde(default)]
    #[schemars(schema_with = "dimensions_schema")]
    pub dimensions: Option<serde_json::Map<String, Value>>,
    /// the agent evaluated (submit: default this run's own agent; aggregate: required)
    #[serde(default)]
    pub agent: Option<String>,
    /// a definition content hash (aggregate: default every version)
    #[serde(default)]
    pub version: Option<String>,
    /// a run of this tenant (get: default this run)
    #[serde(default)]
    pub run_id: Option<crate::runs::RunId>,
}
