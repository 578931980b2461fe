//! The router's gRPC face: converts prost types to domain types at the edge and back.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt as _};
use tonic::{Request, Response, Status};
use tracing::Instrument as _;
use weft_core::{Error, Principal};
use weft_proto::router_api::{ChatReply, DirectRouter};
use weft_proto::v1;

use crate::routing::Routing;
use crate::types::{ChatEvent, ChatRequest, EmbedRequest, Sampling};

pub struct RouterService {
    routing: Arc<Routing>,
}

impl RouterService {
    pub fn new(routing: Arc<Routing>) -> Self {
        Self { routing }
    }
}

fn principal<T>(req: &Request<T>) -> Result<Principal, Status> {
    req.extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| Status::from(Error::unauthenticated("missing internal token")))
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn json_field(s: &str, field: &str) -> Result<Option<serde_json::Value>, Error> {
    if s.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(s)
        .map(Some)
        .map_err(|_| Error::invalid(format!("`{field}` is not valid JSON")).with_param(field))
}

/// The domain request for a proto request.
pub fn chat_request_from_proto(r: v1::ChatRequest) -> Result<ChatRequest, Error> {
    let mut messages = Vec::with_capacity(r.messages.len());
    for (i, m) in r.messages.into_iter().enumerate() {
        messages.push(weft_proto::message_from_proto(m).ok_or_else(|| {
            Error::invalid(format!("messages[{i}].role is missing"))
                .with_param(format!("messages[{i}].role"))
        })?);
    }
    let extra = match json_field(&r.extra_json, "extra")? {
        Some(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let s = r.sampling.unwrap_or_default();
    Ok(ChatRequest {
        tool_choice: json_field(&r.tool_choice_json, "tool_choice")?,
        response_format: json_field(&r.response_format_json, "response_format")?,
        model: r.model,
        messages,
        tools: r
            .tools
            .into_iter()
            .map(weft_proto::tool_from_proto)
            .collect(),
        sampling: Sampling {
            temperature: s.temperature,
            top_p: s.top_p,
            max_tokens: s.max_tokens,
            stop: s.stop,
            seed: s.seed,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
        },
        user: non_empty(r.user),
        extra,
        provider_hint: r.provider_hint,
        tier_hint: r.tier_hint,
        stream: r.stream,
    })
}

/// The proto event for a domain event.
pub fn event_to_proto(e: ChatEvent) -> v1::ChatEvent {
    use v1::chat_event::Event;
    let event = match e {
        ChatEvent::ProviderChosen {
            provider,
            model,
            fallbacks,
        } => Event::ProviderChosen(v1::ProviderChosen {
            provider,
            model,
            fallbacks,
        }),
        ChatEvent::TextDelta(text) => Event::TextDelta(v1::TextDelta { text }),
        ChatEvent::ReasoningDelta(text) => Event::ReasoningDelta(v1::ReasoningDelta { text }),
        ChatEvent::ReasoningSignature(signature) => {
            Event::ReasoningSignature(v1::ReasoningSignature { signature })
        }
        ChatEvent::Fallback {
            provider,
            model,
            code,
            message,
        } => Event::ProviderFallback(v1::ProviderFallback {
            provider,
            model,
            code,
            message,
        }),
        ChatEvent::ToolCallStart { index, id, name } => {
            Event::ToolCallStart(v1::ToolCallStart { index, id, name })
        }
        ChatEvent::ToolCallDelta { index, arguments } => {
            Event::ToolCallDelta(v1::ToolCallDelta { index, arguments })
        }
        ChatEvent::Usage(u) => Event::Usage(weft_proto::usage_to_proto(u)),
        ChatEvent::Finish(f) => Event::Finish(v1::Finish {
            reason: weft_proto::finish_to_proto(f) as i32,
        }),
    };
    v1::ChatEvent { event: Some(event) }
}

type ChatStream = Pin<Box<dyn Stream<Item = Result<v1::ChatEvent, Status>> + Send>>;

fn chat_span(p: &Principal) -> tracing::Span {
    tracing::info_span!("router.chat", tenant = %p.tenant, model = tracing::field::Empty)
}

/// One chat call for `p`, as both faces serve it: the gRPC service (after its JWT check) and
/// the in-process [`Direct`] router.
async fn accept_chat(
    routing: &Arc<Routing>,
    p: &Principal,
    req: v1::ChatRequest,
    span: tracing::Span,
) -> Result<ChatReply, Error> {
    let req = chat_request_from_proto(req)?;
    span.record("model", req.model.as_str());
    let accepted = routing.chat_as(p, req).instrument(span).await?;
    Ok(ChatReply {
        events: Box::pin(accepted.events.map(|r| r.map(event_to_proto))),
        headers: accepted.headers,
    })
}

/// The router for a caller in the same process (`weft up`'s gateway): no protobuf encoding,
/// no JWT, no HTTP/2; the same routing, limits and accounting as the gRPC service.
pub struct Direct {
    routing: Arc<Routing>,
}

impl Direct {
    pub fn new(routing: Arc<Routing>) -> Self {
        Self { routing }
    }
}

impl DirectRouter for Direct {
    fn chat<'a>(
        &'a self,
        p: &'a Principal,
        req: v1::ChatRequest,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<ChatReply, Error>> + Send + 'a>> {
        // A child of the caller's current span, as the gRPC face's is of the caller's context.
        let span = chat_span(p);
        Box::pin(accept_chat(&self.routing, p, req, span))
    }
}

#[tonic::async_trait]
impl v1::router_server::Router for RouterService {
    type ChatStream = ChatStream;

    async fn chat(
        &self,
        request: Request<v1::ChatRequest>,
    ) -> Result<Response<ChatStream>, Status> {
        let p = principal(&request)?;
        let span = chat_span(&p);
        weft_telemetry::adopt_trace_context(&span, request.metadata());
        let reply = accept_chat(&self.routing, &p, request.into_inner(), span).await?;
        let mut resp =
            Response::new(Box::pin(reply.events.map(|r| r.map_err(Status::from))) as ChatStream);
        for (name, value) in reply.headers {
            if let Ok(v) = value.parse() {
                resp.metadata_mut().insert(name, v);
            }
        }
        Ok(resp)
    }

    async fn embed(
        &self,
        request: Request<v1::EmbedRequest>,
    ) -> Result<Response<v1::EmbedResponse>, Status> {
        let p = principal(&request)?;
        let span = tracing::info_span!("router.embed", tenant = %p.tenant);
        weft_telemetry::adopt_trace_context(&span, request.metadata());
        let r = request.into_inner();
        let req = EmbedRequest {
            model: r.model,
            input: r.input,
            dimensions: r.dimensions,
            user: non_empty(r.user),
            provider_hint: r.provider_hint,
            tier_hint: r.tier_hint,
        };
        let (res, headers) = self.routing.embed_as(&p, &req).instrument(span).await?;
        let mut resp = Response::new(v1::EmbedResponse {
            provider: res.provider,
            model: res.model,
            data: res
                .vectors
                .into_iter()
                .map(|values| v1::Embedding { values })
                .collect(),
            usage: Some(weft_proto::usage_to_proto(res.usage)),
        });
        for (name, value) in headers {
            if let Ok(v) = value.parse() {
                resp.metadata_mut().insert(name, v);
            }
        }
        Ok(resp)
    }

    async fn list_models(
        &self,
        request: Request<v1::ListModelsRequest>,
    ) -> Result<Response<v1::ListModelsResponse>, Status> {
        let p = principal(&request)?;
        let models = self
            .routing
            .list_models_for(p.tenant.as_str())
            .into_iter()
            .map(|m| v1::ModelInfo {
                id: m.id,
                kind: m.kind.to_owned(),
                owned_by: m.owned_by,
            })
            .collect();
        Ok(Response::new(v1::ListModelsResponse { models }))
    }
}
