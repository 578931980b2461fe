//! Usage end to end: records published on the usage stream (as the router does after every call)
//! are written by the gateway's usage writer and summarised by `GET /v1/usage` — per tenant,
//! grouped, once per record id, and not lost while no writer runs.
//!
//! Tenant isolation, by design: a tenant admin reads only its own tenant; naming another tenant
//! in `tenant=` is a 404 `not_found` (whether that tenant exists or not). `admin` may name any.
//!
//! The tests use the multi-thread runtime: `TestDb`'s drop closes its pool from another thread
//! while blocking this one.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::{Duration, Instant};

use common::TestFleet;
use serde_json::{Value, json};
use uuid::Uuid;
use weft_bus::Bus;
use weft_core::UsageRecord;

/// How long a record may take from the stream to the table before a test fails.
const DEADLINE: Duration = Duration::from_secs(30);

fn now_ms() -> i64 {
    i64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap()
}

struct Call<'a> {
    tenant: &'a str,
    provider: &'a str,
    model: &'a str,
    input: u64,
    output: u64,
    cost: f64,
}

/// A one-token call of tenant `acme` on the mock provider.
const ACME_ONE: Call<'static> = Call {
    tenant: "acme",
    provider: "mock",
    model: "m1",
    input: 1,
    output: 1,
    cost: 0.0,
};

fn record(c: &Call<'_>, at_ms: i64) -> UsageRecord {
    UsageRecord {
        id: Uuid::now_v7(),
        at_ms,
        tenant: c.tenant.into(),
        subject: "svc".into(),
        token_id: Some("tok".into()),
        kind: "chat".into(),
        provider: c.provider.into(),
        model: c.model.into(),
        requested_model: "fast".into(),
        input_tokens: c.input,
        output_tokens: c.output,
        cache_read_tokens: 2,
        cache_write_tokens: 1,
        latency_ms: 40,
        cost_usd: c.cost,
        outcome: "ok".into(),
    }
}

async fn bus(f: &TestFleet) -> Bus {
    Bus::connect(&f.config.nats.url, &f.config.nats.prefix)
        .await
        .unwrap()
}

