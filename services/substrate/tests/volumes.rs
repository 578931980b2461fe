//! Volumes against a real Postgres: named volumes and their definitions, read-only volumes,
//! writes/reads/moves/deletes, `if_match`, op-key replay (also under concurrency), the caps
//! (file, volume quota, file count, tenant) refusing with nothing written, tenant isolation,
//! undo (one change, refused after a later edit, a whole run, undo of an undo), snapshots with
//! diff and restore, glob and grep, run volumes (shared by a tree, purged, swept), and the gRPC
//! face (scopes, FAILED_PRECONDITION, a file near the message limit).
//!
//! Multi-thread runtime for the reason given in `defs.rs` (`TestDb`'s drop).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::{Duration, Instant};

use uuid::Uuid;
use weft_auth::InternalJwt;
use weft_core::{Error, ErrorCode, Principal, Scopes, TenantId};
use weft_proto::v1;
use weft_proto::v1::file_op::Op;
use weft_substrate::volumes::blobs::Blobs;
use weft_substrate::volumes::{Caps, VolumeStore, Volumes};
use weft_substrate::{DefStore, volumes};
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

fn user(tenant: &str) -> Principal {
    principal(tenant, "alice", "volumes:read,volumes:write")
}

fn default_caps() -> Caps {
    Caps::from_config(&weft_config::VolumesConfig::default())
}

async fn setup_with(caps: Caps) -> (TestDb, Volumes) {
    let db = TestDb::new().await;
    let defs = DefStore::new(db.pool.clone());
    let store = VolumeStore::new(db.pool.clone(), Blobs::postgres(db.pool.clone()), caps);
    (db, Volumes::new(store, defs))
}

async fn setup() -> (TestDb, Volumes) {
    setup_with(default_caps()).await
}

fn named(name: &str) -> Option<v1::VolumeRef> {
    Some(v1::VolumeRef {
        target: Some(v1::volume_ref::Target::Name(name.into())),
        create: false,
    })
}

fn of_run(id: Uuid, create: bool) -> Option<v1::VolumeRef> {
    Some(v1::VolumeRef {
        target: Some(v1::volume_ref::Target::RunId(id.to_string())),
        create,
    })
}

fn sha(bytes: &[u8]) -> String {
    weft_volumes::hash::sha256_hex(bytes)
}

fn put(path: &str, content: &[u8]) -> v1::FileOp {
    v1::FileOp {
        path: path.into(),
        if_match: None,
        op: Some(Op::Put(v1::PutFile {
            body: Some(v1::put_file::Body::Content(content.to_vec())),
            mode: 0,
        })),
    }
}

fn put_if(path: &str, content: &[u8], if_match: &str) -> v1::FileOp {
    v1::FileOp {
        if_match: Some(if_match.into()),
        ..put(path, content)
    }
}

fn del(path: &str) -> v1::FileOp {
    v1::FileOp {
        path: path.into(),
        if_match: None,
        op: Some(Op::Delete(v1::DeleteFile {})),
    }
}

fn mv(from: &str, to: &str, overwrite: bool) -> v1::FileOp {
    v1::FileOp {
        path: from.into(),
        if_match: None,
        op: Some(Op::Move(v1::MoveFile {
            to: to.into(),
            overwrite,
        })),
    }
}

fn req(vol: Option<v1::VolumeRef>, ops: Vec<v1::FileOp>) -> v1::ApplyRequest {
    v1::ApplyRequest {
        volume: vol,
        ops,
        source: "test".into(),
        ..Default::default()
    }
}

async fn apply(
    v: &Volumes,
    p: &Principal,
    vol: Option<v1::VolumeRef>,
    ops: Vec<v1::FileOp>,
) -> Result<v1::Change, Error> {
    v.apply(p, req(vol, ops)).await
}

async fn read(
    v: &Volumes,
    p: &Principal,
    vol: Option<v1::VolumeRef>,
    path: &str,
) -> Result<Vec<u8>, Error> {
    v.read_file(
        p,
        v1::ReadFileRequest {
            volume: vol,
            path: path.into(),
        },
    )
    .await
    .map(|f| f.content)
}

async fn create(v: &Volumes, p: &Principal, name: &str, mode: &str, quota: i64) -> v1::Volume {
    v.create_volume(
        p,
        v1::CreateVolumeRequest {
            name: name.into(),
            mode: mode.into(),
            quota_bytes: quota,
            description: String::new(),
        },
    )
    .await
    .unwrap()
}

async fn get(v: &Volumes, p: &Principal, name: &str) -> v1::Volume {
    v.get_volume(p, named(name).as_ref()).await.unwrap()
}

fn code<T: std::fmt::Debug>(r: Result<T, Error>) -> (ErrorCode, Option<String>, String) {
    let e = r.expect_err("expected an error");
    (e.code, e.param, e.message)
}

