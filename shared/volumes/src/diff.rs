//! Unified diffs (stub).

/// A unified diff of `before` → `after`.
pub fn unified(path: &str, before: &str, after: &str) -> String {
    format!("{path}{before}{after}")
}

/// [`unified`], cut to `max_bytes`.
pub fn unified_capped(path: &str, before: &str, after: &str, max_bytes: usize) -> String {
    unified(path, before, after)
        .chars()
        .take(max_bytes)
        .collect()
}
