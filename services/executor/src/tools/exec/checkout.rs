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
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};

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
fn kind(t: FileType) -> &'static str {
    match t {
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a fifo",
        FileType::Socket => "a socket",
        FileType::BlockDevice | FileType::CharacterDevice => "a device",
        _ => "not a regular file",
    }
}

/// Walks the checkout at `root` and compares it with `index` (what it was made from).
///
/// The walk holds a descriptor of each directory it is in and opens every entry relative to it
/// with `O_NOFOLLOW` (a directory also with `O_DIRECTORY`), so no component of any path is ever
/// a symlink followed; a file is read from the descriptor whose `fstat` is checked (a regular
/// file, one link, the inode the listing saw). An entry that changed while it was read is
/// refused.
pub fn scan(
    root: &Path,
    index: &BTreeMap<String, Indexed>,
    caps: &ScanCaps,
) -> Result<Scan, ScanError> {
    let mut walk = Walk {
        caps: *caps,
        index,
        out: Scan::default(),
        refused: BTreeSet::new(),
        seen: BTreeSet::new(),
        puts: Vec::new(),
        files: 0,
        bytes: 0,
        entries: 0,
        max_entries: caps.max_files.saturating_mul(4).saturating_add(1000),
    };
    let root_fd = rfs::open(root, DIR_FLAGS, Mode::empty()).map_err(io_err)?;
    // Directories being walked: each one's descriptor, its entries (sorted) and where it is.
    let mut stack: Vec<(OwnedFd, std::vec::IntoIter<OsString>, String)> = Vec::new();
    let names = walk.list(&root_fd)?;
    stack.push((root_fd, names.into_iter(), String::new()));
    while let Some((fd, names, rel_dir)) = stack.last_mut() {
        let Some(name) = names.next() else {
            stack.pop();
            continue;
        };
        let rel_dir = rel_dir.clone();
        if let Some((child, rel)) = walk.entry(fd, &name, &rel_dir)? {
            let names = walk.list(&child)?;
            stack.push((child, names.into_iter(), rel));
        }
    }
    let Walk {
        mut out,
        refused,
        seen,
        mut puts,
        ..
    } = walk;
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

/// A directory opened for listing: never through a symlink, and no tty.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// A file opened for reading: never through a symlink, never blocking (a fifo swapped in).
const FILE_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

fn io_err(e: impl Into<io::Error>) -> ScanError {
    ScanError::Io(e.into().to_string())
}

/// Whether an error means the entry is not what the listing saw (gone, or swapped for a
/// symlink or something else).
fn changed(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    [Errno::NOENT, Errno::LOOP, Errno::NOTDIR, Errno::NXIO].contains(&e)
}

/// The state of one scan.
struct Walk<'a> {
    caps: ScanCaps,
    index: &'a BTreeMap<String, Indexed>,
    out: Scan,
    refused: BTreeSet<String>,
    seen: BTreeSet<String>,
    puts: Vec<Op>,
    files: u64,
    bytes: u64,
    entries: u64,
    max_entries: u64,
}

