//! The memory's gRPC face (`weft.v1.Memory`): the principal comes from the verified internal
//! JWT; reading needs `memory:read`, writing `memory:write` (admins and tenant admins hold
//! both). Requests become [`Memory`] calls, entries become prost messages.

use tonic::{Request, Response, Status};
use tracing::Instrument as _;
use weft_auth::rpc::accept;
use weft_core::rfc3339;
use weft_core::{Principal, Scope};
use weft_proto::v1;

use super::{Entry, Memory, ScopeRef};

/// The `weft.v1.Memory` service.
#[derive(Clone, Debug)]
pub struct MemoryService {
    memory: Memory,
}

impl MemoryService {
    pub fn new(memory: Memory) -> Self {
        Self { memory }
    }
}

fn require(p: &Principal, scope: Scope) -> Result<(), Status> {
    p.require(scope).map_err(Status::from)
}

/// The proto message for an entry of `scope`/`scope_id`.
pub fn entry_to_proto(scope: &str, scope_id: &str, e: Entry) -> v1::MemoryEntry {
    v1::MemoryEntry {
        scope: scope.to_owned(),
        scope_id: scope_id.to_owned(),
        key: e.key,
        value_json: e.value_json,
        version: e.version,
        expires_at: e.expires_at.map(rfc3339),
        updated_at: rfc3339(e.updated_at),
        embedded: e.embedded,
    }
}

/// The span of one RPC (its tenant recorded by `accept`). Never carries content.
fn span(rpc: &'static str) -> tracing::Span {
    tracing::info_span!("memory", rpc, tenant = tracing::field::Empty)
}

#[tonic::async_trait]
impl v1::memory_server::Memory for MemoryService {
    async fn get(
        &self,
        request: Request<v1::MemoryGetRequest>,
    ) -> Result<Response<v1::MemoryEntry>, Status> {
        let (p, span) = accept(&request, span("get"))?;
        require(&p, Scope::MemoryRead)?;
        let r = request.into_inner();
        let at = ScopeRef {
            scope: &r.scope,
            scope_id: &r.scope_id,
        };
        self.memory
            .get(&p, at, &r.key)
            .instrument(span)
            .await
            .map(|e| Response::new(entry_to_proto(&r.scope, &r.scope_id, e)))
            .map_err(Status::from)
    }

    async fn set(
        &self,
        request: Request<v1::MemorySetRequest>,
    ) -> Result<Response<v1::MemoryEntry>, Status> {
        let (p, span) = accept(&request, span("set"))?;
        require(&p, Scope::MemoryWrite)?;
        let r = request.into_inner();
        let at = ScopeRef {
            scope: &r.scope,
            scope_id: &r.scope_id,
        };
        self.memory
            .set(
                &p,
                at,
                &r.key,
                &r.value_json,
                r.ttl_seconds,
                r.if_version,
                r.embed,
                r.op_key.as_deref(),
                r.agent.as_deref(),
            )
            .instrument(span)
            .await
            .map(|e| Response::new(entry_to_proto(&r.scope, &r.scope_id, e)))
            .map_err(Status::from)
    }

    async fn delete(
        &self,
        request: Request<v1::MemoryDeleteRequest>,
    ) -> Result<Response<v1::MemoryDeleteResponse>, Status> {
        let (p, span) = accept(&request, span("delete"))?;
        require(&p, Scope::MemoryWrite)?;
        let r = request.into_inner();
        let at = ScopeRef {
            scope: &r.scope,
            scope_id: &r.scope_id,
        };
        self.memory
            .delete(
                &p,
                at,
                &r.key,
                r.if_version,
                r.op_key.as_deref(),
                r.agent.as_deref(),
            )
            .instrument(span)
            .await
            .map(|d| {
                Response::new(v1::MemoryDeleteResponse {
                    deleted: d.deleted,
                    version: d.version,
                })
            })
            .map_err(Status::from)
    }

    async fn list(
        &self,
        request: Request<v1::MemoryListRequest>,
    ) -> Result<Response<v1::MemoryListResponse>, Status> {
        let (p, span) = accept(&request, span("list"))?;
        require(&p, Scope::MemoryRead)?;
        let r = request.into_inner();
        let at = ScopeRef {
            scope: &r.scope,
            scope_id: &r.scope_id,
        };
        self.memory
            .list(&p, at, &r.prefix, r.cursor.as_deref(), r.limit)
            .instrument(span)
            .await
            .map(|(entries, next)| {
                Response::new(v1::MemoryListResponse {
                    entries: entries
                        .into_iter()
                        .map(|e| entry_to_proto(&r.scope, &r.scope_id, e))
                        .collect(),
                    next_cursor: next,
                })
            })
            .map_err(Status::from)
    }

    async fn incr(
        &self,
        request: Request<v1::MemoryIncrRequest>,
    ) -> Result<Response<v1::MemoryEntry>, Status> {
        let (p, span) = accept(&request, span("incr"))?;
        require(&p, Scope::MemoryWrite)?;
        let r = request.into_inner();
        let at = ScopeRef {
            scope: &r.scope,
            scope_id: &r.scope_id,
        };
        self.memory
            .incr(
                &p,
                at,
                &r.key,
                r.by,
                r.ttl_seconds,
                r.op_key.as_deref(),
                r.agent.as_deref(),
            )
            .instrument(span)
            .await
            .map(|e| Response::new(entry_to_proto(&r.scope, &r.scope_id, e)))
            .map_err(Status::from)
    }

    async fn search(
        &self,
        request: Request<v1::MemorySearchRequest>,
    ) -> Result<Response<v1::MemorySearchResponse>, Status> {
        let (p, span) = accept(&request, span("search"))?;
        require(&p, Scope::MemoryRead)?;
        let r = request.into_inner();
        let at = ScopeRef {
            scope: &r.scope,
            scope_id: &r.scope_id,
        };
        let mode = self.memory.mode().as_str().to_owned();
        self.memory
            .search(&p, at, &r.query, r.top_k)
            .instrument(span)
            .await
            .map(|hits| {
                Response::new(v1::MemorySearchResponse {
                    hits: hits
                        .into_iter()
                        .map(|h| v1::MemorySearchHit {
                            entry: Some(entry_to_proto(&r.scope, &r.scope_id, h.entry)),
                            score: h.score,
                        })
                        .collect(),
                    mode,
                })
            })
            .map_err(Status::from)
    }
}
