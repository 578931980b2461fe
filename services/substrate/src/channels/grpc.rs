//! The `weft.v1.Channels` gRPC face: the tenant, subject and scopes come from the verified
//! internal JWT (put in the request extensions by `JwtInterceptor`); requests become
//! [`ChannelHub`] calls, records become prost messages. Publishing needs `channels:publish`;
//! reading, acking, peeking and awaiting `channels:read`; listing either; creating and deleting
//! channels `tenant:admin`.

use tonic::{Request, Response, Status};
use tracing::Instrument as _;
use weft_auth::rpc::accept;
use weft_core::rfc3339;
use weft_core::{Error, Principal, Scope};
use weft_proto::v1;

use super::{ChannelHub, ChannelRecord, Message, ReadArgs, Target};

/// The `weft.v1.Channels` service over a [`ChannelHub`].
#[derive(Clone, Debug)]
pub struct ChannelsService {
    hub: ChannelHub,
}

impl ChannelsService {
    pub fn new(hub: ChannelHub) -> Self {
        Self { hub }
    }
}

fn require_admin(p: &Principal) -> Result<(), Status> {
    if p.administers(&p.tenant) {
        Ok(())
    } else {
        Err(Error::forbidden(
            "creating and deleting channels needs the `tenant:admin` or `admin` scope",
        )
        .into())
    }
}

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or_default()
}

/// The proto message for a channel.
pub fn channel_to_proto(c: ChannelRecord) -> v1::ChannelInfo {
    v1::ChannelInfo {
        name: c.name,
        scope: c.scope.as_str().to_owned(),
        ttl_seconds: unsigned(c.ttl_seconds),
        max_messages: unsigned(c.max_messages),
        created_at: rfc3339(c.created_at),
        updated_at: rfc3339(c.updated_at),
    }
}

/// The proto message for a message.
pub fn message_to_proto(m: Message) -> v1::ChannelMessage {
    v1::ChannelMessage {
        seq: unsigned(m.record.seq),
        cursor: m.cursor,
        payload_json: m.record.payload,
        published_at: rfc3339(m.record.published_at),
        expires_at: rfc3339(m.record.expires_at),
        published_by: m.record.published_by,
    }
}

/// The span of one RPC (its tenant recorded by `accept`). Never carries content.
fn span(rpc: &'static str) -> tracing::Span {
    tracing::info_span!("channels", rpc, tenant = tracing::field::Empty)
}

fn target<'a>(agent: Option<&'a str>, user: Option<&'a str>) -> Target<'a> {
    Target { agent, user }
}

#[tonic::async_trait]
impl v1::channels_server::Channels for ChannelsService {
    async fn put_channel(
        &self,
        request: Request<v1::PutChannelRequest>,
    ) -> Result<Response<v1::PutChannelResponse>, Status> {
        let (p, span) = accept(&request, span("put_channel"))?;
        require_admin(&p)?;
        let r = request.into_inner();
        self.hub
            .put(&p.tenant, &r.name, &r.scope, r.ttl_seconds, r.max_messages)
            .instrument(span)
            .await
            .map(|(c, created)| {
                Response::new(v1::PutChannelResponse {
                    channel: Some(channel_to_proto(c)),
                    created,
                })
            })
            .map_err(Status::from)
    }

    async fn delete_channel(
        &self,
        request: Request<v1::DeleteChannelRequest>,
    ) -> Result<Response<v1::DeleteChannelResponse>, Status> {
        let (p, span) = accept(&request, span("delete_channel"))?;
        require_admin(&p)?;
        let r = request.into_inner();
        self.hub
            .delete(&p.tenant, &r.name)
            .instrument(span)
            .await
            .map(|()| Response::new(v1::DeleteChannelResponse {}))
            .map_err(Status::from)
    }

