//! Quotas and usage around one call: the reservation taken before the upstream is called (exact
//! under concurrency: one atomic Lua charge over every applicable counter), its reconciliation
//! with real usage afterwards, the fleet-wide provider concurrency slot, and the usage record
//! sent to JetStream when the call ends, batched with the records of calls that end at the same
//! time ([`UsageSender`]): appended to the usage spool ([`crate::spool`]) and written to the
//! NATS socket before the caller sees the end, acknowledged after (and published again if the
//! ack does not come), so the caller does not wait a JetStream round trip and a router killed
//! after the answer loses no record, even while NATS is away (see docs/providers.md).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use weft_bus::Bus;
use weft_config::{LimitSpec, Limits, Price, RouterConfig};
use weft_coord::{Coord, QuotaCounter, QuotaVerdict};
use weft_core::message::{ContentBlock, Usage};
use weft_core::{Error, ErrorCode, Principal, UsageRecord, ratelimit};

use crate::spool::{Claimed, Spool, Ticket};
use crate::types::ChatRequest;

/// How long a call's end waits for its usage record to be written to NATS.
const SEND_USAGE_WITHIN: Duration = Duration::from_secs(1);
/// The most records one group flush takes from the queue.
const USAGE_BATCH_MAX: usize = 256;
/// The most records queued for the sender; beyond that (NATS unreachable for a while) each is
/// published on its own task.
const USAGE_QUEUE: usize = 16_384;

/// The router's connections to Redis (quotas, provider slots) and NATS (usage records).
#[derive(Clone)]
pub struct Deps {
    pub coord: Coord,
    pub usage: UsageSender,
}

impl Deps {
    /// Starts the usage sender on `bus` (a task of the current runtime), with its records
    /// spooled in `spool` when there is one.
    pub fn new(coord: Coord, bus: Bus, spool: Option<Spool>) -> Self {
        Self {
            coord,
            usage: UsageSender::spawn(bus, spool),
        }
    }
}

/// A usage record on its way, its place in the spool, and who waits for it to reach the NATS
/// socket.
type Pending = (
    UsageRecord,
    Option<Ticket>,
    Option<tokio::sync::oneshot::Sender<()>>,
);

/// Sends usage records to JetStream in batches, a group flush at a time: while one batch is
/// being written to the NATS socket, the records of the calls that end meanwhile queue up and
/// go out together (one publish per [`weft_bus::USAGE_MESSAGE_BYTES`] of records, one flush,
/// one ack per message; a lone call is a batch of one, so nothing waits for company). Each
/// record is appended to the [`Spool`] first, when there is one, by [`UsageSender::send`]
/// itself: before its caller can be answered. Each caller is released once its batch is in
/// the socket; the acks are awaited after, on a spawned task, and a message that is not
/// acknowledged is published again under its id, then left in the spool for a later try.
#[derive(Clone)]
pub struct UsageSender {
    bus: Bus,
    spool: Option<Arc<Spool>>,
    tx: tokio::sync::mpsc::Sender<Pending>,
}

impl UsageSender {
    /// Starts the sender (and, with a spool, the task that publishes what dead routers left in
    /// it) on the current runtime.
    pub fn spawn(bus: Bus, spool: Option<Spool>) -> Self {
        let spool = spool.map(Arc::new);
        let (tx, rx) = tokio::sync::mpsc::channel(USAGE_QUEUE);
        tokio::spawn(send_batches(bus.clone(), rx));
        if let Some(spool) = &spool {
            tokio::spawn(reclaim(bus.clone(), Arc::downgrade(spool)));
        }
        Self { bus, spool, tx }
    }