impl Walk<'_> {
    fn refuse(&mut self, rel: &str, why: String) {
        self.out.refuse(&mut self.refused, rel, why);
    }

    /// The names in the directory `fd`, sorted; the entry cap is counted while reading.
    fn list(&mut self, fd: &OwnedFd) -> Result<Vec<OsString>, ScanError> {
        let mut dir = rfs::Dir::read_from(fd).map_err(io_err)?;
        let mut names = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(io_err)?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            self.entries += 1;
            if self.entries > self.max_entries {
                return Err(ScanError::TooManyFiles(self.caps.max_files));
            }
            names.push(OsStr::from_bytes(name).to_owned());
        }
        names.sort();
        Ok(names)
    }

    /// One entry of the directory `dir` (at `rel_dir`): a file compared with the index, or a
    /// directory to walk (its descriptor and path).
    fn entry(
        &mut self,
        dir: &OwnedFd,
        name: &OsStr,
        rel_dir: &str,
    ) -> Result<Option<(OwnedFd, String)>, ScanError> {
        let Some(utf8) = name.to_str() else {
            let rel = join(rel_dir, &name.to_string_lossy());
            self.refuse(&rel, format!("`{rel}` is not a UTF-8 name"));
            return Ok(None);
        };
        let rel = join(rel_dir, utf8);
        let st = match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) if changed(e) => {
                self.refuse(&rel, format!("`{rel}` changed while it was read"));
                return Ok(None);
            }
            Err(e) => return Err(io_err(e)),
        };
        let t = FileType::from_raw_mode(st.st_mode);
        if t == FileType::Directory {
            if rel.len() > MAX_PATH_BYTES {
                self.refuse(
                    &rel,
                    format!("`{rel}` is longer than {MAX_PATH_BYTES} bytes"),
                );
                return Ok(None);
            }
            return match open_dir(dir, name) {
                Ok(child) if same_inode(&child, &st) => Ok(Some((child, rel))),
                Ok(_) => {
                    self.refuse(&rel, format!("`{rel}` changed while it was read"));
                    Ok(None)
                }
                Err(e) if changed(e) => {
                    self.refuse(&rel, format!("`{rel}` changed while it was read"));
                    Ok(None)
                }
                Err(e) => Err(io_err(e)),
            };
        }
        if t != FileType::RegularFile {
            self.refuse(&rel, format!("`{rel}` is {}", kind(t)));
            return Ok(None);
        }
        let path = match weft_volumes::path::clean("path", &rel) {
            Ok(p) if p == rel => p,
            Ok(_) => {
                self.refuse(&rel, format!("`{rel}` is not a clean path"));
                return Ok(None);
            }
            Err(e) => {
                self.refuse(&rel, format!("`{rel}`: {e}"));
                return Ok(None);
            }
        };
        if st.st_nlink > 1 {
            self.refuse(&rel, format!("`{rel}` is a hard link"));
            return Ok(None);
        }
        let len = u64::try_from(st.st_size).unwrap_or(u64::MAX);
        if len > self.caps.max_file_bytes {
            self.refuse(&rel, self.too_big(&rel, len));
            return Ok(None);
        }
        self.files += 1;
        if self.files > self.caps.max_files {
            return Err(ScanError::TooManyFiles(self.caps.max_files));
        }
        let file = match open_file(dir, name) {
            Ok(f) => f,
            Err(e) if changed(e) => {
                self.refuse(&rel, format!("`{rel}` changed while it was read"));
                return Ok(None);
            }
            Err(e) => return Err(io_err(e)),
        };
        let now = rfs::fstat(&file).map_err(io_err)?;
        if FileType::from_raw_mode(now.st_mode) != FileType::RegularFile
            || !same_inode(&file, &st)
            || now.st_nlink > 1
        {
            self.refuse(&rel, format!("`{rel}` changed while it was read"));
            return Ok(None);
        }
        let mut content = Vec::new();
        fs::File::from(file)
            .take(self.caps.max_file_bytes.saturating_add(1))
            .read_to_end(&mut content)
            .map_err(io_err)?;
        let len = content.len() as u64;
        if len > self.caps.max_file_bytes {
            self.refuse(&rel, self.too_big(&rel, len));
            return Ok(None);
        }
        self.bytes = self.bytes.saturating_add(len);
        if self.bytes > self.caps.max_total_bytes {
            return Err(ScanError::TooLarge(self.caps.max_total_bytes));
        }
        let sha256 = weft_volumes::sha256_hex(&content);
        let mode = if now.st_mode & 0o111 != 0 {
            0o755
        } else {
            0o644
        };
        self.seen.insert(path.clone());
        let if_match = match self.index.get(&path) {
            Some(i) if i.sha256 == sha256 && i.mode == mode => return Ok(None),
            Some(i) => i.sha256.clone(),
            None => String::new(),
        };
        self.puts.push(Op::Put {
            path,
            content,
            sha256,
            mode,
            if_match,
        });
        Ok(None)
    }

    fn too_big(&self, rel: &str, len: u64) -> String {
        format!(
            "`{rel}` is {len} bytes; a file may hold at most {} (volumes.max_file_bytes)",
            self.caps.max_file_bytes
        )
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// Whether `fd` is the inode `st` describes.
fn same_inode(fd: &OwnedFd, st: &rfs::Stat) -> bool {
    rfs::fstat(fd).is_ok_and(|now| now.st_dev == st.st_dev && now.st_ino == st.st_ino)
}

/// Opens the directory `name` in `parent` for listing, never through a symlink; one the command
/// made unreadable to its owner (the executor not running as root) is made readable first —
/// through a descriptor of it, never by name.
fn open_dir(parent: &OwnedFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    match rfs::openat(parent, name, DIR_FLAGS, Mode::empty()) {
        Err(rustix::io::Errno::ACCESS) => {
            let at = rfs::openat(parent, name, DIR_FLAGS.union(OFlags::PATH), Mode::empty())?;
            chmod_fd(&at, 0o700)?;
            rfs::openat(&at, ".", DIR_FLAGS, Mode::empty())
        }
        r => r,
    }
}

/// Opens the file `name` in `parent` for reading, never through a symlink; one the command made
/// unreadable to its owner is made readable first, through a descriptor of it.
fn open_file(parent: &OwnedFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    match rfs::openat(parent, name, FILE_FLAGS, Mode::empty()) {
        Err(rustix::io::Errno::ACCESS) => {
            let at = rfs::openat(
                parent,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            if FileType::from_raw_mode(rfs::fstat(&at)?.st_mode) != FileType::RegularFile {
                return Err(rustix::io::Errno::NXIO);
            }
            chmod_fd(&at, 0o600)?;
            rfs::openat(rfs::CWD, proc_fd(&at).as_str(), FILE_FLAGS, Mode::empty())
        }
        r => r,
    }
}

/// `/proc/self/fd/<n>`: the inode `fd` holds, by a name that cannot be swapped.
fn proc_fd(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// chmod of the inode `fd` holds (an `O_PATH` descriptor: through `/proc/self/fd`).
fn chmod_fd(fd: &OwnedFd, mode: u32) -> rustix::io::Result<()> {
    rfs::chmodat(
        rfs::CWD,
        proc_fd(fd).as_str(),
        Mode::from_raw_mode(mode),
        AtFlags::empty(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "unit tests: a panic is how a test fails"
    )]

    use std::os::unix::fs::MetadataExt as _;

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
