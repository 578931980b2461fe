//! Agent definitions through the public API: versions and lineage, forks, retire/activate,
//! verify, validation errors, tenant isolation, scopes, boot loading, and `weft hash agent`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::TestFleet;
use serde_json::{Value, json};

async fn put(f: &TestFleet, name: &str, token: &str, body: Value) -> (u16, Value) {
    f.put(&format!("/v1/agents/{name}"), token, body).await
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
async fn puts_version_content_and_chain_lineage() {
    let f = TestFleet::start().await;
    let (s, v1) = put(
        &f,
        "triage",
        &f.admin,
        json!({"system_prompt": "one", "tier": "fast"}),
    )
    .await;
    assert_eq!(s, 201, "{v1}");
    assert_eq!(v1["created"], true);
    assert_eq!(v1["number"], 1);
    assert_eq!(v1["name"], "triage");
    assert_eq!(v1["parent_version"], Value::Null);
    assert_eq!(v1["active"], true);
    assert_eq!(
        v1["content"]["max_iterations"], 16,
        "defaults are materialised"
    );
    let h1 = v1["version"].as_str().unwrap().to_owned();
    assert!(h1.starts_with("sha256:") && h1.len() == 71, "{h1}");

    // The same content, keys reordered and a default spelt out: same version, nothing new.
    let (s, again) = put(
        &f,
        "triage",
        &f.admin,
        json!({"tier": "fast", "max_iterations": 16, "system_prompt": "one"}),
    )
    .await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["created"], false);
    assert_eq!(again["version"], h1.as_str());
    assert_eq!(again["number"], 1);

    let (s, v2) = put(
        &f,
        "triage",
        &f.admin,
        json!({"system_prompt": "two", "tier": "fast"}),
    )
    .await;
    assert_eq!(s, 201, "{v2}");
    assert_eq!(v2["number"], 2);
    assert_eq!(v2["parent_version"], h1.as_str());
    let h2 = v2["version"].as_str().unwrap().to_owned();

    let (s, versions) = f.get("/v1/agents/triage/versions", &f.admin).await;
    assert_eq!(s, 200, "{versions}");
    let list = versions["data"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["version"], h1.as_str());
    assert_eq!(list[0]["active"], false);
    assert_eq!(list[1]["version"], h2.as_str());
    assert_eq!(list[1]["active"], true);

    let (s, active) = f.get("/v1/agents/triage", &f.admin).await;
    assert_eq!(s, 200);
    assert_eq!(active["version"], h2.as_str());
    assert_eq!(active["content"]["system_prompt"], "two");
    let (s, pinned) = f.get("/v1/agents/triage?version=1", &f.admin).await;
    assert_eq!(s, 200, "{pinned}");
    assert_eq!(pinned["version"], h1.as_str());
    let (s, pinned) = f
        .get(&format!("/v1/agents/triage?version={h1}"), &f.admin)
        .await;
    assert_eq!(s, 200, "{pinned}");
    assert_eq!(pinned["content"]["system_prompt"], "one");
    let (s, e) = f.get("/v1/agents/triage?version=9", &f.admin).await;
    assert_eq!(s, 404, "{e}");
    let (s, e) = f.get("/v1/agents/triage?versoin=1", &f.admin).await;
    assert_eq!(s, 400, "{e}");

    let (s, all) = f.get("/v1/agents", &f.admin).await;
    assert_eq!(s, 200);
    assert_eq!(
        all["data"],
        json!([{"name": "triage", "active_version": h2, "retired": false, "versions": 2,
                "description": "", "updated_at": all["data"][0]["updated_at"]}])
    );
}

