//! Shared set-up for the fleet tests: a fleet on port 0 against a database of its own.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]
#![allow(dead_code, reason = "each test binary uses a different subset")]

use serde_json::Value;
use weft_testkit::TestDb;

pub struct TestFleet {
    pub fleet: weft::Fleet,
    pub url: String,
    pub admin: String,
    pub http: reqwest::Client,
    pub db: std::sync::Arc<TestDb>,
    pub config: weft_config::Config,
}

pub fn config(db: &TestDb) -> weft_config::Config {
    let mut c = weft_config::Config::default();
    c.database.url = weft_config::Secret::new(db.url.clone());
    c.gateway.listen = "127.0.0.1:0".parse().unwrap();
    c.router.listen = "127.0.0.1:0".parse().unwrap();
    c.substrate.listen = "127.0.0.1:0".parse().unwrap();
    c.bootstrap.token_file = std::env::temp_dir().join(format!("{}-admin-token", db.name));
    // Each test its own NATS subjects/streams and Redis keys.
    c.nats.prefix = db.name.clone();
    c.redis.prefix = db.name.clone();
    c.auth.internal_jwt_secret = Some(weft_config::Secret::new(format!("secret-{}", db.name)));
    c.executor.lease_ttl_ms = 2000;
    c.executor.heartbeat_ms = 400;
    c
}

impl TestFleet {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut weft_config::Config)) -> Self {
        let db = TestDb::new().await;
        let mut c = config(&db);
        tweak(&mut c);
        let fleet = weft::Fleet::start(c.clone()).await.unwrap();
        let admin = fleet
            .admin_token
            .clone()
            .expect("a fresh database mints a bootstrap token");
        Self {
            url: fleet.url(),
            fleet,
            admin,
            http: reqwest::Client::new(),
            db: std::sync::Arc::new(db),
            config: c,
        }
    }

    /// Another fleet on the same database, NATS prefix, Redis prefix and internal key (another
    /// set of replicas of the same deployment), on its own ports.
    pub async fn join(&self, tweak: impl FnOnce(&mut weft_config::Config)) -> Self {
        let mut c = config(&self.db);
        tweak(&mut c);
        let fleet = weft::Fleet::start(c.clone()).await.unwrap();
        Self {
            url: fleet.url(),
            fleet,
            admin: self.admin.clone(),
            http: reqwest::Client::new(),
            db: self.db.clone(),
            config: c,
        }
    }

    /// Stops this fleet (its executor releases what it holds).
    pub async fn stop(self) {
        self.fleet.stop(std::time::Duration::from_secs(10)).await;
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Mints a token through the API with `creator`'s rights.
    pub async fn mint(&self, creator: &str, tenant: &str, scopes: &[&str]) -> (u16, Value) {
        self.post(
            "/v1/tokens",
            creator,
            serde_json::json!({"name": "t", "tenant": tenant, "subject": "someone", "scopes": scopes}),
        )
        .await
    }
}
