//! Tenant export and import for operators (docs/operations.md "Tenant export and import"):
//! `GET /v1/tenants/{tenant}/export` answers the tenant's archive (a tar), `POST
//! /v1/tenants/{tenant}/import` imports one under that name and answers the report the CLI
//! prints (`weft tenant import`). The archive's records are not JSON bodies of the API; they are
//! defined once in `weft_store::tenant_archive`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::TenantName;
use crate::op::Op;
use crate::volumes::Bytes;

/// What an import did, or would have done had it had no conflicts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("example" = {"tenant": "acme-copy", "source_tenant": "acme", "applied": true, "sections": {"memory": {"added": 3, "unchanged": 0, "skipped": 0}}, "conflicts": []}))]
pub struct TenantImportReport {
    /// the tenant imported into
    pub tenant: String,
    /// the tenant the archive was exported from
    pub source_tenant: String,
    /// whether the import was committed; false when there is any conflict (then nothing was
    /// written)
    pub applied: bool,
    /// per section of the archive
    pub sections: BTreeMap<String, ImportSectionCounts>,
    /// every archived item that differs from the target's item of the same key
    pub conflicts: Vec<ImportConflict>,
}

impl TenantImportReport {
    /// Items added over every section.
    pub fn added(&self) -> u64 {
        self.sections.values().map(|s| s.added).sum()
    }
}

/// One section of an import.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ImportSectionCounts {
    /// items that were absent and are (or would be) added
    #[schemars(range(min = 0))]
    pub added: u64,
    /// items already there with the same content
    #[schemars(range(min = 0))]
    pub unchanged: u64,
    /// items expired since the export (memory entries, channel messages), left out
    #[schemars(range(min = 0))]
    pub skipped: u64,
}

/// An archived item that differs from the target's item of the same key: never overwritten.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ImportConflict {
    /// the archive's section, e.g. `memory`
    pub section: String,
    /// the item's key, e.g. `agent/triage` or `tenant/city`
    pub item: String,
    /// why it is a conflict
    pub reason: String,
}

fn operator(op: Op) -> Op {
    op.tag("operations")
        .security(crate::Security::Bearer)
        .path::<TenantName>("tenant", Some("acme".into()))
        .error(400, "a tenant name that is not valid, or an archive that is refused (the message names the section)")
        .error(401, "missing, invalid, expired or revoked token")
        .error(403, "the token lacks `admin`")
        .error(503, "the database is unreachable")
}

pub fn ops() -> Vec<Op> {
    vec![
        operator(Op::get("/v1/tenants/{tenant}/export", "Export a tenant as an archive"))
            .describe("Scope: admin (an operator) only. The tenant's archive, as `weft tenant export` writes it: a tar of `manifest.json`, one JSONL file per section (definitions with every version, memory, channels and their messages and cursors, named volumes with blobs, changelog and snapshots, evaluations, and the runs evaluations name) and the blobs. Read in one consistent snapshot and streamed: every section is read before the answer starts (an error there is an error status); a blob that cannot be read ends the stream early, and import refuses the truncated archive. A volume blob kept in a `dir` or `s3` store cannot be read here: export such a tenant with `weft tenant export`. A tenant without data answers an archive with empty sections.")
            .query::<bool>("runs", Some("also every run with its events and tool ledger (default false)"), None)
            .answer_in::<Bytes>(200, "application/x-tar", "the archive"),
        operator(Op::post("/v1/tenants/{tenant}/import", "Import an archive as a tenant"))
            .describe("Scope: admin (an operator) only. The body is an archive from `weft tenant export` or `GET /v1/tenants/{tenant}/export`, imported under the tenant of the path (whatever tenant it was exported from), as `weft tenant import --as` does: checked whole first (a section newer than this weft, or whose sha256 does not match the manifest, is refused with a 400 naming the section), then applied in one transaction. An item that exists with other content is a conflict: nothing is written and the answer is 409 with the report. Importing the same archive again adds nothing. The body may be at most 256 MiB; import larger archives with the CLI.")
            .body_in::<Bytes>("application/x-tar")
            .ok::<TenantImportReport>("imported: what was added and what was already there")
            .answer::<TenantImportReport>(409, "conflicts; nothing was written")
            .error(413, "the archive is larger than 256 MiB"),
    ]
}
