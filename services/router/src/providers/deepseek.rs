//! The `deepseek` driver: DeepSeek's OpenAI-compatible chat completions (`POST
//! {base}/chat/completions`, bearer key). The translation and the stream fold are the `openai`
//! driver's in its DeepSeek [`Flavor`]; this module adds what DeepSeek does differently:
//!
//! - `reasoning_content` in answers and stream deltas becomes reasoning (the shared fold reads it),
//!   and `prompt_cache_hit_tokens` becomes `cache_read_tokens` (already inside `prompt_tokens`).
//! - `content` is always a string on assistant and tool messages, even when empty: DeepSeek
//!   rejects a missing or null one.
//! - Reasoning goes back upstream only where DeepSeek wants it (see [`reasoning_to_send`]).
//! - Parameters DeepSeek would drop silently are refused: sampling knobs in thinking mode, `seed`,
//!   `response_format` `json_schema`, and image inputs. `user` changes nothing and is not sent.
//! - No embeddings API: [`super::Driver::embed`] refuses for this kind.

use weft_config::HttpProviderConfig;
use weft_core::message::{ContentBlock, Message, Role};

#[cfg(test)]
use serde_json::Value;

use super::http::{KeyStyle, Upstream};
use super::openai::{Flavor, chat_request_as, send_chat};
use super::{EventStream, ProviderError, Unsupported};
use crate::types::ChatRequest;

/// Every conformance case passes.
pub const UNSUPPORTED: &[Unsupported] = &[];

const KIND: &str = "deepseek";

pub struct DeepSeekProvider {
    up: Upstream,
    chat_url: reqwest::Url,
}

impl DeepSeekProvider {
    /// Builds the driver and its connection pool. Fails when `api_key_env` names an unset
    /// variable.
    pub fn new(name: &str, cfg: &HttpProviderConfig) -> Result<Self, String> {
        let up = Upstream::new(name, cfg, KeyStyle::Bearer, &[])?;
        let chat_url = up.endpoint("/chat/completions")?;
        Ok(Self { up, chat_url })
    }

    pub async fn chat(&self, model: &str, req: &ChatRequest) -> Result<EventStream, ProviderError> {
        let send_reasoning = reasoning_to_send(&req.messages);
        let body = chat_request(model, req, &send_reasoning)?;
        send_chat(&self.up, &self.chat_url, &body, req.stream).await
    }
}

/// The DeepSeek request body for one turn, sending back the reasoning of the messages
/// `send_reasoning` marks ([`reasoning_to_send`]), or the refusal of a parameter DeepSeek cannot
/// honour.
pub(crate) fn chat_request<'a>(
    model: &'a str,
    req: &'a ChatRequest,
    send_reasoning: &'a [bool],
) -> Result<weft_wire::openai::ChatRequest<'a>, ProviderError> {
    refuse_unsupported(model, req)?;
    Ok(chat_request_as(
        Flavor::DeepSeek { send_reasoning },
        model,
        req,
    ))
}

/// The DeepSeek request body for one turn as JSON, or the refusal of a parameter it cannot
/// honour (for tests and the fuzz targets; a call sends the typed body).
pub(crate) fn chat_body(
    model: &str,
    req: &ChatRequest,
) -> Result<serde_json::Value, ProviderError> {
    let send_reasoning = reasoning_to_send(&req.messages);
    let body = chat_request(model, req, &send_reasoning)?;
    Ok(serde_json::to_value(body).unwrap_or(serde_json::Value::Null))
}

/// Whether the turn runs in DeepSeek's thinking mode: `deepseek-reasoner`, or thinking turned on
/// explicitly (`"thinking": {"type": "enabled"}`).
fn thinking(model: &str, req: &ChatRequest) -> bool {
    match req
        .extra
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(serde_json::Value::as_str)
    {
        Some(t) => t == "enabled",
        None => model.contains("reasoner"),
    }
}

