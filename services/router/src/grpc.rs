//! The router's gRPC face: converts prost types to domain types at the edge and back.

use std::pin::Pin;
use std::sync::Arc;
use weft_auth::rpc::caller;

use futures::{Stream, StreamExt as _};
use tonic::{Request, Response, Status};
use tracing::Instrument as _;
use weft_core::{Error, Principal};
use weft_proto::router_api::{ChatReply, DirectRouter};
use weft_proto::v1;

use crate::routing::Routing;
use crate::types::ChatRequest;

pub struct RouterService {
    routing: Arc<Routing>,
}

impl RouterService {
    pub fn new(routing: Arc<Routing>) -> Self {
        Self { routing }
    }
}

type ChatStream = Pin<Box<dyn Stream<Item = Result<v1::ChatEvent, Status>> + Send>>;

fn chat_span(p: &Principal) -> tracing::Span {
    tracing::info_span!(target: weft_telemetry::REQUEST_SPANS, "router.chat", tenant = %p.tenant, model = tracing::field::Empty)
}

/// One chat call for `p`, as both faces serve it: the gRPC service (after its JWT check) and
/// the in-process [`Direct`] router.
async fn accept_chat(
    routing: &Arc<Routing>,
    p: &Principal,
    req: ChatRequest,
    span: tracing::Span,
) -> Result<ChatReply, Error> {
    span.record("model", req.model.as_str());
    let accepted = routing.chat_as(p, req).instrument(span).await?;
    Ok(ChatReply {
        events: Box::pin(accepted.events),
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
        req: ChatRequest,
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
        let p = caller(&request)?;
        let span = chat_span(&p);
        weft_telemetry::adopt_trace_context(&span, request.metadata());
        let req = weft_proto::chat_request_from_proto(request.into_inner())?;
        let reply = accept_chat(&self.routing, &p, req, span).await?;
        let events = reply
            .events
            .map(|r| r.map(weft_proto::event_to_proto).map_err(Status::from));
        let mut resp = Response::new(Box::pin(events) as ChatStream);
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
        let p = caller(&request)?;
        let span = tracing::info_span!(target: weft_telemetry::REQUEST_SPANS, "router.embed", tenant = %p.tenant);
        weft_telemetry::adopt_trace_context(&span, request.metadata());
        let req = weft_proto::embed_request_from_proto(request.into_inner());
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
        let p = caller(&request)?;
        let asked = request.get_ref().model.clone();
        if !asked.is_empty() {
            let window = self
                .routing
                .context_window(Some(p.tenant.as_str()), &asked)
                .map_err(Status::from)?;
            let kind = if asked.starts_with("tier:") {
                "tier"
            } else {
                "model"
            };
            return Ok(Response::new(v1::ListModelsResponse {
                models: vec![v1::ModelInfo {
                    id: asked,
                    kind: kind.to_owned(),
                    owned_by: String::new(),
                    context_window: window.unwrap_or(0),
                }],
            }));
        }
        let models = self
            .routing
            .list_models_for(p.tenant.as_str())
            .into_iter()
            .map(|m| v1::ModelInfo {
                id: m.id,
                kind: m.kind.to_owned(),
                owned_by: m.owned_by,
                context_window: 0,
            })
            .collect();
        Ok(Response::new(v1::ListModelsResponse { models }))
    }
}