/// Mints a token of `tenant` with `scopes`.
async fn token(f: &TestFleet, tenant: &str, scopes: &[&str]) -> String {
    let (s, t) = f.mint(&f.admin, tenant, scopes).await;
    assert_eq!(s, 201, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

/// Polls `path` until `done` holds for its 200 body; panics after [`DEADLINE`].
/// Awaits `fut`; a step still waiting after [`DEADLINE`] fails the test with its name, so a hang
/// says where it is instead of running into nextest's limit.
async fn within<T>(step: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, fut)
        .await
        .map_err(|_| format!("{step}: still waiting after {DEADLINE:?}"))
        .unwrap()
}

async fn until(f: &TestFleet, path: &str, tok: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (s, body) = f.get(path, tok).await;
        assert_eq!(s, 200, "{path}: {body}");
        if done(&body) {
            return body;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{path} never reached the expected state; last answer: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn total_requests(body: &Value) -> i64 {
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["requests"].as_i64().unwrap())
        .sum()
}

async fn rows(f: &TestFleet) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM usage")
        .fetch_one(&f.db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_is_grouped_summed_and_kept_per_tenant() {
    let f = TestFleet::start().await;
    let acme = token(&f, "acme", &["tenant:admin"]).await;
    let globex = token(&f, "globex", &["tenant:admin"]).await;
    let bus = bus(&f).await;
    let at = now_ms() - 60_000;
    let calls = [
        Call {
            tenant: "acme",
            provider: "mock",
            model: "m1",
            input: 10,
            output: 1,
            cost: 0.5,
        },
        Call {
            tenant: "acme",
            provider: "mock",
            model: "m1",
            input: 20,
            output: 2,
            cost: 0.25,
        },
        Call {
            tenant: "acme",
            provider: "openai",
            model: "gpt",
            input: 40,
            output: 4,
            cost: 1.0,
        },
        Call {
            tenant: "globex",
            provider: "mock",
            model: "m1",
            input: 1000,
            output: 100,
            cost: 9.0,
        },
        Call {
            tenant: "globex",
            provider: "openai",
            model: "gpt",
            input: 3000,
            output: 300,
            cost: 7.0,
        },
    ];
    for c in &calls {
        bus.publish_usage(&record(c, at)).await.unwrap();
    }

    let body = until(&f, "/v1/usage?group_by=provider,model", &acme, |b| {
        total_requests(b) == 3
    })
    .await;
    assert_eq!(body["group_by"], json!(["provider", "model"]));
    assert_eq!(body["tenant"], "acme");
    assert_eq!(body["truncated"], false);
    assert_eq!(
        body["data"],
        json!([
            {"provider": "mock", "model": "m1", "requests": 2, "input_tokens": 30,
             "output_tokens": 3, "cache_read_tokens": 4, "cache_write_tokens": 2,
             "cost_usd": 0.75, "avg_latency_ms": 40.0, "p95_latency_ms": 40.0},
            {"provider": "openai", "model": "gpt", "requests": 1, "input_tokens": 40,
             "output_tokens": 4, "cache_read_tokens": 2, "cache_write_tokens": 1,
             "cost_usd": 1.0, "avg_latency_ms": 40.0, "p95_latency_ms": 40.0},
        ])
    );
    // The window defaults to the last 24 hours, ending now.
    let from = time::OffsetDateTime::parse(
        body["from"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let to = time::OffsetDateTime::parse(
        body["to"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!(to - from, time::Duration::hours(24));

    // No group_by: one row of totals, with only the totals in it.
    let (s, body) = f.get("/v1/usage", &acme).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["data"].as_array().unwrap().len(), 1);
    let all = &body["data"][0];
    assert_eq!(
        (all["requests"].clone(), all["input_tokens"].clone()),
        (json!(3), json!(70))
    );
    assert!(all.get("provider").is_none() && all.get("model").is_none());

    // globex sees its own usage, never acme's.
    let body = until(&f, "/v1/usage?group_by=provider", &globex, |b| {
        total_requests(b) == 2
    })
    .await;
    let inputs: Vec<_> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["provider"].clone(), r["input_tokens"].clone()))
        .collect();
    assert_eq!(
        inputs,
        vec![(json!("mock"), json!(1000)), (json!("openai"), json!(3000))]
    );

    // A tenant admin naming another tenant gets 404; naming its own is fine.
    let (s, e) = f.get("/v1/usage?tenant=globex", &acme).await;
    assert_eq!(s, 404, "{e}");
    assert_eq!(e["error"]["code"], "not_found");
    let (s, e) = f.get("/v1/usage?tenant=no-such-tenant", &acme).await;
    assert_eq!(s, 404, "{e}");
    let (s, body) = f.get("/v1/usage?tenant=acme", &acme).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(total_requests(&body), 3);

    // `admin` reads any tenant with `tenant=`; its own (`default`) has no usage.
    let (s, body) = f
        .get("/v1/usage?tenant=globex&group_by=model", &f.admin)
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(total_requests(&body), 2);
    let (s, body) = f.get("/v1/usage", &f.admin).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["data"], json!([]));
    assert_eq!(body["tenant"], "default");
}

#[tokio::test(flavor = "multi_thread")]
async fn time_buckets_and_ranges_are_utc_and_half_open() {
    let f = TestFleet::start().await;
    let acme = token(&f, "acme", &["tenant:admin"]).await;
    let bus = bus(&f).await;
    let c = ACME_ONE;
    // 2026-11-20T10:15Z, 10:45Z, 11:30Z, and 2026-11-21T00:00Z (outside `to`).
    let base = 1_795_132_800_000_i64; // 2026-11-20T00:00:00Z
    let hour = 3_600_000;
    for at in [
        base + 10 * hour + 900_000,
        base + 10 * hour + 2_700_000,
        base + 11 * hour + 1_800_000,
        base + 24 * hour,
    ] {
        bus.publish_usage(&record(&c, at)).await.unwrap();
    }
    let everything = "/v1/usage?from=2026-11-01T00:00:00Z&to=2026-12-01T00:00:00Z";
    until(&f, everything, &acme, |b| total_requests(b) == 4).await;

    let (s, body) = f
        .get(
            "/v1/usage?group_by=hour&from=2026-11-20T00:00:00Z&to=2026-11-21T00:00:00Z",
            &acme,
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let got: Vec<_> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["hour"].as_str().unwrap().to_owned(),
                r["requests"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("2026-11-20T10:00:00Z".to_owned(), 2),
            ("2026-11-20T11:00:00Z".to_owned(), 1)
        ]
    );

    // An offset given with a percent-encoded `+` means the same instant.
    let (s, body) = f
        .get(
            "/v1/usage?group_by=day&from=2026-11-20T01:00:00%2B01:00&to=2026-11-22T00:00:00Z",
            &acme,
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["from"], "2026-11-20T00:00:00Z");
    let got: Vec<_> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["day"].as_str().unwrap().to_owned(),
                r["requests"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("2026-11-20T00:00:00Z".to_owned(), 3),
            ("2026-11-21T00:00:00Z".to_owned(), 1)
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_is_stored_once_and_malformed_ones_do_not_block() {
    let f = TestFleet::start().await;
    let acme = token(&f, "acme", &["tenant:admin"]).await;
    let bus = bus(&f).await;
    let c = Call {
        tenant: "acme",
        provider: "mock",
        model: "m1",
        input: 5,
        output: 5,
        cost: 0.1,
    };
    let at = now_ms() - 1000;

    // The same record published twice (a router retrying its publish): JetStream keeps one.
    let twice = record(&c, at);
    bus.publish_usage(&twice).await.unwrap();
    bus.publish_usage(&twice).await.unwrap();
    // The same record again without a message id (as after the duplicate window, or a
    // redelivery after a crash before the ack): the table keeps one.
    let raw = serde_json::to_vec(&twice).unwrap();
    bus.client()
        .publish(bus.names().usage_subject(), raw.into())
        .await
        .unwrap();
    // Garbage on the usage subject is dropped, and records after it are still written.
    bus.client()
        .publish(bus.names().usage_subject(), "{not json".into())
        .await
        .unwrap();
    bus.client().flush().await.unwrap();
    let after = record(&c, at);
    bus.publish_usage(&after).await.unwrap();
    // A batch (what a router sends when calls end together) with a record the table cannot
    // hold: the other two are stored, the bad one is dropped, and the batch does not come back.
    let (b1, b2) = (record(&c, at), record(&c, at));
    let mut bad = record(&c, at);
    bad.subject = "nul\0here".into();
    let batch = weft_bus::usage_messages(
        &[b1.clone(), bad, b2.clone()],
        weft_bus::USAGE_MESSAGE_BYTES,
    )
    .unwrap();
    assert_eq!(batch.len(), 1);
    bus.publish_usage_message(&batch[0]).await.unwrap();
    // A batch with an element that is no record at all: only that element is lost.
    let (b3, b4) = (record(&c, at), record(&c, at));
    let raw = format!(
        r#"[{}, {{"id": 1}}, {}]"#,
        serde_json::to_string(&b3).unwrap(),
        serde_json::to_string(&b4).unwrap()
    );
    bus.client()
        .publish(bus.names().usage_subject(), raw.into())
        .await
        .unwrap();
    bus.client().flush().await.unwrap();

    let body = until(&f, "/v1/usage", &acme, |b| total_requests(b) == 6).await;
    assert_eq!(body["data"][0]["input_tokens"], 30);
    // Every good id is stored once, and nothing else.
    assert_eq!(rows(&f).await, 6);
    for id in [twice.id, after.id, b1.id, b2.id, b3.id, b4.id] {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM usage WHERE id = $1")
            .bind(id)
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
        assert_eq!(n, 1, "{id}");
    }
    let metrics = reqwest::get(format!("{}/metrics", f.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "weft_usage_records_written_total",
        "weft_usage_records_malformed_total",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn records_published_while_no_writer_runs_are_written_later() {
    let f = TestFleet::start().await;
    let acme = token(&f, "acme", &["tenant:admin"]).await;
    let (db, config, admin) = (f.db.clone(), f.config.clone(), f.admin.clone());
    f.stop().await;

    // Every gateway (and so every writer) is down; publishing still succeeds and is durable.
    let bus = Bus::connect(&config.nats.url, &config.nats.prefix)
        .await
        .unwrap();
    let c = Call {
        tenant: "acme",
        provider: "mock",
        model: "m1",
        input: 7,
        output: 3,
        cost: 0.2,
    };
    let at = now_ms() - 1000;
    for _ in 0..3 {
        bus.publish_usage(&record(&c, at)).await.unwrap();
    }

    let fleet = weft::Fleet::start(config.clone()).await.unwrap();
    let f = TestFleet {
        url: fleet.url(),
        fleet,
        admin,
        http: reqwest::Client::new(),
        db,
        config,
    };
    let body = until(&f, "/v1/usage", &acme, |b| total_requests(b) == 3).await;
    assert_eq!(body["data"][0]["input_tokens"], 21);
}

#[tokio::test(flavor = "multi_thread")]
async fn scopes_and_parameters_are_checked() {
    let f = TestFleet::start().await;
    let caller = token(&f, "acme", &["llm:call", "runs:read"]).await;
    let acme = token(&f, "acme", &["tenant:admin"]).await;

    let (s, e) = f.get("/v1/usage", &caller).await;
    assert_eq!(s, 403, "{e}");
    assert_eq!(e["error"]["code"], "permission_denied");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant:admin")
    );
    let (s, _) = f.get("/v1/usage", "wft_nope").await;
    assert_eq!(s, 401);

    let (s, e) = f.get("/v1/usage?group_by=model,tenant", &acme).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "group_by");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.contains("`tenant`"), "{msg}");
    assert!(
        msg.contains("provider, model, requested_model, subject, token, kind, day, hour"),
        "{msg}"
    );

    let (s, e) = f
        .get(
            "/v1/usage?from=2026-11-22T00:00:00Z&to=2026-11-21T00:00:00Z",
            &acme,
        )
        .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "from");

    let (s, e) = f.get("/v1/usage?from=yesterday", &acme).await;
    assert_eq!(s, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("RFC 3339"));

    let (s, e) = f.get("/v1/usage?limit=5", &acme).await;
    assert_eq!(s, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("limit"));

    let (s, e) = f.get("/v1/usage?tenant=Not_A_Tenant", &acme).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "tenant");

    // The route is in the OpenAPI document.
    let doc: Value = reqwest::get(format!("{}/v1/openapi.json", f.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["paths"]["/v1/usage"]["get"].is_object());
}

#[tokio::test(flavor = "multi_thread")]
async fn publishing_creates_a_missing_stream_and_names_the_record() {
    // No gateway has made the stream under this prefix yet (a router that started first).
    let config = weft_config::Config::default();
    let prefix = format!("usage_t_{}", Uuid::now_v7().simple());
    let bus = Bus::connect(&config.nats.url, &prefix).await.unwrap();
    let c = ACME_ONE;
    let rec = record(&c, now_ms());
    bus.publish_usage(&rec).await.unwrap();

    let consumer = bus.usage_consumer().await.unwrap();
    let mut batch = consumer.fetch().max_messages(10).messages().await.unwrap();
    let m = futures::StreamExt::next(&mut batch).await.unwrap().unwrap();
    let decoded = weft_bus::decode_usage(&m.payload).unwrap();
    assert_eq!(decoded.len(), 1);
    assert_eq!(decoded[0].as_ref().unwrap(), &rec);
    let id = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id"));
    assert_eq!(id.map(|v| v.as_str().to_owned()), Some(rec.id.to_string()));
    m.ack().await.unwrap();
}

/// Records queued while the router's usage sender is busy go out together: one JetStream
/// message for the lot (one publish, one flush, one ack), every caller released once it is in
/// the socket, and every record stored. On a current-thread runtime the sender cannot run
/// until the test yields, so all ten are queued before its first batch.
#[tokio::test(flavor = "current_thread")]
async fn records_that_end_together_travel_as_one_batch() {
    // Once (CI, 2026-11-27) this test hung past nextest's 2 minutes and could not be told
    // where; every step now has a deadline of its own.
    let f = within("fleet start", TestFleet::start()).await;
    let acme = within("mint a token", token(&f, "acme", &["tenant:admin"])).await;
    let bus = within("connect to NATS", bus(&f)).await;
    let js = async_nats::jetstream::new(bus.client().clone());
    let messages = || async {
        js.get_stream(bus.names().usage_stream())
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .messages
    };
    let before = within("read the usage stream", messages()).await;
    let sender = weft_router::accounting::UsageSender::spawn(bus.clone(), None);
    let c = ACME_ONE;
    let at = now_ms() - 1000;
    let sent: Vec<_> = (0..10)
        .map(|_| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            sender.send(record(&c, at), Some(tx));
            rx
        })
        .collect();
    for rx in sent {
        within("a caller's release", rx)
            .await
            .expect("every caller is released");
    }
    within(
        "the usage totals",
        until(&f, "/v1/usage", &acme, |b| total_requests(b) == 10),
    )
    .await;
    assert_eq!(within("count the rows", rows(&f)).await, 10);
    let after = within("read the usage stream again", messages()).await;
    assert_eq!(after - before, 1, "ten records, one message");
}

/// A record is in the spool when `send` returns, before the sender task has run (a
/// current-thread runtime: it cannot run until the test yields), so the caller's answer, which
/// comes after, never leaves before it.
#[tokio::test(flavor = "current_thread")]
async fn a_record_is_spooled_before_send_returns() {
    let f = within("fleet start", TestFleet::start()).await;
    let bus = within("connect to NATS", bus(&f)).await;
    let dir = std::env::temp_dir().join(format!("weft-spool-{}", Uuid::now_v7().simple()));
    let spool = weft_router::spool::Spool::open(&dir).unwrap();
    let sender = weft_router::accounting::UsageSender::spawn(bus, Some(spool));
    let c = ACME_ONE;
    let rec = record(&c, now_ms());
    let id = rec.id.to_string();
    sender.send(rec, None);
    let spooled = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .any(|text| text.contains(&id));
    assert!(spooled, "the record is not in {}", dir.display());
    drop(sender);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A caller that waits for its record is released only once the record is in the spool (a
/// guard for any change to where the append happens: it must come before the release).
#[tokio::test(flavor = "current_thread")]
async fn waited_records_are_spooled_before_their_callers_are_released() {
    let f = within("fleet start", TestFleet::start()).await;
    let bus = within("connect to NATS", bus(&f)).await;
    let dir = std::env::temp_dir().join(format!("weft-spool-{}", Uuid::now_v7().simple()));
    let spool = weft_router::spool::Spool::open(&dir).unwrap();
    let sender = weft_router::accounting::UsageSender::spawn(bus, Some(spool));
    let c = ACME_ONE;
    let mut ids = Vec::new();
    let mut released = Vec::new();
    for _ in 0..5 {
        let rec = record(&c, now_ms());
        ids.push(rec.id.to_string());
        let (tx, rx) = tokio::sync::oneshot::channel();
        sender.send(rec, Some(tx));
        released.push(rx);
    }
    for rx in released {
        within("a caller's release", rx)
            .await
            .expect("every caller is released");
    }
    let spooled: String = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    for id in &ids {
        assert!(
            spooled.contains(id.as_str()),
            "{id} is not in {}",
            dir.display()
        );
    }
    drop(sender);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A router that dies while NATS is unreachable leaves its records in the usage spool; a
/// router sharing the directory (here the fleet's own) publishes them, each stored once even
/// when JetStream already had it, and removes the file.
#[tokio::test(flavor = "multi_thread")]
async fn records_a_dead_router_left_in_the_spool_are_stored_once() {
    let f = within("fleet start", TestFleet::start()).await;
    let acme = within("mint a token", token(&f, "acme", &["tenant:admin"])).await;
    let c = Call {
        tenant: "acme",
        provider: "mock",
        model: "m1",
        input: 3,
        output: 2,
        cost: 0.0,
    };
    let at = now_ms() - 1000;
    let recs: Vec<_> = (0..3).map(|_| record(&c, at)).collect();
    // The first reached JetStream before its router died; the other two did not.
    let bus = within("connect to NATS", bus(&f)).await;
    within("publish one", bus.publish_usage(&recs[0]))
        .await
        .unwrap();
    // The dead router's spool: written, given up, its lock gone with it.
    let dir = f.config.router.usage_spool_dir.join(&f.config.nats.prefix);
    let dead = weft_router::spool::Spool::open(&dir).unwrap();
    let ticket = dead.append(&recs).unwrap();
    let path = ticket.path().to_path_buf();
    drop(ticket);
    drop(dead);
    assert!(path.exists());
    let body = within(
        "the usage totals",
        until(&f, "/v1/usage", &acme, |b| total_requests(b) >= 3),
    )
    .await;
    assert_eq!(total_requests(&body), 3, "{body}");
    assert_eq!(within("count the rows", rows(&f)).await, 3);
    within("the spool file's removal", async {
        while path.exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// Replicas starting together on a fresh prefix all get the usage and dispatch streams. The
/// chaos harness caught a router that failed to start when another replica created the usage
/// stream at the same moment ("subjects overlap with an existing stream", NATS 2.9); `Bus` now
/// takes the stream the other made. This test did not reproduce that race here (32 replicas, a
/// few tries, before the fix): it guards the concurrent path, it does not prove the fix.
#[tokio::test]
async fn replicas_starting_together_all_get_the_streams() {
    let url = weft_config::Config::default().nats.url;
    let prefix = format!("race{}", Uuid::now_v7().simple());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let (url, prefix) = (url.clone(), prefix.clone());
        tasks.spawn(async move {
            let bus = Bus::connect(&url, &prefix).await.unwrap();
            let usage = bus.ensure_usage_stream().await.map(|_| ());
            let dispatch = bus.ensure_dispatch_stream().await.map(|_| ());
            (usage, dispatch)
        });
    }
    while let Some(done) = tasks.join_next().await {
        let (usage, dispatch) = done.unwrap();
        usage.expect("the usage stream, created or found");
        dispatch.expect("the dispatch stream, created or found");
    }
}
