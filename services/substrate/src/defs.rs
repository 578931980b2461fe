//! The definition rules, for every kind ([`DefKind`]: agents, skills, …): what a put, fork,
//! retire, activate or verify does. Inputs are validated here (names, content, version
//! references); [`DefStore`] only reads and writes. What differs between kinds — how content is
//! read, validated, described and hashed — comes from the kind's [`DefContent`]; everything
//! else is this one implementation. Errors are client-safe [`Error`]s naming the field; database
//! failures are logged here and reported as `internal` or `unavailable`.
//!
//! Semantics worth knowing:
//! - A put of content that is already a version of the name writes nothing and makes that
//!   version active again (`created = false`); new content becomes version `n + 1` with the
//!   previously active version as its parent.
//! - Put, fork and activate un-retire a retired name: a put is declarative ("this name is this
//!   content now").
//! - A fork merges `changes` over its source as a JSON merge patch (RFC 7386: objects merge key
//!   by key, `null` resets a field to its default, arrays are replaced whole). The source may be
//!   a version of another name of the same kind and tenant, which lets a fork start a new name.

use serde_json::Value;
use weft_core::agent::normalize_hash;
use weft_core::def::{DefContent, DefKind, validate_def_name};
use weft_core::{Error, TenantId};
use weft_store::StoreError;

use crate::store::{Activated, DefStore, NewVersion, Parent, Stored, SummaryRecord, VersionRecord};

/// What a put or fork returns.
pub type PutOutcome = Stored;

fn db(what: &'static str) -> impl Fn(StoreError) -> Error {
    move |e| {
        tracing::error!(error = %e, "{what} failed");
        e.to_api()
    }
}

fn not_found(kind: DefKind, name: &str) -> Error {
    Error::not_found(format!("no {kind} `{name}` in your tenant")).with_param("name")
}

/// A reference to a version of a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionRef {
    Hash(String),
    Number(u32),
}

/// Parses `version` (of field `field`): `sha256:<64 hex>`, 64 bare hex digits, or a version
/// number such as `3`.
pub fn parse_version_ref(field: &str, version: &str) -> Result<VersionRef, Error> {
    if let Some(h) = normalize_hash(version) {
        return Ok(VersionRef::Hash(h));
    }
    match version.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(VersionRef::Number(n)),
        _ => Err(Error::invalid(format!(
            "`{field}` must be a version hash (`sha256:` and 64 hex digits) or a version number such as 3, got `{version}`"
        ))
        .with_param(field)),
    }
}

async fn find_version(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
    name: &str,
    version: &VersionRef,
) -> Result<Option<VersionRecord>, Error> {
    match version {
        VersionRef::Hash(h) => store.by_hash(kind, tenant, name, h).await,
        VersionRef::Number(n) => store.by_number(kind, tenant, name, *n).await,
    }
    .map_err(db("reading a definition version"))
}

fn version_label(v: &VersionRef) -> String {
    match v {
        VersionRef::Hash(h) => h.clone(),
        VersionRef::Number(n) => n.to_string(),
    }
}

/// Stores `content` under `name` (already validated).
async fn store_content<C: DefContent>(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
    content: &C,
    parent: Parent,
    created_by: Option<&str>,
) -> Result<PutOutcome, Error> {
    let content_json = content.canonical_json();
    let hash = weft_core::agent::sha256_ref(&content_json);
    let out = store
        .put_version(&NewVersion {
            kind: C::KIND,
            tenant,
            name,
            hash: &hash,
            content_json: &content_json,
            description: content.description(),
            parent,
            created_by,
        })
        .await
        .map_err(db("storing a definition version"))?;
    tracing::info!(
        tenant = %tenant,
        kind = %C::KIND,
        name,
        version = %out.version.hash,
        number = out.version.number,
        created = out.created,
        "definition put"
    );
    Ok(out)
}

/// Makes `content` the definition of `name`: a new version when the content changed, else the
/// existing version (made active again).
pub async fn put<C: DefContent>(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
    content: &C,
    created_by: Option<&str>,
) -> Result<PutOutcome, Error> {
    validate_def_name(C::KIND, name)?;
    content.validate()?;
    store_content(store, tenant, name, content, Parent::Active, created_by).await
}

/// [`put`] with content as JSON text (a JSON object of content fields): the API's path, so
/// content only an operator may define ([`DefContent::operator_only`]) is refused.
pub async fn put_json<C: DefContent>(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
    content_json: &str,
    created_by: Option<&str>,
) -> Result<PutOutcome, Error> {
    validate_def_name(C::KIND, name)?;
    let content = C::from_json_str(content_json)?;
    if let Some(why) = content.operator_only() {
        return Err(Error::forbidden(why));
    }
    put(store, tenant, name, &content, created_by).await
}

