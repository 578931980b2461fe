//! The substrate against a real Postgres: versioning, lineage, concurrency, tenant isolation,
//! boot loading, and the gRPC scope checks.
//!
//! The tests use the multi-thread runtime: `TestDb`'s drop closes its pool from another thread
//! while blocking this one, and on a current-thread runtime nothing would drive the pool's
//! sockets meanwhile.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::collections::BTreeMap;

use serde_json::json;
use weft_auth::InternalJwt;
use weft_config::SubstrateConfig;
use weft_core::agent::AgentContent;
use weft_core::def::DefKind;
use weft_core::{ErrorCode, Principal, Scopes, TenantId};
use weft_proto::v1;
use weft_proto::v1::substrate_client::SubstrateClient;
use weft_substrate::{DefStore, agents};
use weft_testkit::TestDb;

fn tenant(s: &str) -> TenantId {
    TenantId::parse(s).unwrap()
}

fn content(v: serde_json::Value) -> AgentContent {
    AgentContent::from_json(v).unwrap()
}

async fn store() -> (TestDb, DefStore) {
    let db = TestDb::new().await;
    let store = DefStore::new(db.pool.clone());
    (db, store)
}

#[tokio::test(flavor = "multi_thread")]
async fn same_content_keeps_its_version_and_changes_chain_to_the_parent() {
    let (_db, s) = store().await;
    let t = tenant("acme");
    let v1 = content(json!({"system_prompt": "one"}));
    let a = agents::put_agent(&s, &t, "triage", &v1, None)
        .await
        .unwrap();
    assert!(a.created);
    assert_eq!(a.version.number, 1);
    assert_eq!(a.version.parent_version, None);
    assert_eq!(a.version.hash, v1.hash());

    let again = agents::put_agent(&s, &t, "triage", &v1, None)
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.version.hash, a.version.hash);
    assert_eq!(again.version.number, 1);

    let v2 = content(json!({"system_prompt": "two"}));
    let b = agents::put_agent(&s, &t, "triage", &v2, None)
        .await
        .unwrap();
    assert!(b.created);
    assert_eq!(b.version.number, 2);
    assert_eq!(
        b.version.parent_version.as_deref(),
        Some(a.version.hash.as_str())
    );
    assert_eq!(
        s.versions(DefKind::Agent, &t, "triage")
            .await
            .unwrap()
            .len(),
        2
    );

    // Putting v1's content again makes v1 active without a new row.
    let back = agents::put_agent(&s, &t, "triage", &v1, None)
        .await
        .unwrap();
    assert!(!back.created);
    assert_eq!(back.version.number, 1);
    let active = agents::get_agent(&s, &t, "triage", None).await.unwrap();
    assert_eq!(active.hash, a.version.hash);
    assert!(active.active);
    let pinned = agents::get_agent(&s, &t, "triage", Some("2"))
        .await
        .unwrap();
    assert_eq!(pinned.hash, b.version.hash);
    assert!(!pinned.active);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_puts_of_one_name_get_distinct_consecutive_numbers() {
    let (_db, s) = store().await;
    let t = tenant("acme");
    let puts = (0..12).map(|i| {
        let s = s.clone();
        let t = t.clone();
        tokio::spawn(async move {
            let c = content(json!({"system_prompt": format!("prompt {i}")}));
            agents::put_agent(&s, &t, "busy", &c, None).await.unwrap()
        })
    });
    let results = futures::future::join_all(puts).await;
    assert!(results.iter().all(|r| r.as_ref().unwrap().created));
    let versions = s.versions(DefKind::Agent, &t, "busy").await.unwrap();
    let numbers: Vec<u32> = versions.iter().map(|v| v.number).collect();
    assert_eq!(numbers, (1..=12).collect::<Vec<_>>());
    // Lineage is a chain: each version's parent is the one before it.
    assert_eq!(versions[0].parent_version, None);
    for pair in versions.windows(2) {
        assert_eq!(
            pair[1].parent_version.as_deref(),
            Some(pair[0].hash.as_str())
        );
    }
    let summary = s
        .summary(DefKind::Agent, &t, "busy")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(summary.versions, 12);

    // The same content put concurrently to a new name makes exactly one version.
    let same = (0..8).map(|_| {
        let s = s.clone();
        let t = t.clone();
        tokio::spawn(async move {
            let c = content(json!({"system_prompt": "same"}));
            agents::put_agent(&s, &t, "same", &c, None).await.unwrap()
        })
    });
    let results = futures::future::join_all(same).await;
    let created = results
        .iter()
        .filter(|r| r.as_ref().unwrap().created)
        .count();
    assert_eq!(created, 1);
    assert_eq!(
        s.versions(DefKind::Agent, &t, "same").await.unwrap().len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_do_not_see_each_others_definitions() {
    let (_db, s) = store().await;
    let (a, b) = (tenant("acme"), tenant("beta"));
    let c = content(json!({"system_prompt": "secret"}));
    let put = agents::put_agent(&s, &a, "mine", &c, None).await.unwrap();
    let e = agents::get_agent(&s, &b, "mine", None).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    let e = agents::get_agent(&s, &b, "mine", Some(&put.version.hash))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    assert!(agents::list_agents(&s, &b).await.unwrap().is_empty());
    assert!(
        agents::verify_agent(&s, &b, &put.version.hash)
            .await
            .unwrap()
            .is_none()
    );
    let e = agents::retire_agent(&s, &b, "mine").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    let e = agents::fork_agent(&s, &b, "copy", Some(&put.version.hash), "{}", None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    // The same name in another tenant is another agent.
    let other = agents::put_agent(&s, &b, "mine", &c, None).await.unwrap();
    assert!(other.created);
    assert_eq!(other.version.number, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn forks_retire_activate_and_verify() {
    let (_db, s) = store().await;
    let t = tenant("acme");
    let base = content(json!({"system_prompt": "base", "sampling": {"temperature": 0.5}}));
    let v1 = agents::put_agent(&s, &t, "a", &base, None).await.unwrap();
    let v2 = agents::put_agent(&s, &t, "a", &content(json!({"system_prompt": "v2"})), None)
        .await
        .unwrap();

    // Fork from v1 (not the active v2): the parent is v1.
    let f = agents::fork_agent(
        &s,
        &t,
        "a",
        Some(&v1.version.hash),
        r#"{"max_iterations": 3, "sampling": {"seed": 9}}"#,
        None,
    )
    .await
    .unwrap();
    assert!(f.created);
    assert_eq!(f.version.number, 3);
    assert_eq!(
        f.version.parent_version.as_deref(),
        Some(v1.version.hash.as_str())
    );
    let forked = AgentContent::from_json_str(&f.version.content_json).unwrap();
    assert_eq!(forked.max_iterations, 3);
    assert_eq!(forked.system_prompt, "base");
    assert_eq!(forked.sampling.temperature, Some(0.5));
    assert_eq!(forked.sampling.seed, Some(9));

    // A fork with invalid changes names the field under `changes`.
    let e = agents::fork_agent(&s, &t, "a", None, r#"{"max_iterations": 0}"#, None)
        .await
        .unwrap_err();
    assert_eq!(e.param.as_deref(), Some("changes.max_iterations"));

    // A fork of another agent's version starts a new name.
    let g = agents::fork_agent(
        &s,
        &t,
        "b",
        Some(&v2.version.hash),
        r#"{"description": "b"}"#,
        None,
    )
    .await
    .unwrap();
    assert_eq!(g.version.number, 1);
    assert_eq!(
        g.version.parent_version.as_deref(),
        Some(v2.version.hash.as_str())
    );

    // Retire, then activate v2 by number: un-retired and pointing at v2.
    let r = agents::retire_agent(&s, &t, "a").await.unwrap();
    assert!(r.retired);
    assert!(agents::get_agent(&s, &t, "a", None).await.unwrap().retired);
    let act = agents::activate_agent(&s, &t, "a", "2").await.unwrap();
    assert!(!act.retired);
    assert_eq!(act.active_version, v2.version.hash);
    let e = agents::activate_agent(&s, &t, "a", &g.version.hash)
        .await
        .unwrap_err();
    assert_eq!(
        e.code,
        ErrorCode::NotFound,
        "b's version is not a version of a"
    );
    let e = agents::activate_agent(&s, &t, "a", "nope")
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidRequest);

    // A put to a retired name un-retires it.
    agents::retire_agent(&s, &t, "a").await.unwrap();
    let p = agents::put_agent(&s, &t, "a", &base, None).await.unwrap();
    assert!(!p.created);
    assert!(
        !s.summary(DefKind::Agent, &t, "a")
            .await
            .unwrap()
            .unwrap()
            .retired
    );

    let known = agents::verify_agent(&s, &t, &f.version.hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((known.name.as_str(), known.number), ("a", 3));
    let unknown = AgentContent::default().hash();
    assert!(
        agents::verify_agent(&s, &t, &unknown)
            .await
            .unwrap()
            .is_none()
    );
    let e = agents::verify_agent(&s, &t, "sha256:nope")
        .await
        .unwrap_err();
    assert_eq!(e.param.as_deref(), Some("sha256"));
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-substrate-{tag}-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn boot_definitions_load_idempotently_and_fail_loudly() {
    let (_db, s) = store().await;
    let dir = temp_dir("boot");
    std::fs::write(
        dir.join("triage.md"),
        "---\ndescription: triage\ntier: fast\n---\nYou triage.\n",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
    let mut agents_map = BTreeMap::new();
    agents_map.insert(
        "inline".to_owned(),
        json!({"system_prompt": "inline", "max_iterations": 4}),
    );
    let cfg = SubstrateConfig {
        agents_dir: Some(dir.clone()),
        agents: agents_map,
        boot_tenant: "ops".into(),
        ..SubstrateConfig::default()
    };
    let first = weft_substrate::load_boot_definitions(&s, &cfg)
        .await
        .unwrap();
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|l| l.created));
    let second = weft_substrate::load_boot_definitions(&s, &cfg)
        .await
        .unwrap();
    assert!(second.iter().all(|l| !l.created));
    assert_eq!(
        first.iter().map(|l| &l.version).collect::<Vec<_>>(),
        second.iter().map(|l| &l.version).collect::<Vec<_>>()
    );
    let t = tenant("ops");
    assert_eq!(agents::list_agents(&s, &t).await.unwrap().len(), 2);

    // An invalid file fails naming the file and the field, and writes nothing.
    std::fs::write(dir.join("broken.md"), "---\nmax_iterations: 0\n---\nx\n").unwrap();
    let err = weft_substrate::load_boot_definitions(&s, &cfg)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("broken.md") && err.contains("max_iterations"),
        "{err}"
    );
    std::fs::remove_file(dir.join("broken.md")).unwrap();

    // A name defined twice is refused.
    let mut dup = cfg.clone();
    dup.agents.insert("triage".into(), json!({}));
    let err = weft_substrate::load_boot_definitions(&s, &dup)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("defined twice"), "{err}");
    let mut bad = cfg.clone();
    bad.agents.insert("x".into(), json!({"tools": [""]}));
    let err = weft_substrate::load_boot_definitions(&s, &bad)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("substrate.agents.x") && err.contains("tools[0]"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn request<T>(jwt: &InternalJwt, scopes: &str, msg: T) -> tonic::Request<T> {
    let p = Principal {
        tenant: tenant("acme"),
        subject: "s".into(),
        scopes: Scopes::parse_list(scopes).unwrap(),
        token_id: None,
        agent: None,
    };
    let mut req = tonic::Request::new(msg);
    let token = jwt.sign(&p).unwrap();
    req.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    req
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_checks_scopes_and_the_internal_token() {
    let (db, s) = store().await;
    let jwt = InternalJwt::from_secret(b"test-secret-test-secret-test-secret");
    let transport = weft_proto::transport::in_process(weft_substrate::grpc_service(
        &common::parts(s, &db.name).await,
        jwt.clone(),
    ));
    let mut client = SubstrateClient::new(transport);
    let put = |scopes: &str| {
        request(
            &jwt,
            scopes,
            v1::PutAgentRequest {
                name: "g".into(),
                content_json: r#"{"system_prompt":"hi"}"#.into(),
            },
        )
    };
    let get = |scopes: &str| {
        request(
            &jwt,
            scopes,
            v1::GetAgentRequest {
                name: "g".into(),
                version: None,
            },
        )
    };
    let e = client.put_agent(put("runs:create")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let r = client
        .put_agent(put("tenant:admin"))
        .await
        .unwrap()
        .into_inner();
    assert!(r.created);
    let v = r.version.unwrap();
    assert_eq!(v.number, 1);
    assert_eq!(
        AgentContent::from_json_str(&v.content_json)
            .unwrap()
            .system_prompt,
        "hi"
    );

    let got = client
        .get_agent(get("runs:create"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.hash, v.hash);
    client.get_agent(get("runs:read")).await.unwrap();
    let e = client.get_agent(get("llm:call")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);

    let mut bad = put("admin");
    bad.get_mut().content_json = r#"{"max_iterations": 0}"#.into();
    let e = client.put_agent(bad).await.unwrap_err();
    let err = weft_core::Error::from(&e);
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert_eq!(err.param.as_deref(), Some("max_iterations"));

    let mut unsigned = tonic::Request::new(v1::ListAgentsRequest {});
    unsigned
        .metadata_mut()
        .insert("authorization", "Bearer nope".parse().unwrap());
    let e = client.list_agents(unsigned).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
}
