//! The token routes: `POST/GET /v1/tokens`, `DELETE /v1/tokens/{id}`, `GET /v1/me`.
//! Admins manage every tenant; tenant admins manage only their own and never grant a scope they
//! do not hold. Another tenant's token is a 404, never a 403.

use axum::Extension;
use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use weft_api::base::{Token, TokenList};
use weft_api::common::{NextCursor, Timestamp};
use weft_core::{Error, Principal, Scope, Scopes, TenantId, TokenId};
use weft_store::{NewToken, TokenRecord};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{NativeJson, NativePath, ValidJson};

type Result<T> = std::result::Result<T, ApiError>;

pub use weft_api::base::CreateToken;

/// A time as the token routes have always written it (RFC 3339, in the offset stored).
fn ts(t: OffsetDateTime) -> Timestamp {
    // Formatting fails only past year 9999, which no stored token time reaches.
    Timestamp(t.format(&Rfc3339).unwrap_or_default())
}

fn token_out(r: &TokenRecord) -> Token {
    Token {
        id: r.id.to_string(),
        name: r.name.clone(),
        tenant: r.tenant.to_string(),
        subject: r.subject.clone(),
        scopes: r.scopes.to_strings(),
        prefix: r.prefix.clone(),
        bootstrap: r.bootstrap,
        created_at: ts(r.created_at),
        expires_at: r.expires_at.map(ts),
        revoked_at: r.revoked_at.map(ts),
        token: None,
    }
}

/// The contract's scope as weft-core's (the same names).
fn scope(s: weft_api::base::Scope) -> Scope {
    use weft_api::base::Scope as S;
    match s {
        S::Admin => Scope::Admin,
        S::TenantAdmin => Scope::TenantAdmin,
        S::RunsCreate => Scope::RunsCreate,
        S::RunsRead => Scope::RunsRead,
        S::MemoryRead => Scope::MemoryRead,
        S::MemoryWrite => Scope::MemoryWrite,
        S::ChannelsPublish => Scope::ChannelsPublish,
        S::ChannelsRead => Scope::ChannelsRead,
        S::LlmCall => Scope::LlmCall,
        S::VolumesRead => Scope::VolumesRead,
        S::VolumesWrite => Scope::VolumesWrite,
    }
}

/// The scopes `p` does not hold: a token holding any of them holds more than `p`, so `p` may
/// neither see nor revoke it (a tenant admin never touches an operator's `admin` token).
fn lacked_scopes(p: &Principal) -> Scopes {
    Scopes::new(Scope::ALL.into_iter().filter(|s| !p.has(*s)))
}

fn require_tenant_admin(p: &Principal) -> std::result::Result<(), Error> {
    if p.is_admin() || p.scopes.contains(Scope::TenantAdmin) {
        Ok(())
    } else {
        Err(Error::forbidden(
            "managing tokens needs the `tenant:admin` or `admin` scope",
        ))
    }
}

/// Mints a token. Shared by the HTTP route and `weft token create`.
pub async fn create_token(
    st: &weft_store::TokenStore,
    creator: Option<&Principal>,
    req: CreateTokenInput,
) -> std::result::Result<(TokenRecord, String), Error> {
    if req.name.trim().is_empty() || req.name.len() > 200 {
        return Err(Error::invalid("`name` must be 1-200 characters").with_param("name"));
    }
    if req.subject.trim().is_empty() || req.subject.len() > 200 {
        return Err(Error::invalid("`subject` must be 1-200 characters").with_param("subject"));
    }
    if req.scopes.is_empty() {
        return Err(
            Error::invalid("`scopes` must name at least one scope, e.g. [\"llm:call\"]")
                .with_param("scopes"),
        );
    }
    if let Some(e) = req.expires_at
        && e <= OffsetDateTime::now_utc()
    {
        return Err(Error::invalid("`expires_at` is in the past").with_param("expires_at"));
    }
    if let Some(c) = creator {
        require_tenant_admin(c)?;
        if !c.administers(&req.tenant) {
            return Err(Error::forbidden(format!(
                "a tenant admin mints tokens only in its own tenant (`{}`), not in `{}`",
                c.tenant, req.tenant
            ))
            .with_param("tenant"));
        }
        if let Some(s) = req.scopes.iter().find(|s| !c.has(*s)) {
            return Err(Error::forbidden(format!(
                "you cannot grant `{s}`: your token does not hold it"
            ))
            .with_param("scopes"));
        }
    }
    let minted = weft_auth::mint_token();
    let rec = st
        .insert(&NewToken {
            id: TokenId::new(),
            tenant: req.tenant,
            subject: req.subject,
            name: req.name,
            scopes: req.scopes,
            hash: minted.hash.to_vec(),
            prefix: minted.prefix.clone(),
            created_by: creator.map(|c| format!("{}/{}", c.tenant, c.subject)),
            bootstrap: req.bootstrap,
            expires_at: req.expires_at,
        })
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "inserting token failed");
            e.to_api()
        })?;
    Ok((rec, minted.secret))
}

