//! The `Skill` tool: the skills this run's agent may load (its `skills` allowlist) and their
//! instructions. `list` names them with their descriptions; `load` brings one skill's body — or
//! one of its files — into the conversation as the call's result. It only reads: `ReadOnly`.

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use weft_api::tools::{SkillInput, SkillOp, input_schema};
use weft_core::message::ToolSpec;
use weft_proto::v1;

use super::{
    Abort, Field, Problem, Reading, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput, read_op,
    substrate_error, with_retry,
};

/// `Skill`.
pub struct Skill;

impl Tool for Skill {
    fn name(&self) -> &str {
        "Skill"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Skills are instructions for particular tasks. op=list: the skills you \
                may load, with what each is for. op=load {name}: a skill's instructions (and \
                the names of its files); op=load {name, file}: one of its files."
                .into(),
            parameters: input_schema::<SkillInput>(),
        }
    }

    fn side_effect(&self, _input: &Value) -> SideEffect {
        SideEffect::ReadOnly
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move { skill(ctx, input).await.map(ToolOutcome::Done) })
    }
}

/// `op=list`: the skills this agent may load.
#[derive(Serialize)]
struct Offered {
    skills: Vec<Listed>,
}

#[derive(Serialize)]
struct Listed {
    name: String,
    description: String,
}

/// `Skill`'s messages.
fn words(field: &str, problem: &Problem<'_>) -> Option<String> {
    match (field, problem) {
        ("name", Problem::Missing | Problem::Invalid { .. }) => {
            Some("`name` (a skill from op=list) is required".into())
        }
        _ => None,
    }
}

/// Reads a call's input: its op, then the op's fields (a `file` that is not a string is
/// ignored, as before the input was typed).
pub(super) fn read(input: &Value) -> Result<SkillInput, String> {
    let fields: &[Field] = match read_op(input, words)? {
        SkillOp::List => &[Field::Need("op")],
        SkillOp::Load => &[
            Field::Need("op"),
            Field::Need("name"),
            Field::Lenient("file"),
        ],
    };
    Reading::new(fields, words).read(input)
}

async fn skill(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Abort> {
    let input = match read(input) {
        Ok(i) => i,
        Err(msg) => return Ok(ToolOutput::error(msg)),
    };
    let allowed = &ctx.spec().skills;
    let client = weft_proto::transport::substrate_client(ctx.substrate_transport());
    match input.op {
        SkillOp::List => {
            let skills = match with_retry(|| {
                let mut client = client.clone();
                let req = ctx
                    .internal(v1::ListSkillsRequest {})
                    .map_err(|e| tonic::Status::internal(e.message));
                async move { client.list_skills(req?).await }
            })
            .await
            {
                Ok(r) => r.into_inner().skills,
                Err(s) => return substrate_error(&s),
            };
            let skills = skills
                .into_iter()
                .filter(|s| !s.retired && allowed.contains(&s.name))
                .map(|s| Listed {
                    name: s.name,
                    description: s.description,
                })
                .collect();
            Ok(ToolOutput::json(&Offered { skills }))
        }
        SkillOp::Load => {
            let Some(name) = input.name.as_deref() else {
                return Ok(ToolOutput::error(
                    "`name` (a skill from op=list) is required",
                ));
            };
            if !allowed.iter().any(|a| a == name) {
                return Ok(ToolOutput::error(format!(
                    "skill `{name}` is not available to this agent; op=list shows the ones that are"
                )));
            }
            let msg = v1::GetSkillRequest {
                name: name.to_owned(),
                version: None,
            };
            let s = match with_retry(|| {
                let mut client = client.clone();
                let req = ctx
                    .internal(msg.clone())
                    .map_err(|e| tonic::Status::internal(e.message));
                async move { client.get_skill(req?).await }
            })
            .await
            {
                Ok(r) => r.into_inner(),
                Err(s) => return substrate_error(&s),
            };
            if s.retired {
                return Ok(ToolOutput::error(format!("skill `{name}` is retired")));
            }
            match input.file.as_deref() {
                Some(file) => Ok(match s.files.get(file) {
                    Some(text) => ToolOutput::ok(text.clone()),
                    None => ToolOutput::error(format!(
                        "skill `{name}` has no file `{file}`; its files: {}",
                        s.files.keys().cloned().collect::<Vec<_>>().join(", ")
                    )),
                }),
                None => {
                    let mut text = format!("# Skill: {}\n\n{}", s.name, s.body);
                    if !s.files.is_empty() {
                        text.push_str("\n\nFiles (load with op=load, name, file): ");
                        text.push_str(&s.files.keys().cloned().collect::<Vec<_>>().join(", "));
                    }
                    Ok(ToolOutput::ok(text))
                }
            }
        }
    }
}
