//! `[router]`: providers, aliases, tiers, per-tenant overlays, limits and prices.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::check::{Checked, invalid};
use crate::{MockProviderConfig, ProviderConfig};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterConfig {
    pub listen: SocketAddr,
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Alias → ordered candidates (`provider/model`); later candidates are fallbacks.
    pub aliases: BTreeMap<String, Vec<String>>,
    /// Tier name → ordered candidates, addressed as `tier:<name>` or `x-weft-tier`.
    pub tiers: BTreeMap<String, Vec<String>>,
    /// Where the standalone `weft-router` serves `/metrics`; under `weft up`, the gateway's.
    pub metrics_listen: Option<SocketAddr>,
    /// Per-tenant overlays: aliases and tiers that replace global ones, and limits.
    pub tenants: BTreeMap<String, TenantRouting>,
    /// Default limits for every tenant, subject and token (Redis-enforced).
    pub limits: Limits,
    /// Price table, keyed `provider/model`, in USD per million tokens.
    pub prices: BTreeMap<String, Price>,
    /// Context windows in tokens, keyed `provider/model`: what a run's automatic compaction
    /// measures its prompt against (an `ollama` provider's `num_ctx` counts when unset here).
    pub context_windows: BTreeMap<String, u32>,
    /// Seconds a (provider, model) is skipped after a retryable failure; 0 disables it.
    pub cooldown_secs: u64,
    /// Directory of usage records JetStream has not stored yet, appended before a call's end
    /// reaches its caller, replayed by any router sharing it; empty = none (lost if NATS is down).
    pub usage_spool_dir: PathBuf,
}

/// One tenant's routing overlay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantRouting {
    pub aliases: BTreeMap<String, Vec<String>>,
    pub tiers: BTreeMap<String, Vec<String>>,
    /// Replaces `router.limits.tenant` for this tenant (unset fields fall back to it).
    pub limits: Option<LimitSpec>,
}

/// Limits at three levels; each applies separately to every caller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub tenant: LimitSpec,
    /// For each subject (tenant + subject).
    pub subject: LimitSpec,
    pub token: LimitSpec,
    /// `max_tokens` sent (and reserved) for a call without one while a token budget applies.
    pub output_reservation: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            tenant: LimitSpec::default(),
            subject: LimitSpec::default(),
            token: LimitSpec::default(),
            output_reservation: 1024,
        }
    }
}

impl Limits {
    /// Whether any limit is configured anywhere (else no Redis call is made per request).
    pub fn any(&self) -> bool {
        !(self.tenant.is_empty() && self.subject.is_empty() && self.token.is_empty())
    }
}

/// Requests and tokens per window; unset = unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSpec {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub tokens_per_day: Option<u64>,
}

impl LimitSpec {
    pub fn is_empty(&self) -> bool {
        self.requests_per_minute.is_none()
            && self.tokens_per_minute.is_none()
            && self.tokens_per_day.is_none()
    }

    /// This spec with unset fields taken from `base`.
    #[must_use]
    pub fn or(self, base: Self) -> Self {
        Self {
            requests_per_minute: self.requests_per_minute.or(base.requests_per_minute),
            tokens_per_minute: self.tokens_per_minute.or(base.tokens_per_minute),
            tokens_per_day: self.tokens_per_day.or(base.tokens_per_day),
        }
    }
}

/// What one model costs, in USD per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cached input read; defaults to `input` when unset.
    pub cache_read: Option<f64>,
    /// Cached input written; defaults to `input` when unset.
    pub cache_write: Option<f64>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        let mut providers = BTreeMap::new();
        providers.insert(
            "mock".to_owned(),
            ProviderConfig::Mock(MockProviderConfig::default()),
        );
        let mut aliases = BTreeMap::new();
        aliases.insert("default".to_owned(), vec!["mock/mock-1".to_owned()]);
        let mut tiers = BTreeMap::new();
        tiers.insert("fast".to_owned(), vec!["mock/mock-1".to_owned()]);
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8788)),
            providers,
            aliases,
            tiers,
            metrics_listen: None,
            tenants: BTreeMap::new(),
            limits: Limits::default(),
            prices: BTreeMap::new(),
            context_windows: BTreeMap::new(),
            cooldown_secs: 30,
            usage_spool_dir: PathBuf::from(".weft/usage-spool"),
        }
    }
}

impl RouterConfig {
    /// Checks every provider, that prices name configured providers, the output reservation, and
    /// that every alias and tier candidate (global and per tenant) names a configured model.
    pub fn validate(&self) -> Checked {
        for (name, p) in &self.providers {
            p.validate(name)?;
        }
        for key in self.prices.keys() {
            if key
                .split_once('/')
                .is_none_or(|(p, _)| !self.providers.contains_key(p))
            {
                return invalid(format!(
                    "router.prices.{key:?} must be `provider/model` with a configured provider"
                ));
            }
        }
        for (key, window) in &self.context_windows {
            if key
                .split_once('/')
                .is_none_or(|(p, _)| !self.providers.contains_key(p))
            {
                return invalid(format!(
                    "router.context_windows.{key:?} must be `provider/model` with a configured provider"
                ));
            }
            if *window < 256 {
                return invalid(format!(
                    "router.context_windows.{key:?} is {window} tokens; a window is at least 256"
                ));
            }
        }
        if self.limits.output_reservation == 0 {
            return invalid("router.limits.output_reservation must be at least 1");
        }
        self.check_candidates("aliases", &self.aliases)?;
        self.check_candidates("tiers", &self.tiers)?;
        for (tenant, t) in &self.tenants {
            self.check_candidates(&format!("tenants.{tenant}.aliases"), &t.aliases)?;
            self.check_candidates(&format!("tenants.{tenant}.tiers"), &t.tiers)?;
        }
        Ok(())
    }

    /// Every key of `map` (`router.<section>`) lists at least one `provider/model` this router
    /// serves (any model of an HTTP provider, a configured one of a mock).
    fn check_candidates(&self, section: &str, map: &BTreeMap<String, Vec<String>>) -> Checked {
        for (key, candidates) in map {
            if candidates.is_empty() {
                return invalid(format!(
                    "router.{section}.{key} has no candidates; list at least one `provider/model`"
                ));
            }
            for c in candidates {
                let Some((provider, model)) = c.split_once('/') else {
                    return invalid(format!(
                        "router.{section}.{key}: candidate {c:?} must be `provider/model`"
                    ));
                };
                match self.providers.get(provider) {
                    None => {
                        return invalid(format!(
                            "router.{section}.{key}: candidate {c:?} names provider `{provider}`, which is not configured"
                        ));
                    }
                    Some(ProviderConfig::Mock(MockProviderConfig { models }))
                        if !models.contains_key(model) =>
                    {
                        return invalid(format!(
                            "router.{section}.{key}: mock provider `{provider}` has no model `{model}`"
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }
}
