//! weft's use of Redis, in one place: every key, channel and Lua script is here. Redis holds
//! nothing that must survive a restart — run cancel flags, the control channel that tells the
//! executor holding a run about a cancel or new input, and per-tenant admission leases.
//!
//! The connection is made lazily and every call is bounded by a short timeout, so a service
//! starts while Redis is down and callers can fail closed with a clear error.

use std::time::Duration;

use futures::StreamExt as _;
use redis::AsyncCommands as _;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use tokio::sync::{OnceCell, mpsc};
use tokio_util::sync::CancellationToken;
use weft_core::{RunId, TenantId};

#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    #[error("redis is unreachable: {0}")]
    Unavailable(String),
}

fn unavailable(e: impl std::fmt::Display) -> CoordError {
    CoordError::Unavailable(e.to_string())
}

/// Every Redis key and channel weft uses, under one prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// Set when a run is cancelled; read by the executor at each step.
    pub fn cancel_flag(&self, run: RunId) -> String {
        format!("{}:cancel:{run}", self.prefix)
    }

    /// A run's credentials (`POST /v1/runs` `credentials`): a JSON object, kept only in Redis,
    /// for the run's lifetime.
    pub fn credentials(&self, run: RunId) -> String {
        format!("{}:credentials:{run}", self.prefix)
    }

    /// Pub/sub channel carrying [`Control`] messages to executors.
    pub fn control_channel(&self) -> String {
        format!("{}:control", self.prefix)
    }

    /// Sorted set of a tenant's admitted runs, scored by lease expiry (ms since the epoch).
    pub fn admission(&self, tenant: &TenantId) -> String {
        format!("{}:admission:{tenant}", self.prefix)
    }

    /// Present while `scope` (a tenant id, or `*` for the fleet) is draining: new runs of it are
    /// not admitted. Postgres's `pauses` holds the record; this mirrors it.
    pub fn pause(&self, scope: &str) -> String {
        format!("{}:pause:{scope}", self.prefix)
    }

    /// The fleet-wide set of calls in flight to one provider (its concurrency cap).
    pub fn provider_slots(&self, provider: &str) -> String {
        format!("{}:provider-slots:{provider}", self.prefix)
    }

    /// The last verdicts of one webhook (newest first), for triage.
    pub fn webhook_triage(&self, tenant: &TenantId, webhook: &str) -> String {
        format!("{}:webhook-triage:{tenant}:{webhook}", self.prefix)
    }

    /// The counts of one webhook's unauthenticated verdicts (a hash: one field per verdict,
    /// plus `last_at` and `last_reason`): kept apart from the triage list so that anyone able
    /// to POST cannot push the real deliveries out of it.
    pub fn webhook_rejects(&self, tenant: &TenantId, webhook: &str) -> String {
        format!("{}:webhook-rejects:{tenant}:{webhook}", self.prefix)
    }

    /// The last unauthenticated verdicts of one webhook (newest first), apart from
    /// [`Keys::webhook_triage`].
    pub fn webhook_rejects_recent(&self, tenant: &TenantId, webhook: &str) -> String {
        format!("{}:webhook-rejects-recent:{tenant}:{webhook}", self.prefix)
    }

    /// Marks that one replayed delivery of a webhook (by a digest of its id) is in the triage
    /// list already.
    pub fn webhook_replay_listed(&self, tenant: &TenantId, webhook: &str, id: &str) -> String {
        format!("{}:webhook-replayed:{tenant}:{webhook}:{id}", self.prefix)
    }

    /// One quota counter: `scope` names who it limits (`tenant:<t>`, `subject:<t>:<s>`,
    /// `token:<id>`), `metric` what (`rpm`, `tpm`, `tpd`), `window` which fixed window.
    pub fn quota(&self, scope: &str, metric: &str, window: u64) -> String {
        format!("{}:quota:{scope}:{metric}:{window}", self.prefix)
    }
}

/// One counter of a quota check: its key, its limit, what this call costs against it and how
/// long the key lives (the rest of its window, plus slack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaCounter {
    pub key: String,
    pub limit: u64,
    pub cost: u64,
    pub ttl: Duration,
}

/// The outcome of a quota check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuotaVerdict {
    /// Every counter had room; each was charged. What remains, per counter, in order.
    Granted { remaining: Vec<u64> },
    /// Counter `index` had no room for this call; nothing was charged.
    Denied { index: usize, retry_after: Duration },
}

