//! The substrate's gRPC face: the tenant and scopes come from the verified internal JWT (put in
//! the request extensions by `JwtInterceptor`), requests become domain calls, records become
//! prost messages. Reading needs `runs:create`, `runs:read` or `tenant:admin` (or `admin`);
//! writing needs `tenant:admin` or `admin`; the same for every kind of definition.
//!
//! The Agent RPCs and the generic Def RPCs (`kind` in the request) run the same code: each RPC
//! resolves its kind and calls one function of [`defs`]. Only put and fork read content, so
//! only they dispatch on the content type ([`put_kind`], [`fork_kind`]).

use tonic::{Request, Response, Status};
use tracing::Instrument as _;
use weft_auth::rpc::accept;
use weft_core::a2a_peer::A2aPeerContent;
use weft_core::agent::AgentContent;
use weft_core::def::{DefContent, DefKind};
use weft_core::hook::HookContent;
use weft_core::mcp::McpServerContent;
use weft_core::process::ProcessContent;
use weft_core::rfc3339;
use weft_core::schedule::ScheduleContent;
use weft_core::skill::SkillContent;
use weft_core::volume::VolumeContent;
use weft_core::webhook::WebhookContent;
use weft_core::{Error, Principal, Scope, TenantId};
use weft_proto::v1;

use crate::defs;
use crate::store::{DefStore, Stored, SummaryRecord, VersionRecord};

/// The `weft.v1.Substrate` service over a [`DefStore`].
#[derive(Clone, Debug)]
pub struct SubstrateService {
    store: DefStore,
    /// Where changes of agents are announced, so launchers drop what they cached.
    changes: Option<weft_bus::Bus>,
    /// `ingress.secret_env_prefix`: a webhook's `secret_env` must lie in its tenant's
    /// namespace under it.
    webhook_secret_prefix: String,
    /// `executor.hook_secret_env_prefix`: the same for a hook's `secret_env`.
    hook_secret_prefix: String,
}

impl SubstrateService {
    pub fn new(store: DefStore) -> Self {
        Self {
            store,
            changes: None,
            webhook_secret_prefix: weft_config::IngressConfig::default().secret_env_prefix,
            hook_secret_prefix: weft_config::ExecutorConfig::default().hook_secret_env_prefix,
        }
    }

    /// The operator's prefix of hook secret variables (`executor.hook_secret_env_prefix`).
    #[must_use]
    pub fn hook_secret_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.hook_secret_prefix = prefix.into();
        self
    }

    /// The operator's prefix of webhook secret variables (`ingress.secret_env_prefix`).
    #[must_use]
    pub fn webhook_secret_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.webhook_secret_prefix = prefix.into();
        self
    }

    /// A webhook's or a hook's `secret_env`, when `content_json` (a whole content, or a
    /// fork's changes) names one, must lie in the tenant's namespace: 400 otherwise. Content
    /// that does not parse is left to the kind's own validation.
    fn check_secret_env(
        &self,
        kind: DefKind,
        tenant: &TenantId,
        content_json: &str,
    ) -> Result<(), Error> {
        if !matches!(kind, DefKind::Webhook | DefKind::Hook) {
            return Ok(());
        }
        let Ok(serde_json::Value::Object(m)) = serde_json::from_str(content_json) else {
            return Ok(());
        };
        match m.get("secret_env").and_then(serde_json::Value::as_str) {
            Some(env) if kind == DefKind::Hook => {
                weft_core::hook::check_secret_env(&self.hook_secret_prefix, tenant, env)
            }
            Some(env) => {
                weft_core::webhook::check_secret_env(&self.webhook_secret_prefix, tenant, env)
            }
            None => Ok(()),
        }
    }

    /// Announces every change of an agent's active version on `bus`
    /// ([`weft_bus::Bus::publish_agent_changed`]) before answering the call that made it.
    #[must_use]
    pub fn announcing(mut self, bus: weft_bus::Bus) -> Self {
        self.changes = Some(bus);
        self
    }
}

/// Reading definitions: whoever may start or read runs.
fn require_read(p: &Principal) -> Result<(), Status> {
    if p.has(Scope::RunsCreate) || p.has(Scope::RunsRead) {
        Ok(())
    } else {
        Err(Error::forbidden(
            "reading definitions needs the `runs:create`, `runs:read` or `tenant:admin` scope",
        )
        .into())
    }
}

/// Changing definitions: tenant admins (and operator admins).
fn require_write(p: &Principal) -> Result<(), Status> {
    if p.administers(&p.tenant) {
        Ok(())
    } else {
        Err(
            Error::forbidden("changing definitions needs the `tenant:admin` or `admin` scope")
                .into(),
        )
    }
}

