//! Postgres for weft: connecting (creating the database when it is missing), the migrations in
//! `migrations/` embedded at build time, and one narrow store per table family.

mod evaluations;
pub mod kept;
mod pauses;
mod plans;
mod recall;
mod responses;
mod runs;
mod schedules;
mod steps;
pub mod tenant_archive;
mod tokens;
pub mod usage;

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool, QueryBuilder};

pub use evaluations::{EvaluationRow, EvaluationTotals, Recorded, evaluation_totals};
pub use pauses::{
    FLEET, Marked, PauseProgress, PauseRow, ResumeRefused, Resumed, ScopeResumed, Transition,
};
pub use plans::{Approved, EvaluationCount, NewEvaluation, PlanControl, PlanRow};
pub use recall::{RecallFrom, RecalledEvent, SEARCHED_BYTES, event_text};
pub use responses::{Chain, MAX_CHAIN, MAX_CHAIN_BYTES, NewResponse, ResponseStore};
pub use runs::{
    EventRecord, Fenced, InputKind, Lease, LeaseRefused, LedgerEntry, NewLease, NewRun, RunFilter,
    RunRecord, RunStore, RunStoreError, Swept, Transcript, storable,
};
pub use schedules::{
    Accepted, ClaimedFire, Decision, DeliveryStore, DueSchedule, FinishedFire, FireRow,
    ScheduleRow, ScheduleStore,
};
pub use steps::{LedgerDone, LedgerStart, Step, StepChange, StepShape, StepWriter, WRITER_SESSION};
pub use tokens::{NewToken, TokenRecord, TokenStore, UiSession};
pub use usage::{GroupBy, UsageRow, UsageStore, UsageSummary};

/// The migrations under `migrations/`, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database name `{0}` must be 1-63 characters of a-z, 0-9 and '_'")]
    BadDatabaseName(String),
}

impl StoreError {
    /// The client-facing error: never the SQL or the driver's message.
    pub fn to_api(&self) -> weft_core::Error {
        match self {
            Self::Db(sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed) => {
                weft_core::Error::unavailable("the database is unreachable; try again shortly")
            }
            _ => weft_core::Error::internal(),
        }
    }
}

/// A pooled connection idle for longer than this is checked (one round trip) before it is handed
/// out; a busier one is not. A connection that died anyway fails its statement once and is
/// dropped from the pool.
const PING_IF_IDLE: Duration = Duration::from_secs(30);

/// Opens a transaction on `pool`, its future boxed. sqlx's `begin()` carries the whole of a
/// connection acquire (opening a connection included): ~8.6 KiB that, awaited in place, is laid
/// out inside every future above it for as long as that future lives — a run's whole task, for a
/// call that lasts a moment. Boxed, it costs one allocation while the call is made.
pub(crate) async fn begin(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    Box::pin(pool.begin()).await
}

/// Connects a pool to `url`, creating the database first when it does not exist.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, StoreError> {
    let opts = PgConnectOptions::from_str(url)?;
    ensure_database(&opts).await?;
    pool(opts, max_connections).await
}

/// [`connect`] without creating the database when it is missing (for tools that only look,
/// such as `weft doctor`): a missing one is an error [`is_missing_database`] recognises.
pub async fn connect_existing(url: &str, max_connections: u32) -> Result<PgPool, StoreError> {
    pool(PgConnectOptions::from_str(url)?, max_connections).await
}

/// Whether `e` says the database does not exist (Postgres `3D000`).
pub fn is_missing_database(e: &StoreError) -> bool {
    matches!(e, StoreError::Db(sqlx::Error::Database(d)) if d.code().as_deref() == Some("3D000"))
}

async fn pool(opts: PgConnectOptions, max_connections: u32) -> Result<PgPool, StoreError> {
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        // sqlx pings every connection it hands out by default: a round trip per acquire.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > PING_IF_IDLE {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_with(opts.log_statements(tracing::log::LevelFilter::Trace))
        .await?;
    Ok(pool)
}

/// The pool of `database` (`database.url`, `database.max_connections`), migrated when
/// `database.migrate_on_start`: what each service opens at start.
pub async fn open(database: &weft_config::DatabaseConfig) -> Result<PgPool, StoreError> {
    let pool = connect(database.url.expose(), database.max_connections).await?;
    if database.migrate_on_start {
        migrate(&pool).await?;
    }
    Ok(pool)
}

/// Applies pending migrations.
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// Creates the database named in `opts` when it is missing, via the `postgres` maintenance db.
pub async fn ensure_database(opts: &PgConnectOptions) -> Result<(), StoreError> {
    let Some(name) = opts.get_database().map(str::to_owned) else {
        return Ok(());
    };
    if !valid_db_name(&name) {
        return Err(StoreError::BadDatabaseName(name));
    }
    let mut conn = opts.clone().database("postgres").connect().await?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(&name)
        .fetch_optional(&mut conn)
        .await?;
    if exists.is_none() {
        // Identifiers cannot be bound; the name was validated above to [a-z0-9_].
        let mut q = QueryBuilder::new("CREATE DATABASE ");
        q.push(format_args!("\"{name}\""));
        match q.build().execute(&mut conn).await {
            Ok(_) => tracing::info!(database = %name, "created database"),
            // Another process created it between our check and our create.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {}
            Err(e) => return Err(e.into()),
        }
    }
    conn.close().await?;
    Ok(())
}

/// Drops a database (tests only use this, for the ones they made).
pub async fn drop_database(opts: &PgConnectOptions, name: &str) -> Result<(), StoreError> {
    if !valid_db_name(name) {
        return Err(StoreError::BadDatabaseName(name.to_owned()));
    }
    let mut conn = opts.clone().database("postgres").connect().await?;
    let mut q = QueryBuilder::new("DROP DATABASE IF EXISTS ");
    q.push(format_args!("\"{name}\" WITH (FORCE)"));
    q.build().execute(&mut conn).await?;
    conn.close().await?;
    Ok(())
}

fn valid_db_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Whether the database answers.
pub async fn ping(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::query("SELECT 1").execute(pool).await?;
    Ok(())
}
