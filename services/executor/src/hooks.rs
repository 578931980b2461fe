//! Tool-use hooks (docs/hooks.md): the tenant's `hook` definitions that apply to a call are
//! called around it — pre hooks in registration order before the tool runs (each may allow,
//! deny or rewrite the input), post hooks in reverse order after it (each may allow, rewrite
//! or withhold the result). Each call is a POST of a [`HookCall`] signed with Standard Webhooks,
//! dialled through the executor's egress guard (the HTTP tool's client rules and
//! `executor.http_private_exempt`) within the hook's `timeout_ms`; a call without a usable
//! answer is decided by the hook's `fail_mode`.
//!
//! Hooks only narrow: a rewrite changes the input of the same tool (still a JSON object, still
//! checked by the tool as any input is) or the result text; nothing here adds a tool or a host.
//!
//! What the pre hooks decided is recorded in the call's ledger row before the tool runs
//! ([`PreRecord`]), so a replay after a crash reuses it instead of calling them again; the post
//! hooks' decisions are recorded with the result. [`orchestrate`](crate::orchestrate) does both.
//!
//! The tenant's hooks are listed once per `executor.hooks_cache_ms` per process ([`Hooks`]):
//! a run whose tenant has none pays a map lookup per turn with tool calls.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac as _};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use weft_config::ExecutorConfig;
use weft_core::TenantId;
use weft_core::def::DefContent as _;
use weft_core::hook::{
    CALL_POST, CALL_PRE, FailMode, HookAnswer, HookCall, HookContent, HookPhase, HookVerdict,
};
use weft_core::run::{HookDecision, RunEvent};
use weft_proto::v1;

use crate::tools::http::{AddressPolicy, HttpToolError, SystemLookup, guarded_client};

/// The largest answer read from a receiver.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Characters of a receiver's `reason` kept (shown to the model, recorded).
const MAX_REASON_CHARS: usize = 1024;

/// One active hook definition of a tenant.
#[derive(Debug)]
pub(crate) struct Hook {
    pub name: String,
    pub content: HookContent,
}

/// A tenant's hooks as last listed.
struct Listed {
    at: Instant,
    hooks: Arc<[Hook]>,
}

/// The hook client of an executor process: the guarded HTTP client, and each tenant's hooks
/// cached for `executor.hooks_cache_ms`.
pub(crate) struct Hooks {
    client: reqwest::Client,
    addresses: Arc<AddressPolicy>,
    ttl: Duration,
    secret_prefix: String,
    listed: Mutex<HashMap<TenantId, Listed>>,
}

impl Hooks {
    pub(crate) fn new(cfg: &ExecutorConfig) -> Result<Self, HttpToolError> {
        let addresses = Arc::new(AddressPolicy::new(&cfg.http_private_exempt)?);
        let client = guarded_client(&addresses, Arc::new(SystemLookup))?;
        Ok(Self {
            client,
            addresses,
            ttl: Duration::from_millis(cfg.hooks_cache_ms),
            secret_prefix: cfg.hook_secret_env_prefix.clone(),
            listed: Mutex::new(HashMap::new()),
        })
    }

    fn cached(&self, tenant: &TenantId, fresh: bool) -> Option<Arc<[Hook]>> {
        let m = self.listed.lock().ok()?;
        let l = m.get(tenant)?;
        (!fresh || l.at.elapsed() < self.ttl).then(|| l.hooks.clone())
    }

