//! Skills on disk: a skill is a folder `<name>/` holding a `SKILL.md` (YAML front matter `name`,
//! `description`; the body is the instructions) and, optionally, supporting text files, which
//! become the skill's `files` keyed by their path relative to the folder (`reference.md`,
//! `scripts/check.py`). Hidden entries (names starting with `.`) are skipped; everything else
//! must be a UTF-8 text file or a folder, within the bounds of
//! [`weft_core::skill::limits`]. A front-matter `name` that differs from the folder's name is an
//! error.
//!
//! [`hash_skill_dir`] is `weft hash skill <dir>`: exactly the version hash a deployment reports
//! after boot-loading that folder, because both read it with [`read_skill_dir`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use weft_core::def::DefContent as _;
use weft_core::skill::{SKILL_FILE, SkillContent, limits, parse_skill_markdown};

use crate::SubstrateError;

/// A skill read from its folder, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillFolder {
    pub name: String,
    pub content: SkillContent,
    /// The folder, for messages.
    pub source: String,
}

fn boot(source: &str, msg: impl std::fmt::Display) -> SubstrateError {
    SubstrateError::Boot(format!("{source}: {msg}"))
}

/// The entries of `dir`, sorted, hidden ones skipped.
fn entries(dir: &Path) -> Result<Vec<PathBuf>, SubstrateError> {
    let unreadable =
        |e: std::io::Error| boot(&dir.display().to_string(), format!("cannot be read: {e}"));
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(unreadable)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(unreadable)?;
    paths.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| !n.starts_with('.'))
    });
    paths.sort();
    Ok(paths)
}

