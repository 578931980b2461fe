//! The public gRPC API (`weft.public.v1.Runs`), on `gateway.grpc_listen` when set, with the
//! standard health service (`grpc.health.v1.Health`, SERVING when the gateway's `/readyz` is 200).
//!
//! Each call is the REST route it names, called in-process on the gateway's own API router with
//! the caller's `authorization` metadata (and W3C trace context) as its headers: the same
//! handlers, checks, limits and errors as REST, by construction. Answers are the REST JSON, typed
//! into the proto's messages (and kept whole in their `json` field); a REST error becomes the gRPC
//! status of its code, with the REST message, `weft-error-code` and (for a 429/503)
//! `retry-after` metadata.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;

use axum::body::Body;
use futures::{Stream, StreamExt as _};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tower::ServiceExt as _;
use weft_core::ErrorCode;
use weft_proto::public::v1 as pb;

/// The `Runs` service over the gateway's API router.
#[derive(Clone)]
pub struct PublicRuns {
    api: axum::Router,
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;

/// Serves `weft.public.v1` and server reflection on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    api: axum::Router,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    // Reflection in both versions clients speak (grpcurl and grpc-java v1, grpcio's own v1alpha).
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
    };
    let v1 = reflection().build_v1();
    let v1alpha = reflection().build_v1alpha();
    // The health service says what the gateway's own `/readyz` says.
    let health = weft_telemetry::health::Readiness::new(shutdown.clone());
    let probe = api.clone();
    health.check("gateway", move || {
        let req = http::Request::builder().uri("/readyz").body(Body::empty());
        let api = probe.clone();
        async move {
            match req {
                Ok(req) => api
                    .oneshot(req)
                    .await
                    .is_ok_and(|r| r.status().is_success()),
                Err(_) => false,
            }
        }
    });
    health.set_started();
    let health = health.grpc(&[pb::runs_server::SERVICE_NAME]).await;
    let mut server = tonic::transport::Server::builder();
    let mut router = server
        .add_service(pb::runs_server::RunsServer::new(PublicRuns { api }))
        .add_service(health);
    match (v1, v1alpha) {
        (Ok(v1), Ok(v1alpha)) => router = router.add_service(v1).add_service(v1alpha),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "gRPC reflection could not be built")
        }
    }
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(?addr, "public gRPC API serving");
    // Small streamed events go out at once.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    router
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
        .await
}

impl PublicRuns {
    /// Calls `method path` on the API router as the caller of `md`, and reads the answer.
    async fn call(
        &self,
        md: &tonic::metadata::MetadataMap,
        method: http::Method,
        path: String,
        body: Option<Value>,
        sse: bool,
    ) -> Result<http::Response<Body>, Status> {
        let mut req = http::Request::builder().method(method).uri(path);
        // The caller's W3C trace context too: the route's `http` span joins the caller's trace.
        for name in ["authorization", "x-request-id", "traceparent", "tracestate"] {
            if let Some(v) = md.get(name)
                && let Ok(v) = http::HeaderValue::from_bytes(v.as_bytes())
            {
                req = req.header(name, v);
            }
        }
        if sse {
            req = req.header(http::header::ACCEPT, "text/event-stream");
        }
        let body = match body {
            Some(v) => {
                req = req.header(http::header::CONTENT_TYPE, "application/json");
                Body::from(v.to_string())
            }
            None => Body::empty(),
        };
        let req = req
            .body(body)
            .map_err(|e| Status::invalid_argument(format!("bad request: {e}")))?;
        let Ok(resp) = self.api.clone().oneshot(req).await;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .unwrap_or_default();
        Err(status_of(parts.status, &parts.headers, &bytes))
    }

    async fn json(
        &self,
        md: &tonic::metadata::MetadataMap,
        method: http::Method,
        path: String,
        body: Option<Value>,
    ) -> Result<Value, Status> {
        let resp = self.call(md, method, path, body, false).await?;
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .map_err(|e| Status::internal(format!("reading the answer failed: {e}")))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Status::internal(format!("the answer is not JSON: {e}")))
    }

    async fn run(
        &self,
        md: &tonic::metadata::MetadataMap,
        method: http::Method,
        path: String,
        body: Option<Value>,
    ) -> Result<Response<pb::Run>, Status> {
        self.json(md, method, path, body)
            .await
            .map(|v| Response::new(run_of(v)))
    }
}

