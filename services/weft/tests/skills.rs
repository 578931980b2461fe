//! Skills through the public API: the same routes and rules as agents (versions and lineage,
//! forks, retire/activate, verify), their own validation, tenant isolation and scopes, boot
//! loading from `substrate.skills_dir`, and `weft hash skill`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::TestFleet;
use serde_json::{Value, json};

async fn put(f: &TestFleet, name: &str, token: &str, body: Value) -> (u16, Value) {
    f.put(&format!("/v1/skills/{name}"), token, body).await
}

/// A token of `tenant` with `scopes`, minted by the bootstrap admin.
async fn token(f: &TestFleet, tenant: &str, scopes: &[&str]) -> String {
    let (s, t) = f.mint(&f.admin, tenant, scopes).await;
    assert_eq!(s, 201, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

fn temp_dir(f: &TestFleet, tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{}-{tag}", f.db.name));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn skills_version_fork_retire_activate_and_verify_like_agents() {
    let f = TestFleet::start().await;
    let body = json!({"description": "Fill PDF forms", "body": "List the fields, then fill them."});
    let (s, v1) = put(&f, "pdf-forms", &f.admin, body.clone()).await;
    assert_eq!(s, 201, "{v1}");
    assert_eq!(v1["created"], true);
    assert_eq!(v1["number"], 1);
    assert_eq!(v1["parent_version"], Value::Null);
    assert_eq!(
        v1["content"]["files"],
        json!({}),
        "defaults are materialised"
    );
    let h1 = v1["version"].as_str().unwrap().to_owned();
    assert!(h1.starts_with("sha256:") && h1.len() == 71, "{h1}");

    // The same content, keys reordered and the default spelt out: the same version.
    let (s, again) = put(
        &f,
        "pdf-forms",
        &f.admin,
        json!({"files": {}, "body": "List the fields, then fill them.", "description": "Fill PDF forms"}),
    )
    .await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["created"], false);
    assert_eq!(again["version"], h1.as_str());

    let (s, v2) = put(
        &f,
        "pdf-forms",
        &f.admin,
        json!({"description": "Fill PDF forms", "body": "Fill them.",
               "files": {"reference.md": "Names are case-sensitive."}}),
    )
    .await;
    assert_eq!(s, 201, "{v2}");
    assert_eq!(v2["number"], 2);
    assert_eq!(v2["parent_version"], h1.as_str());
    let h2 = v2["version"].as_str().unwrap().to_owned();

    let (s, versions) = f.get("/v1/skills/pdf-forms/versions", &f.admin).await;
    assert_eq!(s, 200, "{versions}");
    assert_eq!(versions["data"].as_array().unwrap().len(), 2);
    let (_, active) = f.get("/v1/skills/pdf-forms", &f.admin).await;
    assert_eq!(active["version"], h2.as_str());
    assert_eq!(
        active["content"]["files"]["reference.md"],
        "Names are case-sensitive."
    );
    let (s, pinned) = f.get("/v1/skills/pdf-forms?version=1", &f.admin).await;
    assert_eq!(s, 200, "{pinned}");
    assert_eq!(pinned["version"], h1.as_str());

    // Skills and agents are separate kinds: the agent routes do not see the skill.
    let (s, e) = f.get("/v1/agents/pdf-forms", &f.admin).await;
    assert_eq!(s, 404, "{e}");
    let (_, agents) = f.get("/v1/agents", &f.admin).await;
    assert_eq!(agents["data"], json!([]));

    // Fork: changes merge over the source; a fork from another skill's hash starts a new name.
    let (s, forked) = f
        .post(
            "/v1/skills/pdf-forms/fork",
            &f.admin,
            json!({"changes": {"description": "Fill PDF forms, carefully"}}),
        )
        .await;
    assert_eq!(s, 201, "{forked}");
    assert_eq!(forked["number"], 3);
    assert_eq!(forked["parent_version"], h2.as_str());
    assert_eq!(forked["content"]["body"], "Fill them.");
    let (s, new_name) = f
        .post(
            "/v1/skills/pdf-quick/fork",
            &f.admin,
            json!({"from_version": h1, "changes": {"body": "Be quick."}}),
        )
        .await;
    assert_eq!(s, 201, "{new_name}");
    assert_eq!(new_name["number"], 1);
    assert_eq!(new_name["parent_version"], h1.as_str());
    let (s, e) = f
        .post(
            "/v1/skills/pdf-forms/fork",
            &f.admin,
            json!({"changes": {"body": ""}}),
        )
        .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "changes.body", "{e}");

    // Retire, then activate an older version (which un-retires).
    let (s, retired) = f
        .post("/v1/skills/pdf-forms/retire", &f.admin, json!({}))
        .await;
    assert_eq!(s, 200, "{retired}");
    assert_eq!(retired["retired"], true);
    let (s, activated) = f
        .post(
            "/v1/skills/pdf-forms/activate",
            &f.admin,
            json!({"version": 1}),
        )
        .await;
    assert_eq!(s, 200, "{activated}");
    assert_eq!(activated["retired"], false);
    assert_eq!(activated["active_version"], h1.as_str());
    assert_eq!(activated["description"], "Fill PDF forms");

    // Verify: a skill hash is known; an agent's hash is not a skill.
    let (s, known) = f
        .post("/v1/skills/verify", &f.admin, json!({"sha256": h2}))
        .await;
    assert_eq!(s, 200, "{known}");
    assert_eq!(
        known,
        json!({"known": true, "name": "pdf-forms", "number": 2})
    );
    let (s, agent) = f
        .put(
            "/v1/agents/helper",
            &f.admin,
            json!({"system_prompt": "help"}),
        )
        .await;
    assert_eq!(s, 201, "{agent}");
    let (_, unknown) = f
        .post(
            "/v1/skills/verify",
            &f.admin,
            json!({"sha256": agent["version"]}),
        )
        .await;
    assert_eq!(unknown["known"], false, "{unknown}");

    let (s, list) = f.get("/v1/skills", &f.admin).await;
    assert_eq!(s, 200, "{list}");
    let names: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pdf-forms", "pdf-quick"]);
    f.stop().await;
}