fn created_by(p: &Principal) -> String {
    format!("{}/{}", p.tenant, p.subject)
}

/// The proto message for a version record.
pub fn version_to_proto(v: VersionRecord) -> v1::AgentVersion {
    v1::AgentVersion {
        name: v.name,
        hash: v.hash,
        content_json: v.content_json,
        parent_version: v.parent_version,
        created_at: rfc3339(v.created_at),
        active: v.active,
        number: v.number,
        retired: v.retired,
    }
}

/// The proto message for a summary record.
pub fn summary_to_proto(s: SummaryRecord) -> v1::AgentSummary {
    v1::AgentSummary {
        name: s.name,
        active_version: s.active_version,
        retired: s.retired,
        versions: s.versions,
        description: s.description,
        updated_at: rfc3339(s.updated_at),
    }
}

fn put_to_proto(s: Stored) -> v1::PutAgentResponse {
    v1::PutAgentResponse {
        version: Some(version_to_proto(s.version)),
        created: s.created,
    }
}

fn verify_to_proto(found: Option<VersionRecord>) -> v1::VerifyAgentResponse {
    match found {
        Some(v) => v1::VerifyAgentResponse {
            known: true,
            name: Some(v.name),
            number: Some(v.number),
        },
        None => v1::VerifyAgentResponse {
            known: false,
            name: None,
            number: None,
        },
    }
}

/// The kind a Def request names; `DEF_KIND_UNSPECIFIED` (or an unknown value) is refused.
fn kind(k: i32) -> Result<DefKind, Status> {
    match v1::DefKind::try_from(k) {
        Ok(v1::DefKind::Agent) => Ok(DefKind::Agent),
        Ok(v1::DefKind::Skill) => Ok(DefKind::Skill),
        Ok(v1::DefKind::McpServer) => Ok(DefKind::McpServer),
        Ok(v1::DefKind::Schedule) => Ok(DefKind::Schedule),
        Ok(v1::DefKind::Webhook) => Ok(DefKind::Webhook),
        Ok(v1::DefKind::Volume) => Ok(DefKind::Volume),
        Ok(v1::DefKind::Process) => Ok(DefKind::Process),
        Ok(v1::DefKind::A2aPeer) => Ok(DefKind::A2aPeer),
        Ok(v1::DefKind::Hook) => Ok(DefKind::Hook),
        Ok(v1::DefKind::Unspecified) | Err(_) => Err(Error::invalid(
            "`kind` is required: DEF_KIND_AGENT, DEF_KIND_SKILL, DEF_KIND_MCP_SERVER, DEF_KIND_SCHEDULE, DEF_KIND_WEBHOOK, DEF_KIND_VOLUME, DEF_KIND_PROCESS, DEF_KIND_A2A_PEER or DEF_KIND_HOOK",
        )
        .with_param("kind")
        .into()),
    }
}

/// A put of `kind`, with the content type of that kind.
async fn put_kind(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
    name: &str,
    content_json: &str,
    by: Option<&str>,
) -> Result<Stored, Error> {
    match kind {
        DefKind::Agent => {
            defs::put_json::<AgentContent>(store, tenant, name, content_json, by).await
        }
        DefKind::Skill => {
            defs::put_json::<SkillContent>(store, tenant, name, content_json, by).await
        }
        DefKind::McpServer => {
            defs::put_json::<McpServerContent>(store, tenant, name, content_json, by).await
        }
        DefKind::Schedule => {
            defs::put_json::<ScheduleContent>(store, tenant, name, content_json, by).await
        }
        DefKind::Webhook => {
            defs::put_json::<WebhookContent>(store, tenant, name, content_json, by).await
        }
        DefKind::Volume => {
            defs::put_json::<VolumeContent>(store, tenant, name, content_json, by).await
        }
        DefKind::Process => {
            defs::put_json::<ProcessContent>(store, tenant, name, content_json, by).await
        }
        DefKind::A2aPeer => {
            defs::put_json::<A2aPeerContent>(store, tenant, name, content_json, by).await
        }
        DefKind::Hook => defs::put_json::<HookContent>(store, tenant, name, content_json, by).await,
    }
}