#[tokio::test]
async fn forks_retire_activate_and_verify() {
    let f = TestFleet::start().await;
    let (_, v1) = put(
        &f,
        "writer",
        &f.admin,
        json!({"system_prompt": "write", "sampling": {"temperature": 0.3}}),
    )
    .await;
    let h1 = v1["version"].as_str().unwrap().to_owned();
    let (_, v2) = put(
        &f,
        "writer",
        &f.admin,
        json!({"system_prompt": "write more"}),
    )
    .await;
    let h2 = v2["version"].as_str().unwrap().to_owned();

    let (s, fork) = f
        .post(
            "/v1/agents/writer/fork",
            &f.admin,
            json!({"from_version": h1, "changes": {"max_iterations": 5, "sampling": {"seed": 1}}}),
        )
        .await;
    assert_eq!(s, 201, "{fork}");
    assert_eq!(fork["number"], 3);
    assert_eq!(fork["parent_version"], h1.as_str());
    assert_eq!(fork["content"]["max_iterations"], 5);
    assert_eq!(fork["content"]["system_prompt"], "write");
    assert_eq!(fork["content"]["sampling"]["temperature"], 0.3);
    assert_eq!(fork["content"]["sampling"]["seed"], 1);
    let h3 = fork["version"].as_str().unwrap().to_owned();

    // Forking the active version with no changes is the active version: 200, nothing new.
    let (s, same) = f
        .post("/v1/agents/writer/fork", &f.admin, json!({"changes": {}}))
        .await;
    assert_eq!(s, 200, "{same}");
    assert_eq!(same["version"], h3.as_str());

    let (s, e) = f
        .post(
            "/v1/agents/writer/fork",
            &f.admin,
            json!({"changes": {"max_iterations": 0}}),
        )
        .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "changes.max_iterations");

    let (s, retired) = f
        .post("/v1/agents/writer/retire", &f.admin, json!({}))
        .await;
    assert_eq!(s, 200, "{retired}");
    assert_eq!(retired["retired"], true);
    let (_, got) = f.get("/v1/agents/writer", &f.admin).await;
    assert_eq!(got["retired"], true, "a retired agent stays readable");

    let (s, act) = f
        .post(
            "/v1/agents/writer/activate",
            &f.admin,
            json!({"version": h2}),
        )
        .await;
    assert_eq!(s, 200, "{act}");
    assert_eq!(act["retired"], false);
    assert_eq!(act["active_version"], h2.as_str());
    assert_eq!(act["versions"], 3);
    let (s, e) = f
        .post(
            "/v1/agents/writer/activate",
            &f.admin,
            json!({"version": format!("sha256:{}", "0".repeat(64))}),
        )
        .await;
    assert_eq!(s, 404, "{e}");
    let (s, e) = f
        .post("/v1/agents/nobody/retire", &f.admin, json!({}))
        .await;
    assert_eq!(s, 404, "{e}");

    let (s, v) = f
        .post("/v1/agents/verify", &f.admin, json!({"sha256": h3}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v, json!({"known": true, "name": "writer", "number": 3}));
    let (s, v) = f
        .post(
            "/v1/agents/verify",
            &f.admin,
            json!({"sha256": format!("sha256:{}", "a".repeat(64))}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["known"], false);
    let (s, e) = f
        .post("/v1/agents/verify", &f.admin, json!({"sha256": "abc"}))
        .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "sha256");
}

#[tokio::test]
async fn invalid_definitions_are_400s_naming_the_field() {
    let f = TestFleet::start().await;
    let (s, e) = put(&f, "bad", &f.admin, json!({"max_iterations": 0})).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["code"], "invalid_request");
    assert_eq!(e["error"]["param"], "max_iterations");
    assert_eq!(
        e["error"]["message"],
        "`max_iterations` must be between 1 and 1000, got 0"
    );
    let (s, e) = put(&f, "bad", &f.admin, json!({"modle": "mock-1"})).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "modle");
    let (s, e) = put(&f, "bad", &f.admin, json!({"tools": ["web search"]})).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "tools[0]");
    let (s, e) = put(&f, "bad", &f.admin, json!({"model": "a", "tier": "b"})).await;
    assert_eq!(s, 400, "{e}");
    let (s, e) = put(&f, "Bad_Name", &f.admin, json!({})).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "name");
    let (s, e) = put(&f, "bad", &f.admin, json!(["not", "an", "object"])).await;
    assert_eq!(s, 400, "{e}");
    let r = f
        .http
        .put(format!("{}/v1/agents/bad", f.url))
        .bearer_auth(&f.admin)
        .body("system_prompt: x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let (s, list) = f.get("/v1/agents", &f.admin).await;
    assert_eq!(s, 200);
    assert_eq!(list["data"], json!([]), "nothing was stored");
}

#[tokio::test]
async fn another_tenants_agents_are_not_found() {
    let f = TestFleet::start().await;
    let acme = token(&f, "acme", &["tenant:admin"]).await;
    let beta = token(&f, "beta", &["tenant:admin"]).await;
    let (s, v) = put(&f, "secret", &acme, json!({"system_prompt": "acme only"})).await;
    assert_eq!(s, 201, "{v}");
    let hash = v["version"].as_str().unwrap();

    let (s, e) = f.get("/v1/agents/secret", &beta).await;
    assert_eq!(s, 404, "{e}");
    assert_eq!(e["error"]["code"], "not_found");
    let (s, _) = f
        .get(&format!("/v1/agents/secret?version={hash}"), &beta)
        .await;
    assert_eq!(s, 404);
    let (s, _) = f.get("/v1/agents/secret/versions", &beta).await;
    assert_eq!(s, 404);
    let (s, _) = f.post("/v1/agents/secret/retire", &beta, json!({})).await;
    assert_eq!(s, 404);
    let (s, list) = f.get("/v1/agents", &beta).await;
    assert_eq!(s, 200);
    assert_eq!(list["data"], json!([]));
    let (_, v) = f
        .post("/v1/agents/verify", &beta, json!({"sha256": hash}))
        .await;
    assert_eq!(v["known"], false);
    // The bootstrap admin's own tenant (`default`) does not see acme's agent either.
    let (s, _) = f.get("/v1/agents/secret", &f.admin).await;
    assert_eq!(s, 404);

    // Beta's agent of the same name is its own.
    let (s, b) = put(&f, "secret", &beta, json!({"system_prompt": "beta"})).await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["number"], 1);
    let (_, a) = f.get("/v1/agents/secret", &acme).await;
    assert_eq!(a["content"]["system_prompt"], "acme only");
}

