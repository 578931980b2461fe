//! Grep (stub).

/// What a search reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrepMode {
    /// File names.
    Files,
    /// Matching lines.
    Content,
    /// Counts.
    Count,
}

impl GrepMode {
    /// Parses `files`, `content` or `count`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "files" => Some(GrepMode::Files),
            "content" => Some(GrepMode::Content),
            "count" => Some(GrepMode::Count),
            _ => None,
        }
    }
}

/// Options of a search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepOptions {
    /// The regular expression.
    pub pattern: String,
    /// Ignore case.
    pub case_insensitive: bool,
    /// Lines of context.
    pub context: u32,
    /// What to report.
    pub mode: GrepMode,
}

/// A refused search.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GrepError {
    /// What is wrong.
    pub message: String,
}

/// A compiled search.
#[derive(Debug, Clone)]
pub struct Grep {
    regex: regex::Regex,
}

/// A line of a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HitLine {
    /// 1-based line number.
    pub line: u32,
    /// The line.
    pub text: String,
    /// Matching line (not context).
    pub is_match: bool,
}

/// One file's result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileHits {
    /// Matching lines.
    pub count: u32,
    /// The lines (content mode).
    pub lines: Vec<HitLine>,
}

impl Grep {
    /// Compiles a search.
    pub fn new(opts: GrepOptions) -> Result<Grep, GrepError> {
        regex::Regex::new(&opts.pattern)
            .map(|regex| Grep { regex })
            .map_err(|e| GrepError {
                message: e.to_string(),
            })
    }

    /// Searches one file.
    pub fn search(&self, bytes: &[u8]) -> Option<FileHits> {
        let text = std::str::from_utf8(bytes).ok()?;
        Some(FileHits {
            count: u32::from(self.regex.is_match(text)),
            lines: Vec::new(),
        })
    }
}
