//! The webhook mapping parser on arbitrary text. `JsonPath::parse` on the whole input: when it
//! parses, its `Display` is the same text (every path has one spelling) and parses to the same
//! path, and `get` walks a fixed document. Then the input as a mapping entry — up to the first
//! `\n` the key, after it the path — through `Mapping::from_map` and, when accepted, `apply` to
//! the fixed document.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde_json::{Value, json};
use weft_core::webhook::{JsonPath, Mapping, limits};

static DOC: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "action": "opened",
        "sender": {"login": "octocat", "id": 1},
        "repository": {"full_name": "octo/hello", "topics": ["a", "b"]},
        "items": [[1, 2, {"x": null}], [], {"0": "zero"}],
        "text": "hello",
        "u": "u".repeat(300),
        "n": 1.5e300,
    })
});

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(path) = JsonPath::parse(text) {
        let shown = path.to_string();
        assert_eq!(shown, text, "a path does not print back as written");
        assert_eq!(JsonPath::parse(&shown).as_ref(), Ok(&path));
        assert!(path.steps().len() <= limits::PATH_STEPS);
        let _ = path.get(&DOC);
    }

    let (key, path) = text.split_once('\n').unwrap_or((text, "$"));
    let map = BTreeMap::from([(key.to_owned(), path.to_owned())]);
    match Mapping::from_map(&map) {
        Ok(mapping) => {
            if let Ok(mapped) = mapping.apply(&DOC) {
                assert!(
                    mapped
                        .user
                        .as_ref()
                        .is_none_or(|u| u.len() <= limits::USER_BYTES)
                );
                if mapping.input.is_none() {
                    assert_eq!(mapped.input, DOC.to_string());
                }
            }
        }
        Err(e) => assert!(
            e.param.as_deref().is_some_and(|p| p.starts_with("mapping")),
            "a mapping error names no entry: {}",
            e.message
        ),
    }
}
