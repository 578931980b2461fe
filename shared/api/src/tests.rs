use std::path::PathBuf;

use super::*;

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json")
}

#[test]
fn the_document_matches_its_golden_file() {
    // Regenerate on purpose with `UPDATE_GOLDEN=1 cargo test -p weft-api` and review the diff.
    let doc = document();
    let path = golden_path();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        let text = serde_json::to_string_pretty(&doc).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
    }
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        golden == doc,
        "shared/api/openapi.json is not what the contract generates; run UPDATE_GOLDEN=1 cargo test -p weft-api and review the diff"
    );
}

#[test]
fn every_ref_resolves_and_every_route_is_listed_once() {
    let doc = document();
    let text = doc.to_string();
    for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = r.split('"').next().unwrap();
        assert!(doc["components"]["schemas"].get(name).is_some(), "{name}");
    }
    let mut seen = std::collections::HashSet::new();
    for op in ops() {
        assert!(
            seen.insert((op.method, op.path)),
            "{:?} {} twice",
            op.method,
            op.path
        );
        assert!(
            !op.answers.is_empty(),
            "{:?} {}: no answers",
            op.method,
            op.path
        );
    }
}

#[test]
fn a_content_block_type_is_a_string_not_a_variant_index() {
    // schemathesis found `"type": 0` read as `text` inside a tool result's content.
    use crate::llm::LlmContentBlock;
    let read = |v: Value| serde_json::from_value::<LlmContentBlock>(v);
    assert!(read(serde_json::json!({"type": "text", "text": "hi"})).is_ok());
    let e = read(serde_json::json!({"type": 0, "text": ""})).unwrap_err();
    assert!(e.to_string().contains("`type` is 0"), "{e}");
    let nested = serde_json::json!({"type": "tool_result", "tool_use_id": "a",
        "content": [{"type": 0, "text": ""}]});
    assert!(read(nested).is_err());
    assert!(read(serde_json::json!([["text", "hi"]])).is_err());
}