/// A fork of `kind`, with the content type of that kind.
async fn fork_kind(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
    name: &str,
    from_version: Option<&str>,
    changes_json: &str,
    by: Option<&str>,
) -> Result<Stored, Error> {
    match kind {
        DefKind::Agent => {
            defs::fork::<AgentContent>(store, tenant, name, from_version, changes_json, by).await
        }
        DefKind::Skill => {
            defs::fork::<SkillContent>(store, tenant, name, from_version, changes_json, by).await
        }
        DefKind::McpServer => {
            defs::fork::<McpServerContent>(store, tenant, name, from_version, changes_json, by)
                .await
        }
        DefKind::Schedule => {
            defs::fork::<ScheduleContent>(store, tenant, name, from_version, changes_json, by).await
        }
        DefKind::Webhook => {
            defs::fork::<WebhookContent>(store, tenant, name, from_version, changes_json, by).await
        }
        DefKind::Volume => {
            defs::fork::<VolumeContent>(store, tenant, name, from_version, changes_json, by).await
        }
        DefKind::Process => {
            defs::fork::<ProcessContent>(store, tenant, name, from_version, changes_json, by).await
        }
        DefKind::A2aPeer => {
            defs::fork::<A2aPeerContent>(store, tenant, name, from_version, changes_json, by).await
        }
        DefKind::Hook => {
            defs::fork::<HookContent>(store, tenant, name, from_version, changes_json, by).await
        }
    }
}

/// The decoded skill of a stored version.
fn skill_to_proto(v: VersionRecord) -> Result<v1::Skill, Status> {
    let c = SkillContent::from_json_str(&v.content_json).map_err(|e| {
        tracing::error!(error = %e.message, version = %v.hash, "stored skill content does not parse");
        Status::from(Error::internal())
    })?;
    Ok(v1::Skill {
        name: v.name,
        hash: v.hash,
        number: v.number,
        description: c.description,
        body: c.body,
        files: c.files.into_iter().collect(),
        retired: v.retired,
        active: v.active,
    })
}

/// The span of one RPC (its tenant recorded by `accept`). Never carries content.
fn span(rpc: &'static str) -> tracing::Span {
    tracing::info_span!("substrate", rpc, tenant = tracing::field::Empty)
}

/// Runs `call` for the RPC `rpc` inside its span: the caller's principal, authorized for
/// reading (`write = false`) or writing, with the request's message.
async fn rpc<T, R, F, Fut>(
    rpc: &'static str,
    write: bool,
    request: Request<T>,
    call: F,
) -> Result<Response<R>, Status>
where
    F: FnOnce(Principal, T) -> Fut,
    Fut: std::future::Future<Output = Result<R, Status>>,
{
    let (p, span) = accept(&request, span(rpc))?;
    if write {
        require_write(&p)?;
    } else {
        require_read(&p)?;
    }
    call(p, request.into_inner())
        .instrument(span)
        .await
        .map(Response::new)
}

impl SubstrateService {
    async fn put(
        &self,
        p: &Principal,
        kind: DefKind,
        name: &str,
        content_json: &str,
    ) -> Result<v1::PutAgentResponse, Status> {
        let by = created_by(p);
        self.check_secret_env(kind, &p.tenant, content_json)?;
        let out = put_kind(&self.store, kind, &p.tenant, name, content_json, Some(&by)).await?;
        self.follow(kind, &p.tenant, name).await?;
        Ok(put_to_proto(out))
    }

    /// Keeps the live state of a schedule in step with its active version, and tells the
    /// launchers that an agent changed (a launcher that misses it drops its whole cache when it
    /// sees the loss; see `weft_launch::AgentCache`).
    async fn follow(&self, kind: DefKind, tenant: &TenantId, name: &str) -> Result<(), Status> {
        if kind == DefKind::Schedule {
            crate::defs::sync_schedule(&self.store, tenant, name).await?;
        }
        if kind == DefKind::Agent
            && let Some(bus) = &self.changes
            && let Err(e) = bus.publish_agent_changed(tenant.as_str(), name).await
        {
            tracing::warn!(error = %e, agent = %name, "could not announce an agent change; launchers keep the previous version until their cache lapses");
        }
        Ok(())
    }

    async fn get(
        &self,
        p: &Principal,
        kind: DefKind,
        name: &str,
        version: Option<&str>,
    ) -> Result<VersionRecord, Status> {
        defs::get(&self.store, kind, &p.tenant, name, version)
            .await
            .map_err(Status::from)
    }

    async fn list(&self, p: &Principal, kind: DefKind) -> Result<Vec<SummaryRecord>, Status> {
        defs::list(&self.store, kind, &p.tenant)
            .await
            .map_err(Status::from)
    }

    async fn versions(
        &self,
        p: &Principal,
        kind: DefKind,
        name: &str,
    ) -> Result<v1::ListAgentVersionsResponse, Status> {
        defs::list_versions(&self.store, kind, &p.tenant, name)
            .await
            .map(|list| v1::ListAgentVersionsResponse {
                versions: list.into_iter().map(version_to_proto).collect(),
            })
            .map_err(Status::from)
    }

