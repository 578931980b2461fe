//! The substrate's gRPC face: the tenant and scopes come from the verified internal JWT (put in
//! the request extensions by `JwtInterceptor`), requests become domain calls, records become
//! prost messages. Reading needs `runs:create`, `runs:read` or `tenant:admin` (or `admin`);
//! writing needs `tenant:admin` or `admin`.

use time::format_description::well_known::Rfc3339;
use tonic::{Request, Response, Status};
use tracing::Instrument as _;
use weft_core::{Error, Principal, Scope};
use weft_proto::v1;

use crate::agents;
use crate::store::{AgentSummaryRecord, AgentVersionRecord, DefStore, Stored};

/// The `weft.v1.Substrate` service over a [`DefStore`].
#[derive(Clone, Debug)]
pub struct SubstrateService {
    store: DefStore,
}

impl SubstrateService {
    pub fn new(store: DefStore) -> Self {
        Self { store }
    }
}

fn principal<T>(req: &Request<T>) -> Result<Principal, Status> {
    req.extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| Status::from(Error::unauthenticated("missing internal token")))
}

/// Reading definitions: whoever may start or read runs.
fn require_read(p: &Principal) -> Result<(), Status> {
    if p.has(Scope::RunsCreate) || p.has(Scope::RunsRead) {
        Ok(())
    } else {
        Err(Error::forbidden(
            "reading agent definitions needs the `runs:create`, `runs:read` or `tenant:admin` scope",
        )
        .into())
    }
}

/// Changing definitions: tenant admins (and operator admins).
fn require_write(p: &Principal) -> Result<(), Status> {
    if p.administers(&p.tenant) {
        Ok(())
    } else {
        Err(Error::forbidden(
            "changing agent definitions needs the `tenant:admin` or `admin` scope",
        )
        .into())
    }
}

fn created_by(p: &Principal) -> String {
    format!("{}/{}", p.tenant, p.subject)
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// The proto message for a version record.
pub fn version_to_proto(v: AgentVersionRecord) -> v1::AgentVersion {
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
pub fn summary_to_proto(s: AgentSummaryRecord) -> v1::AgentSummary {
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

/// A span for one RPC, joined to the caller's trace. Never carries content.
fn span<T>(rpc: &'static str, p: &Principal, req: &Request<T>) -> tracing::Span {
    let span = tracing::info_span!("substrate", rpc, tenant = %p.tenant);
    weft_telemetry::adopt_trace_context(&span, req.metadata());
    span
}

#[tonic::async_trait]
impl v1::substrate_server::Substrate for SubstrateService {
    async fn put_agent(
        &self,
        request: Request<v1::PutAgentRequest>,
    ) -> Result<Response<v1::PutAgentResponse>, Status> {
        let p = principal(&request)?;
        let span = span("put_agent", &p, &request);
        require_write(&p)?;
        let r = request.into_inner();
        let by = created_by(&p);
        agents::put_agent_json(&self.store, &p.tenant, &r.name, &r.content_json, Some(&by))
            .instrument(span)
            .await
            .map(|s| Response::new(put_to_proto(s)))
            .map_err(Status::from)
    }

    async fn get_agent(
        &self,
        request: Request<v1::GetAgentRequest>,
    ) -> Result<Response<v1::AgentVersion>, Status> {
        let p = principal(&request)?;
        let span = span("get_agent", &p, &request);
        require_read(&p)?;
        let r = request.into_inner();
        agents::get_agent(&self.store, &p.tenant, &r.name, r.version.as_deref())
            .instrument(span)
            .await
            .map(|v| Response::new(version_to_proto(v)))
            .map_err(Status::from)
    }

    async fn list_agents(
        &self,
        request: Request<v1::ListAgentsRequest>,
    ) -> Result<Response<v1::ListAgentsResponse>, Status> {
        let p = principal(&request)?;
        let span = span("list_agents", &p, &request);
        require_read(&p)?;
        agents::list_agents(&self.store, &p.tenant)
            .instrument(span)
            .await
            .map(|list| {
                Response::new(v1::ListAgentsResponse {
                    agents: list.into_iter().map(summary_to_proto).collect(),
                })
            })
            .map_err(Status::from)
    }

    async fn list_agent_versions(
        &self,
        request: Request<v1::ListAgentVersionsRequest>,
    ) -> Result<Response<v1::ListAgentVersionsResponse>, Status> {
        let p = principal(&request)?;
        let span = span("list_agent_versions", &p, &request);
        require_read(&p)?;
        let r = request.into_inner();
        agents::list_versions(&self.store, &p.tenant, &r.name)
            .instrument(span)
            .await
            .map(|list| {
                Response::new(v1::ListAgentVersionsResponse {
                    versions: list.into_iter().map(version_to_proto).collect(),
                })
            })
            .map_err(Status::from)
    }

    async fn fork_agent(
        &self,
        request: Request<v1::ForkAgentRequest>,
    ) -> Result<Response<v1::PutAgentResponse>, Status> {
        let p = principal(&request)?;
        let span = span("fork_agent", &p, &request);
        require_write(&p)?;
        let r = request.into_inner();
        let by = created_by(&p);
        agents::fork_agent(
            &self.store,
            &p.tenant,
            &r.name,
            r.from_version.as_deref(),
            &r.changes_json,
            Some(&by),
        )
        .instrument(span)
        .await
        .map(|s| Response::new(put_to_proto(s)))
        .map_err(Status::from)
    }

    async fn retire_agent(
        &self,
        request: Request<v1::RetireAgentRequest>,
    ) -> Result<Response<v1::AgentSummary>, Status> {
        let p = principal(&request)?;
        let span = span("retire_agent", &p, &request);
        require_write(&p)?;
        let r = request.into_inner();
        agents::retire_agent(&self.store, &p.tenant, &r.name)
            .instrument(span)
            .await
            .map(|s| Response::new(summary_to_proto(s)))
            .map_err(Status::from)
    }

    async fn activate_agent(
        &self,
        request: Request<v1::ActivateAgentRequest>,
    ) -> Result<Response<v1::AgentSummary>, Status> {
        let p = principal(&request)?;
        let span = span("activate_agent", &p, &request);
        require_write(&p)?;
        let r = request.into_inner();
        agents::activate_agent(&self.store, &p.tenant, &r.name, &r.version)
            .instrument(span)
            .await
            .map(|s| Response::new(summary_to_proto(s)))
            .map_err(Status::from)
    }

    async fn verify_agent(
        &self,
        request: Request<v1::VerifyAgentRequest>,
    ) -> Result<Response<v1::VerifyAgentResponse>, Status> {
        let p = principal(&request)?;
        let span = span("verify_agent", &p, &request);
        require_read(&p)?;
        let r = request.into_inner();
        agents::verify_agent(&self.store, &p.tenant, &r.sha256)
            .instrument(span)
            .await
            .map(|found| {
                Response::new(match found {
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
                })
            })
            .map_err(Status::from)
    }
}
