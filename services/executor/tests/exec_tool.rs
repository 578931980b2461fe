//! The `Exec` tool's sandbox on this machine, without a substrate: a scratch checkout, a
//! command under bubblewrap with the operator's limits, and the scan that decides what goes
//! back to the volume. Each test proves one promise of docs/security.md ("Commands in a
//! sandbox"): files written come back; no network; nothing outside the checkout is writable;
//! processes, CPU, memory, file size, output and time are bounded; symlinks and special files
//! never sync.
//!
//! bubblewrap must run here: a machine where it cannot fails these tests (loudly), it does not
//! skip them. The executor's tests run as root on CI, so commands run as a fresh uid each.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use weft_config::ExecConfig;
use weft_executor::tools::exec::checkout::{self, Indexed, Op, ScanCaps, Scratch};
use weft_executor::tools::exec::sandbox::{self, Limits, Outcome, Sandbox, SandboxUser};

/// A checkout and a sandbox over it.
struct Bench {
    scratch: Scratch,
    user: SandboxUser,
    limits: Limits,
    read_only: bool,
    index: BTreeMap<String, Indexed>,
}

impl Bench {
    /// An empty checkout under the temporary directory, the default limits with `timeout_s`.
    fn new(timeout_s: u64) -> Self {
        let user = SandboxUser::for_this_process();
        let scratch = Scratch::create(&std::env::temp_dir(), user.uid()).unwrap();
        Self {
            scratch,
            user,
            limits: Limits::new(&ExecConfig::default(), timeout_s),
            read_only: false,
            index: BTreeMap::new(),
        }
    }

    /// A file of the volume the checkout is made from.
    fn file(&mut self, path: &str, content: &[u8]) {
        checkout::write_file(self.dir(), path, content, 0o644, self.user.uid()).unwrap();
        self.index.insert(
            path.to_owned(),
            Indexed {
                sha256: weft_volumes::sha256_hex(content),
                mode: 0o644,
            },
        );
    }

    fn dir(&self) -> &Path {
        self.scratch.path()
    }

    async fn run(&self, command: &str) -> Outcome {
        let bwrap = Path::new("bwrap");
        let features = sandbox::probe(bwrap)
            .await
            .expect("bubblewrap must run on this machine (apt-get install bubblewrap)");
        Sandbox {
            bwrap: bwrap.to_owned(),
            features,
            checkout: self.dir().to_owned(),
            read_only: self.read_only,
            hide: vec![std::env::temp_dir()],
            uid: self.user.uid(),
            limits: self.limits.clone(),
        }
        .run(command)
        .await
        .expect("the sandbox must start")
    }

    fn scan(&self) -> checkout::Scan {
        let caps = ScanCaps {
            max_file_bytes: 8 << 20,
            max_files: 10_000,
            max_total_bytes: 256 << 20,
        };
        checkout::scan(self.dir(), &self.index, &caps).unwrap()
    }
}

fn puts(scan: &checkout::Scan) -> Vec<(&str, &[u8])> {
    scan.ops
        .iter()
        .filter_map(|op| match op {
            Op::Put { path, content, .. } => Some((path.as_str(), content.as_slice())),
            Op::Delete { .. } => None,
        })
        .collect()
}

#[tokio::test]
async fn a_command_writes_files_that_come_back() {
    let mut b = Bench::new(20);
    b.file("src/main.py", b"print('hi')\n");
    b.file("old.txt", b"old\n");
    let out = b
        .run(
            "python3 src/main.py > out.txt && mkdir -p build/x && printf 'made' > build/x/y.bin \
             && sed -i 's/hi/hello/' src/main.py && rm old.txt && chmod +x build/x/y.bin",
        )
        .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let scan = b.scan();
    assert_eq!(
        puts(&scan),
        vec![
            ("build/x/y.bin", b"made".as_slice()),
            ("out.txt", b"hi\n".as_slice()),
            ("src/main.py", b"print('hello')\n".as_slice()),
        ]
    );
    let sha = weft_volumes::sha256_hex;
    assert!(scan.ops.contains(&Op::Delete {
        path: "old.txt".into(),
        if_match: sha(b"old\n"),
    }));
    assert!(scan.ops.iter().any(|op| matches!(
        op,
        Op::Put { path, mode: 0o755, if_match, .. } if path == "build/x/y.bin" && if_match.is_empty()
    )));
    assert!(scan.ops.iter().any(|op| matches!(
        op,
        Op::Put { path, if_match, .. } if path == "src/main.py" && *if_match == sha(b"print('hi')\n")
    )));
    assert!(scan.refused.is_empty(), "{:?}", scan.refused);
}

