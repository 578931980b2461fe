//! The properties the fuzz targets check, beyond "does not panic". Each broken property panics,
//! which libFuzzer reports as a crash with the input that caused it.
#![expect(
    clippy::panic,
    reason = "fuzz targets are test code: a panic is how they report a broken property"
)]

pub mod defs;
pub mod seeds;
pub mod targets;

/// The repository root, from this crate's manifest directory.
/// (Read at run time: the seeds are not compiled in.)
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .to_path_buf()
}

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use prost::Message as _;
use weft_core::Error;
use weft_proto::v1;
use weft_router::fuzzing::Provider;
use weft_router::{ChatEvent, ChatRequest};

/// A chat front door's decoding of one body, then what the router does with the result:
/// - a refusal is the caller's fault (4xx), never a server error;
/// - the request survives the internal gRPC hop unchanged (to proto → prost encode → decode →
///   from proto gives back the same request: the conversion is lossless);
/// - every driver builds its upstream body for it, or refuses it with a 4xx.
pub fn check_decoded(decoded: Result<ChatRequest, Error>) {
    let req = match decoded {
        Ok(r) => r,
        Err(e) => {
            assert_4xx("decoder", &e);
            return;
        }
    };
    let proto = weft_proto::chat_request_to_proto(req.clone());
    let wire = proto.encode_to_vec();
    let back = match v1::ChatRequest::decode(wire.as_slice()) {
        Ok(back) => back,
        Err(e) => panic!("the request does not decode after encoding: {e}"),
    };
    assert!(back == proto, "the request changed over the gRPC hop");
    match weft_proto::chat_request_from_proto(back) {
        Ok(r) => assert!(r == req, "the request is not lossless over the gRPC hop"),
        Err(e) => panic!(
            "the router refuses what the gateway forwards: {}",
            e.message
        ),
    }
    for body in weft_router::fuzzing::provider_bodies(&req) {
        if let Err(e) = body {
            assert_4xx("driver", &e);
        }
    }
}

fn assert_4xx(who: &str, e: &Error) {
    let status = e.code.http_status();
    assert!(
        (400..500).contains(&status),
        "{who} refused with {status}: {}",
        e.message
    );
}

/// The first input byte picks the provider.
pub fn provider(b: u8) -> Provider {
    Provider::ALL[usize::from(b) % Provider::ALL.len()]
}

/// What every driver's events must look like (see `ChatEvent`): tool calls start once, with an
/// id every provider accepts, before their argument deltas; a stream that fails ends with its one
/// error and has no finish; a complete turn ends with exactly one finish, after at most one usage.
pub fn check_turn(items: &[Result<ChatEvent, Error>]) {
    let (failed, events): (Vec<_>, Vec<_>) = items.iter().partition(|r| r.is_err());
    let events: Vec<&ChatEvent> = events.into_iter().filter_map(|r| r.as_ref().ok()).collect();
    if !failed.is_empty() {
        assert!(failed.len() == 1, "more than one error in a stream");
        assert!(
            matches!(items.last(), Some(Err(_))),
            "an error is not the end of its stream"
        );
    }
    let mut started = HashSet::new();
    let mut finishes = 0;
    let mut usages = 0;
    for ev in &events {
        assert!(finishes == 0, "an event after the finish: {ev:?}");
        match ev {
            ChatEvent::ToolCallStart { index, id, .. } => {
                assert!(started.insert(*index), "tool call {index} started twice");
                assert!(
                    valid_tool_call_id(id),
                    "tool call id {id:?} is not portable"
                );
            }
            ChatEvent::ToolCallDelta { index, .. } => {
                assert!(
                    started.contains(index),
                    "arguments for unstarted call {index}"
                );
            }
            ChatEvent::Usage(_) => usages += 1,
            ChatEvent::Finish(_) => finishes += 1,
            ChatEvent::ProviderChosen { .. } | ChatEvent::Fallback(_) => {
                panic!("a driver emitted a router event: {ev:?}")
            }
            ChatEvent::TextDelta(_)
            | ChatEvent::ReasoningDelta(_)
            | ChatEvent::ReasoningSignature(_) => {}
        }
    }
    assert!(usages <= 1, "{usages} usage events");
    if failed.is_empty() {
        assert!(finishes == 1, "a complete turn has {finishes} finishes");
    } else {
        assert!(finishes == 0, "a failed stream has a finish");
    }
}

/// `^[a-zA-Z0-9_-]{1,40}$`, the id every provider accepts (`providers::tool_call_id`).
fn valid_tool_call_id(id: &str) -> bool {
    (1..=40).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A stream's events do not depend on how its body was cut into chunks (`a` and `b` are the same
/// body folded with different chunk sizes). Tool-call ids are left out of the comparison: ids the
/// upstream did not send are minted afresh for each fold.
pub fn check_chunking(a: &[Result<ChatEvent, Error>], b: &[Result<ChatEvent, Error>]) {
    let norm = |items: &[Result<ChatEvent, Error>]| -> Vec<Result<ChatEvent, String>> {
        items
            .iter()
            .map(|r| match r {
                Ok(ChatEvent::ToolCallStart { index, name, .. }) => Ok(ChatEvent::ToolCallStart {
                    index: *index,
                    id: String::new(),
                    name: name.clone(),
                }),
                Ok(ev) => Ok(ev.clone()),
                Err(e) => Err(e.message.clone()),
            })
            .collect()
    };
    let (a, b) = (norm(a), norm(b));
    assert!(a == b, "chunking changed the events:\n{a:?}\n{b:?}");
}