/// What the control channel says about a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlOp {
    /// Stop the run at the next await point.
    Cancel,
    /// New input is waiting for the run.
    Input,
    /// Park the run at its next step boundary (docs/operations.md).
    Pause,
    /// The pause was called off before the run parked: its calls under way go on.
    Resume,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Control {
    pub run_id: RunId,
    pub op: ControlOp,
}

/// The outcome of asking for an admission slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A slot was taken for the member.
    Admitted,
    /// The member already held a slot; its lease was renewed. Whoever asked did not take a
    /// slot, so it must not give one back.
    AlreadyHeld,
    /// The tenant is at its limit; try again after this long.
    Full { retry_after: Duration },
}

/// [`Coord::admit_unless_paused`]'s refusal: the tenant is draining (`fleet: false`) or the
/// fleet is in maintenance; nothing is admitted until it resumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paused {
    pub fleet: bool,
}

/// Admits `ARGV[3]` into the tenant's set when it holds fewer than `ARGV[2]` live leases, unless
/// one of the pause keys that may follow (`KEYS[2..]`) exists (then `-i` for `KEYS[i]`).
/// Expired leases are dropped first; re-admitting a member renews it. Time comes from the
/// Redis server so gateways with skewed clocks agree.
const ADMIT: &str = r"
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return -i end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZSCORE', KEYS[1], ARGV[3])
if held or redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
  if redis.call('PTTL', KEYS[1]) < lease then
    redis.call('PEXPIRE', KEYS[1], lease)
  end
  if held then return -1 end
  return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(1, tonumber(oldest[2]) - now)
";

/// Renews a member's lease only if it is still admitted.
const RENEW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
  end
  return 1
end
return 0
";

/// Checks every counter (`KEYS[i]`, with `ARGV[3i-2..3i]` = limit, cost, ttl ms) and charges
/// them all only when all have room: all-or-nothing, atomic, so concurrent callers can never
/// together pass a limit. Returns `{1, remaining…}` or `{0, index, pttl}`.
const QUOTA: &str = r"
local n = #KEYS
for i = 1, n do
  local limit = tonumber(ARGV[3 * i - 2])
  local cost = tonumber(ARGV[3 * i - 1])
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  if cost > 0 and used + cost > limit then
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl < 0 then ttl = tonumber(ARGV[3 * i]) end
    return {0, i, ttl}
  end
end
local out = {1}
for i = 1, n do
  local limit = tonumber(ARGV[3 * i - 2])
  local used = redis.call('INCRBY', KEYS[i], tonumber(ARGV[3 * i - 1]))
  if redis.call('PTTL', KEYS[i]) < 0 then
    redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[3 * i]))
  end
  out[i + 1] = math.max(0, limit - used)
end
return out
";

/// Adds `ARGV[1]` (possibly negative) to each counter that still exists: the reconciliation
/// of a reservation with real usage. A counter whose window has ended is left alone.
const ADJUST: &str = r"
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('INCRBY', KEYS[i], tonumber(ARGV[1]))
  end
end
return 0
";

/// How long a cancel flag outlives the cancel (a run that is queued that long has bigger
/// problems; its row records the cancel anyway).
const CANCEL_FLAG_TTL_SECS: u64 = 24 * 3600;

/// A lazily connected Redis with weft's keys.
#[derive(Clone)]
pub struct Coord {
    client: redis::Client,
    conn: std::sync::Arc<OnceCell<ConnectionManager>>,
    keys: Keys,
    timeout: Duration,
    admit: std::sync::Arc<redis::Script>,
    renew: std::sync::Arc<redis::Script>,
    quota: std::sync::Arc<redis::Script>,
    adjust: std::sync::Arc<redis::Script>,
}

impl std::fmt::Debug for Coord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coord").field("keys", &self.keys).finish()
    }
}

impl Coord {
    /// Parses `url`; connects on first use.
    pub fn new(url: &str, prefix: &str) -> Result<Self, CoordError> {
        Ok(Self {
            client: redis::Client::open(url).map_err(unavailable)?,
            conn: std::sync::Arc::new(OnceCell::new()),
            keys: Keys::new(prefix),
            timeout: Duration::from_secs(1),
            admit: std::sync::Arc::new(redis::Script::new(ADMIT)),
            renew: std::sync::Arc::new(redis::Script::new(RENEW)),
            quota: std::sync::Arc::new(redis::Script::new(QUOTA)),
            adjust: std::sync::Arc::new(redis::Script::new(ADJUST)),
        })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    async fn conn(&self) -> Result<ConnectionManager, CoordError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        self.conn
            .get_or_try_init(|| async {
                self.client
                    .get_connection_manager_with_config(config)
                    .await
                    .map_err(unavailable)
            })
            .await
            .cloned()
    }

