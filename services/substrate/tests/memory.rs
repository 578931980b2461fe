//! Memory against a real Postgres: who may use which scope id, TTL expiry and the sweep,
//! `incr` under 100 concurrent callers, op-key replay, compare-and-set, listing with a cursor,
//! quotas (also under concurrency), bad input, and the gRPC scope checks.
//!
//! Multi-thread runtime for the reason given in `defs.rs` (`TestDb`'s drop).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::{Duration, Instant};

use serde_json::json;
use weft_auth::InternalJwt;
use weft_core::{Error, ErrorCode, Principal, Scopes, TenantId};
use weft_proto::v1;
use weft_substrate::memory::{Memory, MemoryStore, Quotas, ScopeRef, SearchMode};
use weft_testkit::TestDb;

fn principal(tenant: &str, subject: &str, scopes: &str) -> Principal {
    Principal {
        tenant: TenantId::parse(tenant).unwrap(),
        subject: subject.into(),
        scopes: Scopes::parse_list(scopes).unwrap(),
        token_id: None,
        agent: None,
    }
}

fn user(tenant: &str, subject: &str) -> Principal {
    principal(tenant, subject, "memory:read,memory:write")
}

fn at<'a>(scope: &'a str, scope_id: &'a str) -> ScopeRef<'a> {
    ScopeRef { scope, scope_id }
}

async fn memory_with(quotas: Quotas) -> (TestDb, Memory) {
    let db = TestDb::new().await;
    let store = MemoryStore::new(db.pool.clone(), quotas);
    (db, Memory::new(store, None, SearchMode::Exact))
}

async fn memory() -> (TestDb, Memory) {
    memory_with(Quotas {
        tenant_bytes: 1 << 30,
        agent_bytes: 1 << 30,
    })
    .await
}

async fn insert_run(db: &TestDb, tenant: &str, subject: &str) -> uuid::Uuid {
    let id = uuid::Uuid::now_v7();
    sqlx::query(
        "INSERT INTO runs (id, tenant_id, subject, agent_name, agent_hash, root_run_id, status, spec)
         VALUES ($1, $2, $3, 'a', 'sha256:x', $1, 'queued', '{}'::jsonb)",
    )
    .bind(id)
    .bind(tenant)
    .bind(subject)
    .execute(&db.pool)
    .await
    .unwrap();
    id
}

/// Sets `key` to `value` with no options.
async fn set(
    m: &Memory,
    p: &Principal,
    r: ScopeRef<'_>,
    key: &str,
    value: &str,
) -> Result<i64, Error> {
    m.set(p, r, key, value, None, None, false, None, None)
        .await
        .map(|e| e.version)
}

fn code(r: Result<impl std::fmt::Debug, Error>) -> (ErrorCode, Option<String>, String) {
    let e = r.expect_err("expected an error");
    (e.code, e.param, e.message)
}