    /// The tenant's active hooks, in registration order: from the cache while it is fresh,
    /// else listed with one substrate call (`request` carries the run's principal). When the
    /// substrate cannot answer, the last list is used if there is one; else the error (the run
    /// is retried later rather than running tools whose hooks are unknown).
    pub(crate) async fn for_tenant(
        &self,
        tenant: &TenantId,
        substrate: &mut v1::substrate_client::SubstrateClient<weft_proto::transport::GrpcTransport>,
        request: impl FnOnce() -> Result<tonic::Request<v1::ListDefsRequest>, weft_core::Error>,
    ) -> Result<Arc<[Hook]>, String> {
        if let Some(h) = self.cached(tenant, true) {
            return Ok(h);
        }
        let listed = match request() {
            Ok(req) => substrate
                .list_active_defs(req)
                .await
                .map_err(|s| weft_core::Error::from(&s).message),
            Err(e) => Err(e.message),
        };
        let versions = match listed {
            Ok(r) => r.into_inner().versions,
            Err(e) => {
                return match self.cached(tenant, false) {
                    Some(h) => {
                        tracing::warn!(error = %e, "cannot list the tenant's hooks; using the last list");
                        Ok(h)
                    }
                    None => Err(format!("cannot list the tenant's hooks: {e}")),
                };
            }
        };
        let hooks: Arc<[Hook]> = versions
            .into_iter()
            .filter_map(|v| match HookContent::from_json_str(&v.content_json) {
                Ok(content) => Some(Hook {
                    name: v.name,
                    content,
                }),
                Err(e) => {
                    tracing::error!(hook = %v.name, error = %e.message, "a stored hook does not parse; it is not called");
                    None
                }
            })
            .collect();
        if let Ok(mut m) = self.listed.lock() {
            m.insert(
                tenant.clone(),
                Listed {
                    at: Instant::now(),
                    hooks: hooks.clone(),
                },
            );
        }
        Ok(hooks)
    }

    /// Calls `hook` with `body`: its answer, or why there is no usable one.
    async fn call(&self, hook: &Hook, body: &HookCall) -> Result<HookAnswer, String> {
        let c = &hook.content;
        let url = self.check(&c.url)?;
        let payload = serde_json::to_vec(body).map_err(|e| format!("cannot encode: {e}"))?;
        let id = message_id(body);
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut req = self
            .client
            .post(url)
            .timeout(Duration::from_millis(u64::from(
                weft_core::hook::timeout_ms(c),
            )))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string());
        if let Some(env) = &c.secret_env {
            let key = self.secret(env)?;
            req = req.header("webhook-signature", sign(&key, &id, timestamp, &payload)?);
        }
        let resp = req.body(payload).send().await.map_err(|e| {
            if e.is_timeout() {
                format!(
                    "no answer within {} ms",
                    weft_core::hook::timeout_ms(&hook.content)
                )
            } else {
                format!("unreachable: {}", root(&e))
            }
        })?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("answered HTTP {}", status.as_u16()));
        }
        let bytes = read_capped(resp).await?;
        let answer: HookAnswer = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "unreadable answer (want {{\"decision\": \"allow\"|\"deny\"|\"rewrite\", …}}): {e}"
            )
        })?;
        match (body.kind.as_str(), answer.decision) {
            (CALL_PRE, HookVerdict::Rewrite) if answer.input.is_none() => {
                Err("unreadable answer: a pre `rewrite` needs `input`, a JSON object".into())
            }
            (CALL_POST, HookVerdict::Rewrite) if answer.result.is_none() => {
                Err("unreadable answer: a post `rewrite` needs `result`, a string".into())
            }
            _ => Ok(answer),
        }
    }

    /// May a hook call go to `url`: http(s), and an IP literal (which never reaches the guarded
    /// resolver) only where the address policy allows it.
    fn check(&self, url: &str) -> Result<reqwest::Url, String> {
        let u = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(format!("`{url}`: only http and https are allowed"));
        }
        let host = u.host_str().ok_or_else(|| format!("`{url}` has no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            self.addresses
                .check(ip, None)
                .map_err(|b| format!("refused by the egress guard: {b}"))?;
        }
        Ok(u)
    }

    /// The signing key in variable `env`, which must lie in the tenant's namespace (checked
    /// again here: a definition older than a change of the prefix is not trusted).
    fn secret(&self, env: &str) -> Result<Vec<u8>, String> {
        if !env.starts_with(&self.secret_prefix) {
            return Err(format!(
                "its secret_env `{env}` is outside the hook secret namespace (`{}…`)",
                self.secret_prefix
            ));
        }
        let value = std::env::var(env)
            .map_err(|_| format!("its signing secret `{env}` is not set on this executor"))?;
        STANDARD
            .decode(value.strip_prefix("whsec_").unwrap_or(&value))
            .ok()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| format!("its signing secret `{env}` is not `whsec_` + base64"))
    }
}

