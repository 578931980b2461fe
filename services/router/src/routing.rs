//! Model resolution and fallback: a requested model becomes an ordered list of candidates
//! (`provider/model`); the first that accepts the call wins, and a retryable failure before the
//! first byte moves on to the next.

use std::collections::BTreeMap;
use std::time::Instant;

use futures::StreamExt as _;
use weft_config::RouterConfig;
use weft_core::{Error, ErrorCode};

use crate::RouterError;
use crate::providers::{Driver, EventStream, ProviderError};
use crate::types::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult};

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
    drivers: BTreeMap<String, Driver>,
    /// Model name → providers serving it, in provider-name order.
    models: BTreeMap<String, Vec<String>>,
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
            drivers,
            models,
            aliases: cfg
                .aliases
                .iter()
                .map(|(k, v)| (k.clone(), parse_candidates(v)))
                .collect(),
            tiers: cfg
                .tiers
                .iter()
                .map(|(k, v)| (k.clone(), parse_candidates(v)))
                .collect(),
        })
    }

    /// The ordered candidates for a requested model and routing hints.
    pub fn resolve(
        &self,
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
        let tier = tier_hint.or_else(|| model.strip_prefix("tier:"));
        let mut list = if let Some(t) = tier {
            match self.tiers.get(t) {
                Some(c) => c.clone(),
                None => {
                    return not_found(format!(
                        "tier `{t}` does not exist; GET /v1/models lists the tiers you can use"
                    ));
                }
            }
        } else if let Some(c) = self.aliases.get(model) {
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

    /// Runs one turn with fallback. The returned stream starts with `ProviderChosen`.
    pub async fn chat(&self, req: &ChatRequest) -> Result<EventStream, Error> {
        let candidates = self.resolve(
            &req.model,
            req.provider_hint.as_deref(),
            req.tier_hint.as_deref(),
        )?;
        let total = candidates.len();
        let mut last: Option<ProviderError> = None;
        for (i, c) in candidates.into_iter().enumerate() {
            let Some(driver) = self.drivers.get(&c.provider) else {
                continue;
            };
            let started = Instant::now();
            match driver.chat(&c.model, req).await {
                Ok(stream) => {
                    metrics::histogram!("weft_router_upstream_accept_seconds", "provider" => c.provider.clone())
                        .record(started.elapsed().as_secs_f64());
                    metrics::counter!("weft_router_calls_total", "provider" => c.provider.clone(), "outcome" => "ok")
                        .increment(1);
                    let fallbacks = u32::try_from(i).unwrap_or(u32::MAX);
                    let head = futures::stream::once(async move {
                        Ok(ChatEvent::ProviderChosen {
                            provider: c.provider,
                            model: c.model,
                            fallbacks,
                        })
                    });
                    return Ok(Box::pin(head.chain(stream)));
                }
                Err(e) => {
                    metrics::counter!("weft_router_calls_total", "provider" => c.provider.clone(), "outcome" => e.error.code.as_str())
                        .increment(1);
                    let more = i + 1 < total;
                    tracing::warn!(provider = %c.provider, model = %c.model, code = %e.error.code, retryable = e.retryable, fallback = more && e.retryable, "candidate failed");
                    if !e.retryable {
                        return Err(e.error);
                    }
                    if more {
                        metrics::counter!("weft_router_fallbacks_total", "provider" => c.provider.clone()).increment(1);
                    }
                    last = Some(e);
                }
            }
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

    pub async fn embed(&self, req: &EmbedRequest) -> Result<EmbedResult, Error> {
        let candidates = self.resolve(
            &req.model,
            req.provider_hint.as_deref(),
            req.tier_hint.as_deref(),
        )?;
        let mut last = None;
        for c in candidates {
            let Some(driver) = self.drivers.get(&c.provider) else {
                continue;
            };
            match driver.embed(&c.model, req).await {
                Ok(r) => return Ok(r),
                Err(e) if e.retryable => last = Some(e.error),
                Err(e) => return Err(e.error),
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::new(
                ErrorCode::UpstreamError,
                "no candidate could serve the request",
            )
        }))
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

    #[test]
    fn the_model_list_has_models_aliases_and_tiers() {
        let ids: Vec<String> = routing().list_models().into_iter().map(|m| m.id).collect();
        for want in ["mock-1", "ok", "default", "chain", "tier:fast"] {
            assert!(ids.iter().any(|i| i == want), "{want} missing from {ids:?}");
        }
    }
}
