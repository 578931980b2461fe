//! Skills in the substrate against a real Postgres: the generic store with a second kind
//! (versions, no new version for the same content, kinds kept apart), the Def and Skill RPCs
//! (scopes, tenants, the `kind` check), boot loading from `substrate.skills_dir` with the hash
//! `weft hash skill` prints, and the migration that turned agent_defs into defs.
//!
//! Multi-thread runtime: `TestDb`'s drop closes its pool from another thread (see defs.rs).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use serde_json::json;
use weft_auth::InternalJwt;
use weft_config::SubstrateConfig;
use weft_core::agent::AgentContent;
use weft_core::def::{DefContent as _, DefKind};
use weft_core::skill::SkillContent;
use weft_core::{ErrorCode, Principal, Scopes, TenantId};
use weft_proto::v1;
use weft_proto::v1::substrate_client::SubstrateClient;
use weft_substrate::{DefStore, agents, defs};
use weft_testkit::TestDb;

fn tenant(s: &str) -> TenantId {
    TenantId::parse(s).unwrap()
}

fn skill(v: serde_json::Value) -> SkillContent {
    SkillContent::from_json(v).unwrap()
}

async fn store() -> (TestDb, DefStore) {
    let db = TestDb::new().await;
    let store = DefStore::new(db.pool.clone());
    (db, store)
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-skills-{tag}-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn skills_version_like_agents_and_kinds_stay_apart() {
    let (_db, s) = store().await;
    let t = tenant("acme");
    let one = skill(json!({"description": "d", "body": "one"}));
    let a = defs::put(&s, &t, "notes", &one, None).await.unwrap();
    assert!(a.created);
    assert_eq!(a.version.number, 1);
    assert_eq!(a.version.hash, one.hash());
    let again = defs::put(&s, &t, "notes", &one, None).await.unwrap();
    assert!(!again.created, "the same content makes no new version");
    let two = skill(json!({"description": "d", "body": "two"}));
    let b = defs::put(&s, &t, "notes", &two, None).await.unwrap();
    assert_eq!(b.version.number, 2);
    assert_eq!(
        b.version.parent_version.as_deref(),
        Some(a.version.hash.as_str())
    );

    // An agent of the same name is another definition.
    let agent = AgentContent::from_json(json!({"system_prompt": "x"})).unwrap();
    let ag = agents::put_agent(&s, &t, "notes", &agent, None)
        .await
        .unwrap();
    assert!(ag.created);
    assert_eq!(ag.version.number, 1);
    assert_eq!(
        s.versions(DefKind::Skill, &t, "notes").await.unwrap().len(),
        2
    );
    assert_eq!(agents::list_agents(&s, &t).await.unwrap().len(), 1);
    // A skill hash is not an agent version, and the other way round.
    assert!(
        agents::verify_agent(&s, &t, &b.version.hash)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        defs::verify(&s, DefKind::Skill, &t, &ag.version.hash)
            .await
            .unwrap()
            .is_none()
    );
    // Another tenant does not see it.
    let e = defs::get(&s, DefKind::Skill, &tenant("beta"), "notes", None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    assert!(e.message.starts_with("no skill `notes`"), "{}", e.message);

    // Fork, retire, activate.
    let f = defs::fork::<SkillContent>(&s, &t, "notes", Some("1"), r#"{"body": "three"}"#, None)
        .await
        .unwrap();
    assert_eq!(f.version.number, 3);
    assert_eq!(
        f.version.parent_version.as_deref(),
        Some(a.version.hash.as_str())
    );
    let e = defs::fork::<SkillContent>(&s, &t, "notes", None, r#"{"files": {".x": "y"}}"#, None)
        .await
        .unwrap_err();
    assert_eq!(
        e.param.as_deref(),
        Some("changes.files..x"),
        "{}",
        e.message
    );
    let r = defs::retire(&s, DefKind::Skill, &t, "notes").await.unwrap();
    assert!(r.retired);
    assert!(
        !agents::get_agent(&s, &t, "notes", None)
            .await
            .unwrap()
            .retired,
        "retiring the skill leaves the agent alone"
    );
    let act = defs::activate(&s, DefKind::Skill, &t, "notes", "2")
        .await
        .unwrap();
    assert!(!act.retired);
    assert_eq!(act.active_version, b.version.hash);
}

fn request<T>(jwt: &InternalJwt, tenant_slug: &str, scopes: &str, msg: T) -> tonic::Request<T> {
    let p = Principal {
        tenant: tenant(tenant_slug),
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
async fn skill_rpcs_decode_content_and_check_scopes_tenants_and_kind() {
    let (db, s) = store().await;
    let jwt = InternalJwt::from_secret(b"test-secret-test-secret-test-secret");
    let transport = weft_proto::transport::in_process(weft_substrate::grpc_service(
        &common::parts(s, &db.name).await,
        jwt.clone(),
    ));
    let mut client = SubstrateClient::new(transport);
    let kind = v1::DefKind::Skill as i32;
    let put = |scopes: &str| {
        request(
            &jwt,
            "acme",
            scopes,
            v1::PutDefRequest {
                kind,
                name: "pdf".into(),
                content_json: json!({"description": "Read PDFs", "body": "Open it.",
                                     "files": {"ref.md": "r"}})
                .to_string(),
            },
        )
    };
    let e = client.put_def(put("runs:create")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let r = client
        .put_def(put("tenant:admin"))
        .await
        .unwrap()
        .into_inner();
    assert!(r.created);
    let hash = r.version.unwrap().hash;

    let get = |tenant_slug: &str, scopes: &str| {
        request(
            &jwt,
            tenant_slug,
            scopes,
            v1::GetSkillRequest {
                name: "pdf".into(),
                version: None,
            },
        )
    };
    let got = client
        .get_skill(get("acme", "runs:create"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.name, "pdf");
    assert_eq!(got.hash, hash);
    assert_eq!(got.number, 1);
    assert_eq!(got.description, "Read PDFs");
    assert_eq!(got.body, "Open it.");
    assert_eq!(got.files.get("ref.md").map(String::as_str), Some("r"));
    assert!(got.active && !got.retired);
    let e = client.get_skill(get("acme", "llm:call")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let e = client
        .get_skill(get("beta", "tenant:admin"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);

    let list = client
        .list_skills(request(&jwt, "acme", "runs:read", v1::ListSkillsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.skills.len(), 1);
    assert_eq!(list.skills[0].name, "pdf");
    assert_eq!(list.skills[0].description, "Read PDFs");
    assert_eq!(list.skills[0].active_version, hash);
    let list = client
        .list_skills(request(&jwt, "beta", "runs:read", v1::ListSkillsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(list.skills.is_empty());

    // The Def RPCs need a kind; the skill is not an agent.
    let e = client
        .list_defs(request(
            &jwt,
            "acme",
            "runs:read",
            v1::ListDefsRequest { kind: 0 },
        ))
        .await
        .unwrap_err();
    let err = weft_core::Error::from(&e);
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert_eq!(err.param.as_deref(), Some("kind"));
    let e = client
        .get_agent(request(
            &jwt,
            "acme",
            "runs:read",
            v1::GetAgentRequest {
                name: "pdf".into(),
                version: None,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);

    // Bad content names the field.
    let mut bad = put("tenant:admin");
    bad.get_mut().content_json = json!({"description": "d", "body": ""}).to_string();
    let e = client.put_def(bad).await.unwrap_err();
    let err = weft_core::Error::from(&e);
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert_eq!(err.param.as_deref(), Some("body"));
}

#[tokio::test(flavor = "multi_thread")]
async fn skills_load_at_boot_with_the_hash_of_their_folder() {
    let (_db, s) = store().await;
    let dir = temp_dir("boot");
    let pdf = dir.join("pdf");
    std::fs::create_dir_all(pdf.join("docs")).unwrap();
    std::fs::write(
        pdf.join("SKILL.md"),
        "---\nname: pdf\ndescription: Read PDFs\n---\n\nOpen the file.\n",
    )
    .unwrap();
    std::fs::write(pdf.join("docs/forms.md"), "forms").unwrap();
    let cfg = SubstrateConfig {
        skills_dir: Some(dir.clone()),
        boot_tenant: "ops".into(),
        ..SubstrateConfig::default()
    };
    let first = weft_substrate::load_boot_definitions(&s, &cfg)
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].kind, DefKind::Skill);
    assert!(first[0].created);
    assert_eq!(
        first[0].version,
        weft_substrate::hash_skill_dir(&pdf).unwrap()
    );
    let stored = defs::get(&s, DefKind::Skill, &tenant("ops"), "pdf", None)
        .await
        .unwrap();
    assert_eq!(stored.hash, first[0].version);
    let content = SkillContent::from_json_str(&stored.content_json).unwrap();
    assert_eq!(content.body, "Open the file.");
    assert_eq!(
        content.files.get("docs/forms.md").map(String::as_str),
        Some("forms")
    );
    let second = weft_substrate::load_boot_definitions(&s, &cfg)
        .await
        .unwrap();
    assert!(!second[0].created);

    // A name that differs from the folder fails loudly, naming both, and writes nothing.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("SKILL.md"),
        "---\nname: not-other\ndescription: d\n---\nb\n",
    )
    .unwrap();
    let err = weft_substrate::load_boot_definitions(&s, &cfg)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`not-other`") && err.contains("`other`"),
        "{err}"
    );
    // A folder without SKILL.md, and an invalid field, fail naming the folder or the field.
    std::fs::remove_file(other.join("SKILL.md")).unwrap();
    let err = weft_substrate::load_boot_definitions(&s, &cfg)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("other") && err.contains("SKILL.md"), "{err}");
    std::fs::write(other.join("SKILL.md"), "---\nname: other\n---\nb\n").unwrap();
    let err = weft_substrate::load_boot_definitions(&s, &cfg)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("`description`"), "{err}");
    assert_eq!(
        defs::list(&s, DefKind::Skill, &tenant("ops"))
            .await
            .unwrap()
            .len(),
        1
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_defs_migration_keeps_existing_agents() {
    let db = TestDb::new().await;
    // Back to the tables as they were before the defs migration.
    sqlx::raw_sql("DROP TABLE defs, def_versions CASCADE")
        .execute(&db.pool)
        .await
        .unwrap();
    let sql = |version: i64| {
        weft_store::MIGRATOR
            .iter()
            .find(|m| m.version == version)
            .expect("the migration exists")
            .sql
            .clone()
    };
    sqlx::raw_sql(sql(20261122000003))
        .execute(&db.pool)
        .await
        .unwrap();
    let c = AgentContent::from_json(json!({"system_prompt": "old"})).unwrap();
    let hash = c.hash();
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO agent_defs (tenant_id, name, active_version, version_count, description) \
         VALUES ('acme', 'old', $1, 1, '')",
    )
    .bind(&hash)
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO agent_def_versions (tenant_id, name, number, hash, content_json, created_by) \
         VALUES ('acme', 'old', 1, $1, $2, 'boot')",
    )
    .bind(&hash)
    .bind(c.canonical_json())
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();

    sqlx::raw_sql(sql(20261123000030))
        .execute(&db.pool)
        .await
        .unwrap();
    let s = DefStore::new(db.pool.clone());
    let t = tenant("acme");
    let got = agents::get_agent(&s, &t, "old", None).await.unwrap();
    assert_eq!(got.hash, hash);
    assert_eq!(got.number, 1);
    assert_eq!(got.created_by.as_deref(), Some("boot"));
    let again = agents::put_agent(&s, &t, "old", &c, None).await.unwrap();
    assert!(!again.created, "the migrated version is found by its hash");
    let next = agents::put_agent(
        &s,
        &t,
        "old",
        &AgentContent::from_json(json!({"system_prompt": "new"})).unwrap(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(next.version.number, 2);
    assert!(
        defs::list(&s, DefKind::Skill, &t).await.unwrap().is_empty(),
        "migrated rows are agents"
    );
}
