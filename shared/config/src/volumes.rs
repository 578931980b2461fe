//! `[volumes]`: caps on the files agents work on, where large blobs are kept, and the sandbox
//! that runs commands over a volume (off unless enabled).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::Secret;
use crate::check::{Checked, at_least_one, invalid};

/// Volumes: caps, the blob store and the command sandbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VolumesConfig {
    /// Bytes one file may hold.
    pub max_file_bytes: u64,
    /// Bytes one volume may hold (its quota when its definition names none, and the most any
    /// definition may ask for).
    pub max_volume_bytes: u64,
    /// Files one volume may hold.
    pub max_files: u64,
    /// Bytes of files all volumes of one tenant may hold.
    pub max_tenant_bytes: u64,
    /// Where file contents are kept.
    pub blobs: BlobStoreConfig,
    /// How often the ephemeral volumes of runs that ended are purged, ms (a backstop: the
    /// executor purges a root run's volume when it ends).
    pub sweep_interval_ms: u64,
    /// The `Exec` tool's sandbox.
    pub exec: ExecConfig,
}

impl Default for VolumesConfig {
    fn default() -> Self {
        Self {
            max_file_bytes: 8 * 1024 * 1024,
            max_volume_bytes: 256 * 1024 * 1024,
            max_files: 10_000,
            max_tenant_bytes: 1024 * 1024 * 1024,
            blobs: BlobStoreConfig::default(),
            sweep_interval_ms: 60_000,
            exec: ExecConfig::default(),
        }
    }
}

/// Where blobs go: Postgres (the default), or — for blobs of at least `external_min_bytes` — a
/// directory or an S3-compatible object store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlobStoreConfig {
    /// `postgres`, `dir` or `s3`.
    pub kind: String,
    /// Blobs smaller than this stay in Postgres whatever `kind` says.
    pub external_min_bytes: u64,
    /// For `dir`: the directory (shared by every substrate replica).
    pub dir: Option<PathBuf>,
    /// For `s3`: the endpoint URL (`http://127.0.0.1:9000`; empty = AWS).
    pub s3_endpoint: String,
    pub s3_bucket: String,
    pub s3_region: String,
    pub s3_access_key_id: String,
    pub s3_secret_access_key: Option<Secret>,
    /// Allow a plain-HTTP endpoint (a local S3-compatible server).
    pub s3_allow_http: bool,
}

impl Default for BlobStoreConfig {
    fn default() -> Self {
        Self {
            kind: "postgres".into(),
            external_min_bytes: 64 * 1024,
            dir: None,
            s3_endpoint: String::new(),
            s3_bucket: String::new(),
            s3_region: "us-east-1".into(),
            s3_access_key_id: String::new(),
            s3_secret_access_key: None,
            s3_allow_http: false,
        }
    }
}

/// The `Exec` tool: commands under bubblewrap over a scratch checkout of a volume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecConfig {
    /// Off unless the operator turns it on; agents must also list `Exec` in their tools.
    pub enabled: bool,
    /// The bubblewrap binary.
    pub bwrap: PathBuf,
    /// Where scratch checkouts are made (default: the system's temporary directory).
    pub scratch_dir: Option<PathBuf>,
    /// The longest a command may run, seconds (`timeout_s` above it is refused).
    pub max_timeout_s: u64,
    /// CPU seconds a command may use (RLIMIT_CPU).
    pub cpu_seconds: u64,
    /// Address space a process may map, bytes (RLIMIT_AS).
    pub memory_bytes: u64,
    /// Processes the sandbox's user may have (RLIMIT_NPROC).
    pub max_processes: u64,
    /// Largest file a command may write, bytes (RLIMIT_FSIZE).
    pub max_file_bytes: u64,
    /// Bytes of stdout and of stderr kept; the rest is cut with a marker.
    pub max_output_bytes: u64,
}

impl Default for ExecConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            bwrap: PathBuf::from("bwrap"),
            scratch_dir: None,
            max_timeout_s: 300,
            cpu_seconds: 60,
            memory_bytes: 1024 * 1024 * 1024,
            max_processes: 64,
            max_file_bytes: 64 * 1024 * 1024,
            max_output_bytes: 64 * 1024,
        }
    }
}

impl VolumesConfig {
    /// Refuses zero caps, an unknown blob store, and a store without what it needs.
    pub fn validate(&self) -> Checked {
        at_least_one(
            "volumes",
            [
                ("max_file_bytes", self.max_file_bytes),
                ("max_volume_bytes", self.max_volume_bytes),
                ("max_files", self.max_files),
                ("max_tenant_bytes", self.max_tenant_bytes),
                ("sweep_interval_ms", self.sweep_interval_ms),
            ],
        )?;
        at_least_one(
            "volumes.exec",
            [
                ("max_timeout_s", self.exec.max_timeout_s),
                ("cpu_seconds", self.exec.cpu_seconds),
                ("memory_bytes", self.exec.memory_bytes),
                ("max_processes", self.exec.max_processes),
                ("max_file_bytes", self.exec.max_file_bytes),
                ("max_output_bytes", self.exec.max_output_bytes),
            ],
        )?;
        // One file travels in one internal gRPC message (16 MiB), with room for the rest.
        const MAX_FILE_CAP: u64 = 15 * 1024 * 1024;
        if self.max_file_bytes > MAX_FILE_CAP {
            return invalid(format!(
                "volumes.max_file_bytes is {}; at most {MAX_FILE_CAP} (15 MiB) is supported, since one file travels in one internal message",
                self.max_file_bytes
            ));
        }
        if self.max_file_bytes > self.max_volume_bytes {
            return invalid(format!(
                "volumes.max_file_bytes ({}) is larger than volumes.max_volume_bytes ({}); lower it",
                self.max_file_bytes, self.max_volume_bytes
            ));
        }
        match self.blobs.kind.as_str() {
            "postgres" => Ok(()),
            "dir" if self.blobs.dir.is_none() => invalid(
                "volumes.blobs.kind = \"dir\" needs volumes.blobs.dir (a directory every substrate replica shares)",
            ),
            "dir" => Ok(()),
            "s3" if self.blobs.s3_bucket.trim().is_empty() => {
                invalid("volumes.blobs.kind = \"s3\" needs volumes.blobs.s3_bucket")
            }
            "s3" => Ok(()),
            other => invalid(format!(
                "volumes.blobs.kind must be postgres, dir or s3, got `{other}`"
            )),
        }
    }
}