#[tokio::test]
async fn run_tokens_read_and_only_admins_write() {
    let f = TestFleet::start().await;
    let (s, _) = put(&f, "shared", &f.admin, json!({"system_prompt": "x"})).await;
    assert_eq!(s, 201);
    let runner = token(&f, "default", &["runs:create"]).await;
    let reader = token(&f, "default", &["runs:read"]).await;
    let llm = token(&f, "default", &["llm:call"]).await;

    for t in [&runner, &reader] {
        let (s, v) = f.get("/v1/agents/shared", t).await;
        assert_eq!(s, 200, "{v}");
        let (s, _) = f.get("/v1/agents", t).await;
        assert_eq!(s, 200);
    }
    let (s, e) = put(&f, "shared", &runner, json!({"system_prompt": "y"})).await;
    assert_eq!(s, 403, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant:admin"),
        "{e}"
    );
    let (s, _) = f.post("/v1/agents/shared/retire", &runner, json!({})).await;
    assert_eq!(s, 403);
    let (s, _) = f
        .post("/v1/agents/shared/fork", &reader, json!({"changes": {}}))
        .await;
    assert_eq!(s, 403);
    let (s, _) = f.get("/v1/agents/shared", &llm).await;
    assert_eq!(s, 403);
    let r = f
        .http
        .get(format!("{}/v1/agents", f.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn boot_definitions_load_at_start_and_restarts_add_no_versions() {
    let probe = TestFleet::start().await;
    let dir = temp_dir(&probe, "agents");
    std::fs::write(
        dir.join("triage.md"),
        "---\ndescription: triage issues\ntier: fast\ntools: [HTTP]\n---\nYou triage issues.\n",
    )
    .unwrap();
    std::fs::write(dir.join("reviewer.md"), "Review the change.\n").unwrap();
    let boot = |c: &mut weft_config::Config| {
        c.substrate.agents_dir = Some(dir.clone());
        c.substrate.agents.insert(
            "inline".into(),
            json!({"system_prompt": "inline", "max_iterations": 3}),
        );
    };
    let first = probe.join(boot).await;
    let (s, list) = first.get("/v1/agents", &first.admin).await;
    assert_eq!(s, 200, "{list}");
    let names: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["inline", "reviewer", "triage"]);
    let (_, triage) = first.get("/v1/agents/triage", &first.admin).await;
    assert_eq!(triage["content"]["system_prompt"], "You triage issues.");
    assert_eq!(triage["content"]["tools"], json!(["HTTP"]));
    first.stop().await;

    // A restart with the same files: the same versions, none added.
    let second = probe.join(boot).await;
    let (_, again) = second.get("/v1/agents", &second.admin).await;
    assert_eq!(again["data"], list["data"]);
    assert!(
        again["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["versions"] == 1),
        "{again}"
    );
    second.stop().await;

    // An invalid file stops start-up, naming the file and the field.
    std::fs::write(
        dir.join("broken.md"),
        "---\nmax_concurrent_children: 0\n---\nx\n",
    )
    .unwrap();
    let mut c = common::config(&probe.db);
    boot(&mut c);
    let err = weft::Fleet::start(c).await.unwrap_err().to_string();
    assert!(
        err.contains("broken.md") && err.contains("max_concurrent_children"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn weft_hash_agent_prints_the_hash_the_api_reports() {
    let f = TestFleet::start().await;
    let dir = temp_dir(&f, "hash");
    let file = dir.join("planner.md");
    std::fs::write(
        &file,
        "---\ndescription: plans\nmodel: mock-1\nmax_iterations: 8\nsampling:\n  temperature: 0.5\n---\n\nPlan the work.\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["hash", "agent"])
        .arg(&file)
        .env_remove("WEFT_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap().trim().to_owned();

    let (s, v) = put(
        &f,
        "planner",
        &f.admin,
        json!({"description": "plans", "model": "mock-1", "max_iterations": 8,
               "sampling": {"temperature": 0.5}, "system_prompt": "Plan the work."}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["version"], printed.as_str());

    let bad = dir.join("bad.md");
    std::fs::write(&bad, "---\nmax_iterations: 0\n---\nx\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["hash", "agent"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("bad.md") && stderr.contains("`max_iterations` must be between 1 and 1000"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn the_openapi_document_lists_the_agent_routes() {
    let f = TestFleet::start().await;
    let doc: Value = reqwest::get(format!("{}/v1/openapi.json", f.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for (path, method) in [
        ("/v1/agents", "get"),
        ("/v1/agents/{name}", "put"),
        ("/v1/agents/{name}", "get"),
        ("/v1/agents/{name}/versions", "get"),
        ("/v1/agents/{name}/fork", "post"),
        ("/v1/agents/{name}/retire", "post"),
        ("/v1/agents/{name}/activate", "post"),
        ("/v1/agents/verify", "post"),
    ] {
        assert!(
            doc["paths"][path].get(method).is_some(),
            "{method} {path} missing from the OpenAPI document"
        );
    }
}