    async fn fork(
        &self,
        p: &Principal,
        kind: DefKind,
        name: &str,
        from_version: Option<&str>,
        changes_json: &str,
    ) -> Result<v1::PutAgentResponse, Status> {
        let by = created_by(p);
        self.check_secret_env(kind, &p.tenant, changes_json)?;
        let out = fork_kind(
            &self.store,
            kind,
            &p.tenant,
            name,
            from_version,
            changes_json,
            Some(&by),
        )
        .await?;
        self.follow(kind, &p.tenant, name).await?;
        Ok(put_to_proto(out))
    }

    async fn retire(
        &self,
        p: &Principal,
        kind: DefKind,
        name: &str,
    ) -> Result<v1::AgentSummary, Status> {
        let out = defs::retire(&self.store, kind, &p.tenant, name).await?;
        self.follow(kind, &p.tenant, name).await?;
        Ok(summary_to_proto(out))
    }

    async fn activate(
        &self,
        p: &Principal,
        kind: DefKind,
        name: &str,
        version: &str,
    ) -> Result<v1::AgentSummary, Status> {
        // Content only an operator may define cannot be brought back through the API either.
        if kind == DefKind::McpServer {
            let v = defs::get(&self.store, kind, &p.tenant, name, Some(version)).await?;
            let content = McpServerContent::from_json_str(&v.content_json)?;
            if let Some(why) = content.operator_only() {
                return Err(Error::forbidden(why).into());
            }
        }
        let out = defs::activate(&self.store, kind, &p.tenant, name, version).await?;
        self.follow(kind, &p.tenant, name).await?;
        Ok(summary_to_proto(out))
    }

    async fn verify(
        &self,
        p: &Principal,
        kind: DefKind,
        sha256: &str,
    ) -> Result<v1::VerifyAgentResponse, Status> {
        defs::verify(&self.store, kind, &p.tenant, sha256)
            .await
            .map(verify_to_proto)
            .map_err(Status::from)
    }
}

const AGENT: DefKind = DefKind::Agent;

#[tonic::async_trait]
impl v1::substrate_server::Substrate for SubstrateService {
    async fn put_agent(
        &self,
        request: Request<v1::PutAgentRequest>,
    ) -> Result<Response<v1::PutAgentResponse>, Status> {
        rpc("put_agent", true, request, |p, r| async move {
            self.put(&p, AGENT, &r.name, &r.content_json).await
        })
        .await
    }

    async fn get_agent(
        &self,
        request: Request<v1::GetAgentRequest>,
    ) -> Result<Response<v1::AgentVersion>, Status> {
        rpc("get_agent", false, request, |p, r| async move {
            self.get(&p, AGENT, &r.name, r.version.as_deref())
                .await
                .map(version_to_proto)
        })
        .await
    }

    async fn list_agents(
        &self,
        request: Request<v1::ListAgentsRequest>,
    ) -> Result<Response<v1::ListAgentsResponse>, Status> {
        rpc("list_agents", false, request, |p, _| async move {
            self.list(&p, AGENT)
                .await
                .map(|list| v1::ListAgentsResponse {
                    agents: list.into_iter().map(summary_to_proto).collect(),
                })
        })
        .await
    }

    async fn list_agent_versions(
        &self,
        request: Request<v1::ListAgentVersionsRequest>,
    ) -> Result<Response<v1::ListAgentVersionsResponse>, Status> {
        rpc("list_agent_versions", false, request, |p, r| async move {
            self.versions(&p, AGENT, &r.name).await
        })
        .await
    }

    async fn fork_agent(
        &self,
        request: Request<v1::ForkAgentRequest>,
    ) -> Result<Response<v1::PutAgentResponse>, Status> {
        rpc("fork_agent", true, request, |p, r| async move {
            self.fork(
                &p,
                AGENT,
                &r.name,
                r.from_version.as_deref(),
                &r.changes_json,
            )
            .await
        })
        .await
    }

    async fn retire_agent(
        &self,
        request: Request<v1::RetireAgentRequest>,
    ) -> Result<Response<v1::AgentSummary>, Status> {
        rpc("retire_agent", true, request, |p, r| async move {
            self.retire(&p, AGENT, &r.name).await
        })
        .await
    }

    async fn activate_agent(
        &self,
        request: Request<v1::ActivateAgentRequest>,
    ) -> Result<Response<v1::AgentSummary>, Status> {
        rpc("activate_agent", true, request, |p, r| async move {
            self.activate(&p, AGENT, &r.name, &r.version).await
        })
        .await
    }