#[tonic::async_trait]
impl pb::runs_server::Runs for PublicRuns {
    async fn create_run(
        &self,
        req: Request<pb::CreateRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let body = create_body(req.get_ref());
        self.run(
            req.metadata(),
            http::Method::POST,
            "/v1/runs".into(),
            Some(body),
        )
        .await
    }

    async fn get_run(&self, req: Request<pb::GetRunRequest>) -> Result<Response<pb::Run>, Status> {
        let path = format!("/v1/runs/{}", segment(&req.get_ref().run_id)?);
        self.run(req.metadata(), http::Method::GET, path, None)
            .await
    }

    async fn list_runs(
        &self,
        req: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let query = list_query(req.get_ref());
        let v = self
            .json(
                req.metadata(),
                http::Method::GET,
                format!("/v1/runs?{query}"),
                None,
            )
            .await?;
        let runs = match v.get("data") {
            Some(Value::Array(a)) => a.iter().cloned().map(run_of).collect(),
            _ => Vec::new(),
        };
        Ok(Response::new(pb::ListRunsResponse {
            runs,
            next_cursor: str_of(&v, "next_cursor").unwrap_or_default(),
        }))
    }

    type StreamEventsStream = EventStream;

    async fn stream_events(
        &self,
        req: Request<pb::StreamEventsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let r = req.get_ref();
        let path = format!(
            "/v1/runs/{}/stream?from_seq={}",
            segment(&r.run_id)?,
            r.from_seq.max(1)
        );
        let resp = self
            .call(req.metadata(), http::Method::GET, path, None, true)
            .await?;
        Ok(Response::new(sse_events(resp.into_body())))
    }

    async fn cancel_run(
        &self,
        req: Request<pb::CancelRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let r = req.get_ref();
        let path = format!("/v1/runs/{}/cancel", segment(&r.run_id)?);
        let body = r.reason.as_ref().map(|reason| json!({"reason": reason}));
        self.run(req.metadata(), http::Method::POST, path, body)
            .await
    }

    async fn send_input(
        &self,
        req: Request<pb::SendInputRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let r = req.get_ref();
        let path = format!("/v1/runs/{}/input", segment(&r.run_id)?);
        let body = json!({"text": r.text});
        self.run(req.metadata(), http::Method::POST, path, Some(body))
            .await
    }

    async fn answer_interrupt(
        &self,
        req: Request<pb::AnswerInterruptRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let r = req.get_ref();
        let path = format!(
            "/v1/runs/{}/interrupts/{}",
            segment(&r.run_id)?,
            segment(&r.interrupt_id)?
        );
        let body = json!({"answer": r.answer});
        self.run(req.metadata(), http::Method::POST, path, Some(body))
            .await
    }
}

/// The query of `GET /v1/runs` for `r`: only the filters it sets.
fn list_query(r: &pb::ListRunsRequest) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in [
        ("status", &r.status),
        ("agent", &r.agent),
        ("since", &r.since),
        ("cursor", &r.cursor),
    ] {
        if !v.is_empty() {
            q.append_pair(k, v);
        }
    }
    if r.limit != 0 {
        q.append_pair("limit", &r.limit.to_string());
    }
    q.finish()
}

/// An id as one path segment, percent-encoded so it can never reach another route; an empty
/// id or a dot segment is refused.
fn segment(id: &str) -> Result<String, Status> {
    if id.is_empty() {
        return Err(Status::invalid_argument(
            "the id is empty; give the run's (or the interruption's) id",
        ));
    }
    weft_mcp_face::seg(id).map_err(Status::invalid_argument)
}

