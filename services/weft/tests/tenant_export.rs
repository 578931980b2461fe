//! `weft tenant export` and `weft tenant import` (docs/operations.md, "Tenant export and
//! import"): a tenant populated through the public API (every definition kind, memory with a TTL
//! and an embedding, a channel with a backlog and a cursor, a volume with two snapshots,
//! evaluations, 50 runs) is exported by the CLI, imported by the CLI into a fresh database under
//! another name, and compared section by section, item by item; the imported tenant is then
//! read through a fleet started on that database. A second import adds nothing; a corrupted
//! archive and one with a newer section version are refused naming the section; an item changed
//! in the target is reported as a conflict and nothing is written.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::process::Command;

use common::{TestFleet, create, finished_as, script};
use serde_json::{Value, json};
use weft_store::tenant_archive::{
    Archive, BlobRecord, ChannelMessageRecord, ChannelRecord, DefinitionRecord, EvaluationRecord,
    MemoryRecord, RunArchiveRecord, RunEventRecord, Section, ToolLedgerRecord, VolumeChangeRecord,
    VolumeRecord, VolumeSnapshotRecord,
};
use weft_testkit::TestDb;

const RUNS: usize = 50;

/// `weft --database-url <url> <args>`: (exit code, stdout, stderr).
fn weft(url: &str, args: &[&str]) -> (i32, Vec<u8>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("--database-url")
        .arg(url)
        .args(args)
        .env("WEFT_TELEMETRY__LOG_LEVEL", "warn")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn put_def(f: &TestFleet, token: &str, path: &str, body: Value) -> String {
    let (s, v) = f.put(path, token, body).await;
    assert!(s == 200 || s == 201, "PUT {path}: {s} {v}");
    v["version"].as_str().unwrap_or_default().to_owned()
}

/// Every definition kind, memory, a channel with a backlog and a cursor, a volume with two
/// snapshots, evaluations and `RUNS` runs, in tenant `acme`.
async fn populate(f: &TestFleet) -> String {
    let (s, t) = f.mint(&f.admin, "acme", &["tenant:admin"]).await;
    assert_eq!(s, 201, "{t}");
    let owner = t["token"].as_str().unwrap().to_owned();
    let o = &owner;

    // Two versions of the worker: lineage.
    let v1 = put_def(f, o, "/v1/agents/worker", json!({"model": "mock-1"})).await;
    let v2 = put_def(
        f,
        o,
        "/v1/agents/worker",
        json!({"model": "mock-1", "description": "the second version"}),
    )
    .await;
    assert_ne!(v1, v2);
    put_def(
        f,
        o,
        "/v1/agents/judge",
        json!({"model": "mock-1", "tools": ["Evaluation"]}),
    )
    .await;
    put_def(
        f,
        o,
        "/v1/skills/summarise",
        json!({"description": "summarise", "body": "say it short"}),
    )
    .await;
    put_def(
        f,
        o,
        "/v1/mcp-servers/docs",
        json!({"description": "docs", "url": "https://mcp.example/mcp"}),
    )
    .await;
    put_def(
        f,
        o,
        "/v1/processes/review",
        json!({"description": "review", "persona": "careful", "phases": [{"id": "a", "description": "read"}]}),
    )
    .await;
    put_def(
        f,
        o,
        "/v1/a2a-peers/partner",
        json!({"description": "partner", "card_url": "https://peer.example/.well-known/agent-card.json"}),
    )
    .await;
    put_def(
        f,
        o,
        "/v1/hooks/audit",
        json!({"description": "audit", "phase": "pre", "agents": ["nobody"], "tools": ["*"], "url": "https://hook.example/pre"}),
    )
    .await;
    put_def(
        f,
        o,
        "/v1/schedules/yearly",
        json!({"description": "yearly", "cron": "0 0 1 1 *", "agent": "worker", "input": "happy new year"}),
    )
    .await;
    put_def(
        f,
        o,
        "/v1/webhooks/gh",
        json!({"description": "gh", "signature": "github", "secret_env": "WEFT_WEBHOOK_ACME__GH", "agent": "worker"}),
    )
    .await;

    // Memory: a TTL, an embedding, a tenant-scoped entry.
    for (path, body) in [
        (
            "/v1/memory/user/someone/otp",
            json!({"value": "123456", "ttl_seconds": 86400}),
        ),
        (
            "/v1/memory/user/someone/recipe",
            json!({"value": "cherry tart", "embed": true}),
        ),
        (
            "/v1/memory/tenant/acme/city",
            json!({"value": {"name": "Lisbon"}}),
        ),
    ] {
        let (s, e) = f.put(path, o, body).await;
        assert_eq!(s, 200, "{path}: {e}");
    }

    // A channel with five messages, two of them acked.
    let (s, c) = f
        .put(
            "/v1/channels/jobs",
            o,
            json!({"scope": "tenant", "ttl_seconds": 86400, "max_messages": 100}),
        )
        .await;
    assert_eq!(s, 201, "{c}");
    let mut cursors = Vec::new();
    for i in 1..=5 {
        let (s, p) = f
            .post(
                "/v1/channels/jobs/publish",
                o,
                json!({"payload": {"job": i}}),
            )
            .await;
        assert_eq!(s, 201, "{p}");
        cursors.push(p["cursor"].clone());
    }
    let (s, a) = f
        .post("/v1/channels/jobs/ack", o, json!({"cursor": cursors[1]}))
        .await;
    assert_eq!(s, 200, "{a}");

    // A volume with two snapshots and a changelog.
    let (s, v) = f.post("/v1/volumes", o, json!({"name": "work"})).await;
    assert_eq!(s, 201, "{v}");
    for (file, body, label) in [("a.txt", "one\n", "first"), ("b.txt", "bee\n", "second")] {
        let r = f
            .http
            .put(format!("{}/v1/volumes/work/files/{file}", f.url))
            .bearer_auth(o)
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        let (s, snap) = f
            .post("/v1/volumes/work/snapshots", o, json!({"label": label}))
            .await;
        assert_eq!(s, 201, "{snap}");
    }

    // Evaluations, submitted by a run of the judge.
    let submit = |task: &str, verdict: &str, score: f64| json!({"name": "Evaluation", "input": {"op": "submit", "task": task, "verdict": verdict, "agent": "worker", "score": score}});
    let judge = create(
        f,
        o,
        json!({"agent": "judge", "input": script(json!([[submit("t1", "pass", 0.9)], [submit("t2", "fail", 0.1)]]), "judged")}),
    )
    .await;
    let run = finished_as(f, o, &judge).await;
    assert_eq!(run["status"], "succeeded", "{run}");

    // Fifty runs.
    let mut ids = Vec::new();
    for i in 0..RUNS {
        ids.push(
            create(
                f,
                o,
                json!({"agent": "worker", "input": format!("hello {i}")}),
            )
            .await,
        );
    }
    for id in &ids {
        let run = finished_as(f, o, id).await;
        assert_eq!(run["status"], "succeeded", "{run}");
    }
    owner
}

/// Section `s` of both archives, record by record.
fn same<T>(s: Section, a: &Archive, b: &Archive) -> usize
where
    T: serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let x: Vec<T> = a.records(s).unwrap();
    let y: Vec<T> = b.records(s).unwrap();
    assert_eq!(x.len(), y.len(), "section {}: item counts differ", s.name());
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert_eq!(p, q, "section {}: item {i} differs", s.name());
    }
    x.len()
}

