//! A skill's content (API.md, "Skills"): instructions an agent can load into its conversation
//! on demand. A skill is a definition like an agent — versioned, content-addressed by the same
//! canonical JSON and `sha256:` hash ([`crate::def`]), tenant-scoped — whose content is a
//! `description` (what the model sees when it chooses a skill), a `body` (the instructions) and
//! optional `files` (relative path → text) that travel with it.
//!
//! [`parse_skill_markdown`] reads a `SKILL.md` (YAML front matter `name`, `description`; the body
//! is the instructions); the substrate reads a whole `<name>/` folder around it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Error;
use crate::def::{DefContent, DefKind};

/// Bounds enforced by [`SkillContent::validate`].
pub mod limits {
    /// `description`: required, at most this many bytes.
    pub const DESCRIPTION_BYTES: usize = 4096;
    /// `body`: required, at most this many bytes.
    pub const BODY_BYTES: usize = 256 * 1024;
    /// Entries of `files`.
    pub const FILES: usize = 32;
    /// One file's text.
    pub const FILE_BYTES: usize = 256 * 1024;
    /// A file's path.
    pub const FILE_NAME_BYTES: usize = 128;
    /// `/`-separated segments of a file's path.
    pub const FILE_DEPTH: usize = 4;
    /// `body` and every file together.
    pub const TOTAL_BYTES: usize = 1024 * 1024;
}

/// The file of a skill folder that holds the front matter and the body; not a `files` entry.
pub const SKILL_FILE: &str = "SKILL.md";

/// The content fields of a skill. Two skills with the same content have the same hash.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SkillContent {
    /// What the skill is for, shown to the model in the list of skills it may load.
    pub description: String,
    /// The instructions, loaded into the conversation when the skill is used.
    pub body: String,
    /// Supporting text files by relative path (`reference.md`, `scripts/check.py`).
    pub files: BTreeMap<String, String>,
}

fn bad(param: impl Into<String>, message: impl Into<String>) -> Error {
    Error::invalid(message).with_param(param)
}

fn check_text(field: &str, text: &str, max: usize, required: &str) -> Result<(), Error> {
    if text.trim().is_empty() {
        return Err(bad(field, format!("`{field}` is empty; {required}")));
    }
    if text.len() > max {
        return Err(bad(
            field,
            format!(
                "`{field}` is {} bytes; at most {max} are allowed",
                text.len()
            ),
        ));
    }
    Ok(())
}

/// Whether `path` is a sane relative file path: 1-4 `/`-separated segments of
/// `[A-Za-z0-9._-]`, none starting with `.`, at most [`limits::FILE_NAME_BYTES`], and not
/// [`SKILL_FILE`].
fn check_file_name(field: &str, path: &str) -> Result<(), Error> {
    let segments: Vec<&str> = path.split('/').collect();
    let sane = !path.is_empty()
        && path.len() <= limits::FILE_NAME_BYTES
        && segments.len() <= limits::FILE_DEPTH
        && segments.iter().all(|s| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        });
    if !sane {
        return Err(bad(
            field,
            format!(
                "`{field}`: file name `{}` is not valid; use a relative path of at most {} characters and {} `/`-separated parts of A-Z, a-z, 0-9, '.', '_' and '-', none starting with '.'",
                path.escape_default(),
                limits::FILE_NAME_BYTES,
                limits::FILE_DEPTH
            ),
        ));
    }
    if path == SKILL_FILE {
        return Err(bad(
            field,
            format!("`{field}`: `{SKILL_FILE}` is the skill's body; put its text in `body`"),
        ));
    }
    Ok(())
}

impl SkillContent {
    /// Checks what types cannot. The message names the field and says how to fix it.
    pub fn validate(&self) -> Result<(), Error> {
        if self.files.len() > limits::FILES {
            return Err(bad(
                "files",
                format!(
                    "`files` has {} entries; at most {} are allowed",
                    self.files.len(),
                    limits::FILES
                ),
            ));
        }
        // Stored text cannot hold U+0000 (a NUL in a file name is reported at that name).
        crate::storable::refuse_nul(self)?;
        check_text(
            "description",
            &self.description,
            limits::DESCRIPTION_BYTES,
            "say in a sentence what the skill is for: the model chooses skills by it",
        )?;
        check_text(
            "body",
            &self.body,
            limits::BODY_BYTES,
            "give the skill's instructions",
        )?;
        let mut total = self.body.len();
        for (name, text) in &self.files {
            let field = format!("files.{name}");
            check_file_name(&field, name)?;
            if text.len() > limits::FILE_BYTES {
                return Err(bad(
                    field.clone(),
                    format!(
                        "`{field}` is {} bytes; a file may have at most {}",
                        text.len(),
                        limits::FILE_BYTES
                    ),
                ));
            }
            total += text.len();
        }
        if total > limits::TOTAL_BYTES {
            return Err(bad(
                "files",
                format!(
                    "`body` and `files` together are {total} bytes; at most {} are allowed",
                    limits::TOTAL_BYTES
                ),
            ));
        }
        Ok(())
    }

    /// Reads content fields from a JSON object; omitted fields take their defaults. An unknown
    /// or ill-typed field is a 400 naming it. Does not [`validate`](Self::validate).
    pub fn from_json(value: Value) -> Result<Self, Error> {
        crate::def::from_json_fields("a skill", value)
    }
}

impl DefContent for SkillContent {
    const KIND: DefKind = DefKind::Skill;

    fn from_json(value: Value) -> Result<Self, Error> {
        SkillContent::from_json(value)
    }

    fn validate(&self) -> Result<(), Error> {
        SkillContent::validate(self)
    }