/// The `POST /v1/runs` body of a typed request: only what the caller set, so the REST defaults
/// and checks apply unchanged.
fn create_body(r: &pb::CreateRunRequest) -> Value {
    let mut b = serde_json::Map::new();
    b.insert("agent".into(), json!(r.agent));
    if let Some(i) = &r.input {
        b.insert("input".into(), json!(i));
    }
    if !r.messages.is_empty() {
        let m: Vec<Value> = r
            .messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        b.insert("messages".into(), Value::Array(m));
    }
    if let Some(t) = &r.tools {
        b.insert("tools".into(), json!(t.values));
    }
    if let Some(h) = &r.allowed_hosts {
        b.insert("allowed_hosts".into(), json!(h.values));
    }
    if r.interactive {
        b.insert("interactive".into(), json!(true));
    }
    if let Some(n) = r.max_iterations {
        b.insert("max_iterations".into(), json!(n));
    }
    if let Some(m) = &r.metadata {
        b.insert("metadata".into(), struct_to_json(m));
    }
    if let Some(s) = &r.sampling {
        let mut o = serde_json::Map::new();
        if let Some(t) = s.temperature {
            o.insert("temperature".into(), json!(t));
        }
        if let Some(p) = s.top_p {
            o.insert("top_p".into(), json!(p));
        }
        if let Some(seed) = s.seed {
            o.insert("seed".into(), json!(seed));
        }
        if !s.stop.is_empty() {
            o.insert("stop".into(), json!(s.stop));
        }
        b.insert("sampling".into(), Value::Object(o));
    }
    if let Some(k) = &r.idempotency_key {
        b.insert("idempotency_key".into(), json!(k));
    }
    if !r.credentials.is_empty() {
        let c: BTreeMap<_, _> = r.credentials.iter().collect();
        b.insert("credentials".into(), json!(c));
    }
    if let Some(m) = &r.mode {
        b.insert("mode".into(), json!(m));
    }
    if let Some(c) = &r.compaction {
        b.insert("compaction".into(), struct_to_json(c));
    }
    if let Some(p) = &r.plan {
        b.insert("plan".into(), struct_to_json(p));
    }
    if let Some(v) = &r.volumes {
        let list: Vec<Value> = v
            .values
            .iter()
            .map(|v| {
                let mut o = serde_json::Map::new();
                o.insert("name".into(), json!(v.name));
                if !v.mode.is_empty() {
                    o.insert("mode".into(), json!(v.mode));
                }
                if v.default {
                    o.insert("default".into(), json!(true));
                }
                Value::Object(o)
            })
            .collect();
        b.insert("volumes".into(), Value::Array(list));
    }
    Value::Object(b)
}

/// A REST run, typed.
fn run_of(v: Value) -> pb::Run {
    let status = match v.get("status").and_then(Value::as_str) {
        Some("queued") => pb::RunStatus::Queued,
        Some("running") => pb::RunStatus::Running,
        Some("awaiting_input") => pb::RunStatus::AwaitingInput,
        Some("succeeded") => pb::RunStatus::Succeeded,
        Some("failed") => pb::RunStatus::Failed,
        Some("cancelled") => pb::RunStatus::Cancelled,
        Some("paused") => pb::RunStatus::Paused,
        _ => pb::RunStatus::Unspecified,
    };
    let object = |k: &str| v.get(k).and_then(json_to_struct);
    pb::Run {
        run_id: str_of(&v, "run_id").unwrap_or_default(),
        status: status as i32,
        agent: str_of(&v, "agent").unwrap_or_default(),
        agent_hash: str_of(&v, "agent_hash").unwrap_or_default(),
        parent_run_id: str_of(&v, "parent_run_id"),
        root_run_id: str_of(&v, "root_run_id").unwrap_or_default(),
        depth: int_of(&v, "depth"),
        interactive: v
            .get("interactive")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        stop_reason: str_of(&v, "stop_reason"),
        iterations: int_of(&v, "iterations"),
        usage: object("usage"),
        metadata: object("metadata"),
        pending_interrupt: object("pending_interrupt"),
        error: object("error"),
        created_at: str_of(&v, "created_at").unwrap_or_default(),
        started_at: str_of(&v, "started_at"),
        finished_at: str_of(&v, "finished_at"),
        paused_by: str_of(&v, "paused_by"),
        json: json_to_struct(&v),
    }
}

fn str_of(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_owned)
}

fn int_of(v: &Value, k: &str) -> i32 {
    v.get(k)
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(0)
}

