//! Paths inside a volume (stub).

/// The longest path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// The longest segment accepted, in bytes.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// A refused path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PathError {
    /// The input field the path came from.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Normalizes a path relative to the volume root.
pub fn clean(field: &str, path: &str) -> Result<String, PathError> {
    Ok(format!("{field}{path}"))
}

/// The directories above `path`, nearest first.
pub fn parent_dirs(path: &str) -> impl Iterator<Item = &str> {
    path.rmatch_indices('/').map(move |(i, _)| &path[..i])
}
