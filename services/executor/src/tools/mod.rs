//! The built-in tools a run may call. Each tool is default-deny: a run sees only the tools its
//! agent lists, narrowed by the caller. Tools that only read (or whose effects are keyed so a
//! repeat is harmless) are idempotent and re-run on resume; the others, when their outcome was
//! never recorded, are reported to the model as unknown.

pub mod http;

use serde_json::json;
use weft_core::message::ToolSpec;

/// What one tool call hands back to the model.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolOutput {
    /// The result text (JSON text for structured results).
    pub text: String,
    /// Whether the call failed; the model sees the text either way.
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: false,
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
        }
    }
}

/// The built-in tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    Context,
    Agent,
    Interruption,
    Http,
}

impl Builtin {
    pub const ALL: [Builtin; 4] = [Self::Context, Self::Agent, Self::Interruption, Self::Http];

    pub fn name(self) -> &'static str {
        match self {
            Self::Context => "Context",
            Self::Agent => "Agent",
            Self::Interruption => "Interruption",
            Self::Http => "HTTP",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Whether re-running a call whose result was never recorded is safe.
    pub fn is_idempotent(self, input: &serde_json::Value) -> bool {
        match self {
            // Reads only.
            Self::Context => true,
            // Children are keyed by (parent, call, index): a repeat finds the same children.
            Self::Agent => true,
            // Asking again is what a lost ask needs.
            Self::Interruption => true,
            Self::Http => http::HttpTool::is_idempotent(input),
        }
    }

    /// The schema the model sees.
    pub fn spec(self) -> ToolSpec {
        match self {
            Self::Context => ToolSpec {
                name: self.name().into(),
                description: "Facts about this run. op=time: the current time (RFC 3339). op=self: this agent, its version hash, model, limits and the current iteration.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"op": {"type": "string", "enum": ["time", "self"]}},
                    "required": ["op"]
                }),
            },
            Self::Agent => ToolSpec {
                name: self.name().into(),
                description: "Run other agents as sub-runs and wait for their answers. op=spawn runs one (agent, input); op=parallel_spawn runs several (runs: [{agent, input}]) at once, up to this agent's max_concurrent_children at a time. A failed child is reported inside the result.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "op": {"type": "string", "enum": ["spawn", "parallel_spawn"]},
                        "agent": {"type": "string"},
                        "input": {"type": "string"},
                        "runs": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {"agent": {"type": "string"}, "input": {"type": "string"}},
                                "required": ["agent", "input"]
                            }
                        }
                    },
                    "required": ["op"]
                }),
            },
            Self::Interruption => ToolSpec {
                name: self.name().into(),
                description: "Ask the user a question and wait for the answer. op=ask with a question; the run pauses until someone answers.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "op": {"type": "string", "enum": ["ask"]},
                        "question": {"type": "string"}
                    },
                    "required": ["op", "question"]
                }),
            },
            Self::Http => http::HttpTool::spec(),
        }
    }
}

/// The specs of the tools a run may call, in a stable order; names that are not built-ins
/// (MCP tools, not mounted by this executor yet) are left out.
pub fn specs_for(allowed: &[String]) -> Vec<ToolSpec> {
    Builtin::ALL
        .into_iter()
        .filter(|b| allowed.iter().any(|a| a == b.name()))
        .map(Builtin::spec)
        .collect()
}
