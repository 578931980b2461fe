//! The archive's layout: the manifest, the sections and their versions, and the errors of
//! reading and writing one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The `format` field of every manifest.
pub const FORMAT: &str = "weft-tenant-archive";
/// The version of the archive's layout (the manifest and the tar's names); sections have their own.
pub const FORMAT_VERSION: u32 = 1;
/// The name of the manifest entry, the archive's first.
pub const MANIFEST: &str = "manifest.json";
/// The folder of blob entries: `blobs/<sha256>`.
pub const BLOB_DIR: &str = "blobs/";

/// One section of an archive: a JSONL file of one record type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Section {
    Definitions,
    Memory,
    Channels,
    ChannelMessages,
    Blobs,
    Volumes,
    VolumeChanges,
    VolumeSnapshots,
    Runs,
    RunEvents,
    ToolLedger,
    Evaluations,
}

impl Section {
    /// Every section, in the order import applies them (a record only names records of earlier
    /// sections).
    pub const ALL: [Section; 12] = [
        Section::Definitions,
        Section::Memory,
        Section::Channels,
        Section::ChannelMessages,
        Section::Blobs,
        Section::Volumes,
        Section::VolumeChanges,
        Section::VolumeSnapshots,
        Section::Runs,
        Section::RunEvents,
        Section::ToolLedger,
        Section::Evaluations,
    ];

    /// The section's name in the manifest and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Section::Definitions => "definitions",
            Section::Memory => "memory",
            Section::Channels => "channels",
            Section::ChannelMessages => "channel_messages",
            Section::Blobs => "blobs",
            Section::Volumes => "volumes",
            Section::VolumeChanges => "volume_changes",
            Section::VolumeSnapshots => "volume_snapshots",
            Section::Runs => "runs",
            Section::RunEvents => "run_events",
            Section::ToolLedger => "tool_ledger",
            Section::Evaluations => "evaluations",
        }
    }

    /// The version of the section's record type this build writes and the newest it reads.
    /// Bump it when the record changes shape; a reader refuses a newer one.
    pub fn version(self) -> u32 {
        1
    }

    /// The section's file in the tar.
    pub fn file(self) -> String {
        format!("{}.jsonl", self.name())
    }

    /// The section called `name`.
    pub fn from_name(name: &str) -> Option<Section> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// The layout's version ([`FORMAT_VERSION`] when written by this build).
    pub format_version: u32,
    /// The tenant the archive was exported from.
    pub tenant: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: time::OffsetDateTime,
    /// The version of the weft that wrote it.
    pub weft_version: String,
    /// Whether every run (with its events and ledger) is in; otherwise `runs` holds only the
    /// runs that evaluations name, without events.
    pub runs_included: bool,
    /// Per section name.
    pub sections: BTreeMap<String, SectionEntry>,
}

/// One section in the manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SectionEntry {
    pub file: String,
    pub version: u32,
    pub count: u64,
    /// Lowercase hex sha256 of the file's bytes.
    pub sha256: String,
}

/// Why an export or an import failed. Messages about the archive name the section.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("writing the archive: {0}")]
    Write(#[from] std::io::Error),
    /// The archive is not one this build can read (layout, manifest).
    #[error("{0}")]
    Format(String),
    /// A section is refused: newer than known, corrupted, malformed.
    #[error("section `{section}`: {message}")]
    Section { section: String, message: String },
    /// A blob could not be read from where the source stores it.
    #[error("blob {sha256}: {message}")]
    Blob { sha256: String, message: String },
}

impl ArchiveError {
    pub(crate) fn section(section: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Section {
            section: section.into(),
            message: message.into(),
        }
    }

    /// The client-facing error: the archive's faults as they are, never SQL.
    pub fn to_api(&self) -> weft_core::Error {
        match self {
            Self::Db(sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed) => {
                weft_core::Error::unavailable("the database is unreachable; try again shortly")
            }
            Self::Db(_) => weft_core::Error::internal(),
            Self::Write(_) => weft_core::Error::internal(),
            Self::Format(_) | Self::Section { .. } => weft_core::Error::invalid(self.to_string()),
            Self::Blob { .. } => weft_core::Error::unavailable(self.to_string()),
        }
    }
}

/// Lowercase hex sha256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}