/// The active version of `name`, or the given version of it (hash or number).
pub async fn get(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
    name: &str,
    version: Option<&str>,
) -> Result<VersionRecord, Error> {
    validate_def_name(kind, name)?;
    match version.filter(|v| !v.is_empty()) {
        None => store
            .active(kind, tenant, name)
            .await
            .map_err(db("reading a definition"))?
            .ok_or_else(|| not_found(kind, name)),
        Some(v) => {
            let r = parse_version_ref("version", v)?;
            match find_version(store, kind, tenant, name, &r).await? {
                Some(found) => Ok(found),
                None => Err(missing_version(store, kind, tenant, name, &r).await),
            }
        }
    }
}

/// NotFound naming what is missing: the name, or the version of it.
async fn missing_version(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
    name: &str,
    r: &VersionRef,
) -> Error {
    match store.summary(kind, tenant, name).await {
        Ok(Some(_)) => Error::not_found(format!(
            "{kind} `{name}` has no version `{}`; list its versions to see them",
            version_label(r)
        ))
        .with_param("version"),
        Ok(None) => not_found(kind, name),
        Err(e) => db("reading a definition")(e),
    }
}

/// Every name of `kind` in the tenant, retired ones included.
pub async fn list(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
) -> Result<Vec<SummaryRecord>, Error> {
    store
        .list(kind, tenant)
        .await
        .map_err(db("listing definitions"))
}

/// The active version of every name of `kind` that is not retired, oldest name first.
pub async fn list_active(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
) -> Result<Vec<VersionRecord>, Error> {
    store
        .active_all(kind, tenant)
        .await
        .map_err(db("listing definitions"))
}

/// Every version of `name`, oldest first.
pub async fn list_versions(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
    name: &str,
) -> Result<Vec<VersionRecord>, Error> {
    validate_def_name(kind, name)?;
    let versions = store
        .versions(kind, tenant, name)
        .await
        .map_err(db("listing definition versions"))?;
    if versions.is_empty() {
        return Err(not_found(kind, name));
    }
    Ok(versions)
}

