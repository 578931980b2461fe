//! The A2A (Agent2Agent v1.0) server: a tenant's exposed agents (`a2a.expose` in their
//! definition) as the skills of one agent card, served over the JSON-RPC binding (`POST
//! /a2a/rpc`) and the REST binding (HTTP+JSON under `/a2a`). docs/a2a.md.
//!
//! A task is a weft run started over A2A; its context id is kept in the run's metadata. Every
//! call is made in-process on the gateway's API router with the caller's bearer token, as
//! `/mcp` and the gRPC API do, so scopes, tenancy, quotas and validation are the REST routes'.
//! Every route takes a bearer token (a weft token or a trusted IdP's JWT), the card too: it is
//! the caller's tenant's.

mod task;

use std::convert::Infallible;
use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt as _};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use weft_api::a2a::{
    self as wire, A2aError, AgentCapabilities, AgentCard, AgentInterface, AgentSkill,
    CancelTaskRequest, GetTaskRequest, HttpAuthSecurityScheme, SecurityRequirement, SecurityScheme,
    SendMessageRequest, StreamResponse, StringList, method,
};
use weft_auth::BearerAuth;
use weft_core::{Error, Principal};

use crate::AppState;
use crate::error::{Shape, render};
use crate::mcp::RouterUpstream;
use task::{Caller, Fail};

/// What the A2A routes share.
#[derive(Clone)]
struct A2a {
    api: RouterUpstream,
    public_url: Option<Arc<str>>,
}

/// The A2A routes, each behind the bearer check (no UI session: A2A clients send tokens).
pub fn routes(st: &AppState, api: axum::Router, max_body: usize) -> axum::Router {
    let auth = BearerAuth {
        resolver: st.resolver.clone(),
        render: Arc::new(|e: Error| render(&e, Shape::Native)),
        sessions: None,
    };
    let state = A2a {
        api: RouterUpstream(api),
        public_url: st
            .public_url
            .as_deref()
            .map(|u| Arc::from(u.trim_end_matches('/'))),
    };
    axum::Router::new()
        .route("/.well-known/agent-card.json", get(card))
        .route("/a2a/.well-known/agent-card.json", get(card))
        .route("/a2a/rpc", post(rpc))
        .route("/a2a/message:send", post(rest_send))
        .route("/a2a/message:stream", post(rest_stream))
        .route("/a2a/tasks/{id}", get(rest_get).post(rest_action))
        .route_layer(axum::middleware::from_fn_with_state(
            auth,
            BearerAuth::middleware,
        ))
        // After the bearer check's layer, so that an unknown method is a 405 in weft's shape
        // before any token is looked at, as on every other route.
        .method_not_allowed_fallback(crate::method_not_allowed)
        .with_state(state)
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn(crate::settle_body))
        .layer(axum::middleware::from_fn(crate::observe))
}

/// `GET /.well-known/agent-card.json` (and under `/a2a/`): the caller's tenant's card.
async fn card(
    State(a2a): State<A2a>,
    Extension(p): Extension<Principal>,
    headers: HeaderMap,
) -> Response {
    let caller = match Caller::new(&a2a.api, &headers) {
        Ok(c) => c,
        Err(f) => return f.rest(),
    };
    let agents = match caller.exposed().await {
        Ok(a) => a,
        Err(f) => return f.rest(),
    };
    let base = match &a2a.public_url {
        Some(u) => u.to_string(),
        None => {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("127.0.0.1");
            // Behind a TLS-terminating proxy, as the UI's session cookie reads it.
            let https = headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(',').next())
                .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
            format!("{}://{host}", if https { "https" } else { "http" })
        }
    };
    let skills = agents
        .into_iter()
        .map(|a| AgentSkill {
            id: a.name.clone(),
            name: a.name,
            description: a.description,
            tags: a.tags,
            examples: a.examples,
            input_modes: Vec::new(),
            output_modes: Vec::new(),
        })
        .collect();
    let interface = |url: String, binding: &str| AgentInterface {
        url,
        protocol_binding: binding.into(),
        protocol_version: wire::PROTOCOL_VERSION.into(),
        tenant: None,
    };
    let card = AgentCard {
        name: format!("weft: {}", p.tenant),
        description: format!(
            "The agents tenant {} offers over A2A. Name one with message.metadata.skill \
             when there is more than one.",
            p.tenant
        ),
        version: env!("CARGO_PKG_VERSION").into(),
        supported_interfaces: vec![
            interface(format!("{base}/a2a/rpc"), wire::BINDING_JSONRPC),
            interface(format!("{base}/a2a"), wire::BINDING_REST),
        ],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extended_agent_card: Some(false),
        },
        default_input_modes: vec!["text/plain".into(), "application/json".into()],
        default_output_modes: vec!["text/plain".into()],
        skills,
        provider: None,
        documentation_url: None,
        security_schemes: [(
            "bearer".to_owned(),
            SecurityScheme {
                http_auth_security_scheme: Some(HttpAuthSecurityScheme {
                    scheme: "Bearer".into(),
                    bearer_format: Some("a weft token or a trusted identity provider's JWT".into()),
                    description: None,
                }),
                other: Default::default(),
            },
        )]
        .into(),
        security_requirements: vec![SecurityRequirement {
            schemes: [("bearer".to_owned(), StringList::default())].into(),
        }],
    };
    axum::Json(card).into_response()
}

