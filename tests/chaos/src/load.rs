//! The steady mixed load: chat (plain and streamed), runs with tools and sub-runs (memory
//! writes, channel publishes, an effectful HTTP POST), interactive runs answered through their
//! interruption, cancelled runs, and a prober that reads tenant A's runs as tenant B through
//! every gateway replica. Every worker records what it was told, for the checker.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use weft_core::Scope;

use crate::api::Api;

pub const TENANT_A: &str = "acme";
pub const TENANT_B: &str = "blue";
/// The tenant with a request quota (`router.tenants.quota.limits`), loaded past it.
pub const TENANT_Q: &str = "quota";
/// Its `requests_per_minute`.
pub const QUOTA_RPM: u64 = 120;
pub const CHANNEL: &str = "chaos.events";
/// The channel the REST writer publishes to (each publish with an `op_key`).
pub const REST_CHANNEL: &str = "chaos.rest";
/// The environment variable the fleet reads the webhook's signing secret from.
pub const WEBHOOK_SECRET_ENV: &str = "WEFT_WEBHOOK_ACME__CHAOS";
pub const WEBHOOK_SECRET: &str = "chaos-webhook-signing-secret";

/// Counters and records shared by the workers.
#[derive(Default)]
pub struct Tally {
    pub chat_attempts: AtomicU64,
    pub chat_ok: AtomicU64,
    pub stream_ok: AtomicU64,
    pub runs_attempted: AtomicU64,
    pub interactive_answered: AtomicU64,
    pub cancels_sent: AtomicU64,
    pub probes: AtomicU64,
    /// Tenant B's run lists read (each checked for tenant A's runs).
    pub list_probes: AtomicU64,
    /// Status codes of refused or failed calls, by "<what> <status> <code>".
    pub refusals: Mutex<BTreeMap<String, u64>>,
    /// Every run the fleet accepted (201), by id, with its kind and the `n` of its script.
    pub accepted: Mutex<Vec<Accepted>>,
    /// Webhook deliveries accepted (202, or 200 replayed), by delivery id → the run ids answered.
    pub deliveries: Mutex<BTreeMap<String, Vec<String>>>,
    pub deliveries_sent: AtomicU64,
    /// Violations seen while the load ran (isolation, a stream's shape).
    pub violations: Mutex<Vec<String>>,
    /// The quota tenant's chat calls: (sent, answered, status), times in Unix milliseconds.
    pub quota_calls: Mutex<Vec<(u64, u64, u16)>>,
    /// REST writes acknowledged: memory keys `r<n>` set to n, and publishes of `{"rest": n}`.
    pub rest_acked: Mutex<Vec<u64>>,
    /// REST writes tried (acknowledged or not).
    pub rest_tried: Mutex<Vec<u64>>,
    /// Increments of the `hits` counter acknowledged, and sent.
    pub incr_acked: AtomicU64,
    pub incr_sent: AtomicU64,
}

#[derive(Clone, Debug)]
pub struct Accepted {
    pub id: String,
    pub kind: &'static str,
    pub n: u64,
}

impl Tally {
    pub fn refused(&self, what: &str, status: u16, code: &str) {
        if let Ok(mut m) = self.refusals.lock() {
            *m.entry(format!("{what} {status} {code}")).or_default() += 1;
        }
    }

    pub fn violation(&self, v: String) {
        if let Ok(mut list) = self.violations.lock() {
            list.push(v);
        }
    }

    fn accept(&self, id: String, kind: &'static str, n: u64) {
        if let Ok(mut list) = self.accepted.lock() {
            list.push(Accepted { id, kind, n });
        }
    }

