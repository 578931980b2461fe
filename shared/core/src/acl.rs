//! Channel access lists: which channel names a run may publish to or subscribe to.
//!
//! A pattern is an exact channel name (`orders.eu`) or a `prefix.*` wildcard: `a.*` matches
//! `a.b` and `a.b.c`, never `a` itself; `*` alone matches every name. Any other `*` is a literal
//! that can only match itself. A run's effective list is the intersection of the lists that
//! bound it ([`intersect`]): a sub-run's is its parent's intersected with its agent's, so it
//! can never be wider than either.

use crate::agent::AgentChannels;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    /// `prefix.*` stored as `prefix.`; `*` stored as the empty prefix.
    Prefix(String),
    Exact(String),
}

impl Pattern {
    fn parse(raw: &str) -> Option<Self> {
        let raw = raw.trim();
        if raw.is_empty() {
            return None;
        }
        if raw == "*" {
            return Some(Self::Prefix(String::new()));
        }
        match raw.strip_suffix('*') {
            Some(prefix) if prefix.ends_with('.') && prefix.len() > 1 => {
                Some(Self::Prefix(prefix.to_owned()))
            }
            _ => Some(Self::Exact(raw.to_owned())),
        }
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Self::Prefix(p) => name.len() > p.len() && name.starts_with(p.as_str()),
            Self::Exact(n) => n == name,
        }
    }

    /// Whether every name `other` matches is matched by `self`.
    fn covers(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Prefix(p), Self::Prefix(q)) => q.starts_with(p.as_str()),
            (Self::Exact(_), Self::Prefix(_)) => false,
            (_, Self::Exact(n)) => self.matches(n),
        }
    }

    fn render(&self) -> String {
        match self {
            Self::Prefix(p) => format!("{p}*"),
            Self::Exact(n) => n.clone(),
        }
    }
}

fn parse_all<S: AsRef<str>>(patterns: &[S]) -> Vec<Pattern> {
    let mut out: Vec<Pattern> = Vec::new();
    for p in patterns.iter().filter_map(|p| Pattern::parse(p.as_ref())) {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// Whether channel `name` is allowed by `patterns`. An empty list allows nothing.
pub fn channel_allowed<S: AsRef<str>>(patterns: &[S], name: &str) -> bool {
    !name.is_empty()
        && patterns
            .iter()
            .filter_map(|p| Pattern::parse(p.as_ref()))
            .any(|p| p.matches(name))
}

/// The patterns allowing exactly the names both `outer` and `inner` allow. Two patterns that
/// share a name always nest (both are prefixes of that name), so keeping the narrower of each
/// overlapping pair is exact.
pub fn intersect<S: AsRef<str>, T: AsRef<str>>(outer: &[S], inner: &[T]) -> Vec<String> {
    let outer = parse_all(outer);
    let mut out: Vec<Pattern> = Vec::new();
    let mut push = |p: &Pattern| {
        if !out.contains(p) {
            out.push(p.clone());
        }
    };
    for q in parse_all(inner) {
        if outer.iter().any(|o| o.covers(&q)) {
            push(&q);
        } else {
            for o in outer.iter().filter(|o| q.covers(o)) {
                push(o);
            }
        }
    }
    out.iter().map(Pattern::render).collect()
}

/// Both halves of a channel ACL intersected ([`intersect`]).
pub fn intersect_channels(outer: &AgentChannels, inner: &AgentChannels) -> AgentChannels {
    AgentChannels {
        publish: intersect(&outer.publish, &inner.publish),
        subscribe: intersect(&outer.subscribe, &inner.subscribe),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_below_the_prefix_only() {
        let p = ["a.*"];
        assert!(channel_allowed(&p, "a.b"));
        assert!(channel_allowed(&p, "a.b.c"));
        assert!(!channel_allowed(&p, "a"));
        assert!(!channel_allowed(&p, "ab.c"));
        assert!(!channel_allowed(&p, "a."));
        assert!(channel_allowed(&["x"], "x"));
        assert!(!channel_allowed(&["x"], "x.y"));
        assert!(channel_allowed(&["*"], "anything.at.all"));
        assert!(!channel_allowed::<&str>(&[], "a"));
        // A stray `*` is a literal.
        assert!(!channel_allowed(&["a*"], "ab"));
        assert!(channel_allowed(&["a*"], "a*"));
    }

    #[test]
    fn intersections() {
        assert_eq!(intersect(&["a.*"], &["a.b.*"]), vec!["a.b.*"]);
        assert_eq!(intersect(&["a.b.*"], &["a.*"]), vec!["a.b.*"]);
        assert!(intersect(&["a.*"], &["x"]).is_empty());
        assert_eq!(intersect(&["a.*"], &["a.b"]), vec!["a.b"]);
        assert_eq!(intersect(&["a.b"], &["a.*"]), vec!["a.b"]);
        assert!(intersect(&["a.*"], &["a"]).is_empty());
        assert!(intersect::<&str, &str>(&[], &["a.*"]).is_empty());
        assert_eq!(intersect(&["*"], &["x", "y.*"]), vec!["x", "y.*"]);
    }

    /// Exhaustive over a small universe: a name is allowed by the intersection exactly when both
    /// sides allow it — so it is never wider than either.
    #[test]
    fn intersection_is_exact() {
        let pats = [
            "a", "a.b", "a.b.c", "x", "a.*", "a.b.*", "x.*", "*", "ab.*", "b.*",
        ];
        let names = [
            "a", "a.b", "a.b.c", "a.c", "x", "x.y", "ab.c", "b", "b.a", "c",
        ];
        let mut sets: Vec<Vec<&str>> = vec![vec![]];
        for (i, p) in pats.iter().enumerate() {
            sets.push(vec![p]);
            for q in &pats[i + 1..] {
                sets.push(vec![p, q]);
            }
        }
        for a in &sets {
            for b in &sets {
                let both = intersect(a, b);
                for n in names {
                    assert_eq!(
                        channel_allowed(&both, n),
                        channel_allowed(a, n) && channel_allowed(b, n),
                        "{a:?} ∩ {b:?} = {both:?} on {n}"
                    );
                }
            }
        }
    }
}
