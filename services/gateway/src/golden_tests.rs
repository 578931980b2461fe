//! Golden files for each front door's output: the JSON answer and the SSE stream that each
//! dialect writes for scripted turns, pinned under `golden/` and compared as JSON values: each
//! JSON line (a whole answer, or an SSE `data:` payload) as a `serde_json::Value`, so field order
//! and spacing do not count, and every other line (`event:` names, `[DONE]`, the blank lines
//! between frames) as text, in order. A change to a door's wire output shows up as a diff of
//! these files; after reviewing it, regenerate them with
//! `UPDATE_GOLDEN=1 cargo test -p weft-gateway golden`.

use std::path::PathBuf;

use serde_json::Value;

use weft_core::chat::{ChatEvent, Fallback};
use weft_core::message::{FinishReason, Usage};
use weft_core::{Error, ErrorCode};

use crate::dialect::{Dialect, render};
use crate::llm::Native;
use crate::messages::Anthropic;
use crate::openai::OpenAi;
use crate::responses::{Echo, Responses};

fn chosen() -> ChatEvent {
    ChatEvent::ProviderChosen {
        provider: "openai-main".into(),
        model: "gpt-4o-mini".into(),
        fallbacks: 1,
    }
}

/// The scripted turns: (name, the router's items).
fn scripts() -> Vec<(&'static str, Vec<Result<ChatEvent, Error>>)> {
    let usage = Usage {
        cache_read_tokens: 4,
        ..Usage::new(12, 5)
    };
    vec![
        (
            "text",
            vec![
                Ok(ChatEvent::Fallback(Fallback {
                    provider: "anthropic-main".into(),
                    model: "claude-x".into(),
                    code: "upstream_error".into(),
                    message: "upstream answered 529".into(),
                })),
                Ok(chosen()),
                Ok(ChatEvent::ReasoningDelta("The user greets; ".into())),
                Ok(ChatEvent::ReasoningDelta("answer briefly.".into())),
                Ok(ChatEvent::ReasoningSignature("sig-1".into())),
                Ok(ChatEvent::TextDelta("Hello".into())),
                Ok(ChatEvent::TextDelta(", \"world\"\n".into())),
                Ok(ChatEvent::Usage(usage)),
                Ok(ChatEvent::Finish(FinishReason::Stop)),
            ],
        ),
        (
            "tools",
            vec![
                Ok(chosen()),
                Ok(ChatEvent::ToolCallStart {
                    index: 0,
                    id: "call_a".into(),
                    name: "get_weather".into(),
                }),
                Ok(ChatEvent::ToolCallDelta {
                    index: 0,
                    arguments: "{\"city\":".into(),
                }),
                Ok(ChatEvent::ToolCallDelta {
                    index: 0,
                    arguments: "\"Paris\"}".into(),
                }),
                Ok(ChatEvent::ToolCallStart {
                    index: 1,
                    id: "call_b".into(),
                    name: "get_time".into(),
                }),
                Ok(ChatEvent::ToolCallDelta {
                    index: 1,
                    arguments: "{}".into(),
                }),
                Ok(ChatEvent::Usage(Usage::new(30, 9))),
                Ok(ChatEvent::Finish(FinishReason::ToolCalls)),
            ],
        ),
        (
            "length",
            vec![
                Ok(chosen()),
                Ok(ChatEvent::TextDelta("cut".into())),
                Ok(ChatEvent::Finish(FinishReason::Length)),
            ],
        ),
        (
            "ended-early",
            vec![Ok(chosen()), Ok(ChatEvent::TextDelta("Hel".into()))],
        ),
        (
            "failed",
            vec![
                Ok(chosen()),
                Ok(ChatEvent::TextDelta("Hel".into())),
                Err(Error::new(
                    ErrorCode::UpstreamTimeout,
                    "the provider sent nothing for 60 s",
                )),
            ],
        ),
    ]
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden")
}