    pub fn accepted(&self) -> Vec<Accepted> {
        self.accepted.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// The receiving end of the runs' effectful `HTTP` POSTs: it counts each body it is sent, so
/// that a POST made twice shows up. `POST /slow?ms=N` answers after N ms.
pub struct Echo {
    /// Where it listens (the fleet's host address).
    pub addr: std::net::SocketAddr,
    pub seen: std::sync::Arc<Mutex<HashMap<String, u32>>>,
}

impl Echo {
    pub async fn start(ip: std::net::IpAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let seen = std::sync::Arc::new(Mutex::new(HashMap::new()));
        let counted = std::sync::Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let counted = std::sync::Arc::clone(&counted);
                tokio::spawn(async move {
                    let mut buf = Vec::with_capacity(4096);
                    let mut chunk = [0u8; 4096];
                    // Read the head and a body of content-length bytes.
                    let (head, body) = loop {
                        let Ok(n) = sock.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            let body =
                                String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                            break (head, body);
                        }
                    };
                    let ms = head
                        .split("ms=")
                        .nth(1)
                        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                        .and_then(|d| d.parse::<u64>().ok())
                        .unwrap_or(0);
                    if head.starts_with("post")
                        && let Ok(mut m) = counted.lock()
                    {
                        *m.entry(body).or_default() += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    let _ = sock
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                        .await;
                });
            }
        });
        Ok(Self { addr, seen })
    }
}

/// The tokens and definitions the load runs with.
pub struct Setup {
    pub a: Api,
    pub b: Api,
    pub chat: Api,
    /// A chat token of the quota tenant.
    pub quota: Api,
    pub admin: Api,
    /// The echo server the runs' HTTP tool posts to (`host:port`).
    pub echo: std::net::SocketAddr,
}

async fn token(
    admin: &Api,
    tenant: &str,
    subject: &str,
    scopes: &[&str],
) -> anyhow::Result<String> {
    let body = json!({"name": subject, "tenant": tenant, "subject": subject, "scopes": scopes});
    let ans = must(&format!("token for {tenant}/{subject}"), async || {
        admin.post("/v1/tokens", &body).await
    })
    .await?;
    ans["token"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("token for {tenant}/{subject}: {ans}"))
}

