//! Model resolution and fallback: a requested model becomes an ordered list of candidates
//! (`provider/model`); the first that accepts the call wins, and a retryable failure before the
//! first byte moves on to the next.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use weft_config::RouterConfig;
use weft_coord::Admission;
use weft_core::message::ContentBlock;
use weft_core::{Error, ErrorCode, Principal};

use crate::RouterError;
use crate::accounting::{self, Deps, Ledger, LimitHeaders};
use crate::providers::{Driver, EventStream, ProviderError};
use crate::types::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult, Fallback};

/// One place a request may go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub provider: String,
    pub model: String,
}

/// An entry of the model list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelEntry {
    pub id: String,
    /// `model`, `alias` or `tier`.
    pub kind: &'static str,
    pub owned_by: String,
}

pub struct Routing {
    cfg: Arc<RouterConfig>,
    drivers: BTreeMap<String, Driver>,
    /// Model name → providers serving it, in provider-name order.
    models: BTreeMap<String, Vec<String>>,
    aliases: BTreeMap<String, Vec<Candidate>>,
    tiers: BTreeMap<String, Vec<Candidate>>,
    /// Per-tenant overlays: (aliases, tiers), replacing global entries of the same name.
    overlays: BTreeMap<String, Overlay>,
    /// Redis and NATS, for quotas, provider caps and usage; `None` in driver-only tests.
    deps: Option<Deps>,
    /// (provider, model) → cooling down until.
    cooling: Mutex<HashMap<(String, String), Instant>>,
    /// Each provider's metric handles, made on first use.
    provider_metrics: weft_telemetry::handles::Keyed<ProviderMetrics>,
}

/// The per-call metrics of one provider.
struct ProviderMetrics {
    accept_seconds: metrics::Histogram,
    calls_ok: metrics::Counter,
}

impl ProviderMetrics {
    fn new(provider: &str) -> Self {
        // Shown at 0 from the provider's first call on, so `rate()` over it works before the
        // first fallback (and a dashboard's query finds the series).
        metrics::counter!("weft_router_fallbacks_total", "provider" => provider.to_owned())
            .increment(0);
        metrics::counter!("weft_router_upstream_retries_total", "provider" => provider.to_owned())
            .increment(0);
        Self {
            accept_seconds: metrics::histogram!("weft_router_upstream_accept_seconds", "provider" => provider.to_owned()),
            calls_ok: metrics::counter!("weft_router_calls_total", "provider" => provider.to_owned(), "outcome" => "ok"),
        }
    }
}

#[derive(Default)]
struct Overlay {
    aliases: BTreeMap<String, Vec<Candidate>>,
    tiers: BTreeMap<String, Vec<Candidate>>,
}

