//! Tar import and export of a volume (`application/x-tar`).
//!
//! [`read_tar`] accepts regular files only: directories are skipped (a volume has no empty
//! directories), symlinks, hard links, devices, FIFOs and sparse files are refused, naming the
//! entry. Every name goes through [`crate::path::clean`], so `../x` or `/etc/x` is refused rather
//! than rewritten; a duplicate path, or a file where another one needs a directory (`a` and
//! `a/b`), is refused. The caps on files, per-file bytes and total bytes are checked against each
//! header's declared size **before** its content is read, so a bomb is refused at its first
//! header over a cap. GNU long names and PAX headers (`path`, `size`) are understood; a PAX
//! global header (as `git archive` writes) is skipped.
//!
//! [`write_tar`] writes a deterministic GNU tar: the caller's order, mode as given, mtime 0,
//! uid/gid 0, no user or group names, and a GNU long-name entry before a path over 100 bytes.
//! It never fails.

use std::collections::{BTreeSet, HashSet};
use std::io::Read;

use tar::{EntryType, Header};

use crate::path::shown;

/// File mode of a plain file: `0o644`.
pub const MODE_FILE: u32 = 0o644;
/// File mode of an executable file: `0o755`.
pub const MODE_EXEC: u32 = 0o755;

/// The caps of an import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TarCaps {
    /// The most files the archive may hold.
    pub max_files: usize,
    /// The largest file, in bytes.
    pub max_file_bytes: u64,
    /// The largest sum of the files' sizes, in bytes.
    pub max_total_bytes: u64,
}

/// One file of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarFile {
    /// The clean path (see [`crate::path::clean`]).
    pub path: String,
    /// [`MODE_EXEC`] (493) when any execute bit is set, else [`MODE_FILE`] (420).
    pub mode: u32,
    /// The file's bytes.
    pub content: Vec<u8>,
}

/// A refused archive. [`TarError::field`] is the input field to report; the message names the
/// entry and the cap, and says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TarError {
    /// The bytes are not a readable tar archive, or end inside an entry.
    #[error(
        "the request body is not a valid tar archive: {message}; send an uncompressed tar (`tar -cf`)"
    )]
    Corrupt {
        /// What is wrong.
        message: String,
    },
    /// More files than `max_files`.
    #[error("the tar archive has more than {max} files (refused at entry {}); import at most {max} files at once", shown(.path))]
    TooManyFiles {
        /// The cap.
        max: usize,
        /// The first entry over it.
        path: String,
    },
    /// A file over `max_file_bytes`.
    #[error("tar entry {} is {size} bytes, over the cap of {max} bytes per file; leave it out or split it", shown(.path))]
    FileTooLarge {
        /// The entry.
        path: String,
        /// Its declared size.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// The files together over `max_total_bytes`.
    #[error("the tar archive's files add up to more than {max} bytes (refused at entry {}); import less at once", shown(.path))]
    TotalTooLarge {
        /// The first entry over the cap.
        path: String,
        /// The cap.
        max: u64,
    },
    /// An entry that is not a regular file or a directory.
    #[error("tar entry {} is a {kind}; only regular files and directories can be imported, so leave it out", shown(.path))]
    Unsupported {
        /// The entry.
        path: String,
        /// What it is: `symlink`, `hard link`, …
        kind: &'static str,
    },
    /// An entry whose name is not a clean volume path.
    #[error("tar entry {} is refused: {reason}", shown(.path))]
    BadPath {
        /// The name as written in the archive (lossy UTF-8).
        path: String,
        /// Why, naming the field `path`.
        reason: String,
    },
    /// The same path twice.
    #[error("tar entry {} appears twice; keep one", shown(.path))]
    Duplicate {
        /// The path.
        path: String,
    },
    /// A file and another file under it (`a` and `a/b`).
    #[error("tar entry {} needs {} to be a directory, but the archive has a file there; rename one of them", shown(.path), shown(.file))]
    FileIsDir {
        /// The entry under the file.
        path: String,
        /// The file used as a directory.
        file: String,
    },
}

impl TarError {
    /// The input field to report: `body` for the archive as a whole (corrupt, over a count or
    /// total cap), `entries` for one entry's problem.
    pub fn field(&self) -> &'static str {
        match self {
            TarError::Corrupt { .. }
            | TarError::TooManyFiles { .. }
            | TarError::TotalTooLarge { .. } => "body",
            TarError::FileTooLarge { .. }
            | TarError::Unsupported { .. }
            | TarError::BadPath { .. }
            | TarError::Duplicate { .. }
            | TarError::FileIsDir { .. } => "entries",
        }
    }
}

