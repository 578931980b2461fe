//! The chat contract every front door, the router and the executor share: one model turn
//! ([`ChatRequest`]), the flat events it streams back ([`ChatEvent`]), the numbering of those
//! events into content blocks ([`Blocks`]), and the one assembler of a whole answer
//! ([`Assembler`]).
//!
//! The wire formats live at the edges: each front door decodes its dialect into a
//! [`ChatRequest`] and encodes [`ChatEvent`]s (or an [`Answer`]) back; the router's drivers
//! encode a [`ChatRequest`] for their provider and decode its answer into [`ChatEvent`]s. The
//! protobuf conversions for the gRPC hop are in `weft-proto`.

use serde_json::{Map, Value};

use crate::error::{Error, ErrorCode};
use crate::message::{ContentBlock, FinishReason, Message, ToolSpec, Usage};

/// Sampling parameters; `None` leaves the provider's default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
}

/// One model turn.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: Option<Value>,
    pub sampling: Sampling,
    pub response_format: Option<Value>,
    pub user: Option<String>,
    /// Request fields weft does not model, forwarded to providers that have them.
    pub extra: Map<String, Value>,
    pub provider_hint: Option<String>,
    pub tier_hint: Option<String>,
    /// Whether to stream from the upstream (events stream either way).
    pub stream: bool,
}

/// A candidate that failed before its first byte, after which the next one was tried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fallback {
    pub provider: String,
    pub model: String,
    pub code: String,
    pub message: String,
}

/// What a turn streams back. A well-formed turn is: deltas and tool calls in any order, at most
/// one `Usage`, then exactly one `Finish`.
#[derive(Clone, Debug, PartialEq)]
pub enum ChatEvent {
    /// Added by the router before the driver's events.
    ProviderChosen {
        provider: String,
        model: String,
        fallbacks: u32,
    },
    /// Added by the router when a candidate failed before its first byte and the next is tried.
    Fallback(Fallback),
    TextDelta(String),
    ReasoningDelta(String),
    /// The signature closing the reasoning streamed so far (Anthropic extended thinking).
    ReasoningSignature(String),
    ToolCallStart {
        index: u32,
        id: String,
        name: String,
    },
    ToolCallDelta {
        index: u32,
        arguments: String,
    },
    Usage(Usage),
    Finish(FinishReason),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct EmbedRequest {
    pub model: String,
    pub input: Vec<String>,
    pub dimensions: Option<u32>,
    pub user: Option<String>,
    pub provider_hint: Option<String>,
    pub tier_hint: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EmbedResult {
    pub provider: String,
    pub model: String,
    pub vectors: Vec<Vec<f32>>,
    pub usage: Usage,
}

// --- from events to content blocks ---------------------------------------------------------------

/// How a content block begins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    Text,
    Reasoning,
    ToolUse { id: String, name: String },
}

/// A piece of a content block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delta {
    Text(String),
    Reasoning(String),
    /// The provider's signature over the reasoning (it replaces any earlier one).
    Signature(String),
    /// A piece of a tool call's JSON arguments.
    InputJson(String),
}

/// One thing the router's stream said, in block terms.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Fallback(Fallback),
    Chosen {
        provider: String,
        model: String,
        fallbacks: u32,
    },
    Start {
        index: u32,
        start: Start,
    },
    Delta {
        index: u32,
        delta: Delta,
    },
    Stop {
        index: u32,
    },
    Usage(Usage),
    /// Always after the last block's `Stop`.
    Finish(FinishReason),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    Text,
    Reasoning,
    ToolUse,
}

/// Numbers the blocks of an answer as the router's events arrive: a block is opened when its
/// first piece comes, and closed when a piece of another kind (or the finish) comes, so at most
/// one block is open at a time and the indexes follow the order of the answer.
///
/// A provider that interleaves the arguments of parallel tool calls sends a piece for a call
/// whose block is already closed; it is reported against that block's index all the same (the
/// assembled answer is right; a stream then has a delta after that block's stop).
#[derive(Clone, Debug, Default)]
pub struct Blocks {
    open: Option<(u32, Open)>,
    next: u32,
    /// (the router's tool-call index, block index) of each tool call so far.
    calls: Vec<(u32, u32)>,
    last_reasoning: Option<u32>,
}

impl Blocks {
    fn close(&mut self, out: &mut Vec<Step>) {
        if let Some((index, _)) = self.open.take() {
            out.push(Step::Stop { index });
        }
    }

    fn start(&mut self, kind: Open, start: Start, out: &mut Vec<Step>) -> u32 {
        self.close(out);
        let index = self.next;
        self.next += 1;
        self.open = Some((index, kind));
        out.push(Step::Start { index, start });
        index
    }

    /// The open block of `kind`, opening one when the open block is of another kind.
    fn ensure(&mut self, kind: Open, start: fn() -> Start, out: &mut Vec<Step>) -> u32 {
        match self.open {
            Some((i, k)) if k == kind => i,
            _ => self.start(kind, start(), out),
        }
    }

