//! The checkout: a volume's files written into a scratch directory for one command
//! ([`Scratch`], [`write_file`]), and afterwards what the command changed ([`scan`]): the
//! directory walked without following anything, regular files only, each compared by sha256
//! with the index the checkout was made from.
//!
//! What a command leaves that is not a regular file with a clean path never reaches the volume:
//! a symlink (which could point anywhere on the host), a fifo, a socket, a device, a file with
//! more than one link, a name that is not UTF-8 or not a valid volume path. Each is refused and
//! named in the answer; a file of the index at such a path is left as it was in the volume
//! (neither changed nor deleted).
//!
//! Every file system call here blocks: callers run them on the blocking pool.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{
    DirBuilderExt as _, FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _,
    PermissionsExt as _,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

use weft_volumes::path::MAX_PATH_BYTES;

/// The prefix of every scratch directory's name.
pub const SCRATCH_PREFIX: &str = "weft-exec-";

/// How many refusals an answer names (the rest are counted).
pub const MAX_REFUSED: usize = 100;

/// A file as the checkout was made: its sha256 and mode (0644 or 0755).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Indexed {
    pub sha256: String,
    pub mode: u32,
}

/// A scratch directory, removed (with everything in it) when dropped.
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// A new directory `weft-exec-<uuid>` under `base` (made if missing), mode 0700, owned by
    /// `owner` when given (the sandbox's uid).
    pub fn create(base: &Path, owner: Option<u32>) -> io::Result<Self> {
        fs::DirBuilder::new().recursive(true).create(base)?;
        let dir = base.join(format!("{SCRATCH_PREFIX}{}", uuid::Uuid::now_v7()));
        fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let scratch = Self { dir };
        fs::set_permissions(&scratch.dir, fs::Permissions::from_mode(0o700))?;
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&scratch.dir, Some(uid), Some(uid))?;
        }
        Ok(scratch)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = remove_tree(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot remove an Exec scratch directory");
        }
    }
}

/// Removes `dir` and everything in it, first making every directory in it writable (a command
/// may have left one read-only, which stops its owner — not root — from removing it).
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            make_removable(dir);
            fs::remove_dir_all(dir)
        }
    }
}

fn make_removable(dir: &Path) {
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let _ = fs::set_permissions(&d, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
}

/// Removes scratch directories under `base` older than `age` (left by an executor that died
/// mid-command). Best effort.
pub fn sweep_stale(base: &Path, age: Duration) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let stale = e.file_name().to_string_lossy().starts_with(SCRATCH_PREFIX)
            && e.file_type().is_ok_and(|t| t.is_dir())
            && e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|elapsed| elapsed > age);
        if stale {
            let _ = remove_tree(&e.path());
        }
    }
}

/// Writes a file of the volume (`path` as the index has it: clean and relative) into the
/// checkout at `root`, making its directories, with `mode` (0644 or 0755), owned by `owner`.
pub fn write_file(
    root: &Path,
    path: &str,
    content: &[u8],
    mode: u32,
    owner: Option<u32>,
) -> io::Result<()> {
    let mut at = root.to_owned();
    let mut parts = path.split('/').peekable();
    while let Some(part) = parts.next() {
        at.push(part);
        if parts.peek().is_none() {
            break;
        }
        match fs::DirBuilder::new().mode(0o755).create(&at) {
            Ok(()) => {
                if let Some(uid) = owner {
                    std::os::unix::fs::chown(&at, Some(uid), Some(uid))?;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && at.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    let mode = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&at)?;
    file.write_all(content)?;
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    if let Some(uid) = owner {
        std::os::unix::fs::chown(&at, Some(uid), Some(uid))?;
    }
    Ok(())
}

/// The caps a scan enforces while it reads.
#[derive(Clone, Copy, Debug)]
pub struct ScanCaps {
    /// A larger file is refused (`volumes.max_file_bytes`).
    pub max_file_bytes: u64,
    /// More files than this and nothing is synced (`volumes.max_files`).
    pub max_files: u64,
    /// More bytes in all files than this and nothing is synced (`volumes.max_volume_bytes`).
    pub max_total_bytes: u64,
}

/// One file operation the command's work needs, checked against what the checkout was made
/// from: `if_match` is the sha256 the file had then ("" = it did not exist).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Put {
        path: String,
        content: Vec<u8>,
        sha256: String,
        mode: u32,
        if_match: String,
    },
    Delete {
        path: String,
        if_match: String,
    },
}

impl Op {
    pub fn path(&self) -> &str {
        match self {
            Self::Put { path, .. } | Self::Delete { path, .. } => path,
        }
    }
}

/// What a command changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// In path order: puts of new and changed files, then deletes.
    pub ops: Vec<Op>,
    /// Why each entry that is not synced is not ("refused on sync: `x` is a symlink"), the
    /// first [`MAX_REFUSED`].
    pub refused: Vec<String>,
    /// Refusals beyond [`MAX_REFUSED`].
    pub refused_more: usize,
}

