//! The definition routes — `/v1/agents…`, `/v1/skills…`, `/v1/processes…`, the same shape for
//! every kind — thin handlers over the substrate's generic Def RPCs. One implementation serves
//! every kind: each handler is generic over a [`DefRoute`] that names the kind and its path.
//! They parse the request, forward it with the caller's internal JWT, and render the answer;
//! the substrate validates, authorizes (reading needs `runs:create`, `runs:read` or
//! `tenant:admin`; writing `tenant:admin`) and scopes everything to the caller's tenant.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::Value;
use weft_api::common::Timestamp;
use weft_api::defs::{DefList, DefSummary, DefVersion, PutDefResult, VerifyDefResult};
use weft_core::{Error, ErrorCode, Principal};
use weft_proto::v1;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{NativeJson, NativePath, ValidJson, parse_query};

type Result<T> = std::result::Result<T, ApiError>;

/// A kind of definition served under its own path.
pub trait DefRoute: Send + Sync + 'static {
    /// The kind, as the substrate names it.
    const KIND: v1::DefKind;
    /// The collection path, e.g. `/v1/agents`.
    const PATH: &'static str;
}

/// `/v1/agents`.
pub struct Agents;

impl DefRoute for Agents {
    const KIND: v1::DefKind = v1::DefKind::Agent;
    const PATH: &'static str = "/v1/agents";
}

/// `/v1/skills`.
pub struct Skills;

impl DefRoute for Skills {
    const KIND: v1::DefKind = v1::DefKind::Skill;
    const PATH: &'static str = "/v1/skills";
}

/// `/v1/mcp-servers`.
pub struct McpServers;

impl DefRoute for McpServers {
    const KIND: v1::DefKind = v1::DefKind::McpServer;
    const PATH: &'static str = "/v1/mcp-servers";
}

/// `/v1/schedules`.
pub struct Schedules;

impl DefRoute for Schedules {
    const KIND: v1::DefKind = v1::DefKind::Schedule;
    const PATH: &'static str = "/v1/schedules";
}

/// `/v1/webhooks`.
pub struct Webhooks;

impl DefRoute for Webhooks {
    const KIND: v1::DefKind = v1::DefKind::Webhook;
    const PATH: &'static str = "/v1/webhooks";
}

/// `/v1/processes`.
pub struct Processes;

impl DefRoute for Processes {
    const KIND: v1::DefKind = v1::DefKind::Process;
    const PATH: &'static str = "/v1/processes";
}

/// `/v1/a2a-peers`.
pub struct A2aPeers;

impl DefRoute for A2aPeers {
    const KIND: v1::DefKind = v1::DefKind::A2aPeer;
    const PATH: &'static str = "/v1/a2a-peers";
}

/// `/v1/hooks`.
pub struct Hooks;

impl DefRoute for Hooks {
    const KIND: v1::DefKind = v1::DefKind::Hook;
    const PATH: &'static str = "/v1/hooks";
}

/// The routes of one kind.
fn def_routes<K: DefRoute>() -> axum::Router<AppState> {
    let at = |tail: &str| format!("{}{tail}", K::PATH);
    axum::Router::new()
        .route(K::PATH, get(list_handler::<K>))
        .route(&at("/verify"), post(verify_handler::<K>))
        .route(&at("/{name}"), get(get_handler::<K>).put(put_handler::<K>))
        .route(&at("/{name}/versions"), get(list_versions_handler::<K>))
        .route(&at("/{name}/fork"), post(fork_handler::<K>))
        .route(&at("/{name}/retire"), post(retire_handler::<K>))
        .route(&at("/{name}/activate"), post(activate_handler::<K>))
}

/// The routes of every kind (agents, skills); mounted inside the bearer-authenticated native
/// router.
pub fn routes() -> axum::Router<AppState> {
    def_routes::<Agents>()
        .merge(def_routes::<Skills>())
        .merge(def_routes::<McpServers>())
        .merge(def_routes::<Schedules>())
        .merge(def_routes::<Webhooks>())
        .merge(def_routes::<Processes>())
        .merge(def_routes::<A2aPeers>())
        .merge(def_routes::<Hooks>())
}

/// A version as answered; its content is passed on as the substrate stored it.
fn version(v: v1::AgentVersion) -> DefVersion {
    let content = serde_json::from_str::<Value>(&v.content_json).unwrap_or_else(|e| {
        tracing::error!(error = %e, version = %v.hash, "substrate sent content that is not JSON");
        Value::Null
    });
    DefVersion {
        name: v.name,
        version: v.hash,
        number: v.number,
        parent_version: v.parent_version,
        created_at: Timestamp(v.created_at),
        active: v.active,
        retired: v.retired,
        content,
        warnings: None,
    }
}

