//! The volumes' gRPC face (`weft.v1.Volumes`): the principal comes from the verified internal
//! JWT; reading needs `volumes:read`, writing `volumes:write` (admins and tenant admins hold
//! both). A weft `conflict` goes out as FAILED_PRECONDITION (the weft code rides in the
//! metadata, so a gateway still answers 409); every other error maps as usual.

use tonic::{Code, Request, Response, Status};
use tracing::Instrument as _;
use weft_auth::rpc::accept;
use weft_core::{Error, ErrorCode, Principal, Scope};
use weft_proto::v1;

use super::Volumes;

/// The `weft.v1.Volumes` service.
#[derive(Clone, Debug)]
pub struct VolumesService {
    volumes: Volumes,
}

impl VolumesService {
    pub fn new(volumes: Volumes) -> Self {
        Self { volumes }
    }
}

/// The status of a domain error: `conflict` is a failed precondition here.
pub fn status(e: Error) -> Status {
    let conflict = e.code == ErrorCode::Conflict;
    let s = Status::from(e);
    if conflict {
        Status::with_metadata(
            Code::FailedPrecondition,
            s.message().to_owned(),
            s.metadata().clone(),
        )
    } else {
        s
    }
}

fn require(p: &Principal, scope: Scope) -> Result<(), Status> {
    p.require(scope).map_err(Status::from)
}

/// The span of one RPC (its tenant recorded by `accept`). Never carries content.
fn span(rpc: &'static str) -> tracing::Span {
    tracing::info_span!("volumes", rpc, tenant = tracing::field::Empty)
}

/// Accepts a request needing `scope`: the principal and the RPC's span.
fn admit<T>(
    request: &Request<T>,
    rpc: &'static str,
    scope: Scope,
) -> Result<(Principal, tracing::Span), Status> {
    let (p, span) = accept(request, span(rpc))?;
    require(&p, scope)?;
    Ok((p, span))
}

fn reply<T>(r: Result<T, Error>) -> Result<Response<T>, Status> {
    r.map(Response::new).map_err(status)
}

#[tonic::async_trait]
impl v1::volumes_server::Volumes for VolumesService {
    async fn create_volume(
        &self,
        request: Request<v1::CreateVolumeRequest>,
    ) -> Result<Response<v1::Volume>, Status> {
        let (p, span) = admit(&request, "create_volume", Scope::VolumesWrite)?;
        let r = request.into_inner();
        reply(self.volumes.create_volume(&p, r).instrument(span).await)
    }

    async fn get_volume(
        &self,
        request: Request<v1::VolumeRef>,
    ) -> Result<Response<v1::Volume>, Status> {
        let (p, span) = admit(&request, "get_volume", Scope::VolumesRead)?;
        let r = request.into_inner();
        reply(self.volumes.get_volume(&p, Some(&r)).instrument(span).await)
    }

    async fn list_volumes(
        &self,
        request: Request<v1::ListVolumesRequest>,
    ) -> Result<Response<v1::ListVolumesResponse>, Status> {
        let (p, span) = admit(&request, "list_volumes", Scope::VolumesRead)?;
        reply(self.volumes.list_volumes(&p).instrument(span).await)
    }

    async fn delete_volume(
        &self,
        request: Request<v1::VolumeRef>,
    ) -> Result<Response<v1::DeleteVolumeResponse>, Status> {
        let (p, span) = admit(&request, "delete_volume", Scope::VolumesWrite)?;
        let r = request.into_inner();
        reply(
            self.volumes
                .delete_volume(&p, Some(&r))
                .instrument(span)
                .await
                .map(|deleted| v1::DeleteVolumeResponse { deleted }),
        )
    }

    async fn purge_run_volume(
        &self,
        request: Request<v1::PurgeRunVolumeRequest>,
    ) -> Result<Response<v1::DeleteVolumeResponse>, Status> {
        let (p, span) = admit(&request, "purge_run_volume", Scope::VolumesWrite)?;
        let r = request.into_inner();
        reply(
            self.volumes
                .purge_run_volume(&p, &r.root_run_id)
                .instrument(span)
                .await
                .map(|deleted| v1::DeleteVolumeResponse { deleted }),
        )
    }