/// A Standard Webhooks signature of `payload`: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`.
pub(crate) fn sign(key: &[u8], id: &str, timestamp: u64, payload: &[u8]) -> Result<String, String> {
    // HMAC takes keys of any length, so this never fails; the error keeps it panic-free.
    let mut m = <Hmac<Sha256>>::new_from_slice(key).map_err(|_| "the signing key is unusable")?;
    m.update(id.as_bytes());
    m.update(b".");
    m.update(timestamp.to_string().as_bytes());
    m.update(b".");
    m.update(payload);
    Ok(format!("v1,{}", STANDARD.encode(m.finalize().into_bytes())))
}

/// The `webhook-id` of a call: the same for every attempt of one hook on one call (a receiver
/// may drop a repeat), unique otherwise.
fn message_id(body: &HookCall) -> String {
    let mut h = Sha256::new();
    for part in [
        body.run_id.as_str(),
        body.tool_use_id.as_str(),
        body.kind.as_str(),
        body.hook.as_str(),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let digest = h.finalize();
    format!("msg_{}", hex_prefix(&digest, 16))
}

fn hex_prefix(bytes: &[u8], n: usize) -> String {
    bytes.iter().take(n).map(|b| format!("{b:02x}")).collect()
}

async fn read_capped(mut resp: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("the answer broke off: {}", root(&e)))?
    {
        if out.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("the answer is over {MAX_ANSWER_BYTES} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn root(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

fn cut(s: &str) -> String {
    s.chars().take(MAX_REASON_CHARS).collect()
}

/// What a call's pre hooks decided, as its ledger row keeps it (`hooks.pre`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PreRecord {
    /// The input the tool runs with (the model's, or as rewritten).
    pub input: Value,
    /// Set when a hook denied the call: the error result the model sees (the tool never runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied: Option<String>,
    /// Each hook's decision, in the order called.
    #[serde(default)]
    pub decisions: Vec<HookDecision>,
}

impl PreRecord {
    /// The pre record of a ledger row's `hooks`, if its pre hooks decided.
    pub(crate) fn from_ledger(hooks: Option<&Value>) -> Option<Self> {
        serde_json::from_value(hooks?.get("pre")?.clone()).ok()
    }
}

/// What a call's post hooks did to its result.
pub(crate) struct PostOutcome {
    pub text: String,
    pub is_error: bool,
    /// Recorded with the result (`hooks.post`).
    pub record: Value,
    /// One `hook_decision` per hook called, written with the result.
    pub events: Vec<RunEvent>,
}

/// Who a hook call is about.
pub(crate) struct Subject<'a> {
    pub run_id: String,
    pub tenant: &'a str,
    pub agent: &'a str,
    pub tool_use_id: &'a str,
    pub tool: &'a str,
}

impl Subject<'_> {
    fn body(&self, kind: &str, hook: &str, input: &Value) -> HookCall {
        HookCall {
            kind: kind.into(),
            hook: hook.into(),
            run_id: self.run_id.clone(),
            tenant: self.tenant.into(),
            agent: self.agent.into(),
            tool_use_id: self.tool_use_id.into(),
            tool: self.tool.into(),
            input: input.clone(),
            result: None,
            is_error: None,
        }
    }

    fn decision(
        &self,
        hook: &Hook,
        phase: HookPhase,
        decision: HookVerdict,
        reason: Option<String>,
        failure: Option<String>,
    ) -> HookDecision {
        HookDecision {
            tool_use_id: self.tool_use_id.into(),
            tool: self.tool.into(),
            hook: hook.name.clone(),
            phase,
            decision,
            reason: reason.as_deref().map(cut),
            failure,
        }
    }
}

/// What a hook's answer (or failure) comes to: its verdict, reason and failure, with the
/// fail mode applied to a failure.
fn settle(
    hook: &Hook,
    answer: Result<HookAnswer, String>,
) -> (HookVerdict, Option<HookAnswer>, Option<String>) {
    match answer {
        Ok(a) => (a.decision, Some(a), None),
        Err(failure) => {
            tracing::warn!(hook = %hook.name, error = %failure, "a hook gave no usable answer; its fail_mode decides");
            let v = match hook.content.fail_mode {
                FailMode::Open => HookVerdict::Allow,
                FailMode::Closed => HookVerdict::Deny,
            };
            (v, None, Some(failure))
        }
    }
}