impl std::fmt::Debug for Routing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routing")
            .field("providers", &self.drivers.keys().collect::<Vec<_>>())
            .field("aliases", &self.aliases.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn parse_candidates(list: &[String]) -> Vec<Candidate> {
    list.iter()
        .filter_map(|c| c.split_once('/'))
        .map(|(p, m)| Candidate {
            provider: p.to_owned(),
            model: m.to_owned(),
        })
        .collect()
}

fn parse_map(m: &BTreeMap<String, Vec<String>>) -> BTreeMap<String, Vec<Candidate>> {
    m.iter()
        .map(|(k, v)| (k.clone(), parse_candidates(v)))
        .collect()
}

/// Drops reasoning blocks: another provider's reasoning (signed or not) is not valid input for
/// the candidate a call falls back to.
fn strip_reasoning(req: &ChatRequest) -> ChatRequest {
    let mut r = req.clone();
    for m in &mut r.messages {
        m.content
            .retain(|b| !matches!(b, ContentBlock::Reasoning { .. }));
    }
    r
}

/// What an accepted call hands back: its events (starting with any `Fallback`s, then
/// `ProviderChosen`) and the rate-limit headers decided before the first byte.
pub struct Accepted {
    pub events: EventStream,
    pub headers: LimitHeaders,
}

impl Routing {
    pub fn from_config(cfg: &RouterConfig) -> Result<Self, RouterError> {
        let mut drivers = BTreeMap::new();
        let mut models: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, p) in &cfg.providers {
            let driver = Driver::new(name, p).map_err(RouterError::Config)?;
            for m in p.models() {
                models.entry(m).or_default().push(name.clone());
            }
            drivers.insert(name.clone(), driver);
        }
        Ok(Self {
            cfg: Arc::new(cfg.clone()),
            drivers,
            models,
            aliases: parse_map(&cfg.aliases),
            tiers: parse_map(&cfg.tiers),
            overlays: cfg
                .tenants
                .iter()
                .map(|(t, o)| {
                    (
                        t.clone(),
                        Overlay {
                            aliases: parse_map(&o.aliases),
                            tiers: parse_map(&o.tiers),
                        },
                    )
                })
                .collect(),
            deps: None,
            cooling: Mutex::new(HashMap::new()),
            provider_metrics: weft_telemetry::handles::Keyed::default(),
        })
    }

    /// Adds the Redis and NATS connections that quotas, provider caps and usage need.
    #[must_use]
    pub fn with_deps(mut self, deps: Deps) -> Self {
        self.deps = Some(deps);
        self
    }

    /// The ordered candidates for a requested model and routing hints, as `tenant` sees them
    /// (its overlay first).
    pub fn resolve(
        &self,
        model: &str,
        provider_hint: Option<&str>,
        tier_hint: Option<&str>,
    ) -> Result<Vec<Candidate>, Error> {
        self.resolve_for(None, model, provider_hint, tier_hint)
    }

    /// [`Routing::resolve`] for one tenant, whose overlay entries replace global ones.
    pub fn resolve_for(
        &self,
        tenant: Option<&str>,
        model: &str,
        provider_hint: Option<&str>,
        tier_hint: Option<&str>,
    ) -> Result<Vec<Candidate>, Error> {
        let not_found =
            |what: String| Err(Error::new(ErrorCode::ModelNotFound, what).with_param("model"));
        if let Some(p) = provider_hint
            && !self.drivers.contains_key(p)
        {
            return Err(Error::invalid(format!(
                "x-weft-provider names `{p}`, which is not configured; GET /v1/models lists what you can use"
            ))
            .with_param("x-weft-provider"));
        }
        let overlay = tenant.and_then(|t| self.overlays.get(t));
        let tier = tier_hint.or_else(|| model.strip_prefix("tier:"));
        let mut list = if let Some(t) = tier {
            match overlay
                .and_then(|o| o.tiers.get(t))
                .or_else(|| self.tiers.get(t))
            {
                Some(c) => c.clone(),
                None => {
                    return not_found(format!(
                        "tier `{t}` does not exist; GET /v1/models lists the tiers you can use"
                    ));
                }
            }
        } else if let Some(c) = overlay
            .and_then(|o| o.aliases.get(model))
            .or_else(|| self.aliases.get(model))
        {
            c.clone()
        } else if let Some(providers) = self.models.get(model) {
            providers
                .iter()
                .map(|p| Candidate {
                    provider: p.clone(),
                    model: model.to_owned(),
                })
                .collect()
        } else if let Some((p, m)) = model.split_once('/')
            && self.drivers.get(p).is_some_and(|d| d.serves(m))
        {
            vec![Candidate {
                provider: p.to_owned(),
                model: m.to_owned(),
            }]
        } else {
            return not_found(format!(
                "model `{model}` does not exist; GET /v1/models lists the models and aliases you can use"
            ));
        };
        if let Some(p) = provider_hint {
            list.retain(|c| c.provider == p);
            if list.is_empty() {
                return not_found(format!("provider `{p}` does not serve `{model}`"));
            }
        }
        Ok(list)
    }

    /// Candidates in the order to try them: healthy ones first, those cooling down after a
    /// recent failure last (still tried when nothing else is left).
    fn order(&self, candidates: Vec<Candidate>) -> Vec<Candidate> {
        let now = Instant::now();
        let Ok(mut cooling) = self.cooling.lock() else {
            return candidates;
        };
        cooling.retain(|_, until| *until > now);
        if cooling.is_empty() {
            return candidates;
        }
        let (cool, warm): (Vec<_>, Vec<_>) = candidates
            .into_iter()
            .partition(|c| cooling.contains_key(&(c.provider.clone(), c.model.clone())));
        warm.into_iter().chain(cool).collect()
    }

    fn mark(&self, c: &Candidate, healthy: bool) {
        if self.cfg.cooldown_secs == 0 {
            return;
        }
        if let Ok(mut cooling) = self.cooling.lock() {
            if healthy {
                // The common case, a healthy answer with nothing cooling: no key to build.
                if !cooling.is_empty() {
                    cooling.retain(|(p, m), _| !(*p == c.provider && *m == c.model));
                }
            } else {
                cooling.insert(
                    (c.provider.clone(), c.model.clone()),
                    Instant::now() + Duration::from_secs(self.cfg.cooldown_secs),
                );
            }
        }
    }

    /// Runs one turn with no caller identity (driver tests); see [`Routing::chat_as`].
    pub async fn chat(&self, req: &ChatRequest) -> Result<EventStream, Error> {
        let p = Principal {
            tenant: weft_core::TenantId::parse("weft-system")?,
            subject: "router".into(),
            scopes: weft_core::Scopes::default(),
            token_id: None,
            agent: None,
        };
        self.chat_as(&p, req.clone()).await.map(|a| a.events)
    }

    /// Runs one turn for `p` with quotas, fallback and accounting. The returned stream starts
    /// with a `Fallback` per candidate that failed, then `ProviderChosen`.
    pub async fn chat_as(&self, p: &Principal, mut req: ChatRequest) -> Result<Accepted, Error> {
        let candidates = self.order(self.resolve_for(
            Some(p.tenant.as_str()),
            &req.model,
            req.provider_hint.as_deref(),
            req.tier_hint.as_deref(),
        )?);
        let mut ledger = None;
        let mut headers = Vec::new();
        if let Some(deps) = &self.deps {
            if req.sampling.max_tokens.is_none() && accounting::token_budget_applies(&self.cfg, p) {
                // The reservation must bound the call, so a budgeted call without a cap gets one.
                req.sampling.max_tokens = Some(self.cfg.limits.output_reservation);
            }
            let reservation = if self.cfg.limits.any() || !self.cfg.tenants.is_empty() {
                accounting::reserve(
                    &self.cfg,
                    &deps.coord,
                    p,
                    accounting::estimate_tokens(&req),
                    true,
                )
                .await?
            } else {
                accounting::Reservation::default()
            };
            headers.clone_from(&reservation.headers);
            ledger = Some(Ledger::new(
                deps.clone(),
                self.cfg.clone(),
                p.clone(),
                "chat",
                req.model.clone(),
                reservation,
            ));
        }
        let first_kind = candidates
            .first()
            .and_then(|c| self.drivers.get(&c.provider))
            .map(Driver::kind);
        let total = candidates.len();
        let mut fallbacks: Vec<ChatEvent> = Vec::new();
        let mut last: Option<ProviderError> = None;
        for (i, c) in candidates.into_iter().enumerate() {
            let Some(driver) = self.drivers.get(&c.provider) else {
                continue;
            };
            let slot = match self.take_slot(&c).await {
                Ok(slot) => slot,
                Err(e) => {
                    fallbacks.push(fallback_event(&c, &e.error));
                    last = Some(e);
                    continue;
                }
            };
            if let Some(l) = &mut ledger {
                l.attempt(&c.provider, &c.model, slot);
            }
            let translated;
            let call = if i > 0 && Some(driver.kind()) != first_kind {
                translated = strip_reasoning(&req);
                &translated
            } else {
                &req
            };
            let started = Instant::now();
            let accepted = match driver.chat(&c.model, call).await {
                Ok(mut stream) => match stream.next().await {
                    // A failure before the first event is, for the caller, still before the
                    // first byte (e.g. an overloaded error as a stream's first event, or a stall):
                    // the next candidate may serve it.
                    Some(Err(e)) => Err(ProviderError::retryable(e)),
                    first => {
                        Ok(Box::pin(futures::stream::iter(first).chain(stream)) as EventStream)
                    }
                },
                Err(e) => Err(e),
            };
            match accepted {
                Ok(stream) => {
                    self.mark(&c, true);
                    let m = self
                        .provider_metrics
                        .get(&c.provider, || ProviderMetrics::new(&c.provider));
                    m.accept_seconds.record(started.elapsed().as_secs_f64());
                    m.calls_ok.increment(1);
                    let fallbacks_n = u32::try_from(fallbacks.len()).unwrap_or(u32::MAX);
                    let chosen = ChatEvent::ProviderChosen {
                        provider: c.provider,
                        model: c.model,
                        fallbacks: fallbacks_n,
                    };
                    let head = futures::stream::iter(fallbacks.into_iter().chain([chosen]).map(Ok));
                    let body = accounted(stream, ledger);
                    return Ok(Accepted {
                        events: Box::pin(head.chain(body)),
                        headers,
                    });
                }
                Err(e) => {
                    if let Some(l) = &mut ledger {
                        l.release_slot().await;
                    }
                    metrics::counter!("weft_router_calls_total", "provider" => c.provider.clone(), "outcome" => e.error.code.as_str())
                        .increment(1);
                    let more = i + 1 < total;
                    tracing::warn!(provider = %c.provider, model = %c.model, code = %e.error.code, retryable = e.retryable, fallback = more && e.retryable, "candidate failed");
                    if !e.retryable {
                        if let Some(l) = &mut ledger {
                            l.refund().await;
                        }
                        return Err(e.error);
                    }
                    // A model's unreadable output says nothing about the provider's health:
                    // the next candidate is tried, but nothing cools down.
                    if e.error.code != ErrorCode::ModelOutputInvalid {
                        self.mark(&c, false);
                    }
                    if more {
                        metrics::counter!("weft_router_fallbacks_total", "provider" => c.provider.clone()).increment(1);
                    }
                    fallbacks.push(fallback_event(&c, &e.error));
                    last = Some(e);
                }
            }
        }
        if let Some(l) = &mut ledger {
            l.refund().await;
        }
        Err(last.map_or_else(
            || {
                Error::new(
                    ErrorCode::UpstreamError,
                    "no candidate could serve the request",
                )
            },
            |e| e.error,
        ))
    }

    /// Takes a fleet-wide concurrency slot of the candidate's provider when it has a cap.
    async fn take_slot(&self, c: &Candidate) -> Result<Option<(String, String)>, ProviderError> {
        let (Some(deps), Some(cap)) = (
            &self.deps,
            self.cfg
                .providers
                .get(&c.provider)
                .and_then(|p| p.http())
                .and_then(|h| h.max_concurrency),
        ) else {
            return Ok(None);
        };
        let key = deps.coord.keys().provider_slots(&c.provider);
        let member = uuid::Uuid::now_v7().to_string();
        match deps
            .coord
            .take_slot(&key, &member, cap, Duration::from_secs(600))
            .await
        {
            Ok(Admission::Admitted | Admission::AlreadyHeld) => Ok(Some((key, member))),
            Ok(Admission::Full { retry_after }) => {
                let mut e = Error::new(
                    ErrorCode::RateLimited,
                    format!(
                        "provider `{}` is at its concurrency cap ({cap} calls in flight)",
                        c.provider
                    ),
                );
                e.retry_after = Some(retry_after.min(Duration::from_secs(5)));
                Err(ProviderError::retryable(e))
            }
            Err(e) => {
                tracing::error!(error = %e, "provider slot check failed");
                Err(ProviderError::retryable(Error::new(
                    ErrorCode::AdmissionUnavailable,
                    "provider concurrency cannot be checked right now (the quota store is unreachable)",
                )))
            }
        }
    }

    pub async fn embed(&self, req: &EmbedRequest) -> Result<EmbedResult, Error> {
        let p = Principal {
            tenant: weft_core::TenantId::parse("weft-system")?,
            subject: "router".into(),
            scopes: weft_core::Scopes::default(),
            token_id: None,
            agent: None,
        };
        self.embed_as(&p, req).await.map(|(r, _)| r)
    }

    /// Embeds for `p` with limits, fallback and accounting; also returns the rate-limit headers.
    pub async fn embed_as(
        &self,
        p: &Principal,
        req: &EmbedRequest,
    ) -> Result<(EmbedResult, LimitHeaders), Error> {
        // Bounded here as well as at the gateway, so no driver is ever asked for more.
        weft_core::limits::check_embed_request(
            req.input.len(),
            req.input.iter().map(String::len).sum(),
            req.dimensions,
        )?;
        let candidates = self.order(self.resolve_for(
            Some(p.tenant.as_str()),
            &req.model,
            req.provider_hint.as_deref(),
            req.tier_hint.as_deref(),
        )?);
        let mut ledger = None;
        let mut headers = Vec::new();
        if let Some(d) = &self.deps {
            let reservation = if self.cfg.limits.any() || !self.cfg.tenants.is_empty() {
                let estimate = req
                    .input
                    .iter()
                    .map(|s| (s.len() as u64).div_ceil(3) + 1)
                    .sum();
                accounting::reserve(&self.cfg, &d.coord, p, estimate, false).await?
            } else {
                accounting::Reservation::default()
            };
            headers.clone_from(&reservation.headers);
            ledger = Some(Ledger::new(
                d.clone(),
                self.cfg.clone(),
                p.clone(),
                "embed",
                req.model.clone(),
                reservation,
            ));
        }
        let mut last = None;
        for c in candidates {
            let Some(driver) = self.drivers.get(&c.provider) else {
                continue;
            };
            let slot = match self.take_slot(&c).await {
                Ok(slot) => slot,
                Err(e) => {
                    last = Some(e.error);
                    continue;
                }
            };
            if let Some(l) = &mut ledger {
                l.attempt(&c.provider, &c.model, slot);
            }
            match driver.embed(&c.model, req).await {
                Ok(r) => {
                    self.mark(&c, true);
                    if let Some(l) = &mut ledger {
                        l.usage(r.usage);
                        l.finish("ok").await;
                    }
                    // A provider's default size can still make an answer too big to return.
                    let widest = r.vectors.iter().map(Vec::len).max().unwrap_or(0);
                    weft_core::limits::check_embed_answer(r.vectors.len(), widest)?;
                    return Ok((r, headers));
                }
                Err(e) if e.retryable => {
                    if let Some(l) = &mut ledger {
                        l.release_slot().await;
                    }
                    self.mark(&c, false);
                    last = Some(e.error);
                }
                Err(e) => {
                    if let Some(l) = &mut ledger {
                        l.refund().await;
                    }
                    return Err(e.error);
                }
            }
        }
        if let Some(l) = &mut ledger {
            l.refund().await;
        }
        Err(last.unwrap_or_else(|| {
            Error::new(
                ErrorCode::UpstreamError,
                "no candidate could serve the request",
            )
        }))
    }

    /// Everything `tenant` may address: model names, aliases and tiers, its overlay included.
    pub fn list_models_for(&self, tenant: &str) -> Vec<ModelEntry> {
        let mut out = self.list_models();
        if let Some(o) = self.overlays.get(tenant) {
            for a in o.aliases.keys() {
                if !self.aliases.contains_key(a) {
                    out.push(ModelEntry {
                        id: a.clone(),
                        kind: "alias",
                        owned_by: "weft".into(),
                    });
                }
            }
            for t in o.tiers.keys() {
                if !self.tiers.contains_key(t) {
                    out.push(ModelEntry {
                        id: format!("tier:{t}"),
                        kind: "tier",
                        owned_by: "weft".into(),
                    });
                }
            }
        }
        out
    }

    /// The context window of what `model` names for `tenant`: the smallest known among its
    /// candidates (a fallback may answer with any), `None` when none is known.
    pub fn context_window(&self, tenant: Option<&str>, model: &str) -> Result<Option<u32>, Error> {
        let candidates = self.resolve_for(tenant, model, None, None)?;
        Ok(candidates
            .iter()
            .filter_map(|c| {
                self.cfg
                    .context_windows
                    .get(&format!("{}/{}", c.provider, c.model))
                    .copied()
                    .or_else(|| {
                        self.cfg
                            .providers
                            .get(&c.provider)
                            .and_then(|p| p.http())
                            .and_then(|h| h.num_ctx)
                    })
            })
            .min())
    }

    /// Everything a caller may address: model names, aliases and tiers.
    pub fn list_models(&self) -> Vec<ModelEntry> {
        let mut out: Vec<ModelEntry> = self
            .models
            .iter()
            .map(|(m, providers)| ModelEntry {
                id: m.clone(),
                kind: "model",
                owned_by: providers.first().cloned().unwrap_or_default(),
            })
            .collect();
        out.extend(self.aliases.keys().map(|a| ModelEntry {
            id: a.clone(),
            kind: "alias",
            owned_by: "weft".into(),
        }));
        out.extend(self.tiers.keys().map(|t| ModelEntry {
            id: format!("tier:{t}"),
            kind: "tier",
            owned_by: "weft".into(),
        }));
        out
    }
}

