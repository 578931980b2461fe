//! Channels against a real Postgres and NATS, through the gRPC service as callers use it:
//! publish/read/ack, cursors of other channels, long-polls woken from another substrate
//! instance, `await`, trimming, TTL expiry, exactly-once publishes (also after their message was
//! trimmed or expired), tenancy and scopes.
//!
//! Multi-thread runtime: `TestDb`'s drop closes its pool from another thread while blocking
//! this one.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_auth::InternalJwt;
use weft_core::{ErrorCode, Principal, Scopes, TenantId};
use weft_proto::transport::GrpcTransport;
use weft_proto::v1;
use weft_proto::v1::channels_client::ChannelsClient;
use weft_substrate::channels::rules::Cursor;
use weft_substrate::channels::{ChannelHub, ChannelStore};
use weft_substrate::{DefStore, grpc_service};
use weft_testkit::TestDb;

const SECRET: &[u8] = b"test-secret-test-secret-test-secret";

fn nats_url() -> String {
    std::env::var("WEFT_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// One substrate instance: its own pool and NATS connection on the shared database and prefix.
async fn instance(db: &TestDb, prefix: &str) -> (ChannelsClient<GrpcTransport>, ChannelHub) {
    let pool = weft_store::connect(&db.url, 8).await.unwrap();
    let bus = weft_bus::Bus::connect(&nats_url(), prefix).await.unwrap();
    let hub = ChannelHub::new(ChannelStore::new(pool.clone()), bus, 100);
    let defs = DefStore::new(pool);
    let routes = grpc_service(
        &common::assemble(defs.clone(), common::memory(&defs), hub.clone()),
        InternalJwt::from_secret(SECRET),
    );
    let client = weft_proto::transport::channels_client(weft_proto::transport::in_process(routes));
    (client, hub)
}

struct Env {
    db: TestDb,
    c: ChannelsClient<GrpcTransport>,
    hub: ChannelHub,
}

async fn env() -> Env {
    let db = TestDb::new().await;
    let (c, hub) = instance(&db, &db.name).await;
    Env { db, c, hub }
}

/// Waits until `n` long-polls of `hub` are in their wait (their first read found nothing).
async fn until_waiting(hub: &ChannelHub, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while hub.waiting() < n {
        assert!(
            Instant::now() < deadline,
            "the reader never started waiting"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn who(tenant: &str, subject: &str, scopes: &str) -> Principal {
    Principal {
        tenant: TenantId::parse(tenant).unwrap(),
        subject: subject.into(),
        scopes: Scopes::parse_list(scopes).unwrap(),
        token_id: None,
        agent: None,
    }
}

fn req<T>(p: &Principal, msg: T) -> tonic::Request<T> {
    let jwt = InternalJwt::from_secret(SECRET);
    let mut r = tonic::Request::new(msg);
    let token = jwt.sign(p).unwrap();
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

fn admin() -> Principal {
    who("acme", "boss", "tenant:admin")
}

fn rw() -> Principal {
    who("acme", "worker", "channels:publish,channels:read")
}

/// Asserts a 400 naming `field`.
fn bad(e: &tonic::Status, field: &str) {
    let err = weft_core::Error::from(e);
    assert_eq!(err.code, ErrorCode::InvalidRequest, "{err:?}");
    assert_eq!(err.param.as_deref(), Some(field), "{err:?}");
}

impl Env {
    async fn create(&mut self, name: &str, scope: &str, ttl: Option<u64>, max: Option<u64>) {
        self.c
            .put_channel(req(
                &admin(),
                v1::PutChannelRequest {
                    name: name.into(),
                    scope: scope.into(),
                    ttl_seconds: ttl,
                    max_messages: max,
                },
            ))
            .await
            .unwrap();
    }
}

async fn publish(
    c: &mut ChannelsClient<GrpcTransport>,
    p: &Principal,
    name: &str,
    payload: Value,
) -> v1::PublishResponse {
    c.publish(req(
        p,
        v1::PublishRequest {
            name: name.into(),
            payload_json: payload.to_string(),
            ..Default::default()
        },
    ))
    .await
    .unwrap()
    .into_inner()
}

fn read_req(name: &str) -> v1::ReadRequest {
    v1::ReadRequest {
        name: name.into(),
        ..Default::default()
    }
}

async fn read(
    c: &mut ChannelsClient<GrpcTransport>,
    p: &Principal,
    r: v1::ReadRequest,
) -> Result<v1::ReadResponse, tonic::Status> {
    c.read(req(p, r)).await.map(tonic::Response::into_inner)
}

fn payloads(r: &v1::ReadResponse) -> Vec<Value> {
    r.messages
        .iter()
        .map(|m| serde_json::from_str(&m.payload_json).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn publish_read_ack_flow_and_cursor_rules() {
    let mut e = env().await;
    e.create("jobs", "tenant", None, None).await;
    e.create("other", "tenant", None, None).await;
    let p = rw();
    for i in 1..=3 {
        let out = publish(&mut e.c, &p, "jobs", json!({"n": i})).await;
        assert_eq!(out.seq, i);
        assert!(!out.replayed);
    }
    // Without a cursor: after the consumer's committed cursor (none yet: the beginning).
    let mut r = read_req("jobs");
    r.max = Some(2);
    let first = read(&mut e.c, &p, r.clone()).await.unwrap();
    assert_eq!(payloads(&first), [json!({"n": 1}), json!({"n": 2})]);
    assert_eq!(first.cursor, first.messages[1].cursor);
    // Reading moves no cursor: the same read again gives the same messages.
    let again = read(&mut e.c, &p, r.clone()).await.unwrap();
    assert_eq!(payloads(&again), payloads(&first));
    // With the returned cursor: the rest.
    r.cursor = Some(first.cursor.clone());
    let rest = read(&mut e.c, &p, r.clone()).await.unwrap();
    assert_eq!(payloads(&rest), [json!({"n": 3})]);

    // Ack the first two; a read without a cursor continues after them.
    let ack = |cursor: &str| {
        req(
            &p,
            v1::AckRequest {
                name: "jobs".into(),
                cursor: cursor.into(),
                ..Default::default()
            },
        )
    };
    let committed = e.c.ack(ack(&first.cursor)).await.unwrap().into_inner();
    assert_eq!(committed.cursor, first.cursor);
    let after_ack = read(&mut e.c, &p, read_req("jobs")).await.unwrap();
    assert_eq!(payloads(&after_ack), [json!({"n": 3})]);
    // Another consumer has its own cursor.
    let mut other_consumer = read_req("jobs");
    other_consumer.consumer = Some("worker/second".into());
    assert_eq!(
        read(&mut e.c, &p, other_consumer)
            .await
            .unwrap()
            .messages
            .len(),
        3
    );
    // Acking the same position again is fine; behind it is refused, naming the position.
    e.c.ack(ack(&first.cursor)).await.unwrap();
    let behind = e.c.ack(ack(&first.messages[0].cursor)).await.unwrap_err();
    bad(&behind, "cursor");
    assert!(
        behind.message().contains("committed"),
        "{}",
        behind.message()
    );
    assert!(
        behind.message().contains(&first.cursor),
        "{}",
        behind.message()
    );

    // A cursor of another channel: 400 on read and on ack.
    let foreign = publish(&mut e.c, &p, "other", json!(1)).await.cursor;
    let mut r = read_req("jobs");
    r.cursor = Some(foreign.clone());
    bad(&read(&mut e.c, &p, r).await.unwrap_err(), "cursor");
    bad(&e.c.ack(ack(&foreign)).await.unwrap_err(), "cursor");
    // Forged cursors are 400s, not 500s.
    for forged in ["", "garbage", "AQAAAAAAAAAB", &"A".repeat(500)] {
        let mut r = read_req("jobs");
        r.cursor = Some(forged.into());
        bad(&read(&mut e.c, &p, r).await.unwrap_err(), "cursor");
        bad(&e.c.ack(ack(forged)).await.unwrap_err(), "cursor");
    }

    // Peek: the newest, oldest first, moving nothing.
    let peek =
        e.c.peek(req(
            &p,
            v1::PeekRequest {
                name: "jobs".into(),
                max: Some(2),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let seqs: Vec<u64> = peek.messages.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [2, 3]);
    assert_eq!(
        payloads(&read(&mut e.c, &p, read_req("jobs")).await.unwrap()),
        [json!({"n": 3})]
    );

    // Listing and deleting.
    let list =
        e.c.list_channels(req(&p, v1::ListChannelsRequest {}))
            .await
            .unwrap()
            .into_inner();
    let names: Vec<&str> = list.channels.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["jobs", "other"]);
    e.c.delete_channel(req(
        &admin(),
        v1::DeleteChannelRequest {
            name: "jobs".into(),
        },
    ))
    .await
    .unwrap();
    let gone = read(&mut e.c, &p, read_req("jobs")).await.unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);
    assert!(
        gone.message().contains("PUT /v1/channels/jobs"),
        "{}",
        gone.message()
    );
    drop(e.db);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_poll_is_woken_by_a_publish_on_another_instance() {
    let mut e = env().await;
    e.create("wake", "tenant", None, None).await;
    let (mut other, _) = instance(&e.db, &e.db.name).await;
    let p = rw();
    let mut r = read_req("wake");
    r.wait_ms = Some(20_000);
    let mut reader = e.c.clone();
    let started = Instant::now();
    let waiting = tokio::spawn(async move { read(&mut reader, &rw(), r).await });
    // Publish on the other instance until the reader has it: a publish that lands before the
    // reader waits is returned by its first read, one after by its wake-up; either way the
    // read must answer with the message well before its 20 s deadline.
    let out = publish(&mut other, &p, "wake", json!("hello")).await;
    let got = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the long-poll was not woken")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(payloads(&got), [json!("hello")]);
    assert_eq!(got.cursor, out.cursor);

    // A read that is surely waiting (its first read found nothing) is woken too.
    let mut r = read_req("wake");
    r.cursor = Some(got.cursor.clone());
    r.wait_ms = Some(20_000);
    let mut reader = e.c.clone();
    let waiting = tokio::spawn(async move { read(&mut reader, &rw(), r).await });
    until_waiting(&e.hub, 1).await;
    publish(&mut other, &p, "wake", json!("again")).await;
    let got = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the long-poll was not woken")
        .unwrap()
        .unwrap();
    assert_eq!(payloads(&got), [json!("again")]);

    // Nothing arrives: the read answers empty at its deadline, with the same cursor.
    let mut r = read_req("wake");
    r.cursor = Some(got.cursor.clone());
    r.wait_ms = Some(200);
    let empty = read(&mut e.c, &p, r).await.unwrap();
    assert!(empty.messages.is_empty());
    assert_eq!(empty.cursor, got.cursor);
}

#[tokio::test(flavor = "multi_thread")]
async fn await_any_all_and_at_least() {
    let mut e = env().await;
    for n in ["a", "b", "c"] {
        e.create(n, "tenant", None, None).await;
    }
    let p = rw();
    let chans: Vec<String> = ["a", "b", "c"].iter().map(|s| (*s).to_owned()).collect();
    let aw = |mode: &str, n: Option<u32>, wait_ms: u32| {
        req(
            &rw(),
            v1::AwaitRequest {
                channels: chans.clone(),
                mode: mode.into(),
                n,
                wait_ms,
                ..Default::default()
            },
        )
    };
    // Nothing yet: an immediate await is not satisfied.
    let none =
        e.c.await_channels(aw("any", None, 0))
            .await
            .unwrap()
            .into_inner();
    assert!(!none.satisfied);
    assert!(none.channels.iter().all(|c| !c.ready));

    // `any` waits and is woken by one publish (from another instance).
    let (mut other, _) = instance(&e.db, &e.db.name).await;
    let mut waiter = e.c.clone();
    let req_any = aw("any", None, 20_000);
    let any = tokio::spawn(async move { waiter.await_channels(req_any).await });
    until_waiting(&e.hub, 1).await;
    publish(&mut other, &p, "b", json!(1)).await;
    let any = tokio::time::timeout(Duration::from_secs(15), any)
        .await
        .expect("await any was not woken")
        .unwrap()
        .unwrap()
        .into_inner();
    assert!(any.satisfied);
    let ready: Vec<&str> = any
        .channels
        .iter()
        .filter(|c| c.ready)
        .map(|c| c.channel.as_str())
        .collect();
    assert_eq!(ready, ["b"]);

    // `at_least 2` and `all` are not satisfied with one channel ready.
    let two =
        e.c.await_channels(aw("at_least", Some(2), 100))
            .await
            .unwrap()
            .into_inner();
    assert!(!two.satisfied);

    // `all` waits until every channel has a message.
    let mut waiter = e.c.clone();
    let req_all = aw("all", None, 20_000);
    let all = tokio::spawn(async move { waiter.await_channels(req_all).await });
    until_waiting(&e.hub, 1).await;
    publish(&mut other, &p, "a", json!(2)).await;
    publish(&mut other, &p, "c", json!(3)).await;
    let all = tokio::time::timeout(Duration::from_secs(15), all)
        .await
        .expect("await all was not woken")
        .unwrap()
        .unwrap()
        .into_inner();
    assert!(all.satisfied);
    assert!(all.channels.iter().all(|c| c.ready));
    let two =
        e.c.await_channels(aw("at_least", Some(2), 0))
            .await
            .unwrap()
            .into_inner();
    assert!(two.satisfied);

    // Acking a channel makes it not ready for that consumer.
    let cursor = read(&mut e.c, &p, read_req("a")).await.unwrap().cursor;
    e.c.ack(req(
        &p,
        v1::AckRequest {
            name: "a".into(),
            cursor,
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    let all_now =
        e.c.await_channels(aw("all", None, 0))
            .await
            .unwrap()
            .into_inner();
    assert!(!all_now.satisfied);

    // Bad input names the field.
    bad(
        &e.c.await_channels(aw("at_least", None, 0))
            .await
            .unwrap_err(),
        "n",
    );
    bad(
        &e.c.await_channels(aw("at_least", Some(4), 0))
            .await
            .unwrap_err(),
        "n",
    );
    bad(
        &e.c.await_channels(aw("most", None, 0)).await.unwrap_err(),
        "mode",
    );
    bad(
        &e.c.await_channels(aw("any", None, 30_001))
            .await
            .unwrap_err(),
        "wait_ms",
    );
    let many: Vec<String> = (0..65).map(|i| format!("c{i}")).collect();
    let e2 =
        e.c.await_channels(req(
            &p,
            v1::AwaitRequest {
                channels: many,
                mode: "any".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    bad(&e2, "channels");
    let missing =
        e.c.await_channels(req(
            &p,
            v1::AwaitRequest {
                channels: vec!["a".into(), "nope".into()],
                mode: "any".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
}

#[tokio::test(flavor = "multi_thread")]
async fn max_messages_trims_and_ttl_expires() {
    let mut e = env().await;
    e.create("small", "tenant", None, Some(3)).await;
    e.create("brief", "tenant", Some(1), None).await;
    let p = rw();
    for i in 1..=5 {
        publish(&mut e.c, &p, "small", json!(i)).await;
    }
    let all = read(&mut e.c, &p, read_req("small")).await.unwrap();
    assert_eq!(payloads(&all), [json!(3), json!(4), json!(5)]);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM channel_messages")
        .fetch_one(&e.db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 3, "trimmed in the publish, not only hidden");

    publish(&mut e.c, &p, "brief", json!("soon gone")).await;
    let expires: time::OffsetDateTime = sqlx::query_scalar(
        "SELECT expires_at FROM channel_messages m JOIN channels c ON c.id = m.channel_id \
         WHERE c.name = 'brief'",
    )
    .fetch_one(&e.db.pool)
    .await
    .unwrap();
    // Until the message's expires_at has passed (by the database clock) it may be read; after,
    // never. Poll on the condition, not a fixed sleep.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let past: bool = sqlx::query_scalar("SELECT now() > $1")
            .bind(expires)
            .fetch_one(&e.db.pool)
            .await
            .unwrap();
        if past {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the database clock did not pass expires_at"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = read(&mut e.c, &p, read_req("brief")).await.unwrap();
    assert!(after.messages.is_empty());
    let peek =
        e.c.peek(req(
            &p,
            v1::PeekRequest {
                name: "brief".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(peek.messages.is_empty());
    // The sweep deletes it.
    let store = ChannelStore::new(e.db.pool.clone());
    assert_eq!(store.sweep_expired(100).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn op_key_replays_give_one_message() {
    let mut e = env().await;
    e.create("once", "tenant", None, None).await;
    let p = rw();
    let pubreq = |payload: Value| {
        req(
            &p,
            v1::PublishRequest {
                name: "once".into(),
                payload_json: payload.to_string(),
                op_key: Some("run-1:toolu_1".into()),
                ..Default::default()
            },
        )
    };
    let first = e.c.publish(pubreq(json!("x"))).await.unwrap().into_inner();
    assert!(!first.replayed);
    // Concurrent repeats of the same key.
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let mut c = e.c.clone();
        let r = pubreq(json!("x"));
        tasks.push(tokio::spawn(async move { c.publish(r).await }));
    }
    for t in tasks {
        let again = t.await.unwrap().unwrap().into_inner();
        assert!(again.replayed);
        assert_eq!(again.cursor, first.cursor);
        assert_eq!(again.seq, first.seq);
    }
    let all = read(&mut e.c, &p, read_req("once")).await.unwrap();
    assert_eq!(all.messages.len(), 1);
    // The next publish gets the next seq (the replays took none).
    assert_eq!(publish(&mut e.c, &p, "once", json!("y")).await.seq, 2);
}

/// Publishes `payload` to `name` with `op_key`.
async fn publish_once(
    c: &mut ChannelsClient<GrpcTransport>,
    p: &Principal,
    name: &str,
    payload: Value,
    op_key: &str,
) -> v1::PublishResponse {
    c.publish(req(
        p,
        v1::PublishRequest {
            name: name.into(),
            payload_json: payload.to_string(),
            op_key: Some(op_key.into()),
            ..Default::default()
        },
    ))
    .await
    .unwrap()
    .into_inner()
}

async fn message_rows(db: &TestDb, name: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM channel_messages m JOIN channels c ON c.id = m.channel_id \
         WHERE c.name = $1",
    )
    .bind(name)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn op_key_replays_after_its_message_was_trimmed() {
    let mut e = env().await;
    e.create("one", "tenant", None, Some(1)).await;
    let p = rw();
    let first = publish_once(&mut e.c, &p, "one", json!("k"), "run-1:toolu_k").await;
    assert!(!first.replayed);
    publish(&mut e.c, &p, "one", json!("a")).await;
    let last = publish(&mut e.c, &p, "one", json!("b")).await;
    assert_eq!(last.seq, first.seq + 2);
    assert_eq!(
        message_rows(&e.db, "one").await,
        1,
        "k's message was trimmed"
    );

    let again = publish_once(&mut e.c, &p, "one", json!("k"), "run-1:toolu_k").await;
    assert!(again.replayed, "the trimmed publish's key is remembered");
    assert_eq!(again.seq, first.seq);
    assert_eq!(again.cursor, first.cursor);
    assert_eq!(again.published_at, first.published_at);
    let all = read(&mut e.c, &p, read_req("one")).await.unwrap();
    assert_eq!(payloads(&all), [json!("b")], "no new message");
    assert_eq!(message_rows(&e.db, "one").await, 1);
    // The replay took no seq.
    assert_eq!(
        publish(&mut e.c, &p, "one", json!("c")).await.seq,
        last.seq + 1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn op_key_replays_after_its_message_expired() {
    let mut e = env().await;
    e.create("fleeting", "tenant", Some(1), Some(1)).await;
    let p = rw();
    let first = publish_once(&mut e.c, &p, "fleeting", json!("k"), "run-2:toolu_k").await;
    assert!(!first.replayed);
    let expires: time::OffsetDateTime = sqlx::query_scalar(
        "SELECT expires_at FROM channel_messages m JOIN channels c ON c.id = m.channel_id \
         WHERE c.name = 'fleeting'",
    )
    .fetch_one(&e.db.pool)
    .await
    .unwrap();
    // Wait on the condition (the database clock passed expires_at), then sweep.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let past: bool = sqlx::query_scalar("SELECT now() > $1")
            .bind(expires)
            .fetch_one(&e.db.pool)
            .await
            .unwrap();
        if past {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the database clock did not pass expires_at"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let store = ChannelStore::new(e.db.pool.clone());
    assert_eq!(store.sweep_expired(100).await.unwrap(), 1);
    assert_eq!(
        store.sweep_ops(100).await.unwrap(),
        0,
        "a fresh key is kept"
    );
    assert_eq!(
        message_rows(&e.db, "fleeting").await,
        0,
        "the message is gone"
    );

    let again = publish_once(&mut e.c, &p, "fleeting", json!("k"), "run-2:toolu_k").await;
    assert!(again.replayed, "the expired publish's key is remembered");
    assert_eq!(again.seq, first.seq);
    assert_eq!(again.cursor, first.cursor);
    assert_eq!(again.published_at, first.published_at);
    assert_eq!(message_rows(&e.db, "fleeting").await, 0, "no new message");
    let head = publish(&mut e.c, &p, "fleeting", json!("next")).await;
    assert_eq!(head.seq, first.seq + 1, "the replay took no seq");

    // After the retention the key is swept, and a repeat publishes anew.
    sqlx::query("UPDATE channel_ops SET published_at = now() - interval '8 days'")
        .execute(&e.db.pool)
        .await
        .unwrap();
    assert_eq!(store.sweep_ops(100).await.unwrap(), 1);
    let late = publish_once(&mut e.c, &p, "fleeting", json!("k"), "run-2:toolu_k").await;
    assert!(!late.replayed);
    assert_eq!(late.seq, head.seq + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn scopes_partition_and_tenants_are_isolated() {
    let mut e = env().await;
    e.create("inbox", "user", None, None).await;
    e.create("mail", "agent", None, None).await;
    e.create("t", "tenant", None, None).await;
    let alice = who("acme", "alice", "channels:publish,channels:read");
    let bob = who("acme", "bob", "channels:publish,channels:read");
    publish(&mut e.c, &alice, "inbox", json!("for alice")).await;
    assert!(
        read(&mut e.c, &bob, read_req("inbox"))
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    assert_eq!(
        read(&mut e.c, &alice, read_req("inbox"))
            .await
            .unwrap()
            .messages
            .len(),
        1
    );
    // Naming another user's stream needs tenant:admin.
    let mut r = read_req("inbox");
    r.user = Some("alice".into());
    let e403 = read(&mut e.c, &bob, r.clone()).await.unwrap_err();
    assert_eq!(e403.code(), tonic::Code::PermissionDenied);
    assert_eq!(read(&mut e.c, &admin(), r).await.unwrap().messages.len(), 1);
    // A cursor of alice's stream is refused on bob's.
    let alice_cursor = read(&mut e.c, &alice, read_req("inbox"))
        .await
        .unwrap()
        .cursor;
    let mut r = read_req("inbox");
    r.cursor = Some(alice_cursor);
    bad(&read(&mut e.c, &bob, r).await.unwrap_err(), "cursor");

    // Agent channels need `agent` and keep one stream per agent.
    bad(
        &read(&mut e.c, &alice, read_req("mail")).await.unwrap_err(),
        "agent",
    );
    let to = |agent: &str| v1::PublishRequest {
        name: "mail".into(),
        payload_json: "1".into(),
        agent: Some(agent.into()),
        ..Default::default()
    };
    e.c.publish(req(&alice, to("triage"))).await.unwrap();
    let mut r = read_req("mail");
    r.agent = Some("triage".into());
    assert_eq!(
        read(&mut e.c, &bob, r.clone())
            .await
            .unwrap()
            .messages
            .len(),
        1
    );
    r.agent = Some("writer".into());
    assert!(
        read(&mut e.c, &bob, r.clone())
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    r.agent = Some("Not An Agent".into());
    bad(&read(&mut e.c, &bob, r).await.unwrap_err(), "agent");

    // Another tenant: not found, even with the same name.
    let other = who("globex", "eve", "channels:publish,channels:read");
    let nf = read(&mut e.c, &other, read_req("t")).await.unwrap_err();
    assert_eq!(nf.code(), tonic::Code::NotFound);
    let nf =
        e.c.publish(req(
            &other,
            v1::PublishRequest {
                name: "t".into(),
                payload_json: "1".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(nf.code(), tonic::Code::NotFound);
    let other_admin = who("globex", "root", "tenant:admin");
    let nf =
        e.c.delete_channel(req(
            &other_admin,
            v1::DeleteChannelRequest { name: "t".into() },
        ))
        .await
        .unwrap_err();
    assert_eq!(nf.code(), tonic::Code::NotFound);

    // Scopes: reading needs channels:read, publishing channels:publish, creating tenant:admin.
    let reader = who("acme", "r", "channels:read");
    let publisher = who("acme", "w", "channels:publish");
    let pe =
        e.c.publish(req(
            &reader,
            v1::PublishRequest {
                name: "t".into(),
                payload_json: "1".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(pe.code(), tonic::Code::PermissionDenied);
    let re = read(&mut e.c, &publisher, read_req("t")).await.unwrap_err();
    assert_eq!(re.code(), tonic::Code::PermissionDenied);
    let ce =
        e.c.put_channel(req(
            &publisher,
            v1::PutChannelRequest {
                name: "x".into(),
                scope: "tenant".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(ce.code(), tonic::Code::PermissionDenied);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_names_the_field() {
    let mut e = env().await;
    e.create("t", "tenant", None, None).await;
    let p = rw();
    let put = |name: &str, scope: &str, ttl: Option<u64>, max: Option<u64>| {
        req(
            &admin(),
            v1::PutChannelRequest {
                name: name.into(),
                scope: scope.into(),
                ttl_seconds: ttl,
                max_messages: max,
            },
        )
    };
    bad(
        &e.c.put_channel(put("a b", "tenant", None, None))
            .await
            .unwrap_err(),
        "name",
    );
    bad(
        &e.c.put_channel(put("a..b", "tenant", None, None))
            .await
            .unwrap_err(),
        "name",
    );
    bad(
        &e.c.put_channel(put("ok", "world", None, None))
            .await
            .unwrap_err(),
        "scope",
    );
    bad(
        &e.c.put_channel(put("ok", "tenant", Some(0), None))
            .await
            .unwrap_err(),
        "ttl_seconds",
    );
    bad(
        &e.c.put_channel(put("ok", "tenant", None, Some(0)))
            .await
            .unwrap_err(),
        "max_messages",
    );
    // Changing a channel's scope is a conflict; its bounds may change.
    let c =
        e.c.put_channel(put("t", "user", None, None))
            .await
            .unwrap_err();
    assert_eq!(weft_core::Error::from(&c).code, ErrorCode::Conflict);
    let changed =
        e.c.put_channel(put("t", "tenant", Some(60), Some(5)))
            .await
            .unwrap()
            .into_inner();
    assert!(!changed.created);
    assert_eq!(changed.channel.unwrap().max_messages, 5);

    let pubreq = |payload: String, op_key: Option<&str>| {
        req(
            &p,
            v1::PublishRequest {
                name: "t".into(),
                payload_json: payload,
                op_key: op_key.map(str::to_owned),
                ..Default::default()
            },
        )
    };
    let big = format!("\"{}\"", "x".repeat(64 * 1024));
    bad(
        &e.c.publish(pubreq(big, None)).await.unwrap_err(),
        "payload",
    );
    bad(
        &e.c.publish(pubreq("{".into(), None)).await.unwrap_err(),
        "payload",
    );
    bad(
        &e.c.publish(pubreq(r#""\u0000""#.into(), None))
            .await
            .unwrap_err(),
        "payload",
    );
    bad(
        &e.c.publish(pubreq("1".into(), Some(""))).await.unwrap_err(),
        "op_key",
    );
    let mut r = read_req("t");
    r.max = Some(1001);
    bad(&read(&mut e.c, &p, r).await.unwrap_err(), "max");
    let mut r = read_req("t");
    r.wait_ms = Some(30_001);
    bad(&read(&mut e.c, &p, r).await.unwrap_err(), "wait_ms");
    let mut r = read_req("t");
    r.consumer = Some("a\u{0}b".into());
    bad(&read(&mut e.c, &p, r).await.unwrap_err(), "consumer");
    bad(
        &read(&mut e.c, &p, read_req("bad name")).await.unwrap_err(),
        "name",
    );
    // A cursor ahead of the channel (forged from a real one) is refused.
    let out = publish(&mut e.c, &p, "t", json!(1)).await;
    let mut r = read_req("t");
    r.cursor = Some(out.cursor.clone());
    assert!(read(&mut e.c, &p, r).await.unwrap().messages.is_empty());
    let mut ahead = Cursor::decode("cursor", &out.cursor).unwrap();
    ahead.seq += 5;
    let mut r = read_req("t");
    r.cursor = Some(ahead.encode());
    bad(&read(&mut e.c, &p, r).await.unwrap_err(), "cursor");
    let ack =
        e.c.ack(req(
            &p,
            v1::AckRequest {
                name: "t".into(),
                cursor: ahead.encode(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    bad(&ack, "cursor");
}

#[tokio::test(flavor = "multi_thread")]
async fn declared_channels_are_created_at_boot() {
    let db = TestDb::new().await;
    let mut cfg = weft_config::Config::default();
    cfg.database.url = weft_config::Secret::new(db.url.clone());
    cfg.nats.url = nats_url();
    cfg.nats.prefix = db.name.clone();
    cfg.substrate.boot_tenant = "acme".into();
    cfg.substrate.channels.insert(
        "alerts".into(),
        weft_config::ChannelDecl {
            scope: "tenant".into(),
            ttl_seconds: Some(60),
            max_messages: None,
        },
    );
    let store = DefStore::new(db.pool.clone());
    let hub = weft_substrate::connect_channels(&cfg, &store)
        .await
        .unwrap();
    let list = hub.list(&TenantId::parse("acme").unwrap()).await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].name, "alerts");
    assert_eq!(list[0].ttl_seconds, 60);
    // Again (a restart): still one.
    weft_substrate::connect_channels(&cfg, &store)
        .await
        .unwrap();
    // A bad declaration stops start-up, naming the key.
    cfg.substrate.channels.get_mut("alerts").unwrap().scope = "user".into();
    let err = weft_substrate::connect_channels(&cfg, &store)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("substrate.channels.alerts"), "{err}");
    cfg.substrate.channels.get_mut("alerts").unwrap().scope = "galaxy".into();
    let err = weft_substrate::connect_channels(&cfg, &store)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("substrate.channels.alerts.scope"), "{err}");
}

/// A run's own calls: its creator's subject, acting as its agent.
fn run_of(agent: &str) -> Principal {
    Principal {
        agent: Some(agent.into()),
        ..who("acme", "creator", "channels:publish,channels:read")
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_is_read_and_acked_only_by_whoever_it_belongs_to() {
    let mut e = env().await;
    e.create("jobs", "tenant", None, None).await;
    for i in 1..=3 {
        publish(&mut e.c, &admin(), "jobs", json!({"n": i})).await;
    }
    let as_consumer = |c: &str| {
        let mut r = read_req("jobs");
        r.consumer = Some(c.into());
        r
    };
    // The agent `bot` reads and acks as itself (a run's call).
    let bot = run_of("bot");
    let got = read(&mut e.c, &bot, as_consumer("bot")).await.unwrap();
    assert_eq!(got.messages.len(), 3);
    // A reader of the tenant cannot read or ack as the agent, nor as another subject.
    let reader = rw();
    for other in ["bot", "boss", "workerx", "worker/"] {
        let err = read(&mut e.c, &reader, as_consumer(other))
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            tonic::Code::PermissionDenied,
            "{other}: {err:?}"
        );
        let ack =
            e.c.ack(req(
                &reader,
                v1::AckRequest {
                    name: "jobs".into(),
                    cursor: got.cursor.clone(),
                    consumer: Some(other.into()),
                    ..Default::default()
                },
            ))
            .await
            .unwrap_err();
        assert_eq!(
            ack.code(),
            tonic::Code::PermissionDenied,
            "{other}: {ack:?}"
        );
    }
    // Its own, and its own under it, are fine; so is a tenant admin naming anyone's.
    read(&mut e.c, &reader, as_consumer("worker"))
        .await
        .unwrap();
    read(&mut e.c, &reader, as_consumer("worker/jobs"))
        .await
        .unwrap();
    read(&mut e.c, &admin(), as_consumer("bot")).await.unwrap();
    // The agent's cursor was never moved by anyone else: it still reads all three.
    let again = read(&mut e.c, &bot, as_consumer("bot")).await.unwrap();
    assert_eq!(again.messages.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_op_key_claimed_by_one_caller_does_not_swallow_another_callers_publish() {
    let mut e = env().await;
    e.create("jobs", "tenant", None, None).await;
    let with_key = |payload: Value, key: &str| v1::PublishRequest {
        name: "jobs".into(),
        payload_json: payload.to_string(),
        op_key: Some(key.into()),
        ..Default::default()
    };
    let key = "0197a5e0-0000-7000-8000-000000000001:toolu_1";
    // A token publishes first with the key a run will use.
    let squatter = who("acme", "mallory", "channels:publish,channels:read");
    let first =
        e.c.publish(req(&squatter, with_key(json!("squat"), key)))
            .await
            .unwrap()
            .into_inner();
    assert!(!first.replayed);
    // The run's publish with that key is stored all the same; its retry is a replay.
    let run = run_of("bot");
    let own =
        e.c.publish(req(&run, with_key(json!("real"), key)))
            .await
            .unwrap()
            .into_inner();
    assert!(!own.replayed, "the run's publish was swallowed");
    let retry =
        e.c.publish(req(&run, with_key(json!("real"), key)))
            .await
            .unwrap()
            .into_inner();
    assert!(retry.replayed && retry.seq == own.seq);
    // Another subject's key is its own too.
    let other =
        e.c.publish(req(&rw(), with_key(json!("other"), key)))
            .await
            .unwrap()
            .into_inner();
    assert!(!other.replayed);
    let all = read(&mut e.c, &admin(), read_req("jobs")).await.unwrap();
    assert_eq!(
        payloads(&all),
        [json!("squat"), json!("real"), json!("other")]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_caller_cannot_hold_the_whole_long_poll_pool() {
    // A pool of 8: a principal holds at most 2, a tenant at most 4.
    let db = TestDb::new().await;
    let pool = weft_store::connect(&db.url, 8).await.unwrap();
    let bus = weft_bus::Bus::connect(&nats_url(), &db.name).await.unwrap();
    let hub = ChannelHub::new(ChannelStore::new(pool.clone()), bus, 8);
    assert_eq!((hub.principal_share(), hub.tenant_share()), (2, 4));
    let defs = DefStore::new(pool);
    let routes = grpc_service(
        &common::assemble(defs.clone(), common::memory(&defs), hub.clone()),
        InternalJwt::from_secret(SECRET),
    );
    let mut c = weft_proto::transport::channels_client(weft_proto::transport::in_process(routes));
    for (tenant, admin) in [
        ("acme", admin()),
        ("beta", who("beta", "root", "tenant:admin")),
    ] {
        c.put_channel(req(
            &admin,
            v1::PutChannelRequest {
                name: "quiet".into(),
                scope: "tenant".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_or_else(|e| panic!("{tenant}: {e:?}"));
    }
    let spawner = c.clone();
    let waiting = |p: Principal| {
        let mut c = spawner.clone();
        let mut r = read_req("quiet");
        r.wait_ms = Some(20_000);
        tokio::spawn(async move { read(&mut c, &p, r).await })
    };
    // The hog's first two wait; its third is refused with a 429 at once.
    let hog = rw();
    let held = [waiting(hog.clone()), waiting(hog.clone())];
    until_waiting(&hub, 2).await;
    let mut r = read_req("quiet");
    r.wait_ms = Some(20_000);
    let refused = read(&mut c, &hog, r.clone()).await.unwrap_err();
    assert_eq!(
        weft_core::Error::from(&refused).code,
        ErrorCode::RateLimited,
        "{refused:?}"
    );
    // Two more principals of the same tenant fill its half; a third of that tenant is refused.
    let mate = who("acme", "mate", "channels:read");
    let held2 = [waiting(mate.clone()), waiting(mate.clone())];
    until_waiting(&hub, 4).await;
    let third = who("acme", "third", "channels:read");
    let refused = read(&mut c, &third, r.clone()).await.unwrap_err();
    assert_eq!(
        weft_core::Error::from(&refused).code,
        ErrorCode::RateLimited
    );
    // Another tenant still waits (and answers at its deadline, empty).
    let mut short = read_req("quiet");
    short.wait_ms = Some(300);
    let other = read(&mut c, &who("beta", "reader", "channels:read"), short)
        .await
        .unwrap();
    assert!(other.messages.is_empty());
    for h in held.into_iter().chain(held2) {
        h.abort();
    }
}
