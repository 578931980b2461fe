//! The `Evaluation` tool: an agent's verdict on a piece of work as an evaluation row — the
//! same rows plan runs write for every verdict — and the pass rates per definition version
//! they add up to. The tenant is always the run's own: a model cannot read or write another
//! tenant's evaluations, whatever it names.
//!
//! A submission is a row of this run (emitter role `agent`, attempt 0), unique per task. It is
//! written under the run's lease in a transaction of its own (a built-in tool's result is
//! committed by the orchestrator's group writer, which writes no rows of a tool's), and the
//! row carries the call's id in its `dimensions` (`tool_use_id`): a repeat of the call after a
//! crash finds the row it wrote and answers with it, so `submit` is `Idempotent`; another call
//! of the run for the same task is refused. `get` and `aggregate` are `ReadOnly`.

use std::str::FromStr as _;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{Map, Value};
use weft_api::plans::VerdictKind;
use weft_api::tools::{EvaluationInput, EvaluationOp, input_schema};
use weft_core::RunId;
use weft_core::message::ToolSpec;
use weft_proto::v1;
use weft_store::{EvaluationRow, Lease, NewEvaluation, Recorded, RunStoreError};

use super::{
    Abort, Field, Problem, Reading, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput, json_type,
    read_op, substrate_error, with_retry,
};
use crate::stop::Stop;

/// The key in a submitted row's `dimensions` that holds the call which wrote it.
const CALL_KEY: &str = "tool_use_id";
/// Dimensions one submission may have.
const MAX_DIMENSIONS: usize = 32;
/// A submission's dimensions, as JSON.
const MAX_DIMENSIONS_BYTES: usize = 4096;
/// A dimension's name, in characters.
const MAX_NAME: usize = 64;
/// A dimension's text value, in characters.
const MAX_TEXT: usize = 256;
/// A task's name, in characters.
const MAX_TASK: usize = 128;
/// Rows `get` answers with.
const MAX_ROWS: i64 = 100;

/// `Evaluation`.
pub struct Evaluation;

impl Tool for Evaluation {
    fn name(&self) -> &str {
        "Evaluation"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Evaluations of agents' work, which weft adds up into pass rates per \
                agent definition version. op=submit needs verdict (pass, fail or inconclusive; \
                optional: task, what was evaluated; score from 0 to 1; dimensions, named \
                numbers or short strings; agent, the agent whose work it was, default this \
                one) and records it once per task. op=get (optional: run_id, default this run; \
                task) lists a run's evaluations, newest first. op=aggregate needs agent \
                (optional: version, a content hash) and answers its pass rates per version."
                .into(),
            parameters: input_schema::<EvaluationInput>(),
        }
    }

    fn side_effect(&self, input: &Value) -> SideEffect {
        match input.get("op").and_then(Value::as_str) {
            Some("get" | "aggregate") => SideEffect::ReadOnly,
            // Keyed by (run, task) and carrying the call's id: a repeat finds its own row.
            _ => SideEffect::Idempotent,
        }
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move { evaluation(ctx, input).await.map(ToolOutcome::Done) })
    }
}

/// A call's input, read and checked.
#[derive(Debug, PartialEq)]
pub(super) enum Request {
    Submit {
        task: String,
        verdict: VerdictKind,
        score: f64,
        dimensions: Map<String, Value>,
        /// `None`: this run's own agent, at the version it runs.
        agent: Option<String>,
    },
    Get {
        /// `None`: this run.
        run_id: Option<RunId>,
        task: Option<String>,
    },
    Aggregate {
        agent: String,
        version: Option<String>,
    },
}

/// The fields each op reads, in the order their checks fire.
fn fields(op: EvaluationOp) -> &'static [Field] {
    use Field::{Need, Opt};
    match op {
        EvaluationOp::Submit => &[
            Need("op"),
            Need("verdict"),
            Opt("score"),
            Opt("task"),
            Opt("dimensions"),
            Opt("agent"),
        ],
        EvaluationOp::Get => &[Need("op"), Opt("run_id"), Opt("task")],
        EvaluationOp::Aggregate => &[Need("op"), Need("agent"), Opt("version")],
    }
}

/// A value as a message quotes it.
fn quoted(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => format!("{s:?}"),
        Some(v) => v.to_string(),
        None => "nothing".to_owned(),
    }
}

