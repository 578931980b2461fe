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
use weft_api::channels::{
    AckResult, AwaitResult, Channel, ChannelList, ChannelMessage, ChannelReadiness, ChannelScope,
    PeekResult, PublishResult, PutChannelResult, ReadResult,
};
use weft_api::common::{NextCursor, Timestamp};
use weft_core::Principal;
use weft_proto::v1;

// The bodies are the contract's types; the old names stay for the OpenAPI tests.
pub use weft_api::channels::{
    AckChannel as AckBody, AwaitChannels as AwaitBody, Publish as PublishBody,
    PutChannel as PutChannelBody, ReadChannel as ReadBody,
};

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

fn channel(c: v1::ChannelInfo) -> Channel {
    Channel {
        name: c.name,
        scope: ChannelScope(c.scope),
        ttl_seconds: c.ttl_seconds,
        max_messages: c.max_messages,
        created_at: Timestamp(c.created_at),
        updated_at: Timestamp(c.updated_at),
    }
}

fn message(m: v1::ChannelMessage) -> ChannelMessage {
    let payload = serde_json::from_str(&m.payload_json).unwrap_or_else(|e| {
        tracing::error!(error = %e, seq = m.seq, "substrate sent a payload that is not JSON");
        serde_json::Value::Null
    });
    ChannelMessage {
        seq: m.seq,
        cursor: m.cursor,
        payload,
        published_at: Timestamp(m.published_at),
        expires_at: Timestamp(m.expires_at),
        published_by: m.published_by,
    }
}

fn messages(ms: Vec<v1::ChannelMessage>) -> Vec<ChannelMessage> {
    ms.into_iter().map(message).collect()
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
                scope: body.scope.0,
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
    let body = PutChannelResult {
        channel: r.channel.map(channel),
        created: r.created,
    };
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
    Ok(Json(ChannelList {
        data: r.channels.into_iter().map(channel).collect(),
        next_cursor: NextCursor::default(),
    })
    .into_response())
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
                agent: body.agent.map(|a| a.0),
                user: body.user.map(|u| u.0),
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
        Json(PublishResult {
            seq: r.seq,
            cursor: r.cursor,
            replayed: r.replayed,
            published_at: Timestamp(r.published_at),
        }),
    )
        .into_response())
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
                cursor: body.cursor.map(|c| c.0),
                max: body.max,
                wait_ms: body.wait_ms,
                consumer: body.consumer.map(|c| c.0),
                agent: body.agent.map(|a| a.0),
                user: body.user.map(|u| u.0),
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    let r = st.channels_call(wait, client.read(req)).await?;
    Ok(Json(ReadResult {
        messages: messages(r.messages),
        cursor: r.cursor,
    })
    .into_response())
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
                cursor: body.cursor.0,
                consumer: body.consumer.map(|c| c.0),
                agent: body.agent.map(|a| a.0),
                user: body.user.map(|u| u.0),
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    let r = st.channels_call(0, client.ack(req)).await?;
    Ok(Json(AckResult { cursor: r.cursor }).into_response())
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
    let data = messages(r.messages);
    // `messages`: the old key, kept one release beside the list envelope's `data`.
    Ok(Json(PeekResult {
        messages: data.clone(),
        data,
        next_cursor: NextCursor::default(),
    })
    .into_response())
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
                mode: body.mode.0,
                n: body.n,
                wait_ms: body.wait_ms,
                consumer: body.consumer.map(|c| c.0),
                agent: body.agent.map(|a| a.0),
                user: body.user.map(|u| u.0),
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.channels.clone();
    let r = st.channels_call(wait, client.await_channels(req)).await?;
    let channels = r
        .channels
        .into_iter()
        .map(|c| ChannelReadiness {
            channel: c.channel,
            ready: c.ready,
            cursor: c.cursor,
        })
        .collect();
    Ok(Json(AwaitResult {
        satisfied: r.satisfied,
        channels,
    })
    .into_response())
}
