//! What a change does to an index, decided before anything is written: the checks of `Apply`
//! (preconditions, file/directory clashes, the per-file cap), of `Undo` (every file still as the
//! undone change left it) and of `Restore`, each producing a [`Planned`] change: the files it
//! touches (before and after) and the index after it. Pure: no I/O, so every rule is decided in
//! one place and the store only writes what a plan says.
//!
//! A precondition that fails is `conflict` (gRPC FAILED_PRECONDITION, HTTP 409); a file or
//! change that is not there is `not_found`; a cap is `rate_limited` (RESOURCE_EXHAUSTED).

use std::collections::{BTreeMap, HashMap};

use weft_core::{Error, ErrorCode};

/// The mode of a plain file (0644).
pub const MODE_FILE: i32 = 0o644;
/// The mode of an executable file (0755).
pub const MODE_EXEC: i32 = 0o755;

/// One file of an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub sha256: String,
    pub size: i64,
    pub mode: i32,
}

/// An index: path → file, in path (byte) order.
pub type Index = BTreeMap<String, Entry>;

/// What an operation does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Makes the file this blob; `mode` 0 keeps the file's mode (0644 for a new file).
    Put {
        sha256: String,
        mode: i32,
    },
    Delete,
    Move {
        to: String,
        overwrite: bool,
    },
}

/// One validated operation of an `Apply`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub path: String,
    /// The sha256 the file must have now; "" = it must not exist; `None` = no check.
    pub if_match: Option<String>,
    pub kind: OpKind,
}

/// A file a change touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Touched {
    pub path: String,
    pub before: Option<Entry>,
    pub after: Option<Entry>,
}

/// A change, decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// In path order; never a file absent on both sides.
    pub files: Vec<Touched>,
    /// The index after the change.
    pub index: Index,
    /// Bytes and files after the change.
    pub bytes: i64,
    pub count: i64,
}

/// One file of a recorded change, for an undo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub path: String,
    pub before: Option<Entry>,
    pub after_sha: Option<String>,
    /// The mode the change left (`None` where it deleted the file).
    pub after_mode: Option<i32>,
}

/// A recorded change, for an undo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedChange {
    pub id: String,
    pub files: Vec<Recorded>,
}

pub fn conflict(message: String) -> Error {
    Error::new(ErrorCode::Conflict, message)
}

pub fn exhausted(message: String) -> Error {
    Error::new(ErrorCode::RateLimited, message)
}

/// Pending changes over an index: path → the file after (`None` = deleted).
struct Overlay<'a> {
    index: &'a Index,
    changed: BTreeMap<String, Option<Entry>>,
}

impl<'a> Overlay<'a> {
    fn new(index: &'a Index) -> Self {
        Self {
            index,
            changed: BTreeMap::new(),
        }
    }

    fn get(&self, path: &str) -> Option<&Entry> {
        match self.changed.get(path) {
            Some(e) => e.as_ref(),
            None => self.index.get(path),
        }
    }

    fn set(&mut self, path: &str, e: Option<Entry>) {
        self.changed.insert(path.to_owned(), e);
    }

