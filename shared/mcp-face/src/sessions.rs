//! Where the MCP server face keeps its 2025-11-25 sessions: Postgres, so that any gateway
//! replica serves any session. rmcp keeps a live session in the memory of the replica that
//! served it; on a replica that does not know a session id, it loads the stored initialize
//! parameters from here and replays the handshake, and the client never notices. A session
//! lives `mcp.session_ttl_secs` after its last store; expired rows are ignored and swept.

use std::time::Duration;

use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
use sqlx::PgPool;

/// The Postgres session store.
#[derive(Clone, Debug)]
pub struct PgSessionStore {
    pool: PgPool,
    ttl: Duration,
}

impl PgSessionStore {
    pub fn new(pool: PgPool, ttl: Duration) -> Self {
        Self { pool, ttl }
    }

    /// Deletes expired sessions and the owners of sessions gone for a day; returns how many
    /// sessions.
    pub async fn sweep(&self) -> Result<u64, sqlx::Error> {
        let n = sqlx::query("DELETE FROM mcp_sessions WHERE expires_at < now()")
            .execute(&self.pool)
            .await?
            .rows_affected();
        sqlx::query(
            "DELETE FROM mcp_session_owners o WHERE o.created_at < now() - interval '1 day' \
             AND NOT EXISTS (SELECT 1 FROM mcp_sessions s WHERE s.id = o.id)",
        )
        .execute(&self.pool)
        .await?;
        Ok(n)
    }

    /// Sweeps every `every` until `stop`.
    pub async fn sweep_until(self, every: Duration, stop: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {
                    if let Err(e) = self.sweep().await {
                        tracing::warn!(error = %e, "mcp session sweep failed");
                    }
                }
            }
        }
    }

    /// Records who opened `session_id` (the first record wins).
    pub async fn set_owner(&self, session_id: &str, owner: &str) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO mcp_session_owners (id, owner) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
        )
        .bind(session_id)
        .bind(owner)
        .execute(&self.pool)
        .await
        .map(drop)
    }

    /// Who opened `session_id`, if anyone did.
    pub async fn owner(&self, session_id: &str) -> Result<Option<String>, sqlx::Error> {
        sqlx::query_scalar("SELECT owner FROM mcp_session_owners WHERE id = $1")
            .bind(session_id)
            .fetch_optional(&self.pool)
            .await
    }

    fn ttl_secs(&self) -> f64 {
        self.ttl.as_secs_f64()
    }
}

#[async_trait::async_trait]
impl SessionStore for PgSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let row: Option<(serde_json::Value,)> =
            sqlx::query_as("SELECT state FROM mcp_sessions WHERE id = $1 AND expires_at > now()")
                .bind(session_id)
                .fetch_optional(&self.pool)
                .await?;
        match row {
            Some((state,)) => Ok(Some(serde_json::from_value(state)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let state = serde_json::to_value(state)?;
        sqlx::query(
            "INSERT INTO mcp_sessions (id, state, expires_at) \
             VALUES ($1, $2, now() + make_interval(secs => $3)) \
             ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, expires_at = EXCLUDED.expires_at",
        )
        .bind(session_id)
        .bind(state)
        .bind(self.ttl_secs())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        sqlx::query("DELETE FROM mcp_sessions WHERE id = $1")
            .bind(session_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