#[tokio::test]
async fn there_is_no_network() {
    let b = Bench::new(20);
    // A listener on the host's loopback: the sandbox's loopback is its own.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = b
        .run(&format!(
            "bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo LOOPBACK-REACHED; \
             python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=5)' \
             && echo INTERNET-REACHED; \
             curl -sS --max-time 5 http://example.com/ && echo DNS-REACHED; \
             cat /proc/net/dev | tail -n +3 | cut -d: -f1"
        ))
        .await;
    let stdout = out.stdout.text();
    let stderr = out.stderr.text();
    assert!(!stdout.contains("REACHED"), "{stdout}\n{stderr}");
    assert!(stderr.contains("Connection refused"), "{stderr}");
    assert!(stderr.contains("Network is unreachable"), "{stderr}");
    // The only interface is the sandbox's own loopback.
    assert_eq!(
        stdout.split_whitespace().collect::<Vec<_>>(),
        ["lo"],
        "{stdout}"
    );
    // The command has ended (its namespace with it): nothing is waiting to be accepted.
    assert_eq!(
        listener.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
}

#[tokio::test]
async fn nothing_outside_the_checkout_is_writable() {
    let b = Bench::new(20);
    let marker = format!("weft-exec-escape-{}", uuid::Uuid::now_v7());
    let out = b
        .run(&format!(
            "touch /usr/{marker} 2>&1; echo x > ../{marker} 2>&1; echo x > /etc/{marker} 2>&1; \
             echo x > /tmp/{marker} && echo tmp-ok; echo x > /dev/shm/{marker} 2>&1; \
             touch ok.txt && echo work-ok"
        ))
        .await;
    let stdout = out.stdout.text();
    assert!(stdout.contains("Read-only file system"), "{stdout}");
    assert!(stdout.contains("work-ok"), "{stdout}");
    for dir in ["/usr", "/", "/etc", "/tmp", "/dev/shm"] {
        let host = Path::new(dir).join(&marker);
        assert!(
            !host.exists(),
            "{} was written from the sandbox",
            host.display()
        );
    }
    // /tmp inside is a private tmpfs: written there, seen nowhere.
    assert!(stdout.contains("tmp-ok"), "{stdout}");
    let scan = b.scan();
    assert_eq!(puts(&scan), vec![("ok.txt", b"".as_slice())]);
}

#[tokio::test]
async fn a_read_only_checkout_cannot_be_changed() {
    let mut b = Bench::new(20);
    b.file("a.txt", b"a");
    b.read_only = true;
    let out = b
        .run("cat a.txt; echo b > a.txt; rm a.txt; touch new.txt; echo done")
        .await;
    assert_eq!(out.stdout.text(), "adone\n", "{out:?}");
    assert!(
        out.stderr.text().contains("Read-only file system"),
        "{out:?}"
    );
    assert_eq!(b.scan().ops, vec![]);
}

#[tokio::test]
async fn a_fork_bomb_is_bounded_by_max_processes() {
    let mut b = Bench::new(30);
    b.limits.max_processes = 16;
    // Each child leaves a file (a shell builtin, no fork) before it sleeps: the files count
    // the processes that ever started.
    let out = b
        .run("for i in $(seq 1000); do (: > p.$i; exec sleep 5) & done; wait")
        .await;
    assert!(!out.timed_out, "{out:?}");
    assert_eq!(out.limit_hit(), Some("max_processes"), "{out:?}");
    let started = std::fs::read_dir(b.dir()).unwrap().count();
    assert!(started > 0 && started < 16, "{started} processes ran");
}

#[tokio::test]
async fn a_command_past_its_time_is_killed_and_reported() {
    let b = Bench::new(1);
    let out = b.run("echo before; sleep 30; echo after").await;
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.limit_hit(), Some("timeout_s"));
    assert_eq!(out.stdout.text(), "before\n");
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
}

#[tokio::test]
async fn cpu_memory_and_file_size_are_bounded() {
    let mut b = Bench::new(20);
    b.limits.cpu_seconds = 1;
    b.limits.memory_bytes = 256 << 20;
    b.limits.max_file_bytes = 1 << 20;
    let spin = b.run("while :; do :; done").await;
    assert_eq!(spin.limit_hit(), Some("cpu_seconds"), "{spin:?}");
    assert!(!spin.timed_out);
    let alloc = b.run("python3 -c 'x = bytearray(1 << 30)'").await;
    assert_eq!(alloc.limit_hit(), Some("memory_bytes"), "{alloc:?}");
    let big = b.run("head -c 2000000 /dev/zero > big.bin").await;
    assert_eq!(big.limit_hit(), Some("max_file_bytes"), "{big:?}");
    let size = std::fs::metadata(b.dir().join("big.bin")).unwrap().len();
    assert_eq!(size, 1 << 20);
}

#[tokio::test]
async fn output_over_the_cap_is_cut() {
    let mut b = Bench::new(20);
    b.limits.max_output_bytes = 100;
    let out = b.run("seq 1 100000; seq 1 10 >&2").await;
    assert_eq!(out.stdout.bytes.len(), 100);
    let all: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    assert_eq!(out.stdout.text(), all[..100]);
    assert_eq!(out.stdout.dropped, 588_895 - 100);
    assert_eq!(out.stderr.text(), "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n");
    assert_eq!(out.stderr.dropped, 0);
}