    /// The plan: the files touched and the index after.
    fn finish(self) -> Planned {
        let mut index = self.index.clone();
        let mut files = Vec::with_capacity(self.changed.len());
        for (path, after) in self.changed {
            let before = self.index.get(&path).cloned();
            match &after {
                Some(e) => {
                    index.insert(path.clone(), e.clone());
                }
                None => {
                    index.remove(&path);
                }
            }
            if before.is_some() || after.is_some() {
                files.push(Touched {
                    path,
                    before,
                    after,
                });
            }
        }
        let bytes = index.values().map(|e| e.size).sum();
        let count = i64::try_from(index.len()).unwrap_or(i64::MAX);
        Planned {
            files,
            index,
            bytes,
            count,
        }
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

fn check_match(i: usize, path: &str, want: &str, cur: Option<&Entry>) -> Result<(), Error> {
    let param = format!("ops[{i}].if_match");
    match (want.is_empty(), cur) {
        (true, None) => Ok(()),
        (true, Some(c)) => Err(conflict(format!(
            "`{path}` already exists (sha256 {}), but `if_match` \"\" requires it not to; read it and retry with its sha256",
            c.sha256
        ))
        .with_param(param)),
        (false, None) => Err(conflict(format!(
            "`{path}` does not exist, but `if_match` is {}; use `if_match` \"\" to create it",
            short(want)
        ))
        .with_param(param)),
        (false, Some(c)) if c.sha256 == want => Ok(()),
        (false, Some(c)) => Err(conflict(format!(
            "`{path}` changed: it is now sha256 {}, not {} (`if_match`); read it again and retry",
            c.sha256,
            short(want)
        ))
        .with_param(param)),
    }
}

fn no_file(i: usize, path: &str) -> Error {
    Error::not_found(format!("no file `{path}` in this volume"))
        .with_param(format!("ops[{i}].path"))
}

/// Decides an `Apply`: each op is checked against the state the ops before it left, in order;
/// `sizes` holds the size of every blob a put names. With `replace`, every file not put is
/// deleted (ops must all be puts). A file larger than `max_file_bytes` is refused.
pub fn apply(
    index: &Index,
    ops: &[Op],
    replace: bool,
    sizes: &HashMap<String, i64>,
    max_file_bytes: u64,
) -> Result<Planned, Error> {
    let mut o = Overlay::new(index);
    let max = i64::try_from(max_file_bytes).unwrap_or(i64::MAX);
    for (i, op) in ops.iter().enumerate() {
        let cur = o.get(&op.path).cloned();
        if let Some(want) = &op.if_match {
            check_match(i, &op.path, want, cur.as_ref())?;
        }
        match &op.kind {
            OpKind::Put { sha256, mode } => {
                let size = *sizes.get(sha256).ok_or_else(|| {
                    conflict(format!(
                        "blob {sha256} was not uploaded; call PutBlobs first"
                    ))
                    .with_param(format!("ops[{i}].put.sha256"))
                })?;
                if size > max {
                    return Err(Error::invalid(format!(
                        "`{}` would be {size} bytes; a file may hold at most {max_file_bytes} (volumes.max_file_bytes)",
                        op.path
                    ))
                    .with_param(format!("ops[{i}].put")));
                }
                let mode = if *mode == 0 {
                    cur.as_ref().map_or(MODE_FILE, |c| c.mode)
                } else {
                    *mode
                };
                o.set(
                    &op.path,
                    Some(Entry {
                        sha256: sha256.clone(),
                        size,
                        mode,
                    }),
                );
            }
            OpKind::Delete => {
                if cur.is_none() {
                    return Err(no_file(i, &op.path));
                }
                o.set(&op.path, None);
            }
            OpKind::Move { to, overwrite } => {
                let Some(cur) = cur else {
                    return Err(no_file(i, &op.path));
                };
                if to == &op.path {
                    return Err(Error::invalid(format!(
                        "`ops[{i}].move.to` is `{to}`, the file itself; name another path"
                    ))
                    .with_param(format!("ops[{i}].move.to")));
                }
                if let Some(there) = o.get(to)
                    && !overwrite
                {
                    return Err(conflict(format!(
                        "`{to}` already exists (sha256 {}); set `overwrite` to replace it, or move to another path",
                        there.sha256
                    ))
                    .with_param(format!("ops[{i}].move.to")));
                }
                o.set(&op.path, None);
                o.set(to, Some(cur));
            }
        }
    }
    if replace {
        for path in index.keys() {
            if !o.changed.contains_key(path) {
                o.set(path, None);
            }
        }
    }
    let planned = o.finish();
    check_shapes(&planned)?;
    Ok(planned)
}

/// Refuses a file where the index after has a directory, or under a path that is a file: the
/// tree must be one a file system can hold.
fn check_shapes(p: &Planned) -> Result<(), Error> {
    for t in p.files.iter().filter(|t| t.after.is_some()) {
        for dir in weft_volumes::path::parent_dirs(&t.path) {
            if p.index.contains_key(dir) {
                return Err(conflict(format!(
                    "`{}` cannot be a file: `{dir}` is a file, not a directory; move or delete `{dir}` first",
                    t.path
                ))
                .with_param("path"));
            }
        }
        let below = format!("{}/", t.path);
        if let Some((under, _)) = p.index.range(below.clone()..).next()
            && under.starts_with(&below)
        {
            return Err(conflict(format!(
                "`{}` cannot be a file: it is a directory holding `{under}`; choose another path",
                t.path
            ))
            .with_param("path"));
        }
    }
    Ok(())
}

/// Decides an undo of `changes`, newest first: every file of each must still be as the change
/// left it (after the undos of the newer ones), else nothing is undone.
pub fn undo(index: &Index, changes: &[RecordedChange]) -> Result<Planned, Error> {
    let mut o = Overlay::new(index);
    for c in changes {
        for f in &c.files {
            // Content and mode: a later mode-only change is a change too.
            let now = o.get(&f.path).map(|e| (e.sha256.clone(), e.mode));
            let left = f
                .after_sha
                .clone()
                .map(|s| (s, f.after_mode.unwrap_or(MODE_FILE)));
            if now != left {
                let now = now.map_or_else(
                    || "missing".to_owned(),
                    |(sha, mode)| format!("{sha}, mode {mode:o}"),
                );
                return Err(conflict(format!(
                    "`{}` changed since change {} (now {now}); undo the later change first",
                    f.path, c.id
                ))
                .with_param("path"));
            }
            o.set(&f.path, f.before.clone());
        }
    }
    Ok(o.finish())
}

/// Decides a restore: the index becomes `target`; only files that differ are touched.
pub fn restore(index: &Index, target: &Index) -> Planned {
    let mut o = Overlay::new(index);
    for (path, e) in index {
        match target.get(path) {
            Some(t) if t == e => {}
            t => o.set(path, t.cloned()),
        }
    }
    for (path, t) in target {
        if !index.contains_key(path) {
            o.set(path, Some(t.clone()));
        }
    }
    o.finish()
}

/// The tree hash of an index.
pub fn tree_hash(index: &Index) -> String {
    weft_volumes::hash::tree_hash(index.iter().map(|(p, e)| {
        (
            p.as_str(),
            e.sha256.as_str(),
            u32::try_from(e.mode).unwrap_or(0),
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(sha: &str, size: i64) -> Entry {
        Entry {
            sha256: sha.repeat(64),
            size,
            mode: MODE_FILE,
        }
    }

    fn idx(files: &[(&str, Entry)]) -> Index {
        files
            .iter()
            .map(|(p, e)| ((*p).to_owned(), e.clone()))
            .collect()
    }

    fn put(path: &str, sha: &str) -> Op {
        Op {
            path: path.into(),
            if_match: None,
            kind: OpKind::Put {
                sha256: sha.repeat(64),
                mode: 0,
            },
        }
    }

    fn sizes() -> HashMap<String, i64> {
        ["a", "b", "c"].iter().map(|s| (s.repeat(64), 10)).collect()
    }

    #[test]
    fn ops_apply_in_order_and_touch_each_path_once() {
        let index = idx(&[("x", e("a", 10))]);
        let ops = vec![
            put("y", "b"),
            Op {
                path: "y".into(),
                if_match: Some("b".repeat(64)),
                kind: OpKind::Move {
                    to: "z".into(),
                    overwrite: false,
                },
            },
            Op {
                path: "x".into(),
                if_match: None,
                kind: OpKind::Delete,
            },
        ];
        let p = apply(&index, &ops, false, &sizes(), 100).unwrap();
        let paths: Vec<_> = p.files.iter().map(|t| t.path.as_str()).collect();
        // `y` was created and moved away in the same change: absent on both sides, not listed.
        assert_eq!(paths, ["x", "z"]);
        assert_eq!(p.index.keys().collect::<Vec<_>>(), ["z"]);
        assert_eq!((p.bytes, p.count), (10, 1));
    }

    #[test]
    fn preconditions_are_refused_naming_the_op() {
        let index = idx(&[("x", e("a", 10))]);
        let mut op = put("x", "b");
        op.if_match = Some(String::new());
        let err = apply(&index, &[op], false, &sizes(), 100).unwrap_err();
        assert_eq!(err.code, ErrorCode::Conflict);
        assert_eq!(err.param.as_deref(), Some("ops[0].if_match"));
        let del = Op {
            path: "nope".into(),
            if_match: None,
            kind: OpKind::Delete,
        };
        let err = apply(&index, &[put("y", "b"), del], false, &sizes(), 100).unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound);
        assert_eq!(err.param.as_deref(), Some("ops[1].path"));
        let err = apply(&index, &[put("big", "c")], false, &sizes(), 9).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidRequest);
        let err = apply(&index, &[put("u", "f")], false, &sizes(), 100).unwrap_err();
        assert!(err.message.contains("PutBlobs"), "{}", err.message);
    }

    #[test]
    fn files_and_directories_do_not_clash() {
        let index = idx(&[("a/b", e("a", 10))]);
        let err = apply(&index, &[put("a", "b")], false, &sizes(), 100).unwrap_err();
        assert!(err.message.contains("directory"), "{}", err.message);
        let err = apply(&index, &[put("a/b/c", "b")], false, &sizes(), 100).unwrap_err();
        assert!(err.message.contains("is a file"), "{}", err.message);
        // Replacing the tree frees the path.
        apply(&index, &[put("a", "b")], true, &sizes(), 100).unwrap();
    }

    #[test]
    fn undo_refuses_a_file_changed_since() {
        let index = idx(&[("x", e("b", 10))]);
        let c = RecordedChange {
            id: "c1".into(),
            files: vec![Recorded {
                path: "x".into(),
                before: Some(e("a", 5)),
                after_sha: Some("c".repeat(64)),
                after_mode: Some(MODE_FILE),
            }],
        };
        let err = undo(&index, std::slice::from_ref(&c)).unwrap_err();
        assert!(
            err.message.contains("changed since change c1"),
            "{}",
            err.message
        );
        let ok = RecordedChange {
            files: vec![Recorded {
                after_sha: Some("b".repeat(64)),
                ..c.files[0].clone()
            }],
            ..c
        };
        // A later mode-only change is refused too.
        let mut chmod = index.clone();
        if let Some(x) = chmod.get_mut("x") {
            x.mode = MODE_EXEC;
        }
        let err = undo(&chmod, std::slice::from_ref(&ok)).unwrap_err();
        assert!(err.message.contains("mode 755"), "{}", err.message);
        let p = undo(&index, &[ok]).unwrap();
        assert_eq!(p.index.get("x"), Some(&e("a", 5)));
    }

    #[test]
    fn restore_touches_only_what_differs() {
        let index = idx(&[
            ("same", e("a", 1)),
            ("changed", e("a", 1)),
            ("gone", e("a", 1)),
        ]);
        let target = idx(&[
            ("same", e("a", 1)),
            ("changed", e("b", 2)),
            ("new", e("c", 3)),
        ]);
        let p = restore(&index, &target);
        let paths: Vec<_> = p.files.iter().map(|t| t.path.as_str()).collect();
        assert_eq!(paths, ["changed", "gone", "new"]);
        assert_eq!(p.index, target);
    }
}
