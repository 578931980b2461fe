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
    pub db: TestDb,
}

pub fn config(db: &TestDb) -> weft_config::Config {
    let mut c = weft_config::Config::default();
    c.database.url = weft_config::Secret::new(db.url.clone());
    c.gateway.listen = "127.0.0.1:0".parse().unwrap();
    c.router.listen = "127.0.0.1:0".parse().unwrap();
    c.bootstrap.token_file = std::env::temp_dir().join(format!("{}-admin-token", db.name));
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
        let fleet = weft::Fleet::start(c).await.unwrap();
        let admin = fleet
            .admin_token
            .clone()
            .expect("a fresh database mints a bootstrap token");
        Self {
            url: fleet.url(),
            fleet,
            admin,
            http: reqwest::Client::new(),
            db,
        }
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