    fn description(&self) -> &str {
        &self.description
    }
}

/// Parses a `SKILL.md`: YAML front matter between `---` lines with `description` (and
/// optionally `name`; default `name_hint`, the folder's name), then the body, trimmed, as the
/// instructions. No other front-matter keys are allowed. `files` is left empty. The result is
/// validated.
pub fn parse_skill_markdown(name_hint: &str, text: &str) -> Result<(String, SkillContent), Error> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (front, body) = crate::agent::split_front_matter(text)?;
    let Some(yaml) = front else {
        return Err(Error::invalid(
            "a SKILL.md starts with YAML front matter between `---` lines, with at least `description`",
        )
        .with_param("description"));
    };
    let mut fields = match serde_yaml::from_str::<Value>(yaml)
        .map_err(|e| Error::invalid(format!("the front matter is not valid YAML: {e}")))?
    {
        Value::Null => Map::new(),
        Value::Object(m) => m,
        other => {
            return Err(Error::invalid(format!(
                "the front matter must be a YAML mapping with `name` and `description`, got {}",
                crate::agent::json_kind(&other)
            )));
        }
    };
    let name = match fields.remove("name") {
        None => name_hint.to_owned(),
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(bad(
                "name",
                format!(
                    "`name` must be a string, got {}",
                    crate::agent::json_kind(&other)
                ),
            ));
        }
    };
    crate::def::validate_def_name(DefKind::Skill, &name)?;
    if let Some(key) = fields.keys().find(|k| k.as_str() != "description").cloned() {
        return Err(bad(
            key.clone(),
            format!(
                "unknown front-matter field `{key}`; a SKILL.md's front matter has `name` and `description`, the instructions are the body"
            ),
        ));
    }
    fields.insert("body".into(), Value::String(body.trim().to_owned()));
    let content = SkillContent::from_json(Value::Object(fields))?;
    content.validate()?;
    Ok((name, content))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn skill(v: Value) -> SkillContent {
        SkillContent::from_json(v).unwrap()
    }

    #[test]
    fn the_hash_is_the_canonical_json_hash() {
        let a =
            skill(json!({"description": "d", "body": "b", "files": {"b.md": "2", "a.md": "1"}}));
        let b =
            skill(json!({"files": {"a.md": "1", "b.md": "2"}, "body": "b", "description": "d"}));
        assert_eq!(a.hash(), b.hash());
        assert_eq!(
            a.canonical_json(),
            r#"{"body":"b","description":"d","files":{"a.md":"1","b.md":"2"}}"#
        );
        assert_eq!(
            a.hash(),
            crate::agent::sha256_ref(&crate::def::canonical_json(&a))
        );
        // Files omitted and empty are the same content.
        assert_eq!(
            skill(json!({"description": "d", "body": "b"})).hash(),
            skill(json!({"description": "d", "body": "b", "files": {}})).hash()
        );
    }

    #[test]
    fn bad_content_names_the_field() {
        let param = |v: Value| {
            let e = SkillContent::from_json(v)
                .and_then(|c| c.validate().map(|()| c))
                .unwrap_err();
            e.param.unwrap_or_default()
        };
        assert_eq!(param(json!({"body": "b"})), "description");
        assert_eq!(param(json!({"description": "d"})), "body");
        assert_eq!(param(json!({"description": "d", "body": "b", "x": 1})), "x");
        assert_eq!(param(json!({"description": "d", "body": 3})), "body");
        assert_eq!(
            param(json!({"description": "d", "body": "a\u{0}b"})),
            "body"
        );
        assert_eq!(
            param(json!({"description": "d", "body": "b", "files": {"../x": "t"}})),
            "files.../x"
        );
        assert_eq!(
            param(json!({"description": "d", "body": "b", "files": {".env": "t"}})),
            "files..env"
        );
        assert_eq!(
            param(json!({"description": "d", "body": "b", "files": {"SKILL.md": "t"}})),
            "files.SKILL.md"
        );
        assert_eq!(
            param(json!({"description": "d", "body": "x".repeat(limits::BODY_BYTES + 1)})),
            "body"
        );
        let many: Map<String, Value> = (0..=limits::FILES)
            .map(|i| (format!("f{i}"), json!("t")))
            .collect();
        assert_eq!(
            param(json!({"description": "d", "body": "b", "files": many})),
            "files"
        );
        let big: Map<String, Value> = (0..5)
            .map(|i| (format!("f{i}"), json!("x".repeat(limits::FILE_BYTES))))
            .collect();
        assert_eq!(
            param(json!({"description": "d", "body": "b", "files": big})),
            "files"
        );
        skill(json!({"description": "d", "body": "b", "files": {"scripts/run.py": "t"}}))
            .validate()
            .unwrap();
    }

    #[test]
    fn skill_markdown_reads_front_matter_and_body() {
        let (name, c) = parse_skill_markdown(
            "pdf",
            "---\nname: pdf\ndescription: Read PDFs\n---\n\nStep 1.\n",
        )
        .unwrap();
        assert_eq!(name, "pdf");
        assert_eq!(c.description, "Read PDFs");
        assert_eq!(c.body, "Step 1.");
        let (name, _) =
            parse_skill_markdown("pdf", "---\ndescription: Read PDFs\n---\nStep 1.\n").unwrap();
        assert_eq!(name, "pdf");
        let e = parse_skill_markdown("pdf", "---\ndescription: d\nmodel: x\n---\nb\n").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("model"));
        let e = parse_skill_markdown("pdf", "no front matter").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("description"));
        let e =
            parse_skill_markdown("pdf", "---\nname: Bad\ndescription: d\n---\nb\n").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("name"));
    }
}
