//! Shared set-up for the fleet tests: a fleet on port 0 against a database of its own.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};
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
    c.router.usage_spool_dir = std::env::temp_dir().join("weft-test-usage-spool");
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
        self.send(reqwest::Method::POST, path, token, Some(body))
            .await
    }

    pub async fn put(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PUT, path, token, Some(body))
            .await
    }

    pub async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, token, None).await
    }

    /// One request with `token`; the status and the JSON body (`null` when not JSON).
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let r = req.send().await.unwrap();
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

// --- runs ---------------------------------------------------------------------------------------

/// A mock script: tool calls per turn, then a reply.
pub fn script(turns: Value, reply: &str) -> String {
    format!("#mock {}", json!({"turns": turns, "reply": reply}))
}

pub async fn put_agent(f: &TestFleet, token: &str, name: &str, body: Value) {
    let (status, r) = f.put(&format!("/v1/agents/{name}"), token, body).await;
    assert!(
        status == 200 || status == 201,
        "put agent {name}: {status} {r}"
    );
}

/// Every SSE frame of a run stream, until it ends: (id, event, data).
pub async fn stream(
    f: &TestFleet,
    token: &str,
    run: &str,
    query: &str,
    last_event_id: Option<&str>,
) -> Vec<(i64, String, Value)> {
    stream_until(f, token, run, query, last_event_id, "run_finished").await
}

/// The run after its stream (from `from_seq`) shows an event of `kind`.
pub async fn wait_event(f: &TestFleet, token: &str, run: &str, from_seq: i64, kind: &str) -> Value {
    let frames = stream_until(f, token, run, &format!("?from_seq={from_seq}"), None, kind).await;
    assert_eq!(frames.last().map(|(_, k, _)| k.as_str()), Some(kind));
    f.get(&format!("/v1/runs/{run}"), token).await.1
}

/// `GET /v1/runs/{run}/stream` as the admin: the response, its body unread.
pub async fn open_stream(f: &TestFleet, run: &str) -> reqwest::Response {
    f.http
        .get(format!("{}/v1/runs/{run}/stream", f.url))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap()
}

