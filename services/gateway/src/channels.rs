//! The channel routes (`/v1/channels…`): thin handlers over the substrate's `weft.v1.Channels`
//! gRPC API. They parse the request, forward it with the caller's internal JWT, and render the
//! answer; the substrate validates, authorizes (`channels:publish` to publish, `channels:read`
//! to read, ack, peek and await, `tenant:admin` to create and delete) and scopes everything to
//! the caller's tenant. A long-poll holds no more than its `wait_ms` (at most 30 s, checked by
//! the substrate, which also caps how many wait at once).

use std::time::Duration;
use weft_auth::rpc::Peer;

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};
use weft_core::Principal;
use weft_proto::v1;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{NativeJson, NativePath, NativeQuery, OptionalNativeJson, ValidJson};

type Result<T> = std::result::Result<T, ApiError>;

/// The routes; mounted inside the bearer-authenticated native router.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/channels", get(list_channels_handler))
        .route("/v1/channels/await", post(await_handler))
        .route(
            "/v1/channels/{name}",
            put(put_channel_handler).delete(delete_channel_handler),
        )
        .route("/v1/channels/{name}/publish", post(publish_handler))
        .route("/v1/channels/{name}/read", post(read_handler))
        .route("/v1/channels/{name}/ack", post(ack_handler))
        .route("/v1/channels/{name}/peek", get(peek_handler))
}

impl AppState {
    /// Bounds a channels call by its own wait plus `gateway.request_timeout_secs`.
    async fn channels_call<T>(
        &self,
        wait_ms: u32,
        call: impl std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T> {
        let limit = self.request_timeout + Duration::from_millis(u64::from(wait_ms));
        match tokio::time::timeout(limit, call).await {
            Ok(r) => r
                .map(tonic::Response::into_inner)
                .map_err(|s| ApiError::native(Peer::SUBSTRATE.error(&s))),
            Err(_) => Err(ApiError::native(self.timeout_error())),
        }
    }
}

fn channel_json(c: v1::ChannelInfo) -> Value {
    json!({
        "name": c.name,
        "scope": c.scope,
        "ttl_seconds": c.ttl_seconds,
        "max_messages": c.max_messages,
        "created_at": c.created_at,
        "updated_at": c.updated_at,
    })
}

fn message_json(m: v1::ChannelMessage) -> Value {
    let payload = serde_json::from_str::<Value>(&m.payload_json).unwrap_or_else(|e| {
        tracing::error!(error = %e, seq = m.seq, "substrate sent a payload that is not JSON");
        Value::Null
    });
    json!({
        "seq": m.seq,
        "cursor": m.cursor,
        "payload": payload,
        "published_at": m.published_at,
        "expires_at": m.expires_at,
        "published_by": m.published_by,
    })
}

fn messages_json(ms: Vec<v1::ChannelMessage>) -> Vec<Value> {
    ms.into_iter().map(message_json).collect()
}

/// `PUT /v1/channels/{name}` body.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct PutChannelBody {
    pub scope: String,
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    #[serde(default)]
    pub max_messages: Option<u64>,
}

