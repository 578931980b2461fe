//! weft's use of NATS: every subject, stream and consumer name is built here, under a configurable
//! prefix (fleets and tests share a server), along with run dispatch (a JetStream work queue), live
//! run events (core NATS) and usage records (a JetStream stream to the usage writer).

mod hub;
pub mod trace;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use hub::{HubHold, LiveBatch, LiveHub};

use async_nats::jetstream::{self, consumer, stream};
use serde::{Deserialize, Serialize};
use weft_core::{RunId, TenantId, UsageRecord};

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("nats: cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: async_nats::ConnectError,
    },
    #[error("nats: {0}")]
    Nats(String),
}

fn nats_err(e: impl std::fmt::Display) -> BusError {
    BusError::Nats(e.to_string())
}

/// The names of everything weft keeps in NATS, under one prefix.
#[derive(Clone, Debug)]
pub struct Names {
    prefix: String,
}

impl Names {
    /// `prefix` is letters, digits, `-` and `_` (checked by the config).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The work-queue stream holding run dispatches (stream names cannot contain `.`).
    pub fn dispatch_stream(&self) -> String {
        format!("{}_RUNS", self.prefix.to_uppercase())
    }

    /// The subject a dispatch is published on.
    pub fn dispatch_subject(&self) -> String {
        format!("{}.dispatch.runs", self.prefix)
    }

    /// The one durable pull consumer all executors share.
    pub fn executor_consumer(&self) -> String {
        format!("{}_executors", self.prefix)
    }

    /// Changes of agent definitions (core NATS), so launchers drop what they cached.
    pub fn agent_changes(&self) -> String {
        format!("{}.defs.agent.changed", self.prefix)
    }

    /// Live events of one run.
    pub fn run_events(&self, run: RunId) -> String {
        format!("{}.run.{run}.events", self.prefix)
    }

    /// The stream holding usage records until the writer has stored them.
    pub fn usage_stream(&self) -> String {
        format!("{}_USAGE", self.prefix.to_uppercase())
    }

    /// The subject a usage record is published on.
    pub fn usage_subject(&self) -> String {
        format!("{}.usage", self.prefix)
    }

    /// The one durable pull consumer every usage writer (one per gateway replica) shares.
    pub fn usage_consumer(&self) -> String {
        format!("{}_usage_writer", self.prefix)
    }

    /// Wake-ups of one channel partition: ids and a key hash only, so no caller text in a subject.
    pub fn channel_wakeup(&self, channel: i64, partition: u64) -> String {
        format!("{}.channel.{channel}.{partition:016x}", self.prefix)
    }
}

/// "Run this run": what an executor pulls. The run row holds everything else.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    pub run_id: RunId,
    pub tenant: TenantId,
}

/// A run event as it travels live. `seq` is the transcript position of a persisted event; a
/// live-only event (`text_delta`) carries the seq of the last persisted event before it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LiveEvent {
    pub seq: i64,
    pub kind: String,
    /// Whether the event is in the transcript (false for `text_delta`).
    pub persisted: bool,
    pub data: serde_json::Value,
}

/// How dispatch behaves; set once by whoever creates the consumer.
#[derive(Clone, Copy, Debug)]
pub struct DispatchPolicy {
    /// Redelivery happens when an executor neither acks nor reports progress for this long.
    pub ack_wait: Duration,
    /// Deliveries of one message before JetStream gives up on it.
    pub max_deliver: i64,
    /// Messages delivered but not yet acked, across all executors.
    pub max_ack_pending: i64,
}

