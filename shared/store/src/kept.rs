//! Connections kept out of the pool between statements, for a store's busiest single statements.
//!
//! sqlx tests every connection given back to its pool: a task of its own and a round trip to
//! Postgres (a `Sync`, then a wait for `ReadyForQuery`) per checkout, which cannot be turned off.
//! The test exists because a query future dropped mid-statement leaves its connection in an
//! unknown state. [`Kept`] knows better than the pool whether that happened: [`Kept::run`] keeps a
//! connection only once its statements returned their whole answers. One dropped any other way
//! (the future cancelled, or a statement failed) is closed.
//!
//! A `Kept` holds at most `cap` connections of its own, checked out of the pool once and then
//! detached, so the pool may open up to `cap` more than its `max_connections` beside them; the
//! pool's idle timeout, maximum lifetime and `close()` do not reach them (they close when the
//! `Kept` is dropped). When none is idle, the statements run on an ordinary pool connection, kept
//! afterwards if there is room. Like the pool, a kept connection idle for longer than [`PING_IF_IDLE`] is
//! tested before it is used again.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use sqlx::pool::PoolConnection;
use sqlx::{Connection as _, PgConnection, PgPool, Postgres};

use crate::PING_IF_IDLE;

/// Connections kept by one store: see the module documentation.
#[derive(Debug)]
pub struct Kept {
    pool: PgPool,
    cap: usize,
    /// Idle kept connections, each with when it was last given back.
    idle: Mutex<Vec<(PgConnection, Instant)>>,
    /// Kept connections open, idle or in use.
    open: AtomicUsize,
}

enum Held<'a> {
    /// A kept connection, and its place among the `open` ones.
    Kept(PgConnection, Place<'a>),
    Pooled(PoolConnection<Postgres>),
}

/// One of a [`Kept`]'s `open` places, given up when dropped.
struct Place<'a>(&'a Kept);

impl Place<'_> {
    /// The connection stays open, idle in the store: its place stays taken.
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection for one statement, from [`Kept::get`]. Dropped without
/// [`finished`](Self::finished), a kept connection is closed: its socket is dropped, and Postgres
/// ends the session once it reads or writes the socket again. An open transaction is then rolled
/// back; a single statement already sent may still commit (Postgres notices the closed socket
/// only when it writes the answer), as with a pool connection. A pool connection dropped so goes
/// back through the pool's own test.
pub(crate) struct KeptConn<'a> {
    held: Held<'a>,
    home: &'a Kept,
}

impl Kept {
    /// Keeps up to `cap` connections of `pool` between statements.
    pub fn new(pool: PgPool, cap: usize) -> Self {
        Self {
            pool,
            cap,
            idle: Mutex::new(Vec::new()),
            open: AtomicUsize::new(0),
        }
    }

    fn pop_idle(&self) -> Option<(PgConnection, Instant)> {
        self.idle.lock().ok()?.pop()
    }

    /// An idle kept connection, or else one from the pool.
    pub(crate) async fn get(&self) -> Result<KeptConn<'_>, sqlx::Error> {
        while let Some((mut conn, since)) = self.pop_idle() {
            let place = Place(self);
            if since.elapsed() > PING_IF_IDLE && conn.ping().await.is_err() {
                continue;
            }
            return Ok(KeptConn {
                held: Held::Kept(conn, place),
                home: self,
            });
        }
        let conn = self.pool.acquire().await?;
        Ok(KeptConn {
            held: Held::Pooled(conn),
            home: self,
        })
    }

    /// Runs `statements` on a kept connection (or a pool one) and keeps the connection when they
    /// succeeded; see the module documentation. A statement Postgres refused ([`answered`])
    /// leaves the connection ready for the next: `statements` may return that as part of its
    /// `Ok` to keep it.
    pub async fn run<T, E: From<sqlx::Error>>(
        &self,
        statements: impl AsyncFnOnce(&mut PgConnection) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.get().await?;
        let out = statements(&mut conn).await?;
        conn.finished();
        Ok(out)
    }

    /// Kept connections open now (idle or in use).
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// Whether `e` is Postgres's own refusal of a statement (an error it answered, after which the
/// connection is ready for the next statement), not a failure of the connection: a database
/// error outside SQLSTATE classes 08 (connection exception) and 57 (operator intervention, e.g.
/// an administrator's shutdown, after which the server closes the socket).
pub fn answered(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => !d
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57")),
        _ => false,
    }
}