/// The `A2A-Version` a request names, checked: a missing header is taken as this version (the
/// SDKs always send it), another major version is refused.
fn check_version(headers: &HeaderMap) -> Result<(), Fail> {
    let Some(v) = headers.get(wire::VERSION_HEADER) else {
        return Ok(());
    };
    let v = v.to_str().unwrap_or_default().trim();
    if v.split('.').next() == Some("1") {
        return Ok(());
    }
    Err(Fail::new(
        A2aError::VersionNotSupported,
        format!(
            "A2A version `{v}` is not supported; weft speaks {} (send `{}: {}`)",
            wire::PROTOCOL_VERSION,
            wire::VERSION_HEADER,
            wire::PROTOCOL_VERSION
        ),
    ))
}

// ---- JSON-RPC binding ----

/// `POST /a2a/rpc`: one JSON-RPC 2.0 request. Errors are answered in a 200 body, as the SDK
/// servers do (their clients read typed errors only from those).
async fn rpc(
    State(a2a): State<A2a>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) => return render(&crate::extract::body_error(&r), Shape::Native),
    };
    let (id, call) = decode(&body);
    let call = match call.and_then(|c| check_version(&headers).map(|()| c)) {
        Ok(c) => c,
        Err(f) => return rpc_error(&id, &f),
    };
    let caller = match Caller::new(&a2a.api, &headers) {
        Ok(c) => c,
        Err(f) => return rpc_error(&id, &f),
    };
    let answer = match call {
        Call::Send(p) => caller.send(p).await,
        Call::Stream(p) => {
            return match caller.stream(p).await {
                Ok(events) => sse(events.map(move |ev| match ev {
                    Ok(ev) => Event::default().data(rpc_result(&id, &ev).to_string()),
                    Err(f) => Event::default()
                        .event("error")
                        .data(rpc_error_body(&id, &f).to_string()),
                })),
                Err(f) => rpc_error(&id, &f),
            };
        }
        Call::Get(p) => caller.get(&p.id, p.history_length).await.map(to_value),
        Call::Cancel(p) => caller.cancel(&p.id).await.map(to_value),
    };
    match answer {
        Ok(result) => axum::Json(rpc_result(&id, &result)).into_response(),
        Err(f) => rpc_error(&id, &f),
    }
}

/// A JSON-RPC call weft serves, decoded.
enum Call {
    Send(SendMessageRequest),
    Stream(SendMessageRequest),
    Get(GetTaskRequest),
    Cancel(CancelTaskRequest),
}

