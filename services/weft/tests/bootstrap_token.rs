//! The bootstrap admin token is printed once, by the start that mints it; later starts say where
//! it is kept, so it never lands in every log store.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Command, Stdio};

use weft_testkit::TestDb;

/// Runs `weft up` until it is serving (its last start-up line, `try: …`, is printed once it
/// serves), stops it with SIGTERM and returns everything it printed.
fn start_and_stop(db: &TestDb, dir: &Path) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["up", "--listen", "127.0.0.1:0"])
        .args([
            "--router-listen",
            "127.0.0.1:0",
            "--substrate-listen",
            "127.0.0.1:0",
        ])
        .args(["--database-url", &db.url])
        .env("WEFT_BOOTSTRAP__TOKEN_FILE", dir.join("admin-token"))
        .env("WEFT_NATS__PREFIX", &db.name)
        .env("WEFT_REDIS__PREFIX", &db.name)
        .env("WEFT_TELEMETRY__LOG_LEVEL", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    loop {
        let mut line = String::new();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "weft up exited before serving: {printed}");
        printed.push_str(&line);
        if line.starts_with("try: ") {
            break;
        }
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    out.read_to_string(&mut printed).unwrap();
    assert!(child.wait().unwrap().success(), "weft up stops cleanly");
    printed
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bootstrap_token_is_printed_only_by_the_start_that_mints_it() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("{}-bootstrap", db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let first = start_and_stop(&db, &dir);
    let token = std::fs::read_to_string(dir.join("admin-token")).unwrap();
    let token = token.trim();
    assert!(token.starts_with("wft_"), "{token}");
    assert!(
        first.contains(token),
        "the minting start shows it once: {first}"
    );
    let second = start_and_stop(&db, &dir);
    assert!(
        !second.contains(token),
        "a later start must not print the token: {second}"
    );
    assert!(
        second.contains(&dir.join("admin-token").display().to_string()),
        "a later start says where the token is: {second}"
    );
}