    /// Appends `rec` to the spool and queues it; `sent` is signalled once it is written to the
    /// NATS socket. When the queue is full (NATS unreachable for a while) or the sender task is
    /// gone (its runtime shutting down), the record is published on its own, on a spawned task,
    /// and `sent` signalled once JetStream stored it (or it was given up).
    pub fn send(&self, rec: UsageRecord, sent: Option<tokio::sync::oneshot::Sender<()>>) {
        let ticket = spill(self.spool.as_deref(), std::slice::from_ref(&rec));
        if let Err(
            tokio::sync::mpsc::error::TrySendError::Full((rec, ticket, sent))
            | tokio::sync::mpsc::error::TrySendError::Closed((rec, ticket, sent)),
        ) = self.tx.try_send((rec, ticket, sent))
        {
            let bus = self.bus.clone();
            tokio::spawn(async move {
                let spooled = ticket.is_some();
                if publish(&bus, std::slice::from_ref(&rec), spooled).await
                    && let Some(t) = ticket
                {
                    t.stored();
                }
                if let Some(sent) = sent {
                    let _ = sent.send(());
                }
            });
        }
    }
}

/// Appends `recs` to `spool` when there is one. A spool that cannot be written is logged and
/// counted, and each record logged whole (what the spool would have kept, recoverable from the
/// logs should the router die before NATS stores it); the records then travel without it.
fn spill(spool: Option<&Spool>, recs: &[UsageRecord]) -> Option<Ticket> {
    let spool = spool?;
    match spool.append(recs) {
        Ok(t) => Some(t),
        Err(e) => {
            metrics::counter!("weft_router_usage_spool_errors_total").increment(1);
            for rec in recs {
                let record = serde_json::to_string(rec).unwrap_or_default();
                tracing::error!(error = %e, dir = %spool.dir().display(), %record, "cannot write a usage record to the spool");
            }
            None
        }
    }
}

/// The usage sender's loop: takes what has queued (up to [`USAGE_BATCH_MAX`]), writes it as
/// messages and flushes, releases the callers, and leaves the acks to a spawned task.
async fn send_batches(bus: Bus, mut rx: tokio::sync::mpsc::Receiver<Pending>) {
    let mut queued = Vec::with_capacity(USAGE_BATCH_MAX);
    while rx.recv_many(&mut queued, USAGE_BATCH_MAX).await > 0 {
        let mut recs = Vec::with_capacity(queued.len());
        let mut tickets = Vec::with_capacity(queued.len());
        let mut waiters = Vec::with_capacity(queued.len());
        for (rec, ticket, sent) in queued.drain(..) {
            recs.push(rec);
            tickets.push(ticket);
            waiters.push(sent);
        }
        // Bounded: while NATS is unreachable the callers get their answers after this long and
        // the records are published again below (the same ids, so each is stored once).
        let sent = tokio::time::timeout(SEND_USAGE_WITHIN, async {
            let messages = weft_bus::usage_messages(&recs, weft_bus::USAGE_MESSAGE_BYTES)?;
            let mut acks = Vec::with_capacity(messages.len());
            for m in messages {
                let ack = bus.send_usage_message(&m).await;
                acks.push((m, ack));
            }
            bus.flush().await?;
            Ok::<_, weft_bus::BusError>(acks)
        })
        .await
        .unwrap_or_else(|_| {
            Err(weft_bus::BusError::Nats(format!(
                "not written to NATS within {SEND_USAGE_WITHIN:?}"
            )))
        });
        for sent in waiters.into_iter().flatten() {
            let _ = sent.send(());
        }
        let bus = bus.clone();
        tokio::spawn(async move {
            let spooled = tickets.iter().all(Option::is_some);
            let all_stored = match sent {
                Ok(acks) => {
                    let mut all = true;
                    for (m, ack) in acks {
                        let stored = match ack {
                            Ok(ack) => ack.stored().await,
                            Err(e) => Err(e),
                        };
                        match stored {
                            Ok(()) => {
                                metrics::counter!("weft_router_usage_published_total")
                                    .increment(m.records as u64);
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, records = m.records, "a usage message was not acknowledged; publishing it again");
                                if !publish_message(&bus, &m).await {
                                    unpublished(spooled, &m);
                                    all = false;
                                }
                            }
                        }
                    }
                    all
                }
                Err(e) => {
                    tracing::warn!(error = %e, records = recs.len(), "sending usage records failed; publishing them again");
                    publish(&bus, &recs, spooled).await
                }
            };
            // A ticket dropped unstored keeps its spool file for a reclaim.
            if all_stored {
                tickets.into_iter().flatten().for_each(Ticket::stored);
            }
        });
    }
}

