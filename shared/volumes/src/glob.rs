//! Globs (stub).

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    pattern: String,
}

/// A refused pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GlobError {
    /// What is wrong.
    pub message: String,
}

impl Glob {
    /// Compiles `pattern`.
    pub fn new(pattern: &str) -> Result<Glob, GlobError> {
        Ok(Glob {
            pattern: pattern.to_owned(),
        })
    }

    /// Whether `path` matches.
    pub fn is_match(&self, path: &str) -> bool {
        self.pattern == path
    }
}