#[tokio::test]
async fn symlinks_and_special_files_made_inside_are_refused_on_sync() {
    let mut b = Bench::new(20);
    b.file("a.txt", b"a");
    let out = b
        .run(
            "ln -s /etc/passwd leak && ln -s / root && rm a.txt && ln -s /etc/hostname a.txt \
             && mkfifo pipe && echo r > real.txt && ln real.txt hard",
        )
        .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let scan = b.scan();
    assert_eq!(
        scan.refused,
        vec![
            "refused on sync: `a.txt` is a symlink",
            "refused on sync: `hard` is a hard link",
            "refused on sync: `leak` is a symlink",
            "refused on sync: `pipe` is a fifo",
            "refused on sync: `real.txt` is a hard link",
            "refused on sync: `root` is a symlink",
        ]
    );
    // `a.txt` (now a symlink) is neither synced nor deleted: the volume keeps its file.
    assert_eq!(scan.ops, vec![]);
}

#[tokio::test]
async fn the_scratch_directory_is_removed() {
    let b = Bench::new(20);
    let dir = b.dir().to_owned();
    let out = b
        .run("mkdir -p d/e && touch d/e/f && chmod 000 d/e && chmod 500 d")
        .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    drop(b);
    assert!(!dir.exists());
}

#[tokio::test]
async fn host_services_and_homes_are_not_reachable() {
    let b = Bench::new(20);
    // Postgres listens on this machine's /run/postgresql (trust auth for local sockets): a
    // read-only bind of the host root would let the command connect to it.
    assert!(
        Path::new("/run/postgresql/.s.PGSQL.5432").exists(),
        "this test needs the local Postgres socket"
    );
    let out = b
        .run(
            "test -S /run/postgresql/.s.PGSQL.5432 && echo socket-visible; \
             python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); \
             s.connect(\"/run/postgresql/.s.PGSQL.5432\"); print(\"connected\")' 2>&1; \
             for d in /run /var/run /var/lib /home /root /srv /var/tmp /tmp; do \
               echo \"$d: $(ls -A $d 2>&1 | tr '\\n' ' ')\"; done; \
             python3 -c 'print(\"python-ok\")'",
        )
        .await;
    let stdout = out.stdout.text();
    assert!(stdout.contains("python-ok"), "{stdout}");
    assert!(!stdout.contains("socket-visible"), "{stdout}");
    assert!(!stdout.contains("connected"), "{stdout}");
    for line in stdout.lines().filter(|l| l.starts_with('/')) {
        let (dir, listing) = line.split_once(": ").unwrap_or((line, ""));
        let listing = listing.trim();
        assert!(
            listing.is_empty() || listing.contains("No such file or directory"),
            "{dir} shows the host's entries inside the sandbox: {listing}"
        );
    }
}

#[tokio::test]
async fn dev_shm_is_capped_like_tmp() {
    let mut b = Bench::new(20);
    b.limits.tmp_bytes = 1 << 20;
    b.limits.max_file_bytes = 64 << 20;
    let out = b
        .run(
            "head -c 3000000 /dev/zero > /dev/shm/big || echo shm-full; \
             head -c 3000000 /dev/zero > /tmp/big || echo tmp-full; \
             wc -c < /dev/shm/big",
        )
        .await;
    let stdout = out.stdout.text();
    assert!(stdout.contains("shm-full"), "{stdout}");
    assert!(stdout.contains("tmp-full"), "{stdout}");
    assert!(out.stderr.text().contains("No space left"), "{out:?}");
    let kept: u64 = stdout.lines().last().unwrap().trim().parse().unwrap();
    assert!(kept <= 1 << 20, "{stdout}");
}

#[tokio::test]
async fn a_directory_swapped_for_a_host_symlink_until_killed_never_syncs_a_host_file() {
    for round in 0..3 {
        let b = Bench::new(1);
        // Runs until the timeout kills it, in the background too (processes that would outlive
        // bubblewrap for a moment): at any instant `d` is a directory or a symlink to /etc.
        let out = b
            .run(
                "swap() { while :; do mkdir d; touch d/x; rm -r d; ln -s /etc d; rm d; \
                 mkdir d; touch d/passwd; rm -r d; ln -s /etc d; done; }; \
                 swap 2>/dev/null & swap 2>/dev/null",
            )
            .await;
        assert!(out.timed_out, "{out:?}");
        if let Some(uid) = b.user.uid() {
            assert!(
                sandbox::live_pids_of(uid).is_empty(),
                "processes of the sandbox outlived its run"
            );
        }
        let scan = b.scan();
        for (path, content) in puts(&scan) {
            assert!(
                (path == "d/x" || path == "d/passwd") && content.is_empty(),
                "round {round}: a host file reached the sync set: {path} ({} bytes)",
                content.len()
            );
        }
    }
}