impl KeptConn<'_> {
    /// The statement returned its whole answer: the connection is ready for the next one.
    pub(crate) fn finished(self) {
        let home = self.home;
        let (conn, place) = match self.held {
            Held::Kept(conn, place) => (conn, place),
            Held::Pooled(conn) => {
                // Take a place among the kept, or give it back to the pool as usual.
                let taken = home
                    .open
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        (n < home.cap).then_some(n + 1)
                    });
                if taken.is_err() {
                    return;
                }
                (conn.detach(), Place(home))
            }
        };
        if let Ok(mut idle) = home.idle.lock() {
            idle.push((conn, Instant::now()));
            place.keep();
        }
    }
}

impl Deref for KeptConn<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match &self.held {
            Held::Kept(c, _) => c,
            Held::Pooled(c) => c,
        }
    }
}

impl DerefMut for KeptConn<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match &mut self.held {
            Held::Kept(c, _) => c,
            Held::Pooled(c) => c,
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is how a test fails"
)]
mod tests {
    use std::time::Duration;

    use weft_testkit::TestDb;

    use super::*;

    async fn pid(conn: &mut PgConnection) -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(conn)
            .await
            .unwrap()
    }

    async fn session_gone(pool: &PgPool, pid: i32) {
        for _ in 0..1000 {
            let alive: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
                    .bind(pid)
                    .fetch_one(pool)
                    .await
                    .unwrap();
            if !alive {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the session of backend {pid} is still open");
    }

    /// A test database and a `Kept` of 4 holding one connection: its backend's pid.
    async fn one_kept() -> (TestDb, Kept, i32) {
        let db = TestDb::new().await;
        let kept = Kept::new(db.pool.clone(), 4);
        let mut c = kept.get().await.unwrap();
        let first = pid(&mut c).await;
        c.finished();
        (db, kept, first)
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_finished_connection_is_kept_and_used_again_without_the_pool() {
        let (_db, kept, first) = one_kept().await;
        assert_eq!(kept.open(), 1);
        for _ in 0..3 {
            let mut c = kept.get().await.unwrap();
            assert_eq!(pid(&mut c).await, first, "the kept connection is reused");
            c.finished();
        }
        assert_eq!(kept.open(), 1);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_statement_cancelled_midway_closes_its_kept_connection() {
        let (db, kept, first) = one_kept().await;

        // Inside a transaction, so the session's end must roll it back.
        let mut c = kept.get().await.unwrap();
        sqlx::query("BEGIN").execute(&mut *c).await.unwrap();
        sqlx::query("CREATE TABLE left_behind (x int)")
            .execute(&mut *c)
            .await
            .unwrap();
        // Postgres notices the closed socket only when the sleep ends and it writes the answer.
        let slow = sqlx::query("SELECT pg_sleep(2)").execute(&mut *c);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), slow)
                .await
                .is_err(),
            "the sleep ends only when cancelled"
        );
        drop(c);
        assert_eq!(kept.open(), 0, "the cancelled connection is not kept");
        session_gone(&db.pool, first).await;

        let mut c = kept.get().await.unwrap();
        assert_ne!(pid(&mut c).await, first);
        let left: Option<String> = sqlx::query_scalar("SELECT to_regclass('left_behind')::text")
            .fetch_one(&mut *c)
            .await
            .unwrap();
        assert_eq!(left, None, "the cancelled transaction was rolled back");
        c.finished();
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_failed_statement_closes_its_kept_connection() {
        let (db, kept, first) = one_kept().await;
        let mut c = kept.get().await.unwrap();
        let failed = sqlx::query("SELECT 1 / 0").execute(&mut *c).await;
        assert!(failed.is_err());
        drop(c);
        assert_eq!(kept.open(), 0);
        session_gone(&db.pool, first).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn no_more_than_cap_connections_are_kept() {
        let db = TestDb::new().await;
        let kept = Kept::new(db.pool.clone(), 2);
        let mut held = Vec::new();
        for _ in 0..5 {
            held.push(kept.get().await.unwrap());
        }
        for c in held {
            c.finished();
        }
        assert_eq!(kept.open(), 2);
        // Two kept, then the pool's: all usable.
        let (mut a, mut b, mut c) = (
            kept.get().await.unwrap(),
            kept.get().await.unwrap(),
            kept.get().await.unwrap(),
        );
        let pids = [pid(&mut a).await, pid(&mut b).await, pid(&mut c).await];
        assert!(pids[0] != pids[1] && pids[1] != pids[2] && pids[0] != pids[2]);
        a.finished();
        b.finished();
        c.finished();
        assert_eq!(kept.open(), 2);
    }
}