/// One JSON-RPC body: the id to answer with (null until it is read) and the call, or the error
/// to answer: not JSON, a bad envelope, an unknown or unserved method, bad params (for a message,
/// its parts too). No I/O.
fn decode(body: &[u8]) -> (Value, Result<Call, Fail>) {
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            let f = Fail::new(A2aError::Parse, format!("the body is not JSON: {e}"));
            return (Value::Null, Err(f));
        }
    };
    let id = match v.get("id") {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        Some(_) => {
            let f = Fail::new(
                A2aError::InvalidRequest,
                "`id` must be a string, a number or null",
            );
            return (Value::Null, Err(f));
        }
    };
    let call = envelope(v).and_then(|req| {
        let message = |p: Value| {
            let p = params::<SendMessageRequest>(p)?;
            task::input_text(&p.message)?;
            Ok(p)
        };
        match req.method.as_str() {
            method::SEND_MESSAGE => message(req.params).map(Call::Send),
            method::SEND_STREAMING_MESSAGE => message(req.params).map(Call::Stream),
            method::GET_TASK => params(req.params).map(Call::Get),
            method::CANCEL_TASK => params(req.params).map(Call::Cancel),
            "ListTasks" | "SubscribeToTask" | "GetExtendedAgentCard" => {
                Err(unsupported(&req.method))
            }
            m if m.contains("PushNotificationConfig") => Err(Fail::new(
                A2aError::PushNotificationNotSupported,
                "weft does not send push notifications; stream the task (SendStreamingMessage) or poll GetTask",
            )),
            m => Err(Fail::new(
                A2aError::MethodNotFound,
                format!(
                    "no method `{m}`; weft serves SendMessage, SendStreamingMessage, GetTask and CancelTask (A2A {})",
                    wire::PROTOCOL_VERSION
                ),
            )),
        }
    });
    (id, call)
}

/// [`decode`] for the fuzz target: the method and input text of a call, or the JSON-RPC error
/// answer.
pub(crate) fn fuzz_decode(body: &[u8]) -> Result<(String, Option<String>), Value> {
    match decode(body) {
        (_, Ok(Call::Send(p))) => Ok((
            method::SEND_MESSAGE.into(),
            task::input_text(&p.message).ok(),
        )),
        (_, Ok(Call::Stream(p))) => Ok((
            method::SEND_STREAMING_MESSAGE.into(),
            task::input_text(&p.message).ok(),
        )),
        (_, Ok(Call::Get(p))) => Ok((method::GET_TASK.into(), Some(p.id))),
        (_, Ok(Call::Cancel(p))) => Ok((method::CANCEL_TASK.into(), Some(p.id))),
        (id, Err(f)) => Err(rpc_error_body(&id, &f)),
    }
}

/// A request's method and params, once its envelope is checked.
struct Envelope {
    method: String,
    params: Value,
}

/// The JSON-RPC envelope of `v`: an object with `jsonrpc: "2.0"` and a string `method`
/// (a batch is refused: A2A does not use them).
fn envelope(v: Value) -> Result<Envelope, Fail> {
    let Value::Object(mut o) = v else {
        return Err(Fail::new(
            A2aError::InvalidRequest,
            "the body must be one JSON-RPC 2.0 request object (batches are not supported)",
        ));
    };
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Fail::new(
            A2aError::InvalidRequest,
            "`jsonrpc` must be \"2.0\"",
        ));
    }
    let Some(Value::String(method)) = o.remove("method") else {
        return Err(Fail::new(
            A2aError::InvalidRequest,
            "`method` must be a string such as \"SendMessage\"",
        ));
    };
    Ok(Envelope {
        method,
        params: o.remove("params").unwrap_or(Value::Null),
    })
}

/// `v` read as `T`: an object, without a NUL anywhere (weft stores what it is given), every
/// error naming the field by its path (`message.parts[0].text`).
fn params<T: DeserializeOwned>(v: Value) -> Result<T, Fail> {
    if !v.is_object() {
        return Err(Fail::new(
            A2aError::InvalidParams,
            "`params` must be an object",
        ));
    }
    if let Some(path) = weft_core::storable::nul_path(&v) {
        return Err(Fail::new(
            A2aError::InvalidParams,
            weft_core::storable::nul_error(&path).message,
        ));
    }
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        Fail::new(A2aError::InvalidParams, format!("`{path}`: {}", e.inner()))
    })
}

fn to_value<T: serde::Serialize>(t: T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

fn unsupported(what: &str) -> Fail {
    Fail::new(
        A2aError::UnsupportedOperation,
        format!(
            "`{what}` is not supported by weft's A2A server; it serves sending and streaming messages, getting and cancelling tasks"
        ),
    )
}

fn rpc_result<T: serde::Serialize>(id: &Value, result: &T) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn rpc_error_body(id: &Value, f: &Fail) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": f.rpc()})
}