/// The text a denial (or a withheld result) gives the model.
fn denial(hook: &Hook, d: &HookDecision, what: &str) -> String {
    match (&d.failure, &d.reason) {
        (Some(f), _) => format!(
            "{what} by hook `{}`: its receiver failed ({f}) and the hook fails closed",
            hook.name
        ),
        (None, Some(r)) => format!("{what} by hook `{}`: {r}", hook.name),
        (None, None) => format!("{what} by hook `{}`", hook.name),
    }
}

impl Hooks {
    /// Calls `hooks` (the pre hooks that apply, in registration order) about a call with
    /// `input`; the first deny ends the chain.
    pub(crate) async fn pre(&self, hooks: &[&Hook], who: &Subject<'_>, input: Value) -> PreRecord {
        let mut rec = PreRecord {
            input,
            denied: None,
            decisions: Vec::new(),
        };
        for hook in hooks {
            let body = who.body(CALL_PRE, &hook.name, &rec.input);
            let (verdict, answer, failure) = settle(hook, self.call(hook, &body).await);
            let reason = answer.as_ref().and_then(|a| a.reason.clone());
            let d = who.decision(hook, HookPhase::Pre, verdict, reason, failure);
            match verdict {
                HookVerdict::Deny => {
                    rec.denied = Some(denial(hook, &d, "denied"));
                    rec.decisions.push(d);
                    break;
                }
                HookVerdict::Rewrite => {
                    if let Some(new) = answer.and_then(|a| a.input) {
                        rec.input = Value::Object(new);
                    }
                }
                HookVerdict::Allow => {}
            }
            rec.decisions.push(d);
        }
        rec
    }

    /// Calls `hooks` (the post hooks that apply, in registration order: they are called in
    /// reverse) about a call's result; a deny withholds the result and ends the chain.
    pub(crate) async fn post(
        &self,
        hooks: &[&Hook],
        who: &Subject<'_>,
        input: &Value,
        text: String,
        is_error: bool,
    ) -> PostOutcome {
        let mut out = PostOutcome {
            text,
            is_error,
            record: Value::Null,
            events: Vec::new(),
        };
        let mut decisions = Vec::new();
        let mut rewritten = false;
        for hook in hooks.iter().rev() {
            let mut body = who.body(CALL_POST, &hook.name, input);
            body.result = Some(out.text.clone());
            body.is_error = Some(out.is_error);
            let (verdict, answer, failure) = settle(hook, self.call(hook, &body).await);
            let reason = answer.as_ref().and_then(|a| a.reason.clone());
            let d = who.decision(hook, HookPhase::Post, verdict, reason, failure);
            let stop = match verdict {
                HookVerdict::Deny => {
                    out.text = denial(hook, &d, "the result was withheld");
                    out.is_error = true;
                    rewritten = true;
                    true
                }
                HookVerdict::Rewrite => {
                    if let Some(r) = answer.and_then(|a| a.result) {
                        out.text = r;
                        rewritten = true;
                    }
                    false
                }
                HookVerdict::Allow => false,
            };
            decisions.push(d);
            if stop {
                break;
            }
        }
        out.record = serde_json::json!({"rewritten": rewritten, "decisions": decisions});
        out.events = decisions.into_iter().map(RunEvent::HookDecision).collect();
        out
    }
}

/// The hooks of `phase` among `hooks` that apply to a call of `tool` in a run of `agent`, in
/// registration order.
pub(crate) fn applicable<'a>(
    hooks: &'a [Hook],
    phase: HookPhase,
    agent: &str,
    tool: &str,
) -> Vec<&'a Hook> {
    hooks
        .iter()
        .filter(|h| h.content.phase == phase && weft_core::hook::applies(&h.content, agent, tool))
        .collect()
}

#[cfg(test)]
mod tests;
