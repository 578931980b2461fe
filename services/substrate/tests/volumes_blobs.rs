//! Volume blobs outside Postgres: a directory store and an S3 store (moto's server, started
//! here on a free port), each with `external_min_bytes` low enough that a file goes there. A
//! large file is written, read, named by sha after `PutBlobs`, fetched with `GetBlobs`, grepped
//! and diffed; its `volume_blobs` row names the store and holds no data, while a small file stays
//! in Postgres.
//!
//! The S3 test needs Python's `moto[server]`: the system `python3` when it can import it, else a
//! venv made under `target/moto-venv` (`pip install 'moto[server]'`). Only when neither works
//! (no Python, no network for pip) is it skipped, with the reason printed.
//!
//! Multi-thread runtime for the reason given in `defs.rs` (`TestDb`'s drop).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use weft_config::{BlobStoreConfig, Secret};
use weft_core::{Principal, Scopes, TenantId};
use weft_proto::v1;
use weft_proto::v1::file_op::Op;
use weft_substrate::DefStore;
use weft_substrate::volumes::blobs::{BlobStore, Blobs, DirBlobs, S3Blobs};
use weft_substrate::volumes::{Caps, VolumeStore, Volumes};
use weft_testkit::TestDb;

/// Files of at least this many bytes go to the external store in these tests.
const EXTERNAL_MIN: u64 = 1024;

fn user() -> Principal {
    Principal {
        tenant: TenantId::parse("acme").unwrap(),
        subject: "alice".into(),
        scopes: Scopes::parse_list("volumes:read,volumes:write").unwrap(),
        token_id: None,
        agent: None,
    }
}