/// `Evaluation`'s messages.
fn words(field: &str, problem: &Problem<'_>) -> Option<String> {
    Some(match (field, problem) {
        ("verdict", Problem::Missing) => {
            "`verdict` (pass, fail or inconclusive) is required".into()
        }
        ("verdict", Problem::Invalid { got, .. } | Problem::Unknown { got, .. }) => {
            format!(
                "`verdict` must be pass, fail or inconclusive, got {}",
                quoted(*got)
            )
        }
        ("score", Problem::Invalid { got, .. }) => {
            format!("`score` must be a number from 0 to 1, got {}", quoted(*got))
        }
        ("run_id", Problem::Invalid { got, .. }) => {
            format!("`run_id` must be a run id (a UUID), got {}", quoted(*got))
        }
        ("agent", Problem::Missing) => {
            "`agent` (the name of the agent whose evaluations to aggregate) is required".into()
        }
        _ => return None,
    })
}

/// Reads a call's input: its op, then the op's fields in order, then what the types cannot
/// say (ranges, sizes, ids).
pub(super) fn read(input: &Value) -> Result<Request, String> {
    let op = read_op::<EvaluationOp>(input, words)?;
    let i: EvaluationInput = Reading::new(fields(op), words).read(input)?;
    Ok(match op {
        EvaluationOp::Submit => {
            let verdict = i
                .verdict
                .ok_or("`verdict` (pass, fail or inconclusive) is required")?;
            let score = match i.score {
                None => default_score(verdict),
                Some(s) if (0.0..=1.0).contains(&s) => s,
                Some(s) => return Err(format!("`score` must be a number from 0 to 1, got {s}")),
            };
            let task = i.task.unwrap_or_default();
            let n = task.chars().count();
            if n > MAX_TASK {
                return Err(format!(
                    "`task` must be at most {MAX_TASK} characters, got {n}"
                ));
            }
            let dimensions = i.dimensions.unwrap_or_default();
            check_dimensions(&dimensions)?;
            let agent = match i.agent {
                Some(a) if a.is_empty() => {
                    return Err("`agent` is empty: name an agent of this tenant, or leave it out to evaluate this run's own".into());
                }
                a => a,
            };
            Request::Submit {
                task,
                verdict,
                score,
                dimensions,
                agent,
            }
        }
        EvaluationOp::Get => {
            let run_id =
                match i.run_id {
                    None => None,
                    Some(id) => Some(RunId::from_str(&id.0).map_err(|_| {
                        format!("`run_id` must be a run id (a UUID), got {:?}", id.0)
                    })?),
                };
            Request::Get {
                run_id,
                task: i.task,
            }
        }
        EvaluationOp::Aggregate => {
            let agent = match i.agent {
                Some(a) if !a.is_empty() => a,
                _ => {
                    return Err(
                        "`agent` (the name of the agent whose evaluations to aggregate) is required"
                            .into(),
                    );
                }
            };
            if i.version.as_deref() == Some("") {
                return Err("`version` is empty: give a definition content hash, or leave it out for every version".into());
            }
            Request::Aggregate {
                agent,
                version: i.version,
            }
        }
    })
}

/// The score a verdict has when none is given.
fn default_score(verdict: VerdictKind) -> f64 {
    match verdict {
        VerdictKind::Pass => 1.0,
        VerdictKind::Fail => 0.0,
        VerdictKind::Inconclusive => 0.5,
    }
}

/// At most [`MAX_DIMENSIONS`] named numbers or short strings, [`MAX_DIMENSIONS_BYTES`] in all,
/// none named [`CALL_KEY`].
fn check_dimensions(d: &Map<String, Value>) -> Result<(), String> {
    if d.len() > MAX_DIMENSIONS {
        return Err(format!(
            "`dimensions` may have at most {MAX_DIMENSIONS} entries, got {}",
            d.len()
        ));
    }
    for (name, value) in d {
        let n = name.chars().count();
        if n == 0 || n > MAX_NAME {
            return Err(format!(
                "dimension names must be 1 to {MAX_NAME} characters, got {name:?}"
            ));
        }
        if name == CALL_KEY {
            return Err(format!(
                "`dimensions.{CALL_KEY}` is weft's (it records the call that submitted the evaluation): name the dimension otherwise"
            ));
        }
        match value {
            Value::Number(_) => {}
            Value::String(s) if s.chars().count() <= MAX_TEXT => {}
            Value::String(s) => {
                return Err(format!(
                    "`dimensions.{name}` must be at most {MAX_TEXT} characters, got {}",
                    s.chars().count()
                ));
            }
            v => {
                return Err(format!(
                    "`dimensions.{name}` must be a number or a string, got {}",
                    json_type(v)
                ));
            }
        }
    }
    let bytes = Value::Object(d.clone()).to_string().len();
    if bytes > MAX_DIMENSIONS_BYTES {
        return Err(format!(
            "`dimensions` must be at most {MAX_DIMENSIONS_BYTES} bytes as JSON, got {bytes}"
        ));
    }
    Ok(())
}