/// Refuses what DeepSeek would silently ignore or cannot do, before anything is sent.
fn refuse_unsupported(model: &str, req: &ChatRequest) -> Result<(), ProviderError> {
    let s = &req.sampling;
    if s.seed.is_some() {
        return Err(ProviderError::unsupported(
            KIND,
            "seed",
            "deepseek has no seeded sampling; remove `seed`",
        ));
    }
    if thinking(model, req) {
        let ignored = [
            ("temperature", s.temperature.is_some()),
            ("top_p", s.top_p.is_some()),
            ("presence_penalty", s.presence_penalty.is_some()),
            ("frequency_penalty", s.frequency_penalty.is_some()),
        ];
        if let Some((param, _)) = ignored.iter().find(|(_, set)| *set) {
            return Err(ProviderError::unsupported(
                KIND,
                param,
                "deepseek's thinking mode (deepseek-reasoner) ignores it; remove it, or use a non-thinking model such as deepseek-chat",
            ));
        }
    }
    if let Some(rf) = &req.response_format {
        match rf.get("type").and_then(serde_json::Value::as_str) {
            Some("text" | "json_object") => {}
            _ => {
                return Err(ProviderError::unsupported(
                    KIND,
                    "response_format",
                    "deepseek supports only {\"type\": \"json_object\"}; use it and describe the schema in the prompt",
                ));
            }
        }
    }
    let has_image = req.messages.iter().any(|m| {
        m.content
            .iter()
            .any(|b| matches!(b, ContentBlock::Image { .. }))
    });
    if has_image {
        return Err(ProviderError::unsupported(
            KIND,
            "image_url",
            "deepseek's chat models take text only; route images to a vision-capable provider",
        ));
    }
    Ok(())
}