#[tokio::test]
async fn skills_are_tenant_scoped_need_scopes_and_name_bad_fields() {
    let f = TestFleet::start().await;
    let acme_admin = token(&f, "acme", &["tenant:admin"]).await;
    let beta_admin = token(&f, "beta", &["tenant:admin"]).await;
    let acme_reader = token(&f, "acme", &["runs:read"]).await;
    let acme_llm = token(&f, "acme", &["llm:call"]).await;
    let (s, v) = put(
        &f,
        "secret",
        &acme_admin,
        json!({"description": "acme only", "body": "acme's instructions"}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let hash = v["version"].as_str().unwrap().to_owned();

    // Another tenant: 404, never 403, and nothing leaks.
    for path in ["/v1/skills/secret", "/v1/skills/secret/versions"] {
        let (s, e) = f.get(path, &beta_admin).await;
        assert_eq!(s, 404, "{path}: {e}");
        assert!(!e.to_string().contains("acme's instructions"), "{e}");
    }
    let (s, e) = f
        .post("/v1/skills/secret/retire", &beta_admin, json!({}))
        .await;
    assert_eq!(s, 404, "{e}");
    let (_, list) = f.get("/v1/skills", &beta_admin).await;
    assert_eq!(list["data"], json!([]));
    let (_, verify) = f
        .post("/v1/skills/verify", &beta_admin, json!({"sha256": hash}))
        .await;
    assert_eq!(verify["known"], false);

    // Scopes: readers read, only admins write, other scopes neither.
    let (s, _) = f.get("/v1/skills/secret", &acme_reader).await;
    assert_eq!(s, 200);
    let (s, e) = put(
        &f,
        "secret",
        &acme_reader,
        json!({"description": "d", "body": "b"}),
    )
    .await;
    assert_eq!(s, 403, "{e}");
    let (s, e) = f.get("/v1/skills", &acme_llm).await;
    assert_eq!(s, 403, "{e}");

    // Bad input: a 400 naming the field.
    for (body, param) in [
        (json!({"body": "b"}), "description"),
        (json!({"description": "d"}), "body"),
        (
            json!({"description": "d", "body": "b", "tools": []}),
            "tools",
        ),
        (json!({"description": "d", "body": 3}), "body"),
        (json!({"description": "d", "body": "a\u{0}b"}), "body"),
        (
            json!({"description": "d", "body": "b", "files": {"../etc/passwd": "x"}}),
            "files.../etc/passwd",
        ),
        (
            json!({"description": "d", "body": "x".repeat(256 * 1024 + 1)}),
            "body",
        ),
    ] {
        let (s, e) = put(&f, "bad", &acme_admin, body.clone()).await;
        assert_eq!(s, 400, "{body}: {e}");
        assert_eq!(e["error"]["param"], param, "{e}");
    }
    let (s, e) = put(
        &f,
        "Bad Name",
        &acme_admin,
        json!({"description": "d", "body": "b"}),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "name", "{e}");
    let (s, e) = f
        .get("/v1/skills/secret?version=sha256:xyz", &acme_admin)
        .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "version", "{e}");
    f.stop().await;
}

fn write_skill(dir: &std::path::Path, name: &str, front_name: &str) {
    let skill = dir.join(name);
    std::fs::create_dir_all(skill.join("scripts")).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        format!(
            "---\nname: {front_name}\ndescription: Check links in a page\n---\n\nRun scripts/check.py on the page.\n"
        ),
    )
    .unwrap();
    std::fs::write(skill.join("scripts/check.py"), "print('ok')\n").unwrap();
}

