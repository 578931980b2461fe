//! How agents and runs bind volumes ([`VolumeBinding`], [`VolumeMode`]): shared by the agent
//! and run bodies and by the volume routes ([`crate::volumes`] re-exports them), so neither
//! family imports the other.

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

impl VolumeMode {
    /// `rw` or `ro`.
    pub fn as_str(&self) -> &'static str {
        match self {
            VolumeMode::Rw => "rw",
            VolumeMode::Ro => "ro",
        }
    }

    /// Parses `rw` or `ro`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "rw" => Some(VolumeMode::Rw),
            "ro" => Some(VolumeMode::Ro),
            _ => None,
        }
    }

    /// The narrower of two modes: `ro` wins.
    pub fn meet(self, other: VolumeMode) -> VolumeMode {
        if self == VolumeMode::Ro || other == VolumeMode::Ro {
            VolumeMode::Ro
        } else {
            VolumeMode::Rw
        }
    }
}

/// One volume an agent (or a run) may use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
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

crate::objects_only!(VolumeBinding);