/// For each message, whether its reasoning is sent back as `reasoning_content`.
///
/// DeepSeek's thinking mode splits a conversation into user turns (the messages from one user
/// message to the next). In a turn without tool calls, earlier reasoning is not part of the
/// context: the old `deepseek-reasoner` answered 400 to it, newer models ignore it. In a turn
/// that made tool calls, the reasoning of its assistant messages must come back, during the tool
/// loop and in every later request, or DeepSeek answers 400. So: reasoning is sent for the
/// assistant messages of the current turn (after the last user message) and of every earlier turn
/// that called a tool, and dropped elsewhere.
pub(crate) fn reasoning_to_send(messages: &[Message]) -> Vec<bool> {
    let mut send = vec![false; messages.len()];
    let user_at = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User)
        .map(|(i, _)| i);
    let last_user = messages.iter().rposition(|m| m.role == Role::User);
    let mut start = 0;
    for end in user_at.chain(std::iter::once(messages.len())) {
        let turn = start..end;
        let current = last_user.is_none_or(|u| start > u);
        let called_tools = messages[turn.clone()].iter().any(|m| {
            m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolUse { .. }))
        });
        if current || called_tools {
            send[turn].fill(true);
        }
        start = end + 1;
    }
    send
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use weft_core::{Error, ErrorCode};

    use super::*;
    use crate::providers::testing::msg;
    use crate::types::Sampling;

    fn reasoning(text: &str) -> ContentBlock {
        ContentBlock::Reasoning {
            text: text.into(),
            signature: None,
        }
    }

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "get_weather".into(),
            input_json: r#"{"city":"Paris"}"#.into(),
        }
    }

    fn result(id: &str) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: vec![],
            is_error: false,
        }
    }

    fn refusal(model: &str, req: &ChatRequest) -> Error {
        chat_body(model, req).expect_err("refused").error
    }

    #[test]
    fn tool_and_assistant_messages_always_carry_string_content() {
        let req = ChatRequest {
            messages: vec![
                msg(Role::Developer, vec![ContentBlock::text("be brief")]),
                msg(Role::User, vec![ContentBlock::text("weather?")]),
                msg(Role::Assistant, vec![call("call.1/x")]),
                msg(Role::Tool, vec![result("call.1/x")]),
            ],
            user: Some("u-1".into()),
            ..Default::default()
        };
        let b = chat_body("deepseek-chat", &req).expect("body");
        let m = &b["messages"];
        assert_eq!(m[0]["role"], "system", "deepseek has no developer role");
        assert_eq!(m[2]["content"], "", "never null on an assistant tool call");
        assert_eq!(m[3]["content"], "", "never absent on a tool result");
        let id = super::super::tool_call_id("call.1/x");
        assert_eq!(m[2]["tool_calls"][0]["id"], id.as_ref());
        assert_eq!(m[3]["tool_call_id"], id.as_ref());
        assert!(b.get("user").is_none());
        assert!(!b.to_string().contains("call.1/x"));
    }

    #[test]
    fn reasoning_goes_back_for_tool_turns_and_the_current_turn_only() {
        let messages = vec![
            msg(Role::System, vec![ContentBlock::text("s")]),
            // Turn 1: a plain answer; its reasoning stays out of the context.
            msg(Role::User, vec![ContentBlock::text("hi")]),
            msg(
                Role::Assistant,
                vec![reasoning("r1"), ContentBlock::text("hello")],
            ),
            // Turn 2: a tool loop; its reasoning must come back in every later request.
            msg(Role::User, vec![ContentBlock::text("weather?")]),
            msg(Role::Assistant, vec![reasoning("r2"), call("c1")]),
            msg(Role::Tool, vec![result("c1")]),
            msg(
                Role::Assistant,
                vec![reasoning("r3"), ContentBlock::text("sunny")],
            ),
            // Turn 3, current: a tool loop in progress.
            msg(Role::User, vec![ContentBlock::text("and tomorrow?")]),
            msg(Role::Assistant, vec![reasoning("r4"), call("c2")]),
            msg(Role::Tool, vec![result("c2")]),
        ];
        let send = reasoning_to_send(&messages);
        // User messages themselves carry no reasoning and are never marked.
        assert_eq!(
            send,
            [
                false, false, false, false, true, true, true, false, true, true
            ]
        );
        let req = ChatRequest {
            messages,
            ..Default::default()
        };
        let b = chat_body("deepseek-reasoner", &req).expect("body");
        let m = &b["messages"];
        assert!(m[2].get("reasoning_content").is_none());
        assert_eq!(m[2]["content"], "hello");
        assert_eq!(m[4]["reasoning_content"], "r2");
        assert_eq!(m[6]["reasoning_content"], "r3");
        assert_eq!(m[8]["reasoning_content"], "r4");
        assert!(m[0].get("reasoning_content").is_none() && m[5].get("reasoning_content").is_none());
    }

    #[test]
    fn silently_ignored_parameters_are_refused() {
        let with = |sampling: Sampling| ChatRequest {
            sampling,
            ..Default::default()
        };
        let e = refusal(
            "deepseek-chat",
            &with(Sampling {
                seed: Some(1),
                ..Default::default()
            }),
        );
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert!(e.message.contains("`seed`"), "{}", e.message);
        let hot = with(Sampling {
            temperature: Some(0.2),
            ..Default::default()
        });
        assert!(
            refusal("deepseek-reasoner", &hot)
                .message
                .contains("`temperature`")
        );
        assert!(
            chat_body("deepseek-chat", &hot).is_ok(),
            "honoured outside thinking mode"
        );
        let mut thinking_chat = hot.clone();
        thinking_chat
            .extra
            .insert("thinking".into(), json!({"type": "enabled"}));
        assert!(chat_body("deepseek-chat", &thinking_chat).is_err());
        let top_p = with(Sampling {
            top_p: Some(0.9),
            ..Default::default()
        });
        assert!(
            refusal("deepseek-reasoner", &top_p)
                .message
                .contains("`top_p`")
        );
    }

    #[test]
    fn json_object_passes_and_json_schema_is_refused() {
        let rf = |v: Value| ChatRequest {
            response_format: Some(v),
            ..Default::default()
        };
        let b = chat_body("deepseek-chat", &rf(json!({"type": "json_object"}))).expect("body");
        assert_eq!(b["response_format"]["type"], "json_object");
        let e = refusal(
            "deepseek-chat",
            &rf(json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {}}})),
        );
        assert!(e.message.contains("json_object"), "{}", e.message);
    }

    #[test]
    fn images_are_refused() {
        let req = ChatRequest {
            messages: vec![msg(
                Role::User,
                vec![ContentBlock::Image {
                    url: "https://example.com/a.png".into(),
                    detail: None,
                }],
            )],
            ..Default::default()
        };
        assert!(refusal("deepseek-chat", &req).message.contains("image"));
    }

    #[test]
    fn streams_ask_for_usage() {
        let req = ChatRequest {
            stream: true,
            ..Default::default()
        };
        let b = chat_body("deepseek-chat", &req).expect("body");
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
    }
}