fn report(stdout: &[u8]) -> Value {
    serde_json::from_slice(stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_moves_to_a_fresh_database_item_for_item() {
    let f = TestFleet::start().await;
    let owner = populate(&f).await;
    let src_url = f.config.database.url.expose().to_owned();

    // Export with the CLI (runs included).
    let (code, tar, err) = weft(&src_url, &["tenant", "export", "acme", "--runs"]);
    assert_eq!(code, 0, "export failed: {err}");
    let dir = std::env::temp_dir().join(format!("{}-export", f.db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("acme.tar");
    std::fs::write(&file, &tar).unwrap();
    let source = Archive::read(&tar[..]).unwrap();
    assert_eq!(source.manifest.tenant, "acme");
    assert!(source.manifest.runs_included);

    // Every section holds what the test made.
    let defs: Vec<DefinitionRecord> = source.records(Section::Definitions).unwrap();
    let kinds: std::collections::BTreeSet<&str> = defs.iter().map(|d| d.kind.as_str()).collect();
    for kind in [
        "agent",
        "skill",
        "mcp_server",
        "process",
        "a2a_peer",
        "hook",
        "schedule",
        "webhook",
        "volume",
    ] {
        assert!(kinds.contains(kind), "no {kind} definition in {kinds:?}");
    }
    let worker = defs
        .iter()
        .find(|d| d.kind == "agent" && d.name == "worker")
        .unwrap();
    assert_eq!(worker.versions.len(), 2);
    assert_eq!(
        worker.versions[1].parent_version.as_deref(),
        Some(worker.versions[0].hash.as_str()),
        "lineage"
    );
    let memory: Vec<MemoryRecord> = source.records(Section::Memory).unwrap();
    assert!(
        memory
            .iter()
            .any(|m| m.key == "otp" && m.expires_at.is_some())
    );
    assert!(
        memory
            .iter()
            .any(|m| m.key == "recipe" && m.embedding.as_ref().is_some_and(|e| !e.is_empty()))
    );
    let channels: Vec<ChannelRecord> = source.records(Section::Channels).unwrap();
    assert_eq!(channels.len(), 1);
    assert_eq!(channels[0].cursors.len(), 1);
    assert_eq!(channels[0].cursors[0].seq, 2);
    let snapshots: Vec<VolumeSnapshotRecord> = source.records(Section::VolumeSnapshots).unwrap();
    assert_eq!(snapshots.len(), 2);
    let runs: Vec<RunArchiveRecord> = source.records(Section::Runs).unwrap();
    assert_eq!(runs.len(), RUNS + 1);
    let evaluations: Vec<EvaluationRecord> = source.records(Section::Evaluations).unwrap();
    assert_eq!(evaluations.len(), 2);
    for s in Section::ALL {
        assert!(
            source.manifest.sections[s.name()].count > 0,
            "section {} is empty",
            s.name()
        );
    }

    // Over HTTP, for operators only: the same sections, byte for byte.
    let export_url = format!("{}/v1/tenants/acme/export?runs=true", f.url);
    let r = f
        .http
        .get(&export_url)
        .bearer_auth(&owner)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a tenant admin is no operator");
    let r = f
        .http
        .get(&export_url)
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-tar");
    let via_http = Archive::read(&r.bytes().await.unwrap()[..]).unwrap();
    for s in Section::ALL {
        assert_eq!(
            via_http.manifest.sections[s.name()],
            source.manifest.sections[s.name()],
            "section {}",
            s.name()
        );
    }
    // Into the same database under another name: the global ids are reported, nothing written.
    let import_url = format!("{}/v1/tenants/acme9/import", f.url);
    let r = f
        .http
        .post(&import_url)
        .bearer_auth(&owner)
        .body(tar.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = f
        .http
        .post(&import_url)
        .bearer_auth(&f.admin)
        .body(tar.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let rep: Value = r.json().await.unwrap();
    assert_eq!(rep["applied"], false, "{rep}");
    let conflicts = rep["conflicts"].as_array().unwrap();
    assert!(
        conflicts
            .iter()
            .any(|c| c["section"] == "runs"
                && c["reason"].as_str().unwrap().contains("another tenant")),
        "{rep}"
    );
    let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM defs WHERE tenant_id = 'acme9'")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0, "an import with conflicts writes nothing");

    // Import into a fresh database as another tenant.
    let target = TestDb::new().await;
    let path = file.to_str().unwrap();
    let (code, out, err) = weft(&target.url, &["tenant", "import", path, "--as", "acme2"]);
    assert_eq!(code, 0, "import failed: {err}");
    let r = report(&out);
    assert_eq!(r["applied"], true, "{r}");
    assert_eq!(r["tenant"], "acme2");
    assert_eq!(r["source_tenant"], "acme");
    assert_eq!(r["conflicts"], json!([]), "{r}");
    for s in Section::ALL {
        assert_eq!(
            r["sections"][s.name()]["added"].as_u64(),
            Some(source.manifest.sections[s.name()].count),
            "section {}: {r}",
            s.name()
        );
    }

    // The imported tenant, exported again, is the same item for item (ids, hashes, versions,
    // lineage, TTLs, embeddings, cursors, blobs).
    let (code, tar2, err) = weft(&target.url, &["tenant", "export", "acme2", "--runs"]);
    assert_eq!(code, 0, "export of the import failed: {err}");
    let copy = Archive::read(&tar2[..]).unwrap();
    assert_eq!(copy.manifest.tenant, "acme2");
    same::<DefinitionRecord>(Section::Definitions, &source, &copy);
    same::<MemoryRecord>(Section::Memory, &source, &copy);
    same::<ChannelRecord>(Section::Channels, &source, &copy);
    same::<ChannelMessageRecord>(Section::ChannelMessages, &source, &copy);
    same::<BlobRecord>(Section::Blobs, &source, &copy);
    same::<VolumeRecord>(Section::Volumes, &source, &copy);
    same::<VolumeChangeRecord>(Section::VolumeChanges, &source, &copy);
    same::<VolumeSnapshotRecord>(Section::VolumeSnapshots, &source, &copy);
    same::<RunArchiveRecord>(Section::Runs, &source, &copy);
    same::<RunEventRecord>(Section::RunEvents, &source, &copy);
    same::<ToolLedgerRecord>(Section::ToolLedger, &source, &copy);
    same::<EvaluationRecord>(Section::Evaluations, &source, &copy);
    assert_eq!(source.blobs(), copy.blobs());
    for s in Section::ALL {
        assert_eq!(
            source.manifest.sections[s.name()].sha256,
            copy.manifest.sections[s.name()].sha256,
            "section {}",
            s.name()
        );
    }

    // The tables the archive leaves to the importer: quotas' usage, the schedule's live row.
    let (mem_bytes,): (i64,) =
        sqlx::query_as("SELECT bytes FROM memory_usage WHERE tenant_id = 'acme2' AND agent = ''")
            .fetch_one(&target.pool)
            .await
            .unwrap();
    assert_eq!(
        mem_bytes,
        memory.iter().map(|m| i64::from(m.bytes)).sum::<i64>()
    );
    let (live,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM schedules WHERE tenant_id = 'acme2' AND name = 'yearly' AND next_fire_at IS NOT NULL",
    )
    .fetch_one(&target.pool)
    .await
    .unwrap();
    assert_eq!(live, 1, "the imported schedule has its live row");

    // A second import changes nothing.
    let (code, out, err) = weft(&target.url, &["tenant", "import", path, "--as", "acme2"]);
    assert_eq!(code, 0, "second import failed: {err}");
    let r = report(&out);
    assert_eq!(r["applied"], true, "{r}");
    for s in Section::ALL {
        let sec = &r["sections"][s.name()];
        assert_eq!(sec["added"], 0, "section {}: {r}", s.name());
        assert_eq!(
            sec["unchanged"].as_u64(),
            Some(source.manifest.sections[s.name()].count),
            "section {}: {r}",
            s.name()
        );
    }

    // A corrupted section is refused, naming it.
    let at = find(&tar, b"\"value_json\"");
    let mut bad = tar.clone();
    bad[at + 1] = b'V';
    let bad_file = dir.join("corrupted.tar");
    std::fs::write(&bad_file, &bad).unwrap();
    let (code, _, err) = weft(
        &target.url,
        &[
            "tenant",
            "import",
            bad_file.to_str().unwrap(),
            "--as",
            "acme3",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("section `memory`"), "{err}");
    assert!(err.contains("corrupted"), "{err}");

    // A section newer than this weft knows is refused, naming it.
    let at = find(&tar, b"\"channels\": {");
    let v = at + find(&tar[at..], b"\"version\": 1");
    let mut newer = tar.clone();
    newer[v + b"\"version\": ".len()] = b'7';
    let newer_file = dir.join("newer.tar");
    std::fs::write(&newer_file, &newer).unwrap();
    let (code, _, err) = weft(
        &target.url,
        &[
            "tenant",
            "import",
            newer_file.to_str().unwrap(),
            "--as",
            "acme3",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("section `channels`"), "{err}");
    assert!(err.contains("version 7 is newer"), "{err}");
    let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM defs WHERE tenant_id = 'acme3'")
        .fetch_one(&target.pool)
        .await
        .unwrap();
    assert_eq!(n, 0, "a refused archive writes nothing");

    // An item that differs in the target is a conflict: reported, and nothing is written
    // (the channel message deleted below stays deleted).
    sqlx::query(
        "UPDATE memory_entries SET value_json = '\"Porto\"' WHERE tenant_id = 'acme2' AND key = 'city'",
    )
    .execute(&target.pool)
    .await
    .unwrap();
    sqlx::query("DELETE FROM channel_messages WHERE tenant_id = 'acme2' AND seq = 5")
        .execute(&target.pool)
        .await
        .unwrap();
    let (code, out, err) = weft(&target.url, &["tenant", "import", path, "--as", "acme2"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("1 conflicts"), "{err}");
    let r = report(&out);
    assert_eq!(r["applied"], false, "{r}");
    assert_eq!(
        r["conflicts"],
        json!([{"section": "memory", "item": "tenant/city", "reason": "an item with this key exists with other content; it is left as it is"}]),
        "{r}"
    );
    let (n,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM channel_messages WHERE tenant_id = 'acme2' AND seq = 5",
    )
    .fetch_one(&target.pool)
    .await
    .unwrap();
    assert_eq!(n, 0, "an import with a conflict writes nothing");
    let (value,): (String,) = sqlx::query_as(
        "SELECT value_json FROM memory_entries WHERE tenant_id = 'acme2' AND key = 'city'",
    )
    .fetch_one(&target.pool)
    .await
    .unwrap();
    assert_eq!(
        value, "\"Porto\"",
        "a conflicting item is never overwritten"
    );
    sqlx::query(
        "UPDATE memory_entries SET value_json = $1 WHERE tenant_id = 'acme2' AND key = 'city'",
    )
    .bind(&memory.iter().find(|m| m.key == "city").unwrap().value_json)
    .execute(&target.pool)
    .await
    .unwrap();

    // The imported tenant works on a fleet over the target database.
    let mut c = common::config(&target);
    c.bootstrap.token_file = std::env::temp_dir().join(format!("{}-admin-token", target.name));
    let g = weft::Fleet::start(c).await.unwrap();
    let admin = g.admin_token.clone().unwrap();
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, token: &str, body: Option<Value>| {
        let mut req = http
            .request(method, format!("{}{path}", g.url()))
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        async move {
            let r = req.send().await.unwrap();
            let s = r.status().as_u16();
            let text = r.text().await.unwrap();
            (s, text)
        }
    };
    let (s, t) = call(
        reqwest::Method::POST,
        "/v1/tokens",
        &admin,
        Some(json!({"name": "t", "tenant": "acme2", "subject": "someone", "scopes": ["tenant:admin"]})),
    )
    .await;
    assert_eq!(s, 201, "{t}");
    let t: Value = serde_json::from_str(&t).unwrap();
    let tok = t["token"].as_str().unwrap();
    let (s, body) = call(
        reqwest::Method::GET,
        "/v1/memory/user/someone/otp",
        tok,
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = call(
        reqwest::Method::GET,
        "/v1/volumes/work/files/b.txt",
        tok,
        None,
    )
    .await;
    assert_eq!((s, body.as_str()), (200, "bee\n"));
    let (s, body) = call(
        reqwest::Method::POST,
        "/v1/channels/jobs/read",
        tok,
        Some(json!({})),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let read: Value = serde_json::from_str(&body).unwrap();
    let jobs: Vec<&Value> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["payload"]["job"])
        .collect();
    assert_eq!(
        jobs,
        [&json!(3), &json!(4)],
        "read goes on from the imported cursor"
    );
    let (s, body) = call(
        reqwest::Method::GET,
        &format!("/v1/runs/{}/events?limit=1000", runs[1].id),
        tok,
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let events: Value = serde_json::from_str(&body).unwrap();
    assert!(
        events["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["kind"] == "run_finished")),
        "{events}"
    );
    // The same archive over HTTP, into the tenant it is already in: every item unchanged.
    let r = http
        .post(format!("{}/v1/tenants/acme2/import", g.url()))
        .bearer_auth(&admin)
        .body(tar.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let rep: Value = r.json().await.unwrap();
    assert_eq!(rep["applied"], true, "{rep}");
    assert_eq!(rep["sections"]["channel_messages"]["added"], 1, "{rep}");
    g.stop(std::time::Duration::from_secs(10)).await;
    f.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{} not in the archive", String::from_utf8_lossy(needle)))
}