fn fallback_event(c: &Candidate, e: &Error) -> ChatEvent {
    ChatEvent::Fallback(Fallback {
        provider: c.provider.clone(),
        model: c.model.clone(),
        code: e.code.as_str().to_owned(),
        message: e.message.clone(),
    })
}

/// The driver's events with the call accounted when they end: the usage is noted, and before
/// `Finish` (or an error) reaches the caller the record is published and the reservation
/// reconciled.
fn accounted(inner: EventStream, ledger: Option<Ledger>) -> EventStream {
    let Some(ledger) = ledger else {
        return inner;
    };
    Box::pin(futures::stream::unfold(
        Some((inner, ledger)),
        |st| async move {
            let (mut inner, mut ledger) = st?;
            match inner.next().await {
                Some(Ok(ChatEvent::Usage(u))) => {
                    ledger.usage(u);
                    Some((Ok(ChatEvent::Usage(u)), Some((inner, ledger))))
                }
                Some(Ok(ChatEvent::Finish(f))) => {
                    ledger.finish("ok").await;
                    Some((Ok(ChatEvent::Finish(f)), Some((inner, ledger))))
                }
                Some(Ok(ev)) => Some((Ok(ev), Some((inner, ledger)))),
                Some(Err(e)) => {
                    ledger.finish(e.code.as_str()).await;
                    Some((Err(e), None))
                }
                None => {
                    ledger.finish("incomplete").await;
                    None
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_config::{MockModelConfig, MockProviderConfig, ProviderConfig};

    fn routing() -> Routing {
        let mut cfg = RouterConfig::default();
        let mut models = BTreeMap::new();
        models.insert(
            "flaky".to_owned(),
            MockModelConfig {
                error_rate_500: 1.0,
                ..Default::default()
            },
        );
        models.insert("ok".to_owned(), MockModelConfig::default());
        cfg.providers.insert(
            "m2".into(),
            ProviderConfig::Mock(MockProviderConfig { models }),
        );
        cfg.aliases.insert(
            "chain".into(),
            vec!["m2/flaky".into(), "mock/mock-1".into()],
        );
        Routing::from_config(&cfg).unwrap()
    }

    #[test]
    fn names_aliases_tiers_and_provider_paths_resolve() {
        let r = routing();
        let c = |p: &str, m: &str| Candidate {
            provider: p.into(),
            model: m.into(),
        };
        assert_eq!(
            r.resolve("mock-1", None, None).unwrap(),
            vec![c("mock", "mock-1")]
        );
        assert_eq!(
            r.resolve("default", None, None).unwrap(),
            vec![c("mock", "mock-1")]
        );
        assert_eq!(
            r.resolve("tier:fast", None, None).unwrap(),
            vec![c("mock", "mock-1")]
        );
        assert_eq!(
            r.resolve("anything", None, Some("fast")).unwrap(),
            vec![c("mock", "mock-1")]
        );
        assert_eq!(r.resolve("m2/ok", None, None).unwrap(), vec![c("m2", "ok")]);
        assert_eq!(
            r.resolve("chain", Some("mock"), None).unwrap(),
            vec![c("mock", "mock-1")]
        );
    }

    #[test]
    fn unknown_models_are_404_with_a_hint() {
        let r = routing();
        let e = r.resolve("gpt-9", None, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::ModelNotFound);
        assert!(e.message.contains("/v1/models"));
        assert_eq!(
            r.resolve("m2/nope", None, None).unwrap_err().code,
            ErrorCode::ModelNotFound
        );
        assert_eq!(
            r.resolve("tier:nope", None, None).unwrap_err().code,
            ErrorCode::ModelNotFound
        );
        assert_eq!(
            r.resolve("mock-1", Some("nope"), None).unwrap_err().code,
            ErrorCode::InvalidRequest
        );
    }

    #[tokio::test]
    async fn a_retryable_failure_falls_back_to_the_next_candidate() {
        let r = routing();
        let req = ChatRequest {
            model: "chain".into(),
            ..Default::default()
        };
        let mut s = r.chat(&req).await.unwrap();
        assert!(matches!(
            s.next().await.unwrap().unwrap(),
            ChatEvent::Fallback(Fallback { provider, model, code, .. })
                if provider == "m2" && model == "flaky" && code == "upstream_error"
        ));
        assert_eq!(
            s.next().await.unwrap().unwrap(),
            ChatEvent::ProviderChosen {
                provider: "mock".into(),
                model: "mock-1".into(),
                fallbacks: 1
            }
        );
        let only_flaky = ChatRequest {
            model: "m2/flaky".into(),
            ..Default::default()
        };
        assert_eq!(
            r.chat(&only_flaky).await.err().unwrap().code,
            ErrorCode::UpstreamError
        );
    }

    #[tokio::test]
    async fn a_failing_candidate_cools_down_behind_the_healthy_ones() {
        let r = routing();
        let chain = r.resolve("chain", None, None).unwrap();
        assert_eq!(chain[0].provider, "m2");
        let req = ChatRequest {
            model: "chain".into(),
            ..Default::default()
        };
        let _ = r.chat(&req).await.unwrap();
        // m2/flaky failed: it is tried last while it cools down.
        let ordered = r.order(chain.clone());
        assert_eq!(ordered[0].provider, "mock");
        assert_eq!(ordered[1].provider, "m2");
        let mut s = r.chat(&req).await.unwrap();
        assert!(matches!(
            s.next().await.unwrap().unwrap(),
            ChatEvent::ProviderChosen { fallbacks: 0, .. }
        ));
        // A success clears it.
        r.mark(&chain[0], true);
        assert_eq!(r.order(chain)[0].provider, "m2");
    }

    #[test]
    fn reasoning_is_stripped_for_another_provider() {
        let req = ChatRequest {
            messages: vec![weft_core::message::Message {
                role: weft_core::message::Role::Assistant,
                content: vec![
                    ContentBlock::Reasoning {
                        text: "hmm".into(),
                        signature: Some("sig".into()),
                    },
                    ContentBlock::text("answer"),
                ],
                name: None,
            }],
            ..Default::default()
        };
        let r = strip_reasoning(&req);
        assert_eq!(r.messages[0].content, vec![ContentBlock::text("answer")]);
    }

    #[test]
    fn the_model_list_has_models_aliases_and_tiers() {
        let ids: Vec<String> = routing().list_models().into_iter().map(|m| m.id).collect();
        for want in ["mock-1", "ok", "default", "chain", "tier:fast"] {
            assert!(ids.iter().any(|i| i == want), "{want} missing from {ids:?}");
        }
    }
}