/// The gRPC status of a REST error answer (`{"error": {"code", "message"}}`).
fn status_of(http: http::StatusCode, headers: &http::HeaderMap, body: &[u8]) -> Status {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let err = v.get("error").unwrap_or(&Value::Null);
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| format!("HTTP {http}"), str::to_owned);
    let code = err
        .get("code")
        .and_then(Value::as_str)
        .and_then(ErrorCode::parse);
    let grpc = match code {
        // The run is not in a state for this call (input to an ended run, a second answer):
        // a precondition, not an existing resource.
        Some(ErrorCode::Conflict) => tonic::Code::FailedPrecondition,
        Some(c) => c.grpc_code(),
        None => code_of_http(http),
    };
    let mut status = Status::new(grpc, message);
    if let Some(c) = code
        && let Ok(v) = c.as_str().parse()
    {
        status.metadata_mut().insert("weft-error-code", v);
    }
    if let Some(ra) = headers.get(http::header::RETRY_AFTER)
        && let Ok(v) = ra.to_str().unwrap_or_default().parse()
    {
        status.metadata_mut().insert("retry-after", v);
    }
    status
}

fn code_of_http(s: http::StatusCode) -> tonic::Code {
    match s.as_u16() {
        400 | 413 | 415 | 422 => tonic::Code::InvalidArgument,
        401 => tonic::Code::Unauthenticated,
        403 => tonic::Code::PermissionDenied,
        404 | 405 => tonic::Code::NotFound,
        409 => tonic::Code::FailedPrecondition,
        429 => tonic::Code::ResourceExhausted,
        503 => tonic::Code::Unavailable,
        504 => tonic::Code::DeadlineExceeded,
        _ => tonic::Code::Internal,
    }
}

/// The run stream's SSE frames (`data: {"seq","kind","data"}`) as events.
fn sse_events(body: Body) -> EventStream {
    Box::pin(
        crate::sse_read::frames(body.into_data_stream()).map(|f| match f {
            Ok(frame) => event_of(&frame),
            Err(e) => Err(Status::unavailable(format!("the run stream broke: {e}"))),
        }),
    )
}

/// One SSE frame's event. An `error` frame (the stream failed on the server) is the status of
/// its code.
fn event_of(frame: &crate::sse_read::Frame) -> Result<pb::RunEvent, Status> {
    let data = &frame.data;
    if frame.event.as_deref() == Some("error") {
        let body = json!({"error": serde_json::from_str::<Value>(data).unwrap_or(Value::Null)});
        return Err(status_of(
            http::StatusCode::INTERNAL_SERVER_ERROR,
            &http::HeaderMap::new(),
            body.to_string().as_bytes(),
        ));
    }
    let v: Value = serde_json::from_str(data)
        .map_err(|e| Status::internal(format!("a bad stream frame: {e}")))?;
    Ok(pb::RunEvent {
        seq: v.get("seq").and_then(Value::as_i64).unwrap_or(0),
        kind: str_of(&v, "kind").unwrap_or_default(),
        data: v.get("data").and_then(json_to_struct),
    })
}

/// A JSON object as a `google.protobuf.Struct`; `None` for anything else (null included).
fn json_to_struct(v: &Value) -> Option<prost_types::Struct> {
    match v {
        Value::Object(o) => Some(prost_types::Struct {
            fields: o
                .iter()
                .map(|(k, v)| (k.clone(), json_to_value(v)))
                .collect(),
        }),
        _ => None,
    }
}

fn json_to_value(v: &Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(json_to_value).collect(),
        }),
        Value::Object(_) => Kind::StructValue(json_to_struct(v).unwrap_or_default()),
    };
    prost_types::Value { kind: Some(kind) }
}