    async fn list_channels(
        &self,
        request: Request<v1::ListChannelsRequest>,
    ) -> Result<Response<v1::ListChannelsResponse>, Status> {
        let (p, span) = accept(&request, span("list_channels"))?;
        if !p.has(Scope::ChannelsRead) && !p.has(Scope::ChannelsPublish) {
            return Err(Error::forbidden(
                "listing channels needs the `channels:read`, `channels:publish` or `tenant:admin` scope",
            )
            .into());
        }
        self.hub
            .list(&p.tenant)
            .instrument(span)
            .await
            .map(|list| {
                Response::new(v1::ListChannelsResponse {
                    channels: list.into_iter().map(channel_to_proto).collect(),
                })
            })
            .map_err(Status::from)
    }

    async fn publish(
        &self,
        request: Request<v1::PublishRequest>,
    ) -> Result<Response<v1::PublishResponse>, Status> {
        let (p, span) = accept(&request, span("publish"))?;
        let r = request.into_inner();
        self.hub
            .publish(
                &p,
                &r.name,
                target(r.agent.as_deref(), r.user.as_deref()),
                &r.payload_json,
                r.op_key.as_deref(),
            )
            .instrument(span)
            .await
            .map(|(published, cursor)| {
                Response::new(v1::PublishResponse {
                    seq: unsigned(published.seq),
                    cursor,
                    replayed: published.replayed,
                    published_at: rfc3339(published.published_at),
                })
            })
            .map_err(Status::from)
    }

    async fn read(
        &self,
        request: Request<v1::ReadRequest>,
    ) -> Result<Response<v1::ReadResponse>, Status> {
        let (p, span) = accept(&request, span("read"))?;
        let r = request.into_inner();
        self.hub
            .read(
                &p,
                &r.name,
                target(r.agent.as_deref(), r.user.as_deref()),
                ReadArgs {
                    cursor: r.cursor.as_deref(),
                    max: r.max,
                    wait_ms: r.wait_ms,
                    consumer: r.consumer.as_deref(),
                },
            )
            .instrument(span)
            .await
            .map(|out| {
                Response::new(v1::ReadResponse {
                    messages: out.messages.into_iter().map(message_to_proto).collect(),
                    cursor: out.cursor,
                })
            })
            .map_err(Status::from)
    }

    async fn ack(
        &self,
        request: Request<v1::AckRequest>,
    ) -> Result<Response<v1::AckResponse>, Status> {
        let (p, span) = accept(&request, span("ack"))?;
        let r = request.into_inner();
        self.hub
            .ack(
                &p,
                &r.name,
                target(r.agent.as_deref(), r.user.as_deref()),
                &r.cursor,
                r.consumer.as_deref(),
            )
            .instrument(span)
            .await
            .map(|cursor| Response::new(v1::AckResponse { cursor }))
            .map_err(Status::from)
    }

    async fn peek(
        &self,
        request: Request<v1::PeekRequest>,
    ) -> Result<Response<v1::PeekResponse>, Status> {
        let (p, span) = accept(&request, span("peek"))?;
        let r = request.into_inner();
        self.hub
            .peek(
                &p,
                &r.name,
                target(r.agent.as_deref(), r.user.as_deref()),
                r.max,
            )
            .instrument(span)
            .await
            .map(|found| {
                Response::new(v1::PeekResponse {
                    messages: found.into_iter().map(message_to_proto).collect(),
                })
            })
            .map_err(Status::from)
    }

    async fn await_channels(
        &self,
        request: Request<v1::AwaitRequest>,
    ) -> Result<Response<v1::AwaitResponse>, Status> {
        let (p, span) = accept(&request, span("await_channels"))?;
        let r = request.into_inner();
        self.hub
            .await_channels(
                &p,
                &r.channels,
                &r.mode,
                r.n,
                r.wait_ms,
                r.consumer.as_deref(),
                target(r.agent.as_deref(), r.user.as_deref()),
            )
            .instrument(span)
            .await
            .map(|out| {
                Response::new(v1::AwaitResponse {
                    satisfied: out.satisfied,
                    channels: out
                        .channels
                        .into_iter()
                        .map(|c| v1::ChannelReadiness {
                            channel: c.channel,
                            ready: c.ready,
                            cursor: c.cursor,
                        })
                        .collect(),
                })
            })
            .map_err(Status::from)
    }
}
