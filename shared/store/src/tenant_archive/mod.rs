//! Tenant export and import (`weft tenant export|import`, `GET|POST /v1/tenants/{t}/export|import`):
//! the archive format, its records, and the two operations over Postgres.
//!
//! An archive is a tar: `manifest.json` first (format version, source tenant, time, weft version,
//! and per section its file, version, item count and sha256), then one JSONL file per section
//! (one record per line, the types below), then every volume blob as `blobs/<sha256>`. Each
//! section has its own version ([`Section::version`]): a reader refuses a section newer than it
//! knows, naming the section, so a section can change shape without the others moving.
//! docs/operations.md ("Tenant export and import") is the reference for operators.

mod export;
mod format;
mod import;
mod records;

pub use export::{
    ExportOptions, ExportSummary, ExternalBlobs, PreparedExport, export_tenant, prepare_export,
};
pub use format::{
    ArchiveError, BLOB_DIR, FORMAT, FORMAT_VERSION, MANIFEST, Manifest, Section, SectionEntry,
};
pub use import::{Archive, Conflict, ImportReport, SectionReport, import_tenant};
pub use records::*;