/// How often a router looks for spool files that no live router holds.
const RECLAIM_EVERY: Duration = Duration::from_secs(5);

/// Publishes, at start and then every [`RECLAIM_EVERY`], the spool files whose writer died or
/// gave them up (this router's own, after a failed publish, included), one at a time, removing
/// each once every record in it is stored; a round stops at the first that cannot be
/// published (NATS still away). Ends with its sender.
async fn reclaim(bus: Bus, spool: std::sync::Weak<Spool>) {
    loop {
        let Some(s) = spool.upgrade() else { return };
        s.retire_stale();
        let dir = s.dir().to_path_buf();
        let listed = tokio::task::spawn_blocking(move || s.segments()).await;
        match listed {
            Ok(Ok(paths)) => {
                for path in paths {
                    match tokio::task::spawn_blocking(move || crate::spool::claim(&path)).await {
                        Ok(Ok(Some(c))) => {
                            if !republish(&bus, c).await {
                                break;
                            }
                        }
                        Ok(Ok(None)) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "cannot read a usage spool file");
                        }
                        Err(e) => tracing::warn!(error = %e, "the usage spool reclaim failed"),
                    }
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, dir = %dir.display(), "cannot read the usage spool");
            }
            Err(e) => tracing::warn!(error = %e, "the usage spool reclaim failed"),
        }
        tokio::time::sleep(RECLAIM_EVERY).await;
    }
}

/// Publishes the records of one claimed spool file and removes it; on a failure the file is
/// left for the next round. Whether it was published.
async fn republish(bus: &Bus, c: Claimed) -> bool {
    if c.bad_lines > 0 {
        // A write cut short by its writer's death: that call was not answered yet.
        metrics::counter!("weft_router_usage_lost_total").increment(c.bad_lines as u64);
        tracing::error!(path = %c.path().display(), lines = c.bad_lines, "usage spool lines that do not decode are skipped");
    }
    let messages = match weft_bus::usage_messages(&c.records, weft_bus::USAGE_MESSAGE_BYTES) {
        // Batched anew, so under ids of their own: a message the dead router sent under its
        // first record's id may hold fewer records than this one, and JetStream would take
        // this one for a copy of it. A record stored twice this way is kept once by the
        // `usage` table's key; this id still makes a repeated reclaim of the file a duplicate.
        Ok(mut m) => {
            for m in &mut m {
                m.id = format!("spool-{}-{}", m.id, m.records);
            }
            m
        }
        Err(e) => {
            tracing::error!(path = %c.path().display(), error = %e, "usage spool records could not be encoded");
            return true;
        }
    };
    for m in &messages {
        if !publish_message(bus, m).await {
            tracing::warn!(path = %c.path().display(), "usage spool records not published; trying again later");
            return false;
        }
    }
    metrics::counter!("weft_router_usage_reclaimed_total").increment(c.records.len() as u64);
    tracing::info!(path = %c.path().display(), records = c.records.len(), "published the usage records a router left in the spool");
    let path = c.path().to_path_buf();
    if let Err(e) = c.done() {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove a published usage spool file");
    }
    true
}