/// Reads a UTF-8 text file of at most `max` bytes (checked before reading).
fn read_text(path: &Path, max: usize) -> Result<String, SubstrateError> {
    let source = path.display().to_string();
    let len = std::fs::metadata(path)
        .map_err(|e| boot(&source, format!("cannot be read: {e}")))?
        .len();
    if len > max as u64 {
        return Err(boot(
            &source,
            format!("is {len} bytes; a skill file may have at most {max}"),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| boot(&source, format!("cannot be read: {e}")))?;
    String::from_utf8(bytes).map_err(|_| {
        boot(
            &source,
            "is not UTF-8 text; a skill carries text files only (remove it or hide it with a leading `.`)",
        )
    })
}

/// Adds the files under `dir` (relative path `prefix`) to `files`, bounded in count and depth.
fn collect_files(
    root: &Path,
    dir: &Path,
    prefix: &str,
    depth: usize,
    files: &mut BTreeMap<String, String>,
) -> Result<(), SubstrateError> {
    for path in entries(dir)? {
        let source = path.display().to_string();
        let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
            return Err(boot(&source, "the file name is not UTF-8; rename it"));
        };
        let rel = if prefix.is_empty() {
            file_name.to_owned()
        } else {
            format!("{prefix}/{file_name}")
        };
        if depth == 0 && rel == SKILL_FILE {
            continue;
        }
        let meta =
            std::fs::metadata(&path).map_err(|e| boot(&source, format!("cannot be read: {e}")))?;
        if meta.is_dir() {
            if depth + 1 >= limits::FILE_DEPTH {
                return Err(boot(
                    &source,
                    format!(
                        "is nested too deep; a skill's files are at most {} folders deep",
                        limits::FILE_DEPTH - 1
                    ),
                ));
            }
            collect_files(root, &path, &rel, depth + 1, files)?;
        } else if meta.is_file() {
            if files.len() >= limits::FILES {
                return Err(boot(
                    &root.display().to_string(),
                    format!(
                        "has more than {} files besides {SKILL_FILE}; a skill carries at most {}",
                        limits::FILES,
                        limits::FILES
                    ),
                ));
            }
            files.insert(rel, read_text(&path, limits::FILE_BYTES)?);
        } else {
            return Err(boot(&source, "is neither a file nor a folder; remove it"));
        }
    }
    Ok(())
}

/// Reads one skill folder: its `SKILL.md` and its other files, validated. Errors name the
/// folder or file and the field.
pub fn read_skill_dir(dir: &Path) -> Result<SkillFolder, SubstrateError> {
    let source = dir.display().to_string();
    let folder = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let skill_md = dir.join(SKILL_FILE);
    if !skill_md.is_file() {
        return Err(boot(
            &source,
            format!(
                "has no {SKILL_FILE}; a skill folder holds a {SKILL_FILE} with front matter `name` and `description` and the instructions as its body"
            ),
        ));
    }
    let text = read_text(
        &skill_md,
        limits::BODY_BYTES + limits::DESCRIPTION_BYTES + 1024,
    )?;
    let skill_md_source = skill_md.display().to_string();
    let (name, mut content) =
        parse_skill_markdown(&folder, &text).map_err(|e| boot(&skill_md_source, &e.message))?;
    if name != folder {
        return Err(boot(
            &skill_md_source,
            format!(
                "the front matter names the skill `{name}`, but its folder is `{folder}`; make them equal (a skill's name is its folder's name)"
            ),
        ));
    }
    let mut files = BTreeMap::new();
    collect_files(dir, dir, "", 0, &mut files)?;
    content.files = files;
    content.validate().map_err(|e| boot(&source, &e.message))?;
    Ok(SkillFolder {
        name,
        content,
        source,
    })
}

/// Every skill under `dir`: each sub-folder (sorted, hidden ones skipped) is one skill; files
/// directly in `dir` are ignored.
pub fn read_skills_dir(dir: &Path) -> Result<Vec<SkillFolder>, SubstrateError> {
    if !dir.is_dir() {
        return Err(SubstrateError::Boot(format!(
            "substrate.skills_dir {} is not a folder; point it at a folder of `<name>/SKILL.md`",
            dir.display()
        )));
    }
    entries(dir)?
        .into_iter()
        .filter(|p| p.is_dir())
        .map(|p| read_skill_dir(&p))
        .collect()
}

/// The `sha256:` version hash of the skill in folder `dir`: what a deployment reports after
/// boot-loading it (`weft hash skill <dir>`).
pub fn hash_skill_dir(dir: &Path) -> Result<String, SubstrateError> {
    read_skill_dir(dir).map(|s| s.content.hash())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("weft-skills-unit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_folder_reads_into_content_with_its_files() {
        let root = temp("read");
        let dir = root.join("pdf");
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(
            dir.join(SKILL_FILE),
            "---\nname: pdf\ndescription: Work with PDFs\n---\n\nUse the script.\n",
        )
        .unwrap();
        std::fs::write(dir.join("reference.md"), "ref").unwrap();
        std::fs::write(dir.join("scripts/run.py"), "print(1)").unwrap();
        std::fs::write(dir.join(".DS_Store"), [0xff, 0xfe]).unwrap();
        let s = read_skill_dir(&dir).unwrap();
        assert_eq!(s.name, "pdf");
        assert_eq!(s.content.body, "Use the script.");
        assert_eq!(
            s.content.files.keys().collect::<Vec<_>>(),
            ["reference.md", "scripts/run.py"]
        );
        assert_eq!(hash_skill_dir(&dir).unwrap(), s.content.hash());

        // A binary file is refused naming it.
        std::fs::write(dir.join("logo.png"), [0xff, 0xd8, 0xff]).unwrap();
        let e = read_skill_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("logo.png") && e.contains("UTF-8"), "{e}");
        std::fs::remove_file(dir.join("logo.png")).unwrap();

        // A name that differs from the folder is refused.
        std::fs::write(
            dir.join(SKILL_FILE),
            "---\nname: other\ndescription: d\n---\nb\n",
        )
        .unwrap();
        let e = read_skill_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("`other`") && e.contains("`pdf`"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
