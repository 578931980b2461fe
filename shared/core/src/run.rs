//! The vocabulary of agent runs: statuses, stop reasons and event kinds (API.md, "Runs").

use serde::{Deserialize, Serialize};

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$(Self::$variant),+];

            /// The snake_case wire name.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $wire),+ }
            }

            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum!(
    /// Where a run is in its life.
    RunStatus {
        Queued => "queued",
        Running => "running",
        AwaitingInput => "awaiting_input",
        Succeeded => "succeeded",
        Failed => "failed",
        Cancelled => "cancelled",
    }
);

impl RunStatus {
    /// A run in a terminal status never changes again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

wire_enum!(
    /// Why a run stopped.
    StopReason {
        EndTurn => "end_turn",
        MaxIterations => "max_iterations",
        MaxTokens => "max_tokens",
        Cancelled => "cancelled",
        Error => "error",
        Timeout => "timeout",
    }
);

impl StopReason {
    /// The terminal status a run that stopped for this reason ends in.
    pub fn final_status(self) -> RunStatus {
        match self {
            Self::EndTurn | Self::MaxIterations | Self::MaxTokens => RunStatus::Succeeded,
            Self::Cancelled => RunStatus::Cancelled,
            Self::Error | Self::Timeout => RunStatus::Failed,
        }
    }
}

wire_enum!(
    /// What a run event is. `TextDelta` is live only; every other kind is persisted in the
    /// transcript with a per-run `seq`.
    EventKind {
        RunStarted => "run_started",
        ProviderChosen => "provider_chosen",
        TextDelta => "text_delta",
        AssistantMessage => "assistant_message",
        ToolCall => "tool_call",
        ToolResult => "tool_result",
        Usage => "usage",
        Retry => "retry",
        ProviderFallback => "provider_fallback",
        AwaitingInput => "awaiting_input",
        UserInput => "user_input",
        Interruption => "interruption",
        SubRunStarted => "sub_run_started",
        SubRunFinished => "sub_run_finished",
        ContextCompaction => "context_compaction",
        Error => "error",
        RunFinished => "run_finished",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip() {
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()), Some(*s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(*k));
        }
        assert_eq!(StopReason::Cancelled.final_status(), RunStatus::Cancelled);
    }
}

/// What a run was asked to do, resolved when it is created (agent defaults, then the caller's
/// narrowing and overrides) and stored with the run. Never holds credentials.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunSpec {
    /// The model string for the router (name, alias, `provider/model` or `tier:<name>`).
    pub model: String,
    /// The tools the run may call: the agent's list narrowed by the caller.
    pub tools: Vec<String>,
    /// The agent's outbound hosts for the HTTP tool; `None` = the operator's list.
    pub allowed_hosts: Option<Vec<String>>,
    /// The caller's narrowing of those; `None` = no narrowing, `[]` = no network.
    pub caller_allowed_hosts: Option<Vec<String>>,
    pub sampling: crate::agent::AgentSampling,
    pub max_iterations: u32,
    pub max_tokens: Option<u32>,
    pub max_concurrent_children: u32,
    /// Caller metadata, returned as given.
    pub metadata: serde_json::Value,
}