/// The headers a caller gets with an accepted call (`x-ratelimit-*`).
pub type LimitHeaders = Vec<(&'static str, String)>;

/// Tokens and requests reserved for one call, to reconcile when it ends.
#[derive(Debug, Default)]
pub struct Reservation {
    /// The token counters charged (tpm, tpd), adjusted by `actual - estimate` at the end.
    token_keys: Vec<String>,
    estimate: u64,
    pub headers: LimitHeaders,
}

/// Who limits a call: `(scope label, human name, spec)` for tenant, subject and token.
fn scopes(cfg: &RouterConfig, p: &Principal) -> Vec<(String, String, LimitSpec)> {
    let limits: &Limits = &cfg.limits;
    let tenant_spec = cfg
        .tenants
        .get(p.tenant.as_str())
        .and_then(|t| t.limits)
        .map_or(limits.tenant, |s| s.or(limits.tenant));
    let mut out = vec![(
        format!("tenant:{}", p.tenant),
        format!("tenant `{}`", p.tenant),
        tenant_spec,
    )];
    out.push((
        format!("subject:{}:{}", p.tenant, p.subject),
        format!("subject `{}`", p.subject),
        limits.subject,
    ));
    if let Some(t) = &p.token_id {
        out.push((format!("token:{t}"), format!("token {t}"), limits.token));
    }
    out.retain(|(_, _, s)| !s.is_empty());
    out
}

/// Whether any token budget applies to `p` (then `max_tokens` must bound the call).
pub fn token_budget_applies(cfg: &RouterConfig, p: &Principal) -> bool {
    scopes(cfg, p)
        .iter()
        .any(|(_, _, s)| s.tokens_per_minute.is_some() || s.tokens_per_day.is_some())
}

/// An upper estimate of a call's tokens: input at one token per three bytes (tokenizers average
/// about four) plus a little per message, and the whole `max_tokens` of output.
pub fn estimate_tokens(req: &ChatRequest) -> u64 {
    fn bytes(b: &ContentBlock) -> usize {
        match b {
            ContentBlock::Text { text } | ContentBlock::Reasoning { text, .. } => text.len(),
            ContentBlock::Image { .. } => 3 * 1000,
            ContentBlock::ToolUse {
                name, input_json, ..
            } => name.len() + input_json.len(),
            ContentBlock::ToolResult { content, .. } => content.iter().map(bytes).sum(),
        }
    }
    let mut total: u64 = 0;
    for m in &req.messages {
        let b: usize = m.content.iter().map(bytes).sum();
        total += (b as u64).div_ceil(3) + 4;
    }
    for t in &req.tools {
        let b = t.name.len() + t.description.len() + t.parameters.to_string().len();
        total += (b as u64).div_ceil(3);
    }
    total + u64::from(req.sampling.max_tokens.unwrap_or(0))
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Reserves the call's request and estimated tokens against every applicable limit, all or
/// nothing; an empty reservation when no limit applies. `chat` says whether the estimate
/// includes `max_tokens` (so the caller can lower it) or is input only (embeddings).
pub async fn reserve(
    cfg: &RouterConfig,
    coord: &Coord,
    p: &Principal,
    estimate: u64,
    chat: bool,
) -> Result<Reservation, Error> {
    let scopes = scopes(cfg, p);
    if scopes.is_empty() {
        return Ok(Reservation::default());
    }
    let now = now_secs();
    let minute = now / 60;
    let day = now / 86_400;
    let minute_ttl = Duration::from_secs(60 - now % 60 + 5);
    let day_ttl = Duration::from_secs(86_400 - now % 86_400 + 60);
    // (counter, metric, limit name, who)
    let mut counters = Vec::new();
    let mut meta: Vec<(&'static str, &'static str, &str)> = Vec::new();
    for (scope, who, s) in &scopes {
        let windows = [
            (
                "rpm",
                "requests_per_minute",
                s.requests_per_minute,
                minute,
                minute_ttl,
                1,
            ),
            (
                "tpm",
                "tokens_per_minute",
                s.tokens_per_minute,
                minute,
                minute_ttl,
                estimate,
            ),
            (
                "tpd",
                "tokens_per_day",
                s.tokens_per_day,
                day,
                day_ttl,
                estimate,
            ),
        ];
        for (metric, name, limit, window, ttl, cost) in windows {
            let Some(limit) = limit else { continue };
            // A call bigger than a whole token budget can never pass: say so, rather than a 429.
            if metric != "rpm" && cost > limit {
                return Err(if chat {
                    Error::invalid(format!(
                        "this call alone reserves {cost} tokens (estimated input plus max_tokens), more than the {name} limit of {limit} for {who}; lower max_tokens or shorten the input"
                    ))
                    .with_param("max_tokens")
                } else {
                    Error::invalid(format!(
                        "this call alone reserves {cost} tokens (estimated input), more than the {name} limit of {limit} for {who}; send fewer or shorter inputs"
                    ))
                    .with_param("input")
                });
            }
            counters.push(QuotaCounter {
                key: coord.keys().quota(scope, metric, window),
                limit,
                cost,
                ttl,
            });
            meta.push((metric, name, who.as_str()));
        }
    }
    let verdict = coord.charge(&counters).await.map_err(|e| {
        tracing::error!(error = %e, "quota check failed");
        Error::new(
            ErrorCode::AdmissionUnavailable,
            "limits cannot be checked right now (the quota store is unreachable); retry shortly",
        )
    })?;
    match verdict {
        QuotaVerdict::Denied { index, retry_after } => {
            let (_, name, who) = meta.get(index).copied().unwrap_or(("", "a limit", "you"));
            let limit = counters.get(index).map_or(0, |c| c.limit);
            let secs = retry_after.as_secs_f64().ceil().max(1.0);
            let mut e = Error::new(
                ErrorCode::RateLimited,
                format!("{who} is over its {name} limit ({limit}); retry in {secs:.0} s"),
            );
            e.retry_after = Some(Duration::from_secs_f64(secs));
            Err(e)
        }
        QuotaVerdict::Granted { remaining } => {
            // The tightest counter of the given metrics: the one that refuses first.
            let pick = |metrics: &[&str]| {
                counters
                    .iter()
                    .zip(&remaining)
                    .zip(&meta)
                    .filter(|(_, (metric, _, _))| metrics.contains(metric))
                    .map(|((c, r), _)| (c.limit, *r))
                    .min_by_key(|&(_, r)| r)
            };
            let mut headers = Vec::new();
            if let Some((limit, rem)) = pick(&["rpm"]) {
                headers.push((ratelimit::LIMIT_REQUESTS, limit.to_string()));
                headers.push((ratelimit::REMAINING_REQUESTS, rem.to_string()));
            }
            if let Some((limit, rem)) = pick(&["tpm", "tpd"]) {
                headers.push((ratelimit::LIMIT_TOKENS, limit.to_string()));
                headers.push((ratelimit::REMAINING_TOKENS, rem.to_string()));
            }
            Ok(Reservation {
                token_keys: counters
                    .iter()
                    .zip(&meta)
                    .filter(|(_, (m, _, _))| *m != "rpm")
                    .map(|(c, _)| c.key.clone())
                    .collect(),
                estimate,
                headers,
            })
        }
    }
}

/// The cost of `usage` at `price` (USD per million tokens).
pub fn cost(price: Option<&Price>, u: &Usage) -> f64 {
    let Some(p) = price else { return 0.0 };
    let cached = u.cache_read_tokens + u.cache_write_tokens;
    let fresh = u.prompt_tokens.saturating_sub(cached);
    #[expect(
        clippy::cast_precision_loss,
        reason = "token counts are far below 2^52"
    )]
    let c = fresh as f64 * p.input
        + u.cache_read_tokens as f64 * p.cache_read.unwrap_or(p.input)
        + u.cache_write_tokens as f64 * p.cache_write.unwrap_or(p.input)
        + u.completion_tokens as f64 * p.output;
    let c = c / 1_000_000.0;
    // A price of `inf` or `nan` (TOML has both) must not make a record JSON cannot carry.
    if c.is_finite() {
        c
    } else {
        tracing::warn!(
            ?p,
            "a price gives a cost that is not a finite number; the call is recorded at 0"
        );
        0.0
    }
}