    /// Translates one router event into steps.
    pub fn step(&mut self, ev: ChatEvent, out: &mut Vec<Step>) {
        match ev {
            ChatEvent::Fallback(f) => out.push(Step::Fallback(f)),
            ChatEvent::ProviderChosen {
                provider,
                model,
                fallbacks,
            } => out.push(Step::Chosen {
                provider,
                model,
                fallbacks,
            }),
            ChatEvent::TextDelta(text) if !text.is_empty() => {
                let index = self.ensure(Open::Text, || Start::Text, out);
                out.push(Step::Delta {
                    index,
                    delta: Delta::Text(text),
                });
            }
            ChatEvent::ReasoningDelta(text) if !text.is_empty() => {
                let index = self.ensure(Open::Reasoning, || Start::Reasoning, out);
                self.last_reasoning = Some(index);
                out.push(Step::Delta {
                    index,
                    delta: Delta::Reasoning(text),
                });
            }
            ChatEvent::ReasoningSignature(signature) => {
                let index = match (self.open, self.last_reasoning) {
                    (Some((i, Open::Reasoning)), _) | (_, Some(i)) => i,
                    _ => self.start(Open::Reasoning, Start::Reasoning, out),
                };
                self.last_reasoning = Some(index);
                out.push(Step::Delta {
                    index,
                    delta: Delta::Signature(signature),
                });
            }
            ChatEvent::ToolCallStart {
                index: call,
                id,
                name,
            } => {
                let index = self.start(Open::ToolUse, Start::ToolUse { id, name }, out);
                self.calls.push((call, index));
            }
            ChatEvent::ToolCallDelta {
                index: call,
                arguments,
            } if !arguments.is_empty() => match self.calls.iter().rev().find(|c| c.0 == call) {
                Some(&(_, index)) => out.push(Step::Delta {
                    index,
                    delta: Delta::InputJson(arguments),
                }),
                None => tracing::warn!(
                    call,
                    "tool-call arguments arrived before the call started; dropped"
                ),
            },
            ChatEvent::Usage(u) => out.push(Step::Usage(u)),
            ChatEvent::Finish(f) => {
                self.close(out);
                out.push(Step::Finish(f));
            }
            // Empty pieces open no block.
            ChatEvent::TextDelta(_)
            | ChatEvent::ReasoningDelta(_)
            | ChatEvent::ToolCallDelta { .. } => {}
        }
    }
}

/// A whole answer, assembled from a turn's events.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub provider: String,
    pub model: String,
    pub fallbacks: Vec<Fallback>,
    /// `Text`, `Reasoning` and `ToolUse` blocks, in the order the model produced them.
    pub blocks: Vec<ContentBlock>,
    pub usage: Usage,
    pub finish: FinishReason,
}

impl Answer {
    /// The text blocks, concatenated.
    pub fn text(&self) -> String {
        self.joined(|b| match b {
            ContentBlock::Text { text } => Some(text),
            _ => None,
        })
    }

    /// The reasoning blocks, concatenated.
    pub fn reasoning(&self) -> String {
        self.joined(|b| match b {
            ContentBlock::Reasoning { text, .. } => Some(text),
            _ => None,
        })
    }

    fn joined(&self, pick: impl Fn(&ContentBlock) -> Option<&String>) -> String {
        let mut out = String::new();
        for t in self.blocks.iter().filter_map(pick) {
            out.push_str(t);
        }
        out
    }

    /// The tool calls: (id, name, arguments as the model produced them).
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.blocks.iter().filter_map(|b| match b {
            ContentBlock::ToolUse {
                id,
                name,
                input_json,
            } => Some((id.as_str(), name.as_str(), input_json.as_str())),
            _ => None,
        })
    }
}

/// The error for a stream that ended without its finish.
pub fn ended_early() -> Error {
    Error::new(
        ErrorCode::UpstreamError,
        "the provider's answer ended before it was complete; retry the request",
    )
}

/// Folds a turn's events into an [`Answer`]: the one assembler of the front doors and the
/// executor. Reasoning is kept (with its signature); a stream that ends without `Finish` is an
/// error.
#[derive(Debug)]
pub struct Assembler {
    blocks: Blocks,
    steps: Vec<Step>,
    answer: Answer,
    finished: bool,
}

impl Default for Assembler {
    fn default() -> Self {
        Self {
            blocks: Blocks::default(),
            steps: Vec::new(),
            answer: Answer {
                provider: String::new(),
                model: String::new(),
                fallbacks: Vec::new(),
                blocks: Vec::new(),
                usage: Usage::default(),
                finish: FinishReason::Stop,
            },
            finished: false,
        }
    }
}