/// A unit enum's wire name.
fn wire_name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// One evaluation as the model sees it.
#[derive(Serialize)]
struct View {
    id: uuid::Uuid,
    run_id: RunId,
    task: String,
    attempt: u32,
    agent: String,
    /// The definition's content hash.
    version: String,
    emitter_role: String,
    verdict: String,
    score: f64,
    dimensions: Value,
    created_at: String,
}

impl From<EvaluationRow> for View {
    fn from(r: EvaluationRow) -> Self {
        Self {
            id: r.id,
            run_id: r.run_id,
            task: r.task,
            attempt: r.attempt,
            agent: r.agent_name,
            version: r.agent_hash,
            emitter_role: r.emitter_role,
            verdict: r.verdict,
            score: r.score,
            dimensions: r.dimensions,
            created_at: weft_core::rfc3339(r.created_at),
        }
    }
}

/// `op=submit`'s answer.
#[derive(Serialize)]
struct Submitted {
    recorded: bool,
    /// A repeat of the call (after a crash) found the row it had written.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    replayed: bool,
    evaluation: View,
}

/// `op=get`'s answer.
#[derive(Serialize)]
struct Listed {
    run_id: RunId,
    evaluations: Vec<View>,
}

/// A store failure abandons the call: the run is retried (a read runs again, a submission
/// finds its row).
fn abort(e: RunStoreError) -> Abort {
    Abort::from(Stop::from(e))
}