/// `PUT /v1/channels/{name}`: creates the channel (201) or changes its bounds (200).
#[tracing::instrument(skip_all, fields(channel = %name))]
pub async fn put_channel_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    ValidJson(body): NativeJson<PutChannelBody>,
) -> Result<Response> {
    let req = st
        .internal(
            &p,
            v1::PutChannelRequest {
                name,
                scope: body.scope,
                ttl_seconds: body.ttl_seconds,
                max_messages: body.max_messages,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    let r = st.channels_call(0, client.put_channel(req)).await?;
    let status = if r.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut body = r.channel.map(channel_json).unwrap_or_else(|| json!({}));
    body["created"] = Value::Bool(r.created);
    Ok((status, Json(body)).into_response())
}

/// `DELETE /v1/channels/{name}`: the channel, its messages and cursors. 204.
#[tracing::instrument(skip_all, fields(channel = %name))]
pub async fn delete_channel_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
) -> Result<Response> {
    let req = st
        .internal(&p, v1::DeleteChannelRequest { name })
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    st.channels_call(0, client.delete_channel(req)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /v1/channels`: the tenant's channels, by name.
#[tracing::instrument(skip_all)]
pub async fn list_channels_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Response> {
    let req = st
        .internal(&p, v1::ListChannelsRequest {})
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    let r = st.channels_call(0, client.list_channels(req)).await?;
    let data: Vec<Value> = r.channels.into_iter().map(channel_json).collect();
    Ok(Json(json!({ "data": data, "next_cursor": null })).into_response())
}

/// `POST /v1/channels/{name}/publish` body.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct PublishBody {
    /// Any JSON value, at most 64 KiB as JSON text.
    pub payload: Value,
    /// Publish at most once per key (per stream): a repeat returns the first message.
    #[serde(default)]
    pub op_key: Option<String>,
    /// The agent's stream, for channels of scope `agent`.
    #[serde(default)]
    pub agent: Option<String>,
    /// Another subject's stream, for channels of scope `user` (tenant admins).
    #[serde(default)]
    pub user: Option<String>,
}

/// `POST /v1/channels/{name}/publish`: 201 with the new message's `seq` and `cursor`; 200 with
/// `replayed: true` when `op_key` was published before.
#[tracing::instrument(skip_all, fields(channel = %name))]
pub async fn publish_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    ValidJson(body): NativeJson<PublishBody>,
) -> Result<Response> {
    let req = st
        .internal(
            &p,
            v1::PublishRequest {
                name,
                payload_json: body.payload.to_string(),
                op_key: body.op_key,
                agent: body.agent,
                user: body.user,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    let r = st.channels_call(0, client.publish(req)).await?;
    let status = if r.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(json!({
            "seq": r.seq,
            "cursor": r.cursor,
            "replayed": r.replayed,
            "published_at": r.published_at,
        })),
    )
        .into_response())
}

/// `POST /v1/channels/{name}/read` body (optional: no body reads after the committed cursor
/// without waiting).
#[derive(Debug, Default, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct ReadBody {
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub max: Option<u32>,
    #[serde(default)]
    pub wait_ms: Option<u32>,
    /// Whose committed cursor (default: the token's subject).
    #[serde(default)]
    pub consumer: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
}

/// `POST /v1/channels/{name}/read`: messages after `cursor` (or the consumer's committed
/// cursor), waiting up to `wait_ms` for one.
#[tracing::instrument(skip_all, fields(channel = %name))]
pub async fn read_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    OptionalNativeJson(body): OptionalNativeJson<ReadBody>,
) -> Result<Response> {
    let wait = body.wait_ms.unwrap_or(0);
    let req = st
        .internal(
            &p,
            v1::ReadRequest {
                name,
                cursor: body.cursor,
                max: body.max,
                wait_ms: body.wait_ms,
                consumer: body.consumer,
                agent: body.agent,
                user: body.user,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    let r = st.channels_call(wait, client.read(req)).await?;
    Ok(Json(json!({
        "messages": messages_json(r.messages),
        "cursor": r.cursor,
    }))
    .into_response())
}

/// `POST /v1/channels/{name}/ack` body.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct AckBody {
    pub cursor: String,
    #[serde(default)]
    pub consumer: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
}

/// `POST /v1/channels/{name}/ack`: commits the consumer's cursor.
#[tracing::instrument(skip_all, fields(channel = %name))]
pub async fn ack_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    ValidJson(body): NativeJson<AckBody>,
) -> Result<Response> {
    let req = st
        .internal(
            &p,
            v1::AckRequest {
                name,
                cursor: body.cursor,
                consumer: body.consumer,
                agent: body.agent,
                user: body.user,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    let r = st.channels_call(0, client.ack(req)).await?;
    Ok(Json(json!({ "cursor": r.cursor })).into_response())
}

/// `GET /v1/channels/{name}/peek` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeekQuery {
    #[serde(default)]
    pub max: Option<u32>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
}

/// `GET /v1/channels/{name}/peek?max=&agent=`: the newest messages, moving no cursor.
#[tracing::instrument(skip_all, fields(channel = %name))]
pub async fn peek_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    NativeQuery(q): NativeQuery<PeekQuery>,
) -> Result<Response> {
    let req = st
        .internal(
            &p,
            v1::PeekRequest {
                name,
                max: q.max,
                agent: q.agent,
                user: q.user,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    let r = st.channels_call(0, client.peek(req)).await?;
    let data = messages_json(r.messages);
    // `messages`: the old key, kept one release beside the list envelope's `data`.
    Ok(Json(json!({ "data": data, "next_cursor": null, "messages": data })).into_response())
}

/// `POST /v1/channels/await` body.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct AwaitBody {
    pub channels: Vec<String>,
    pub mode: String,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub wait_ms: u32,
    #[serde(default)]
    pub consumer: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
}

/// `POST /v1/channels/await`: fan-in over the channels' unread messages.
#[tracing::instrument(skip_all)]
pub async fn await_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    ValidJson(body): NativeJson<AwaitBody>,
) -> Result<Response> {
    let wait = body.wait_ms;
    let req = st
        .internal(
            &p,
            v1::AwaitRequest {
                channels: body.channels,
                mode: body.mode,
                n: body.n,
                wait_ms: body.wait_ms,
                consumer: body.consumer,
                agent: body.agent,
                user: body.user,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    let r = st.channels_call(wait, client.await_channels(req)).await?;
    let channels: Vec<Value> = r
        .channels
        .into_iter()
        .map(|c| json!({"channel": c.channel, "ready": c.ready, "cursor": c.cursor}))
        .collect();
    Ok(Json(json!({ "satisfied": r.satisfied, "channels": channels })).into_response())
}

// Bodies are JSON objects only: serde's derive would also read an array of the fields.
weft_core::objects_only!(deserialize: PutChannelBody, PublishBody, ReadBody, AckBody, AwaitBody);
