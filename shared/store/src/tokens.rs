//! The `tokens` table: hashes of API tokens bound to `{tenant, subject, scopes}`.

use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;
use weft_core::{Scopes, TenantId, TokenId};

use crate::StoreError;

/// A token as stored (never the secret).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenRecord {
    pub id: TokenId,
    pub tenant: TenantId,
    pub subject: String,
    pub name: String,
    pub scopes: Scopes,
    pub prefix: String,
    /// SHA-256 of the token; never the token.
    pub hash: Vec<u8>,
    pub created_by: Option<String>,
    pub bootstrap: bool,
    pub created_at: OffsetDateTime,
    pub expires_at: Option<OffsetDateTime>,
    pub revoked_at: Option<OffsetDateTime>,
}

impl TokenRecord {
    /// Not revoked and not expired at `now`.
    pub fn is_active(&self, now: OffsetDateTime) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| e > now)
    }
}

/// What to insert; the hash is computed by `weft-auth`.
#[derive(Clone, Debug)]
pub struct NewToken {
    pub id: TokenId,
    pub tenant: TenantId,
    pub subject: String,
    pub name: String,
    pub scopes: Scopes,
    pub hash: Vec<u8>,
    pub prefix: String,
    pub created_by: Option<String>,
    pub bootstrap: bool,
    pub expires_at: Option<OffsetDateTime>,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: Uuid,
    tenant_id: String,
    subject: String,
    name: String,
    scopes: Vec<String>,
    prefix: String,
    token_hash: Vec<u8>,
    created_by: Option<String>,
    bootstrap: bool,
    created_at: OffsetDateTime,
    expires_at: Option<OffsetDateTime>,
    revoked_at: Option<OffsetDateTime>,
}

impl Row {
    fn into_record(self) -> Result<TokenRecord, StoreError> {
        let bad = |what: &str| {
            StoreError::Db(sqlx::Error::Decode(
                format!("token {} has an invalid {what}", self.id).into(),
            ))
        };
        let tenant = TenantId::parse(&self.tenant_id).map_err(|_| bad("tenant"))?;
        let scopes = Scopes::parse_list(&self.scopes.join(",")).map_err(|_| bad("scope"))?;
        Ok(TokenRecord {
            id: TokenId(self.id),
            tenant,
            subject: self.subject,
            name: self.name,
            scopes,
            prefix: self.prefix,
            hash: self.token_hash,
            created_by: self.created_by,
            bootstrap: self.bootstrap,
            created_at: self.created_at,
            expires_at: self.expires_at,
            revoked_at: self.revoked_at,
        })
    }
}

/// The selected columns, as a literal so queries stay static strings (`concat!`, not `format!`).
macro_rules! columns {
    () => {
        "id, tenant_id, subject, name, scopes, prefix, token_hash, created_by, bootstrap, created_at, \
         expires_at, revoked_at"
    };
}

#[derive(Clone, Debug)]
pub struct TokenStore {
    pool: PgPool,
}