fn named(name: &str) -> Option<v1::VolumeRef> {
    Some(v1::VolumeRef {
        target: Some(v1::volume_ref::Target::Name(name.into())),
        create: false,
    })
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

fn apply_req(ops: Vec<v1::FileOp>) -> v1::ApplyRequest {
    v1::ApplyRequest {
        volume: named("big"),
        ops,
        source: "test".into(),
        ..Default::default()
    }
}

async fn read(v: &Volumes, path: &str) -> Vec<u8> {
    v.read_file(
        &user(),
        v1::ReadFileRequest {
            volume: named("big"),
            path: path.into(),
        },
    )
    .await
    .unwrap()
    .content
}

/// A text file of `lines` numbered lines (well over `EXTERNAL_MIN`).
fn text(lines: usize, marker: &str) -> Vec<u8> {
    (0..lines)
        .map(|i| format!("line {i} {marker}\n"))
        .collect::<String>()
        .into_bytes()
}

async fn row(db: &TestDb, sha: &str) -> (String, bool) {
    sqlx::query_as("SELECT store, data IS NOT NULL FROM volume_blobs WHERE sha256 = $1")
        .bind(sha)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Writes, reads, puts ahead, fetches, greps and diffs large files through `blobs`, whose
/// external store is called `store`. Returns the shas of the large blobs it stored.
async fn round_trip(db: &TestDb, blobs: Blobs, store: &str) -> Vec<String> {
    let caps = Caps::from_config(&weft_config::VolumesConfig::default());
    let v = Volumes::new(
        VolumeStore::new(db.pool.clone(), blobs, caps),
        DefStore::new(db.pool.clone()),
    );
    let p = user();
    v.create_volume(
        &p,
        v1::CreateVolumeRequest {
            name: "big".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let large = text(200, "alpha");
    let small = b"tiny".to_vec();
    v.apply(
        &p,
        apply_req(vec![put("large.txt", &large), put("small.txt", &small)]),
    )
    .await
    .unwrap();
    let large_sha = weft_volumes::hash::sha256_hex(&large);
    assert_eq!(row(db, &large_sha).await, (store.to_owned(), false));
    assert_eq!(
        row(db, &weft_volumes::hash::sha256_hex(&small)).await,
        ("pg".to_owned(), true)
    );
    assert_eq!(read(&v, "large.txt").await, large);
    assert_eq!(read(&v, "small.txt").await, small);

    // Put ahead, then named by sha.
    let ahead = text(300, "beta");
    let ahead_sha = weft_volumes::hash::sha256_hex(&ahead);
    v.put_blobs(
        &p,
        v1::PutBlobsRequest {
            blobs: vec![v1::Blob {
                sha256: ahead_sha.clone(),
                content: ahead.clone(),
            }],
        },
    )
    .await
    .unwrap();
    assert_eq!(row(db, &ahead_sha).await, (store.to_owned(), false));
    let by_sha = v1::FileOp {
        path: "ahead.txt".into(),
        if_match: None,
        op: Some(Op::Put(v1::PutFile {
            body: Some(v1::put_file::Body::Sha256(ahead_sha.clone())),
            mode: 0,
        })),
    };
    v.apply(&p, apply_req(vec![by_sha])).await.unwrap();
    assert_eq!(read(&v, "ahead.txt").await, ahead);
    let got = v
        .get_blobs(
            &p,
            v1::GetBlobsRequest {
                volume: named("big"),
                sha256: vec![large_sha.clone(), ahead_sha.clone()],
            },
        )
        .await
        .unwrap();
    assert_eq!(got.blobs[0].content, large);
    assert_eq!(got.blobs[1].content, ahead);

    // Grep and diffs read the external blobs.
    let hits = v
        .grep(
            &p,
            v1::GrepRequest {
                volume: named("big"),
                pattern: "line 199 alpha|line 299 beta".into(),
                mode: "files".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(hits.files, ["ahead.txt", "large.txt"]);
    let mut edited = large.clone();
    edited.extend_from_slice(b"the end\n");
    let change = v
        .apply(
            &p,
            v1::ApplyRequest {
                with_diff: true,
                ..apply_req(vec![put("large.txt", &edited)])
            },
        )
        .await
        .unwrap();
    assert!(
        change.files[0].diff.contains("+the end"),
        "{}",
        change.files[0].diff
    );
    let history = v
        .list_changes(
            &p,
            v1::ListChangesRequest {
                volume: named("big"),
                with_diff: true,
                limit: 1,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(history.changes[0].files[0].diff.contains("+the end"));
    vec![
        large_sha,
        ahead_sha,
        weft_volumes::hash::sha256_hex(&edited),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_directory_store_keeps_large_blobs() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("weft-blobs-{}", uuid::Uuid::now_v7().simple()));
    let store = Arc::new(DirBlobs::new(dir.clone()).unwrap());
    let blobs = Blobs::with_external(db.pool.clone(), store.clone(), EXTERNAL_MIN);
    let shas = round_trip(&db, blobs.clone(), "dir").await;
    // Only this user may read them: directories 0700, files 0600.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("acme")), 0o700);
    for sha in &shas {
        let on_disk = std::fs::read(dir.join("acme").join(sha)).unwrap();
        assert_eq!(&weft_volumes::hash::sha256_hex(&on_disk), sha);
        assert_eq!(mode(&dir.join("acme").join(sha)), 0o600, "{sha}");
    }
    // Nothing half-written is left beside them.
    let names: Vec<String> = std::fs::read_dir(dir.join("acme"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), shas.len(), "{names:?}");
    assert_eq!(store.get("acme", &"0".repeat(64)).await.unwrap(), None);

    // The volume deleted, the collector takes its rows and then their objects.
    let caps = Caps::from_config(&weft_config::VolumesConfig::default());
    let vs = VolumeStore::new(db.pool.clone(), blobs, caps).with_blob_grace(Duration::ZERO);
    let v = Volumes::new(vs.clone(), DefStore::new(db.pool.clone()));
    assert!(
        v.delete_volume(&user(), named("big").as_ref())
            .await
            .unwrap()
    );
    let n = vs
        .collect_blobs(100)
        .await
        .map_err(|e| e.into_api("collect"))
        .unwrap();
    assert!(n >= 3, "{n}");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM volume_blobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    for sha in &shas {
        assert!(!dir.join("acme").join(sha).exists(), "{sha}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A moto S3 server, stopped on drop.
struct Moto {
    child: Child,
    url: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn imports_moto(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import moto.server, flask, flask_cors"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A Python that can run `moto.server`: the system's, or a venv under `target/` (made here when
/// missing). The error says why there is none.
fn python_with_moto() -> Result<PathBuf, String> {
    let system = PathBuf::from("python3");
    if imports_moto(&system) {
        return Ok(system);
    }
    let venv = workspace_root().join("target/moto-venv");
    let python = venv.join("bin/python");
    if python.exists() && imports_moto(&python) {
        return Ok(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .map_err(|e| format!("python3 cannot be run ({e})"))?;
    if !made.status.success() {
        return Err(format!(
            "`python3 -m venv {}` failed: {}",
            venv.display(),
            String::from_utf8_lossy(&made.stderr).trim()
        ));
    }
    let pip = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "moto[server]"])
        .output()
        .map_err(|e| format!("pip cannot be run ({e})"))?;
    if !pip.status.success() || !imports_moto(&python) {
        return Err(format!(
            "`pip install 'moto[server]'` into {} failed: {}",
            venv.display(),
            String::from_utf8_lossy(&pip.stderr).trim()
        ));
    }
    Ok(python)
}

/// Starts `python -m moto.server` on a free port and waits for its address.
fn start_moto(python: &Path) -> Moto {
    let mut child = Command::new(python)
        .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start moto.server");
    let stderr = child.stderr.take().expect("moto's stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !sent && let Some(at) = line.find("http://127.0.0.1:") {
                let url = line[at..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                let _ = tx.send(url);
                sent = true;
            }
            // Keep draining so the server never blocks on a full pipe.
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("moto.server printed its address within 60 s");
    Moto { child, url }
}

/// Makes `bucket` (moto accepts unsigned requests).
fn make_bucket(url: &str, bucket: &str) {
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(
        s,
        "PUT /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_s3_store_keeps_large_blobs() {
    let python = match python_with_moto() {
        Ok(p) => p,
        Err(why) => {
            println!("SKIPPED an_s3_store_keeps_large_blobs: no moto S3 server: {why}");
            return;
        }
    };
    let moto = start_moto(&python);
    make_bucket(&moto.url, "weft-blobs");
    let cfg = BlobStoreConfig {
        kind: "s3".into(),
        external_min_bytes: EXTERNAL_MIN,
        dir: None,
        s3_endpoint: moto.url.clone(),
        s3_bucket: "weft-blobs".into(),
        s3_region: "us-east-1".into(),
        s3_access_key_id: "testing".into(),
        s3_secret_access_key: Some(Secret::new("testing")),
        s3_allow_http: true,
    };
    let db = TestDb::new().await;
    let blobs = Blobs::from_config(db.pool.clone(), &cfg).unwrap();
    let shas = round_trip(&db, blobs, "s3").await;
    // The objects are in the bucket under `<tenant>/<sha256>`.
    let s3 = S3Blobs::new(&cfg).unwrap();
    for sha in &shas {
        let b = s3
            .get("acme", sha)
            .await
            .unwrap()
            .expect("the object exists");
        assert_eq!(&weft_volumes::hash::sha256_hex(&b), sha);
    }
    assert_eq!(s3.get("acme", &"0".repeat(64)).await.unwrap(), None);
    drop(moto);
}