#[tokio::test]
async fn skills_load_at_boot_and_weft_hash_skill_prints_their_hash() {
    let probe = TestFleet::start().await;
    let dir = temp_dir(&probe, "skills");
    write_skill(&dir, "link-check", "link-check");
    std::fs::write(
        dir.join("README.md"),
        "files beside the skill folders are ignored",
    )
    .unwrap();
    let boot = |c: &mut weft_config::Config| c.substrate.skills_dir = Some(dir.clone());

    let first = probe.join(boot).await;
    let (s, skill) = first.get("/v1/skills/link-check", &first.admin).await;
    assert_eq!(s, 200, "{skill}");
    assert_eq!(
        skill["content"]["body"],
        "Run scripts/check.py on the page."
    );
    assert_eq!(
        skill["content"]["files"],
        json!({"scripts/check.py": "print('ok')\n"})
    );
    let reported = skill["version"].as_str().unwrap().to_owned();

    // The library function and the CLI print the hash the deployment reports.
    let folder = dir.join("link-check");
    assert_eq!(weft_substrate::hash_skill_dir(&folder).unwrap(), reported);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["hash", "skill"])
        .arg(&folder)
        .env_remove("WEFT_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), reported);
    first.stop().await;

    // A restart with the same folder adds no version.
    let second = probe.join(boot).await;
    let (_, versions) = second
        .get("/v1/skills/link-check/versions", &second.admin)
        .await;
    assert_eq!(versions["data"].as_array().unwrap().len(), 1, "{versions}");
    second.stop().await;

    // A front-matter name that differs from the folder stops start-up, and the CLI says so.
    write_skill(&dir, "renamed", "other-name");
    let mut c = common::config(&probe.db);
    boot(&mut c);
    let err = weft::Fleet::start(c).await.unwrap_err().to_string();
    assert!(
        err.contains("renamed") && err.contains("`other-name`"),
        "{err}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["hash", "skill"])
        .arg(dir.join("renamed"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("`other-name`"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn the_openapi_document_lists_the_skill_routes() {
    let f = TestFleet::start().await;
    let doc: Value = reqwest::get(format!("{}/v1/openapi.json", f.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for (path, method) in [
        ("/v1/skills", "get"),
        ("/v1/skills/{name}", "put"),
        ("/v1/skills/{name}", "get"),
        ("/v1/skills/{name}/versions", "get"),
        ("/v1/skills/{name}/fork", "post"),
        ("/v1/skills/{name}/retire", "post"),
        ("/v1/skills/{name}/activate", "post"),
        ("/v1/skills/verify", "post"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{method} {path}");
    }
    assert!(doc["components"]["schemas"]["SkillContent"].is_object());
    f.stop().await;
}