/// Retries a setup call through faults-free start-up hiccups (a replica still warming up).
async fn must(what: &str, mut f: impl AsyncFnMut() -> crate::api::Answer) -> anyhow::Result<Value> {
    let mut last = None;
    for _ in 0..50 {
        let a = f().await;
        if a.ok() {
            return Ok(a.body);
        }
        last = Some(a);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("{what}: {last:?}")
}

pub async fn prepare(
    gateway: &str,
    admin_token: &str,
    echo: std::net::SocketAddr,
) -> anyhow::Result<Setup> {
    let echo_host = echo.ip().to_string();
    let admin = Api::new(gateway, admin_token)?;
    // Every scope a tenant's token can hold (`admin` is the operator's).
    let all: Vec<&str> = Scope::ALL
        .iter()
        .filter(|s| **s != Scope::Admin)
        .map(|s| s.as_str())
        .collect();
    let a = admin.with(None, Some(&token(&admin, TENANT_A, "chaos-a", &all).await?));
    let b = admin.with(None, Some(&token(&admin, TENANT_B, "chaos-b", &all).await?));
    let chat = admin.with(
        None,
        Some(&token(&admin, TENANT_A, "chaos-chat", &["llm:call"]).await?),
    );
    let quota = admin.with(
        None,
        Some(&token(&admin, TENANT_Q, "chaos-quota", &["llm:call"]).await?),
    );
    for t in [&a, &b] {
        // Room for an hour of messages: the checker reads every one of them back.
        for channel in [CHANNEL, REST_CHANNEL] {
            must("channel", async || {
                t.put(
                    &format!("/v1/channels/{channel}"),
                    &json!({"scope": "tenant", "max_messages": 100_000}),
                )
                .await
            })
            .await?;
        }
        must("leaf agent", async || {
            t.put(
                "/v1/agents/leaf",
                &json!({"model": "mock-1", "description": "answers"}),
            )
            .await
        })
        .await?;
        must("worker agent", async || {
            t.put(
                "/v1/agents/worker",
                &json!({
                    "model": "mock-1",
                    "description": "writes memory, publishes, spawns a child, posts",
                    "tools": ["Memory", "Channel", "Agent", "HTTP", "Interruption"],
                    "memory_scopes": ["tenant"],
                    "channels": {"publish": [CHANNEL], "subscribe": [CHANNEL]},
                    "allowed_hosts": [echo_host],
                    "max_iterations": 8
                }),
            )
            .await
        })
        .await?;
    }
    // A schedule firing every 2 s, and a signed webhook, both starting `leaf` runs.
    must("schedule", async || {
        a.put(
            "/v1/schedules/tick",
            &json!({"cron": "*/2 * * * * *", "timezone": "UTC", "agent": "leaf", "input": "tick",
                    "enabled": true, "overlap": "allow", "catch_up_max": 100}),
        )
        .await
    })
    .await?;
    must("webhook", async || {
        a.put(
            "/v1/webhooks/hook",
            &json!({"agent": "leaf", "signature": "hmac-sha256", "secret_env": WEBHOOK_SECRET_ENV,
                    "header": "x-signature", "delivery_id_header": "x-delivery",
                    "mapping": {"input": "$.text"}, "rate_limit": {"per_minute": 100000, "burst": 10000}}),
        )
        .await
    })
    .await?;
    Ok(Setup {
        a,
        b,
        chat,
        quota,
        admin,
        echo,
    })
}

/// The script of a worker run `n`: memory write and publish, a child, an effectful POST.
fn worker_script(n: u64, echo: std::net::SocketAddr, slow_ms: u64) -> String {
    let script = json!({
        "turns": [
            [
                {"name": "Memory", "input": {"op": "set", "scope": "tenant", "key": format!("k{n}"), "value": n}},
                {"name": "Channel", "input": {"op": "publish", "channel": CHANNEL, "payload": {"n": n}}}
            ],
            [{"name": "Agent", "input": {"op": "spawn", "agent": "leaf", "input": format!("child of {n}")}}],
            [{"name": "HTTP", "input": {"method": "POST", "url": format!("http://{echo}/slow?ms={slow_ms}"), "body": format!("post-{n}")}}]
        ],
        "reply": format!("done {n}")
    });
    format!("run {n}\n#mock {script}")
}

fn interactive_script(n: u64) -> String {
    let script = json!({
        "turns": [[{"name": "Interruption", "input": {"op": "ask", "question": format!("go on with {n}?")}}]],
        "reply": format!("answered {n}")
    });
    format!("ask {n}\n#mock {script}")
}

const TERMINAL: [&str; 3] = ["succeeded", "failed", "cancelled"];

/// Starts a run, retrying a call that got no answer with the same idempotency key (as a real
/// client does); returns the run id once accepted.
async fn start_run(
    api: &Api,
    tally: &Tally,
    body: Value,
    kind: &'static str,
    n: u64,
    until: Instant,
) -> Option<String> {
    tally.runs_attempted.fetch_add(1, Ordering::Relaxed);
    let mut body = body;
    body["idempotency_key"] = json!(format!("{kind}-{n}"));
    while Instant::now() < until {
        let ans = api.post("/v1/runs", &body).await;
        if ans.status == 201 || ans.status == 200 {
            let id = ans.body["run_id"].as_str()?.to_owned();
            tally.accept(id.clone(), kind, n);
            return Some(id);
        }
        tally.refused("POST /v1/runs", ans.status, ans.code());
        if ans.status != 0 && ans.status != 503 && ans.status != 429 && ans.status != 502 {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// Polls a run until it ends (or `until`); returns its last status.
async fn wait_end(api: &Api, id: &str, until: Instant) -> String {
    let mut status = String::new();
    while Instant::now() < until {
        let ans = api.get(&format!("/v1/runs/{id}")).await;
        if let Some(s) = ans.body["status"].as_str() {
            status = s.to_owned();
            if TERMINAL.contains(&s) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    status
}

static N: AtomicU64 = AtomicU64::new(1);

fn next_n() -> u64 {
    N.fetch_add(1, Ordering::Relaxed)
}

/// A worker making runs with tools and a sub-run, one after another.
pub async fn runs_worker(s: &Setup, tally: &Tally, stop: Instant) {
    while Instant::now() < stop {
        let n = next_n();
        // The POST takes 1 s, so that a killed executor often dies in the middle of one.
        let body = json!({"agent": "worker", "input": worker_script(n, s.echo, 1000)});
        if let Some(id) = start_run(&s.a, tally, body, "worker", n, stop).await {
            wait_end(&s.a, &id, stop).await;
        }
    }
}

/// A worker making interactive runs and answering their interruption. A run started before
/// `stop` is answered until `finish`: a parked run is waiting for its user, not lost.
pub async fn interactive_worker(s: &Setup, tally: &Tally, stop: Instant, finish: Instant) {
    while Instant::now() < stop {
        let n = next_n();
        let body = json!({"agent": "worker", "input": interactive_script(n)});
        let Some(id) = start_run(&s.a, tally, body, "interactive", n, stop).await else {
            continue;
        };
        // Wait for the ask, then answer it (again if an answer got no reply).
        while Instant::now() < finish {
            let run = s.a.get(&format!("/v1/runs/{id}")).await;
            let status = run.body["status"].as_str().unwrap_or("");
            if TERMINAL.contains(&status) {
                break;
            }
            if status == "awaiting_input" {
                let events = s.a.get(&format!("/v1/runs/{id}/events?limit=200")).await;
                let iid = events.body["events"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|e| e["kind"] == "interruption")
                    .filter_map(|e| e["data"]["id"].as_str())
                    .next_back()
                    .map(str::to_owned);
                if let Some(iid) = iid {
                    let ans =
                        s.a.post(
                            &format!("/v1/runs/{id}/interrupts/{iid}"),
                            &json!({"answer": "yes"}),
                        )
                        .await;
                    if ans.ok() {
                        tally.interactive_answered.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tally.refused("POST interrupts", ans.status, ans.code());
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// A worker making slow runs and cancelling them.
pub async fn cancel_worker(s: &Setup, tally: &Tally, stop: Instant) {
    while Instant::now() < stop {
        let n = next_n();
        let body = json!({"agent": "worker", "input": worker_script(n, s.echo, 2000)});
        let Some(id) = start_run(&s.a, tally, body, "cancelled", n, stop).await else {
            continue;
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
        while Instant::now() < stop {
            let ans =
                s.a.post(
                    &format!("/v1/runs/{id}/cancel"),
                    &json!({"reason": "chaos"}),
                )
                .await;
            if ans.ok() || ans.status == 409 {
                tally.cancels_sent.fetch_add(1, Ordering::Relaxed);
                break;
            }
            tally.refused("POST cancel", ans.status, ans.code());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        wait_end(&s.a, &id, stop).await;
    }
}

/// A worker calling the OpenAI door, plain and streamed in turn, one call every `every` at
/// most (so that chat, which costs far less than a run, does not crowd the runs out).
pub async fn chat_worker(s: &Setup, tally: &Tally, stop: Instant, every: Duration) {
    let mut i = 0u64;
    let mut next = Instant::now();
    while Instant::now() < stop {
        tokio::time::sleep_until(next.into()).await;
        next += every;
        i += 1;
        let stream = i.is_multiple_of(2);
        let body = json!({
            "model": "mock-1", "stream": stream,
            "messages": [{"role": "user", "content": format!("chat {i}")}]
        });
        tally.chat_attempts.fetch_add(1, Ordering::Relaxed);
        if stream {
            let (status, text) = s.chat.post_stream("/v1/chat/completions", &body).await;
            if status == 200 && text.trim_end().ends_with("data: [DONE]") {
                tally.chat_ok.fetch_add(1, Ordering::Relaxed);
                tally.stream_ok.fetch_add(1, Ordering::Relaxed);
            } else {
                tally.refused("chat stream", status, "");
            }
        } else {
            let ans = s.chat.post("/v1/chat/completions", &body).await;
            if ans.status == 200 {
                tally.chat_ok.fetch_add(1, Ordering::Relaxed);
            } else {
                tally.refused("chat", ans.status, ans.code());
            }
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The quota tenant's chat calls, at `per_sec` (twice its `requests_per_minute`), each recorded
/// with when it was sent and answered: the checker counts the admitted ones per minute window.
pub async fn quota_worker(s: &Setup, tally: &Tally, stop: Instant, per_sec: f64) {
    let every = Duration::from_secs_f64(1.0 / per_sec.max(0.1));
    let mut next = Instant::now();
    let mut i = 0u64;
    while Instant::now() < stop {
        tokio::time::sleep_until(next.into()).await;
        next += every;
        i += 1;
        let body = json!({
            "model": "mock-1",
            "messages": [{"role": "user", "content": format!("quota {i}")}]
        });
        let sent = unix_ms();
        let ans = s.quota.post("/v1/chat/completions", &body).await;
        let answered = unix_ms();
        if let Ok(mut calls) = tally.quota_calls.lock() {
            calls.push((sent, answered, ans.status));
        }
        if ans.status != 200 && ans.status != 429 {
            tally.refused("quota chat", ans.status, ans.code());
        }
    }
}

/// Memory and channel writes through the REST API, as an application makes them: `PUT` of key
/// `r<n>` = n, a publish of `{"rest": n}` with `op_key` `rest-<n>` (both retried until a 2xx
/// or the end of the load), and an increment of `hits` (not idempotent: sent once, never
/// retried).
pub async fn rest_writer(s: &Setup, tally: &Tally, stop: Instant) {
    while Instant::now() < stop {
        let n = next_n();
        if let Ok(mut t) = tally.rest_tried.lock() {
            t.push(n);
        }
        let mut done = (false, false);
        while !(done.0 && done.1) && Instant::now() < stop {
            if !done.0 {
                let ans =
                    s.a.put(
                        &format!("/v1/memory/tenant/{TENANT_A}/r{n}"),
                        &json!({"value": n}),
                    )
                    .await;
                done.0 = ans.ok();
                if !done.0 {
                    tally.refused("PUT memory", ans.status, ans.code());
                }
            }
            if !done.1 {
                let ans =
                    s.a.post(
                        &format!("/v1/channels/{REST_CHANNEL}/publish"),
                        &json!({"payload": {"rest": n}, "op_key": format!("rest-{n}")}),
                    )
                    .await;
                done.1 = ans.ok();
                if !done.1 {
                    tally.refused("POST publish", ans.status, ans.code());
                }
            }
            if !(done.0 && done.1) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        if done.0
            && done.1
            && let Ok(mut acked) = tally.rest_acked.lock()
        {
            acked.push(n);
        }
        tally.incr_sent.fetch_add(1, Ordering::Relaxed);
        let ans =
            s.a.post(
                &format!("/v1/memory/tenant/{TENANT_A}/hits/incr"),
                &json!({"by": 1}),
            )
            .await;
        if ans.ok() {
            tally.incr_acked.fetch_add(1, Ordering::Relaxed);
        } else {
            tally.refused("POST incr", ans.status, ans.code());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Tenant B reads tenant A's runs through every gateway replica: each must be a 404, and B's
/// own list must hold none of them.
pub async fn isolation_prober(s: &Setup, replicas: &[String], tally: &Tally, stop: Instant) {
    let mut i = 0usize;
    while Instant::now() < stop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let accepted = tally.accepted();
        if accepted.is_empty() {
            continue;
        }
        i += 1;
        let run = &accepted[i % accepted.len()];
        let Some(base) = replicas.get(i % replicas.len().max(1)) else {
            continue;
        };
        let b = s.b.with(Some(base), None);
        tally.probes.fetch_add(1, Ordering::Relaxed);
        for path in [
            format!("/v1/runs/{}", run.id),
            format!("/v1/runs/{}/events", run.id),
        ] {
            let ans = b.get(&path).await;
            // 404 is the answer; no answer or a 5xx (a replica cut off or restarting) says
            // nothing either way; anything else showed B something of A's.
            if ans.status != 404 && ans.status != 0 && ans.status < 500 {
                tally.violation(format!(
                    "tenant B read {path} of tenant A through {base}: {} {}",
                    ans.status, ans.body
                ));
            }
        }
        let list = b.get("/v1/runs?limit=100").await;
        if list.status == 200 {
            tally.list_probes.fetch_add(1, Ordering::Relaxed);
        }
        for r in list.body["runs"].as_array().into_iter().flatten() {
            if let Some(id) = r["id"].as_str().or(r["run_id"].as_str())
                && accepted.iter().any(|a| a.id == id)
            {
                tally.violation(format!("tenant B's run list holds tenant A's run {id}"));
            }
        }
    }
}

/// A token minted on one replica works on another, and once revoked on the first is refused on
/// the other within `bound`.
pub async fn revocation_across_replicas(
    s: &Setup,
    replicas: &[String],
    bound: Duration,
) -> Result<Duration, String> {
    let [r1, r2, ..] = replicas else {
        return Err("needs two gateway replicas".into());
    };
    let on1 = s.admin.with(Some(r1), None);
    let minted = on1
        .post(
            "/v1/tokens",
            &json!({"name": "revoke-me", "tenant": TENANT_A, "subject": "revoke-me", "scopes": ["runs:read"]}),
        )
        .await;
    let (Some(tok), Some(id)) = (minted.body["token"].as_str(), minted.body["id"].as_str()) else {
        return Err(format!("mint: {} {}", minted.status, minted.body));
    };
    let on2 = s.a.with(Some(r2), Some(tok));
    let before = on2.get("/v1/me").await;
    if before.status != 200 {
        return Err(format!(
            "a fresh token on the other replica: {}",
            before.status
        ));
    }
    let del = on1.delete(&format!("/v1/tokens/{id}")).await;
    if !del.ok() {
        return Err(format!("revoke: {} {}", del.status, del.body));
    }
    let t0 = Instant::now();
    while t0.elapsed() < bound {
        if on2.get("/v1/me").await.status == 401 {
            return Ok(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "a revoked token still worked on another replica after {bound:?}"
    ))
}

/// A sender of signed webhook deliveries: each delivery is sent until accepted, then once more
/// with the same delivery id (a sender's retry), which must answer the same run.
pub async fn webhook_sender(s: &Setup, tally: &Tally, stop: Instant) {
    use hmac::{Hmac, Mac as _};
    let Ok(http) = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
    else {
        return;
    };
    let url = format!("{}/v1/_webhooks/{TENANT_A}/hook", s.a.base);
    while Instant::now() < stop {
        let n = next_n();
        let id = format!("d{n}");
        let body = json!({"text": format!("delivery {n}")}).to_string();
        let Ok(mut mac) = Hmac::<sha2::Sha256>::new_from_slice(WEBHOOK_SECRET.as_bytes()) else {
            return;
        };
        mac.update(body.as_bytes());
        let sig = hex::encode(mac.finalize().into_bytes());
        let mut accepted = 0;
        while accepted < 2 && Instant::now() < stop {
            tally.deliveries_sent.fetch_add(1, Ordering::Relaxed);
            let resp = http
                .post(&url)
                .header("content-type", "application/json")
                .header("x-signature", &sig)
                .header("x-delivery", &id)
                .body(body.clone())
                .send()
                .await;
            let (status, answer) = match resp {
                Ok(r) => {
                    let st = r.status().as_u16();
                    (st, r.json::<Value>().await.unwrap_or(Value::Null))
                }
                Err(_) => (0, Value::Null),
            };
            if status == 202 || status == 200 {
                accepted += 1;
                if let Some(run) = answer["run_id"].as_str()
                    && let Ok(mut m) = tally.deliveries.lock()
                {
                    m.entry(id.clone()).or_default().push(run.to_owned());
                }
            } else {
                tally.refused(
                    "webhook",
                    status,
                    answer["error"]["code"].as_str().unwrap_or(""),
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
