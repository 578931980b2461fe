//! `/v1/skills…`: skills, the eight definition routes ([`crate::defs`]) over [`SkillContent`].
//!
//! [`SkillContent`] mirrors `weft_core::skill::SkillContent` (serde form, defaults); weft-core
//! keeps the validation, and a test there checks that both serialize the same.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::defs::{DefContentSchema, def_ops};
use crate::op::Op;

/// A skill's content (hashed into its version): what it is for, its instructions, and optional supporting text files.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(transform = required)]
#[schemars(extend("example" = {
    "description": "Fill in PDF forms",
    "body": "To fill a form: list its fields, then write each value.",
    "files": {"reference.md": "Field names are case-sensitive."}
}))]
pub struct SkillContent {
    /// what the skill is for; the model chooses skills by it
    #[schemars(length(min = 1, max = 4096))]
    pub description: String,
    /// the instructions, loaded into the conversation when the skill is used
    #[schemars(length(min = 1, max = 262144))]
    pub body: String,
    /// supporting text files by relative path; at most 32, 256 KiB each, 1 MiB with the body
    #[schemars(
        extend(
            "additionalProperties" = {"type": "string", "maxLength": 262144},
            "maxProperties" = 32,
            "propertyNames" = {
                "type": "string",
                "maxLength": 128,
                "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*){0,3}$"
            }
        )
    )]
    pub files: BTreeMap<String, String>,
}

/// `description` and `body` have no default worth having: a put must give them.
fn required(s: &mut schemars::Schema) {
    crate::defs::require(s, &["description", "body"]);
}

impl DefContentSchema for SkillContent {
    const NAME: &'static str = "Skill";
}

pub fn ops() -> Vec<Op> {
    def_ops::<SkillContent>(&crate::def_texts!(
        path: "/v1/skills", tag: "skills", example: "pdf-forms",
        plural: "skills", a: "a skill", noun: "skill", put_a: "a skill",
        put_description: "Scope: tenant:admin or admin. The body is the content fields: `description` and `body` are required, `files` defaults to {}. The same content returns the existing version (200, created=false) and makes it active; new content becomes the next version (201) with the previously active version as parent. A retired name is un-retired.",
        retire: "Retire a skill (it stays readable; the Skill tool stops offering it)",
    ))
}