fn corrupt(e: impl std::fmt::Display) -> TarError {
    TarError::Corrupt {
        message: e.to_string(),
    }
}

/// What an entry type is, for a message; `None` for the kinds that are read or skipped.
fn refused_kind(t: EntryType) -> Option<&'static str> {
    match t {
        EntryType::Regular
        | EntryType::Continuous
        | EntryType::Directory
        | EntryType::XGlobalHeader => None,
        EntryType::Symlink => Some("symlink"),
        EntryType::Link => Some("hard link"),
        EntryType::Char => Some("character device"),
        EntryType::Block => Some("block device"),
        EntryType::Fifo => Some("FIFO"),
        EntryType::GNUSparse => Some("sparse file"),
        _ => Some("special entry"),
    }
}

/// The compression `bytes` start with, by magic number.
fn compression(bytes: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 4] = [
        (&[0x1f, 0x8b], "gzip"),
        (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
        (b"BZh", "bzip2"),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0], "xz"),
    ];
    MAGIC
        .iter()
        .find(|(m, _)| bytes.starts_with(m))
        .map(|(_, kind)| *kind)
}

/// Reads the regular files of a tar archive, refusing anything else and anything over `caps`.
pub fn read_tar(bytes: &[u8], caps: &TarCaps) -> Result<Vec<TarFile>, TarError> {
    if let Some(kind) = compression(bytes) {
        return Err(corrupt(format!("it is {kind}-compressed")));
    }
    let mut archive = tar::Archive::new(bytes);
    let mut files: Vec<TarFile> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut total: u64 = 0;
    for entry in archive.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let kind = entry.header().entry_type();
        if kind == EntryType::XGlobalHeader {
            continue;
        }
        if let Some(kind) = refused_kind(kind) {
            return Err(TarError::Unsupported { path: raw, kind });
        }
        if std::str::from_utf8(&entry.path_bytes()).is_err() {
            return Err(TarError::BadPath {
                path: raw,
                reason: "`path` must be UTF-8; rename the file".to_owned(),
            });
        }
        if kind == EntryType::Directory {
            // checked like a file's name (an escape is refused wherever it is), then skipped
            let dir = raw.strip_suffix('/').unwrap_or(&raw);
            if !dir.is_empty() && dir != "." {
                crate::path::clean("path", dir).map_err(|e| TarError::BadPath {
                    path: raw.clone(),
                    reason: e.message,
                })?;
            }
            continue;
        }
        let path = crate::path::clean("path", &raw).map_err(|e| TarError::BadPath {
            path: raw.clone(),
            reason: e.message,
        })?;
        if files.len() >= caps.max_files {
            return Err(TarError::TooManyFiles {
                max: caps.max_files,
                path,
            });
        }
        let size = entry.size();
        if size > caps.max_file_bytes {
            return Err(TarError::FileTooLarge {
                path,
                size,
                max: caps.max_file_bytes,
            });
        }
        total = total.saturating_add(size);
        if total > caps.max_total_bytes {
            return Err(TarError::TotalTooLarge {
                path,
                max: caps.max_total_bytes,
            });
        }
        if !seen.insert(path.clone()) {
            return Err(TarError::Duplicate { path });
        }
        let mode = entry.header().mode().map_err(corrupt)?;
        let declared = usize::try_from(size).map_err(corrupt)?;
        let mut content = Vec::with_capacity(declared.min(bytes.len()));
        entry.read_to_end(&mut content).map_err(corrupt)?;
        if content.len() != declared {
            return Err(corrupt(format!(
                "the archive ends inside entry {} ({} of {size} bytes present)",
                shown(&path),
                content.len()
            )));
        }
        files.push(TarFile {
            path,
            mode: if mode & 0o111 != 0 {
                MODE_EXEC
            } else {
                MODE_FILE
            },
            content,
        });
    }
    // a file cannot also be a directory of another
    let paths: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    for f in &files {
        if let Some(file) = crate::path::parent_dirs(&f.path).find(|d| paths.contains(d)) {
            return Err(TarError::FileIsDir {
                path: f.path.clone(),
                file: file.to_owned(),
            });
        }
    }
    Ok(files)
}

const BLOCK: usize = 512;
/// The longest name a header holds itself; a longer one goes in a GNU long-name entry first.
const NAME_FIELD: usize = 100;

