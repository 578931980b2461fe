//! Agent definitions: the [`defs`](crate::defs) rules for [`AgentContent`], under the names
//! their callers (boot loading, tests, the CLI) have always used. Nothing here is specific to
//! agents beyond the content type; see [`crate::defs`] for the semantics.

use weft_core::agent::AgentContent;
use weft_core::def::DefKind;
use weft_core::{Error, TenantId};

use crate::defs;
pub use crate::defs::{PutOutcome, VersionRef, parse_version_ref};
use crate::store::{AgentSummaryRecord, AgentVersionRecord, DefStore};

const KIND: DefKind = DefKind::Agent;

/// Makes `content` the definition of `name` ([`defs::put`]).
pub async fn put_agent(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
    content: &AgentContent,
    created_by: Option<&str>,
) -> Result<PutOutcome, Error> {
    defs::put(store, tenant, name, content, created_by).await
}

/// [`put_agent`] with content as JSON text ([`defs::put_json`]).
pub async fn put_agent_json(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
    content_json: &str,
    created_by: Option<&str>,
) -> Result<PutOutcome, Error> {
    defs::put_json::<AgentContent>(store, tenant, name, content_json, created_by).await
}

/// The active version of `name`, or the given version of it ([`defs::get`]).
pub async fn get_agent(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
    version: Option<&str>,
) -> Result<AgentVersionRecord, Error> {
    defs::get(store, KIND, tenant, name, version).await
}

/// Every agent of the tenant, retired ones included ([`defs::list`]).
pub async fn list_agents(
    store: &DefStore,
    tenant: &TenantId,
) -> Result<Vec<AgentSummaryRecord>, Error> {
    defs::list(store, KIND, tenant).await
}

/// Every version of `name`, oldest first ([`defs::list_versions`]).
pub async fn list_versions(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
) -> Result<Vec<AgentVersionRecord>, Error> {
    defs::list_versions(store, KIND, tenant, name).await
}

/// A new version of `name` forked from `from_version` with `changes` ([`defs::fork`]).
pub async fn fork_agent(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
    from_version: Option<&str>,
    changes_json: &str,
    created_by: Option<&str>,
) -> Result<PutOutcome, Error> {
    defs::fork::<AgentContent>(store, tenant, name, from_version, changes_json, created_by).await
}

/// Retires `name` ([`defs::retire`]).
pub async fn retire_agent(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
) -> Result<AgentSummaryRecord, Error> {
    defs::retire(store, KIND, tenant, name).await
}

/// Points `name` at one of its versions and un-retires it ([`defs::activate`]).
pub async fn activate_agent(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
    version: &str,
) -> Result<AgentSummaryRecord, Error> {
    defs::activate(store, KIND, tenant, name, version).await
}

/// Whether `sha256` is a version of some agent of the tenant ([`defs::verify`]).
pub async fn verify_agent(
    store: &DefStore,
    tenant: &TenantId,
    sha256: &str,
) -> Result<Option<AgentVersionRecord>, Error> {
    defs::verify(store, KIND, tenant, sha256).await
}
