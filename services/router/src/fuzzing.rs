//! Entry points for the cargo-fuzz targets in `fuzz/`: the drivers' parsing of what an upstream
//! sends (streams and whole bodies) and their translation of a request, reachable without a
//! network and through the same code a live call runs. Not part of the router's API.

use std::collections::VecDeque;
use std::time::Duration;

use weft_core::Error;

use crate::providers::http::{self, Fault, Fold};
use crate::providers::{anthropic, deepseek, gemini, ollama, openai};
use crate::types::{ChatEvent, ChatRequest};

/// The HTTP driver kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Anthropic,
    Gemini,
    DeepSeek,
    Ollama,
}

impl Provider {
    pub const ALL: [Self; 5] = [
        Self::OpenAi,
        Self::Anthropic,
        Self::Gemini,
        Self::DeepSeek,
        Self::Ollama,
    ];
}

/// The events of a streamed answer whose body arrives as `body` cut into chunks of `chunk` bytes
/// (0: one chunk), framed and folded as the driver does for a live call. A stream that fails ends
/// with its one error.
pub fn fold_stream(provider: Provider, body: &[u8], chunk: usize) -> Vec<Result<ChatEvent, Error>> {
    let chunks: Vec<Result<bytes::Bytes, reqwest::Error>> = if chunk == 0 {
        vec![Ok(bytes::Bytes::copy_from_slice(body))]
    } else {
        body.chunks(chunk)
            .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
            .collect()
    };
    let body = futures::stream::iter(chunks);
    // The fold's loop waits with a timeout, which needs tokio's timer; nothing here ever waits.
    let idle = Duration::from_secs(60);
    let name = "fuzz".to_owned();
    let events = match provider {
        Provider::OpenAi | Provider::DeepSeek => http::fold_stream(
            name,
            idle,
            http::sse_frames(body),
            openai::StreamState::default(),
        ),
        Provider::Anthropic => http::fold_stream(
            name,
            idle,
            http::sse_frames(body),
            anthropic::StreamState::default(),
        ),
        Provider::Gemini => http::fold_stream(
            name,
            idle,
            http::sse_frames(body),
            gemini::StreamState::new(1),
        ),
        Provider::Ollama => http::fold_stream(
            name,
            idle,
            http::ndjson_frames(body),
            ollama::ChatFold::new(&[]),
        ),
    };
    RUNTIME.with(|rt| {
        rt.as_ref()
            .map(|rt| rt.block_on(futures::StreamExt::collect(events)))
            .unwrap_or_default()
    })
}

thread_local! {
    static RUNTIME: Option<tokio::runtime::Runtime> = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .ok();
}

/// The events of a non-streamed answer `body`, parsed as the driver does; `None` where the driver
/// answers "malformed response".
pub fn parse_body(provider: Provider, body: &[u8]) -> Option<Vec<ChatEvent>> {
    match provider {
        Provider::OpenAi | Provider::DeepSeek => openai::completion_events(body),
        Provider::Anthropic => anthropic::message_events(body),
        Provider::Gemini => gemini::response_events(body, 1),
        Provider::Ollama => {
            let v: weft_wire::ollama::ChatResponse<'_> =
                weft_wire::lenient::from_slice(body).ok()??;
            let mut fold = ollama::ChatFold::new(&[]);
            let mut out = VecDeque::new();
            match fold
                .apply(&v, &mut out)
                .and_then(|()| fold.at_end(&mut out))
            {
                Ok(()) => Some(out.into()),
                Err(Fault::Malformed | Fault::EndedEarly | Fault::Upstream(_)) => None,
            }
        }
    }
}

/// What the router reads from an upstream's error answer: the message it may quote and the delay
/// a `Retry-After` header (`retry_after`) or the body asks for.
pub fn error_answer(body: &[u8], retry_after: &str) -> (Option<String>, Option<Duration>) {
    let header = http::parse_retry_after(retry_after, std::time::UNIX_EPOCH);
    let answer: Option<weft_wire::error::ErrorAnswer<'_>> = serde_json::from_slice(body).ok();
    let message = answer
        .as_ref()
        .and_then(weft_wire::error::ErrorAnswer::message)
        .map(str::to_owned);
    let delay = header.or_else(|| answer.as_ref().and_then(http::retry_delay));
    (message, delay)
}

/// Every driver's request body for `req` (or its refusal), as the drivers build them.
pub fn provider_bodies(req: &ChatRequest) -> Vec<Result<serde_json::Value, Error>> {
    let model = req.model.as_str();
    vec![
        Ok(openai::chat_body(model, req)),
        anthropic::messages_body(model, req, 4096).map_err(|e| e.error),
        gemini::request_body(req).map_err(|e| e.error),
        deepseek::chat_body(model, req).map_err(|e| e.error),
        ollama::chat_body(model, req, Some(8192)).map_err(|e| e.error),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(kind: &str, file: &str) -> Vec<u8> {
        let path = format!(
            "{}/tests/fixtures/{kind}/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    const KINDS: [(&str, Provider); 5] = [
        ("openai", Provider::OpenAi),
        ("anthropic", Provider::Anthropic),
        ("gemini", Provider::Gemini),
        ("deepseek", Provider::DeepSeek),
        ("ollama", Provider::Ollama),
    ];

    /// The fuzz targets' seeds: every recorded stream folds to a finish in any chunking (the
    /// malformed one to an error), and every recorded answer parses.
    #[test]
    fn recorded_answers_go_through_the_fuzzing_entry_points() {
        for (kind, p) in KINDS {
            for file in ["text.stream", "tool_call.stream", "parallel_tools.stream"] {
                let body = fixture(kind, file);
                for chunk in [0, 1, 7] {
                    let items = fold_stream(p, &body, chunk);
                    assert!(
                        matches!(items.last(), Some(Ok(ChatEvent::Finish(_)))),
                        "{kind}/{file} in chunks of {chunk}: {items:?}"
                    );
                }
            }
            let items = fold_stream(p, &fixture(kind, "malformed.stream"), 0);
            assert!(matches!(items.last(), Some(Err(_))), "{kind}: {items:?}");
            for file in ["text.json", "tool_call.json", "after_tool.json"] {
                let events = parse_body(p, &fixture(kind, file));
                assert!(
                    matches!(
                        events.as_deref().and_then(<[_]>::last),
                        Some(ChatEvent::Finish(_))
                    ),
                    "{kind}/{file}: {events:?}"
                );
            }
            let (message, _) = error_answer(&fixture(kind, "error_429.json"), "");
            assert!(message.is_some(), "{kind}");
        }
    }
}