async fn evaluation(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Abort> {
    let request = match read(input) {
        Ok(r) => r,
        Err(msg) => return Ok(ToolOutput::error(msg)),
    };
    let store = &ctx.inner().store;
    match request {
        Request::Submit {
            task,
            verdict,
            score,
            dimensions,
            agent,
        } => submit(ctx, task, verdict, score, dimensions, agent).await,
        Request::Get { run_id, task } => {
            let run_id = run_id.unwrap_or_else(|| ctx.run_id());
            let rows = store
                .run_evaluations(ctx.tenant(), run_id, task.as_deref(), MAX_ROWS)
                .await
                .map_err(abort)?;
            Ok(ToolOutput::json(&Listed {
                run_id,
                evaluations: rows.into_iter().map(View::from).collect(),
            }))
        }
        Request::Aggregate { agent, version } => {
            let list = store
                .evaluation_list(ctx.tenant(), &agent, version.as_deref())
                .await
                .map_err(abort)?;
            Ok(ToolOutput::json(&list))
        }
    }
}

/// The current version (content hash) of agent `name` of the run's tenant, or the message for
/// the model when there is none.
async fn current_version(
    ctx: &ToolCtx<'_>,
    name: &str,
) -> Result<Result<(String, String), ToolOutput>, Abort> {
    let msg = v1::GetAgentRequest {
        name: name.to_owned(),
        version: None,
    };
    let answer = with_retry(|| {
        let mut client = ctx.inner().substrate.clone();
        let req = ctx
            .internal(msg.clone())
            .map_err(|e| tonic::Status::internal(e.message));
        async move { client.get_agent(req?).await }
    })
    .await;
    match answer {
        Ok(v) => {
            let v = v.into_inner();
            let name = if v.name.is_empty() {
                name.to_owned()
            } else {
                v.name
            };
            Ok(Ok((name, v.hash)))
        }
        Err(s) if s.code() == tonic::Code::NotFound => Ok(Err(ToolOutput::error(format!(
            "agent `{name}` is not defined in this tenant: name one of its agents, or leave `agent` out to evaluate this run's own (`{}`)",
            ctx.agent_name()
        )))),
        Err(s) => substrate_error(&s).map(Err),
    }
}

/// `op=submit`: the row of this run for `task`, written once.
async fn submit(
    ctx: &ToolCtx<'_>,
    task: String,
    verdict: VerdictKind,
    score: f64,
    mut dimensions: Map<String, Value>,
    agent: Option<String>,
) -> Result<ToolOutput, Abort> {
    let (agent_name, agent_hash) = match agent {
        None => (ctx.agent_name().to_owned(), ctx.agent_hash().to_owned()),
        Some(name) => match current_version(ctx, &name).await? {
            Ok(found) => found,
            Err(out) => return Ok(out),
        },
    };
    dimensions.insert(CALL_KEY.into(), Value::String(ctx.tool_use_id().to_owned()));
    let new = NewEvaluation {
        task,
        attempt: 0,
        agent_name,
        agent_hash,
        emitter_role: "agent".into(),
        verdict: wire_name(&verdict),
        score,
        dimensions: Value::Object(dimensions),
    };
    // Under the run's lease: an executor that lost the run writes nothing.
    let lease = Lease {
        run: ctx.run().clone(),
        epoch: ctx.run().lease_epoch,
    };
    let mut f = ctx.inner().store.fenced(&lease).await.map_err(abort)?;
    let recorded = f.record_evaluation(&new).await.map_err(abort)?;
    f.commit().await.map_err(abort)?;
    Ok(match recorded {
        Recorded::New(row) => ToolOutput::json(&Submitted {
            recorded: true,
            replayed: false,
            evaluation: row.into(),
        }),
        Recorded::Existing(row)
            if row.dimensions.get(CALL_KEY).and_then(Value::as_str) == Some(ctx.tool_use_id()) =>
        {
            ToolOutput::json(&Submitted {
                recorded: true,
                replayed: true,
                evaluation: row.into(),
            })
        }
        Recorded::Existing(row) => ToolOutput::error(already(&row)),
    })
}

/// The message for a second submission of a task by the same run.
fn already(row: &EvaluationRow) -> String {
    let what = if row.task.is_empty() {
        "its work as a whole (no `task`)".to_owned()
    } else {
        format!("task `{}`", row.task)
    };
    format!(
        "this run already submitted an evaluation of {what}: {} for `{}` (evaluation {}); a run records one evaluation per task, so give another `task` to record another",
        row.verdict, row.agent_name, row.id
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn err(input: Value) -> String {
        read(&input).err().unwrap_or_else(|| panic!("{input} read"))
    }

    #[test]
    fn submit_reads_with_defaults() {
        let r = read(&json!({"op": "submit", "verdict": "pass"})).unwrap();
        assert_eq!(
            r,
            Request::Submit {
                task: String::new(),
                verdict: VerdictKind::Pass,
                score: 1.0,
                dimensions: Map::new(),
                agent: None,
            }
        );
        for (verdict, score) in [("fail", 0.0), ("inconclusive", 0.5)] {
            let Request::Submit { score: s, .. } =
                read(&json!({"op": "submit", "verdict": verdict})).unwrap()
            else {
                panic!("a submission")
            };
            assert!((s - score).abs() < f64::EPSILON, "{verdict}");
        }
        let r = read(&json!({
            "op": "submit", "verdict": "fail", "score": 0, "task": "t1", "agent": "coder",
            "dimensions": {"correctness": 0.25, "style": "terse"},
            // Not read by submit.
            "run_id": 5, "version": []
        }))
        .unwrap();
        assert_eq!(
            r,
            Request::Submit {
                task: "t1".into(),
                verdict: VerdictKind::Fail,
                score: 0.0,
                dimensions: json!({"correctness": 0.25, "style": "terse"})
                    .as_object()
                    .cloned()
                    .unwrap(),
                agent: Some("coder".into()),
            }
        );
    }

    #[test]
    fn get_and_aggregate_read() {
        let id = RunId::new();
        assert_eq!(
            read(&json!({"op": "get", "run_id": id.to_string(), "task": "t", "verdict": 5})),
            Ok(Request::Get {
                run_id: Some(id),
                task: Some("t".into())
            })
        );
        assert_eq!(
            read(&json!({"op": "get"})),
            Ok(Request::Get {
                run_id: None,
                task: None
            })
        );
        assert_eq!(
            read(&json!({"op": "aggregate", "agent": "coder", "version": "sha256:ab"})),
            Ok(Request::Aggregate {
                agent: "coder".into(),
                version: Some("sha256:ab".into())
            })
        );
    }

    #[test]
    fn bad_input_says_what_to_fix() {
        let cases = [
            (
                json!({}),
                "`op` must be one of submit, get, aggregate, got nothing",
            ),
            (
                json!({"op": "rate"}),
                "`op` must be one of submit, get, aggregate, got \"rate\"",
            ),
            (
                json!({"op": "submit"}),
                "`verdict` (pass, fail or inconclusive) is required",
            ),
            (
                json!({"op": "submit", "verdict": null}),
                "`verdict` (pass, fail or inconclusive) is required",
            ),
            (
                json!({"op": "submit", "verdict": "great"}),
                "`verdict` must be pass, fail or inconclusive, got \"great\"",
            ),
            (
                json!({"op": "submit", "verdict": true}),
                "`verdict` must be pass, fail or inconclusive, got true",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "score": 1.5}),
                "`score` must be a number from 0 to 1, got 1.5",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "score": -1}),
                "`score` must be a number from 0 to 1, got -1",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "score": "high"}),
                "`score` must be a number from 0 to 1, got \"high\"",
            ),
            // The verdict before the score.
            (
                json!({"op": "submit", "score": 7}),
                "`verdict` (pass, fail or inconclusive) is required",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "task": 3}),
                "`task` must be a string, got a number",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "task": "x".repeat(129)}),
                "`task` must be at most 128 characters, got 129",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "dimensions": [1]}),
                "`dimensions` must be an object, got an array",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "dimensions": {"a": [1]}}),
                "`dimensions.a` must be a number or a string, got an array",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "dimensions": {"a": null}}),
                "`dimensions.a` must be a number or a string, got null",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "dimensions": {"a": "x".repeat(257)}}),
                "`dimensions.a` must be at most 256 characters, got 257",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "dimensions": {"": 1}}),
                "dimension names must be 1 to 64 characters, got \"\"",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "dimensions": {"tool_use_id": "x"}}),
                "`dimensions.tool_use_id` is weft's (it records the call that submitted the evaluation): name the dimension otherwise",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "agent": ""}),
                "`agent` is empty: name an agent of this tenant, or leave it out to evaluate this run's own",
            ),
            (
                json!({"op": "submit", "verdict": "pass", "agent": 5}),
                "`agent` must be a string, got a number",
            ),
            (
                json!({"op": "get", "run_id": "run-1"}),
                "`run_id` must be a run id (a UUID), got \"run-1\"",
            ),
            (
                json!({"op": "get", "run_id": 5}),
                "`run_id` must be a run id (a UUID), got 5",
            ),
            (
                json!({"op": "aggregate"}),
                "`agent` (the name of the agent whose evaluations to aggregate) is required",
            ),
            (
                json!({"op": "aggregate", "agent": ""}),
                "`agent` (the name of the agent whose evaluations to aggregate) is required",
            ),
            (
                json!({"op": "aggregate", "agent": "coder", "version": ""}),
                "`version` is empty: give a definition content hash, or leave it out for every version",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(err(input.clone()), want, "{input}");
        }
    }

    #[test]
    fn dimensions_are_bounded() {
        let many: Map<String, Value> = (0..33).map(|i| (format!("d{i}"), json!(i))).collect();
        assert_eq!(
            check_dimensions(&many),
            Err("`dimensions` may have at most 32 entries, got 33".into())
        );
        let at_most: Map<String, Value> = (0..32).map(|i| (format!("d{i}"), json!(i))).collect();
        assert_eq!(check_dimensions(&at_most), Ok(()));
        // 32 texts of 200 characters: each short, too long together.
        let big: Map<String, Value> = (0..32)
            .map(|i| (format!("d{i}"), json!("x".repeat(200))))
            .collect();
        let msg = check_dimensions(&big).unwrap_err();
        assert!(
            msg.starts_with("`dimensions` must be at most 4096 bytes as JSON, got "),
            "{msg}"
        );
        let long_name: Map<String, Value> = [("n".repeat(65), json!(1))].into_iter().collect();
        assert!(check_dimensions(&long_name).is_err());
    }

    #[test]
    fn reads_are_read_only_and_submit_is_rerunnable() {
        let t = Evaluation;
        assert_eq!(t.side_effect(&json!({"op": "get"})), SideEffect::ReadOnly);
        assert_eq!(
            t.side_effect(&json!({"op": "aggregate", "agent": "a"})),
            SideEffect::ReadOnly
        );
        assert_eq!(
            t.side_effect(&json!({"op": "submit", "verdict": "pass"})),
            SideEffect::Idempotent
        );
        assert_eq!(t.side_effect(&json!({})), SideEffect::Idempotent);
    }

    #[test]
    fn a_second_submission_is_named() {
        let row = EvaluationRow {
            id: uuid::Uuid::nil(),
            run_id: RunId::new(),
            task: String::new(),
            attempt: 0,
            agent_name: "coder".into(),
            agent_hash: "sha256:1".into(),
            emitter_role: "agent".into(),
            verdict: "pass".into(),
            score: 1.0,
            dimensions: json!({}),
            created_at: time::OffsetDateTime::UNIX_EPOCH,
        };
        assert_eq!(
            already(&row),
            "this run already submitted an evaluation of its work as a whole (no `task`): pass for `coder` (evaluation 00000000-0000-0000-0000-000000000000); a run records one evaluation per task, so give another `task` to record another"
        );
        let row = EvaluationRow {
            task: "t1".into(),
            ..row
        };
        assert!(already(&row).contains("an evaluation of task `t1`: pass"));
    }
}
