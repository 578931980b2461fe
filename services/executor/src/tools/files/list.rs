//! `List`: the immediate children of a directory of a volume — files with their sizes,
//! directories marked (`dir: true`, with how many files they hold) — from the substrate's index
//! (`Tree` under the directory, deeper paths folded into their first directory). Volumes have
//! no empty directories: a directory is there while a file is under it. At most
//! [`MAX_ENTRIES`] entries. Only reads: `ReadOnly`.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use weft_api::tools::{ListInput, input_schema};
use weft_core::message::ToolSpec;
use weft_proto::v1;

use super::{Fail, clean, finish, read_input, rpc, target};
use crate::tools::{Abort, Field, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// The most entries one `List` answers.
pub const MAX_ENTRIES: usize = 500;
/// Index pages read for one listing (1000 paths each).
const MAX_PAGES: usize = 20;

/// `List`.
pub struct List;

impl Tool for List {
    fn name(&self) -> &str {
        "List"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Lists a directory of a volume (default: the root): its files with \
                sizes, and its subdirectories (dir: true) with how many files each holds."
                .into(),
            parameters: input_schema::<ListInput>(),
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
        Box::pin(async move { finish(list(ctx, input).await).map(ToolOutcome::Done) })
    }
}

pub(super) const FIELDS: &[Field] = &[Field::Opt("path"), Field::Opt("volume")];

/// One child of the listed directory.
#[derive(Debug, PartialEq, Serialize)]
pub(crate) struct Entry {
    pub name: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dir: bool,
    /// A file's size; a directory's files' sizes, all the way down.
    pub size: i64,
    /// Files under a directory, all the way down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
}

/// What `List` answers.
#[derive(Debug, Serialize)]
pub(crate) struct Listing {
    pub path: String,
    pub entries: Vec<Entry>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// The directory a `path` names: `""` for the root.
fn directory(path: Option<&str>) -> Result<String, Fail> {
    match path.map(|p| p.trim_matches('/')) {
        None | Some("" | ".") => Ok(String::new()),
        Some(p) => clean("path", p),
    }
}

async fn list(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Fail> {
    let input: ListInput = read_input(input, FIELDS)?;
    let target = target(ctx, input.volume.as_deref(), false)?;
    let dir = directory(input.path.as_deref())?;
    let mut folder = Folder::new(&dir);
    let mut cursor = None;
    let mut complete = false;
    for _ in 0..MAX_PAGES {
        let msg = v1::TreeRequest {
            volume: Some(target.volume.clone()),
            prefix: dir.clone(),
            cursor: cursor.take(),
            limit: 1000,
        };
        let page = match rpc(ctx, msg, |mut c, r| async move { c.tree(r).await }).await {
            Ok(p) => p,
            // The run's own volume before its first write: empty.
            Err(s)
                if s.code() == tonic::Code::NotFound
                    && target.name == weft_core::volume::RUN_VOLUME =>
            {
                v1::TreeResponse::default()
            }
            Err(s) => return Err(s.into()),
        };
        for f in &page.files {
            folder.add(&f.path, f.size);
        }
        match page.next_cursor {
            Some(c) if !page.files.is_empty() => cursor = Some(c),
            _ => {
                complete = true;
                break;
            }
        }
    }
    if folder.is_file {
        return Err(Fail::from(format!(
            "`{dir}` is a file, not a directory; use Read to see it"
        )));
    }
    if folder.children.is_empty() && !dir.is_empty() {
        return Err(Fail::from(format!(
            "no directory `{dir}` in volume `{}`; List without a path shows the root",
            target.name
        )));
    }
    Ok(ToolOutput::json(&folder.listing(!complete)))
}

/// Folds the index's paths under a directory into its immediate children.
pub(crate) struct Folder {
    /// The directory with a trailing `/`, or `""` for the root.
    prefix: String,
    dir: String,
    children: BTreeMap<String, Entry>,
    /// The directory's own path is a file.
    is_file: bool,
}

impl Folder {
    pub(crate) fn new(dir: &str) -> Self {
        Self {
            prefix: if dir.is_empty() {
                String::new()
            } else {
                format!("{dir}/")
            },
            dir: dir.to_owned(),
            children: BTreeMap::new(),
            is_file: false,
        }
    }

    /// Counts one file of the index (paths outside the directory are ignored).
    pub(crate) fn add(&mut self, path: &str, size: i64) {
        if path == self.dir {
            self.is_file = true;
            return;
        }
        let Some(rest) = path.strip_prefix(&self.prefix) else {
            return;
        };
        let (name, dir) = match rest.split_once('/') {
            Some((first, _)) => (first, true),
            None => (rest, false),
        };
        let e = self.children.entry(name.to_owned()).or_insert(Entry {
            name: name.to_owned(),
            dir,
            size: 0,
            files: dir.then_some(0),
        });
        e.size += size;
        if let Some(n) = &mut e.files {
            *n += 1;
        }
    }

    /// The listing: directories first, then files, each by name; at most [`MAX_ENTRIES`].
    pub(crate) fn listing(self, partial: bool) -> Listing {
        let total = self.children.len();
        let (mut entries, files): (Vec<Entry>, Vec<Entry>) =
            self.children.into_values().partition(|e| e.dir);
        entries.extend(files);
        entries.truncate(MAX_ENTRIES);
        Listing {
            path: self.dir,
            entries,
            truncated: partial || total > MAX_ENTRIES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deeper_paths_fold_into_directories() {
        let mut f = Folder::new("src");
        for (p, size) in [
            ("README.md", 5),
            ("src/lib.rs", 10),
            ("src/a/b.rs", 3),
            ("src/a/c/d.rs", 4),
            ("src/main.rs", 1),
            ("srcx/no.rs", 1),
        ] {
            f.add(p, size);
        }
        let l = f.listing(false);
        assert_eq!(l.path, "src");
        let got: Vec<(&str, bool, i64, Option<u64>)> = l
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e.dir, e.size, e.files))
            .collect();
        assert_eq!(
            got,
            [
                ("a", true, 7, Some(2)),
                ("lib.rs", false, 10, None),
                ("main.rs", false, 1, None)
            ]
        );
        assert!(!l.truncated);
        let v = serde_json::to_value(&l.entries[1]).unwrap();
        assert_eq!(v, serde_json::json!({"name": "lib.rs", "size": 10}));
    }

    #[test]
    fn the_root_and_a_file() {
        let mut f = Folder::new("");
        f.add("a.txt", 1);
        f.add("d/x", 2);
        let names: Vec<String> = f
            .listing(true)
            .entries
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["d", "a.txt"]);
        let mut f = Folder::new("a.txt");
        f.add("a.txt", 1);
        assert!(f.is_file);
        assert!(directory(Some("/")).unwrap().is_empty());
        assert!(directory(None).unwrap().is_empty());
    }
}
