//! Why a run's loop stopped early: shared by the driver, its steps and the tools (which abandon a
//! call with one), so none of them needs the others for it.

use weft_store::RunStoreError;

/// Why the loop stopped early.
#[derive(Debug)]
pub(crate) enum Stop {
    Lost,
    Shutdown,
    /// Asked to pause, and a tool call outlived the grace for calls under way: abandoned.
    Paused,
    /// Worth retrying: the database or a peer was unreachable.
    Infra(String),
    /// Never worth retrying: the database refused what this step writes.
    Permanent(String),
}

impl From<RunStoreError> for Stop {
    fn from(e: RunStoreError) -> Self {
        match e {
            RunStoreError::StaleLease(_) => Self::Lost,
            e if e.is_permanent() => Self::Permanent(e.to_string()),
            e => Self::Infra(e.to_string()),
        }
    }
}