/// A put's answer; `warnings` for the kinds that have them (webhooks, schedules, hooks).
fn put_answer(r: v1::PutAgentResponse, warnings: Option<Vec<String>>) -> Response {
    let status = if r.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut version = r.version.map(version);
    if let Some(v) = &mut version {
        v.warnings = warnings;
    }
    let body = PutDefResult {
        version,
        created: r.created,
    };
    (status, Json(body)).into_response()
}

fn summary(s: v1::AgentSummary) -> DefSummary {
    DefSummary {
        name: s.name,
        active_version: s.active_version,
        retired: s.retired,
        versions: s.versions,
        description: s.description,
        updated_at: Timestamp(s.updated_at),
    }
}

/// A definition of this replica's caller changed: a run started here next reads the new active
/// version (other replicas hear it from the substrate's announcement).
fn changed<K: DefRoute>(st: &AppState, p: &Principal, name: &str) {
    if K::KIND == v1::DefKind::Agent {
        st.launcher.forget_agent(p.tenant.as_str(), name);
    }
}

/// `PUT /v1/<kind>s/{name}`: the body is the content fields; 201 with a new version, 200 when
/// the content already was a version.
#[tracing::instrument(skip_all, fields(kind = K::KIND.as_str_name(), name = %name))]
pub async fn put_handler<K: DefRoute>(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    ValidJson(body): NativeJson<Value>,
) -> Result<Response> {
    let req = st
        .internal(
            &p,
            v1::PutDefRequest {
                kind: K::KIND.into(),
                name: name.clone(),
                content_json: body.to_string(),
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.substrate.clone();
    let r = st
        .substrate_call(client.put_def(req))
        .await
        .map_err(ApiError::native)?;
    changed::<K>(&st, &p, &name);
    let warnings = if has_warnings::<K>() {
        Some(warnings::<K>(&st, &p, &body).await)
    } else {
        None
    };
    Ok(put_answer(r, warnings))
}

/// Whether puts and gets of the kind answer with `warnings`.
fn has_warnings<K: DefRoute>() -> bool {
    matches!(
        K::KIND,
        v1::DefKind::Webhook | v1::DefKind::Schedule | v1::DefKind::Hook
    )
}

/// What a hook's URL names that the executors' egress guard refuses unless the operator
/// exempts it (`executor.http_private_exempt`): an IP literal of a non-public range (loopback,
/// private, link-local such as the cloud metadata address 169.254.169.254), or `localhost`.
/// The gateway does not know the executors' exemptions, so this is a warning, not a 400; the
/// call itself is refused at the executor.
fn hook_warnings(content: &Value) -> Vec<String> {
    let Some(url) = content.get("url").and_then(Value::as_str) else {
        return Vec::new();
    };
    let Ok(u) = url.parse::<Uri>() else {
        return Vec::new();
    };
    let host = u.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let class = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => weft_egress::non_public_class(ip.to_canonical()),
        Err(_) => {
            let h = host.trim_end_matches('.').to_ascii_lowercase();
            (h == "localhost" || h.ends_with(".localhost")).then_some("loopback")
        }
    };
    match class {
        Some(class) => vec![format!(
            "`url` names a {class} address ({host}): the executors refuse to call it unless the operator exempts it in executor.http_private_exempt, so every call of this hook fails and its fail_mode decides"
        )],
        None => Vec::new(),
    }
}

/// What a webhook or schedule definition points at that is not there yet: an agent not
/// defined, a signing secret whose variable is not set on this gateway. The definition is
/// saved (it may be defined first), but its deliveries or fires fail until it is there; what
/// can never work was refused with a 400 before this. A secret variable is only ever looked up
/// in the caller's own namespace (the substrate refused any other), so this tells nothing of
/// the operator's environment beyond it.
async fn warnings<K: DefRoute>(st: &AppState, p: &Principal, content: &Value) -> Vec<String> {
    if K::KIND == v1::DefKind::Hook {
        return hook_warnings(content);
    }
    let mut out = Vec::new();
    if let Some(agent) = content.get("agent").and_then(Value::as_str) {
        let req = st.internal(
            p,
            v1::GetDefRequest {
                kind: v1::DefKind::Agent.into(),
                name: agent.to_owned(),
                version: None,
            },
        );
        let mut client = st.substrate.clone();
        if let Ok(req) = req
            && let Err(e) = st.substrate_call(client.get_def(req)).await
            && e.code == ErrorCode::NotFound
        {
            out.push(format!(
                "agent `{agent}` is not defined yet: every {} fails until it is (PUT /v1/agents/{agent})",
                if K::KIND == v1::DefKind::Webhook { "delivery" } else { "fire" }
            ));
        }
    }
    if K::KIND == v1::DefKind::Webhook
        && let Some(env) = content.get("secret_env").and_then(Value::as_str)
    {
        // A variable outside the caller's namespace (a definition older than the namespaces)
        // is never looked up: that would tell whether the operator set it.
        let prefix = &st.ingress.cfg.secret_env_prefix;
        if let Err(e) = weft_core::webhook::check_secret_env(prefix, &p.tenant, env) {
            out.push(format!(
                "{}; every delivery is refused (401) until it is renamed",
                e.message
            ));
        } else if std::env::var_os(env).is_none() {
            out.push(format!(
                "the variable `{env}` is not set on this gateway: every delivery is refused (401) until the operator sets it on every gateway and ingress process"
            ));
        }
    }
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetQuery {
    version: Option<String>,
}

/// `GET /v1/<kind>s/{name}?version=`: the active version, or a given one (hash or number).
#[tracing::instrument(skip_all, fields(kind = K::KIND.as_str_name(), name = %name))]
pub async fn get_handler<K: DefRoute>(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    uri: Uri,
) -> Result<Response> {
    let q: GetQuery = parse_query(uri.query().unwrap_or_default()).map_err(ApiError::native)?;
    if q.version.as_deref() == Some("") {
        return Err(ApiError::native(
            Error::invalid(
                "`version` is empty; give `sha256:<hex>` or a version number, or leave it out for the active version",
            )
            .with_param("version"),
        ));
    }
    let req = st
        .internal(
            &p,
            v1::GetDefRequest {
                kind: K::KIND.into(),
                name,
                version: q.version,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.substrate.clone();
    let v = st
        .substrate_call(client.get_def(req))
        .await
        .map_err(ApiError::native)?;
    let mut body = version(v);
    if body.active && has_warnings::<K>() {
        body.warnings = Some(warnings::<K>(&st, &p, &body.content).await);
    }
    Ok(Json(body).into_response())
}

/// `GET /v1/<kind>s`: every definition of the kind in the caller's tenant, retired ones
/// included.
#[tracing::instrument(skip_all, fields(kind = K::KIND.as_str_name()))]
pub async fn list_handler<K: DefRoute>(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Response> {
    let req = st
        .internal(
            &p,
            v1::ListDefsRequest {
                kind: K::KIND.into(),
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.substrate.clone();
    let r = st
        .substrate_call(client.list_defs(req))
        .await
        .map_err(ApiError::native)?;
    Ok(Json(DefList::all(r.defs.into_iter().map(summary).collect())).into_response())
}

/// `GET /v1/<kind>s/{name}/versions`: oldest first.
#[tracing::instrument(skip_all, fields(kind = K::KIND.as_str_name(), name = %name))]
pub async fn list_versions_handler<K: DefRoute>(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
) -> Result<Response> {
    let req = st
        .internal(
            &p,
            v1::ListDefVersionsRequest {
                kind: K::KIND.into(),
                name,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.substrate.clone();
    let r = st
        .substrate_call(client.list_def_versions(req))
        .await
        .map_err(ApiError::native)?;
    Ok(Json(DefList::all(r.versions.into_iter().map(version).collect())).into_response())
}

// The bodies of fork, activate and verify are the contract's; the old names stay for the
// gateway's tests.
pub use weft_api::defs::{
    ActivateDef as ActivateBody, ForkDef as ForkBody, VerifyDef as VerifyBody,
};

/// `POST /v1/<kind>s/{name}/fork` `{from_version?, changes}`.
#[tracing::instrument(skip_all, fields(kind = K::KIND.as_str_name(), name = %name))]
pub async fn fork_handler<K: DefRoute>(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    ValidJson(body): NativeJson<ForkBody>,
) -> Result<Response> {
    let changes = body
        .changes
        .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
    let req = st
        .internal(
            &p,
            v1::ForkDefRequest {
                kind: K::KIND.into(),
                name: name.clone(),
                from_version: body.from_version,
                changes_json: changes.to_string(),
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.substrate.clone();
    let r = st
        .substrate_call(client.fork_def(req))
        .await
        .map_err(ApiError::native)?;
    changed::<K>(&st, &p, &name);
    let warnings = match &r.version {
        Some(v) if has_warnings::<K>() => {
            let content = serde_json::from_str::<Value>(&v.content_json).unwrap_or(Value::Null);
            Some(warnings::<K>(&st, &p, &content).await)
        }
        _ => None,
    };
    Ok(put_answer(r, warnings))
}

/// `POST /v1/<kind>s/{name}/retire`.
#[tracing::instrument(skip_all, fields(kind = K::KIND.as_str_name(), name = %name))]
pub async fn retire_handler<K: DefRoute>(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
) -> Result<Response> {
    let req = st
        .internal(
            &p,
            v1::RetireDefRequest {
                kind: K::KIND.into(),
                name: name.clone(),
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.substrate.clone();
    let s = st
        .substrate_call(client.retire_def(req))
        .await
        .map_err(ApiError::native)?;
    changed::<K>(&st, &p, &name);
    Ok(Json(summary(s)).into_response())
}

/// `POST /v1/<kind>s/{name}/activate` `{version}`.
#[tracing::instrument(skip_all, fields(kind = K::KIND.as_str_name(), name = %name))]
pub async fn activate_handler<K: DefRoute>(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    ValidJson(body): NativeJson<ActivateBody>,
) -> Result<Response> {
    let req = st
        .internal(
            &p,
            v1::ActivateDefRequest {
                kind: K::KIND.into(),
                name: name.clone(),
                version: body.version,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.substrate.clone();
    let s = st
        .substrate_call(client.activate_def(req))
        .await
        .map_err(ApiError::native)?;
    changed::<K>(&st, &p, &name);
    Ok(Json(summary(s)).into_response())
}

/// `POST /v1/<kind>s/verify` `{sha256}`: whether the hash is a version of a definition of the
/// kind in the caller's tenant (200 either way).
#[tracing::instrument(skip_all, fields(kind = K::KIND.as_str_name()))]
pub async fn verify_handler<K: DefRoute>(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    ValidJson(body): NativeJson<VerifyBody>,
) -> Result<Response> {
    let req = st
        .internal(
            &p,
            v1::VerifyDefRequest {
                kind: K::KIND.into(),
                sha256: body.sha256,
            },
        )
        .map_err(ApiError::native)?;
    let mut client = st.substrate.clone();
    let r = st
        .substrate_call(client.verify_def(req))
        .await
        .map_err(ApiError::native)?;
    Ok(Json(VerifyDefResult {
        known: r.known,
        name: r.name,
        number: r.number,
    })
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::parse;

    #[test]
    fn a_version_is_a_string_or_a_positive_integer() {
        // The OpenAPI document has always said "sha256:<hex> or a version number".
        let b: ActivateBody = parse(br#"{"version": 1}"#).unwrap();
        assert_eq!(b.version, "1");
        let b: ActivateBody = parse(br#"{"version": "sha256:ab"}"#).unwrap();
        assert_eq!(b.version, "sha256:ab");
        let b: ActivateBody = parse(br#"{"version": "2"}"#).unwrap();
        assert_eq!(b.version, "2");
        for bad in [
            r#"{"version": ""}"#,
            r#"{"version": 0}"#,
            r#"{"version": 4294967296}"#,
            r#"{"version": -1}"#,
            r#"{"version": 1.5}"#,
        ] {
            let e = parse::<ActivateBody>(bad.as_bytes()).expect_err("refused");
            assert_eq!(e.param.as_deref(), Some("version"), "{bad}: {}", e.message);
        }
        let b: ForkBody =
            parse(br#"{"from_version": 3, "changes": {"description": "x"}}"#).unwrap();
        assert_eq!(b.from_version.as_deref(), Some("3"));
        let b: ForkBody = parse(br#"{"from_version": null}"#).unwrap();
        assert_eq!(b.from_version, None);
        let e = parse::<ForkBody>(br#"{"from_version": ""}"#).expect_err("refused");
        assert_eq!(e.param.as_deref(), Some("from_version"), "{}", e.message);
    }

    #[test]
    fn bodies_are_objects_only() {
        // serde's derive would read these as the fields in order.
        let e = parse::<ForkBody>(b"[null, null]").expect_err("refused");
        assert!(e.message.contains("JSON object"), "{}", e.message);
        let e = parse::<ActivateBody>(br#"["1"]"#).expect_err("refused");
        assert!(e.message.contains("JSON object"), "{}", e.message);
        let e = parse::<VerifyBody>(br#"["sha256:ab"]"#).expect_err("refused");
        assert!(e.message.contains("JSON object"), "{}", e.message);
        let e = parse::<ActivateBody>(br#"{"version": "1", "x": 1}"#).expect_err("refused");
        assert!(e.message.contains("unknown field"), "{}", e.message);
    }
}