async fn insert_run(db: &TestDb, tenant: &str, status: &str, root: Option<Uuid>) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO runs (id, tenant_id, subject, agent_name, agent_hash, parent_run_id,
                           root_run_id, status, spec)
         VALUES ($1, $2, 'alice', 'a', 'sha256:x', $3, COALESCE($3, $1), $4, '{}'::jsonb)",
    )
    .bind(id)
    .bind(tenant)
    .bind(root)
    .bind(status)
    .execute(&db.pool)
    .await
    .unwrap();
    id
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn usage(v: &Volumes, tenant: &str) -> i64 {
    v.store()
        .usage(&TenantId::parse(tenant).unwrap())
        .await
        .map_err(|e| e.into_api("usage"))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn named_volumes_are_created_listed_updated_and_deleted() {
    let (db, v) = setup().await;
    let p = user("acme");
    let max = i64::try_from(default_caps().max_volume_bytes).unwrap();
    let docs = create(&v, &p, "docs", "", 0).await;
    assert_eq!(
        (docs.kind.as_str(), docs.mode.as_str(), docs.quota_bytes),
        ("named", "rw", max)
    );
    assert_eq!(docs.tree_hash, weft_volumes::hash::EMPTY_TREE_HASH);
    assert_eq!((docs.bytes, docs.files, docs.seq), (0, 0, 0));
    // Declarative: a second put updates mode, quota and description.
    let again = v
        .create_volume(
            &p,
            v1::CreateVolumeRequest {
                name: "docs".into(),
                mode: "ro".into(),
                quota_bytes: 1000,
                description: "the docs".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (
            again.mode.as_str(),
            again.quota_bytes,
            again.description.as_str()
        ),
        ("ro", 1000, "the docs")
    );
    // Its definition went through the def store.
    let def = weft_substrate::defs::get(
        &DefStore::new(db.pool.clone()),
        weft_core::def::DefKind::Volume,
        &p.tenant,
        "docs",
        None,
    )
    .await
    .unwrap();
    assert!(def.content_json.contains("\"ro\""), "{}", def.content_json);
    create(&v, &p, "alpha", "rw", 10).await;
    let names: Vec<String> = v
        .list_volumes(&p)
        .await
        .unwrap()
        .volumes
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["alpha", "docs"]);

    // Bad input, each naming its field.
    for (name, mode, quota, param) in [
        ("run", "rw", 0, "name"),
        ("Bad Name", "rw", 0, "name"),
        ("ok", "rx", 0, "mode"),
        ("ok", "rw", -1, "quota_bytes"),
        ("ok", "rw", max + 1, "quota_bytes"),
    ] {
        let r = v
            .create_volume(
                &p,
                v1::CreateVolumeRequest {
                    name: name.into(),
                    mode: mode.into(),
                    quota_bytes: quota,
                    description: String::new(),
                },
            )
            .await;
        let (c, got, msg) = code(r);
        assert_eq!(
            (c, got.as_deref()),
            (ErrorCode::InvalidRequest, Some(param)),
            "{msg}"
        );
    }

    // A volume definition put through the definitions API becomes a volume on first use.
    weft_substrate::defs::put_json::<weft_core::volume::VolumeContent>(
        &DefStore::new(db.pool.clone()),
        &p.tenant,
        "from-defs",
        r#"{"mode": "rw", "quota_bytes": 4096}"#,
        None,
    )
    .await
    .unwrap();
    assert_eq!(get(&v, &p, "from-defs").await.quota_bytes, 4096);
    // A later version of the definition reaches the volume on its next use.
    weft_substrate::defs::put_json::<weft_core::volume::VolumeContent>(
        &DefStore::new(db.pool.clone()),
        &p.tenant,
        "from-defs",
        r#"{"mode": "ro", "quota_bytes": 2048, "description": "now ro"}"#,
        None,
    )
    .await
    .unwrap();
    let now = get(&v, &p, "from-defs").await;
    assert_eq!(
        (now.mode.as_str(), now.quota_bytes, now.description.as_str()),
        ("ro", 2048, "now ro")
    );
    let (c, _, msg) = code(apply(&v, &p, named("from-defs"), vec![put("f", b"x")]).await);
    assert_eq!(c, ErrorCode::Conflict, "{msg}");

    // Delete: the row goes, the definition is retired, the name is gone.
    assert!(v.delete_volume(&p, named("docs").as_ref()).await.unwrap());
    let (c, _, msg) = code(v.get_volume(&p, named("docs").as_ref()).await);
    assert_eq!(c, ErrorCode::NotFound);
    assert!(msg.contains("no volume `docs`"), "{msg}");
    let (c, _, _) = code(v.delete_volume(&p, named("docs").as_ref()).await);
    assert_eq!(c, ErrorCode::NotFound);
    let (c, _, _) = code(v.get_volume(&p, named("nope").as_ref()).await);
    assert_eq!(c, ErrorCode::NotFound);
    let (c, param, _) = code(v.get_volume(&p, None).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("volume"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_volume_refuses_every_write() {
    let (_db, v) = setup().await;
    let p = user("acme");
    create(&v, &p, "ref", "rw", 0).await;
    apply(&v, &p, named("ref"), vec![put("a.txt", b"hi")])
        .await
        .unwrap();
    let snap = v
        .create_snapshot(
            &p,
            v1::CreateSnapshotRequest {
                volume: named("ref"),
                label: "s".into(),
            },
        )
        .await
        .unwrap();
    create(&v, &p, "ref", "ro", 0).await;
    let (c, _, msg) = code(apply(&v, &p, named("ref"), vec![put("b.txt", b"x")]).await);
    assert_eq!(c, ErrorCode::Conflict, "{msg}");
    assert!(msg.contains("volume `ref` is read-only"), "{msg}");
    let (c, _, msg) = code(
        v.restore(
            &p,
            v1::RestoreRequest {
                volume: named("ref"),
                snapshot_id: snap.id,
                ..Default::default()
            },
        )
        .await,
    );
    assert_eq!(c, ErrorCode::Conflict, "{msg}");
    // Reads still work.
    assert_eq!(read(&v, &p, named("ref"), "a.txt").await.unwrap(), b"hi");
    assert_eq!(get(&v, &p, "ref").await.seq, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn files_are_written_read_listed_moved_and_deleted() {
    let (db, v) = setup().await;
    let p = user("acme");
    create(&v, &p, "work", "", 0).await;
    let c1 = v
        .apply(
            &p,
            v1::ApplyRequest {
                with_diff: true,
                ..req(
                    named("work"),
                    vec![
                        put("./a.txt", b"hello\n"),
                        put("dir/b.txt", b"bee\n"),
                        put("dir/sub/c.txt", b"sea\n"),
                    ],
                )
            },
        )
        .await
        .unwrap();
    assert_eq!(c1.seq, 1);
    assert_eq!(c1.source, "test");
    assert_eq!(c1.subject, "alice");
    assert_eq!(c1.tree_before, weft_volumes::hash::EMPTY_TREE_HASH);
    let paths: Vec<&str> = c1.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["a.txt", "dir/b.txt", "dir/sub/c.txt"]);
    assert_eq!(
        c1.files[0].after_sha.as_deref(),
        Some(sha(b"hello\n").as_str())
    );
    assert_eq!(c1.files[0].before_sha, None);
    assert_eq!(c1.files[0].size, 6);
    assert!(c1.files[0].diff.contains("+hello"), "{}", c1.files[0].diff);
    assert_eq!(
        read(&v, &p, named("work"), "a.txt").await.unwrap(),
        b"hello\n"
    );

    // The tree: all, under a directory, a page at a time.
    let tree = |prefix: &str, cursor: Option<String>, limit: u32| v1::TreeRequest {
        volume: named("work"),
        prefix: prefix.into(),
        cursor,
        limit,
    };
    let all = v.tree(&p, tree("", None, 0)).await.unwrap();
    assert_eq!(all.files.len(), 3);
    assert_eq!(all.tree_hash, c1.tree_after);
    let expected = weft_volumes::hash::tree_hash(
        all.files
            .iter()
            .map(|f| (f.path.as_str(), f.sha256.as_str(), f.mode)),
    );
    assert_eq!(all.tree_hash, expected);
    let under: Vec<String> = v
        .tree(&p, tree("dir/", None, 0))
        .await
        .unwrap()
        .files
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert_eq!(under, ["dir/b.txt", "dir/sub/c.txt"]);
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = v.tree(&p, tree("", cursor, 1)).await.unwrap();
        seen.extend(page.files.into_iter().map(|f| f.path));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ["a.txt", "dir/b.txt", "dir/sub/c.txt"]);
    let (c, param, _) = code(v.tree(&p, tree("", Some("bogus".into()), 0)).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("cursor"))
    );

    // An executable file keeps its mode when rewritten with mode 0.
    let exec = v1::FileOp {
        path: "run.sh".into(),
        if_match: None,
        op: Some(Op::Put(v1::PutFile {
            body: Some(v1::put_file::Body::Content(b"#!/bin/sh\n".to_vec())),
            mode: 493,
        })),
    };
    apply(&v, &p, named("work"), vec![exec]).await.unwrap();
    apply(
        &v,
        &p,
        named("work"),
        vec![put("run.sh", b"#!/bin/sh\necho\n")],
    )
    .await
    .unwrap();
    let f = v
        .read_file(
            &p,
            v1::ReadFileRequest {
                volume: named("work"),
                path: "run.sh".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(f.entry.unwrap().mode, 493);

    // A move is two files of one change: the source (gone) and the destination.
    let moved = apply(&v, &p, named("work"), vec![mv("a.txt", "dir/a.txt", false)])
        .await
        .unwrap();
    let rows: Vec<(&str, Option<&str>, Option<&str>)> = moved
        .files
        .iter()
        .map(|f| {
            (
                f.path.as_str(),
                f.before_sha.as_deref(),
                f.after_sha.as_deref(),
            )
        })
        .collect();
    let h = sha(b"hello\n");
    assert_eq!(
        rows,
        [
            ("a.txt", Some(h.as_str()), None),
            ("dir/a.txt", None, Some(h.as_str()))
        ]
    );
    let (c, param, msg) = code(read(&v, &p, named("work"), "a.txt").await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::NotFound, Some("path")),
        "{msg}"
    );
    apply(&v, &p, named("work"), vec![del("dir/sub/c.txt")])
        .await
        .unwrap();
    let vol = get(&v, &p, "work").await;
    assert_eq!((vol.files, vol.seq), (3, 5));
    assert_eq!(
        vol.bytes,
        i64::try_from("hello\n".len() + "bee\n".len() + "#!/bin/sh\necho\n".len()).unwrap()
    );
    assert_eq!(usage(&v, "acme").await, vol.bytes);
    assert_eq!(
        count(&db, "SELECT count(*) FROM volume_changes").await,
        5,
        "one change row per apply"
    );

    // Paths that escape the root, and files where directories are, are refused.
    for (bad, param) in [
        ("../x", "ops[0].path"),
        ("/etc/passwd", "ops[0].path"),
        ("a\0b", "ops[0].path"),
        ("", "ops[0].path"),
    ] {
        let (c, got, msg) = code(apply(&v, &p, named("work"), vec![put(bad, b"x")]).await);
        assert_eq!(
            (c, got.as_deref()),
            (ErrorCode::InvalidRequest, Some(param)),
            "{bad:?}: {msg}"
        );
    }
    let (c, _, msg) = code(apply(&v, &p, named("work"), vec![put("dir", b"x")]).await);
    assert_eq!(c, ErrorCode::Conflict, "{msg}");
    assert!(msg.contains("directory"), "{msg}");
    let (c, _, _) = code(apply(&v, &p, named("work"), vec![]).await);
    assert_eq!(c, ErrorCode::InvalidRequest);

    // An import (`replace`) makes the tree exactly its puts.
    let import = v
        .apply(
            &p,
            v1::ApplyRequest {
                replace: true,
                ..req(named("work"), vec![put("only.txt", b"1")])
            },
        )
        .await
        .unwrap();
    assert_eq!(import.files.len(), 4, "{:?}", import.files);
    let left: Vec<String> = v
        .tree(&p, tree("", None, 0))
        .await
        .unwrap()
        .files
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert_eq!(left, ["only.txt"]);
    assert_eq!(usage(&v, "acme").await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn preconditions_are_checked_before_anything_is_written() {
    let (_db, v) = setup().await;
    let p = user("acme");
    create(&v, &p, "w", "", 0).await;
    apply(&v, &p, named("w"), vec![put("f", b"one"), put("g", b"two")])
        .await
        .unwrap();
    let before = get(&v, &p, "w").await;
    let wrong = sha(b"other");
    let cases: Vec<(Vec<v1::FileOp>, ErrorCode, &str)> = vec![
        // The second op fails: the first must not be applied either.
        (
            vec![put("new", b"n"), put_if("f", b"x", &wrong)],
            ErrorCode::Conflict,
            "ops[1].if_match",
        ),
        (
            vec![put_if("f", b"x", "")],
            ErrorCode::Conflict,
            "ops[0].if_match",
        ),
        (
            vec![put_if("nope", b"x", &sha(b"one"))],
            ErrorCode::Conflict,
            "ops[0].if_match",
        ),
        (
            vec![mv("f", "g", false)],
            ErrorCode::Conflict,
            "ops[0].move.to",
        ),
        (
            vec![mv("nope", "z", false)],
            ErrorCode::NotFound,
            "ops[0].path",
        ),
        (
            vec![put("n", b"1"), del("nope")],
            ErrorCode::NotFound,
            "ops[1].path",
        ),
        (
            vec![put_if("f", b"x", "XYZ")],
            ErrorCode::InvalidRequest,
            "ops[0].if_match",
        ),
    ];
    for (ops, want, param) in cases {
        let (c, got, msg) = code(apply(&v, &p, named("w"), ops).await);
        assert_eq!((c, got.as_deref()), (want, Some(param)), "{msg}");
    }
    let (_, _, msg) = code(apply(&v, &p, named("w"), vec![put_if("f", b"x", &wrong)]).await);
    assert!(
        msg.contains("`f`") && msg.contains(&sha(b"one")),
        "names the path and the current sha: {msg}"
    );
    let after = get(&v, &p, "w").await;
    assert_eq!((after.seq, after.tree_hash), (before.seq, before.tree_hash));
    let (c, _, _) = code(read(&v, &p, named("w"), "new").await);
    assert_eq!(c, ErrorCode::NotFound);
    // The right sha passes; "" creates.
    apply(
        &v,
        &p,
        named("w"),
        vec![put_if("f", b"uno", &sha(b"one")), put_if("h", b"3", "")],
    )
    .await
    .unwrap();
    assert_eq!(read(&v, &p, named("w"), "f").await.unwrap(), b"uno");
    // Moving onto a file with `overwrite` replaces it.
    apply(&v, &p, named("w"), vec![mv("f", "g", true)])
        .await
        .unwrap();
    assert_eq!(read(&v, &p, named("w"), "g").await.unwrap(), b"uno");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_op_key_applies_once() {
    let (db, v) = setup().await;
    let p = user("acme");
    create(&v, &p, "w", "", 0).await;
    create(&v, &p, "other", "", 0).await;
    let keyed = |key: &str, ops: Vec<v1::FileOp>| v1::ApplyRequest {
        op_key: Some(key.into()),
        run_id: Some(Uuid::now_v7().to_string()),
        tool_use_id: Some("toolu_1".into()),
        source: "Write".into(),
        ..req(named("w"), ops)
    };
    let first = v
        .apply(&p, keyed("k1", vec![put("f", b"one")]))
        .await
        .unwrap();
    assert!(!first.replayed);
    // A repeat, even with other content, returns the recorded change and writes nothing.
    let again = v
        .apply(&p, keyed("k1", vec![put("f", b"two")]))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(
        (again.id.as_str(), again.seq),
        (first.id.as_str(), first.seq)
    );
    assert_eq!(again.files, first.files);
    assert_eq!(read(&v, &p, named("w"), "f").await.unwrap(), b"one");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM volume_changes WHERE op_key = 'k1'"
        )
        .await,
        1
    );
    // The same key for another volume is refused.
    let other = v1::ApplyRequest {
        volume: named("other"),
        ..keyed("k1", vec![put("f", b"one")])
    };
    let (c, param, _) = code(v.apply(&p, other).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("op_key"))
    );

    // Concurrent repeats of one key: one change, every caller gets it.
    let mut tasks = Vec::new();
    for i in 0..8u8 {
        let v = v.clone();
        let p = p.clone();
        let r = keyed("k2", vec![put("g", &[b'a' + i])]);
        tasks.push(tokio::spawn(async move { v.apply(&p, r).await }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap().unwrap().id);
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM volume_changes WHERE op_key = 'k2'"
        )
        .await,
        1
    );
    assert_eq!(get(&v, &p, "w").await.seq, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn caps_refuse_growth_and_nothing_is_written() {
    let caps = Caps {
        max_file_bytes: 100,
        max_volume_bytes: 300,
        max_files: 3,
        max_tenant_bytes: 500,
    };
    let (db, v) = setup_with(caps).await;
    let p = user("acme");
    create(&v, &p, "small", "", 250).await;
    create(&v, &p, "big", "", 0).await;
    create(&v, &p, "third", "", 0).await;
    let kb = |n: usize| vec![b'x'; n];

    // One file over max_file_bytes: invalid, naming the op.
    let (c, param, msg) = code(apply(&v, &p, named("small"), vec![put("f", &kb(101))]).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("ops[0].put")),
        "{msg}"
    );
    assert!(msg.contains("volumes.max_file_bytes"), "{msg}");
    let (c, param, _) = code(
        v.put_blobs(
            &p,
            v1::PutBlobsRequest {
                blobs: vec![v1::Blob {
                    sha256: String::new(),
                    content: kb(101),
                }],
            },
        )
        .await,
    );
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("blobs[0].content"))
    );

    // The volume's quota.
    apply(
        &v,
        &p,
        named("small"),
        vec![put("a", &kb(100)), put("b", &kb(100))],
    )
    .await
    .unwrap();
    let (c, _, msg) = code(apply(&v, &p, named("small"), vec![put("c", &kb(51))]).await);
    assert_eq!(c, ErrorCode::RateLimited, "{msg}");
    assert!(msg.contains("quota"), "{msg}");
    // Shrinking a file is fine even at the quota.
    apply(&v, &p, named("small"), vec![put("a", &kb(10))])
        .await
        .unwrap();

    // The file count.
    apply(
        &v,
        &p,
        named("big"),
        vec![put("1", b"1"), put("2", b"2"), put("3", b"3")],
    )
    .await
    .unwrap();
    let (c, _, msg) = code(apply(&v, &p, named("big"), vec![put("4", b"4")]).await);
    assert_eq!(c, ErrorCode::RateLimited, "{msg}");
    assert!(msg.contains("volumes.max_files"), "{msg}");

    // The tenant: 110 + 3 used; 300 more fits in `third`'s quota but not the tenant's 500.
    assert_eq!(usage(&v, "acme").await, 113);
    apply(
        &v,
        &p,
        named("third"),
        vec![put("a", &kb(100)), put("b", &kb(100))],
    )
    .await
    .unwrap();
    assert_eq!(usage(&v, "acme").await, 313);
    let before_changes = count(&db, "SELECT count(*) FROM volume_changes").await;
    let (c, _, msg) = code(
        apply(
            &v,
            &p,
            named("big"),
            vec![put("1", &kb(100)), put("2", &kb(100))],
        )
        .await,
    );
    assert_eq!(c, ErrorCode::RateLimited, "{msg}");
    assert!(msg.contains("volumes.max_tenant_bytes"), "{msg}");
    // The refused changes wrote nothing: no change row, the usage as before.
    assert_eq!(
        count(&db, "SELECT count(*) FROM volume_changes").await,
        before_changes
    );
    assert_eq!(usage(&v, "acme").await, 313);
    let sum: i64 = sqlx::query_scalar("SELECT sum(bytes)::bigint FROM volumes")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(sum, 313);
    assert_eq!(read(&v, &p, named("big"), "1").await.unwrap(), b"1");
}

#[tokio::test(flavor = "multi_thread")]
async fn another_tenant_gets_not_found_for_everything() {
    let (db, v) = setup().await;
    let a = user("acme");
    let b = user("evil");
    create(&v, &a, "docs", "", 0).await;
    let change = apply(&v, &a, named("docs"), vec![put("secret.txt", b"s3cr3t")])
        .await
        .unwrap();
    let secret = sha(b"s3cr3t");
    let run = insert_run(&db, "acme", "running", None).await;
    apply(&v, &a, of_run(run, true), vec![put("r.txt", b"run")])
        .await
        .unwrap();

    for r in [named("docs"), of_run(run, false), of_run(run, true)] {
        let (c, _, msg) = code(v.get_volume(&b, r.as_ref()).await);
        assert_eq!(c, ErrorCode::NotFound, "{msg}");
        let (c, _, _) = code(read(&v, &b, r.clone(), "secret.txt").await);
        assert_eq!(c, ErrorCode::NotFound);
        let (c, _, _) = code(apply(&v, &b, r.clone(), vec![put("x", b"x")]).await);
        assert_eq!(c, ErrorCode::NotFound);
        let (c, _, _) = code(v.delete_volume(&b, r.as_ref()).await);
        assert_eq!(c, ErrorCode::NotFound);
        let (c, _, _) = code(
            v.get_blobs(
                &b,
                v1::GetBlobsRequest {
                    volume: r.clone(),
                    sha256: vec![secret.clone()],
                },
            )
            .await,
        );
        assert_eq!(c, ErrorCode::NotFound);
    }
    assert!(v.list_volumes(&b).await.unwrap().volumes.is_empty());
    assert!(!v.purge_run_volume(&b, &run.to_string()).await.unwrap());

    // B's own volume of the same name is another volume; A's blobs are not B's.
    create(&v, &b, "docs", "", 0).await;
    let (c, _, _) = code(read(&v, &b, named("docs"), "secret.txt").await);
    assert_eq!(c, ErrorCode::NotFound);
    let (c, _, msg) = code(
        v.get_blobs(
            &b,
            v1::GetBlobsRequest {
                volume: named("docs"),
                sha256: vec![secret.clone()],
            },
        )
        .await,
    );
    assert_eq!(c, ErrorCode::NotFound, "{msg}");
    let by_sha = v1::FileOp {
        path: "copy".into(),
        if_match: None,
        op: Some(Op::Put(v1::PutFile {
            body: Some(v1::put_file::Body::Sha256(secret.clone())),
            mode: 0,
        })),
    };
    let (c, _, msg) = code(apply(&v, &b, named("docs"), vec![by_sha]).await);
    assert_eq!(c, ErrorCode::Conflict, "{msg}");
    assert!(msg.contains("PutBlobs"), "{msg}");
    let (c, _, _) = code(
        v.undo(
            &b,
            v1::UndoRequest {
                volume: named("docs"),
                target: Some(v1::undo_request::Target::ChangeId(c_id(&change))),
                op_key: None,
            },
        )
        .await,
    );
    assert_eq!(c, ErrorCode::NotFound);
    // A still has everything.
    assert_eq!(
        read(&v, &a, named("docs"), "secret.txt").await.unwrap(),
        b"s3cr3t"
    );
    let got = v
        .get_blobs(
            &a,
            v1::GetBlobsRequest {
                volume: named("docs"),
                sha256: vec![secret.clone()],
            },
        )
        .await
        .unwrap();
    assert_eq!(got.blobs[0].content, b"s3cr3t");
    // No oracle within a tenant either: a blob of another volume is not this volume's.
    create(&v, &a, "empty", "", 0).await;
    let (c, _, _) = code(
        v.get_blobs(
            &a,
            v1::GetBlobsRequest {
                volume: named("empty"),
                sha256: vec![secret],
            },
        )
        .await,
    );
    assert_eq!(c, ErrorCode::NotFound);
}

fn c_id(c: &v1::Change) -> String {
    c.id.clone()
}

async fn undo_change(v: &Volumes, p: &Principal, id: &str) -> Result<v1::Change, Error> {
    v.undo(
        p,
        v1::UndoRequest {
            volume: named("w"),
            target: Some(v1::undo_request::Target::ChangeId(id.into())),
            op_key: None,
        },
    )
    .await
}

async fn changes(v: &Volumes, p: &Principal) -> Vec<v1::Change> {
    v.list_changes(
        p,
        v1::ListChangesRequest {
            volume: named("w"),
            ..Default::default()
        },
    )
    .await
    .unwrap()
    .changes
}

#[tokio::test(flavor = "multi_thread")]
async fn undo_reverts_and_never_clobbers_a_later_edit() {
    let (_db, v) = setup().await;
    let p = user("acme");
    create(&v, &p, "w", "", 0).await;
    let run = Uuid::now_v7();
    let other_run = Uuid::now_v7();
    let by_run = |r: Uuid, ops: Vec<v1::FileOp>| v1::ApplyRequest {
        run_id: Some(r.to_string()),
        ..req(named("w"), ops)
    };
    let c1 = v
        .apply(&p, by_run(run, vec![put("f", b"v1")]))
        .await
        .unwrap();
    let c2 = v
        .apply(&p, by_run(run, vec![put("f", b"v2")]))
        .await
        .unwrap();
    let c3 = v
        .apply(&p, by_run(other_run, vec![put("g", b"g1")]))
        .await
        .unwrap();

    // c1's file changed since (c2): refused, naming the path, the change and the current sha.
    let (c, _, msg) = code(undo_change(&v, &p, &c1.id).await);
    assert_eq!(c, ErrorCode::Conflict, "{msg}");
    assert!(
        msg.contains("`f` changed since change")
            && msg.contains(&c1.id)
            && msg.contains(&sha(b"v2")),
        "{msg}"
    );
    assert_eq!(read(&v, &p, named("w"), "f").await.unwrap(), b"v2");

    // Undo c2: f back to v1, as a new change that says what it undid.
    let u = undo_change(&v, &p, &c2.id).await.unwrap();
    assert_eq!(
        (u.source.as_str(), u.undoes.as_deref()),
        ("undo", Some(c2.id.as_str()))
    );
    assert_eq!(u.files[0].after_sha.as_deref(), Some(sha(b"v1").as_str()));
    assert_eq!(read(&v, &p, named("w"), "f").await.unwrap(), b"v1");
    let log = changes(&v, &p).await;
    assert_eq!(log[0].id, u.id, "newest first");
    let c2_now = log.iter().find(|c| c.id == c2.id).unwrap();
    assert_eq!(c2_now.undone_by.as_deref(), Some(u.id.as_str()));
    let (c, _, msg) = code(undo_change(&v, &p, &c2.id).await);
    assert_eq!(c, ErrorCode::Conflict);
    assert!(msg.contains("already undone"), "{msg}");

    // Undoing the undo brings c2 back, and c2 counts as not undone again.
    undo_change(&v, &p, &u.id).await.unwrap();
    assert_eq!(read(&v, &p, named("w"), "f").await.unwrap(), b"v2");
    let c2_now = changes(&v, &p)
        .await
        .into_iter()
        .find(|c| c.id == c2.id)
        .unwrap();
    assert_eq!(c2_now.undone_by, None);

    // Undo the whole run: c2 then c1, as one change; the other run's g stays.
    let all = v
        .undo(
            &p,
            v1::UndoRequest {
                volume: named("w"),
                target: Some(v1::undo_request::Target::RunId(run.to_string())),
                op_key: Some("undo-run".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(all.files.len(), 1);
    assert_eq!(
        all.files[0].after_sha, None,
        "f did not exist before the run"
    );
    let (c, _, _) = code(read(&v, &p, named("w"), "f").await);
    assert_eq!(c, ErrorCode::NotFound);
    assert_eq!(read(&v, &p, named("w"), "g").await.unwrap(), b"g1");
    for c in changes(&v, &p).await {
        if c.id == c1.id || c.id == c2.id {
            assert_eq!(c.undone_by.as_deref(), Some(all.id.as_str()));
        }
    }
    // The op key replays; with nothing left of the run, a new undo is refused.
    let again = v
        .undo(
            &p,
            v1::UndoRequest {
                volume: named("w"),
                target: Some(v1::undo_request::Target::RunId(run.to_string())),
                op_key: Some("undo-run".into()),
            },
        )
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.id, all.id);
    let (c, _, _) = code(
        v.undo(
            &p,
            v1::UndoRequest {
                volume: named("w"),
                target: Some(v1::undo_request::Target::RunId(run.to_string())),
                op_key: None,
            },
        )
        .await,
    );
    assert_eq!(c, ErrorCode::Conflict);

    // A run undo is refused whole when a later change of someone else touched its file.
    apply(&v, &p, named("w"), vec![put("g", b"g2")])
        .await
        .unwrap();
    let seq = get(&v, &p, "w").await.seq;
    let (c, _, msg) = code(
        v.undo(
            &p,
            v1::UndoRequest {
                volume: named("w"),
                target: Some(v1::undo_request::Target::RunId(other_run.to_string())),
                op_key: None,
            },
        )
        .await,
    );
    assert_eq!(c, ErrorCode::Conflict, "{msg}");
    assert!(msg.contains(&c3.id), "{msg}");
    assert_eq!(get(&v, &p, "w").await.seq, seq, "nothing applied");
    let (c, _, _) = code(undo_change(&v, &p, &Uuid::now_v7().to_string()).await);
    assert_eq!(c, ErrorCode::NotFound);
}

#[tokio::test(flavor = "multi_thread")]
async fn snapshots_diff_and_restore() {
    let (_db, v) = setup().await;
    let p = user("acme");
    create(&v, &p, "w", "", 0).await;
    apply(
        &v,
        &p,
        named("w"),
        vec![put("a", b"one\n"), put("b", b"bee\n")],
    )
    .await
    .unwrap();
    let snap = v
        .create_snapshot(
            &p,
            v1::CreateSnapshotRequest {
                volume: named("w"),
                label: "before".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!((snap.files, snap.bytes, snap.seq), (2, 8, 1));
    assert_eq!(snap.tree_hash, get(&v, &p, "w").await.tree_hash);
    apply(
        &v,
        &p,
        named("w"),
        vec![put("a", b"two\n"), del("b"), put("c", b"sea\n")],
    )
    .await
    .unwrap();
    let listed = v
        .list_snapshots(&p, v1::ListSnapshotsRequest { volume: named("w") })
        .await
        .unwrap();
    assert_eq!(listed.snapshots, vec![snap.clone()]);

    let d = v
        .diff(
            &p,
            v1::DiffRequest {
                volume: named("w"),
                from: snap.id.clone(),
                to: "current".into(),
                with_diff: true,
            },
        )
        .await
        .unwrap();
    let summary: Vec<(&str, bool, bool)> = d
        .files
        .iter()
        .map(|f| {
            (
                f.path.as_str(),
                f.before_sha.is_some(),
                f.after_sha.is_some(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [("a", true, true), ("b", true, false), ("c", false, true)]
    );
    assert!(
        d.files[0].diff.contains("-one") && d.files[0].diff.contains("+two"),
        "{}",
        d.files[0].diff
    );
    assert_eq!(d.from_tree, snap.tree_hash);
    assert_eq!(d.to_tree, get(&v, &p, "w").await.tree_hash);
    let same = v
        .diff(
            &p,
            v1::DiffRequest {
                volume: named("w"),
                from: "current".into(),
                to: "current".into(),
                with_diff: false,
            },
        )
        .await
        .unwrap();
    assert!(same.files.is_empty());
    let (c, param, _) = code(
        v.diff(
            &p,
            v1::DiffRequest {
                volume: named("w"),
                from: Uuid::now_v7().to_string(),
                to: "current".into(),
                with_diff: false,
            },
        )
        .await,
    );
    assert_eq!((c, param.as_deref()), (ErrorCode::NotFound, Some("from")));

    // Restore with a stale `if_tree`: refused, nothing changes.
    let current = get(&v, &p, "w").await;
    let (c, param, msg) = code(
        v.restore(
            &p,
            v1::RestoreRequest {
                volume: named("w"),
                snapshot_id: snap.id.clone(),
                if_tree: Some(snap.tree_hash.clone()),
                op_key: None,
            },
        )
        .await,
    );
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::Conflict, Some("if_tree")),
        "{msg}"
    );
    assert_eq!(get(&v, &p, "w").await.seq, current.seq);
    let r = v
        .restore(
            &p,
            v1::RestoreRequest {
                volume: named("w"),
                snapshot_id: snap.id.clone(),
                if_tree: Some(current.tree_hash.clone()),
                op_key: Some("restore-1".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(r.source, "restore");
    assert_eq!(r.tree_after, snap.tree_hash);
    assert_eq!(r.files.len(), 3);
    assert_eq!(get(&v, &p, "w").await.tree_hash, snap.tree_hash);
    assert_eq!(read(&v, &p, named("w"), "a").await.unwrap(), b"one\n");
    assert_eq!(read(&v, &p, named("w"), "b").await.unwrap(), b"bee\n");
    let (c, _, _) = code(read(&v, &p, named("w"), "c").await);
    assert_eq!(c, ErrorCode::NotFound);
    // The restore is a change like any other: it can be undone.
    undo_change(&v, &p, &r.id).await.unwrap();
    assert_eq!(read(&v, &p, named("w"), "c").await.unwrap(), b"sea\n");

    // A restore that would grow the volume past its (since lowered) quota is refused.
    create(&v, &p, "w", "", 7).await;
    apply(&v, &p, named("w"), vec![del("a")]).await.unwrap();
    let (c, _, msg) = code(
        v.restore(
            &p,
            v1::RestoreRequest {
                volume: named("w"),
                snapshot_id: snap.id,
                if_tree: None,
                op_key: None,
            },
        )
        .await,
    );
    assert_eq!(c, ErrorCode::RateLimited, "{msg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn glob_and_grep() {
    let (_db, v) = setup().await;
    let p = user("acme");
    create(&v, &p, "code", "", 0).await;
    apply(
        &v,
        &p,
        named("code"),
        vec![
            put("src/main.rs", b"fn main() {\n    // TODO: args\n}\n"),
            put("README.md", b"# readme\ntodo: write it\n"),
            put("blob.bin", b"TODO\0\x01\x02binary"),
        ],
    )
    .await
    .unwrap();
    apply(
        &v,
        &p,
        named("code"),
        vec![put(
            "src/lib.rs",
            b"// TODO one\npub fn f() {}\n// TODO two\n",
        )],
    )
    .await
    .unwrap();

    let glob = |pattern: &str, limit: u32| v1::GlobRequest {
        volume: named("code"),
        pattern: pattern.into(),
        limit,
    };
    let g = v.glob(&p, glob("**/*.rs", 0)).await.unwrap();
    let paths: Vec<&str> = g.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["src/lib.rs", "src/main.rs"], "newest first");
    assert!(!g.truncated);
    let g = v.glob(&p, glob("**/*.rs", 1)).await.unwrap();
    assert_eq!((g.files.len(), g.truncated), (1, true));
    assert!(v.glob(&p, glob("*.rs", 0)).await.unwrap().files.is_empty());
    let (c, param, _) = code(v.glob(&p, glob("a[", 0)).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("pattern"))
    );

    let grep = |pattern: &str, mode: &str| v1::GrepRequest {
        volume: named("code"),
        pattern: pattern.into(),
        mode: mode.into(),
        ..Default::default()
    };
    let r = v.grep(&p, grep("TODO", "files")).await.unwrap();
    assert_eq!(r.files, ["src/lib.rs", "src/main.rs"]);
    assert_eq!(r.skipped_binary, 1);
    let r = v
        .grep(
            &p,
            v1::GrepRequest {
                case_insensitive: true,
                ..grep("todo", "")
            },
        )
        .await
        .unwrap();
    assert_eq!(r.files, ["README.md", "src/lib.rs", "src/main.rs"]);
    let r = v.grep(&p, grep("TODO", "count")).await.unwrap();
    let counts: Vec<(&str, u32)> = r
        .counts
        .iter()
        .map(|c| (c.path.as_str(), c.count))
        .collect();
    assert_eq!(counts, [("src/lib.rs", 2), ("src/main.rs", 1)]);
    let r = v
        .grep(
            &p,
            v1::GrepRequest {
                context: 1,
                glob: Some("src/main.rs".into()),
                ..grep("TODO", "content")
            },
        )
        .await
        .unwrap();
    let lines: Vec<(u32, bool)> = r.lines.iter().map(|l| (l.line, l.is_match)).collect();
    assert_eq!(lines, [(1, false), (2, true), (3, false)]);
    assert!(r.lines[1].text.contains("TODO: args"));
    let r = v
        .grep(
            &p,
            v1::GrepRequest {
                limit: 1,
                ..grep("TODO", "content")
            },
        )
        .await
        .unwrap();
    assert_eq!((r.lines.len(), r.truncated), (1, true));
    let (c, param, _) = code(v.grep(&p, grep("(", "files")).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("pattern"))
    );
    let (c, param, _) = code(v.grep(&p, grep("x", "lines")).await);
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("mode"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_tree_shares_one_volume_that_is_purged_and_swept() {
    let (db, v) = setup().await;
    let p = user("acme");
    let root = insert_run(&db, "acme", "running", None).await;
    let child = insert_run(&db, "acme", "running", Some(root)).await;

    // No volume until the first write; a read without `create` is not found.
    let (c, param, _) = code(v.get_volume(&p, of_run(root, false).as_ref()).await);
    assert_eq!((c, param.as_deref()), (ErrorCode::NotFound, Some("run_id")));
    // The child writes with `create`: the root's volume is made.
    apply(&v, &p, of_run(child, true), vec![put("notes.md", b"hi")])
        .await
        .unwrap();
    let vol = v
        .get_volume(&p, of_run(root, false).as_ref())
        .await
        .unwrap();
    assert_eq!(vol.name, format!("run:{root}"));
    assert_eq!(vol.kind, "ephemeral");
    assert_eq!(vol.root_run_id, Some(root.to_string()));
    assert_eq!(
        read(&v, &p, of_run(root, false), "notes.md").await.unwrap(),
        b"hi"
    );
    // Not listed with the named volumes, and not reachable by its name.
    assert!(v.list_volumes(&p).await.unwrap().volumes.is_empty());
    let (c, _, _) = code(v.get_volume(&p, named(&vol.name).as_ref()).await);
    assert_eq!(c, ErrorCode::InvalidRequest);
    let (c, param, _) = code(
        v.get_volume(&p, of_run(Uuid::now_v7(), true).as_ref())
            .await,
    );
    assert_eq!((c, param.as_deref()), (ErrorCode::NotFound, Some("run_id")));

    // Purge: gone, its bytes given back.
    assert_eq!(usage(&v, "acme").await, 2);
    assert!(v.purge_run_volume(&p, &root.to_string()).await.unwrap());
    assert!(!v.purge_run_volume(&p, &root.to_string()).await.unwrap());
    assert_eq!(usage(&v, "acme").await, 0);
    let (c, _, _) = code(read(&v, &p, of_run(root, false), "notes.md").await);
    assert_eq!(c, ErrorCode::NotFound);

    // The sweeper purges the volumes of ended roots (and only those).
    let ended = insert_run(&db, "acme", "running", None).await;
    let live = insert_run(&db, "acme", "running", None).await;
    for r in [ended, live] {
        apply(&v, &p, of_run(r, true), vec![put("f", b"12345")])
            .await
            .unwrap();
    }
    sqlx::query("UPDATE runs SET status = 'succeeded' WHERE id = $1")
        .bind(ended)
        .execute(&db.pool)
        .await
        .unwrap();
    // An ended root gets no new volume.
    let late = insert_run(&db, "acme", "failed", None).await;
    let (c, _, msg) = code(apply(&v, &p, of_run(late, true), vec![put("f", b"x")]).await);
    assert_eq!(c, ErrorCode::Conflict, "{msg}");
    let stop = tokio_util::sync::CancellationToken::new();
    let sweeper = tokio::spawn(volumes::sweep_until(
        v.store().clone(),
        Duration::from_millis(20),
        stop.clone(),
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    while v
        .get_volume(&p, of_run(ended, false).as_ref())
        .await
        .is_ok()
    {
        assert!(
            Instant::now() < deadline,
            "the sweeper did not purge the volume"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    sweeper.await.unwrap();
    assert!(v.get_volume(&p, of_run(live, false).as_ref()).await.is_ok());
    assert_eq!(usage(&v, "acme").await, 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn blobs_are_put_ahead_and_named_by_sha() {
    let (db, v) = setup().await;
    let p = user("acme");
    create(&v, &p, "w", "", 0).await;
    let content = b"stored ahead".to_vec();
    let h = sha(&content);
    let stored = v
        .put_blobs(
            &p,
            v1::PutBlobsRequest {
                blobs: vec![
                    v1::Blob {
                        sha256: h.clone(),
                        content: content.clone(),
                    },
                    v1::Blob {
                        sha256: String::new(),
                        content: content.clone(),
                    },
                ],
            },
        )
        .await
        .unwrap();
    assert_eq!(stored.stored, [h.clone(), h.clone()]);
    let (c, param, _) = code(
        v.put_blobs(
            &p,
            v1::PutBlobsRequest {
                blobs: vec![v1::Blob {
                    sha256: sha(b"other"),
                    content: content.clone(),
                }],
            },
        )
        .await,
    );
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("blobs[0].sha256"))
    );
    let by_sha = v1::FileOp {
        path: "f".into(),
        if_match: None,
        op: Some(Op::Put(v1::PutFile {
            body: Some(v1::put_file::Body::Sha256(h.clone())),
            mode: 0,
        })),
    };
    let c = apply(&v, &p, named("w"), vec![by_sha]).await.unwrap();
    assert_eq!(c.files[0].size, i64::try_from(content.len()).unwrap());
    assert_eq!(read(&v, &p, named("w"), "f").await.unwrap(), content);
    let got = v
        .get_blobs(
            &p,
            v1::GetBlobsRequest {
                volume: named("w"),
                sha256: vec![h.clone()],
            },
        )
        .await
        .unwrap();
    assert_eq!(
        got.blobs,
        vec![v1::Blob {
            sha256: h.clone(),
            content
        }]
    );

    // Long after it was put, the blob is reachable by sha only from a volume that names it.
    sqlx::query("UPDATE volume_blobs SET touched_at = now() - interval '1 hour'")
        .execute(&db.pool)
        .await
        .unwrap();
    create(&v, &p, "o", "", 0).await;
    let by_sha = |path: &str| v1::FileOp {
        path: path.into(),
        if_match: None,
        op: Some(Op::Put(v1::PutFile {
            body: Some(v1::put_file::Body::Sha256(h.clone())),
            mode: 0,
        })),
    };
    let (c, _, msg) = code(apply(&v, &p, named("o"), vec![by_sha("f")]).await);
    assert_eq!(c, ErrorCode::Conflict, "{msg}");
    assert!(msg.contains("PutBlobs"), "{msg}");
    apply(&v, &p, named("w"), vec![by_sha("copy")])
        .await
        .unwrap();
    // Put again, it is fresh: any volume may name it.
    v.put_blobs(
        &p,
        v1::PutBlobsRequest {
            blobs: vec![v1::Blob {
                sha256: String::new(),
                content: b"stored ahead".to_vec(),
            }],
        },
    )
    .await
    .unwrap();
    apply(&v, &p, named("o"), vec![by_sha("f")]).await.unwrap();

    // GetBlobs sizes the reply from the rows before reading any blob.
    sqlx::query("UPDATE volume_blobs SET size = 16 * 1024 * 1024 WHERE sha256 = $1")
        .bind(&h)
        .execute(&db.pool)
        .await
        .unwrap();
    let (c, param, msg) = code(
        v.get_blobs(
            &p,
            v1::GetBlobsRequest {
                volume: named("w"),
                sha256: vec![h.clone()],
            },
        )
        .await,
    );
    assert_eq!(
        (c, param.as_deref()),
        (ErrorCode::InvalidRequest, Some("sha256")),
        "{msg}"
    );
    assert!(msg.contains("ask for fewer"), "{msg}");
}

async fn blobs_of(db: &TestDb, content: &[u8]) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM volume_blobs WHERE sha256 = $1")
        .bind(sha(content))
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn blobs_nothing_names_are_collected_by_the_sweeper() {
    let db = TestDb::new().await;
    let store = VolumeStore::new(
        db.pool.clone(),
        Blobs::postgres(db.pool.clone()),
        default_caps(),
    )
    .with_blob_grace(Duration::ZERO);
    let v = Volumes::new(store, DefStore::new(db.pool.clone()));
    let p = user("acme");

    // A run's volume, purged: nothing names its blob.
    let root = insert_run(&db, "acme", "running", None).await;
    apply(
        &v,
        &p,
        of_run(root, true),
        vec![put("scratch", b"run scratch")],
    )
    .await
    .unwrap();
    assert!(v.purge_run_volume(&p, &root.to_string()).await.unwrap());
    // A named volume, deleted.
    create(&v, &p, "gone", "", 0).await;
    apply(
        &v,
        &p,
        named("gone"),
        vec![put("f", b"in a deleted volume")],
    )
    .await
    .unwrap();
    assert!(v.delete_volume(&p, named("gone").as_ref()).await.unwrap());
    // A file deleted: its blob is named by the history.
    create(&v, &p, "hist", "", 0).await;
    apply(
        &v,
        &p,
        named("hist"),
        vec![put("f", b"deleted, in history")],
    )
    .await
    .unwrap();
    let deleted = apply(&v, &p, named("hist"), vec![del("f")]).await.unwrap();
    // A blob only a snapshot names (its history removed by hand: nothing prunes history yet).
    create(&v, &p, "snap", "", 0).await;
    apply(&v, &p, named("snap"), vec![put("f", b"only in a snapshot")])
        .await
        .unwrap();
    let snap = v
        .create_snapshot(
            &p,
            v1::CreateSnapshotRequest {
                volume: named("snap"),
                label: String::new(),
            },
        )
        .await
        .unwrap();
    apply(&v, &p, named("snap"), vec![put("f", b"newer")])
        .await
        .unwrap();
    sqlx::query(
        "DELETE FROM volume_changes WHERE volume_id = (SELECT id FROM volumes WHERE name = 'snap')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // Put ahead and never used.
    v.put_blobs(
        &p,
        v1::PutBlobsRequest {
            blobs: vec![v1::Blob {
                sha256: String::new(),
                content: b"staged".to_vec(),
            }],
        },
    )
    .await
    .unwrap();

    // Within a grace period nothing goes.
    let patient = v.store().clone().with_blob_grace(Duration::from_secs(3600));
    assert_eq!(
        patient
            .collect_blobs(100)
            .await
            .map_err(|e| e.into_api("collect"))
            .unwrap(),
        0
    );
    assert_eq!(blobs_of(&db, b"staged").await, 1);

    let stop = tokio_util::sync::CancellationToken::new();
    let sweeper = tokio::spawn(volumes::sweep_until(
        v.store().clone(),
        Duration::from_millis(20),
        stop.clone(),
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    for gone in [&b"run scratch"[..], b"in a deleted volume", b"staged"] {
        while blobs_of(&db, gone).await != 0 {
            assert!(
                Instant::now() < deadline,
                "the sweeper did not collect {}",
                String::from_utf8_lossy(gone)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    stop.cancel();
    sweeper.await.unwrap();
    for kept in [&b"deleted, in history"[..], b"only in a snapshot", b"newer"] {
        assert_eq!(
            blobs_of(&db, kept).await,
            1,
            "{}",
            String::from_utf8_lossy(kept)
        );
    }
    // What stayed still reads back: the delete undone, the snapshot restored.
    v.undo(
        &p,
        v1::UndoRequest {
            volume: named("hist"),
            target: Some(v1::undo_request::Target::ChangeId(c_id(&deleted))),
            op_key: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        read(&v, &p, named("hist"), "f").await.unwrap(),
        b"deleted, in history"
    );
    v.restore(
        &p,
        v1::RestoreRequest {
            volume: named("snap"),
            snapshot_id: snap.id,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        read(&v, &p, named("snap"), "f").await.unwrap(),
        b"only in a snapshot"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_volume_keeps_at_most_max_snapshots() {
    let (_db, v) = setup().await;
    let p = user("acme");
    create(&v, &p, "s", "", 0).await;
    let snap = || {
        v.create_snapshot(
            &p,
            v1::CreateSnapshotRequest {
                volume: named("s"),
                label: String::new(),
            },
        )
    };
    for _ in 0..volumes::store::MAX_SNAPSHOTS {
        snap().await.unwrap();
    }
    let (c, _, msg) = code(snap().await);
    assert_eq!(c, ErrorCode::RateLimited, "{msg}");
    assert!(msg.contains("100 snapshots"), "{msg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_checks_scopes_and_maps_codes() {
    let db = TestDb::new().await;
    let jwt = InternalJwt::from_secret(b"test-secret-test-secret-test-secret");
    let defs = DefStore::new(db.pool.clone());
    let parts = common::parts(defs, &db.name).await;
    let transport =
        weft_proto::transport::in_process(weft_substrate::grpc_service(&parts, jwt.clone()));
    let mut client = weft_proto::transport::volumes_client(transport);
    let signed = |scopes: &str| {
        format!(
            "Bearer {}",
            jwt.sign(&principal("acme", "alice", scopes)).unwrap()
        )
    };
    fn with<T>(msg: T, auth: &str) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut()
            .insert("authorization", auth.parse().unwrap());
        r
    }
    let rw = signed("volumes:read,volumes:write");
    let ro = signed("volumes:read");
    client
        .create_volume(with(
            v1::CreateVolumeRequest {
                name: "docs".into(),
                ..Default::default()
            },
            &rw,
        ))
        .await
        .unwrap();
    let denied = client
        .apply(with(req(named("docs"), vec![put("f", b"x")]), &ro))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    let denied = client
        .get_volume(with(named("docs").unwrap(), &signed("volumes:write")))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    // A file near the largest (8 MiB) passes through the service's message limit.
    let big = vec![b'z'; 8 * 1024 * 1024];
    client
        .apply(with(req(named("docs"), vec![put("big", &big)]), &rw))
        .await
        .unwrap();
    let f = client
        .read_file(with(
            v1::ReadFileRequest {
                volume: named("docs"),
                path: "big".into(),
            },
            &ro,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(f.content.len(), big.len());
    // A failed precondition is FAILED_PRECONDITION, the weft code `conflict` alongside.
    let s = client
        .apply(with(req(named("docs"), vec![put_if("big", b"x", "")]), &rw))
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{s:?}");
    let e = Error::from(&s);
    assert_eq!(e.code, ErrorCode::Conflict);
    assert_eq!(e.param.as_deref(), Some("ops[0].if_match"));
    // Another tenant's volume is NOT_FOUND; no token is UNAUTHENTICATED.
    let other = format!("Bearer {}", jwt.sign(&user("evil")).unwrap());
    let s = client
        .get_volume(with(named("docs").unwrap(), &other))
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::NotFound);
    let s = client
        .list_volumes(tonic::Request::new(v1::ListVolumesRequest {}))
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::Unauthenticated);
}