/// SSE frames until one of kind `until` (inclusive).
pub async fn stream_until(
    f: &TestFleet,
    token: &str,
    run: &str,
    query: &str,
    last_event_id: Option<&str>,
    until: &str,
) -> Vec<(i64, String, Value)> {
    let mut req = f
        .http
        .get(format!("{}/v1/runs/{run}/stream{query}", f.url))
        .bearer_auth(token);
    if let Some(l) = last_event_id {
        req = req.header("last-event-id", l);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut events = eventsource_stream::EventStream::new(r.bytes_stream());
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Some(ev) = tokio::time::timeout_at(deadline, events.next())
        .await
        .expect("the stream ended in time")
    {
        let ev = ev.unwrap();
        let data: Value = serde_json::from_str(&ev.data).unwrap();
        let done = ev.event == until;
        out.push((ev.id.parse().unwrap(), ev.event, data));
        if done {
            break;
        }
    }
    out
}

pub fn persisted(frames: &[(i64, String, Value)]) -> Vec<(i64, String)> {
    frames
        .iter()
        .filter(|(_, k, _)| k != "text_delta")
        .map(|(s, k, _)| (*s, k.clone()))
        .collect()
}

pub async fn create(f: &TestFleet, token: &str, body: Value) -> String {
    let (status, run) = f.post("/v1/runs", token, body).await;
    assert_eq!(status, 201, "{run}");
    run["run_id"].as_str().unwrap().to_owned()
}

/// Adds model `name` to the embedded mock provider `mock`.
pub fn mock_model(c: &mut weft_config::Config, name: &str, model: weft_config::MockModelConfig) {
    if let Some(weft_config::ProviderConfig::Mock(m)) = c.router.providers.get_mut("mock") {
        m.models.insert(name.into(), model);
    }
}

/// Adds a mock model `slow` whose answer starts at once and then stalls for a minute between
/// words: a run on it is held by an executor, mid-stream, until it is cancelled.
pub fn stalling_model(c: &mut weft_config::Config) {
    mock_model(
        c,
        "slow",
        weft_config::MockModelConfig {
            token_delay_ms: 60_000,
            ..Default::default()
        },
    );
}

/// Adds a mock provider `mock` model `slow` with the given latency.
pub fn slow_model(c: &mut weft_config::Config, latency_ms: u64) {
    mock_model(
        c,
        "slow",
        weft_config::MockModelConfig {
            latency_ms,
            ..Default::default()
        },
    );
}

/// Agent `boss` fans out `n` runs of agent `worker` (model `mock/slow`, see [`slow_model`]) with
/// at most `at_once` children at a time. Returns the parent's run id and stream frames, and the
/// children (as `GET /v1/runs` lists them), after the parent finished.
pub async fn fan_out(
    f: &TestFleet,
    n: usize,
    at_once: u32,
) -> (String, Vec<(i64, String, Value)>, Vec<Value>) {
    put_agent(f, &f.admin, "worker", json!({"model": "mock/slow"})).await;
    put_agent(
        f,
        &f.admin,
        "boss",
        json!({"model": "mock-1", "tools": ["Agent"], "max_concurrent_children": at_once}),
    )
    .await;
    let runs: Vec<Value> = (0..n)
        .map(|i| json!({"agent": "worker", "input": format!("job {i}")}))
        .collect();
    let input = script(
        json!([[{"name": "Agent", "input": {"op": "parallel_spawn", "runs": runs}}]]),
        "collected",
    );
    let run = create(f, &f.admin, json!({"agent": "boss", "input": input})).await;
    let frames = stream(f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let (_, list) = f.get("/v1/runs?agent=worker&limit=50", &f.admin).await;
    let children = list["runs"].as_array().unwrap().clone();
    assert_eq!(children.len(), n);
    (run, frames, children)
}

/// The most of `runs` alive at once, each alive from its timestamp `from` to `finished_at`.
pub fn peak_overlap(runs: &[Value], from: &str) -> i32 {
    let t = |v: &Value| {
        time::OffsetDateTime::parse(
            v.as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    let mut edges = Vec::new();
    for r in runs {
        edges.push((t(&r[from]), 1));
        edges.push((t(&r["finished_at"]), -1));
    }
    edges.sort();
    let (mut live, mut peak) = (0, 0);
    for (_, d) in edges {
        live += d;
        peak = peak.max(live);
    }
    peak
}

/// A child process killed when dropped, so a failing test leaves nothing behind.
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `weft` command of `f`'s deployment: its NATS and Redis prefixes and internal key, logs at
/// `warn` on the test's stderr.
pub fn weft_command(f: &TestFleet) -> std::process::Command {
    let c = &f.config;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.env("WEFT_NATS__PREFIX", &c.nats.prefix)
        .env("WEFT_REDIS__PREFIX", &c.redis.prefix)
        .env(
            "WEFT_AUTH__INTERNAL_JWT_SECRET",
            c.auth.internal_jwt_secret.as_ref().unwrap().expose(),
        )
        .env("WEFT_TELEMETRY__LOG_LEVEL", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    cmd
}

/// A `weft executor` process working for `f` (leases of 2 s), with `extra` environment on top
/// (e.g. `WEFT_EXECUTOR__MCP_BRIDGE_URL`).
pub fn executor_process(f: &TestFleet, extra: &[(&str, String)]) -> Proc {
    let c = &f.config;
    let mut cmd = weft_command(f);
    cmd.arg("executor")
        .env("WEFT_DATABASE__URL", c.database.url.expose())
        .env(
            "WEFT_EXECUTOR__ROUTER_URL",
            format!("http://{}", f.fleet.router_addr),
        )
        .env(
            "WEFT_EXECUTOR__SUBSTRATE_URL",
            format!("http://{}", f.fleet.substrate_addr),
        )
        .env("WEFT_EXECUTOR__LEASE_TTL_MS", "2000")
        .env("WEFT_EXECUTOR__HEARTBEAT_MS", "400");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    Proc(cmd.spawn().unwrap())
}

/// A `weft up` process of `f`'s deployment (its database, prefixes and internal key) serving
/// the gateway on `port`, with `env` on top (e.g. `WEFT_EXECUTOR__EMBEDDED=false`,
/// `WEFT_FAULT_ABORT_AT`). Its bootstrap token file is its own.
pub fn up_process(f: &TestFleet, port: u16, env: &[(&str, &str)]) -> Proc {
    let c = &f.config;
    let dir = std::env::temp_dir().join(format!("{}-up-{port}", f.db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = weft_command(f);
    cmd.args(["up", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--router-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--substrate-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--database-url", c.database.url.expose()])
        .env("WEFT_INGRESS__EMBEDDED", "false")
        .env("WEFT_BOOTSTRAP__TOKEN_FILE", dir.join("admin-token"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    Proc(cmd.spawn().unwrap())
}

/// Defines agent `worker` (`mock-1` with `Context`), starts a `weft up` of `f`'s deployment
/// with `env` and `WEFT_FAULT_ABORT_AT=run_inserted`, asks it for a run with one tool call, and
/// checks that the process died before answering, right after committing the run.
pub async fn run_on_a_process_that_dies_at_insert(f: &TestFleet, env: &[(&str, &str)]) {
    put_agent(
        f,
        &f.admin,
        "worker",
        json!({"model": "mock-1", "tools": ["Context"]}),
    )
    .await;
    let port = free_port();
    let mut env = env.to_vec();
    env.push(("WEFT_FAULT_ABORT_AT", "run_inserted"));
    let mut dying = up_process(f, port, &env);
    wait_for_port(port).await;
    let input = script(
        json!([[{"name": "Context", "input": {"op": "time"}}]]),
        "done",
    );
    let sent = f
        .http
        .post(format!("http://127.0.0.1:{port}/v1/runs"))
        .bearer_auth(&f.admin)
        .json(&json!({"agent": "worker", "input": input}))
        .send()
        .await;
    assert!(sent.is_err(), "the process died before answering: {sent:?}");
    let status = dying.0.wait().unwrap();
    assert!(!status.success(), "the process aborted: {status:?}");
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until a process this test started listens on `port` (at most 60 s).
pub async fn wait_for_port(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listened on {port}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for the run's `run_finished` and returns the run.
pub async fn finished(f: &TestFleet, run: &str) -> Value {
    finished_as(f, &f.admin, run).await
}

/// [`finished`], read with `token`.
pub async fn finished_as(f: &TestFleet, token: &str, run: &str) -> Value {
    // The run's stream ends at its `run_finished`, wherever it finished.
    follow_until(f, token, run, &["run_finished"]).await;
    f.get(&format!("/v1/runs/{run}"), token).await.1
}

/// Follows the run's stream (from its start) until an event of one of `kinds`; its kind.
pub async fn follow_until(f: &TestFleet, token: &str, run: &str, kinds: &[&str]) -> String {
    let r = f
        .http
        .get(format!("{}/v1/runs/{run}/stream", f.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut events = eventsource_stream::EventStream::new(r.bytes_stream());
    tokio::time::timeout(Duration::from_secs(240), async {
        while let Some(ev) = futures::StreamExt::next(&mut events).await {
            let ev = ev.unwrap();
            if kinds.contains(&ev.event.as_str()) {
                return ev.event;
            }
        }
        panic!("the stream of {run} ended before any of {kinds:?}");
    })
    .await
    .expect("the run got there in time")
}

/// Every event of the run, in seq order.
pub async fn all_events(f: &TestFleet, run: &str) -> Vec<Value> {
    all_events_as(f, &f.admin, run).await
}

/// [`all_events`], read with `token`.
pub async fn all_events_as(f: &TestFleet, token: &str, run: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut from = 1;
    loop {
        let (s, page) = f
            .get(
                &format!("/v1/runs/{run}/events?from_seq={from}&limit=1000"),
                token,
            )
            .await;
        assert_eq!(s, 200, "{page}");
        let data = page["data"].as_array().unwrap().clone();
        if data.is_empty() {
            return out;
        }
        from = data.last().unwrap()["seq"].as_i64().unwrap() + 1;
        out.extend(data);
    }
}

/// The lease owners the run's events were written under (one per lease).
pub async fn owners(f: &TestFleet, run: &str) -> Vec<String> {
    let pool = sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap();
    let owner: Option<String> = sqlx::query_scalar("SELECT lease_owner FROM runs WHERE id = $1")
        .bind(uuid::Uuid::parse_str(run).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    owner.into_iter().collect()
}

/// SIGKILLs whichever of `a` and `b` holds `run`; the victim's pid and the survivor.
pub async fn kill_holder(f: &TestFleet, run: &str, a: Proc, b: Proc) -> (u32, Proc) {
    let holder = owners(f, run).await;
    let owner = holder.first().expect("an executor holds the run");
    let (mut victim, survivor) = if owner.starts_with(&format!("executor-{}-", a.0.id())) {
        (a, b)
    } else {
        (b, a)
    };
    let pid = victim.0.id();
    assert!(owner.starts_with(&format!("executor-{pid}-")), "{owner}");
    victim.0.kill().unwrap();
    victim.0.wait().unwrap();
    (pid, survivor)
}