/// Writes `(path, mode, content)` files as a deterministic GNU tar, in the order given.
pub fn write_tar<'a>(files: impl IntoIterator<Item = (&'a str, u32, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, mode, content) in files {
        let name = path.as_bytes();
        if name.len() > NAME_FIELD {
            // GNU long name: an `L` entry named `././@LongLink` whose data is the name and a NUL
            let mut data = name.to_vec();
            data.push(0);
            push_entry(
                &mut out,
                b"././@LongLink",
                EntryType::GNULongName,
                MODE_FILE,
                &data,
            );
        }
        push_entry(
            &mut out,
            &name[..name.len().min(NAME_FIELD)],
            EntryType::Regular,
            mode,
            content,
        );
    }
    // the end: two zero blocks
    out.resize(out.len() + 2 * BLOCK, 0);
    out
}

fn push_entry(out: &mut Vec<u8>, name: &[u8], kind: EntryType, mode: u32, data: &[u8]) {
    let mut header = Header::new_gnu();
    header.as_old_mut().name[..name.len()].copy_from_slice(name);
    header.set_entry_type(kind);
    header.set_mode(mode & 0o7777);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_size(data.len() as u64);
    header.set_cksum();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    let pad = (BLOCK - data.len() % BLOCK) % BLOCK;
    out.resize(out.len() + pad, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: TarCaps = TarCaps {
        max_files: 100,
        max_file_bytes: 1 << 20,
        max_total_bytes: 4 << 20,
    };

    /// An archive built by the tar crate's own builder, for entries `write_tar` never makes.
    fn built(f: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        f(&mut b);
        b.into_inner().unwrap()
    }

    fn header(kind: EntryType, size: u64, mode: u32) -> Header {
        let mut h = Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h
    }

    /// An archive with a raw name (the builder refuses `..` and absolute names).
    fn raw_named(name: &[u8], data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        push_entry(&mut out, name, EntryType::Regular, 0o644, data);
        out.resize(out.len() + 2 * BLOCK, 0);
        out
    }

    #[test]
    fn round_trip_keeps_bytes_modes_and_long_paths() {
        let long = format!("{}/{}.txt", "d".repeat(120), "n".repeat(200));
        let binary: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        let deep = "x/".repeat(50);
        let deep = deep.trim_end_matches('/'); // 99 bytes
        let files: Vec<(&str, u32, &[u8])> = vec![
            ("b.txt", MODE_FILE, b"hello\n"),
            ("bin/run.sh", MODE_EXEC, b"#!/bin/sh\necho hi\n"),
            (long.as_str(), MODE_FILE, &binary),
            ("empty", MODE_FILE, b""),
            (deep, MODE_FILE, b"exactly 99"),
        ];
        let tar = write_tar(files.iter().copied());
        assert_eq!(tar.len() % BLOCK, 0);
        let back = read_tar(&tar, &CAPS).unwrap();
        let got: Vec<(&str, u32, &[u8])> = back
            .iter()
            .map(|f| (f.path.as_str(), f.mode, f.content.as_slice()))
            .collect();
        assert_eq!(got, files);
        assert_eq!(back[1].mode, 493);
        assert_eq!(back[0].mode, 420);
        // deterministic: the same files give the same bytes
        assert_eq!(write_tar(files.iter().copied()), tar);
    }

    #[test]
    fn names_of_exactly_100_and_101_bytes() {
        for n in [99, 100, 101] {
            let name = "a".repeat(n);
            let tar = write_tar([(name.as_str(), MODE_FILE, b"x".as_slice())]);
            let back = read_tar(&tar, &CAPS).unwrap();
            assert_eq!(back[0].path, name);
        }
    }

    #[test]
    fn the_output_is_readable_by_the_tar_crate_as_plain_entries() {
        let tar = write_tar([("a.txt", 0o755, b"abc".as_slice())]);
        let mut archive = tar::Archive::new(tar.as_slice());
        let entry = archive.entries().unwrap().next().unwrap().unwrap();
        let h = entry.header();
        assert_eq!(
            (
                h.mtime().unwrap(),
                h.uid().unwrap(),
                h.gid().unwrap(),
                h.mode().unwrap()
            ),
            (0, 0, 0, 0o755)
        );
        assert_eq!(h.entry_type(), EntryType::Regular);
    }

    #[test]
    fn tar_crate_archives_with_directories_and_dot_slash_are_read() {
        let tar = built(|b| {
            b.append_data(
                &mut header(EntryType::Directory, 0, 0o755),
                "./",
                std::io::empty(),
            )
            .unwrap();
            b.append_data(
                &mut header(EntryType::Directory, 0, 0o755),
                "./src/",
                std::io::empty(),
            )
            .unwrap();
            b.append_data(
                &mut header(EntryType::Regular, 2, 0o700),
                "./src/a",
                &b"hi"[..],
            )
            .unwrap();
        });
        let files = read_tar(&tar, &CAPS).unwrap();
        assert_eq!(
            files,
            vec![TarFile {
                path: "src/a".into(),
                mode: MODE_EXEC,
                content: b"hi".to_vec()
            }]
        );
    }

    #[test]
    fn an_empty_archive_has_no_files() {
        assert_eq!(
            read_tar(&write_tar(std::iter::empty()), &CAPS).unwrap(),
            vec![]
        );
        assert_eq!(read_tar(b"", &CAPS).unwrap(), vec![]);
    }

    #[test]
    fn a_bomb_by_count_is_refused_at_the_first_file_over() {
        let names: Vec<String> = (0..5).map(|i| format!("f{i}")).collect();
        let tar = write_tar(
            names
                .iter()
                .map(|n| (n.as_str(), MODE_FILE, b"x".as_slice())),
        );
        let caps = TarCaps {
            max_files: 3,
            ..CAPS
        };
        let err = read_tar(&tar, &caps).unwrap_err();
        assert_eq!(
            err,
            TarError::TooManyFiles {
                max: 3,
                path: "f3".into()
            }
        );
        assert_eq!(err.field(), "body");
        assert!(
            err.to_string()
                .contains("more than 3 files (refused at entry `f3`)"),
            "{err}"
        );
        assert_eq!(
            read_tar(
                &tar,
                &TarCaps {
                    max_files: 5,
                    ..CAPS
                }
            )
            .unwrap()
            .len(),
            5
        );
    }

    /// A header declaring `size` bytes followed by none of them: the caps must refuse it from
    /// the header alone, since the content is not there to read.
    fn declared_only(name: &str, size: u64) -> Vec<u8> {
        let mut h = header(EntryType::Regular, size, 0o644);
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        h.as_bytes().to_vec()
    }

    #[test]
    fn a_bomb_by_size_is_refused_from_its_header_before_reading() {
        let err = read_tar(&declared_only("huge.bin", 1 << 40), &CAPS).unwrap_err();
        assert_eq!(
            err,
            TarError::FileTooLarge {
                path: "huge.bin".into(),
                size: 1 << 40,
                max: 1 << 20
            }
        );
        assert_eq!(err.field(), "entries");
        assert!(err.to_string().starts_with("tar entry `huge.bin` is 1099511627776 bytes, over the cap of 1048576 bytes per file"), "{err}");

        // the total: files each under the per-file cap, together over the total cap
        let mut tar = write_tar([
            ("a", MODE_FILE, vec![1u8; 1 << 20].as_slice()),
            ("b", MODE_FILE, vec![2u8; 1 << 20].as_slice()),
        ]);
        tar.truncate(tar.len() - 2 * BLOCK);
        tar.extend(declared_only("c", 1 << 20));
        let caps = TarCaps {
            max_total_bytes: (2 << 20) + 10,
            ..CAPS
        };
        let err = read_tar(&tar, &caps).unwrap_err();
        assert_eq!(
            err,
            TarError::TotalTooLarge {
                path: "c".into(),
                max: (2 << 20) + 10
            }
        );
        assert_eq!(err.field(), "body");
    }

    #[test]
    fn a_truncated_archive_is_corrupt() {
        let tar = declared_only("short", 100);
        let err = read_tar(&tar, &CAPS).unwrap_err();
        assert!(matches!(err, TarError::Corrupt { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("the archive ends inside entry `short` (0 of 100 bytes present)"),
            "{err}"
        );
        assert_eq!(err.field(), "body");
        let mut tar = write_tar([("a", MODE_FILE, vec![7u8; 2000].as_slice())]);
        tar.truncate(BLOCK + 1000);
        assert!(matches!(
            read_tar(&tar, &CAPS).unwrap_err(),
            TarError::Corrupt { .. }
        ));
        let err = read_tar(&[1u8; 700], &CAPS).unwrap_err();
        assert!(matches!(err, TarError::Corrupt { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("the request body is not a valid tar archive: "),
            "{err}"
        );
    }

    #[test]
    fn compressed_archives_are_named() {
        let err = read_tar(&[0x1f, 0x8b, 8, 0, 0, 0], &CAPS).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the request body is not a valid tar archive: it is gzip-compressed; send an uncompressed tar (`tar -cf`)"
        );
        assert!(
            read_tar(b"BZh91AY&SY", &CAPS)
                .unwrap_err()
                .to_string()
                .contains("bzip2")
        );
    }

    #[test]
    fn a_symlink_entry_is_refused() {
        let tar = built(|b| {
            b.append_data(&mut header(EntryType::Regular, 1, 0o644), "ok", &b"x"[..])
                .unwrap();
            let mut h = header(EntryType::Symlink, 0, 0o777);
            h.set_link_name("/etc/passwd").unwrap();
            b.append_data(&mut h, "link", std::io::empty()).unwrap();
        });
        let err = read_tar(&tar, &CAPS).unwrap_err();
        assert_eq!(
            err,
            TarError::Unsupported {
                path: "link".into(),
                kind: "symlink"
            }
        );
        assert_eq!(err.field(), "entries");
        assert!(
            err.to_string()
                .starts_with("tar entry `link` is a symlink; only regular files"),
            "{err}"
        );
    }

    #[test]
    fn hard_links_devices_and_fifos_are_refused() {
        for (kind, what) in [
            (EntryType::Link, "hard link"),
            (EntryType::Char, "character device"),
            (EntryType::Block, "block device"),
            (EntryType::Fifo, "FIFO"),
        ] {
            let tar = built(|b| {
                b.append_data(&mut header(kind, 0, 0o644), "thing", std::io::empty())
                    .unwrap()
            });
            assert_eq!(
                read_tar(&tar, &CAPS).unwrap_err(),
                TarError::Unsupported {
                    path: "thing".into(),
                    kind: what
                }
            );
        }
    }

    #[test]
    fn path_escapes_are_refused_naming_the_entry() {
        for name in ["../x", "a/../../x", "/etc/x", "a//b", "a/./b"] {
            let err = read_tar(&raw_named(name.as_bytes(), b"x"), &CAPS).unwrap_err();
            let TarError::BadPath { path, reason } = &err else {
                panic!("{name}: {err:?}")
            };
            assert_eq!(path, name);
            assert!(reason.starts_with("`path` must"), "{reason}");
            assert!(
                err.to_string()
                    .starts_with(&format!("tar entry `{name}` is refused: `path` must")),
                "{err}"
            );
            assert_eq!(err.field(), "entries");
        }
        // a long name escapes the same way
        let long = format!("../{}", "z".repeat(200));
        let tar = write_tar([(long.as_str(), MODE_FILE, b"x".as_slice())]);
        assert!(matches!(
            read_tar(&tar, &CAPS).unwrap_err(),
            TarError::BadPath { .. }
        ));
        // so does a directory
        let mut out = Vec::new();
        push_entry(&mut out, b"../d/", EntryType::Directory, 0o755, b"");
        out.resize(out.len() + 2 * BLOCK, 0);
        assert!(matches!(
            read_tar(&out, &CAPS).unwrap_err(),
            TarError::BadPath { .. }
        ));
        // and a non-UTF-8 name is refused
        let err = read_tar(&raw_named(b"a\xff", b"x"), &CAPS).unwrap_err();
        assert!(err.to_string().contains("must be UTF-8"), "{err}");
    }

    #[test]
    fn duplicates_and_files_used_as_directories_are_refused() {
        let tar = write_tar([
            ("a", MODE_FILE, b"1".as_slice()),
            ("./a", MODE_FILE, b"2".as_slice()),
        ]);
        assert_eq!(
            read_tar(&tar, &CAPS).unwrap_err(),
            TarError::Duplicate { path: "a".into() }
        );
        let tar = write_tar([
            ("a/b/c", MODE_FILE, b"1".as_slice()),
            ("a/b", MODE_FILE, b"2".as_slice()),
        ]);
        let err = read_tar(&tar, &CAPS).unwrap_err();
        assert_eq!(
            err,
            TarError::FileIsDir {
                path: "a/b/c".into(),
                file: "a/b".into()
            }
        );
        assert!(
            err.to_string().contains("needs `a/b` to be a directory"),
            "{err}"
        );
    }

    #[test]
    fn pax_global_headers_are_skipped_and_pax_paths_are_used() {
        let tar = built(|b| {
            // a PAX global header, as `git archive` writes one
            let comment = b"52 comment=0123456789012345678901234567890123456789\n";
            b.append_data(
                &mut header(EntryType::XGlobalHeader, comment.len() as u64, 0o644),
                "pax_global_header",
                &comment[..],
            )
            .unwrap();
            b.append_pax_extensions([("path", "long/pax/name.txt".as_bytes())])
                .unwrap();
            b.append_data(
                &mut header(EntryType::Regular, 3, 0o644),
                "short",
                &b"pax"[..],
            )
            .unwrap();
        });
        let files = read_tar(&tar, &CAPS).unwrap();
        assert_eq!(
            files,
            vec![TarFile {
                path: "long/pax/name.txt".into(),
                mode: MODE_FILE,
                content: b"pax".to_vec()
            }]
        );
    }
}
