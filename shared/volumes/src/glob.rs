//! Globs over volume paths, for the Glob tool and Grep's `glob` filter. Standard semantics,
//! anchored at the volume root: `*`, `?` and `[...]` never cross a `/`, `**` does (`*.rs` is
//! only the top level, `**/*.rs` is every depth), `{a,b}` is an alternation and `\` escapes. A
//! leading `./` or `/` is dropped, since every volume path is relative to the root.

/// The longest pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    pattern: String,
    matcher: globset::GlobMatcher,
}

/// A refused pattern: the message names the field `pattern` and says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GlobError {
    /// What is wrong and how to fix it.
    pub message: String,
}

impl GlobError {
    /// The input field to report.
    pub fn field(&self) -> &'static str {
        "pattern"
    }
}

impl Glob {
    /// Compiles `pattern`.
    pub fn new(pattern: &str) -> Result<Glob, GlobError> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(GlobError {
                message: format!(
                    "`pattern` must be at most {MAX_PATTERN_BYTES} bytes, got {}; use a shorter glob",
                    pattern.len()
                ),
            });
        }
        let trimmed = pattern
            .strip_prefix("./")
            .or_else(|| pattern.strip_prefix('/'))
            .unwrap_or(pattern);
        if trimmed.is_empty() {
            return Err(GlobError {
                message: "`pattern` must not be empty; e.g. `**/*.rs` for every Rust file or `*` for the top level".to_owned(),
            });
        }
        if trimmed.contains('\0') {
            return Err(GlobError {
                message: "`pattern` must not contain NUL".to_owned(),
            });
        }
        let glob = globset::GlobBuilder::new(trimmed)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| GlobError {
                message: format!("`pattern` is not a valid glob: {}", e.kind()),
            })?;
        Ok(Glob {
            pattern: trimmed.to_owned(),
            matcher: glob.compile_matcher(),
        })
    }

    /// Whether the volume path `path` matches.
    pub fn is_match(&self, path: &str) -> bool {
        self.matcher.is_match(path)
    }

    /// The pattern as compiled (a leading `./` or `/` dropped).
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The directory every match lies under: the pattern's leading segments without glob
    /// characters (`src/app/**/*.rs` gives `src/app`, `*.rs` gives the root, the empty string).
    /// A store can list only under it.
    pub fn base(&self) -> &str {
        let mut end = 0;
        for (i, _) in self.pattern.match_indices('/') {
            if self.pattern[end..i].contains(['*', '?', '[', ']', '{', '}', '\\']) {
                break;
            }
            end = i;
        }
        if end == 0 { "" } else { &self.pattern[..end] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(p: &str) -> Glob {
        Glob::new(p).unwrap()
    }

    #[test]
    fn star_stays_in_its_directory_double_star_does_not() {
        let top = g("*.rs");
        assert!(top.is_match("main.rs"));
        assert!(!top.is_match("src/main.rs"));
        let deep = g("**/*.rs");
        assert!(deep.is_match("main.rs"));
        assert!(deep.is_match("src/main.rs"));
        assert!(deep.is_match("a/b/c/main.rs"));
        assert!(!deep.is_match("a/b/c/main.rsx"));
        let under = g("src/**");
        assert!(under.is_match("src/a/b.txt"));
        assert!(!under.is_match("srcx/a"));
        let one = g("src/*/mod.rs");
        assert!(one.is_match("src/a/mod.rs"));
        assert!(!one.is_match("src/a/b/mod.rs"));
        assert!(!g("a?c").is_match("a/c"));
    }

    #[test]
    fn alternation_classes_and_escapes() {
        let alt = g("**/*.{md,txt}");
        assert!(alt.is_match("docs/a.md") && alt.is_match("b.txt") && !alt.is_match("c.rs"));
        assert!(g("[ab].txt").is_match("a.txt"));
        assert!(!g("[ab].txt").is_match("c.txt"));
        assert!(g("\\*.txt").is_match("*.txt"));
        assert!(!g("\\*.txt").is_match("a.txt"));
    }

    #[test]
    fn a_leading_dot_slash_or_slash_is_dropped() {
        assert!(g("./*.rs").is_match("a.rs"));
        assert!(g("/src/*.rs").is_match("src/a.rs"));
        assert_eq!(g("/src/*.rs").pattern(), "src/*.rs");
    }

    #[test]
    fn bad_patterns_name_the_field() {
        for bad in ["", "/", "./", "a[", "{a,b", "x\0"] {
            let err = Glob::new(bad).unwrap_err();
            assert!(err.to_string().starts_with("`pattern` "), "{bad:?}: {err}");
            assert_eq!(err.field(), "pattern");
        }
        assert!(
            Glob::new("a[")
                .unwrap_err()
                .to_string()
                .contains("not a valid glob")
        );
        let err = Glob::new(&"*".repeat(MAX_PATTERN_BYTES + 1)).unwrap_err();
        assert!(err.to_string().contains("at most 1024 bytes"), "{err}");
    }

    #[test]
    fn base_is_the_literal_directory_prefix() {
        assert_eq!(g("src/app/**/*.rs").base(), "src/app");
        assert_eq!(g("src/*.rs").base(), "src");
        assert_eq!(g("*.rs").base(), "");
        assert_eq!(g("**/x").base(), "");
        assert_eq!(g("a/b").base(), "a");
        assert_eq!(g("a*/b/c").base(), "");
        assert_eq!(g("a/{b,c}/d").base(), "a");
    }
}