fn rpc_error(id: &Value, f: &Fail) -> Response {
    let mut r = axum::Json(rpc_error_body(id, f)).into_response();
    f.retry_after(&mut r);
    r
}

/// An SSE answer of `events`, closed when they end.
fn sse(events: impl Stream<Item = Event> + Send + 'static) -> Response {
    Sse::new(events.map(Ok::<_, Infallible>))
        .keep_alive(KeepAlive::default())
        .into_response()
}

// ---- REST binding (HTTP+JSON) ----

/// The `application/a2a+json` answer of the REST binding.
fn rest_json<T: serde::Serialize>(t: &T) -> Response {
    let mut r = axum::Json(t).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/a2a+json"),
    );
    r
}

/// The body of a REST request, read as `T`.
fn rest_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, Fail> {
    let body = body.map_err(|r| {
        let e = crate::extract::body_error(&r);
        Fail::with_status(A2aError::InvalidRequest, e.message, r.status())
    })?;
    let v: Value = serde_json::from_slice(&body)
        .map_err(|e| Fail::new(A2aError::Parse, format!("the body is not JSON: {e}")))?;
    params(v)
}

/// A REST message's caller and request, once the version and the body are checked.
fn rest_message(
    a2a: &A2a,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(Caller, SendMessageRequest), Fail> {
    check_version(headers)?;
    let req = rest_body(body)?;
    Ok((Caller::new(&a2a.api, headers)?, req))
}

/// `POST /a2a/message:send`.
async fn rest_send(
    State(a2a): State<A2a>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let go = async {
        let (caller, req) = rest_message(&a2a, &headers, body)?;
        caller.send(req).await
    };
    match go.await {
        Ok(v) => rest_json(&v),
        Err(f) => f.rest(),
    }
}

/// `POST /a2a/message:stream`: SSE of bare stream responses.
async fn rest_stream(
    State(a2a): State<A2a>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let go = async {
        let (caller, req) = rest_message(&a2a, &headers, body)?;
        caller.stream(req).await
    };
    match go.await {
        Ok(events) => sse(events.map(|ev: Result<StreamResponse, Fail>| match ev {
            Ok(ev) => Event::default().data(to_value(&ev).to_string()),
            Err(f) => Event::default()
                .event("error")
                .data(f.rest_body().to_string()),
        })),
        Err(f) => f.rest(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GetQuery {
    history_length: Option<i32>,
}

/// `GET /a2a/tasks/{id}?historyLength=n`.
async fn rest_get(
    State(a2a): State<A2a>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<GetQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let go = async {
        check_version(&headers)?;
        let Query(q) = query.map_err(|e| {
            Fail::new(
                A2aError::InvalidParams,
                format!("`historyLength` must be an integer (the last n history entries): {e}"),
            )
        })?;
        let caller = Caller::new(&a2a.api, &headers)?;
        caller.get(&id, q.history_length).await
    };
    match go.await {
        Ok(t) => rest_json(&t),
        Err(f) => f.rest(),
    }
}

/// `POST /a2a/tasks/{id}:cancel` (the SDKs send `{"id"}` or no body); `:subscribe` is not
/// served.
async fn rest_action(
    State(a2a): State<A2a>,
    headers: HeaderMap,
    Path(segment): Path<String>,
) -> Response {
    let go = async {
        check_version(&headers)?;
        let Some((id, action)) = segment.rsplit_once(':') else {
            return Err(Fail::new(
                A2aError::MethodNotFound,
                format!("POST /a2a/tasks/{segment} names no action; use /a2a/tasks/{{id}}:cancel"),
            ));
        };
        if action != "cancel" {
            return Err(unsupported(&format!("tasks/{{id}}:{action}")));
        }
        let caller = Caller::new(&a2a.api, &headers)?;
        caller.cancel(id).await
    };
    match go.await {
        Ok(t) => rest_json(&t),
        Err(f) => f.rest(),
    }
}

#[cfg(test)]
mod tests;
