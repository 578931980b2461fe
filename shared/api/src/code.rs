//! Code agents (docs/code-agents.md): an agent whose turns are taken by a script the operator
//! supplies instead of a model. The agent content field `code` is [`CodeAgent`]; the executor
//! runs it in an embedded interpreter, replaying the transcript on every turn.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The largest script, in bytes.
pub const MAX_SOURCE_BYTES: usize = 256 * 1024;
/// A code agent's whole-run wall clock when `max_wall_s` is unset, in seconds.
pub const DEFAULT_MAX_WALL_S: u32 = 300;
/// The longest whole-run wall clock, in seconds (a day).
pub const MAX_WALL_S: u32 = 86_400;

/// The language a code agent's script is written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CodeLanguage {
    /// ECMAScript 2023 (QuickJS), with no host I/O: no modules, timers, console, file system or network
    #[default]
    Javascript,
}

/// A code agent: its turns are a script's, not a model's, and spend no tokens. The script
/// defines `main(input)`; the agent's tools are bound as `tools.<Name>(input)` and
/// `call(name, input)`, each call one turn of the run; what `main` returns is the run's answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[schemars(extend("example" = {
    "source": "function main(input) {\n  const draft = tools.Agent({op: 'spawn', agent: 'writer', input});\n  tools.Memory({op: 'set', scope: 'agent', key: 'last', value: draft.output});\n  return draft.output;\n}",
    "max_wall_s": 600
}))]
pub struct CodeAgent {
    /// the script's language (only javascript)
    pub language: CodeLanguage,
    /// the script: it defines `function main(input)` (or `async function main`), 1 to 262144 bytes
    #[schemars(length(min = 1, max = 262144))]
    pub source: String,
    /// the whole run's wall clock in seconds, from its creation, time waiting for sub-runs included (default 300)
    #[schemars(range(min = 1, max = 86400))]
    pub max_wall_s: Option<u32>,
}

crate::objects_only!(CodeAgent);

impl CodeAgent {
    /// The whole-run wall clock, in seconds.
    pub fn max_wall_s(&self) -> u32 {
        self.max_wall_s.unwrap_or(DEFAULT_MAX_WALL_S)
    }

    /// Checks what the schema cannot say in a way a person reads: the field and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.source.trim().is_empty() {
            return Err((
                "source",
                "`source` is the script; give one that defines `function main(input)`".into(),
            ));
        }
        if self.source.len() > MAX_SOURCE_BYTES {
            return Err((
                "source",
                format!(
                    "`source` is {} bytes; at most {MAX_SOURCE_BYTES} are allowed",
                    self.source.len()
                ),
            ));
        }
        if self.source.contains('\0') {
            return Err(("source", "`source` may not contain NUL characters".into()));
        }
        if let Some(s) = self.max_wall_s
            && !(1..=MAX_WALL_S).contains(&s)
        {
            return Err((
                "max_wall_s",
                format!("`max_wall_s` is from 1 to {MAX_WALL_S} seconds, got {s}"),
            ));
        }
        Ok(())
    }
}