/// A call in flight: everything needed to account for it when it ends, however it ends.
/// Dropping it unfinished (the caller went away) still accounts, on a spawned task.
pub struct Ledger {
    inner: Option<LedgerInner>,
}

struct LedgerInner {
    deps: Deps,
    cfg: Arc<RouterConfig>,
    principal: Principal,
    kind: &'static str,
    requested_model: String,
    reservation: Reservation,
    started: Instant,
    provider: String,
    model: String,
    /// The provider concurrency slot held, released at the end.
    slot: Option<(String, String)>,
    usage: Option<Usage>,
}

impl Ledger {
    pub fn new(
        deps: Deps,
        cfg: Arc<RouterConfig>,
        principal: Principal,
        kind: &'static str,
        requested_model: String,
        reservation: Reservation,
    ) -> Self {
        Self {
            inner: Some(LedgerInner {
                deps,
                cfg,
                principal,
                kind,
                requested_model,
                reservation,
                started: Instant::now(),
                provider: String::new(),
                model: String::new(),
                slot: None,
                usage: None,
            }),
        }
    }

    /// The candidate being tried, and the provider slot it holds (given back by
    /// [`Ledger::release_slot`] if the candidate fails, or when the call ends however it ends,
    /// the caller going away included).
    pub fn attempt(&mut self, provider: &str, model: &str, slot: Option<(String, String)>) {
        if let Some(i) = &mut self.inner {
            provider.clone_into(&mut i.provider);
            model.clone_into(&mut i.model);
            i.slot = slot;
        }
    }