    /// Takes an admission slot for `member` (a run id) in the tenant's set of at most `limit`.
    pub async fn admit(
        &self,
        tenant: &TenantId,
        member: RunId,
        limit: u32,
        lease: Duration,
    ) -> Result<Admission, CoordError> {
        self.take_slot(
            &self.keys.admission(tenant),
            &member.to_string(),
            limit,
            lease,
        )
        .await
    }

    /// [`Coord::admit`] for a run a caller starts or wakes: refused while its tenant drains or
    /// the fleet is in maintenance (checked in the same script, no extra round trip).
    pub async fn admit_unless_paused(
        &self,
        tenant: &TenantId,
        member: RunId,
        limit: u32,
        lease: Duration,
    ) -> Result<Result<Admission, Paused>, CoordError> {
        let mut c = self.conn().await?;
        let wait_ms: i64 = self
            .admit
            .key(self.keys.admission(tenant))
            .key(self.keys.pause(tenant.as_str()))
            .key(self.keys.pause("*"))
            .arg(millis(lease))
            .arg(limit)
            .arg(member.to_string())
            .invoke_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(match wait_ms {
            -2 => Err(Paused { fleet: false }),
            ..-2 => Err(Paused { fleet: true }),
            ms => Ok(admission(ms)),
        })
    }

    /// Mirrors the drains in force (`scopes`: tenant ids, `*` for the fleet) into Redis, so
    /// admission refuses their runs: each key is set for [`PAUSE_KEY_TTL_SECS`], renewed by
    /// every mirror. A key is never deleted here (a drain that began after the read would be
    /// undone): a resume deletes its own, and one it could not delete expires.
    pub async fn mirror_pauses(&self, scopes: &[String]) -> Result<(), CoordError> {
        if scopes.is_empty() {
            return Ok(());
        }
        let mut c = self.conn().await?;
        let mut pipe = redis::pipe();
        for s in scopes {
            pipe.set_ex(self.keys.pause(s), 1, PAUSE_KEY_TTL_SECS)
                .ignore();
        }
        let _: () = pipe.query_async(&mut c).await.map_err(unavailable)?;
        Ok(())
    }

    /// Sets (`on`) or clears the pause key of one scope.
    pub async fn set_pause(&self, scope: &str, on: bool) -> Result<(), CoordError> {
        let mut c = self.conn().await?;
        let key = self.keys.pause(scope);
        let _: () = if on {
            c.set_ex(key, 1, PAUSE_KEY_TTL_SECS).await
        } else {
            c.del(key).await
        }
        .map_err(unavailable)?;
        Ok(())
    }

    /// Tells the executor holding `run` to park it at its next step boundary (`Pause`), or
    /// that the pause was called off (`Resume`).
    pub async fn tell(&self, run: RunId, op: ControlOp) -> Result<(), CoordError> {
        let mut c = self.conn().await?;
        self.publish(&mut c, Control { run_id: run, op }).await
    }

    /// Takes one of `limit` slots of the set at `key` for `member`, leased for `lease`.
    pub async fn take_slot(
        &self,
        key: &str,
        member: &str,
        limit: u32,
        lease: Duration,
    ) -> Result<Admission, CoordError> {
        let mut c = self.conn().await?;
        let wait_ms: i64 = self
            .admit
            .key(key)
            .arg(millis(lease))
            .arg(limit)
            .arg(member)
            .invoke_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(admission(wait_ms))
    }

    /// Extends a held slot; false when it had already lapsed.
    pub async fn renew(
        &self,
        tenant: &TenantId,
        member: RunId,
        lease: Duration,
    ) -> Result<bool, CoordError> {
        let mut c = self.conn().await?;
        let kept: i64 = self
            .renew
            .key(self.keys.admission(tenant))
            .arg(millis(lease))
            .arg(member.to_string())
            .invoke_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(kept == 1)
    }

    /// Gives a slot back.
    pub async fn release(&self, tenant: &TenantId, member: RunId) -> Result<(), CoordError> {
        self.give_slot(&self.keys.admission(tenant), &member.to_string())
            .await
    }

    /// Gives back a slot taken with [`Coord::take_slot`].
    pub async fn give_slot(&self, key: &str, member: &str) -> Result<(), CoordError> {
        let mut c = self.conn().await?;
        let _: i64 = c.zrem(key, member).await.map_err(unavailable)?;
        Ok(())
    }

