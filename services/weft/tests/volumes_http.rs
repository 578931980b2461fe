//! Volumes over HTTP against a whole fleet (gateway → substrate gRPC → Postgres): files as raw
//! bytes with `ETag`/`If-Match`/`If-None-Match` (304, 412), the tree a page at a time, tar
//! import/export byte for byte, archives refused whole (a bomb by count and by size, `../evil`,
//! a symlink) with a 400 naming `body` and the entry, undo refusing to clobber a later edit
//! (409), snapshots, diff and restore, a run's own volume, and another tenant (or another
//! user's run) finding nothing, scopes refused before anything else.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::collections::BTreeMap;

use common::TestFleet;
use reqwest::Method;
use serde_json::{Value, json};

async fn token(f: &TestFleet, tenant: &str, subject: &str, scopes: &[&str]) -> String {
    let (s, t) = f
        .post(
            "/v1/tokens",
            &f.admin,
            json!({"name": subject, "tenant": tenant, "subject": subject, "scopes": scopes}),
        )
        .await;
    assert_eq!(s, 201, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

const RW: [&str; 4] = ["volumes:read", "volumes:write", "runs:create", "runs:read"];

/// An answer with its raw body.
struct Raw {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Raw {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// One request with a raw body and extra headers.
async fn raw(
    f: &TestFleet,
    method: Method,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Raw {
    let mut req = f
        .http
        .request(method, format!("{}{path}", f.url))
        .bearer_auth(token);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.body(b);
    }
    let r = req.send().await.unwrap();
    Raw {
        status: r.status().as_u16(),
        headers: r.headers().clone(),
        body: r.bytes().await.unwrap().to_vec(),
    }
}

async fn put_file(f: &TestFleet, path: &str, token: &str, content: &[u8]) -> Raw {
    raw(f, Method::PUT, path, token, &[], Some(content.to_vec())).await
}

fn assert_param(status: u16, body: &Value, want_status: u16, param: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
}

async fn make_volume(f: &TestFleet, token: &str, name: &str) {
    let (s, v) = f.post("/v1/volumes", token, json!({"name": name})).await;
    assert_eq!(s, 201, "{v}");
}

// --- tar, by hand: the archives a client would send, including the ones weft refuses ----------

/// One ustar entry: `kind` is the typeflag (`b'0'` file, `b'5'` directory, `b'2'` symlink).
fn tar_entry(name: &str, mode: u32, kind: u8, data: &[u8], link: &str) -> Vec<u8> {
    let mut h = [0u8; 512];
    let put = |h: &mut [u8; 512], at: usize, len: usize, s: &[u8]| {
        h[at..at + s.len().min(len)].copy_from_slice(&s[..s.len().min(len)]);
    };
    assert!(name.len() <= 100, "short names only");
    put(&mut h, 0, 100, name.as_bytes());
    put(&mut h, 100, 8, format!("{mode:07o}\0").as_bytes());
    put(&mut h, 108, 8, b"0000000\0");
    put(&mut h, 116, 8, b"0000000\0");
    put(&mut h, 124, 12, format!("{:011o}\0", data.len()).as_bytes());
    put(&mut h, 136, 12, b"00000000000\0");
    h[156] = kind;
    put(&mut h, 157, 100, link.as_bytes());
    put(&mut h, 257, 6, b"ustar\0");
    put(&mut h, 263, 2, b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    put(&mut h, 148, 8, format!("{sum:06o}\0 ").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

fn tar_of(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out: Vec<u8> = entries.concat();
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// The regular files of a tar archive: path → (mode, content). GNU long names are read too.
fn untar(bytes: &[u8]) -> BTreeMap<String, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut at = 0;
    let mut long: Option<String> = None;
    let octal = |s: &[u8]| {
        let t: String = s
            .iter()
            .take_while(|b| **b != 0 && **b != b' ')
            .map(|b| char::from(*b))
            .collect();
        u64::from_str_radix(t.trim(), 8).unwrap_or(0)
    };
    while at + 512 <= bytes.len() {
        let h = &bytes[at..at + 512];
        if h.iter().all(|b| *b == 0) {
            break;
        }
        let size = usize::try_from(octal(&h[124..136])).unwrap();
        let data = bytes[at + 512..at + 512 + size].to_vec();
        let name =
            String::from_utf8(h[..100].iter().take_while(|b| **b != 0).copied().collect()).unwrap();
        match h[156] {
            b'L' => {
                long = Some(
                    String::from_utf8(data.clone())
                        .unwrap()
                        .trim_end_matches('\0')
                        .to_owned(),
                )
            }
            b'0' | 0 => {
                let path = long.take().unwrap_or(name);
                out.insert(path, (u32::try_from(octal(&h[100..108])).unwrap(), data));
            }
            _ => {}
        }
        at += 512 + size.div_ceil(512) * 512;
    }
    out
}

// --- the tests --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn files_are_bytes_with_etags_and_conditions() {
    let f = TestFleet::start().await;
    let alice = token(&f, "acme", "alice", &RW).await;

    make_volume(&f, &alice, "notes").await;
    // Again: declarative, 200, and the description changes.
    let (s, v) = f
        .post(
            "/v1/volumes",
            &alice,
            json!({"name": "notes", "description": "shared notes"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (&v["kind"], &v["mode"], &v["description"], &v["files"]),
        (
            &json!("named"),
            &json!("rw"),
            &json!("shared notes"),
            &json!(0)
        )
    );
    let (s, list) = f.get("/v1/volumes", &alice).await;
    assert_eq!(s, 200);
    assert_eq!(list["data"][0]["name"], "notes", "{list}");

    // A text file under nested directories, its path sent with its slashes.
    let p = "/v1/volumes/notes/files/docs/2026/plan.md";
    let w = put_file(&f, p, &alice, b"# plan\nship it\n").await;
    assert_eq!(w.status, 200, "{}", w.json());
    let change = w.json();
    let sha = change["files"][0]["after_sha"].as_str().unwrap().to_owned();
    assert_eq!(change["files"][0]["path"], "docs/2026/plan.md", "{change}");
    assert_eq!(change["source"], "http");
    assert_eq!(change["files"][0]["before_sha"], Value::Null);
    assert_eq!(w.header("etag"), Some(format!("\"{sha}\"").as_str()));

    let r = raw(&f, Method::GET, p, &alice, &[], None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"# plan\nship it\n");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("etag"), Some(format!("\"{sha}\"").as_str()));
    // The same file with each of its path's segments percent-encoded.
    let r = raw(
        &f,
        Method::GET,
        "/v1/volumes/notes/files/docs%2F2026%2Fplan.md",
        &alice,
        &[],
        None,
    )
    .await;
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"# plan\nship it\n".as_slice())
    );
    // Not modified: the sha quoted, unquoted, or `*`.
    for tag in [format!("\"{sha}\""), sha.clone(), "*".into()] {
        let r = raw(&f, Method::GET, p, &alice, &[("if-none-match", &tag)], None).await;
        assert_eq!(r.status, 304, "{tag}");
        assert!(r.body.is_empty());
    }
    let other = "0".repeat(64);
    let r = raw(
        &f,
        Method::GET,
        p,
        &alice,
        &[("if-none-match", &other)],
        None,
    )
    .await;
    assert_eq!(r.status, 200);

    // A stale If-Match is a 412; the current one writes.
    let r = raw(
        &f,
        Method::PUT,
        p,
        &alice,
        &[("if-match", &format!("\"{other}\""))],
        Some(b"lost".to_vec()),
    )
    .await;
    assert_eq!(r.status, 412, "{}", r.json());
    assert_eq!(r.json()["error"]["code"], "precondition_failed");
    assert_eq!(r.json()["error"]["param"], "If-Match");
    let r = raw(
        &f,
        Method::PUT,
        p,
        &alice,
        &[("if-match", &sha)],
        Some(b"# plan\nship it today\n".to_vec()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let sha2 = r.json()["files"][0]["after_sha"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(r.json()["files"][0]["before_sha"], sha.as_str());
    // `If-None-Match: *` creates only.
    let r = raw(
        &f,
        Method::PUT,
        p,
        &alice,
        &[("if-none-match", "*")],
        Some(b"x".to_vec()),
    )
    .await;
    assert_eq!(r.status, 412, "{}", r.json());
    let r = raw(
        &f,
        Method::PUT,
        "/v1/volumes/notes/files/new.txt",
        &alice,
        &[("if-none-match", "*")],
        Some(b"new".to_vec()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    // `If-Match: *` is not a sha.
    let r = raw(
        &f,
        Method::PUT,
        p,
        &alice,
        &[("if-match", "*")],
        Some(b"x".to_vec()),
    )
    .await;
    assert_param(r.status, &r.json(), 400, "If-Match");

    // Binary content comes back as octet-stream, byte for byte.
    let bin: Vec<u8> = (0..=255u8).chain([0, 0xff, 0xfe]).collect();
    let r = put_file(&f, "/v1/volumes/notes/files/img/logo.bin", &alice, &bin).await;
    assert_eq!(r.status, 200);
    let r = raw(
        &f,
        Method::GET,
        "/v1/volumes/notes/files/img/logo.bin",
        &alice,
        &[],
        None,
    )
    .await;
    assert_eq!(r.body, bin);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));

    // The tree, in path order, a page at a time.
    let (s, t) = f.get("/v1/volumes/notes/tree?limit=2", &alice).await;
    assert_eq!(s, 200, "{t}");
    let paths: Vec<&str> = t["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["docs/2026/plan.md", "img/logo.bin"]);
    assert_eq!(t["data"][0]["sha256"], sha2.as_str());
    assert_eq!(t["data"][0]["mode"], 420);
    let cursor = t["next_cursor"].as_str().unwrap();
    let (s, t2) = f
        .get(
            &format!("/v1/volumes/notes/tree?limit=2&cursor={cursor}"),
            &alice,
        )
        .await;
    assert_eq!(s, 200, "{t2}");
    assert_eq!(t2["data"][0]["path"], "new.txt");
    assert_eq!(t2["next_cursor"], Value::Null);
    let (_, t3) = f.get("/v1/volumes/notes/tree?prefix=docs", &alice).await;
    assert_eq!(t3["data"].as_array().unwrap().len(), 1, "{t3}");
    let (s, e) = f.get("/v1/volumes/notes/tree?limit=0", &alice).await;
    assert_param(s, &e, 400, "limit");
    let (_, v) = f.get("/v1/volumes/notes", &alice).await;
    assert_eq!(
        (v["files"].as_i64(), v["tree_hash"].clone()),
        (Some(3), t["tree_hash"].clone())
    );

    // Delete: a stale If-Match is a 412, then gone.
    let r = raw(&f, Method::DELETE, p, &alice, &[("if-match", &sha)], None).await;
    assert_eq!(r.status, 412, "{}", r.json());
    let r = raw(&f, Method::DELETE, p, &alice, &[("if-match", &sha2)], None).await;
    assert_eq!(r.status, 200, "{}", r.json());
    assert_eq!(r.json()["files"][0]["after_sha"], Value::Null);
    let r = raw(&f, Method::GET, p, &alice, &[], None).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "not_found");

    // Paths that are not a file's: 400 naming `path`.
    for bad in ["a%00b", "..%2Fescape", "a%2F..%2F..%2Fb", "%2Fetc%2Fpasswd"] {
        let r = put_file(&f, &format!("/v1/volumes/notes/files/{bad}"), &alice, b"x").await;
        assert_param(r.status, &r.json(), 400, "path");
    }
    // A read-only volume refuses writes (409), and reads still work.
    let (s, v) = f
        .post(
            "/v1/volumes",
            &alice,
            json!({"name": "frozen", "mode": "ro"}),
        )
        .await;
    assert_eq!((s, &v["mode"]), (201, &json!("ro")), "{v}");
    let r = put_file(&f, "/v1/volumes/frozen/files/a.txt", &alice, b"x").await;
    assert_eq!(r.status, 409, "{}", r.json());
    let (s, _) = f.get("/v1/volumes/frozen/tree", &alice).await;
    assert_eq!(s, 200);
    // Deleting a volume takes its files with it.
    let (s, d) = f
        .send(Method::DELETE, "/v1/volumes/frozen", &alice, None)
        .await;
    assert_eq!((s, &d["deleted"]), (200, &json!(true)), "{d}");
    let (s, _) = f.get("/v1/volumes/frozen", &alice).await;
    assert_eq!(s, 404);
    let (s, _) = f
        .send(Method::DELETE, "/v1/volumes/frozen", &alice, None)
        .await;
    assert_eq!(s, 404);
    // A bad body names the field.
    let (s, e) = f
        .post("/v1/volumes", &alice, json!({"name": "Bad Name"}))
        .await;
    assert_param(s, &e, 400, "name");
    let (s, e) = f.post("/v1/volumes", &alice, json!({"name": "run"})).await;
    assert_param(s, &e, 400, "name");
    let (s, e) = f
        .post(
            "/v1/volumes",
            &alice,
            json!({"name": "x", "quota_bytes": -1}),
        )
        .await;
    assert_param(s, &e, 400, "quota_bytes");
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tar_import_and_export_round_trip_and_bombs_are_refused() {
    let f = TestFleet::start_with(|c| {
        c.volumes.max_files = 8;
        c.volumes.max_file_bytes = 4096;
        c.volumes.max_volume_bytes = 16 * 1024;
    })
    .await;
    let alice = token(&f, "acme", "alice", &RW).await;
    make_volume(&f, &alice, "repo").await;

    let binary: Vec<u8> = (0..3000u32)
        .map(|i| u8::try_from(i % 251).unwrap())
        .collect();
    let archive = tar_of(&[
        tar_entry("src/", 0o755, b'5', b"", ""),
        tar_entry("src/main.rs", 0o644, b'0', b"fn main() {}\n", ""),
        tar_entry("src/lib/util.rs", 0o600, b'0', b"pub fn f() {}\n", ""),
        tar_entry("bin/run.sh", 0o755, b'0', b"#!/bin/sh\necho hi\n", ""),
        tar_entry("data/blob.bin", 0o644, b'0', &binary, ""),
        tar_entry("empty", 0o644, b'0', b"", ""),
        tar_entry("same-as-main.rs", 0o644, b'0', b"fn main() {}\n", ""),
    ]);
    let r = raw(
        &f,
        Method::POST,
        "/v1/volumes/repo/import",
        &alice,
        &[("content-type", "application/x-tar")],
        Some(archive.clone()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let imported = r.json();
    assert_eq!(imported["files"], 6, "{imported}");
    assert_eq!(imported["change"]["source"], "import");
    assert_eq!(imported["change"]["files"].as_array().unwrap().len(), 6);

    let want: BTreeMap<String, (u32, Vec<u8>)> = [
        ("bin/run.sh", 0o755, b"#!/bin/sh\necho hi\n".to_vec()),
        ("data/blob.bin", 0o644, binary.clone()),
        ("empty", 0o644, Vec::new()),
        ("same-as-main.rs", 0o644, b"fn main() {}\n".to_vec()),
        ("src/lib/util.rs", 0o644, b"pub fn f() {}\n".to_vec()),
        ("src/main.rs", 0o644, b"fn main() {}\n".to_vec()),
    ]
    .into_iter()
    .map(|(p, m, c)| (p.to_owned(), (m, c)))
    .collect();
    let export = raw(
        &f,
        Method::GET,
        "/v1/volumes/repo/export",
        &alice,
        &[],
        None,
    )
    .await;
    assert_eq!(export.status, 200);
    assert_eq!(export.header("content-type"), Some("application/x-tar"));
    assert_eq!(untar(&export.body), want);
    // Deterministic: the same tree exports to the same bytes, and re-imports to the same tree.
    let again = raw(
        &f,
        Method::GET,
        "/v1/volumes/repo/export",
        &alice,
        &[],
        None,
    )
    .await;
    assert_eq!(again.body, export.body);
    make_volume(&f, &alice, "copy").await;
    let r = raw(
        &f,
        Method::POST,
        "/v1/volumes/copy/import",
        &alice,
        &[],
        Some(export.body.clone()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let (_, a) = f.get("/v1/volumes/repo", &alice).await;
    let (_, b) = f.get("/v1/volumes/copy", &alice).await;
    assert_eq!(a["tree_hash"], b["tree_hash"]);
    let (_, t) = f.get("/v1/volumes/repo/tree", &alice).await;
    let modes: Vec<(String, u64)> = t["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_owned(),
                e["mode"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(modes.contains(&("bin/run.sh".into(), 493)), "{modes:?}");

    // replace=true: what the archive lacks goes.
    let r = raw(
        &f,
        Method::POST,
        "/v1/volumes/copy/import?replace=true",
        &alice,
        &[],
        Some(tar_of(&[tar_entry("only.txt", 0o644, b'0', b"only", "")])),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let (_, t) = f.get("/v1/volumes/copy/tree", &alice).await;
    assert_eq!(t["data"].as_array().unwrap().len(), 1, "{t}");
    // An empty archive without replace changes nothing.
    let r = raw(
        &f,
        Method::POST,
        "/v1/volumes/copy/import",
        &alice,
        &[],
        Some(tar_of(&[])),
    )
    .await;
    assert_eq!((r.status, r.json()["change"].clone()), (200, Value::Null));

    // Refused whole, naming `body` and the entry; nothing is written.
    let before = f.get("/v1/volumes/repo", &alice).await.1["tree_hash"].clone();
    let many: Vec<Vec<u8>> = (0..9)
        .map(|i| tar_entry(&format!("f{i}.txt"), 0o644, b'0', b"x", ""))
        .collect();
    let big = vec![b'a'; 4097];
    let total: Vec<Vec<u8>> = (0..5)
        .map(|i| tar_entry(&format!("part{i}"), 0o644, b'0', &vec![b'b'; 4000], ""))
        .collect();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("too many files", tar_of(&many), "f8.txt"),
        (
            "a file over the cap",
            tar_of(&[tar_entry("huge.txt", 0o644, b'0', &big, "")]),
            "huge.txt",
        ),
        // The room the volume has left: 16 KiB of quota less the 3,058 bytes it holds, so the
        // fourth 4,000-byte file is one too many.
        ("over the volume's room in all", tar_of(&total), "part3"),
        (
            "a path escape",
            tar_of(&[tar_entry("../evil", 0o644, b'0', b"x", "")]),
            "../evil",
        ),
        (
            "an absolute path",
            tar_of(&[tar_entry("/etc/evil", 0o644, b'0', b"x", "")]),
            "/etc/evil",
        ),
        (
            "a symlink",
            tar_of(&[tar_entry("link", 0o777, b'2', b"", "/etc/passwd")]),
            "link",
        ),
        (
            "a hard link",
            tar_of(&[tar_entry("hard", 0o644, b'1', b"", "src/main.rs")]),
            "hard",
        ),
        ("gzip", vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0], "gzip"),
        (
            "not a tar",
            b"hello, this is not a tar archive".to_vec(),
            "tar",
        ),
    ];
    for (what, body, named) in cases {
        let r = raw(
            &f,
            Method::POST,
            "/v1/volumes/repo/import",
            &alice,
            &[],
            Some(body),
        )
        .await;
        let e = r.json();
        assert_param(r.status, &e, 400, "body");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains(named), "{what}: {msg}");
    }
    assert_eq!(
        f.get("/v1/volumes/repo", &alice).await.1["tree_hash"],
        before
    );
    // A body over the archive cap: 413 before anything is read into a volume.
    let huge = vec![0u8; 16 * 1024 + 8 * 1024 + 11 * 1024];
    let r = raw(
        &f,
        Method::POST,
        "/v1/volumes/repo/import",
        &alice,
        &[],
        Some(huge),
    )
    .await;
    assert_eq!(r.status, 413, "{}", r.json());
    // A file body over volumes.max_file_bytes: 413.
    let r = put_file(&f, "/v1/volumes/repo/files/big.txt", &alice, &[b'z'; 4097]).await;
    assert_param(r.status, &r.json(), 413, "body");
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn undo_never_clobbers_and_snapshots_restore() {
    let f = TestFleet::start().await;
    let alice = token(&f, "acme", "alice", &RW).await;
    make_volume(&f, &alice, "work").await;
    let a = "/v1/volumes/work/files/a.txt";
    let c1 = put_file(&f, a, &alice, b"one\n").await.json();
    let (s, snap) = f
        .post(
            "/v1/volumes/work/snapshots",
            &alice,
            json!({"label": "first"}),
        )
        .await;
    assert_eq!(s, 201, "{snap}");
    assert_eq!(
        (snap["label"].clone(), snap["files"].clone()),
        (json!("first"), json!(1))
    );
    let c2 = put_file(&f, a, &alice, b"one\ntwo\n").await.json();
    let c3 = put_file(&f, "/v1/volumes/work/files/b.txt", &alice, b"bee\n")
        .await
        .json();

    // The changelog, newest first, with diffs on demand, a page at a time.
    let (s, ch) = f.get("/v1/volumes/work/changes?diff=true", &alice).await;
    assert_eq!(s, 200, "{ch}");
    let ids: Vec<&Value> = ch["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["id"])
        .collect();
    assert_eq!(ids, [&c3["id"], &c2["id"], &c1["id"]]);
    let diff = ch["data"][1]["files"][0]["diff"].as_str().unwrap();
    assert!(diff.contains("+two"), "{diff}");
    let (_, page) = f.get("/v1/volumes/work/changes?limit=2", &alice).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    assert!(page["data"][0]["files"][0].get("diff").is_none(), "{page}");
    let next = page["next_before_seq"].as_i64().unwrap();
    let (_, rest) = f
        .get(
            &format!("/v1/volumes/work/changes?limit=2&before_seq={next}"),
            &alice,
        )
        .await;
    assert_eq!(rest["data"][0]["id"], c1["id"], "{rest}");
    assert_eq!(rest["next_before_seq"], Value::Null);

    // Undoing c1 would clobber c2's edit of a.txt: 409 naming the path, nothing changes.
    let (s, e) = f
        .post(
            "/v1/volumes/work/undo",
            &alice,
            json!({"change_id": c1["id"]}),
        )
        .await;
    assert_eq!(s, 409, "{e}");
    assert_eq!(e["error"]["code"], "conflict");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("a.txt"),
        "{e}"
    );
    // Undoing c2 puts a.txt back as c1 left it.
    let (s, u) = f
        .post(
            "/v1/volumes/work/undo",
            &alice,
            json!({"change_id": c2["id"]}),
        )
        .await;
    assert_eq!(s, 200, "{u}");
    assert_eq!((&u["source"], &u["undoes"]), (&json!("undo"), &c2["id"]));
    let r = raw(&f, Method::GET, a, &alice, &[], None).await;
    assert_eq!(r.body, b"one\n");
    let (s, e) = f
        .post(
            "/v1/volumes/work/undo",
            &alice,
            json!({"change_id": c2["id"]}),
        )
        .await;
    assert_eq!(s, 409, "an undone change is not undone twice: {e}");
    let (s, e) = f.post("/v1/volumes/work/undo", &alice, json!({})).await;
    assert_param(s, &e, 400, "change_id");

    // Snapshots, newest first; the diff from the snapshot to now; restore.
    let (s, snap2) = f
        .post("/v1/volumes/work/snapshots", &alice, json!({}))
        .await;
    assert_eq!(s, 201, "{snap2}");
    let (_, list) = f.get("/v1/volumes/work/snapshots", &alice).await;
    assert_eq!(list["data"][0]["id"], snap2["id"], "{list}");
    assert_eq!(list["data"][1]["id"], snap["id"]);
    let sid = snap["id"].as_str().unwrap();
    let (s, d) = f
        .get(
            &format!("/v1/volumes/work/diff?from={sid}&to=current"),
            &alice,
        )
        .await;
    assert_eq!(s, 200, "{d}");
    let changed: Vec<&str> = d["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["b.txt"], "{d}");
    assert_eq!(d["from_tree"], snap["tree_hash"]);
    let (s, e) = f
        .get("/v1/volumes/work/diff?from=yesterday&to=current", &alice)
        .await;
    assert_param(s, &e, 400, "from");
    let stale = format!("sha256:{}", "0".repeat(64));
    let (s, e) = f
        .post(
            &format!("/v1/volumes/work/snapshots/{sid}/restore"),
            &alice,
            json!({"if_tree": stale}),
        )
        .await;
    assert_eq!(s, 409, "{e}");
    let (s, r) = f
        .send(
            Method::POST,
            &format!("/v1/volumes/work/snapshots/{sid}/restore"),
            &alice,
            None,
        )
        .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(
        (&r["source"], &r["tree_after"]),
        (&json!("restore"), &snap["tree_hash"])
    );
    let (_, t) = f.get("/v1/volumes/work/tree", &alice).await;
    assert_eq!(t["data"].as_array().unwrap().len(), 1, "{t}");
    let ghost = uuid::Uuid::now_v7();
    let (s, _) = f
        .send(
            Method::POST,
            &format!("/v1/volumes/work/snapshots/{ghost}/restore"),
            &alice,
            None,
        )
        .await;
    assert_eq!(s, 404);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_users_and_scopes_see_only_their_own() {
    let f = TestFleet::start().await;
    let alice = token(&f, "acme", "alice", &RW).await;
    let bob = token(&f, "acme", "bob", &RW).await;
    let eve = token(&f, "beta", "eve", &RW).await;
    let beta_admin = token(&f, "beta", "root", &["tenant:admin"]).await;
    let acme_admin = token(&f, "acme", "root", &["tenant:admin"]).await;

    make_volume(&f, &alice, "secret").await;
    let w = put_file(
        &f,
        "/v1/volumes/secret/files/plans/q3.md",
        &alice,
        b"top secret",
    )
    .await;
    assert_eq!(w.status, 200);
    let change = w.json()["id"].as_str().unwrap().to_owned();
    let (_, snap) = f
        .post("/v1/volumes/secret/snapshots", &alice, json!({}))
        .await;
    let sid = snap["id"].as_str().unwrap().to_owned();

    // Another tenant — its admin too — finds nothing of it: every route is a 404.
    let gets = [
        "/v1/volumes/secret".to_owned(),
        "/v1/volumes/secret/tree".into(),
        "/v1/volumes/secret/files/plans/q3.md".into(),
        "/v1/volumes/secret/export".into(),
        "/v1/volumes/secret/changes".into(),
        "/v1/volumes/secret/snapshots".into(),
        "/v1/volumes/secret/diff?from=current&to=current".into(),
    ];
    for who in [&eve, &beta_admin] {
        for p in &gets {
            let (s, e) = f.get(p, who).await;
            assert_eq!(s, 404, "{p}: {e}");
            assert!(!e.to_string().contains("top secret"), "{e}");
        }
        let r = put_file(&f, "/v1/volumes/secret/files/plans/q3.md", who, b"mine").await;
        assert_eq!(r.status, 404, "{}", r.json());
        let (s, _) = f
            .send(
                Method::DELETE,
                "/v1/volumes/secret/files/plans/q3.md",
                who,
                None,
            )
            .await;
        assert_eq!(s, 404);
        let r = raw(
            &f,
            Method::POST,
            "/v1/volumes/secret/import",
            who,
            &[],
            Some(tar_of(&[])),
        )
        .await;
        assert_eq!(r.status, 404, "{}", r.json());
        let (s, _) = f
            .post("/v1/volumes/secret/undo", who, json!({"change_id": change}))
            .await;
        assert_eq!(s, 404);
        let (s, _) = f.post("/v1/volumes/secret/snapshots", who, json!({})).await;
        assert_eq!(s, 404);
        let (s, _) = f
            .send(
                Method::POST,
                &format!("/v1/volumes/secret/snapshots/{sid}/restore"),
                who,
                None,
            )
            .await;
        assert_eq!(s, 404);
        let (s, _) = f
            .send(Method::DELETE, "/v1/volumes/secret", who, None)
            .await;
        assert_eq!(s, 404);
        let (_, list) = f.get("/v1/volumes", who).await;
        assert_eq!(list["data"], json!([]), "{list}");
    }
    // The other tenant's volume of the same name is its own, and empty.
    make_volume(&f, &eve, "secret").await;
    let (s, t) = f.get("/v1/volumes/secret/tree", &eve).await;
    assert_eq!((s, t["data"].clone()), (200, json!([])));
    let r = raw(
        &f,
        Method::GET,
        "/v1/volumes/secret/files/plans/q3.md",
        &alice,
        &[],
        None,
    )
    .await;
    assert_eq!(r.body, b"top secret", "A's file is untouched");
    // A named volume is the tenant's: another user of it reads it.
    let r = raw(
        &f,
        Method::GET,
        "/v1/volumes/secret/files/plans/q3.md",
        &bob,
        &[],
        None,
    )
    .await;
    assert_eq!(r.status, 200);

    // Scopes, before anything else: 403 whatever the volume.
    let read_only = token(&f, "acme", "alice", &["volumes:read"]).await;
    let write_only = token(&f, "acme", "alice", &["volumes:write"]).await;
    let none = token(&f, "acme", "alice", &["runs:read", "memory:read"]).await;
    let r = put_file(&f, "/v1/volumes/secret/files/x", &read_only, b"x").await;
    assert_eq!(r.status, 403, "{}", r.json());
    let (s, _) = f.get("/v1/volumes/secret/tree", &read_only).await;
    assert_eq!(s, 200);
    let (s, e) = f.get("/v1/volumes/secret/tree", &write_only).await;
    assert_eq!(s, 403, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("volumes:read"),
        "{e}"
    );
    for (m, p) in [
        (Method::GET, "/v1/volumes"),
        (Method::POST, "/v1/volumes"),
        (Method::GET, "/v1/volumes/nothing/files/a"),
        (Method::PUT, "/v1/volumes/nothing/files/a"),
        (Method::POST, "/v1/volumes/nothing/import"),
    ] {
        let r = raw(
            &f,
            m.clone(),
            p,
            &none,
            &[("content-type", "application/json")],
            Some(b"not json at all".to_vec()),
        )
        .await;
        assert_eq!(r.status, 403, "{m} {p}: {}", r.json());
    }

    // A run's own volume: its owner's (and the tenant admins'); nobody else's.
    common::put_agent(&f, &acme_admin, "helper", json!({"model": "mock-1"})).await;
    let run = common::create(&f, &alice, json!({"agent": "helper", "interactive": true})).await;
    let base = format!("/v1/runs/{run}/volume");
    let (s, e) = f.get(&base, &alice).await;
    assert_eq!(s, 404, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("none has been made yet"),
        "{e}"
    );
    let r = put_file(
        &f,
        &format!("{base}/files/out/report.md"),
        &alice,
        b"# report",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let (s, v) = f.get(&base, &alice).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (&v["kind"], &v["root_run_id"]),
        (&json!("ephemeral"), &json!(run))
    );
    let (s, _) = f.get(&format!("{base}/tree"), &acme_admin).await;
    assert_eq!(s, 200, "a tenant admin sees every run of the tenant");
    let ghost = uuid::Uuid::now_v7();
    for who in [&bob, &eve, &beta_admin] {
        for p in [
            base.clone(),
            format!("{base}/tree"),
            format!("{base}/files/out/report.md"),
            format!("{base}/export"),
            format!("{base}/changes"),
        ] {
            let (s, e) = f.get(&p, who).await;
            assert_eq!(s, 404, "{p}: {e}");
            // The same answer as for a run that never was.
            let (gs, ge) = f.get(&p.replace(&run, &ghost.to_string()), who).await;
            assert_eq!(
                (gs, e.to_string().replace(&run, "<run>")),
                (404, ge.to_string().replace(&ghost.to_string(), "<run>"))
            );
        }
        let r = put_file(&f, &format!("{base}/files/out/report.md"), who, b"mine").await;
        assert_eq!(r.status, 404);
    }
    let r = raw(
        &f,
        Method::GET,
        &format!("{base}/files/out/report.md"),
        &alice,
        &[],
        None,
    )
    .await;
    assert_eq!(r.body, b"# report");
    let (s, e) = f
        .get(&format!("/v1/runs/{run}/volume/files/a%00b"), &alice)
        .await;
    assert_param(s, &e, 400, "path");
    f.stop().await;
}

// --- the MCP face -------------------------------------------------------------------------------

type McpClient = rmcp::service::RunningService<rmcp::RoleClient, ()>;

async fn mcp(f: &TestFleet, token: &str) -> McpClient {
    use rmcp::ServiceExt as _;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", f.url)).auth_header(token);
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ().serve(transport).await.unwrap()
}

/// A tool's answer: (is_error, its text, its text as JSON).
async fn call(c: &McpClient, tool: &str, args: Value) -> (bool, String, Value) {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    let params = rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
    let r = c.peer().call_tool(params).await.unwrap();
    let text = r
        .content
        .iter()
        .filter_map(|b| b.as_text().map(|t| t.text.clone()))
        .collect::<String>();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    (r.is_error == Some(true), text, json)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_face_offers_the_volume_routes_as_tools() {
    let f = TestFleet::start().await;
    let alice = token(&f, "acme", "alice", &RW).await;
    let reader = token(&f, "acme", "reader", &["volumes:read"]).await;
    let eve = token(&f, "beta", "eve", &RW).await;
    make_volume(&f, &alice, "notes").await;

    let c = mcp(&f, &alice).await;
    let names: Vec<String> = c
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    let all = [
        "list_volumes",
        "volume_tree",
        "volume_read",
        "volume_write",
        "volume_delete",
        "volume_changes",
        "volume_undo",
        "volume_snapshot",
        "volume_snapshots",
        "volume_restore",
    ];
    for t in all {
        assert!(names.iter().any(|n| n == t), "{t} in {names:?}");
    }

    let (err, text, _) = call(&c, "list_volumes", json!({})).await;
    assert!(!err && text.contains("notes"), "{text}");
    let at = |extra: Value| {
        let mut v = json!({"volume": "notes"});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let (err, text, w) = call(
        &c,
        "volume_write",
        at(json!({"path": "plans/q3.md", "content": "ship it\n", "if_match": ""})),
    )
    .await;
    assert!(!err, "{text}");
    let sha = w["files"][0]["after_sha"].as_str().unwrap().to_owned();
    let (err, text, r) = call(&c, "volume_read", at(json!({"path": "plans/q3.md"}))).await;
    assert!(!err, "{text}");
    assert_eq!(
        (r["content"].as_str(), r["sha256"].as_str()),
        (Some("ship it\n"), Some(sha.as_str()))
    );
    // A stale version is refused, the current one written.
    let stale = "0".repeat(64);
    let (err, text, _) = call(
        &c,
        "volume_write",
        at(json!({"path": "plans/q3.md", "content": "lost", "if_match": stale})),
    )
    .await;
    assert!(err && text.contains("412"), "{text}");
    let (err, text, _) = call(
        &c,
        "volume_write",
        at(json!({"path": "plans/q3.md", "content": "ship it today\n", "if_match": sha})),
    )
    .await;
    assert!(!err, "{text}");
    let (err, text, t) = call(&c, "volume_tree", at(json!({"prefix": "plans"}))).await;
    assert!(!err, "{text}");
    assert_eq!(t["data"][0]["path"], "plans/q3.md", "{t}");
    let (_, _, changes) = call(&c, "volume_changes", at(json!({"diff": true}))).await;
    assert_eq!(changes["data"].as_array().unwrap().len(), 2, "{changes}");
    assert!(
        changes["data"][0]["files"][0]["diff"]
            .as_str()
            .unwrap()
            .contains("+ship it today"),
        "{changes}"
    );
    let last = changes["data"][0]["id"].as_str().unwrap().to_owned();

    // Snapshot, delete, restore, undo.
    let (err, text, snap) = call(&c, "volume_snapshot", at(json!({"label": "v2"}))).await;
    assert!(!err, "{text}");
    let (_, _, snaps) = call(&c, "volume_snapshots", at(json!({}))).await;
    assert_eq!(snaps["data"][0]["id"], snap["id"], "{snaps}");
    let (err, text, _) = call(&c, "volume_delete", at(json!({"path": "plans/q3.md"}))).await;
    assert!(!err, "{text}");
    let (err, text, _) = call(&c, "volume_read", at(json!({"path": "plans/q3.md"}))).await;
    assert!(err && text.contains("404"), "{text}");
    let (err, text, _) = call(&c, "volume_restore", at(json!({"snapshot_id": snap["id"]}))).await;
    assert!(!err, "{text}");
    let (_, _, r) = call(&c, "volume_read", at(json!({"path": "plans/q3.md"}))).await;
    assert_eq!(r["content"], "ship it today\n");
    // The restore put the file back at the edit's version, so the edit can be undone: the
    // file is again what the first write made.
    let (err, text, u) = call(&c, "volume_undo", at(json!({"change_id": last}))).await;
    assert!(!err, "{text}");
    assert_eq!(u["undoes"], last.as_str(), "{u}");
    let (_, _, r) = call(&c, "volume_read", at(json!({"path": "plans/q3.md"}))).await;
    assert_eq!(r["content"], "ship it\n");
    // Undone once, it is not undone again (a 409).
    let (err, text, _) = call(&c, "volume_undo", at(json!({"change_id": last}))).await;
    assert!(err && text.contains("409"), "{text}");

    // A run's own volume, by `run`.
    let acme_admin = token(&f, "acme", "root", &["tenant:admin"]).await;
    common::put_agent(&f, &acme_admin, "helper", json!({"model": "mock-1"})).await;
    let run = common::create(&f, &alice, json!({"agent": "helper", "interactive": true})).await;
    let (err, text, _) = call(
        &c,
        "volume_write",
        json!({"run": run, "path": "out.txt", "content": "from mcp"}),
    )
    .await;
    assert!(!err, "{text}");
    let r = raw(
        &f,
        Method::GET,
        &format!("/v1/runs/{run}/volume/files/out.txt"),
        &alice,
        &[],
        None,
    )
    .await;
    assert_eq!(r.body, b"from mcp");

    // Bad input, named; a binary file is not read as text.
    for (args, says) in [
        (json!({"path": "a.txt"}), "exactly one"),
        (
            json!({"volume": "notes", "run": run, "path": "a.txt"}),
            "exactly one",
        ),
        (json!({"volume": "notes", "path": "../etc/passwd"}), ".."),
        (json!({"volume": "notes", "path": ""}), "path"),
    ] {
        let (err, text, _) = call(&c, "volume_read", args.clone()).await;
        assert!(err && text.contains(says), "{args}: {text}");
    }
    let w = put_file(
        &f,
        "/v1/volumes/notes/files/logo.bin",
        &alice,
        &[0, 159, 146, 150],
    )
    .await;
    assert_eq!(w.status, 200);
    let (err, text, _) = call(&c, "volume_read", at(json!({"path": "logo.bin"}))).await;
    assert!(err && text.contains("binary"), "{text}");
    c.cancel().await.unwrap();

    // A reader is offered the read tools only; a write is refused naming the scope.
    let c = mcp(&f, &reader).await;
    let names: Vec<String> = c
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.iter().any(|n| n == "volume_read"), "{names:?}");
    for t in [
        "volume_write",
        "volume_delete",
        "volume_undo",
        "volume_snapshot",
        "volume_restore",
    ] {
        assert!(!names.iter().any(|n| n == t), "{t} in {names:?}");
    }
    let (err, text, _) = call(
        &c,
        "volume_write",
        at(json!({"path": "x.txt", "content": "x"})),
    )
    .await;
    assert!(err && text.contains("volumes:write"), "{text}");
    c.cancel().await.unwrap();

    // Another tenant finds nothing.
    let c = mcp(&f, &eve).await;
    let (err, text, _) = call(&c, "volume_read", at(json!({"path": "plans/q3.md"}))).await;
    assert!(
        err && text.contains("404") && !text.contains("ship"),
        "{text}"
    );
    let (_, text, _) = call(&c, "list_volumes", json!({})).await;
    assert!(!text.contains("notes"), "{text}");
    c.cancel().await.unwrap();
    f.stop().await;
}