    async fn tree(
        &self,
        request: Request<v1::TreeRequest>,
    ) -> Result<Response<v1::TreeResponse>, Status> {
        let (p, span) = admit(&request, "tree", Scope::VolumesRead)?;
        let r = request.into_inner();
        reply(self.volumes.tree(&p, r).instrument(span).await)
    }

    async fn read_file(
        &self,
        request: Request<v1::ReadFileRequest>,
    ) -> Result<Response<v1::FileContent>, Status> {
        let (p, span) = admit(&request, "read_file", Scope::VolumesRead)?;
        let r = request.into_inner();
        reply(self.volumes.read_file(&p, r).instrument(span).await)
    }

    async fn put_blobs(
        &self,
        request: Request<v1::PutBlobsRequest>,
    ) -> Result<Response<v1::PutBlobsResponse>, Status> {
        let (p, span) = admit(&request, "put_blobs", Scope::VolumesWrite)?;
        let r = request.into_inner();
        reply(self.volumes.put_blobs(&p, r).instrument(span).await)
    }

    async fn get_blobs(
        &self,
        request: Request<v1::GetBlobsRequest>,
    ) -> Result<Response<v1::GetBlobsResponse>, Status> {
        let (p, span) = admit(&request, "get_blobs", Scope::VolumesRead)?;
        let r = request.into_inner();
        reply(self.volumes.get_blobs(&p, r).instrument(span).await)
    }

    async fn apply(
        &self,
        request: Request<v1::ApplyRequest>,
    ) -> Result<Response<v1::Change>, Status> {
        let (p, span) = admit(&request, "apply", Scope::VolumesWrite)?;
        let r = request.into_inner();
        reply(self.volumes.apply(&p, r).instrument(span).await)
    }

    async fn glob(
        &self,
        request: Request<v1::GlobRequest>,
    ) -> Result<Response<v1::GlobResponse>, Status> {
        let (p, span) = admit(&request, "glob", Scope::VolumesRead)?;
        let r = request.into_inner();
        reply(self.volumes.glob(&p, r).instrument(span).await)
    }

    async fn grep(
        &self,
        request: Request<v1::GrepRequest>,
    ) -> Result<Response<v1::GrepResponse>, Status> {
        let (p, span) = admit(&request, "grep", Scope::VolumesRead)?;
        let r = request.into_inner();
        reply(self.volumes.grep(&p, r).instrument(span).await)
    }

    async fn list_changes(
        &self,
        request: Request<v1::ListChangesRequest>,
    ) -> Result<Response<v1::ListChangesResponse>, Status> {
        let (p, span) = admit(&request, "list_changes", Scope::VolumesRead)?;
        let r = request.into_inner();
        reply(self.volumes.list_changes(&p, r).instrument(span).await)
    }

    async fn undo(
        &self,
        request: Request<v1::UndoRequest>,
    ) -> Result<Response<v1::Change>, Status> {
        let (p, span) = admit(&request, "undo", Scope::VolumesWrite)?;
        let r = request.into_inner();
        reply(self.volumes.undo(&p, r).instrument(span).await)
    }

    async fn create_snapshot(
        &self,
        request: Request<v1::CreateSnapshotRequest>,
    ) -> Result<Response<v1::Snapshot>, Status> {
        let (p, span) = admit(&request, "create_snapshot", Scope::VolumesWrite)?;
        let r = request.into_inner();
        reply(self.volumes.create_snapshot(&p, r).instrument(span).await)
    }

    async fn list_snapshots(
        &self,
        request: Request<v1::ListSnapshotsRequest>,
    ) -> Result<Response<v1::ListSnapshotsResponse>, Status> {
        let (p, span) = admit(&request, "list_snapshots", Scope::VolumesRead)?;
        let r = request.into_inner();
        reply(self.volumes.list_snapshots(&p, r).instrument(span).await)
    }

    async fn diff(
        &self,
        request: Request<v1::DiffRequest>,
    ) -> Result<Response<v1::DiffResponse>, Status> {
        let (p, span) = admit(&request, "diff", Scope::VolumesRead)?;
        let r = request.into_inner();
        reply(self.volumes.diff(&p, r).instrument(span).await)
    }

    async fn restore(
        &self,
        request: Request<v1::RestoreRequest>,
    ) -> Result<Response<v1::Change>, Status> {
        let (p, span) = admit(&request, "restore", Scope::VolumesWrite)?;
        let r = request.into_inner();
        reply(self.volumes.restore(&p, r).instrument(span).await)
    }
}