    async fn verify_agent(
        &self,
        request: Request<v1::VerifyAgentRequest>,
    ) -> Result<Response<v1::VerifyAgentResponse>, Status> {
        rpc("verify_agent", false, request, |p, r| async move {
            self.verify(&p, AGENT, &r.sha256).await
        })
        .await
    }

    async fn put_def(
        &self,
        request: Request<v1::PutDefRequest>,
    ) -> Result<Response<v1::PutAgentResponse>, Status> {
        rpc("put_def", true, request, |p, r| async move {
            self.put(&p, kind(r.kind)?, &r.name, &r.content_json).await
        })
        .await
    }

    async fn get_def(
        &self,
        request: Request<v1::GetDefRequest>,
    ) -> Result<Response<v1::AgentVersion>, Status> {
        rpc("get_def", false, request, |p, r| async move {
            self.get(&p, kind(r.kind)?, &r.name, r.version.as_deref())
                .await
                .map(version_to_proto)
        })
        .await
    }

    async fn list_defs(
        &self,
        request: Request<v1::ListDefsRequest>,
    ) -> Result<Response<v1::ListDefsResponse>, Status> {
        rpc("list_defs", false, request, |p, r| async move {
            self.list(&p, kind(r.kind)?)
                .await
                .map(|list| v1::ListDefsResponse {
                    defs: list.into_iter().map(summary_to_proto).collect(),
                })
        })
        .await
    }

    async fn list_active_defs(
        &self,
        request: Request<v1::ListDefsRequest>,
    ) -> Result<Response<v1::ListAgentVersionsResponse>, Status> {
        rpc("list_active_defs", false, request, |p, r| async move {
            let kind = kind(r.kind)?;
            let versions = defs::list_active(&self.store, kind, &p.tenant).await?;
            Ok(v1::ListAgentVersionsResponse {
                versions: versions.into_iter().map(version_to_proto).collect(),
            })
        })
        .await
    }

    async fn list_def_versions(
        &self,
        request: Request<v1::ListDefVersionsRequest>,
    ) -> Result<Response<v1::ListAgentVersionsResponse>, Status> {
        rpc("list_def_versions", false, request, |p, r| async move {
            self.versions(&p, kind(r.kind)?, &r.name).await
        })
        .await
    }

    async fn fork_def(
        &self,
        request: Request<v1::ForkDefRequest>,
    ) -> Result<Response<v1::PutAgentResponse>, Status> {
        rpc("fork_def", true, request, |p, r| async move {
            self.fork(
                &p,
                kind(r.kind)?,
                &r.name,
                r.from_version.as_deref(),
                &r.changes_json,
            )
            .await
        })
        .await
    }

    async fn retire_def(
        &self,
        request: Request<v1::RetireDefRequest>,
    ) -> Result<Response<v1::AgentSummary>, Status> {
        rpc("retire_def", true, request, |p, r| async move {
            self.retire(&p, kind(r.kind)?, &r.name).await
        })
        .await
    }

    async fn activate_def(
        &self,
        request: Request<v1::ActivateDefRequest>,
    ) -> Result<Response<v1::AgentSummary>, Status> {
        rpc("activate_def", true, request, |p, r| async move {
            self.activate(&p, kind(r.kind)?, &r.name, &r.version).await
        })
        .await
    }

    async fn verify_def(
        &self,
        request: Request<v1::VerifyDefRequest>,
    ) -> Result<Response<v1::VerifyAgentResponse>, Status> {
        rpc("verify_def", false, request, |p, r| async move {
            self.verify(&p, kind(r.kind)?, &r.sha256).await
        })
        .await
    }

    async fn get_skill(
        &self,
        request: Request<v1::GetSkillRequest>,
    ) -> Result<Response<v1::Skill>, Status> {
        rpc("get_skill", false, request, |p, r| async move {
            let v = self
                .get(&p, DefKind::Skill, &r.name, r.version.as_deref())
                .await?;
            skill_to_proto(v)
        })
        .await
    }

    async fn list_skills(
        &self,
        request: Request<v1::ListSkillsRequest>,
    ) -> Result<Response<v1::ListSkillsResponse>, Status> {
        rpc("list_skills", false, request, |p, _| async move {
            self.list(&p, DefKind::Skill)
                .await
                .map(|list| v1::ListSkillsResponse {
                    skills: list
                        .into_iter()
                        .map(|s| v1::SkillSummary {
                            name: s.name,
                            description: s.description,
                            active_version: s.active_version,
                            retired: s.retired,
                        })
                        .collect(),
                })
        })
        .await
    }
}