/// RFC 7386 JSON merge patch of `patch` onto `target`.
fn merge_patch(target: &mut Value, patch: Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(serde_json::Map::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(&k);
                    } else {
                        merge_patch(t.entry(k).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other,
    }
}

/// A new version of `name` derived from `from_version` (default: the active version of `name`)
/// with `changes` merged over it; its parent is the source version. The result becomes active.
pub async fn fork<C: DefContent>(
    store: &DefStore,
    tenant: &TenantId,
    name: &str,
    from_version: Option<&str>,
    changes_json: &str,
    created_by: Option<&str>,
) -> Result<PutOutcome, Error> {
    let kind = C::KIND;
    validate_def_name(kind, name)?;
    let changes: Value = if changes_json.trim().is_empty() {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_str(changes_json).map_err(|e| {
            Error::invalid(format!("`changes` is not valid JSON: {e}")).with_param("changes")
        })?
    };
    if !changes.is_object() {
        return Err(Error::invalid(
            "`changes` must be a JSON object of the content fields to change, e.g. {\"description\": \"…\"}",
        )
        .with_param("changes"));
    }
    let source = match from_version.filter(|v| !v.is_empty()) {
        None => store
            .active(kind, tenant, name)
            .await
            .map_err(db("reading a definition"))?
            .ok_or_else(|| {
                Error::not_found(format!(
                    "no {kind} `{name}` in your tenant; to fork another {kind}'s version into a new name, give `from_version`"
                ))
                .with_param("name")
            })?,
        Some(v) => {
            let r = parse_version_ref("from_version", v)?;
            let own = find_version(store, kind, tenant, name, &r).await?;
            let found = match (own, &r) {
                (Some(found), _) => Some(found),
                // A hash may name a version of another name of this kind in the tenant.
                (None, VersionRef::Hash(h)) => store
                    .find_hash(kind, tenant, h)
                    .await
                    .map_err(db("reading a definition version"))?,
                (None, VersionRef::Number(_)) => None,
            };
            found.ok_or_else(|| {
                Error::not_found(format!(
                    "`from_version` `{}` is not a version of `{name}` or of another {kind} in your tenant",
                    version_label(&r)
                ))
                .with_param("from_version")
            })?
        }
    };
    let mut merged: Value = serde_json::from_str(&source.content_json).map_err(|e| {
        tracing::error!(error = %e, version = %source.hash, "stored content is not JSON");
        Error::internal()
    })?;
    merge_patch(&mut merged, changes);
    let in_changes = |mut e: Error| {
        e.param = Some(match e.param.take() {
            Some(p) => format!("changes.{p}"),
            None => "changes".into(),
        });
        e
    };
    let content = C::from_json(merged).map_err(in_changes)?;
    content.validate().map_err(in_changes)?;
    if let Some(why) = content.operator_only() {
        return Err(Error::forbidden(why));
    }
    store_content(
        store,
        tenant,
        name,
        &content,
        Parent::Version(source.hash),
        created_by,
    )
    .await
}

/// Retires `name`: it stays readable, and new uses of it should be refused.
pub async fn retire(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
    name: &str,
) -> Result<SummaryRecord, Error> {
    validate_def_name(kind, name)?;
    let s = store
        .retire(kind, tenant, name)
        .await
        .map_err(db("retiring a definition"))?
        .ok_or_else(|| not_found(kind, name))?;
    tracing::info!(tenant = %tenant, kind = %kind, name, "definition retired");
    Ok(s)
}

/// Points `name` at one of its versions (by hash or number) and un-retires it.
pub async fn activate(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
    name: &str,
    version: &str,
) -> Result<SummaryRecord, Error> {
    validate_def_name(kind, name)?;
    if version.trim().is_empty() {
        return Err(Error::invalid(
            "`version` is required: the hash or number of the version to activate",
        )
        .with_param("version"));
    }
    let r = parse_version_ref("version", version)?;
    let hash = match &r {
        VersionRef::Hash(h) => h.clone(),
        VersionRef::Number(_) => match find_version(store, kind, tenant, name, &r).await? {
            Some(v) => v.hash,
            None => return Err(missing_version(store, kind, tenant, name, &r).await),
        },
    };
    match store
        .activate(kind, tenant, name, &hash)
        .await
        .map_err(db("activating a definition version"))?
    {
        Activated::Done(s) => {
            tracing::info!(tenant = %tenant, kind = %kind, name, version = %hash, "definition version activated");
            Ok(s)
        }
        Activated::NoSuchName => Err(not_found(kind, name)),
        Activated::NoSuchVersion => Err(Error::not_found(format!(
            "{kind} `{name}` has no version `{}`; list its versions to see them",
            version_label(&r)
        ))
        .with_param("version")),
    }
}

/// Whether `sha256` is a version of some name of `kind` in the tenant: that version (the
/// oldest, when several names share the content).
pub async fn verify(
    store: &DefStore,
    kind: DefKind,
    tenant: &TenantId,
    sha256: &str,
) -> Result<Option<VersionRecord>, Error> {
    let hash = normalize_hash(sha256).ok_or_else(|| {
        Error::invalid(format!(
            "`sha256` must be `sha256:` followed by 64 hex digits, got `{sha256}`"
        ))
        .with_param("sha256")
    })?;
    store
        .find_hash(kind, tenant, &hash)
        .await
        .map_err(db("verifying a definition hash"))
}

/// Makes the live row of schedule `name` (`schedules`) follow its active version: a new version
/// starts from its next slot after now; a retired definition stops firing. Called after every
/// put, fork, retire and activate of a schedule, and at boot.
pub async fn sync_schedule(store: &DefStore, tenant: &TenantId, name: &str) -> Result<(), Error> {
    use weft_core::schedule::ScheduleContent;
    let schedules = weft_store::ScheduleStore::new(store.pool().clone());
    let active = match get(store, DefKind::Schedule, tenant, name, None).await {
        Ok(v) if !v.retired => Some(v),
        Ok(_) => None,
        Err(e) if e.code == weft_core::ErrorCode::NotFound => None,
        Err(e) => return Err(e),
    };
    let Some(v) = active else {
        return schedules
            .retire(tenant, name, "definition retired")
            .await
            .map_err(db("retiring a schedule"));
    };
    let content = ScheduleContent::from_json_str(&v.content_json)?;
    let next = content
        .compile()?
        .next_after(time::OffsetDateTime::now_utc());
    schedules
        .upsert_def(
            tenant,
            name,
            &v.hash,
            &v.content_json,
            content.enabled,
            next,
        )
        .await
        .map_err(db("updating a schedule"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use weft_core::agent::AgentContent;

    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut t = json!({"a": 1, "sampling": {"temperature": 0.5, "top_p": 0.9}, "tools": ["x"]});
        merge_patch(
            &mut t,
            json!({"a": null, "sampling": {"top_p": null, "seed": 3}, "tools": ["y", "z"]}),
        );
        assert_eq!(
            t,
            json!({"sampling": {"temperature": 0.5, "seed": 3}, "tools": ["y", "z"]})
        );
    }

    #[test]
    fn version_refs_parse() {
        let h = AgentContent::default().hash();
        assert_eq!(
            parse_version_ref("version", &h).unwrap(),
            VersionRef::Hash(h.clone())
        );
        assert_eq!(
            parse_version_ref("version", "3").unwrap(),
            VersionRef::Number(3)
        );
        for bad in ["0", "v3", "sha256:xyz", ""] {
            let e = parse_version_ref("version", bad).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("version"));
        }
    }
}
