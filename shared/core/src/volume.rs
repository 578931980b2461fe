//! Volumes in definitions and runs: the `volume` definition kind ([`VolumeContent`]: mode,
//! quota), an agent's bindings ([`VolumeBinding`]), and the one rule by which a run's bindings
//! are resolved ([`narrow_volumes`]): a caller or a parent run may only narrow what an agent
//! binds — drop bindings, or make them read-only — never add one or make one writable.
//!
//! The binding name [`RUN_VOLUME`] (`run`) is the run tree's ephemeral volume: made for the
//! root run on first use, shared by its sub-runs, purged when the root run ends. A named volume
//! cannot be called `run`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Error;
use crate::def::{DefContent, DefKind};

/// The binding name of a run tree's ephemeral volume.
pub const RUN_VOLUME: &str = "run";

pub use weft_api::volumes::{VolumeBinding, VolumeMode};

/// Checks a list of bindings (field `field`, such as `volumes`): valid names, no name twice,
/// at most one default, at most 16.
pub fn validate_bindings(field: &str, bindings: &[VolumeBinding]) -> Result<(), Error> {
    if bindings.len() > 16 {
        return Err(Error::invalid(format!(
            "`{field}` has {} bindings; at most 16 are allowed",
            bindings.len()
        ))
        .with_param(field));
    }
    let mut defaults = 0;
    for (i, b) in bindings.iter().enumerate() {
        if b.name != RUN_VOLUME && !crate::names::is_def_name(&b.name) {
            return Err(Error::invalid(format!(
                "`{field}[{i}].name` `{}` is not a volume name; use `run` (the run's own volume) or 1-64 characters of a-z, 0-9, '_' and '-'",
                b.name
            ))
            .with_param(format!("{field}[{i}].name")));
        }
        if bindings[..i].iter().any(|o| o.name == b.name) {
            return Err(Error::invalid(format!(
                "`{field}` binds `{}` twice; bind each volume once",
                b.name
            ))
            .with_param(format!("{field}[{i}].name")));
        }
        defaults += usize::from(b.default);
    }
    if defaults > 1 {
        return Err(Error::invalid(format!(
            "`{field}` marks {defaults} bindings as default; mark at most one"
        ))
        .with_param(field));
    }
    Ok(())
}

/// The bindings of a run: `own` (an agent's) narrowed by `outer` (a caller's or a parent run's
/// effective bindings) when given. A name must be in both; the mode is the narrower of the two
/// (`ro` wins). The default is the outer list's default when it survives, else `own`'s.
pub fn narrow_volumes(
    own: &[VolumeBinding],
    outer: Option<&[VolumeBinding]>,
) -> Vec<VolumeBinding> {
    let Some(outer) = outer else {
        return with_one_default(own.to_vec(), None);
    };
    let kept: Vec<VolumeBinding> = own
        .iter()
        .filter_map(|b| {
            let o = outer.iter().find(|o| o.name == b.name)?;
            Some(VolumeBinding {
                name: b.name.clone(),
                mode: b.mode.meet(o.mode),
                default: b.default,
            })
        })
        .collect();
    let outer_default = default_of(outer).map(|d| d.name.clone());
    with_one_default(kept, outer_default)
}

/// `bindings` with exactly one default when not empty: `prefer` when it is there, else the one
/// marked, else the first.
fn with_one_default(
    mut bindings: Vec<VolumeBinding>,
    prefer: Option<String>,
) -> Vec<VolumeBinding> {
    let chosen = prefer
        .filter(|p| bindings.iter().any(|b| &b.name == p))
        .or_else(|| bindings.iter().find(|b| b.default).map(|b| b.name.clone()))
        .or_else(|| bindings.first().map(|b| b.name.clone()));
    for b in &mut bindings {
        b.default = Some(&b.name) == chosen.as_ref();
    }
    bindings
}

/// The default binding: the one marked, else the first.
pub fn default_of(bindings: &[VolumeBinding]) -> Option<&VolumeBinding> {
    bindings
        .iter()
        .find(|b| b.default)
        .or_else(|| bindings.first())
}

/// The content of a `volume` definition: how a named volume may be used and how much it holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VolumeContent {
    pub description: String,
    /// `ro` makes every write to the volume refuse, whatever a binding says.
    pub mode: VolumeMode,
    /// Bytes the volume may hold; 0 = the operator's `volumes.max_volume_bytes`.
    pub quota_bytes: u64,
}

impl DefContent for VolumeContent {
    const KIND: DefKind = DefKind::Volume;

    fn from_json(value: Value) -> Result<Self, Error> {
        crate::def::from_json_fields("a volume definition", value)
    }

    fn validate(&self) -> Result<(), Error> {
        if self.description.len() > 1024 {
            return Err(Error::invalid(format!(
                "`description` is {} bytes; at most 1024 are allowed",
                self.description.len()
            ))
            .with_param("description"));
        }
        Ok(())
    }

    fn description(&self) -> &str {
        &self.description
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(name: &str, mode: VolumeMode, default: bool) -> VolumeBinding {
        VolumeBinding {
            name: name.into(),
            mode,
            default,
        }
    }

    #[test]
    fn narrowing_never_widens() {
        use VolumeMode::{Ro, Rw};
        let agent = vec![
            b("docs", Ro, false),
            b("run", Rw, true),
            b("out", Rw, false),
        ];
        // No outer list: the agent's own, one default.
        let own = narrow_volumes(&agent, None);
        assert_eq!(own, agent);
        // A caller (or parent) asks for more than the agent binds, and rw on a ro volume.
        let outer = vec![
            b("docs", Rw, false),
            b("out", Ro, true),
            b("secret", Rw, false),
        ];
        let got = narrow_volumes(&agent, Some(&outer));
        assert_eq!(got, vec![b("docs", Ro, false), b("out", Ro, true)]);
        // An empty outer list leaves nothing.
        assert!(narrow_volumes(&agent, Some(&[])).is_empty());
        // The outer default is dropped: the agent's default when it survives, else the first.
        let got = narrow_volumes(&agent, Some(&[b("docs", Rw, false), b("secret", Rw, true)]));
        assert_eq!(got, vec![b("docs", Ro, true)]);
    }

    #[test]
    fn bindings_are_checked() {
        use VolumeMode::Rw;
        validate_bindings("volumes", &[b("run", Rw, false), b("docs", Rw, true)]).unwrap();
        let e = validate_bindings("volumes", &[b("Bad", Rw, false)]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("volumes[0].name"));
        let e = validate_bindings("volumes", &[b("a", Rw, false), b("a", Rw, false)]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("volumes[1].name"));
        let e = validate_bindings("volumes", &[b("a", Rw, true), b("c", Rw, true)]).unwrap_err();
        assert!(e.message.contains("at most one"), "{}", e.message);
        let mode: VolumeBinding =
            serde_json::from_value(serde_json::json!({"name": "x", "mode": "ro"})).unwrap();
        assert_eq!(mode.mode, VolumeMode::Ro);
        assert!(
            serde_json::from_value::<VolumeBinding>(serde_json::json!({"name": "x", "mode": "rx"}))
                .is_err()
        );
    }
}