/// One line of a golden file, as what it means.
#[derive(Debug, PartialEq)]
enum Line<'a> {
    /// A JSON object or array, after its prefix (`data: `, or none for a whole answer).
    Json(&'a str, Value),
    /// Anything else, as is: an `event:` line, `data: [DONE]`, a blank line, a note.
    Text(&'a str),
}

/// `doc` line by line, each JSON document parsed.
fn lines(doc: &str) -> Vec<Line<'_>> {
    doc.split('\n')
        .map(|line| {
            let (prefix, body) = line
                .strip_prefix("data: ")
                .map_or(("", line), |body| ("data: ", body));
            match serde_json::from_str::<Value>(body) {
                Ok(v) if v.is_object() || v.is_array() => Line::Json(prefix, v),
                _ => Line::Text(line),
            }
        })
        .collect()
}

/// Compares `actual` with the golden file `name` as JSON values (see the module's header), or
/// writes it, with `UPDATE_GOLDEN=1`; returns the mismatch, if any.
fn check(name: &str, actual: &str) -> Option<String> {
    let path = dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(dir()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return None;
    }
    match std::fs::read_to_string(&path) {
        Ok(want) if lines(&want) == lines(actual) => None,
        Ok(want) => Some(format!(
            "{name} differs (review, then UPDATE_GOLDEN=1 cargo test -p weft-gateway golden):\n--- golden\n{want}\n--- now\n{actual}"
        )),
        Err(e) => Some(format!(
            "{name}: {e} (create it with UPDATE_GOLDEN=1 cargo test -p weft-gateway golden)"
        )),
    }
}

#[test]
fn goldens_compare_as_json_values() {
    let golden = "event: a\ndata: {\"x\":1,\"y\":[1,2]}\n\ndata: [DONE]\n";
    let same = "event: a\ndata: {\"y\": [1, 2], \"x\": 1}\n\ndata: [DONE]\n";
    assert_eq!(lines(golden), lines(same));
    for other in [
        "event: b\ndata: {\"x\":1,\"y\":[1,2]}\n\ndata: [DONE]\n",
        "event: a\ndata: {\"x\":1,\"y\":[2,1]}\n\ndata: [DONE]\n",
        "event: a\ndata: {\"x\":1.0,\"y\":[1,2]}\n\ndata: [DONE]\n",
        "event: a\ndata: {\"x\":1,\"y\":[1,2]}\n\n",
        "event: a\n{\"x\":1,\"y\":[1,2]}\n\ndata: [DONE]\n",
    ] {
        assert_ne!(lines(golden), lines(other), "{other}");
    }
}

fn pin<D: Dialect + Clone>(door: &str, make: impl Fn() -> D) {
    let mut bad = Vec::new();
    for (script, events) in scripts() {
        let (sse, answer) = render(make(), events);
        bad.extend(check(&format!("{door}-{script}.sse"), &sse));
        let answer = answer.map_or_else(
            || "(no answer: the stream failed or ended before its finish)\n".to_owned(),
            |a| a + "\n",
        );
        bad.extend(check(&format!("{door}-{script}.json"), &answer));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}

#[test]
fn golden_openai_chat_completions() {
    pin("openai", || {
        OpenAi::with_id(
            "chatcmpl-golden".into(),
            1_700_000_000,
            "mini".into(),
            false,
        )
    });
    pin("openai-include-usage", || {
        OpenAi::with_id("chatcmpl-golden".into(), 1_700_000_000, "mini".into(), true)
    });
}

#[test]
fn golden_anthropic_messages() {
    pin("anthropic", || {
        Anthropic::new("msg_golden".into(), "claude-sonnet".into())
    });
}

#[test]
fn golden_native_llm_chat() {
    pin("native", || Native::new("llm_golden".into()));
}

#[test]
fn golden_openai_responses() {
    pin("responses", || {
        Responses::new(
            "resp_golden".into(),
            1_700_000_000,
            Echo::plain("mini", false),
            None,
        )
    });
}
