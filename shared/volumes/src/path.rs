//! Paths inside a volume: the one rule every tool, route and import applies before a path
//! reaches the store. A volume path is relative to the volume root and `/`-separated
//! (`notes/todo.md`); [`clean`] accepts a leading `./` and a trailing `/` and drops them, and
//! refuses everything that could name something outside the root or be read two ways: an empty
//! path, an absolute one, `.` and `..` segments, empty segments (`a//b`), control characters
//! (NUL included) and over-long paths or segments. Nothing else is rewritten: a backslash is an
//! ordinary character, and case is kept.

/// The longest path accepted, in bytes (after cleaning).
pub const MAX_PATH_BYTES: usize = 1024;
/// The longest segment (file or directory name) accepted, in bytes.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// A refused path: `message` names `field` in backticks and says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PathError {
    /// The input field the path came from (`path`, `destination`, …).
    pub field: String,
    /// What is wrong and how to fix it, naming the field.
    pub message: String,
}

impl PathError {
    fn new(field: &str, message: String) -> Self {
        PathError {
            field: field.to_owned(),
            message,
        }
    }
}

/// Normalizes `path`, a path relative to the volume root given in the input field `field`: a
/// single leading `./` and a single trailing `/` are dropped, nothing else is rewritten. Refuses
/// an empty path, an absolute one, `.`/`..` or empty segments, control characters (NUL
/// included), a path over [`MAX_PATH_BYTES`] and a segment over [`MAX_SEGMENT_BYTES`].
pub fn clean(field: &str, path: &str) -> Result<String, PathError> {
    if let Some(c) = path.chars().find(|c| c.is_control()) {
        let what = if c == '\0' {
            "NUL".to_owned()
        } else {
            format!("U+{:04X}", u32::from(c))
        };
        return Err(PathError::new(
            field,
            format!(
                "`{field}` must not contain control characters, got {what} in {}; use printable characters only",
                shown(path)
            ),
        ));
    }
    if path.starts_with('/') {
        return Err(PathError::new(
            field,
            format!(
                "`{field}` must be relative to the volume root, got {}; drop the leading /",
                shown(path)
            ),
        ));
    }
    let trimmed = path.strip_prefix("./").unwrap_or(path);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    if trimmed.is_empty() {
        return Err(PathError::new(
            field,
            format!(
                "`{field}` must name a file relative to the volume root, got {}; e.g. `notes/todo.md`",
                shown(path)
            ),
        ));
    }
    if trimmed.len() > MAX_PATH_BYTES {
        return Err(PathError::new(
            field,
            format!(
                "`{field}` must be at most {MAX_PATH_BYTES} bytes, got {} bytes; use a shorter path",
                trimmed.len()
            ),
        ));
    }
    for segment in trimmed.split('/') {
        match segment {
            "" => {
                return Err(PathError::new(
                    field,
                    format!(
                        "`{field}` must not contain empty segments (`//`), got {}; write a single / between names",
                        shown(path)
                    ),
                ));
            }
            "." => {
                return Err(PathError::new(
                    field,
                    format!(
                        "`{field}` must not contain `.` segments, got {}; write the path without them",
                        shown(path)
                    ),
                ));
            }
            ".." => {
                return Err(PathError::new(
                    field,
                    format!(
                        "`{field}` must not contain `..` segments, got {}; paths stay inside the volume, name the file from its root",
                        shown(path)
                    ),
                ));
            }
            s if s.len() > MAX_SEGMENT_BYTES => {
                return Err(PathError::new(
                    field,
                    format!(
                        "`{field}` has a segment of {} bytes, at most {MAX_SEGMENT_BYTES} are allowed; use shorter names",
                        s.len()
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(trimmed.to_owned())
}

/// The directories above a clean `path`, nearest first: `a/b/c.txt` gives `a/b`, then `a`.
pub fn parent_dirs(path: &str) -> impl Iterator<Item = &str> {
    path.rmatch_indices('/').map(move |(i, _)| &path[..i])
}

/// The last segment of a clean `path`: `a/b/c.txt` gives `c.txt`.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether `path` is `dir` or lies under it (`dir` clean; the empty `dir` is the root and holds
/// every path).
pub fn is_within(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/')
}

/// `s` quoted in backticks for a message: control characters escaped, cut after 100 characters
/// so a huge input does not come back whole.
pub(crate) fn shown(s: &str) -> String {
    const MAX: usize = 100;
    let mut out = String::from("`");
    for (i, c) in s.chars().enumerate() {
        if i == MAX {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out.push('`');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(path: &str) -> String {
        match clean("path", path) {
            Ok(p) => panic!("{path:?} was accepted as {p:?}"),
            Err(e) => {
                assert_eq!(e.field, "path");
                assert!(e.message.contains("`path`"), "{}", e.message);
                e.message
            }
        }
    }

    #[test]
    fn plain_paths_are_kept() {
        assert_eq!(clean("path", "a.txt").unwrap(), "a.txt");
        assert_eq!(clean("path", "src/lib.rs").unwrap(), "src/lib.rs");
        assert_eq!(clean("path", "a b/C:\\x.txt").unwrap(), "a b/C:\\x.txt");
        assert_eq!(clean("path", ".hidden/..x/x..").unwrap(), ".hidden/..x/x..");
        assert_eq!(clean("path", "ünï/код.md").unwrap(), "ünï/код.md");
    }

    #[test]
    fn a_leading_dot_slash_and_a_trailing_slash_are_dropped() {
        assert_eq!(clean("path", "./a/b").unwrap(), "a/b");
        assert_eq!(clean("path", "a/b/").unwrap(), "a/b");
        assert_eq!(clean("path", "./a/").unwrap(), "a");
        // only one of each
        refused("././a");
        refused("a//");
    }

    #[test]
    fn escapes_are_refused() {
        assert!(refused("..").contains("`..`"));
        assert!(refused("../x").contains("`..`"));
        assert!(refused("a/../b").contains("`..`"));
        assert!(refused("a/..").contains("`..`"));
        let m = refused("/etc/passwd");
        assert_eq!(
            m,
            "`path` must be relative to the volume root, got `/etc/passwd`; drop the leading /"
        );
        refused("//x");
    }

    #[test]
    fn dot_and_empty_segments_are_refused() {
        assert!(refused("a/./b").contains("`.`"));
        assert!(refused(".").contains("`.`"));
        assert!(refused("a//b").contains("empty segments"));
        assert!(refused("").contains("must name a file"));
        assert!(refused("./").contains("must name a file"));
        assert!(refused("/").contains("drop the leading /"));
    }

    #[test]
    fn control_characters_are_refused() {
        let m = refused("a\0b");
        assert!(m.contains("NUL"), "{m}");
        assert!(m.contains("`a\\0b`"), "{m}");
        assert!(refused("a\nb").contains("U+000A"));
        assert!(refused("a\u{7f}").contains("U+007F"));
        assert!(refused("a\u{85}").contains("U+0085"));
    }

    #[test]
    fn over_long_paths_and_segments_are_refused() {
        let long_segment = "x".repeat(256);
        assert!(refused(&long_segment).contains("segment of 256 bytes"));
        assert_eq!(clean("path", &"x".repeat(255)).unwrap().len(), 255);

        let at_cap = vec!["y".repeat(127); 8].join("/"); // 8 * 127 + 7 = 1023
        assert_eq!(at_cap.len(), 1023);
        assert!(clean("path", &at_cap).is_ok());
        let at_cap = format!("{at_cap}z");
        assert!(clean("path", &at_cap).is_ok());
        let over = format!("{at_cap}z");
        let m = refused(&over);
        assert!(m.contains("at most 1024 bytes, got 1025"), "{m}");
        // the message does not echo a huge input
        let m = refused(&format!("/{}", "q".repeat(100_000)));
        assert!(m.len() < 300, "{}", m.len());
    }

    #[test]
    fn the_field_is_named() {
        let e = clean("destination", "../x").unwrap_err();
        assert_eq!(e.field, "destination");
        assert!(
            e.to_string()
                .starts_with("`destination` must not contain `..`")
        );
    }

    /// Random inputs: an accepted path is accepted again unchanged and has none of the refused
    /// forms.
    #[test]
    fn accepted_paths_are_clean_and_stable() {
        const ALPHABET: [&str; 9] = ["a", "/", ".", "..", "./", "\0", "é", "\\", " "];
        let mut seed: u64 = 7;
        let mut next = move |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            usize::try_from(seed >> 33).unwrap() % n
        };
        let mut accepted = 0;
        for _ in 0..20_000 {
            let len = next(8);
            let input: String = (0..len).map(|_| ALPHABET[next(ALPHABET.len())]).collect();
            if let Ok(p) = clean("path", &input) {
                accepted += 1;
                assert_eq!(clean("path", &p).as_deref(), Ok(p.as_str()), "{input:?}");
                assert!(!p.is_empty() && !p.starts_with('/') && !p.ends_with('/'));
                assert!(
                    p.split('/').all(|s| !s.is_empty() && s != "." && s != ".."),
                    "{p:?}"
                );
                assert!(!p.contains('\0'));
            }
        }
        assert!(accepted > 100, "{accepted}");
    }

    #[test]
    fn parents_names_and_containment() {
        assert_eq!(parent_dirs("a/b/c.txt").collect::<Vec<_>>(), ["a/b", "a"]);
        assert_eq!(parent_dirs("c.txt").count(), 0);
        assert_eq!(file_name("a/b/c.txt"), "c.txt");
        assert_eq!(file_name("c.txt"), "c.txt");
        assert!(is_within("a/b", "a"));
        assert!(is_within("a", "a"));
        assert!(is_within("a", ""));
        assert!(!is_within("ab", "a"));
        assert!(!is_within("a", "a/b"));
    }
}