impl Assembler {
    /// Adds one event.
    pub fn push(&mut self, ev: ChatEvent) {
        self.blocks.step(ev, &mut self.steps);
        let a = &mut self.answer;
        for step in self.steps.drain(..) {
            match step {
                Step::Fallback(f) => a.fallbacks.push(f),
                Step::Chosen {
                    provider, model, ..
                } => {
                    a.provider = provider;
                    a.model = model;
                }
                Step::Start { start, .. } => a.blocks.push(match start {
                    Start::Text => ContentBlock::Text {
                        text: String::new(),
                    },
                    Start::Reasoning => ContentBlock::Reasoning {
                        text: String::new(),
                        signature: None,
                    },
                    Start::ToolUse { id, name } => ContentBlock::ToolUse {
                        id,
                        name,
                        input_json: String::new(),
                    },
                }),
                Step::Delta { index, delta } => {
                    let block = usize::try_from(index)
                        .ok()
                        .and_then(|i| a.blocks.get_mut(i));
                    match (block, delta) {
                        (Some(ContentBlock::Text { text: t }), Delta::Text(d))
                        | (Some(ContentBlock::Reasoning { text: t, .. }), Delta::Reasoning(d))
                        | (
                            Some(ContentBlock::ToolUse { input_json: t, .. }),
                            Delta::InputJson(d),
                        ) => {
                            t.push_str(&d);
                        }
                        (Some(ContentBlock::Reasoning { signature, .. }), Delta::Signature(s)) => {
                            *signature = Some(s);
                        }
                        _ => {}
                    }
                }
                Step::Stop { .. } => {}
                Step::Usage(u) => a.usage = u,
                Step::Finish(f) => {
                    a.finish = f;
                    self.finished = true;
                }
            }
        }
    }

    /// Whether the turn's `Finish` has arrived.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The answer so far (the provider, once chosen, and the blocks up to now).
    pub fn answer(&self) -> &Answer {
        &self.answer
    }

    /// The whole answer; an error when the stream ended before its `Finish`.
    pub fn finish(self) -> Result<Answer, Error> {
        if self.finished {
            Ok(self.answer)
        } else {
            Err(ended_early())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Fallback(_) => "fallback".into(),
                Step::Chosen { .. } => "chosen".into(),
                Step::Start { index, start } => format!(
                    "start {index} {}",
                    match start {
                        Start::Text => "text",
                        Start::Reasoning => "reasoning",
                        Start::ToolUse { .. } => "tool_use",
                    }
                ),
                Step::Delta { index, .. } => format!("delta {index}"),
                Step::Stop { index } => format!("stop {index}"),
                Step::Usage(_) => "usage".into(),
                Step::Finish(_) => "finish".into(),
            })
            .collect()
    }

    fn turn() -> Vec<ChatEvent> {
        vec![
            ChatEvent::ProviderChosen {
                provider: "p".into(),
                model: "m".into(),
                fallbacks: 0,
            },
            ChatEvent::ReasoningDelta("hm".into()),
            ChatEvent::ReasoningSignature("sig".into()),
            ChatEvent::TextDelta(String::new()),
            ChatEvent::TextDelta("a".into()),
            ChatEvent::TextDelta("b".into()),
            ChatEvent::ToolCallStart {
                index: 0,
                id: "c0".into(),
                name: "f".into(),
            },
            ChatEvent::ToolCallDelta {
                index: 0,
                arguments: "{}".into(),
            },
            ChatEvent::ToolCallStart {
                index: 1,
                id: "c1".into(),
                name: "g".into(),
            },
            ChatEvent::ToolCallDelta {
                index: 0,
                arguments: " ".into(),
            },
            ChatEvent::Usage(Usage::new(3, 4)),
            ChatEvent::Finish(FinishReason::ToolCalls),
        ]
    }

    #[test]
    fn blocks_open_and_close_in_order() {
        let mut m = Blocks::default();
        let mut out = Vec::new();
        for e in turn() {
            m.step(e, &mut out);
        }
        assert_eq!(
            shape(&out),
            [
                "chosen",
                "start 0 reasoning",
                "delta 0",
                "delta 0",
                "stop 0",
                "start 1 text",
                "delta 1",
                "delta 1",
                "stop 1",
                "start 2 tool_use",
                "delta 2",
                "stop 2",
                "start 3 tool_use",
                // A late piece of call 0 still goes to its block.
                "delta 2",
                "usage",
                "stop 3",
                "finish",
            ]
        );
    }

    #[test]
    fn the_assembler_keeps_reasoning_and_calls_in_order() {
        let mut a = Assembler::default();
        for e in turn() {
            a.push(e);
        }
        let answer = a.finish().unwrap();
        assert_eq!(answer.provider, "p");
        assert_eq!(answer.text(), "ab");
        assert_eq!(answer.reasoning(), "hm");
        assert_eq!(
            answer.blocks[0],
            ContentBlock::Reasoning {
                text: "hm".into(),
                signature: Some("sig".into())
            }
        );
        assert_eq!(
            answer.tool_calls().collect::<Vec<_>>(),
            [("c0", "f", "{} "), ("c1", "g", "")]
        );
        assert_eq!(answer.usage, Usage::new(3, 4));
        assert_eq!(answer.finish, FinishReason::ToolCalls);
    }

    #[test]
    fn a_stream_without_its_finish_is_an_error() {
        let mut a = Assembler::default();
        for e in turn().into_iter().take(6) {
            a.push(e);
        }
        assert!(!a.finished());
        assert_eq!(a.answer().text(), "ab");
        assert_eq!(a.finish().unwrap_err().code, ErrorCode::UpstreamError);
    }
}