#[tokio::test(flavor = "multi_thread")]
async fn scopes_cannot_cross_users_runs_or_tenants() {
    let (db, m) = memory().await;
    let alice = user("acme", "alice");
    let acme_admin = principal("acme", "root", "tenant:admin");
    let mallory = user("evil", "mallory");
    let alice_run = insert_run(&db, "acme", "alice").await.to_string();
    let bob_run = insert_run(&db, "acme", "bob").await.to_string();
    let other_tenant_run = insert_run(&db, "evil", "alice").await.to_string();

    // Alice's own places work.
    for (scope, id) in [
        ("user", "alice"),
        ("tenant", "acme"),
        ("run", alice_run.as_str()),
        ("agent", "triage"),
    ] {
        assert_eq!(
            set(&m, &alice, at(scope, id), "k", "1").await.unwrap(),
            1,
            "{scope}"
        );
        assert_eq!(
            m.get(&alice, at(scope, id), "k").await.unwrap().value_json,
            "1"
        );
    }
    // Somebody else's: 404 on read and write, whether or not it exists.
    for (scope, id) in [
        ("user", "bob"),
        ("tenant", "evil"),
        ("run", bob_run.as_str()),
        ("run", other_tenant_run.as_str()),
        ("run", "not-a-run-id"),
    ] {
        let (c, _, msg) = code(m.get(&alice, at(scope, id), "k").await);
        assert_eq!(c, ErrorCode::NotFound, "{scope}/{id}: {msg}");
        let (c, _, _) = code(set(&m, &alice, at(scope, id), "k", "2").await);
        assert_eq!(c, ErrorCode::NotFound, "{scope}/{id}");
        let (c, _, _) = code(m.list(&alice, at(scope, id), "", None, 10).await);
        assert_eq!(c, ErrorCode::NotFound, "{scope}/{id}");
    }
    // A tenant admin reaches every user and run of the tenant, never another tenant.
    assert_eq!(
        set(&m, &acme_admin, at("user", "bob"), "k", "3")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        set(&m, &acme_admin, at("run", &bob_run), "k", "3")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        m.get(&acme_admin, at("user", "alice"), "k")
            .await
            .unwrap()
            .value_json,
        "1"
    );
    let (c, _, _) = code(m.get(&acme_admin, at("run", &other_tenant_run), "k").await);
    assert_eq!(c, ErrorCode::NotFound);
    let (c, _, _) = code(m.get(&acme_admin, at("tenant", "evil"), "k").await);
    assert_eq!(c, ErrorCode::NotFound);
    // Same scope names in another tenant are other data: mallory's agent/triage is empty, and
    // her own run with alice's subject name does not open alice's run in acme.
    let (c, _, _) = code(m.get(&mallory, at("agent", "triage"), "k").await);
    assert_eq!(c, ErrorCode::NotFound);
    let (c, _, _) = code(m.get(&mallory, at("run", &alice_run), "k").await);
    assert_eq!(c, ErrorCode::NotFound);
    let as_alice_elsewhere = user("evil", "alice");
    assert_eq!(
        m.get(&as_alice_elsewhere, at("run", &other_tenant_run), "k")
            .await
            .map(|e| e.version)
            .map_err(|e| e.code),
        Err(ErrorCode::NotFound),
        "nothing written there yet"
    );
    let (c, _, _) = code(m.get(&as_alice_elsewhere, at("user", "alice"), "k").await);
    assert_eq!(
        c,
        ErrorCode::NotFound,
        "alice@evil does not see alice@acme's user memory"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_entries_are_never_returned_and_the_sweep_returns_their_bytes() {
    let (_db, m) = memory().await;
    let p = user("acme", "alice");
    let t = at("user", "alice");
    let short = m
        .set(
            &p,
            t,
            "short",
            "\"soon gone\"",
            Some(1),
            None,
            false,
            None,
            None,
        )
        .await
        .unwrap();
    assert!(short.expires_at.is_some());
    set(&m, &p, t, "long", "1").await.unwrap();
    assert!(m.get(&p, t, "short").await.is_ok());
    let tenant = TenantId::parse("acme").unwrap();
    let before = m.store().usage(&tenant, None).await.unwrap();
    assert_eq!(
        before,
        ("short".len() + "\"soon gone\"".len() + "long".len() + 1) as i64
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match m.get(&p, t, "short").await {
            Err(e) if e.code == ErrorCode::NotFound => break,
            Ok(_) => {}
            Err(e) => panic!("{e:?}"),
        }
        assert!(Instant::now() < deadline, "the 1 s entry never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (entries, _) = m.list(&p, t, "", None, 10).await.unwrap();
    assert_eq!(
        entries.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["long"]
    );
    // Still counted until swept; the sweep deletes the row and gives its bytes back.
    assert_eq!(m.store().usage(&tenant, None).await.unwrap(), before);
    assert_eq!(m.store().sweep_expired(100).await.unwrap(), 1);
    assert_eq!(
        m.store().usage(&tenant, None).await.unwrap(),
        ("long".len() + 1) as i64
    );
    // A new entry at an expired key starts again at version 1.
    assert_eq!(set(&m, &p, t, "short", "2").await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_concurrent_increments_add_exactly_a_hundred() {
    let (_db, m) = memory().await;
    let p = user("acme", "alice");
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (m, p) = (m.clone(), p.clone());
        tasks.push(tokio::spawn(async move {
            m.incr(
                &p,
                at("tenant", "acme"),
                "hits",
                1,
                None,
                None,
                Some("counter"),
            )
            .await
            .unwrap()
        }));
    }
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.unwrap().value_json.parse::<i64>().unwrap());
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        (1..=100).collect::<Vec<_>>(),
        "each caller saw its own value"
    );
    let e = m.get(&p, at("tenant", "acme"), "hits").await.unwrap();
    assert_eq!((e.value_json.as_str(), e.version), ("100", 100));
    // A value that is not an integer is a conflict, not a reset.
    set(&m, &p, at("tenant", "acme"), "name", "\"x\"")
        .await
        .unwrap();
    let (c, _, msg) = code(
        m.incr(&p, at("tenant", "acme"), "name", 1, None, None, None)
            .await,
    );
    assert_eq!(c, ErrorCode::Conflict);
    assert!(msg.contains("not an integer"), "{msg}");
    let (c, _, _) = code(
        m.incr(&p, at("tenant", "acme"), "hits", i64::MAX, None, None, None)
            .await,
    );
    assert_eq!(c, ErrorCode::Conflict);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeated_op_key_returns_the_recorded_result_without_applying_twice() {
    let (_db, m) = memory().await;
    let p = user("acme", "alice");
    let t = at("user", "alice");
    let op = Some("run-1:call_0_0");
    let a = m.incr(&p, t, "n", 1, None, op, None).await.unwrap();
    let b = m.incr(&p, t, "n", 1, None, op, None).await.unwrap();
    assert_eq!(a, b);
    assert_eq!(m.get(&p, t, "n").await.unwrap().value_json, "1");
    // Concurrent repeats of one op key apply once too.
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (m, p) = (m.clone(), p.clone());
        tasks.push(tokio::spawn(async move {
            m.incr(
                &p,
                at("user", "alice"),
                "n",
                5,
                None,
                Some("run-1:call_1_0"),
                None,
            )
            .await
            .unwrap()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().value_json, "6");
    }
    // A set replayed after the value changed returns what it recorded, and changes nothing.
    let first = m
        .set(
            &p,
            t,
            "s",
            "\"one\"",
            None,
            None,
            false,
            Some("run-1:call_2_0"),
            None,
        )
        .await
        .unwrap();
    set(&m, &p, t, "s", "\"two\"").await.unwrap();
    let again = m
        .set(
            &p,
            t,
            "s",
            "\"one\"",
            None,
            None,
            false,
            Some("run-1:call_2_0"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(again, first);
    assert_eq!(m.get(&p, t, "s").await.unwrap().value_json, "\"two\"");
    // Deletes too.
    let d1 = m
        .delete(&p, t, "s", None, Some("run-1:call_3_0"), None)
        .await
        .unwrap();
    set(&m, &p, t, "s", "\"three\"").await.unwrap();
    let d2 = m
        .delete(&p, t, "s", None, Some("run-1:call_3_0"), None)
        .await
        .unwrap();
    assert_eq!(d1, d2);
    assert!(d1.deleted);
    assert_eq!(m.get(&p, t, "s").await.unwrap().value_json, "\"three\"");
    // An op key names one write: reusing it for another key is refused.
    let (c, param, _) = code(m.incr(&p, t, "other", 1, None, op, None).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("op_key"))
    );
    // Op keys are per tenant.
    let q = user("other", "alice");
    assert_eq!(
        m.incr(&q, at("user", "alice"), "n", 1, None, op, None)
            .await
            .unwrap()
            .value_json,
        "1"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn compare_and_set_and_delete_check_the_version() {
    let (_db, m) = memory().await;
    let p = user("acme", "alice");
    let t = at("agent", "triage");
    let cas = |v: &'static str, if_version: i64| {
        let (m, p) = (m.clone(), p.clone());
        async move {
            m.set(
                &p,
                at("agent", "triage"),
                "k",
                v,
                None,
                Some(if_version),
                false,
                None,
                None,
            )
            .await
        }
    };
    let (c, _, msg) = code(cas("1", 3).await);
    assert_eq!(c, ErrorCode::Conflict);
    assert!(msg.contains("does not exist"), "{msg}");
    assert_eq!(cas("1", 0).await.unwrap().version, 1);
    let (c, _, msg) = code(cas("2", 0).await);
    assert_eq!(c, ErrorCode::Conflict);
    assert!(msg.contains("version 1"), "{msg}");
    assert_eq!(cas("2", 1).await.unwrap().version, 2);
    let (c, _, msg) = code(cas("3", 1).await);
    assert_eq!(c, ErrorCode::Conflict);
    assert!(msg.contains("version 2"), "{msg}");
    assert_eq!(m.get(&p, t, "k").await.unwrap().value_json, "2");

    let (c, _, _) = code(m.delete(&p, t, "k", Some(1), None, None).await);
    assert_eq!(c, ErrorCode::Conflict);
    let d = m.delete(&p, t, "k", Some(2), None, None).await.unwrap();
    assert!(d.deleted);
    assert_eq!(d.version, 2);
    let d = m.delete(&p, t, "k", None, None, None).await.unwrap();
    assert!(!d.deleted);
    assert_eq!(code(m.get(&p, t, "k").await).0, ErrorCode::NotFound);
    // Two concurrent creators with if_version 0: exactly one wins.
    let (a, b) = tokio::join!(cas("\"a\"", 0), cas("\"b\"", 0));
    assert!(a.is_ok() != b.is_ok(), "{a:?} {b:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn list_pages_through_a_prefix_with_a_cursor() {
    let (_db, m) = memory().await;
    let p = user("acme", "alice");
    let t = at("user", "alice");
    for i in 0..25 {
        set(&m, &p, t, &format!("notes/{i:02}"), &i.to_string())
            .await
            .unwrap();
    }
    for k in ["notes", "notes0", "notez", "a", "notes/ü"] {
        set(&m, &p, t, k, "0").await.unwrap();
    }
    let mut keys = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let (entries, next) = m
            .list(&p, t, "notes/", cursor.as_deref(), 10)
            .await
            .unwrap();
        pages += 1;
        keys.extend(entries.into_iter().map(|e| e.key));
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let mut want: Vec<String> = (0..25).map(|i| format!("notes/{i:02}")).collect();
    want.push("notes/ü".into());
    assert_eq!(keys, want);
    assert_eq!(pages, 3);
    let (all, next) = m.list(&p, t, "", None, 1000).await.unwrap();
    assert_eq!(all.len(), 30);
    assert!(next.is_none());
    let (c, param, _) = code(m.list(&p, t, "", Some("garbage"), 10).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("cursor"))
    );
    let (c, param, _) = code(m.list(&p, t, "", None, 1001).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("limit"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_refuse_growth_and_stay_exact_under_concurrency() {
    let (_db, m) = memory_with(Quotas {
        tenant_bytes: 1000,
        agent_bytes: 300,
    })
    .await;
    let p = user("acme", "alice");
    let t = at("tenant", "acme");
    let tenant = TenantId::parse("acme").unwrap();
    let value = format!("\"{}\"", "x".repeat(96)); // 98 bytes + a 2-byte key = 100.
    // Agent quota: three entries of 100 bytes fit, the fourth does not.
    for i in 0..3 {
        m.set(
            &p,
            t,
            &format!("a{i}"),
            &value,
            None,
            None,
            false,
            None,
            Some("scout"),
        )
        .await
        .unwrap();
    }
    let (c, _, msg) = code(
        m.set(&p, t, "a3", &value, None, None, false, None, Some("scout"))
            .await,
    );
    assert_eq!(c, ErrorCode::Conflict);
    assert!(msg.contains("substrate.memory_agent_quota_bytes"), "{msg}");
    // Shrinking is always allowed; overwriting does not count twice.
    m.set(&p, t, "a0", "1", None, None, false, None, Some("scout"))
        .await
        .unwrap();
    assert_eq!(m.store().usage(&tenant, Some("scout")).await.unwrap(), 203);
    // Tenant quota under 20 concurrent writers of 100 bytes: exactly what fits is written.
    let mut tasks = Vec::new();
    for i in 0..20u8 {
        let (m, p, value) = (m.clone(), p.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            // Two-byte keys: k0..k9, l0..l9.
            let key = format!("{}{}", char::from(b'k' + i / 10), i % 10);
            m.set(
                &p,
                at("tenant", "acme"),
                &key,
                &value,
                None,
                None,
                false,
                None,
                None,
            )
            .await
        }));
    }
    let mut ok = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) => {
                assert_eq!(e.code, ErrorCode::Conflict);
                assert!(
                    e.message.contains("substrate.memory_tenant_quota_bytes"),
                    "{}",
                    e.message
                );
            }
        }
    }
    let used = m.store().usage(&tenant, None).await.unwrap();
    let sum: i64 = sqlx::query_scalar(
        "SELECT COALESCE(sum(bytes), 0)::bigint FROM memory_entries WHERE tenant_id = 'acme'",
    )
    .fetch_one(m.store().pool())
    .await
    .unwrap();
    assert_eq!(used, sum, "usage is the sum of the entries");
    assert!(used <= 1000, "{used}");
    assert!(
        ok >= 1 && used > 900,
        "the quota was filled: {ok} writes, {used} bytes"
    );
    // Deleting gives bytes back to the tenant and to the entry's agent.
    m.delete(&p, t, "a1", None, None, None).await.unwrap();
    assert_eq!(m.store().usage(&tenant, Some("scout")).await.unwrap(), 103);
    assert_eq!(m.store().usage(&tenant, None).await.unwrap(), used - 100);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_a_400_naming_the_field() {
    let (_db, m) = memory().await;
    let p = user("acme", "alice");
    let t = at("user", "alice");
    let big = format!("\"{}\"", "x".repeat(64 * 1024));
    let long_key = "k".repeat(513);
    let cases: Vec<(&str, Result<i64, Error>)> = vec![
        ("scope", set(&m, &p, at("global", "x"), "k", "1").await),
        ("scope_id", set(&m, &p, at("user", ""), "k", "1").await),
        (
            "scope_id",
            set(&m, &p, at("agent", "Not An Agent"), "k", "1").await,
        ),
        ("value", set(&m, &p, t, "k", &big).await),
        ("value", set(&m, &p, t, "k", "{not json").await),
        ("value", set(&m, &p, t, "k", "\"a\\u0000b\"").await),
        ("key", set(&m, &p, t, "", "1").await),
        ("key", set(&m, &p, t, &long_key, "1").await),
        ("key", set(&m, &p, t, "a\0b", "1").await),
        (
            "ttl_seconds",
            m.set(&p, t, "k", "1", Some(0), None, false, None, None)
                .await
                .map(|e| e.version),
        ),
        (
            "ttl_seconds",
            m.set(&p, t, "k", "1", Some(-5), None, false, None, None)
                .await
                .map(|e| e.version),
        ),
        (
            "ttl_seconds",
            m.incr(&p, t, "k", 1, Some(0), None, None)
                .await
                .map(|e| e.version),
        ),
        (
            "if_version",
            m.set(&p, t, "k", "1", None, Some(-1), false, None, None)
                .await
                .map(|e| e.version),
        ),
        (
            "op_key",
            m.set(&p, t, "k", "1", None, None, false, Some(""), None)
                .await
                .map(|e| e.version),
        ),
        (
            "agent",
            m.set(&p, t, "k", "1", None, None, false, None, Some("Bad Agent"))
                .await
                .map(|e| e.version),
        ),
    ];
    for (field, r) in cases {
        let (c, param, msg) = code(r);
        assert_eq!(c, ErrorCode::InvalidRequest, "{field}: {msg}");
        assert_eq!(param.as_deref(), Some(field), "{msg}");
    }
    // Exactly 64 KiB is fine.
    let fits = format!("\"{}\"", "x".repeat(64 * 1024 - 2));
    assert_eq!(set(&m, &p, t, "big", &fits).await.unwrap(), 1);
    // Search without a router is refused clearly, after validation.
    let (c, param, _) = code(m.search(&p, t, "q", 101).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("top_k"))
    );
    let (c, _, msg) = code(m.search(&p, t, "q", 5).await);
    assert_eq!(c, ErrorCode::Unavailable, "{msg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_needs_the_memory_scopes() {
    let (db, m) = memory().await;
    let jwt = InternalJwt::from_secret(b"test-secret-test-secret-test-secret");
    let defs = weft_substrate::DefStore::new(db.pool.clone());
    let hub = common::channels(&defs, &db.name).await;
    let transport = weft_proto::transport::in_process(weft_substrate::grpc_service(
        &common::assemble(defs, m, hub),
        jwt.clone(),
    ));
    let mut client = weft_proto::transport::memory_client(transport);
    let req = |scopes: &str, msg: v1::MemorySetRequest| {
        let mut r = tonic::Request::new(msg);
        let token = jwt.sign(&principal("acme", "alice", scopes)).unwrap();
        r.metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        r
    };
    let body = v1::MemorySetRequest {
        scope: "user".into(),
        scope_id: "alice".into(),
        key: "k".into(),
        value_json: json!({"a": [1, 2]}).to_string(),
        ..Default::default()
    };
    let denied = client
        .set(req("memory:read", body.clone()))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    let e = client
        .set(req("memory:write", body))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((e.version, e.value_json.as_str()), (1, "{\"a\":[1,2]}"));
    let mut get = tonic::Request::new(v1::MemoryGetRequest {
        scope: "user".into(),
        scope_id: "alice".into(),
        key: "k".into(),
    });
    let token = jwt
        .sign(&principal("acme", "alice", "memory:write"))
        .unwrap();
    get.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    assert_eq!(
        client.get(get).await.unwrap_err().code(),
        tonic::Code::PermissionDenied
    );
    // No token at all.
    let anon = client
        .get(tonic::Request::new(v1::MemoryGetRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(anon.code(), tonic::Code::Unauthenticated);
}
