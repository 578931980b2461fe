//! Channels: named, tenant-scoped message streams with per-consumer cursors, served over gRPC
//! (`weft.v1.Channels`). Messages and cursors live in Postgres; a publish wakes long-polling
//! readers on every substrate replica through a core NATS subject per partition (built in
//! `weft_bus`). A waiting reader subscribes to that subject *before* it reads again, so a
//! publish between its first read and its wait is never missed.
//!
//! Layers: [`grpc`] (authorization, prost conversion) → [`ChannelHub`] (the rules of each
//! call) → [`ChannelStore`] (Postgres); [`rules`] holds the checks that need no database.

pub mod grpc;
pub mod rules;
pub mod store;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use weft_bus::Bus;
use weft_core::{Error, Principal, Scope, TenantId};
use weft_store::StoreError;

pub use store::{Acked, ChannelRecord, ChannelStore, MessageRecord, Part, Published, PutOutcome};

use rules::{AwaitMode, ChannelScope, Cursor, Partition};

/// How often expired messages (and old publish op keys) are swept, and how many one sweep
/// deletes at most.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);
const SWEEP_BATCH: i64 = 10_000;

fn db(what: &'static str) -> impl Fn(StoreError) -> Error {
    move |e| {
        tracing::error!(error = %e, "{what} failed");
        e.to_api()
    }
}

fn no_channel(field: &str, name: &str) -> Error {
    Error::not_found(format!(
        "no channel `{name}` in your tenant; a tenant admin creates it with PUT /v1/channels/{name} or declares it in substrate.channels"
    ))
    .with_param(field)
}

/// A message with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub record: MessageRecord,
    /// The position just after this message.
    pub cursor: String,
}

/// What a read returns.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadOut {
    pub messages: Vec<Message>,
    /// Where the next read starts.
    pub cursor: String,
}

/// Which stream of a channel a call addresses, as the caller gave it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Target<'a> {
    /// The agent whose stream (channels of scope `agent`).
    pub agent: Option<&'a str>,
    /// Another subject's stream (channels of scope `user`; tenant admins only).
    pub user: Option<&'a str>,
}

/// A read.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadArgs<'a> {
    pub cursor: Option<&'a str>,
    pub max: Option<u32>,
    pub wait_ms: Option<u32>,
    pub consumer: Option<&'a str>,
}

/// One channel's state in an `await` answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Readiness {
    pub channel: String,
    pub ready: bool,
    /// The consumer's committed cursor.
    pub cursor: String,
}

/// What an `await` returns.
#[derive(Clone, Debug, PartialEq)]
pub struct AwaitOut {
    pub satisfied: bool,
    pub channels: Vec<Readiness>,
}

/// A resolved channel and partition.
struct Opened {
    channel: ChannelRecord,
    partition: Partition,
}

impl Opened {
    fn part<'a>(&'a self, tenant: &'a TenantId) -> Part<'a> {
        Part {
            tenant,
            channel: self.channel.id,
            partition: &self.partition.key,
        }
    }

    fn cursor(&self, seq: i64) -> String {
        Cursor {
            channel: self.channel.id,
            partition: self.partition.hash,
            seq,
        }
        .encode()
    }

    fn message(&self, record: MessageRecord) -> Message {
        Message {
            cursor: self.cursor(record.seq),
            record,
        }
    }
}

/// The channels of every tenant: the store, the bus for wake-ups, and a bound on waiting
/// readers. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ChannelHub {
    store: ChannelStore,
    bus: Bus,
    waiters: Arc<Semaphore>,
    max_waiters: usize,
    /// Long-polls held per tenant and per principal, so that no one caller (or tenant) can
    /// hold the whole pool: each holds at most a quarter of it, each tenant half.
    shares: Arc<std::sync::Mutex<HashMap<String, usize>>>,
}

/// A consumer (a cursor a read commits) belongs to whoever it names: the caller's subject (the
/// default) or a consumer of its own under it (`<subject>/<name>`), or, on a run's own calls,
/// the run's agent. Naming anyone else's needs `tenant:admin`: otherwise a reader could move
/// another reader's cursor and make its next read silently skip messages.
fn consumer_of<'a>(p: &'a Principal, consumer: Option<&'a str>) -> Result<&'a str, Error> {
    let Some(c) = consumer else {
        return Ok(&p.subject);
    };
    rules::validate_key("consumer", c)?;
    let own = c == p.subject
        || c.strip_prefix(p.subject.as_str())
            .is_some_and(|rest| rest.len() > 1 && rest.starts_with('/'))
        || p.agent.as_deref() == Some(c);
    if own || p.administers(&p.tenant) {
        return Ok(c);
    }
    Err(Error::forbidden(format!(
        "consumer `{}` is not yours: leave `consumer` out to use your own (`{}`), or name one under it (`{}/<name>`); another subject's or an agent's consumer needs the `tenant:admin` scope",
        c.escape_default(),
        p.subject.escape_default(),
        p.subject.escape_default()
    ))
    .with_param("consumer"))
}

