//! The built-in tools a run may call. Each tool is default-deny: a run sees only the tools its
//! agent lists, narrowed by the caller.

pub mod http;

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
