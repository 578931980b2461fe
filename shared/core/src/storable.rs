//! What weft stores is valid UTF-8 without U+0000: Postgres refuses NUL in `text` and `jsonb`.
//!
//! Text from callers is checked at the gateway and a NUL is a 400 naming the field. Text weft
//! did not choose — a model's reply, a tool's input or name as the model wrote it, a page an HTTP
//! tool fetched — is stored by one documented rule instead of being refused: **every U+0000 is
//! replaced by U+FFFD (the replacement character)**, in strings and in object keys. Nothing else
//! changes, so such content is stored, shown and sent back to the model as faithfully as the
//! database allows, and a run never stalls on it.

use std::borrow::Cow;

use serde_json::Value;

/// What a U+0000 becomes in stored text.
pub const NUL_REPLACEMENT: char = '\u{FFFD}';

/// `s` with every U+0000 replaced; borrowed when it has none.
pub fn text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// Replaces every U+0000 in the strings and keys of `v`, in place.
pub fn json(v: &mut Value) {
    match v {
        Value::String(s) => {
            if s.contains('\0') {
                *s = s.replace('\0', "\u{FFFD}");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(json),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                let old = std::mem::take(map);
                for (k, mut item) in old {
                    json(&mut item);
                    map.insert(k.replace('\0', "\u{FFFD}"), item);
                }
            } else {
                map.values_mut().for_each(json);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Where the first U+0000 in `v` is, in the path notation of weft's 400s
/// (`messages[0].content`, `""` for `v` itself), or `None` when it has none. Callers' input with a
/// NUL is refused with this path rather than rewritten.
pub fn nul_path(v: &Value) -> Option<String> {
    nul_path_at(v, String::new())
}

fn nul_path_at(v: &Value, at: String) -> Option<String> {
    match v {
        Value::String(s) => s.contains('\0').then_some(at),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_path_at(item, format!("{at}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(k, item)| {
            let here = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            if k.contains('\0') {
                Some(here)
            } else {
                nul_path_at(item, here)
            }
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// The 400 for caller input with a NUL at `path` (`.` for the whole body).
pub fn nul_error(path: &str) -> crate::Error {
    // A NUL in a key is shown escaped: the error itself must be printable and storable.
    let path = if path.is_empty() {
        ".".to_owned()
    } else {
        path.replace('\0', "\\u0000")
    };
    crate::Error::invalid(format!(
        "`{path}` contains a NUL character (U+0000), which weft does not store; remove it"
    ))
    .with_param(path)
}

/// `Err` (the 400 of [`nul_error`]) when a definition's content holds a NUL anywhere. Every
/// definition is stored, and Postgres cannot store U+0000: refused in `validate`, so one from a
/// file or the config (which does not pass the gateway) is held to the API's rule instead of
/// failing in the store.
pub fn refuse_nul<T: serde::Serialize>(content: &T) -> Result<(), crate::Error> {
    match serde_json::to_value(content) {
        Ok(v) => nul_path(&v).map_or(Ok(()), |path| Err(nul_error(&path))),
        Err(_) => Ok(()),
    }
}

/// `v` made storable (see [`json`]).
pub fn json_owned(mut v: Value) -> Value {
    json(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_path_names_the_first_nul() {
        let v = serde_json::json!({"a": {"b": ["x", "y\0"]}});
        assert_eq!(nul_path(&v).as_deref(), Some("a.b[1]"));
        assert_eq!(nul_path(&serde_json::json!({"a": 1})), None);
    }

    #[test]
    fn nul_becomes_the_replacement_character_everywhere() {
        assert_eq!(text("bad\0reply"), "bad\u{FFFD}reply");
        assert!(matches!(text("fine"), Cow::Borrowed(_)));
        let v = json_owned(serde_json::json!({"a\0": ["x\0", 1, {"b": "\0"}], "n": null}));
        assert_eq!(
            v,
            serde_json::json!({"a\u{FFFD}": ["x\u{FFFD}", 1, {"b": "\u{FFFD}"}], "n": null})
        );
    }
}