/// Why nothing of a command's work can be synced.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(
        "the command left more than {0} files (volumes.max_files); nothing was synced — remove files and run it again"
    )]
    TooManyFiles(u64),
    #[error(
        "the command left more than {0} bytes of files (volumes.max_volume_bytes); nothing was synced — remove files and run it again"
    )]
    TooLarge(u64),
    #[error("cannot read the checkout: {0}")]
    Io(String),
}

impl Scan {
    fn refuse(&mut self, refused: &mut BTreeSet<String>, rel: &str, why: String) {
        refused.insert(rel.to_owned());
        if self.refused.len() < MAX_REFUSED {
            self.refused.push(format!("refused on sync: {why}"));
        } else {
            self.refused_more += 1;
        }
    }
}

/// What kind of entry a file type is, for a refusal.
fn kind(t: fs::FileType) -> &'static str {
    if t.is_symlink() {
        "a symlink"
    } else if t.is_fifo() {
        "a fifo"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// Walks the checkout at `root` and compares it with `index` (what it was made from).
pub fn scan(
    root: &Path,
    index: &BTreeMap<String, Indexed>,
    caps: &ScanCaps,
) -> Result<Scan, ScanError> {
    let io_err = |e: io::Error| ScanError::Io(e.to_string());
    let mut out = Scan::default();
    let mut refused: BTreeSet<String> = BTreeSet::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut puts: Vec<Op> = Vec::new();
    let (mut files, mut bytes, mut entries) = (0u64, 0u64, 0u64);
    let max_entries = caps.max_files.saturating_mul(4).saturating_add(1000);
    let mut stack: Vec<(PathBuf, String)> = vec![(root.to_owned(), String::new())];
    while let Some((dir, rel_dir)) = stack.pop() {
        let mut names: Vec<(std::ffi::OsString, PathBuf)> =
            read_dir(&dir).map_err(io_err)?.into_iter().collect();
        names.sort();
        for (name, abs) in names {
            entries += 1;
            if entries > max_entries {
                return Err(ScanError::TooManyFiles(caps.max_files));
            }
            let Some(name) = name.to_str() else {
                let shown = name.to_string_lossy();
                let rel = join(&rel_dir, &shown);
                out.refuse(&mut refused, &rel, format!("`{rel}` is not a UTF-8 name"));
                continue;
            };
            let rel = join(&rel_dir, name);
            let meta = fs::symlink_metadata(&abs).map_err(io_err)?;
            let t = meta.file_type();
            if t.is_dir() {
                if rel.len() > MAX_PATH_BYTES {
                    out.refuse(
                        &mut refused,
                        &rel,
                        format!("`{rel}` is longer than {MAX_PATH_BYTES} bytes"),
                    );
                } else {
                    stack.push((abs, rel));
                }
                continue;
            }
            if !t.is_file() {
                out.refuse(&mut refused, &rel, format!("`{rel}` is {}", kind(t)));
                continue;
            }
            let path = match weft_volumes::path::clean("path", &rel) {
                Ok(p) if p == rel => p,
                Ok(_) => {
                    out.refuse(&mut refused, &rel, format!("`{rel}` is not a clean path"));
                    continue;
                }
                Err(e) => {
                    out.refuse(&mut refused, &rel, format!("`{rel}`: {e}"));
                    continue;
                }
            };
            if meta.nlink() > 1 {
                out.refuse(&mut refused, &rel, format!("`{rel}` is a hard link"));
                continue;
            }
            if meta.len() > caps.max_file_bytes {
                out.refuse(
                    &mut refused,
                    &rel,
                    format!(
                        "`{rel}` is {} bytes; a file may hold at most {} (volumes.max_file_bytes)",
                        meta.len(),
                        caps.max_file_bytes
                    ),
                );
                continue;
            }
            files += 1;
            if files > caps.max_files {
                return Err(ScanError::TooManyFiles(caps.max_files));
            }
            bytes = bytes.saturating_add(meta.len());
            if bytes > caps.max_total_bytes {
                return Err(ScanError::TooLarge(caps.max_total_bytes));
            }
            let content = read_file(&abs, caps.max_file_bytes).map_err(io_err)?;
            let sha256 = weft_volumes::sha256_hex(&content);
            let mode = if meta.mode() & 0o111 != 0 {
                0o755
            } else {
                0o644
            };
            seen.insert(path.clone());
            let if_match = match index.get(&path) {
                Some(i) if i.sha256 == sha256 && i.mode == mode => continue,
                Some(i) => i.sha256.clone(),
                None => String::new(),
            };
            puts.push(Op::Put {
                path,
                content,
                sha256,
                mode,
                if_match,
            });
        }
    }
    puts.sort_by(|a, b| a.path().cmp(b.path()));
    out.ops = puts;
    for (path, i) in index {
        let shadowed = refused.iter().any(|r| {
            path == r
                || path
                    .strip_prefix(r.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        });
        if !seen.contains(path) && !shadowed {
            out.ops.push(Op::Delete {
                path: path.clone(),
                if_match: i.sha256.clone(),
            });
        }
    }
    Ok(out)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// The entries of `dir`; a directory the command made unreadable (to its owner) is made
/// readable first.
fn read_dir(dir: &Path) -> io::Result<Vec<(std::ffi::OsString, PathBuf)>> {
    let entries = match fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
            fs::read_dir(dir)?
        }
        r => r?,
    };
    entries
        .map(|e| e.map(|e| (e.file_name(), e.path())))
        .collect()
}

/// A file's bytes (at most `max + 1`), never following a symlink: the walk saw a regular file,
/// and nothing runs in the sandbox any more, but the open refuses one anyway.
fn read_file(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    /// `O_NOFOLLOW` on Linux.
    const O_NOFOLLOW: i32 = 0o400_000;
    let open = || {
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_NOFOLLOW)
            .open(path)
    };
    let file = match open() {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
            open()?
        }
        r => r?,
    };
    let mut content = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut content)?;
    Ok(content)
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "unit tests: a panic is how a test fails"
    )]

    use super::*;

    const CAPS: ScanCaps = ScanCaps {
        max_file_bytes: 1000,
        max_files: 10,
        max_total_bytes: 5000,
    };

    fn scratch() -> Scratch {
        Scratch::create(&std::env::temp_dir(), None).unwrap()
    }

    fn indexed(content: &[u8], mode: u32) -> Indexed {
        Indexed {
            sha256: weft_volumes::sha256_hex(content),
            mode,
        }
    }

    #[test]
    fn an_untouched_checkout_changes_nothing() {
        let s = scratch();
        write_file(s.path(), "a.txt", b"a", 0o644, None).unwrap();
        write_file(s.path(), "d/e/run.sh", b"#!/bin/sh", 0o755, None).unwrap();
        let index = BTreeMap::from([
            ("a.txt".to_owned(), indexed(b"a", 0o644)),
            ("d/e/run.sh".to_owned(), indexed(b"#!/bin/sh", 0o755)),
        ]);
        let mode = fs::metadata(s.path().join("d/e/run.sh")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o755);
        assert_eq!(scan(s.path(), &index, &CAPS).unwrap(), Scan::default());
    }

    #[test]
    fn changes_new_files_modes_and_deletes_are_ops_with_the_shas_of_the_checkout() {
        let s = scratch();
        write_file(s.path(), "keep.txt", b"k", 0o644, None).unwrap();
        write_file(s.path(), "edit.txt", b"old", 0o644, None).unwrap();
        write_file(s.path(), "gone.txt", b"g", 0o644, None).unwrap();
        write_file(s.path(), "x.sh", b"x", 0o644, None).unwrap();
        let index = BTreeMap::from([
            ("keep.txt".to_owned(), indexed(b"k", 0o644)),
            ("edit.txt".to_owned(), indexed(b"old", 0o644)),
            ("gone.txt".to_owned(), indexed(b"g", 0o644)),
            ("x.sh".to_owned(), indexed(b"x", 0o644)),
        ]);
        fs::write(s.path().join("edit.txt"), b"new").unwrap();
        fs::remove_file(s.path().join("gone.txt")).unwrap();
        fs::create_dir(s.path().join("sub")).unwrap();
        fs::write(s.path().join("sub/new.txt"), b"n").unwrap();
        fs::set_permissions(s.path().join("x.sh"), fs::Permissions::from_mode(0o700)).unwrap();
        let got = scan(s.path(), &index, &CAPS).unwrap();
        let sha = weft_volumes::sha256_hex;
        assert_eq!(
            got.ops,
            vec![
                Op::Put {
                    path: "edit.txt".into(),
                    content: b"new".to_vec(),
                    sha256: sha(b"new"),
                    mode: 0o644,
                    if_match: sha(b"old"),
                },
                Op::Put {
                    path: "sub/new.txt".into(),
                    content: b"n".to_vec(),
                    sha256: sha(b"n"),
                    mode: 0o644,
                    if_match: String::new(),
                },
                Op::Put {
                    path: "x.sh".into(),
                    content: b"x".to_vec(),
                    sha256: sha(b"x"),
                    mode: 0o755,
                    if_match: sha(b"x"),
                },
                Op::Delete {
                    path: "gone.txt".into(),
                    if_match: sha(b"g"),
                },
            ]
        );
        assert!(got.refused.is_empty());
    }

    #[test]
    fn symlinks_fifos_sockets_and_hard_links_are_refused_and_never_read() {
        let s = scratch();
        write_file(s.path(), "a.txt", b"a", 0o644, None).unwrap();
        let index = BTreeMap::from([("a.txt".to_owned(), indexed(b"a", 0o644))]);
        // The index's file replaced by a symlink to a host secret: neither synced nor deleted.
        fs::remove_file(s.path().join("a.txt")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", s.path().join("a.txt")).unwrap();
        std::os::unix::fs::symlink("/etc", s.path().join("etc")).unwrap();
        let fifo = std::process::Command::new("mkfifo")
            .arg(s.path().join("pipe"))
            .status()
            .unwrap();
        assert!(fifo.success());
        let _sock = std::os::unix::net::UnixListener::bind(s.path().join("sock")).unwrap();
        fs::write(s.path().join("one"), b"1").unwrap();
        fs::hard_link(s.path().join("one"), s.path().join("two")).unwrap();
        let got = scan(s.path(), &index, &CAPS).unwrap();
        assert_eq!(got.ops, vec![]);
        assert_eq!(
            got.refused,
            vec![
                "refused on sync: `a.txt` is a symlink",
                "refused on sync: `etc` is a symlink",
                "refused on sync: `one` is a hard link",
                "refused on sync: `pipe` is a fifo",
                "refused on sync: `sock` is a socket",
                "refused on sync: `two` is a hard link",
            ]
        );
    }

    #[test]
    fn caps_refuse_a_big_file_and_stop_a_flood() {
        let s = scratch();
        fs::write(s.path().join("big"), vec![b'x'; 1001]).unwrap();
        fs::write(s.path().join("ok"), vec![b'x'; 1000]).unwrap();
        let got = scan(s.path(), &BTreeMap::new(), &CAPS).unwrap();
        assert_eq!(got.ops.len(), 1);
        assert_eq!(
            got.refused,
            vec![
                "refused on sync: `big` is 1001 bytes; a file may hold at most 1000 (volumes.max_file_bytes)"
            ]
        );
        for i in 0..10 {
            fs::write(s.path().join(format!("f{i}")), b"x").unwrap();
        }
        assert!(matches!(
            scan(s.path(), &BTreeMap::new(), &CAPS),
            Err(ScanError::TooManyFiles(10))
        ));
        let s = scratch();
        for i in 0..6 {
            fs::write(s.path().join(format!("f{i}")), vec![b'x'; 1000]).unwrap();
        }
        let e = scan(s.path(), &BTreeMap::new(), &CAPS).unwrap_err();
        assert!(matches!(e, ScanError::TooLarge(5000)), "{e}");
    }

    #[test]
    fn a_name_that_is_no_volume_path_is_refused() {
        use std::os::unix::ffi::OsStrExt as _;
        let s = scratch();
        fs::write(s.path().join(std::ffi::OsStr::from_bytes(b"bad\xff")), b"x").unwrap();
        let got = scan(s.path(), &BTreeMap::new(), &CAPS).unwrap();
        assert!(
            got.refused
                .contains(&"refused on sync: `bad\u{fffd}` is not a UTF-8 name".to_owned()),
            "{got:?}"
        );
    }

    #[test]
    fn a_scratch_directory_goes_away_even_when_made_read_only() {
        let s = scratch();
        let dir = s.path().to_owned();
        write_file(&dir, "ro/f", b"x", 0o644, None).unwrap();
        fs::set_permissions(dir.join("ro"), fs::Permissions::from_mode(0o500)).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o500)).unwrap();
        drop(s);
        assert!(!dir.exists());
    }

    #[test]
    fn stale_scratch_directories_are_swept() {
        let base = std::env::temp_dir().join(format!("weft-sweep-test-{}", uuid::Uuid::now_v7()));
        let s = Scratch::create(&base, None).unwrap();
        let dir = s.path().to_owned();
        std::mem::forget(s);
        fs::create_dir(base.join("other")).unwrap();
        sweep_stale(&base, Duration::from_secs(3600));
        assert!(dir.exists());
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
        fs::File::open(&dir)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
        sweep_stale(&base, Duration::from_secs(3600));
        assert!(!dir.exists());
        assert!(base.join("other").exists());
        fs::remove_dir_all(&base).unwrap();
    }
}
