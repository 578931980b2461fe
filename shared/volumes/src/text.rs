//! Text for the Read tool (stub).

/// Whether `bytes` look binary.
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes.is_empty()
}

/// Numbered lines of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numbered {
    /// The lines, each `{n:>6}\t{line}\n`.
    pub text: String,
    /// The first line shown (1-based).
    pub first_line: usize,
    /// The last line shown.
    pub last_line: usize,
    /// Lines in the file.
    pub total_lines: usize,
    /// Whether lines after `last_line` were left out.
    pub truncated: bool,
}

/// Numbers lines of `text`.
pub fn numbered(text: &str, offset: usize, limit: usize, max_bytes: usize) -> Numbered {
    Numbered {
        text: text.to_owned(),
        first_line: offset,
        last_line: limit,
        total_lines: max_bytes,
        truncated: false,
    }
}