    /// Gives back the slot of a candidate that failed before its first event.
    pub async fn release_slot(&mut self) {
        let Some(i) = &mut self.inner else { return };
        if let Some((key, member)) = i.slot.take() {
            let coord = i.deps.coord.clone();
            // Spawned, so a caller going away mid-release cannot leak the slot.
            let _ = tokio::spawn(async move { coord.give_slot(&key, &member).await }).await;
        }
        i.provider.clear();
        i.model.clear();
    }

    pub fn usage(&mut self, u: Usage) {
        if let Some(i) = &mut self.inner {
            i.usage = Some(u);
        }
    }

    /// Ends the call: hands its usage record to the [`UsageSender`] and returns once it is
    /// written to the NATS connection's socket (or after [`SEND_USAGE_WITHIN`], the sender
    /// retrying); JetStream's ack, the quota reconciliation and the provider slot's release
    /// follow off the caller's path. `outcome` is `ok` or an error
    /// code.
    pub async fn finish(&mut self, outcome: &str) {
        if let Some(i) = self.inner.take() {
            let (sent, on_sent) = tokio::sync::oneshot::channel();
            // Queued here, before the first await: a caller that goes away meanwhile cannot
            // cancel the accounting (the sender owns the record from now on), and the call
            // needs no task of its own for it. The reconciliation, when there is one, is
            // spawned.
            i.queue(outcome, Some(sent));
            if i.has_reconciliation() {
                tokio::spawn(i.reconcile());
            }
            // Bounded: a batch stuck behind an unreachable NATS is retried by the sender.
            let _ = tokio::time::timeout(SEND_USAGE_WITHIN, on_sent).await;
        }
    }