/// How long the usage stream keeps a record; only has to outlast a database or writer outage.
pub const USAGE_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Window in which JetStream stores a re-published record id once (the table's key does after).
pub const USAGE_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// How long the writer may hold a usage record without acking it before JetStream redelivers it.
pub const USAGE_ACK_WAIT: Duration = Duration::from_secs(30);

/// JetStream's answer to a usage message sent with [`Bus::send_usage_message`].
pub struct UsageAck(jetstream::context::PublishAckFuture);

impl UsageAck {
    /// Waits until JetStream has stored the record (or refused it).
    pub async fn stored(self) -> Result<(), BusError> {
        self.0.await.map(|_| ()).map_err(nats_err)
    }
}

/// A connection to NATS with weft's names.
#[derive(Clone, Debug)]
pub struct Bus {
    client: async_nats::Client,
    js: jetstream::Context,
    names: Names,
    /// Disconnections and slow-consumer drops so far (see [`Bus::losses`]).
    losses: Arc<AtomicU64>,
}

/// An agent whose definition changed ([`Bus::publish_agent_changed`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentChanged {
    pub tenant: String,
    pub name: String,
}

impl Bus {
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, BusError> {
        let losses = Arc::new(AtomicU64::new(0));
        let counted = losses.clone();
        let client = async_nats::ConnectOptions::new()
            .name("weft")
            .event_callback(move |event| {
                let counted = counted.clone();
                async move {
                    // A reconnection may have missed an announcement too.
                    if matches!(
                        event,
                        async_nats::Event::Disconnected
                            | async_nats::Event::Connected
                            | async_nats::Event::SlowConsumer(_)
                    ) {
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .connect(url)
            .await
            .map_err(|source| BusError::Connect {
                url: url.to_owned(),
                source,
            })?;
        Ok(Self {
            js: jetstream::new(client.clone()),
            client,
            names: Names::new(prefix),
            losses,
        })
    }

    /// How many times core NATS messages may have been lost (a disconnection, a slow subscriber).
    pub fn losses(&self) -> u64 {
        self.losses.load(Ordering::Relaxed)
    }

    /// Tells every launcher that `name`'s active version may have changed (at most once; returns
    /// once the server has it, or after a second without NATS).
    pub async fn publish_agent_changed(&self, tenant: &str, name: &str) -> Result<(), BusError> {
        let payload = serde_json::to_vec(&AgentChanged {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
        })
        .map_err(nats_err)?;
        let send = async {
            self.client
                .publish(self.names.agent_changes(), payload.into())
                .await
                .map_err(nats_err)?;
            self.client.flush().await.map_err(nats_err)
        };
        tokio::time::timeout(Duration::from_secs(1), send)
            .await
            .unwrap_or_else(|_| Err(BusError::Nats("not sent within 1 s".into())))
    }

    /// Subscribes to changes of agent definitions (registered with the server on return).
    pub async fn subscribe_agent_changes(&self) -> Result<async_nats::Subscriber, BusError> {
        let sub = self
            .client
            .subscribe(self.names.agent_changes())
            .await
            .map_err(nats_err)?;
        self.client.flush().await.map_err(nats_err)?;
        Ok(sub)
    }

    pub fn names(&self) -> &Names {
        &self.names
    }

    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// Creates the dispatch stream if it is missing. Idempotent; every replica calls it.
    pub async fn ensure_dispatch_stream(&self) -> Result<stream::Stream, BusError> {
        self.ensure_stream(stream::Config {
            name: self.names.dispatch_stream(),
            subjects: vec![self.names.dispatch_subject()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
    }

    /// `get_or_create_stream`, safe when replicas start together: the loser of a simultaneous
    /// create gets an error ("subjects overlap", NATS 2.9) and takes the winner's stream.
    async fn ensure_stream(&self, config: stream::Config) -> Result<stream::Stream, BusError> {
        let name = config.name.clone();
        match self.js.get_or_create_stream(config).await {
            Ok(s) => Ok(s),
            Err(e) => self.js.get_stream(&name).await.map_err(|_| nats_err(e)),
        }
    }

    /// The executors' shared durable pull consumer, created if missing (else kept as it is).
    pub async fn dispatch_consumer(
        &self,
        policy: DispatchPolicy,
    ) -> Result<consumer::PullConsumer, BusError> {
        let stream = self.ensure_dispatch_stream().await?;
        let name = self.names.executor_consumer();
        stream
            .get_or_create_consumer(
                &name,
                consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: policy.ack_wait,
                    max_deliver: policy.max_deliver,
                    max_ack_pending: policy.max_ack_pending,
                    ..Default::default()
                },
            )
            .await
            .map_err(nats_err)
    }

    /// The executors' backlog: dispatches no executor has taken yet, and dispatches taken but not
    /// yet acked (runs being worked, or waiting for a redelivery).
    pub async fn dispatch_backlog(&self) -> Result<(u64, u64), BusError> {
        let stream = self
            .js
            .get_stream_no_info(self.names.dispatch_stream())
            .await
            .map_err(nats_err)?;
        let info = stream
            .consumer_info(self.names.executor_consumer())
            .await
            .map_err(nats_err)?;
        Ok((
            info.num_pending,
            u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX),
        ))
    }

    /// Publishes a dispatch and waits for JetStream to store it. The current span's trace
    /// context goes in its headers ([`trace`]): the executor's `run` span joins that trace.
    pub async fn dispatch(&self, d: &Dispatch) -> Result<(), BusError> {
        let payload = serde_json::to_vec(d).map_err(nats_err)?;
        let subject = self.names.dispatch_subject();
        let sent = match trace::headers() {
            Some(h) => {
                self.js
                    .publish_with_headers(subject, h, payload.into())
                    .await
            }
            None => self.js.publish(subject, payload.into()).await,
        };
        sent.map_err(nats_err)?.await.map_err(nats_err)?;
        Ok(())
    }

    /// Creates the usage stream if missing (idempotent). Retention by age, not acks, so a consumer
    /// mistake never loses a record.
    pub async fn ensure_usage_stream(&self) -> Result<stream::Stream, BusError> {
        self.ensure_stream(stream::Config {
            name: self.names.usage_stream(),
            subjects: vec![self.names.usage_subject()],
            retention: stream::RetentionPolicy::Limits,
            storage: stream::StorageType::File,
            max_age: USAGE_MAX_AGE,
            duplicate_window: USAGE_DUPLICATE_WINDOW,
            ..Default::default()
        })
        .await
    }

    /// Publishes one usage record and waits for JetStream to store it (then it survives a crash).
    /// The record id is the message id, so a retry is stored once.
    pub async fn publish_usage(&self, rec: &UsageRecord) -> Result<(), BusError> {
        for m in usage_messages(std::slice::from_ref(rec), USAGE_MESSAGE_BYTES)? {
            self.publish_usage_message(&m).await?;
        }
        Ok(())
    }

    /// Publishes one usage message and waits for JetStream to store it; the message id dedupes a
    /// retry. A missing stream is created and the publish retried once.
    pub async fn publish_usage_message(&self, m: &UsageMessage) -> Result<(), BusError> {
        let publish = || {
            self.js.send_publish(
                self.names.usage_subject(),
                jetstream::message::PublishMessage::build()
                    .payload(m.payload.clone())
                    .message_id(&m.id),
            )
        };
        let stored = || async { publish().await?.await.map(|_| ()) };
        match stored().await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == jetstream::context::PublishErrorKind::StreamNotFound => {
                self.ensure_usage_stream().await?;
                stored().await.map_err(nats_err)
            }
            Err(e) => Err(nats_err(e)),
        }
    }

    /// Queues a usage message without waiting for JetStream; [`Bus::flush`] writes it out. On an
    /// error from the returned [`UsageAck`], publish it again with [`Bus::publish_usage_message`].
    pub async fn send_usage_message(&self, m: &UsageMessage) -> Result<UsageAck, BusError> {
        let ack = self
            .js
            .send_publish(
                self.names.usage_subject(),
                jetstream::message::PublishMessage::build()
                    .payload(m.payload.clone())
                    .message_id(&m.id),
            )
            .await
            .map_err(nats_err)?;
        Ok(UsageAck(ack))
    }

    /// Writes everything queued on the NATS connection to its socket.
    pub async fn flush(&self) -> Result<(), BusError> {
        self.client.flush().await.map_err(nats_err)
    }

    /// The usage writers' shared durable pull consumer (explicit acks, redelivery after
    /// [`USAGE_ACK_WAIT`], no delivery limit), created with the stream if missing.
    pub async fn usage_consumer(&self) -> Result<consumer::PullConsumer, BusError> {
        let stream = self.ensure_usage_stream().await?;
        let name = self.names.usage_consumer();
        stream
            .get_or_create_consumer(
                &name,
                consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: USAGE_ACK_WAIT,
                    max_deliver: -1,
                    max_ack_pending: 100_000,
                    ..Default::default()
                },
            )
            .await
            .map_err(nats_err)
    }

    /// Publishes `run`'s live events (at most once; watchers fill gaps from Postgres) as one
    /// message (an object, or an array in seq order); big batches split, an oversize event skipped.
    pub async fn publish_events(&self, run: RunId, evs: &[LiveEvent]) -> Result<(), BusError> {
        if evs.is_empty() {
            return Ok(());
        }
        let payload = live_payload(evs).map_err(nats_err)?;
        if evs.len() > 1 && payload.len() > self.client.max_payload() {
            let mut failed = None;
            for ev in evs {
                let sent = match live_payload(std::slice::from_ref(ev)) {
                    Ok(payload) => self
                        .client
                        .publish(self.names.run_events(run), payload.into())
                        .await
                        .map_err(nats_err),
                    Err(e) => Err(nats_err(e)),
                };
                if let Err(e) = sent {
                    failed.get_or_insert(e);
                }
            }
            return failed.map_or(Ok(()), Err);
        }
        self.client
            .publish(self.names.run_events(run), payload.into())
            .await
            .map_err(nats_err)
    }

    /// Subscribes to `run`'s live events; registered with the server (flushed) on return.
    pub async fn subscribe_events(&self, run: RunId) -> Result<async_nats::Subscriber, BusError> {
        let sub = self
            .client
            .subscribe(self.names.run_events(run))
            .await
            .map_err(nats_err)?;
        self.client.flush().await.map_err(nats_err)?;
        Ok(sub)
    }

    /// Announces a new message at `seq` in a channel partition (at most once; readers re-read).
    pub async fn publish_channel_wakeup(
        &self,
        channel: i64,
        partition: u64,
        seq: i64,
    ) -> Result<(), BusError> {
        self.client
            .publish(
                self.names.channel_wakeup(channel, partition),
                seq.to_string().into(),
            )
            .await
            .map_err(nats_err)
    }

    /// Subscribes to the wake-ups of channel partitions, one subscription each, registered with the
    /// server (one flush) on return.
    pub async fn subscribe_channel_wakeups(
        &self,
        partitions: &[(i64, u64)],
    ) -> Result<Vec<async_nats::Subscriber>, BusError> {
        let mut subs = Vec::with_capacity(partitions.len());
        for &(channel, partition) in partitions {
            subs.push(
                self.client
                    .subscribe(self.names.channel_wakeup(channel, partition))
                    .await
                    .map_err(nats_err)?,
            );
        }
        self.client.flush().await.map_err(nats_err)?;
        Ok(subs)
    }

    /// Whether the server answers.
    pub async fn ping(&self) -> Result<(), BusError> {
        self.client.flush().await.map_err(nats_err)
    }
}

/// The payload of a live message carrying `evs` (see [`Bus::publish_events`]).
pub fn live_payload(evs: &[LiveEvent]) -> Result<Vec<u8>, serde_json::Error> {
    match evs {
        [ev] => serde_json::to_vec(ev),
        evs => serde_json::to_vec(evs),
    }
}

/// Decodes the live events of a NATS message payload: one event (a JSON object) or several (a
/// JSON array, in seq order). Empty when the payload is neither.
pub fn decode_events(payload: &[u8]) -> Vec<LiveEvent> {
    let many = payload
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[');
    if many {
        serde_json::from_slice(payload).unwrap_or_default()
    } else {
        serde_json::from_slice(payload).map_or_else(|_| Vec::new(), |ev| vec![ev])
    }
}

/// Decodes a dispatch from a JetStream message payload.
pub fn decode_dispatch(payload: &[u8]) -> Option<Dispatch> {
    serde_json::from_slice(payload).ok()
}

/// The most bytes one usage message carries: far below NATS's default 1 MiB payload limit.
pub const USAGE_MESSAGE_BYTES: usize = 256 * 1024;

/// One JetStream message of usage records: a lone record as an object, several as an array.
#[derive(Clone, Debug)]
pub struct UsageMessage {
    /// The message id: its first record's id.
    pub id: String,
    pub payload: bytes::Bytes,
    /// How many records it carries.
    pub records: usize,
}

/// `recs` as usage messages of at most `max_bytes` each, in order (an oversize record alone).
pub fn usage_messages(
    recs: &[UsageRecord],
    max_bytes: usize,
) -> Result<Vec<UsageMessage>, BusError> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut array: Vec<u8> = Vec::new();
    let seal = |array: &mut Vec<u8>, first: &UsageRecord, n: usize, out: &mut Vec<UsageMessage>| {
        let payload = if n == 1 {
            // A lone record: the bare object, without the brackets.
            bytes::Bytes::copy_from_slice(&array[1..])
        } else {
            array.push(b']');
            bytes::Bytes::from(std::mem::take(array))
        };
        array.clear();
        out.push(UsageMessage {
            id: first.id.to_string(),
            payload,
            records: n,
        });
    };
    for (i, rec) in recs.iter().enumerate() {
        let one = serde_json::to_vec(rec).map_err(nats_err)?;
        if i > start && array.len() + 1 + one.len() + 1 > max_bytes {
            seal(&mut array, &recs[start], i - start, &mut out);
            start = i;
        }
        array.push(if i == start { b'[' } else { b',' });
        array.extend_from_slice(&one);
    }
    if start < recs.len() {
        seal(&mut array, &recs[start], recs.len() - start, &mut out);
    }
    Ok(out)
}

/// Decodes a usage message (one record or an array), each record on its own so one bad record
/// does not take the others with it. `Err` when the payload is neither.
pub fn decode_usage(
    payload: &[u8],
) -> Result<Vec<Result<UsageRecord, serde_json::Error>>, serde_json::Error> {
    // By the first byte, not `#[serde(untagged)]`, which would hide the record's own error.
    match payload.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => Ok(
            serde_json::from_slice::<Vec<&serde_json::value::RawValue>>(payload)?
                .into_iter()
                .map(|raw| serde_json::from_str(raw.get()))
                .collect(),
        ),
        _ => serde_json::from_slice::<UsageRecord>(payload).map(|r| vec![Ok(r)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u64) -> UsageRecord {
        UsageRecord {
            id: serde_json::from_str(&format!("\"00000000-0000-7000-8000-{n:012}\"")).unwrap(),
            at_ms: 1,
            tenant: "acme".into(),
            subject: "svc".into(),
            token_id: None,
            kind: "chat".into(),
            provider: "p".into(),
            model: "m".into(),
            requested_model: "m".into(),
            input_tokens: n,
            output_tokens: n,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            latency_ms: 1,
            cost_usd: 0.0,
            outcome: "ok".into(),
        }
    }

    fn decoded(m: &UsageMessage) -> Vec<UsageRecord> {
        decode_usage(&m.payload)
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn usage_messages_carry_one_record_or_a_batch_within_the_size_limit() {
        let one = vec![record(1)];
        let ms = usage_messages(&one, USAGE_MESSAGE_BYTES).unwrap();
        assert_eq!(ms.len(), 1);
        assert_eq!(
            ms[0].payload[0], b'{',
            "one record is a bare object, as before batching"
        );
        assert_eq!(
            (ms[0].id.as_str(), ms[0].records),
            (one[0].id.to_string().as_str(), 1)
        );
        assert_eq!(decoded(&ms[0]), one);

        let many: Vec<_> = (1..=10).map(record).collect();
        let ms = usage_messages(&many, USAGE_MESSAGE_BYTES).unwrap();
        assert_eq!(ms.len(), 1);
        assert_eq!(decoded(&ms[0]), many);

        // A limit of about three records: messages of at most three, in order, every record
        // once, each message named by its first record; a record over the limit goes alone.
        let size = serde_json::to_vec(&many[0]).unwrap().len();
        let ms = usage_messages(&many, 3 * size + 4).unwrap();
        assert!(
            ms.iter()
                .all(|m| m.payload.len() <= 3 * size + 4 && m.records <= 3)
        );
        assert_eq!(ms.iter().flat_map(decoded).collect::<Vec<_>>(), many);
        assert!(ms.iter().all(|m| m.id == decoded(m)[0].id.to_string()));
        let ms = usage_messages(&many[..2], 10).unwrap();
        assert_eq!(ms.iter().map(|m| m.records).collect::<Vec<_>>(), [1, 1]);
    }

    #[test]
    fn live_messages_carry_one_event_as_an_object_or_a_steps_events_in_order() {
        let ev = |seq, kind: &str| LiveEvent {
            seq,
            kind: kind.into(),
            persisted: seq > 0,
            data: serde_json::json!({"seq": seq}),
        };
        let one = [ev(3, "provider_chosen")];
        let payload = live_payload(&one).unwrap();
        assert_eq!(
            payload[0], b'{',
            "one event is a bare object, as before batching"
        );
        assert_eq!(decode_events(&payload), one);
        let step = [
            ev(4, "assistant_message"),
            ev(5, "tool_call"),
            ev(6, "usage"),
        ];
        let payload = live_payload(&step).unwrap();
        assert_eq!(payload[0], b'[');
        assert_eq!(decode_events(&payload), step);
        assert_eq!(decode_events(b" \n[]"), []);
        assert!(decode_events(b"{\"seq\": \"x\"}").is_empty());
        assert!(decode_events(b"[1, 2]").is_empty());
        assert!(decode_events(b"").is_empty());
    }

    #[test]
    fn a_bad_record_in_a_batch_does_not_take_the_others_with_it() {
        let good = record(1);
        let good_json = serde_json::to_string(&good).unwrap();
        let payload = format!(r#"[{good_json}, {{"id": 1}}, {good_json}]"#);
        let recs = decode_usage(payload.as_bytes()).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].as_ref().unwrap(), &good);
        assert!(
            recs[1]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("invalid type")
        );
        assert_eq!(recs[2].as_ref().unwrap(), &good);
        assert!(decode_usage(b"{not json").is_err());
        assert!(decode_usage(b"[1, 2").is_err());
    }

    #[test]
    fn names_share_the_prefix() {
        let n = Names::new("t1");
        assert_eq!(n.dispatch_stream(), "T1_RUNS");
        assert_eq!(n.dispatch_subject(), "t1.dispatch.runs");
        assert_eq!(n.executor_consumer(), "t1_executors");
        let r = RunId::new();
        assert_eq!(n.run_events(r), format!("t1.run.{r}.events"));
        assert_eq!(n.usage_stream(), "T1_USAGE");
        assert_eq!(n.usage_subject(), "t1.usage");
        assert_eq!(n.usage_consumer(), "t1_usage_writer");
        assert_eq!(
            n.channel_wakeup(42, 0xabc),
            "t1.channel.42.0000000000000abc"
        );
    }
}