/// The key a publish's `op_key` is stored under: a run's own keys (`<run id>:<tool use id>`)
/// as they are, anyone else's inside its subject's namespace, so that no token can claim a
/// key first and turn a run's publish (or another subject's) into a "replay" that stores
/// nothing.
fn op_key_of(p: &Principal, op_key: &str) -> String {
    if p.agent.is_some() {
        op_key.to_owned()
    } else {
        // The subject's length first: subjects may hold `:`, so no two (subject, key) pairs
        // meet in one stored key.
        format!("sub:{}:{}:{op_key}", p.subject.len(), p.subject)
    }
}

/// A long-poll's place in the pool and in its holders' shares; both are given back on drop.
struct Waiter {
    _permit: OwnedSemaphorePermit,
    shares: Arc<std::sync::Mutex<HashMap<String, usize>>>,
    keys: [String; 2],
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Ok(mut m) = self.shares.lock() {
            for k in &self.keys {
                if let Some(n) = m.get_mut(k) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        m.remove(k);
                    }
                }
            }
        }
    }
}

impl ChannelHub {
    /// `max_waiters` bounds the long-polls (reads and awaits) this replica holds at once.
    /// The NATS connection the hub wakes readers through.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    pub fn new(store: ChannelStore, bus: Bus, max_waiters: usize) -> Self {
        Self {
            store,
            bus,
            waiters: Arc::new(Semaphore::new(max_waiters)),
            max_waiters,
            shares: Arc::default(),
        }
    }

    /// The most long-polls one principal may hold on this replica: a quarter of the pool.
    pub fn principal_share(&self) -> usize {
        (self.max_waiters / 4).max(1)
    }

    /// The most long-polls one tenant may hold on this replica: half of the pool.
    pub fn tenant_share(&self) -> usize {
        (self.max_waiters / 2).max(1)
    }

    pub fn store(&self) -> &ChannelStore {
        &self.store
    }

    /// Long-polls of this hub in their wait now.
    pub fn waiting(&self) -> usize {
        self.max_waiters - self.waiters.available_permits()
    }

    /// A place for `p`'s long-poll: 429 past its own or its tenant's share, 503 when the pool
    /// is full.
    fn waiter(&self, p: &Principal) -> Result<Waiter, Error> {
        let tenant_key = format!("t:{}", p.tenant);
        let principal_key = format!(
            "p:{}\n{}\n{}",
            p.tenant,
            p.subject,
            p.agent.as_deref().unwrap_or_default()
        );
        let over = |held: usize, share: usize, whose: &str| {
            Error::new(
                weft_core::ErrorCode::RateLimited,
                format!(
                    "{whose} already holds {held} long-polls on this substrate, its whole share ({share} of substrate.max_channel_waiters = {}); wait for one to return, or read without `wait_ms`",
                    self.max_waiters
                ),
            )
            .with_retry_after(Duration::from_secs(1))
        };
        let mut shares = self.shares.lock().map_err(|_| Error::internal())?;
        let held_p = shares.get(&principal_key).copied().unwrap_or(0);
        if held_p >= self.principal_share() {
            return Err(over(held_p, self.principal_share(), "this caller"));
        }
        let held_t = shares.get(&tenant_key).copied().unwrap_or(0);
        if held_t >= self.tenant_share() {
            return Err(over(held_t, self.tenant_share(), "your tenant"));
        }
        let permit = self.global_waiter()?;
        *shares.entry(principal_key.clone()).or_default() += 1;
        *shares.entry(tenant_key.clone()).or_default() += 1;
        drop(shares);
        Ok(Waiter {
            _permit: permit,
            shares: self.shares.clone(),
            keys: [principal_key, tenant_key],
        })
    }

    fn global_waiter(&self) -> Result<OwnedSemaphorePermit, Error> {
        self.waiters.clone().try_acquire_owned().map_err(|_| {
            Error::unavailable(format!(
                "{} readers are already waiting on this substrate (substrate.max_channel_waiters); retry shortly",
                self.max_waiters
            ))
            .with_retry_after(Duration::from_secs(1))
        })
    }

    async fn open(
        &self,
        p: &Principal,
        field: &str,
        name: &str,
        target: Target<'_>,
    ) -> Result<Opened, Error> {
        rules::validate_name(field, name)?;
        // The stream's names are checked before the lookup, so bad input is a 400 whether or
        // not the channel exists.
        if let Some(agent) = target.agent {
            rules::validate_agent(agent)?;
        }
        if let Some(user) = target.user {
            rules::validate_key("user", user)?;
        }
        let channel = self
            .store
            .get(&p.tenant, name)
            .await
            .map_err(db("channel lookup"))?
            .ok_or_else(|| no_channel(field, name))?;
        let partition = rules::partition(channel.scope, p, target.agent, target.user)?;
        Ok(Opened { channel, partition })
    }

    /// Creates a channel or changes its bounds (tenant admins). `Ok((channel, created))`.
    pub async fn put(
        &self,
        tenant: &TenantId,
        name: &str,
        scope: &str,
        ttl_seconds: Option<u64>,
        max_messages: Option<u64>,
    ) -> Result<(ChannelRecord, bool), Error> {
        rules::validate_name("name", name)?;
        let scope = ChannelScope::parse("scope", scope)?;
        let bounds = rules::bounds("", ttl_seconds, max_messages)?;
        match self
            .store
            .put(tenant, name, scope, bounds)
            .await
            .map_err(db("channel put"))?
        {
            PutOutcome::Created(c) => Ok((c, true)),
            PutOutcome::Updated(c) => Ok((c, false)),
            PutOutcome::ScopeDiffers(c) => Err(Error::new(
                weft_core::ErrorCode::Conflict,
                format!(
                    "channel `{name}` has scope `{}`; a channel's scope cannot change: delete it and create it again",
                    c.scope.as_str()
                ),
            )
            .with_param("scope")),
            PutOutcome::TooMany => Err(Error::new(
                weft_core::ErrorCode::Conflict,
                format!(
                    "your tenant has {} channels, the most it may have; delete one first",
                    rules::MAX_CHANNELS_PER_TENANT
                ),
            )),
        }
    }

    /// Deletes a channel with its messages and cursors (tenant admins).
    pub async fn delete(&self, tenant: &TenantId, name: &str) -> Result<(), Error> {
        rules::validate_name("name", name)?;
        if self
            .store
            .delete(tenant, name)
            .await
            .map_err(db("channel delete"))?
        {
            Ok(())
        } else {
            Err(no_channel("name", name))
        }
    }

    /// The tenant's channels, by name.
    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<ChannelRecord>, Error> {
        self.store.list(tenant).await.map_err(db("channel list"))
    }

    /// Publishes a JSON payload; with `op_key`, at most once per key and partition within
    /// [`store::OP_RETENTION_DAYS`] (even after the message was trimmed or expired). Wakes the
    /// partition's waiting readers after the commit.
    pub async fn publish(
        &self,
        p: &Principal,
        name: &str,
        target: Target<'_>,
        payload_json: &str,
        op_key: Option<&str>,
    ) -> Result<(Published, String), Error> {
        p.require(Scope::ChannelsPublish)?;
        let payload = rules::payload(payload_json)?;
        if let Some(k) = op_key {
            rules::validate_key("op_key", k)?;
        }
        let o = self.open(p, "name", name, target).await?;
        let by = format!("{}/{}", p.tenant, p.subject);
        let op_key = op_key.map(|k| op_key_of(p, k));
        let published = self
            .store
            .publish(
                o.part(&p.tenant),
                &o.channel,
                &payload,
                op_key.as_deref(),
                &by,
            )
            .await
            .map_err(db("channel publish"))?
            .ok_or_else(|| no_channel("name", name))?;
        if !published.replayed
            && let Err(e) = self
                .bus
                .publish_channel_wakeup(o.channel.id, o.partition.hash, published.seq)
                .await
        {
            // Readers still find the message on their next read; only the wake-up is lost.
            tracing::warn!(error = %e, "channel wake-up not published");
        }
        let cursor = o.cursor(published.seq);
        Ok((published, cursor))
    }

    /// Messages after the given cursor (or the consumer's committed one); waits up to
    /// `wait_ms` for one when there is none.
    pub async fn read(
        &self,
        p: &Principal,
        name: &str,
        target: Target<'_>,
        args: ReadArgs<'_>,
    ) -> Result<ReadOut, Error> {
        p.require(Scope::ChannelsRead)?;
        let max = rules::max_count(args.max, rules::DEFAULT_READ)?;
        let wait = rules::wait_ms(args.wait_ms)?;
        let consumer = consumer_of(p, args.consumer)?;
        let given = args
            .cursor
            .map(|c| Cursor::decode("cursor", c))
            .transpose()?;
        let o = self.open(p, "name", name, target).await?;
        let part = o.part(&p.tenant);
        let after = match given {
            Some(c) => {
                c.check("cursor", o.channel.id, o.partition.hash, name)?;
                c.seq
            }
            None => self
                .store
                .committed(part, consumer)
                .await
                .map_err(db("channel cursor"))?,
        };
        let read = || async {
            self.store
                .read_after(part, after, max)
                .await
                .map_err(db("channel read"))
        };
        let mut found = read().await?;
        if found.is_empty() {
            let head = self.store.head(part).await.map_err(db("channel head"))?;
            if after > head {
                return Err(Error::invalid(format!(
                    "`cursor` is ahead of channel `{name}`; pass back a cursor a read returned"
                ))
                .with_param("cursor"));
            }
        }
        if found.is_empty() && wait > 0 {
            let _permit = self.waiter(p)?;
            let deadline = Instant::now() + Duration::from_millis(u64::from(wait));
            // Subscribe first, then read again: a publish after this read wakes the wait.
            let mut subs = self
                .bus
                .subscribe_channel_wakeups(&[(o.channel.id, o.partition.hash)])
                .await
                .map_err(|e| {
                    tracing::error!(error = %e, "channel wake-up subscription failed");
                    Error::unavailable("cannot wait for messages now (NATS); retry shortly")
                })?;
            let mut wakeups = futures::stream::select_all(subs.drain(..));
            loop {
                found = read().await?;
                if !found.is_empty() {
                    break;
                }
                match tokio::time::timeout_at(deadline, wakeups.next()).await {
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
        }
        let cursor = found
            .last()
            .map_or_else(|| o.cursor(after), |m| o.cursor(m.seq));
        Ok(ReadOut {
            messages: found.into_iter().map(|m| o.message(m)).collect(),
            cursor,
        })
    }

    /// Commits the consumer's cursor. Refuses a cursor of another channel or stream, one
    /// ahead of the channel, and one behind the committed cursor.
    pub async fn ack(
        &self,
        p: &Principal,
        name: &str,
        target: Target<'_>,
        cursor: &str,
        consumer: Option<&str>,
    ) -> Result<String, Error> {
        p.require(Scope::ChannelsRead)?;
        let consumer = consumer_of(p, consumer)?;
        let c = Cursor::decode("cursor", cursor)?;
        let o = self.open(p, "name", name, target).await?;
        c.check("cursor", o.channel.id, o.partition.hash, name)?;
        let part = o.part(&p.tenant);
        let head = self.store.head(part).await.map_err(db("channel head"))?;
        if c.seq > head {
            return Err(Error::invalid(format!(
                "`cursor` is ahead of channel `{name}`; ack a cursor a read returned"
            ))
            .with_param("cursor"));
        }
        match self
            .store
            .ack(part, consumer, c.seq)
            .await
            .map_err(db("channel ack"))?
        {
            Acked::Committed(seq) => Ok(o.cursor(seq)),
            Acked::Behind(committed) => Err(Error::invalid(format!(
                "`cursor` is behind the committed cursor of consumer `{consumer}` (at message {committed}, cursor `{}`); acks only move forward: ack that cursor or a later one",
                o.cursor(committed)
            ))
            .with_param("cursor")),
            Acked::Gone => Err(no_channel("name", name)),
        }
    }

    /// The newest messages, moving no cursor.
    pub async fn peek(
        &self,
        p: &Principal,
        name: &str,
        target: Target<'_>,
        max: Option<u32>,
    ) -> Result<Vec<Message>, Error> {
        p.require(Scope::ChannelsRead)?;
        let max = rules::max_count(max, rules::DEFAULT_PEEK)?;
        let o = self.open(p, "name", name, target).await?;
        let found = self
            .store
            .newest(o.part(&p.tenant), max)
            .await
            .map_err(db("channel peek"))?;
        Ok(found.into_iter().map(|m| o.message(m)).collect())
    }

    /// Fan-in: waits until `mode` holds over which channels have messages after the
    /// consumer's committed cursor, or until `wait_ms` passes.
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per request field; a struct would only rename them"
    )]
    pub async fn await_channels(
        &self,
        p: &Principal,
        channels: &[String],
        mode: &str,
        n: Option<u32>,
        wait_ms: u32,
        consumer: Option<&str>,
        target: Target<'_>,
    ) -> Result<AwaitOut, Error> {
        p.require(Scope::ChannelsRead)?;
        rules::await_channels(channels)?;
        let mode = AwaitMode::parse(mode, n, channels.len())?;
        let wait = rules::wait_ms(Some(wait_ms))?;
        let consumer = consumer_of(p, consumer)?;
        let mut opened = Vec::with_capacity(channels.len());
        for (i, name) in channels.iter().enumerate() {
            opened.push(
                self.open(p, &format!("channels[{i}]"), name, target)
                    .await?,
            );
        }
        let needed = mode.needed(channels.len());
        let check = || async {
            let mut out = Vec::with_capacity(opened.len());
            for o in &opened {
                let (committed, ready) = self
                    .store
                    .unread(o.part(&p.tenant), consumer)
                    .await
                    .map_err(db("channel await"))?;
                out.push(Readiness {
                    channel: o.channel.name.clone(),
                    ready,
                    cursor: o.cursor(committed),
                });
            }
            let satisfied = out.iter().filter(|r| r.ready).count() >= needed;
            Ok::<_, Error>(AwaitOut {
                satisfied,
                channels: out,
            })
        };
        if wait == 0 {
            return check().await;
        }
        let _permit = self.waiter(p)?;
        let deadline = Instant::now() + Duration::from_millis(u64::from(wait));
        let keys: Vec<(i64, u64)> = opened
            .iter()
            .map(|o| (o.channel.id, o.partition.hash))
            .collect();
        // Subscribe to every channel first, then check: no publish after the check is missed.
        let subs = self
            .bus
            .subscribe_channel_wakeups(&keys)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "channel wake-up subscription failed");
                Error::unavailable("cannot wait for messages now (NATS); retry shortly")
            })?;
        let mut wakeups = futures::stream::select_all(subs);
        loop {
            let out = check().await?;
            if out.satisfied {
                return Ok(out);
            }
            match tokio::time::timeout_at(deadline, wakeups.next()).await {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return Ok(out),
            }
        }
    }

    /// Deletes expired messages, and publish op keys older than
    /// [`store::OP_RETENTION_DAYS`], every [`SWEEP_EVERY`] until `stop`.
    pub async fn sweep_until(&self, stop: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.store.sweep_expired(SWEEP_BATCH).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(deleted = n, "expired channel messages swept"),
                Err(e) => tracing::warn!(error = %e, "channel sweep failed"),
            }
            match self.store.sweep_ops(SWEEP_BATCH).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(deleted = n, "old channel op keys swept"),
                Err(e) => tracing::warn!(error = %e, "channel op key sweep failed"),
            }
        }
    }
}