    /// Ends a call that never reached an upstream: refunds the reserved tokens, no record.
    pub async fn refund(&mut self) {
        if let Some(i) = self.inner.take() {
            let _ = tokio::spawn(async move {
                let r = &i.reservation;
                #[expect(clippy::cast_possible_wrap, reason = "estimates are far below 2^63")]
                let _ = i
                    .deps
                    .coord
                    .adjust(&r.token_keys, -(r.estimate as i64))
                    .await;
                if let Some((key, member)) = &i.slot {
                    let _ = i.deps.coord.give_slot(key, member).await;
                }
            })
            .await;
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if let Some(i) = self.inner.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    i.queue("cancelled", None);
                    if i.has_reconciliation() {
                        rt.spawn(i.reconcile());
                    }
                }
                Err(_) => tracing::error!(
                    provider = %i.provider,
                    model = %i.model,
                    tenant = %i.principal.tenant,
                    usage = ?i.usage,
                    "a call ended outside any runtime; its usage was not published"
                ),
            }
        }
    }
}

/// `weft_router_tokens_total{provider, kind}`: the tokens providers reported, kind `input` or
/// `output` (handles kept per provider, a bounded set).
fn count_tokens(provider: &str, usage: &Usage) {
    static TOKENS: std::sync::LazyLock<
        weft_telemetry::handles::Keyed<(metrics::Counter, metrics::Counter)>,
    > = std::sync::LazyLock::new(weft_telemetry::handles::Keyed::default);
    let c = TOKENS.get(provider, || {
        let counter = |kind: &'static str| {
            metrics::counter!("weft_router_tokens_total", "provider" => provider.to_owned(), "kind" => kind)
        };
        (counter("input"), counter("output"))
    });
    c.0.increment(usage.prompt_tokens);
    c.1.increment(usage.completion_tokens);
}

impl LedgerInner {
    /// Hands the record to the usage sender, which signals `sent` once it is in the NATS
    /// socket and sees to JetStream's ack (a call that never reached a provider has no record:
    /// `sent` is signalled at once).
    fn queue(&self, outcome: &str, sent: Option<tokio::sync::oneshot::Sender<()>>) {
        if self.provider.is_empty() {
            if let Some(sent) = sent {
                let _ = sent.send(());
            }
        } else {
            let usage = self.usage.unwrap_or_default();
            count_tokens(&self.provider, &usage);
            self.deps.usage.send(self.record(outcome, usage), sent);
        }
    }

    /// Whether [`LedgerInner::reconcile`] has anything to do: a quota reservation to settle
    /// with reported usage, or a provider slot to give back.
    fn has_reconciliation(&self) -> bool {
        let reported = self.usage.is_some_and(|u| u.total_tokens > 0);
        (reported && !self.reservation.token_keys.is_empty()) || self.slot.is_some()
    }

    /// Settles the reservation with the reported usage and gives the provider slot back.
    async fn reconcile(self) {
        let usage = self.usage.unwrap_or_default();
        let actual = usage.total_tokens;
        // Without reported usage (none, or all zeros) the reservation stands: an upstream that
        // reports none must not slip past a budget.
        if !self.reservation.token_keys.is_empty() && actual > 0 {
            #[expect(clippy::cast_possible_wrap, reason = "token counts are far below 2^63")]
            let delta = actual as i64 - self.reservation.estimate as i64;
            if let Err(e) = self
                .deps
                .coord
                .adjust(&self.reservation.token_keys, delta)
                .await
            {
                tracing::warn!(error = %e, "quota reconciliation failed");
            }
        }
        if let Some((key, member)) = &self.slot
            && let Err(e) = self.deps.coord.give_slot(key, member).await
        {
            tracing::warn!(error = %e, "provider slot release failed; it lapses with its lease");
        }
    }

    fn record(&self, outcome: &str, usage: Usage) -> UsageRecord {
        let price = self
            .cfg
            .prices
            .get(&format!("{}/{}", self.provider, self.model));
        UsageRecord {
            id: uuid::Uuid::now_v7(),
            at_ms: i64::try_from(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis()),
            )
            .unwrap_or(i64::MAX),
            tenant: self.principal.tenant.to_string(),
            subject: self.principal.subject.clone(),
            token_id: self.principal.token_id.clone(),
            kind: self.kind.to_owned(),
            provider: self.provider.clone(),
            model: self.model.clone(),
            requested_model: self.requested_model.clone(),
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            latency_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            cost_usd: cost(price, &usage),
            outcome: outcome.to_owned(),
        }
    }
}

