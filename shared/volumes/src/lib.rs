//! Volumes without I/O: the pure pieces shared by the substrate (which stores volumes), the
//! executor (whose file tools read and change them) and the gateway (which serves them over
//! HTTP): path rules ([`path`]), content and tree hashes ([`hash`]), text handling for the Read
//! tool ([`text`]), the Edit tool's matching ([`edit`]), unified diffs ([`diff`]), globs
//! ([`glob`]), grep ([`grep`]) and tar import/export ([`archive`]).
//!
//! Nothing here touches a file system, a network or a clock's notion of dates; every function is
//! deterministic in its inputs (the diff has a time budget, after which it is still correct but
//! may be less minimal).

pub mod archive;
pub mod diff;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod hash;
pub mod path;
pub mod text;

pub use archive::{TarCaps, TarError, TarFile, read_tar, write_tar};
pub use edit::{Edit, EditError, Edited};
pub use glob::{Glob, GlobError};
pub use grep::{FileHits, Grep, GrepError, GrepMode, GrepOptions, HitLine};
pub use hash::{sha256_hex, tree_hash};
pub use path::{MAX_PATH_BYTES, PathError};
pub use text::{Numbered, is_binary};