impl TokenStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    pub async fn insert(&self, t: &NewToken) -> Result<TokenRecord, StoreError> {
        let row: Row = sqlx::query_as(concat!(
            "INSERT INTO tokens (id, tenant_id, subject, name, scopes, token_hash, prefix, \
             created_by, bootstrap, expires_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10) \
             RETURNING ",
            columns!(),
            ""
        ))
        .bind(t.id.0)
        .bind(t.tenant.as_str())
        .bind(&t.subject)
        .bind(&t.name)
        .bind(t.scopes.to_strings())
        .bind(&t.hash)
        .bind(&t.prefix)
        .bind(&t.created_by)
        .bind(t.bootstrap)
        .bind(t.expires_at)
        .fetch_one(&self.pool)
        .await?;
        row.into_record()
    }

    /// The token with this hash, active or not.
    pub async fn find_by_hash(&self, hash: &[u8]) -> Result<Option<TokenRecord>, StoreError> {
        let row: Option<Row> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM tokens WHERE token_hash = $1"
        ))
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        row.map(Row::into_record).transpose()
    }

    /// Tokens of `tenant`, or of every tenant when `None`, newest first, leaving out every token
    /// that holds one of `hidden` (the scopes the caller lacks: nobody sees a token that holds
    /// more than they do).
    pub async fn list(
        &self,
        tenant: Option<&TenantId>,
        hidden: &Scopes,
    ) -> Result<Vec<TokenRecord>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM tokens WHERE ($1::text IS NULL OR tenant_id = $1) AND NOT (scopes && $2) \
             ORDER BY created_at DESC, id DESC LIMIT 1000"
        ))
        .bind(tenant.map(TenantId::as_str))
        .bind(hidden.to_strings())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(Row::into_record).collect()
    }

    /// Revokes token `id` if it belongs to `tenant` (any tenant when `None`) and holds none of
    /// `hidden`, and returns it; revoking twice keeps the first revocation time. `None` when no
    /// such token is visible.
    pub async fn revoke(
        &self,
        id: TokenId,
        tenant: Option<&TenantId>,
        hidden: &Scopes,
    ) -> Result<Option<TokenRecord>, StoreError> {
        let row: Option<Row> = sqlx::query_as(concat!(
            "UPDATE tokens SET revoked_at = COALESCE(revoked_at, now()) \
             WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2) AND NOT (scopes && $3) \
             RETURNING ",
            columns!(),
            ""
        ))
        .bind(id.0)
        .bind(tenant.map(TenantId::as_str))
        .bind(hidden.to_strings())
        .fetch_optional(&self.pool)
        .await?;
        row.map(Row::into_record).transpose()
    }

    /// Whether an active bootstrap admin token exists.
    pub async fn has_active_bootstrap(&self) -> Result<bool, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM tokens WHERE bootstrap AND revoked_at IS NULL \
             AND (expires_at IS NULL OR expires_at > now())",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(n > 0)
    }

    /// Opens a web UI session bound to token `token`, and drops sessions that expired or were
    /// logged out over a day ago.
    pub async fn open_session(
        &self,
        id_hash: &[u8],
        token: TokenId,
        csrf_token: &str,
        expires_at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "WITH swept AS (DELETE FROM ui_sessions WHERE expires_at < now() - interval '1 day' \
             OR revoked_at < now() - interval '1 day') \
             INSERT INTO ui_sessions (id_hash, token_id, csrf_token, expires_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(id_hash)
        .bind(token.0)
        .bind(csrf_token)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The session with this hash and its token as it is now, ended or not.
    pub async fn find_session(&self, id_hash: &[u8]) -> Result<Option<UiSession>, StoreError> {
        let row: Option<SessionRow> = sqlx::query_as(concat!(
            "SELECT t.*, s.csrf_token, s.expires_at AS session_expires_at, \
             s.revoked_at AS session_revoked_at FROM ui_sessions s \
             JOIN LATERAL (SELECT ",
            columns!(),
            " FROM tokens WHERE id = s.token_id) t ON true WHERE s.id_hash = $1"
        ))
        .bind(id_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(UiSession {
                token: r.token.into_record()?,
                csrf_token: r.csrf_token,
                expires_at: r.session_expires_at,
                revoked_at: r.session_revoked_at,
            })
        })
        .transpose()
    }

    /// Ends the session with this hash; whether one was open.
    pub async fn close_session(&self, id_hash: &[u8]) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE ui_sessions SET revoked_at = now() WHERE id_hash = $1 AND revoked_at IS NULL",
        )
        .bind(id_hash)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }
}

/// A web UI session: a random cookie value (only its SHA-256 stored) bound to the token it was
/// opened with. It acts as that token, so revoking the token ends it.
#[derive(Clone, Debug)]
pub struct UiSession {
    pub token: TokenRecord,
    /// What the page sends back in `x-csrf-token` on state-changing calls.
    pub csrf_token: String,
    pub expires_at: OffsetDateTime,
    pub revoked_at: Option<OffsetDateTime>,
}

impl UiSession {
    /// Neither the session nor its token revoked or expired at `now`.
    pub fn is_active(&self, now: OffsetDateTime) -> bool {
        self.revoked_at.is_none() && self.expires_at > now && self.token.is_active(now)
    }
}

#[derive(sqlx::FromRow)]
struct SessionRow {
    #[sqlx(flatten)]
    token: Row,
    csrf_token: String,
    session_expires_at: OffsetDateTime,
    session_revoked_at: Option<OffsetDateTime>,
}