/// Publishes usage records (as messages of at most [`weft_bus::USAGE_MESSAGE_BYTES`]),
/// retrying each briefly; whether every one was stored. What cannot be published is left in
/// the spool when `spooled`, or else logged whole so it can be recovered from the logs.
async fn publish(bus: &Bus, recs: &[UsageRecord], spooled: bool) -> bool {
    match weft_bus::usage_messages(recs, weft_bus::USAGE_MESSAGE_BYTES) {
        Ok(messages) => {
            let mut all = true;
            for m in &messages {
                if !publish_message(bus, m).await {
                    unpublished(spooled, m);
                    all = false;
                }
            }
            all
        }
        Err(e) => {
            tracing::error!(error = %e, "usage records could not be encoded");
            lost(
                recs.iter()
                    .map(|r| serde_json::to_string(r).unwrap_or_default()),
            );
            false
        }
    }
}

/// Publishes one usage message, retrying briefly; whether JetStream stored it.
async fn publish_message(bus: &Bus, m: &weft_bus::UsageMessage) -> bool {
    for attempt in 0..3u32 {
        match bus.publish_usage_message(m).await {
            Ok(()) => {
                metrics::counter!("weft_router_usage_published_total").increment(m.records as u64);
                return true;
            }
            Err(e) => {
                tracing::warn!(error = %e, attempt, "publishing usage records failed");
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
        }
    }
    false
}

/// A message that could not be published: left in the spool for a later reclaim (its tickets
/// are dropped unstored), or (no spool, or the spool could not be written) logged whole and
/// counted as lost.
fn unpublished(spooled: bool, m: &weft_bus::UsageMessage) {
    if spooled {
        metrics::counter!("weft_router_usage_spool_kept_total").increment(m.records as u64);
        tracing::warn!(
            records = m.records,
            "usage records not published; left in the spool for a later try"
        );
        return;
    }
    let text = String::from_utf8_lossy(&m.payload);
    match weft_bus::decode_usage(&m.payload) {
        Ok(recs) if recs.len() > 1 => lost(recs.iter().map(|r| match r {
            Ok(r) => serde_json::to_string(r).unwrap_or_default(),
            Err(_) => String::new(),
        })),
        _ => lost(std::iter::once(text.into_owned())),
    }
}

/// Counts and logs records that could not be published, each whole at error level.
fn lost(records: impl Iterator<Item = String>) {
    for record in records {
        metrics::counter!("weft_router_usage_lost_total").increment(1);
        tracing::error!(%record, "usage record not published");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_core::message::{Message, Role};

    #[test]
    fn cost_prices_fresh_cached_and_output_tokens() {
        let p = Price {
            input: 3.0,
            output: 15.0,
            cache_read: Some(0.3),
            cache_write: None,
        };
        let u = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 100_000,
            total_tokens: 1_100_000,
            cache_read_tokens: 500_000,
            cache_write_tokens: 0,
        };
        let c = cost(Some(&p), &u);
        assert!((c - (1.5 + 0.15 + 1.5)).abs() < 1e-9, "{c}");
        assert!(cost(None, &u).abs() < f64::EPSILON);
    }

    #[test]
    fn the_estimate_bounds_input_and_includes_max_tokens() {
        let mut req = ChatRequest::default();
        req.messages.push(Message {
            role: Role::User,
            content: vec![ContentBlock::text("x".repeat(300))],
            name: None,
        });
        assert_eq!(estimate_tokens(&req), 104);
        req.sampling.max_tokens = Some(50);
        assert_eq!(estimate_tokens(&req), 154);
    }
}