/// Creates (or updates the bounds of) the channels declared in `substrate.channels`, in
/// `substrate.boot_tenant`. Every declaration is checked before any is written; a declared
/// channel that exists with another scope stops start-up.
pub async fn load_declared(
    hub: &ChannelHub,
    cfg: &weft_config::SubstrateConfig,
) -> Result<usize, crate::SubstrateError> {
    if cfg.channels.is_empty() {
        return Ok(0);
    }
    let boot = |key: &str, e: Error| crate::SubstrateError::Boot(format!("{key}: {}", e.message));
    let tenant = TenantId::parse(&cfg.boot_tenant).map_err(|e| boot("substrate.boot_tenant", e))?;
    for (name, d) in &cfg.channels {
        let key = format!("substrate.channels.{name}");
        rules::validate_name("name", name).map_err(|e| boot(&key, e))?;
        ChannelScope::parse("scope", &d.scope).map_err(|e| boot(&format!("{key}.scope"), e))?;
        rules::bounds(&format!("{key}."), d.ttl_seconds, d.max_messages)
            .map_err(|e| boot(&key, e))?;
    }
    for (name, d) in &cfg.channels {
        let key = format!("substrate.channels.{name}");
        hub.put(&tenant, name, &d.scope, d.ttl_seconds, d.max_messages)
            .await
            .map_err(|e| boot(&key, e))?;
    }
    tracing::info!(tenant = %tenant, channels = cfg.channels.len(), "declared channels loaded");
    Ok(cfg.channels.len())
}