    /// Checks and charges quota counters, all or nothing (see [`QuotaCounter`]).
    pub async fn charge(&self, counters: &[QuotaCounter]) -> Result<QuotaVerdict, CoordError> {
        if counters.is_empty() {
            return Ok(QuotaVerdict::Granted {
                remaining: Vec::new(),
            });
        }
        let mut c = self.conn().await?;
        let mut inv = self.quota.prepare_invoke();
        for q in counters {
            inv.key(&q.key).arg(q.limit).arg(q.cost).arg(millis(q.ttl));
        }
        let out: Vec<i64> = inv.invoke_async(&mut c).await.map_err(unavailable)?;
        let num = |i: usize| out.get(i).copied().unwrap_or(0);
        Ok(if num(0) == 1 {
            QuotaVerdict::Granted {
                remaining: out
                    .iter()
                    .skip(1)
                    .map(|&r| u64::try_from(r).unwrap_or(0))
                    .collect(),
            }
        } else {
            QuotaVerdict::Denied {
                index: usize::try_from(num(1) - 1).unwrap_or(0),
                retry_after: Duration::from_millis(u64::try_from(num(2)).unwrap_or(0).max(1)),
            }
        })
    }

    /// Prepends `entry` to the list at `key`, keeping the newest `keep` for `ttl`.
    pub async fn push_recent(
        &self,
        key: &str,
        entry: &str,
        keep: u32,
        ttl: Duration,
    ) -> Result<(), CoordError> {
        let mut c = self.conn().await?;
        let keep = isize::try_from(keep.max(1)).unwrap_or(isize::MAX);
        let ttl = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let _: () = redis::pipe()
            .lpush(key, entry)
            .ignore()
            .ltrim(key, 0, keep - 1)
            .ignore()
            .expire(key, ttl)
            .ignore()
            .query_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Adds one to field `counter` of the hash at `key` and sets its other `fields`, keeping it
    /// for `ttl` (a count that costs one key however many requests come).
    pub async fn count_in(
        &self,
        key: &str,
        counter: &str,
        fields: &[(&str, &str)],
        ttl: Duration,
    ) -> Result<(), CoordError> {
        let mut c = self.conn().await?;
        let ttl = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let mut pipe = redis::pipe();
        pipe.hincr(key, counter, 1).ignore();
        if !fields.is_empty() {
            pipe.hset_multiple(key, fields).ignore();
        }
        let _: () = pipe
            .expire(key, ttl)
            .ignore()
            .query_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Sets `key` for `ttl` unless it is set; true when this call set it (the first time).
    pub async fn first_time(&self, key: &str, ttl: Duration) -> Result<bool, CoordError> {
        let mut c = self.conn().await?;
        let ttl = ttl.as_secs().max(1);
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(ttl)
            .query_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(set.is_some())
    }

    /// The hash at `key` (empty when there is none).
    pub async fn counts(
        &self,
        key: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, CoordError> {
        let mut c = self.conn().await?;
        c.hgetall(key).await.map_err(unavailable)
    }

    /// The list at `key`, newest first.
    pub async fn recent(&self, key: &str) -> Result<Vec<String>, CoordError> {
        let mut c = self.conn().await?;
        c.lrange(key, 0, -1).await.map_err(unavailable)
    }

    /// Adds `delta` to each counter still in its window (reconciling a reservation).
    pub async fn adjust(&self, keys: &[String], delta: i64) -> Result<(), CoordError> {
        if keys.is_empty() || delta == 0 {
            return Ok(());
        }
        let mut c = self.conn().await?;
        let mut inv = self.adjust.prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        inv.arg(delta);
        let _: i64 = inv.invoke_async(&mut c).await.map_err(unavailable)?;
        Ok(())
    }

    /// Sets the run's cancel flag and tells every executor.
    pub async fn cancel(&self, run: RunId) -> Result<(), CoordError> {
        let mut c = self.conn().await?;
        let _: () = c
            .set_ex(self.keys.cancel_flag(run), 1, CANCEL_FLAG_TTL_SECS)
            .await
            .map_err(unavailable)?;
        self.publish(
            &mut c,
            Control {
                run_id: run,
                op: ControlOp::Cancel,
            },
        )
        .await
    }

    /// Keeps a run's credentials for `ttl_secs` (they are never written to Postgres, NATS or a
    /// log; Redis holds them so that whichever executor takes the run can use them).
    pub async fn put_credentials(
        &self,
        run: RunId,
        credentials: &std::collections::BTreeMap<String, String>,
        ttl_secs: u64,
    ) -> Result<(), CoordError> {
        let mut c = self.conn().await?;
        let payload = serde_json::to_string(credentials).map_err(unavailable)?;
        let _: () = c
            .set_ex(self.keys.credentials(run), payload, ttl_secs.max(1))
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// A run's credentials (empty when it was given none, or they expired).
    pub async fn credentials(
        &self,
        run: RunId,
    ) -> Result<std::collections::BTreeMap<String, String>, CoordError> {
        let mut c = self.conn().await?;
        let v: Option<String> = c
            .get(self.keys.credentials(run))
            .await
            .map_err(unavailable)?;
        Ok(v.and_then(|v| serde_json::from_str(&v).ok())
            .unwrap_or_default())
    }

    /// Forgets a run's credentials (when it ends).
    pub async fn drop_credentials(&self, run: RunId) -> Result<(), CoordError> {
        let mut c = self.conn().await?;
        let _: i64 = c
            .del(self.keys.credentials(run))
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Tells the executor holding `run` that input is waiting.
    pub async fn notify_input(&self, run: RunId) -> Result<(), CoordError> {
        let mut c = self.conn().await?;
        self.publish(
            &mut c,
            Control {
                run_id: run,
                op: ControlOp::Input,
            },
        )
        .await
    }

    async fn publish(&self, c: &mut ConnectionManager, msg: Control) -> Result<(), CoordError> {
        let payload = serde_json::to_string(&msg).map_err(unavailable)?;
        let _: i64 = c
            .publish(self.keys.control_channel(), payload)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Whether `run` has been cancelled.
    pub async fn is_cancelled(&self, run: RunId) -> Result<bool, CoordError> {
        let mut c = self.conn().await?;
        c.exists(self.keys.cancel_flag(run))
            .await
            .map_err(unavailable)
    }

    /// Whether Redis answers.
    pub async fn ping(&self) -> Result<(), CoordError> {
        let mut c = self.conn().await?;
        let _: String = redis::cmd("PING")
            .query_async(&mut c)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Listens on the control channel until `stop`, reconnecting after failures. Messages are
    /// at most once: after a reconnect, `resubscribed` is sent so the owner can re-check the
    /// flags of what it holds. The returned receiver is bounded; a slow owner drops nothing
    /// silently — it just delays the listener.
    pub fn control_listener(&self, stop: CancellationToken) -> mpsc::Receiver<ControlSignal> {
        let (tx, rx) = mpsc::channel(1024);
        let client = self.client.clone();
        let channel = self.keys.control_channel();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(100);
            loop {
                let attempt = async {
                    let mut ps = client.get_async_pubsub().await?;
                    ps.subscribe(&channel).await?;
                    Ok::<_, redis::RedisError>(ps)
                };
                let ps = tokio::select! {
                    () = stop.cancelled() => return,
                    r = attempt => r,
                };
                match ps {
                    Ok(ps) => {
                        backoff = Duration::from_millis(100);
                        if tx.send(ControlSignal::Resubscribed).await.is_err() {
                            return;
                        }
                        let mut msgs = ps.into_on_message();
                        loop {
                            let m = tokio::select! {
                                () = stop.cancelled() => return,
                                m = msgs.next() => m,
                            };
                            let Some(m) = m else { break };
                            let Ok(payload) = m.get_payload::<String>() else {
                                continue;
                            };
                            if let Ok(c) = serde_json::from_str::<Control>(&payload)
                                && tx.send(ControlSignal::Message(c)).await.is_err()
                            {
                                return;
                            }
                        }
                        tracing::warn!("redis control subscription ended; reconnecting");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot subscribe to the redis control channel; retrying");
                    }
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        });
        rx
    }
}

/// What the control listener hands its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlSignal {
    Message(Control),
    /// The subscription was (re)established; messages sent while it was down are lost.
    Resubscribed,
}

/// How long a pause key lives unless a mirror renews it (every 5 s while its drain is in
/// force): a key a failed resume could not delete refuses runs at most this long.
pub const PAUSE_KEY_TTL_SECS: u64 = 30;

/// What the admission script's answer means.
fn admission(wait_ms: i64) -> Admission {
    match wait_ms {
        0 => Admission::Admitted,
        ..0 => Admission::AlreadyHeld,
        ms => Admission::Full {
            retry_after: Duration::from_millis(ms.unsigned_abs()),
        },
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_the_prefix() {
        let k = Keys::new("t1");
        let r = RunId::new();
        assert_eq!(k.cancel_flag(r), format!("t1:cancel:{r}"));
        assert_eq!(k.control_channel(), "t1:control");
        let t = TenantId::parse("acme").unwrap();
        assert_eq!(k.admission(&t), "t1:admission:acme");
    }
}
