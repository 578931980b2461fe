//! The Edit tool's matching (stub).

/// One replacement.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Edit {
    /// The text to replace.
    pub old: String,
    /// Its replacement.
    pub new: String,
    /// Replace every match.
    pub replace_all: bool,
}

/// The result of [`apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The new content.
    pub content: String,
    /// Whether a whitespace-tolerant match was used.
    pub fuzzy: bool,
    /// Replacements made, over all edits.
    pub replacements: usize,
}

/// Why an edit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// `old` is empty.
    #[error("edits[{index}].old is empty")]
    EmptyOld {
        /// Which edit.
        index: usize,
    },
    /// `old` equals `new`.
    #[error("edits[{index}].old and edits[{index}].new are the same")]
    Unchanged {
        /// Which edit.
        index: usize,
    },
    /// No match.
    #[error("edits[{index}].old was not found")]
    NotFound {
        /// Which edit.
        index: usize,
        /// The closest text.
        hint: Option<String>,
    },
    /// Several exact matches.
    #[error("edits[{index}].old matches {count} places")]
    AmbiguousExact {
        /// Which edit.
        index: usize,
        /// How many.
        count: usize,
        /// Their 1-based lines.
        lines: Vec<usize>,
    },
    /// Several whitespace-tolerant matches.
    #[error("edits[{index}].old matches {count} places ignoring whitespace")]
    AmbiguousFuzzy {
        /// Which edit.
        index: usize,
        /// How many.
        count: usize,
        /// Their 1-based lines.
        lines: Vec<usize>,
    },
}

/// Applies `edits` in order.
pub fn apply(content: &str, edits: &[Edit]) -> Result<Edited, EditError> {
    Ok(Edited {
        content: content.to_owned(),
        fuzzy: false,
        replacements: edits.len(),
    })
}