/// What a new token is bound to.
#[derive(Debug)]
pub struct CreateTokenInput {
    pub name: String,
    pub tenant: TenantId,
    pub subject: String,
    pub scopes: Scopes,
    pub expires_at: Option<OffsetDateTime>,
    pub bootstrap: bool,
}

pub async fn create_token_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    ValidJson(body): NativeJson<CreateToken>,
) -> Result<Response> {
    // The body's tenant was checked as it was read; parsing it again cannot fail.
    let tenant = match body.tenant {
        Some(t) => TenantId::parse(&t.0).map_err(ApiError::native)?,
        None => p.tenant.clone(),
    };
    let input = CreateTokenInput {
        name: body.name,
        tenant,
        subject: body.subject,
        scopes: Scopes::new(body.scopes.into_iter().map(scope)),
        expires_at: body.expires_at,
        bootstrap: false,
    };
    let (rec, secret) = create_token(&st.tokens, Some(&p), input)
        .await
        .map_err(ApiError::native)?;
    tracing::info!(token_id = %rec.id, tenant = %rec.tenant, "token created");
    let body = Token {
        token: Some(secret),
        ..token_out(&rec)
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `?tenant=` of `GET /v1/tokens`, parsed here so a bad value gets weft's error shape.
fn tenant_filter(query: Option<&str>) -> std::result::Result<Option<TenantId>, Error> {
    let Some(q) = query else { return Ok(None) };
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "tenant" {
            return Err(Error::invalid(format!(
                "unknown query parameter `{key}`; the only one is `tenant`"
            ))
            .with_param(key));
        }
        if !value.is_empty() {
            return TenantId::parse(value).map(Some);
        }
    }
    Ok(None)
}

pub async fn list_tokens_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    RawQuery(query): RawQuery,
) -> Result<Response> {
    require_tenant_admin(&p).map_err(ApiError::native)?;
    let filter = tenant_filter(query.as_deref()).map_err(ApiError::native)?;
    let tenant = if p.is_admin() {
        filter
    } else {
        Some(p.tenant.clone())
    };
    let list = st
        .tokens
        .list(tenant.as_ref(), &lacked_scopes(&p))
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "listing tokens failed");
            ApiError::native(e.to_api())
        })?;
    Ok(Json(TokenList {
        data: list.iter().map(token_out).collect(),
        next_cursor: NextCursor(None),
    })
    .into_response())
}

pub async fn revoke_token_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath(id): NativePath<String>,
) -> Result<Response> {
    require_tenant_admin(&p).map_err(ApiError::native)?;
    let not_found =
        || ApiError::native(Error::not_found(format!("no token `{id}` in your tenant")));
    let token_id: TokenId = id.parse().map_err(|_| not_found())?;
    let tenant = (!p.is_admin()).then(|| p.tenant.clone());
    let rec = st
        .tokens
        .revoke(token_id, tenant.as_ref(), &lacked_scopes(&p))
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "revoking token failed");
            ApiError::native(e.to_api())
        })?;
    let rec = rec.ok_or_else(not_found)?;
    st.resolver.forget(&rec.hash);
    tracing::info!(token_id = %rec.id, "token revoked");
    Ok(Json(token_out(&rec)).into_response())
}

pub async fn me_handler(Extension(p): Extension<Principal>) -> Response {
    Json(weft_api::base::Principal {
        tenant: p.tenant.to_string(),
        subject: p.subject,
        scopes: p.scopes.to_strings(),
    })
    .into_response()
}
