//! Volumes: file trees an agent works on (`/v1/volumes…`, `/v1/runs/{id}/volume…`), and the
//! bindings by which agents and runs use them.
//!
//! A volume is a tree of files stored as content-addressed blobs plus an index, owned by the
//! substrate; it has a changelog (one row per mutation), undo, and snapshots (a tree hash).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a volume may be used: `rw` or `ro`. Where two meet (an agent and a caller, a parent and
/// a sub-run, a binding and the volume), `ro` wins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeMode {
    #[default]
    Rw,
    Ro,
}

/// One volume an agent (or a run) may use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("example" = {"name": "run", "mode": "rw", "default": true}))]
pub struct VolumeBinding {
    /// a named volume's name, or `run` for the run tree's own ephemeral volume
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$"))]
    pub name: String,
    #[serde(default)]
    pub mode: VolumeMode,
    /// the volume file tools use when a call names none (at most one; none marked = the first)
    #[serde(default)]
    pub default: bool,
}
