//! A fresh, migrated database per test, dropped when the test ends.

use std::str::FromStr;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;

/// The server tests make their databases on. Override with `WEFT_TEST_DATABASE_URL`.
pub fn server_url() -> String {
    std::env::var("WEFT_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A database of its own for one test. Dropped (with its connections) on drop.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
    opts: PgConnectOptions,
}

impl TestDb {
    /// Creates `weft_t_<uuid>` and applies the migrations.
    pub async fn new() -> Self {
        let base = server_url();
        let opts =
            PgConnectOptions::from_str(&base).expect("WEFT_TEST_DATABASE_URL is a postgres url");
        let name = format!("weft_t_{}", uuid::Uuid::now_v7().simple());
        let db_opts = opts.clone().database(&name);
        weft_store::ensure_database(&db_opts)
            .await
            .expect("create the test database (is Postgres running on 127.0.0.1:5432?)");
        let url = with_database(&base, &name);
        let pool = weft_store::connect(&url, 8)
            .await
            .expect("connect to the test database");
        weft_store::migrate(&pool)
            .await
            .expect("migrate the test database");
        Self {
            name,
            url,
            pool,
            opts,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let pool = self.pool.clone();
        let opts = self.opts.clone();
        let name = self.name.clone();
        // Drop runs inside a test's runtime; do the async clean-up on a runtime of its own.
        // The pool's connections belong to the test's runtime, which is blocked in `join`
        // below: on a current-thread runtime nothing drives their sockets, so closing them
        // could wait for ever (a test hung past nextest's 2 minutes this way, twice). The
        // close is therefore bounded, and `DROP DATABASE … WITH (FORCE)` ends whatever
        // sessions are left.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(1), pool.close()).await;
                    let _ = tokio::time::timeout(
                        Duration::from_secs(30),
                        weft_store::drop_database(&opts, &name),
                    )
                    .await;
                });
            }
        })
        .join();
    }
}

/// `url` with its database path replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let scheme_end = head.find("://").map_or(0, |i| i + 3);
    let base = match head[scheme_end..].find('/') {
        Some(i) => &head[..scheme_end + i],
        None => head,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}