fn struct_to_json(s: &prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

fn value_to_json(v: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::NumberValue(n)) => {
            // Whole numbers travel as doubles; give them back as integers.
            if n.fract() == 0.0 && n.abs() < 9.0e15 {
                #[expect(
                    clippy::cast_possible_truncation,
                    reason = "a whole number below 2^53 converts exactly"
                )]
                let whole = *n as i64;
                json!(whole)
            } else {
                json!(n)
            }
        }
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_to_json).collect()),
        Some(Kind::StructValue(s)) => struct_to_json(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_frames_become_events_and_comments_are_skipped() {
        let body = Body::from(
            ": keepalive\n\nid: 1\nevent: run_started\ndata: {\"seq\":1,\"kind\":\"run_started\",\"data\":{\"agent\":\"a\"}}\n\n\
             event: run_finished\r\ndata: {\"seq\":2,\"kind\":\"run_finished\",\"data\":{\"status\":\"succeeded\"}}",
        );
        let events: Vec<_> = futures::executor::block_on(sse_events(body).collect());
        let events: Vec<_> = events.into_iter().map(Result::unwrap).collect();
        assert_eq!(events.len(), 2);
        assert_eq!((events[0].seq, events[0].kind.as_str()), (1, "run_started"));
        assert_eq!(
            struct_to_json(events[1].data.as_ref().unwrap()),
            json!({"status": "succeeded"})
        );
    }

    #[test]
    fn an_error_frame_ends_the_stream_with_its_status() {
        let body = Body::from(
            "event: error\ndata: {\"code\":\"unavailable\",\"message\":\"nats is down\"}\n\n",
        );
        let events: Vec<_> = futures::executor::block_on(sse_events(body).collect());
        let e = events.into_iter().next().unwrap().unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);
        assert_eq!(e.message(), "nats is down");
    }

    #[test]
    fn rest_errors_become_statuses_with_their_code() {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "3".parse().unwrap());
        let body =
            br#"{"error":{"code":"tenant_concurrency_exhausted","message":"too many runs"}}"#;
        let s = status_of(http::StatusCode::TOO_MANY_REQUESTS, &h, body);
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        assert_eq!(s.message(), "too many runs");
        assert_eq!(s.metadata().get("retry-after").unwrap(), "3");
        assert_eq!(
            s.metadata().get("weft-error-code").unwrap(),
            "tenant_concurrency_exhausted"
        );
        let s = status_of(http::StatusCode::NOT_FOUND, &h, b"not json");
        assert_eq!(s.code(), tonic::Code::NotFound);
        let body = br#"{"error":{"code":"conflict","message":"the run has ended"}}"#;
        let s = status_of(http::StatusCode::CONFLICT, &h, body);
        assert_eq!(s.code(), tonic::Code::FailedPrecondition);
    }

    /// The field names of message `name` in the public descriptor set.
    fn proto_fields(name: &str) -> Vec<String> {
        use prost::Message as _;
        let set = prost_types::FileDescriptorSet::decode(pb::FILE_DESCRIPTOR_SET).unwrap();
        let msg = set
            .file
            .iter()
            .flat_map(|f| &f.message_type)
            .find(|m| m.name() == name)
            .unwrap_or_else(|| panic!("no message {name}"));
        msg.field.iter().map(|f| f.name().to_owned()).collect()
    }

    /// The property names of the contract type `T`'s JSON schema.
    fn contract_fields<T: schemars::JsonSchema>() -> Vec<String> {
        let schema = weft_api::json_schema::<T>();
        let mut keys: Vec<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// The proto's messages follow the REST contract (weft-api's types): a field added to a
    /// run, a run request or a volume binding fails here until the proto has it too.
    #[test]
    fn the_proto_covers_the_rest_contract() {
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        // `json` carries the REST answer whole.
        let mut run = proto_fields("Run");
        run.retain(|f| f != "json");
        assert_eq!(sorted(run), contract_fields::<weft_api::runs::Run>());
        // `stream` is StreamEvents here.
        let mut create = contract_fields::<weft_api::runs::CreateRun>();
        create.retain(|f| f != "stream");
        assert_eq!(sorted(proto_fields("CreateRunRequest")), create);
        assert_eq!(
            sorted(proto_fields("VolumeBinding")),
            contract_fields::<weft_api::binding::VolumeBinding>()
        );
        assert_eq!(
            sorted(proto_fields("Sampling")),
            contract_fields::<weft_api::common::AgentSampling>()
        );
    }

    #[test]
    fn ids_cannot_leave_their_segment_and_json_round_trips() {
        assert_eq!(segment("../tokens").unwrap(), "..%2Ftokens");
        assert_eq!(segment("a/b?c").unwrap(), "a%2Fb%3Fc");
        assert!(segment("").is_err());
        assert!(segment("..").is_err());
        let id = "0193a0c2-7d1e-7000-8000-000000000000";
        assert_eq!(segment(id).unwrap(), id);
        let v = json!({"a": 1, "b": [true, null, "x", 1.5], "c": {"d": -2}});
        assert_eq!(struct_to_json(&json_to_struct(&v).unwrap()), v);
    }
}
