//! One command under bubblewrap: the command line ([`Sandbox::argv`]), the limits, and the run
//! itself ([`Sandbox::run`]) with its wall-clock timeout and output caps. Nothing here knows
//! about volumes: the checkout is a directory, made and read by [`super::checkout`].
//!
//! The sandbox is a set of Linux namespaces, not a VM (docs/security.md, "Commands in a
//! sandbox"):
//! - `--unshare-all`: its own network namespace (only a loopback of its own: nothing outside is
//!   reachable), pid, ipc, uts, cgroup and user namespaces; `--disable-userns` (bubblewrap 0.8
//!   and later) so the command cannot make more.
//! - Of the host only `/usr` and `/etc`, read-only, and `/bin`, `/sbin`, `/lib`… as the host has
//!   them (symlinks into `/usr` on Debian): no `/run` (its Unix sockets: Postgres, D-Bus), `/var`,
//!   `/home`, `/root`, host `/tmp`. A private `/tmp` and `/dev/shm` (tmpfs of
//!   [`Limits::tmp_bytes`] each), an empty `/run`, a minimal `/dev`, its own `/proc`; the
//!   checkout at `/work` — the only writable path besides those, read-only itself for a `ro`
//!   volume.
//! - `--clearenv`: no variable of the executor's (its secrets) reaches the command.
//! - `--die-with-parent` and `--new-session`: killing bubblewrap ends everything inside (the pid
//!   namespace dies with its first process), and the command has no terminal to inject into.
//!   That teardown is asynchronous: a command run as a fresh uid has every process of that uid
//!   killed before [`Sandbox::run`] returns ([`kill_user`]), so nothing runs while the checkout
//!   is read.
//! - Limits by `prlimit`: RLIMIT_CPU (soft `cpu_seconds`, so the command gets SIGXCPU; hard one
//!   second later), RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE. RLIMIT_NPROC counts the processes of
//!   a user, and is not enforced for root: an executor running as root runs each command as a
//!   fresh unprivileged uid (`setpriv`), so the count is the command's alone. An executor not
//!   running as root runs commands as its own user, and then RLIMIT_NPROC counts every process
//!   (and thread) of that user, the executor's included — give it a user of its own.
//! - A wall-clock timeout kills bubblewrap's process group with SIGKILL; the output is read as
//!   it comes, the first `max_output_bytes` of each stream kept and the rest counted.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::hash::{BuildHasher as _, Hasher as _};
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt as _};
use weft_config::ExecConfig;

/// Where the checkout is inside the sandbox (the command's working directory and `HOME`).
pub const WORKDIR: &str = "/work";

/// The `PATH` inside the sandbox (and for finding `setpriv`, `prlimit` and `bwrap` outside).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The first uid of the range sandbox users are drawn from when the executor runs as root.
pub const FIRST_SANDBOX_UID: u32 = 100_000;

/// How many uids the range holds.
pub const SANDBOX_UIDS: u32 = 60_000;

/// How long the output pipes may stay open after the command ended or was killed (a process
/// that escaped the kill holding them): then the output read so far is what is reported.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// The host's top-level directories a command may read besides `/usr` and `/etc`: bound
/// read-only where they are directories, made the same symlinks where they are symlinks
/// (Debian's `/bin -> usr/bin`), left out where missing.
const HOST_TOPS: [&str; 6] = ["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"];

/// What a top-level host path is.
enum HostTop {
    Link(String),
    Dir,
    Missing,
}

fn host_top(path: &str) -> HostTop {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::read_link(path)
            .ok()
            .and_then(|t| t.to_str().map(str::to_owned))
            .map_or(HostTop::Missing, HostTop::Link),
        Ok(m) if m.is_dir() => HostTop::Dir,
        _ => HostTop::Missing,
    }
}

/// What one command may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall clock, after which the command is killed.
    pub timeout: Duration,
    /// RLIMIT_CPU, seconds.
    pub cpu_seconds: u64,
    /// RLIMIT_AS, bytes.
    pub memory_bytes: u64,
    /// RLIMIT_NPROC.
    pub max_processes: u64,
    /// RLIMIT_FSIZE, bytes.
    pub max_file_bytes: u64,
    /// Bytes of stdout, and of stderr, kept.
    pub max_output_bytes: u64,
    /// The size of the private `/tmp`, bytes.
    pub tmp_bytes: u64,
}

impl Limits {
    /// The operator's limits (`volumes.exec`) with a timeout of `timeout_s` seconds. `/tmp` may
    /// hold as much as the address space.
    pub fn new(cfg: &ExecConfig, timeout_s: u64) -> Self {
        Self {
            timeout: Duration::from_secs(timeout_s),
            cpu_seconds: cfg.cpu_seconds,
            memory_bytes: cfg.memory_bytes,
            max_processes: cfg.max_processes,
            max_file_bytes: cfg.max_file_bytes,
            max_output_bytes: cfg.max_output_bytes,
            tmp_bytes: cfg.memory_bytes,
        }
    }
}

/// What bubblewrap on this machine supports ([`probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// `--disable-userns` (0.8.0).
    pub disable_userns: bool,
    /// `--size` for a tmpfs (0.5.0).
    pub tmpfs_size: bool,
}

impl Features {
    /// Everything (bubblewrap 0.8 and later).
    pub const ALL: Self = Self {
        disable_userns: true,
        tmpfs_size: true,
    };

    /// The features of `bwrap --version`'s answer (`bubblewrap 0.8.0`).
    pub fn of_version(text: &str) -> Self {
        let version: Vec<u64> = text
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .split('.')
            .map(|p| p.parse().unwrap_or(0))
            .collect();
        let at_least = |major: u64, minor: u64| {
            let (a, b) = (
                version.first().copied().unwrap_or(0),
                version.get(1).copied().unwrap_or(0),
            );
            (a, b) >= (major, minor)
        };
        Self {
            disable_userns: at_least(0, 8),
            tmpfs_size: at_least(0, 5),
        }
    }
}

/// Runs `bwrap --version` once per binary path and remembers what it supports; an error says
/// why bubblewrap cannot run (not installed, not executable).
pub async fn probe(bwrap: &Path) -> Result<Features, SandboxError> {
    static PROBED: OnceLock<Mutex<Vec<(PathBuf, Features)>>> = OnceLock::new();
    let probed = PROBED.get_or_init(|| Mutex::new(Vec::new()));
    if let Some(f) = probed
        .lock()
        .ok()
        .and_then(|p| p.iter().find(|(b, _)| b == bwrap).map(|(_, f)| *f))
    {
        return Ok(f);
    }
    let out = tokio::process::Command::new(bwrap)
        .arg("--version")
        .env_clear()
        .env("PATH", PATH)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| SandboxError::Start(format!("`{} --version`: {e}", bwrap.display())))?;
    if !out.status.success() {
        return Err(SandboxError::Start(format!(
            "`{} --version` failed: {}",
            bwrap.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let features = Features::of_version(&String::from_utf8_lossy(&out.stdout));
    if let Ok(mut p) = probed.lock() {
        p.push((bwrap.to_owned(), features));
    }
    Ok(features)
}

/// Whether this process runs as root (the owner of `/proc/self`).
pub fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The uids handed out by [`SandboxUser::fresh`] and not yet given back, so that two commands
/// of this executor never share one.
fn uids_in_use() -> &'static Mutex<BTreeSet<u32>> {
    static IN_USE: OnceLock<Mutex<BTreeSet<u32>>> = OnceLock::new();
    IN_USE.get_or_init(|| Mutex::new(BTreeSet::new()))
}

/// The user one command runs as: a fresh uid (the executor runs as root), or the executor's own
/// user. A fresh uid goes back to the pool when this is dropped.
#[derive(Debug)]
pub struct SandboxUser {
    uid: Option<u32>,
}

impl SandboxUser {
    /// A uid from [`FIRST_SANDBOX_UID`] up that no other command of this executor has, drawn
    /// at random (executors sharing a host rarely collide; when they do, the two commands share
    /// their RLIMIT_NPROC count and nothing else: each sees only its own checkout).
    pub fn fresh() -> Self {
        let mut in_use = uids_in_use()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut seed = std::collections::hash_map::RandomState::new().build_hasher();
        seed.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        let start = u32::try_from(seed.finish() % u64::from(SANDBOX_UIDS)).unwrap_or(0);
        let uid = (0..SANDBOX_UIDS)
            .map(|i| FIRST_SANDBOX_UID + (start + i) % SANDBOX_UIDS)
            .find(|uid| !in_use.contains(uid))
            .unwrap_or(FIRST_SANDBOX_UID + start);
        in_use.insert(uid);
        Self { uid: Some(uid) }
    }

    /// The executor's own user.
    pub fn current() -> Self {
        Self { uid: None }
    }

    /// [`SandboxUser::fresh`] when running as root, else [`SandboxUser::current`].
    pub fn for_this_process() -> Self {
        if running_as_root() {
            Self::fresh()
        } else {
            Self::current()
        }
    }

    /// The uid the command runs as, when not the executor's own (the checkout must be owned by
    /// it).
    pub fn uid(&self) -> Option<u32> {
        self.uid
    }
}

impl Drop for SandboxUser {
    fn drop(&mut self) {
        if let Some(uid) = self.uid
            && let Ok(mut in_use) = uids_in_use().lock()
        {
            in_use.remove(&uid);
        }
    }
}

/// One command's sandbox.
#[derive(Clone, Debug)]
pub struct Sandbox {
    /// The bubblewrap binary.
    pub bwrap: PathBuf,
    pub features: Features,
    /// The host directory mounted at [`WORKDIR`].
    pub checkout: PathBuf,
    /// Mount the checkout read-only.
    pub read_only: bool,
    /// Host directories hidden under an empty tmpfs (where the scratch checkouts of other
    /// commands are, the blob directory) — those under `/usr` or `/etc`; nothing else of the
    /// host is mounted.
    pub hide: Vec<PathBuf>,
    /// The uid to run as (`setpriv`), or `None` for the executor's own user.
    pub uid: Option<u32>,
    pub limits: Limits,
}

/// Why a sandbox could not run a command (as opposed to a command that ran and failed).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "the sandbox cannot start: {0}; the operator must install bubblewrap (Debian: apt-get install bubblewrap), util-linux (setpriv, prlimit) and allow unprivileged user namespaces"
    )]
    Start(String),
    #[error(
        "processes of the sandbox (uid {0}) would not die; nothing of the command's work was synced — run the command again"
    )]
    Lingering(u32),
}

/// What a stream of the command wrote: the first bytes, and how many more were dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    pub bytes: Vec<u8>,
    pub dropped: u64,
}

impl Captured {
    /// The kept bytes as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// How a command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The exit status bubblewrap passed on (a command killed by signal `n` is `128 + n`).
    pub exit_code: Option<i32>,
    /// The signal that ended the command: bubblewrap's own (killed at the timeout), or `n` of an
    /// exit code `128 + n`.
    pub signal: Option<i32>,
    /// Killed at the wall-clock timeout.
    pub timed_out: bool,
    pub stdout: Captured,
    pub stderr: Captured,
    pub elapsed: Duration,
}

impl Outcome {
    /// The limit the command ran into, when it shows: the timeout, SIGXCPU, SIGXFSZ, or a fork
    /// or an allocation refused (from what the shell and common runtimes print).
    pub fn limit_hit(&self) -> Option<&'static str> {
        const SIGXCPU: i32 = 24;
        const SIGXFSZ: i32 = 25;
        if self.timed_out {
            return Some("timeout_s");
        }
        match self.signal {
            Some(SIGXCPU) => return Some("cpu_seconds"),
            Some(SIGXFSZ) => return Some("max_file_bytes"),
            _ => {}
        }
        let err = String::from_utf8_lossy(&self.stderr.bytes);
        if ["Cannot fork", "fork: ", "Resource temporarily unavailable"]
            .iter()
            .any(|s| err.contains(s))
        {
            return Some("max_processes");
        }
        let lower = err.to_lowercase();
        if [
            "cannot allocate memory",
            "memoryerror",
            "memory exhausted",
            "out of memory",
        ]
        .iter()
        .any(|s| lower.contains(s))
        {
            return Some("memory_bytes");
        }
        if err.contains("File size limit exceeded") {
            return Some("max_file_bytes");
        }
        None
    }
}

impl Sandbox {
    /// The whole command line: `[setpriv …] prlimit … -- bwrap … -- sh -c <command>`.
    pub fn argv(&self, command: &str) -> Vec<OsString> {
        let l = &self.limits;
        let mut a: Vec<OsString> = Vec::new();
        let mut push = |s: &str| a.push(OsString::from(s));
        if let Some(uid) = self.uid {
            push("setpriv");
            push(&format!("--reuid={uid}"));
            push(&format!("--regid={uid}"));
            push("--clear-groups");
            push("--");
        }
        push("prlimit");
        push(&format!(
            "--cpu={}:{}",
            l.cpu_seconds,
            l.cpu_seconds.saturating_add(1)
        ));
        push(&format!("--as={}", l.memory_bytes));
        push(&format!("--nproc={}", l.max_processes));
        push(&format!("--fsize={}", l.max_file_bytes));
        push("--");
        a.push(self.bwrap.clone().into_os_string());
        let mut push = |s: &str| a.push(OsString::from(s));
        push("--unshare-all");
        if self.features.disable_userns {
            push("--unshare-user");
            push("--disable-userns");
        }
        for s in [
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--setenv",
            "PATH",
            PATH,
            "--setenv",
            "HOME",
            WORKDIR,
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--ro-bind",
            "/usr",
            "/usr",
            "--ro-bind",
            "/etc",
            "/etc",
        ] {
            push(s);
        }
        for top in HOST_TOPS {
            match host_top(top) {
                HostTop::Link(target) => {
                    push("--symlink");
                    push(&target);
                    push(top);
                }
                HostTop::Dir => {
                    push("--ro-bind");
                    push(top);
                    push(top);
                }
                HostTop::Missing => {}
            }
        }
        for s in ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/run"] {
            push(s);
        }
        for dir in ["/tmp", "/dev/shm"] {
            if self.features.tmpfs_size {
                push("--size");
                push(&l.tmp_bytes.to_string());
            }
            push("--tmpfs");
            push(dir);
        }
        for dir in &self.hide {
            if dir.starts_with("/usr") || dir.starts_with("/etc") {
                a.push("--tmpfs".into());
                a.push(dir.clone().into_os_string());
            }
        }
        a.push(
            if self.read_only {
                "--ro-bind"
            } else {
                "--bind"
            }
            .into(),
        );
        a.push(self.checkout.clone().into_os_string());
        let mut push = |s: &str| a.push(OsString::from(s));
        // The sandbox's own root (a tmpfs bwrap makes) is read-only once everything is
        // mounted on it: the checkout, /tmp and /dev/shm are the only writable places.
        for s in [
            "/work",
            "--remount-ro",
            "/",
            "--chdir",
            WORKDIR,
            "--",
            "sh",
            "-c",
            command,
        ] {
            push(s);
        }
        a
    }

    /// Runs `command` and waits for it (at most the timeout, then kills it). The error is a
    /// sandbox that could not start; a command that failed is an [`Outcome`].
    pub async fn run(&self, command: &str) -> Result<Outcome, SandboxError> {
        let argv = self.argv(command);
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| SandboxError::Start("empty command line".into()))?;
        let started = Instant::now();
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", PATH)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SandboxError::Start(format!("{}: {e}", program.to_string_lossy())))?;
        let cap = self.limits.max_output_bytes;
        let stdout = child.stdout.take().map(|s| tokio::spawn(capture(s, cap)));
        let stderr = child.stderr.take().map(|s| tokio::spawn(capture(s, cap)));
        let (status, timed_out) =
            match tokio::time::timeout(self.limits.timeout, child.wait()).await {
                Ok(status) => (status, false),
                Err(_) => {
                    kill_group(&mut child).await;
                    (child.wait().await, true)
                }
            };
        let status =
            status.map_err(|e| SandboxError::Start(format!("waiting for the sandbox: {e}")))?;
        // Bubblewrap is gone, but what ran inside may outlive it for a moment (its pid
        // namespace is torn down after it): nothing of the sandbox's uid may run while the
        // checkout is read.
        if let Some(uid) = self.uid {
            kill_user(uid).await?;
        }
        let stdout = collect(stdout).await;
        let stderr = collect(stderr).await;
        let elapsed = started.elapsed();
        let exit_code = status.code();
        let signal = status.signal().or_else(|| {
            exit_code
                .filter(|c| (129..160).contains(c))
                .map(|c| c - 128)
        });
        if !timed_out && exit_code.is_some_and(|c| c != 0) && started_badly(&stderr.bytes) {
            return Err(SandboxError::Start(stderr.text().trim().to_owned()));
        }
        Ok(Outcome {
            exit_code,
            signal,
            timed_out,
            stdout,
            stderr,
            elapsed,
        })
    }
}

/// Whether stderr says the sandbox itself failed (bubblewrap, setpriv or prlimit complaining)
/// rather than the command.
fn started_badly(stderr: &[u8]) -> bool {
    ["bwrap: ", "setpriv: ", "prlimit: "]
        .iter()
        .any(|p| stderr.starts_with(p.as_bytes()))
}

/// SIGKILL to the child's process group (bubblewrap and whatever shares its group; what runs
/// inside dies with bubblewrap: `--die-with-parent` and the pid namespace), then to the child.
async fn kill_group(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        // `kill` is the shell's and util-linux's; no unsafe code for killpg(2).
        let _ = tokio::process::Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{pid}")])
            .env_clear()
            .env("PATH", PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
    }
    let _ = child.start_kill();
}

/// How often [`kill_user`] looks for processes left.
const KILL_ROUNDS: u32 = 500;

/// SIGKILL to every process of `uid` (a fresh sandbox uid: only this command's), until none is
/// left alive (a zombie cannot do anything). An error when some outlive [`KILL_ROUNDS`] rounds.
pub async fn kill_user(uid: u32) -> Result<(), SandboxError> {
    for _ in 0..KILL_ROUNDS {
        let pids = tokio::task::spawn_blocking(move || live_pids_of(uid))
            .await
            .unwrap_or_default();
        if pids.is_empty() {
            return Ok(());
        }
        let _ = tokio::process::Command::new("kill")
            .args(["-s", "KILL", "--"])
            .args(pids.iter().map(u32::to_string))
            .env_clear()
            .env("PATH", PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(SandboxError::Lingering(uid))
}

/// The processes whose real uid is `uid` and that are not zombies (from `/proc/<pid>/status`).
pub fn live_pids_of(uid: u32) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                return false;
            };
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::trim)
                    .unwrap_or_default()
                    .to_owned()
            };
            let real_uid = field("Uid:");
            let state = field("State:");
            real_uid.split_whitespace().next() == Some(uid.to_string().as_str())
                && !state.starts_with('Z')
                && !state.starts_with('X')
        })
        .collect()
}

/// Reads `stream` to its end, keeping the first `cap` bytes and counting the rest.
async fn capture(mut stream: impl AsyncRead + Unpin, cap: u64) -> Captured {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut out = Captured::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => {
                let room = cap.saturating_sub(out.bytes.len()).min(n);
                out.bytes.extend_from_slice(&buf[..room]);
                out.dropped += (n - room) as u64;
            }
        }
    }
}

/// What a capture task read, waiting at most [`DRAIN_GRACE`] for the pipe to close.
async fn collect(task: Option<tokio::task::JoinHandle<Captured>>) -> Captured {
    let Some(mut task) = task else {
        return Captured::default();
    };
    match tokio::time::timeout(DRAIN_GRACE, &mut task).await {
        Ok(Ok(c)) => c,
        Ok(Err(_)) => Captured::default(),
        Err(_) => {
            task.abort();
            Captured::default()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "unit tests: a panic is how a test fails"
    )]

    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn limits() -> Limits {
        Limits {
            timeout: Duration::from_secs(20),
            cpu_seconds: 10,
            memory_bytes: 1 << 30,
            max_processes: 32,
            max_file_bytes: 1 << 20,
            max_output_bytes: 1 << 16,
            tmp_bytes: 1 << 24,
        }
    }

    /// A checkout owned by the sandbox user, and the sandbox over it.
    fn sandbox(dir: &Path, user: &SandboxUser, limits: Limits) -> Sandbox {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        if let Some(uid) = user.uid() {
            std::os::unix::fs::chown(dir, Some(uid), Some(uid)).unwrap();
        }
        Sandbox {
            bwrap: "bwrap".into(),
            features: Features::ALL,
            checkout: dir.to_owned(),
            read_only: false,
            hide: vec![],
            uid: user.uid(),
            limits,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("weft-sandbox-test-{name}-{}", uuid::Uuid::now_v7()))
    }

    #[test]
    fn versions_name_their_features() {
        assert_eq!(Features::of_version("bubblewrap 0.8.0\n"), Features::ALL);
        assert_eq!(
            Features::of_version("bubblewrap 0.6.1"),
            Features {
                disable_userns: false,
                tmpfs_size: true
            }
        );
        assert_eq!(
            Features::of_version("bubblewrap 0.4.0"),
            Features {
                disable_userns: false,
                tmpfs_size: false
            }
        );
        assert_eq!(Features::of_version("bubblewrap 1.0"), Features::ALL);
    }

    #[test]
    fn the_command_line_drops_privileges_limits_and_isolates() {
        let s = Sandbox {
            bwrap: "/usr/bin/bwrap".into(),
            features: Features::ALL,
            checkout: "/var/tmp/weft-exec-1".into(),
            read_only: true,
            hide: vec!["/var/tmp".into(), "/tmp".into()],
            uid: Some(100_123),
            limits: limits(),
        };
        let argv: Vec<String> = s
            .argv("echo hi")
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let line = argv.join(" ");
        assert!(
            line.starts_with(
                "setpriv --reuid=100123 --regid=100123 --clear-groups -- prlimit --cpu=10:11 \
                 --as=1073741824 --nproc=32 --fsize=1048576 -- /usr/bin/bwrap --unshare-all \
                 --unshare-user --disable-userns --die-with-parent --new-session --clearenv"
            ),
            "{line}"
        );
        assert!(
            line.contains("--ro-bind /usr /usr --ro-bind /etc /etc "),
            "{line}"
        );
        assert!(!line.contains("--ro-bind / /"), "{line}");
        assert!(line.contains("--dev /dev --proc /proc --tmpfs /run --size 16777216 --tmpfs /tmp --size 16777216 --tmpfs /dev/shm --ro-bind /var/tmp/weft-exec-1 /work --remount-ro / --chdir /work -- sh -c"), "{line}");
        assert_eq!(argv.last().map(String::as_str), Some("echo hi"));
        // Not root: no setpriv; a writable checkout; an old bubblewrap.
        let s = Sandbox {
            uid: None,
            read_only: false,
            features: Features::of_version("bubblewrap 0.4.0"),
            ..s
        };
        let line = s
            .argv("true")
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(line.starts_with("prlimit --cpu=10:11"), "{line}");
        assert!(
            !line.contains("--disable-userns") && !line.contains("--size"),
            "{line}"
        );
        assert!(line.contains("--bind /var/tmp/weft-exec-1 /work"), "{line}");
    }

    #[test]
    fn fresh_uids_are_distinct_while_held() {
        let a = SandboxUser::fresh();
        let b = SandboxUser::fresh();
        let (ua, ub) = (a.uid().unwrap(), b.uid().unwrap());
        assert_ne!(ua, ub);
        assert!((FIRST_SANDBOX_UID..FIRST_SANDBOX_UID + SANDBOX_UIDS).contains(&ua));
        drop(a);
        assert!(!uids_in_use().lock().unwrap().contains(&ua));
        assert!(uids_in_use().lock().unwrap().contains(&ub));
    }

    #[tokio::test]
    async fn output_over_the_cap_is_cut_and_counted() {
        let dir = scratch("output");
        let user = SandboxUser::for_this_process();
        let mut l = limits();
        l.max_output_bytes = 1000;
        let s = sandbox(&dir, &user, l);
        probe(&s.bwrap)
            .await
            .expect("bubblewrap must run on this machine");
        let out = s
            .run("head -c 5000 /dev/zero | tr '\\0' a; head -c 300 /dev/zero | tr '\\0' b >&2")
            .await
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        assert_eq!(out.stdout.bytes, vec![b'a'; 1000]);
        assert_eq!(out.stdout.dropped, 4000);
        assert_eq!(out.stderr.bytes, vec![b'b'; 300]);
        assert_eq!(out.stderr.dropped, 0);
    }

    #[tokio::test]
    async fn a_command_past_its_time_is_killed() {
        let dir = scratch("timeout");
        let user = SandboxUser::for_this_process();
        let mut l = limits();
        l.timeout = Duration::from_secs(1);
        let s = sandbox(&dir, &user, l);
        let out = s.run("echo started; sleep 30 & sleep 30").await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(out.timed_out, "{out:?}");
        assert_eq!(out.limit_hit(), Some("timeout_s"));
        assert_eq!(out.signal, Some(9), "{out:?}");
        assert_eq!(out.stdout.text(), "started\n");
        assert!(out.elapsed < Duration::from_secs(10), "{out:?}");
    }

    #[tokio::test]
    async fn cpu_time_is_bounded() {
        let dir = scratch("cpu");
        let user = SandboxUser::for_this_process();
        let mut l = limits();
        l.cpu_seconds = 1;
        let s = sandbox(&dir, &user, l);
        let out = s.run("while :; do :; done").await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!out.timed_out, "{out:?}");
        assert_eq!(out.limit_hit(), Some("cpu_seconds"), "{out:?}");
    }

    #[tokio::test]
    async fn the_environment_is_the_sandboxs_own() {
        let dir = scratch("env");
        let user = SandboxUser::for_this_process();
        let s = sandbox(&dir, &user, limits());
        // The test process's environment (cargo's variables) does not reach the command.
        let out = s.run("env | sort; pwd").await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let text = out.stdout.text();
        assert!(text.contains("HOME=/work\n"), "{text}");
        assert!(text.ends_with("/work\n"), "{text}");
        assert!(!text.contains("CARGO"), "{text}");
    }

    #[tokio::test]
    async fn a_missing_bwrap_is_a_sandbox_error() {
        let dir = scratch("missing");
        let user = SandboxUser::for_this_process();
        let mut s = sandbox(&dir, &user, limits());
        s.bwrap = "/nonexistent/bwrap".into();
        let e = s.run("true").await.unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.to_string().starts_with("the sandbox cannot start"), "{e}");
        assert!(probe(Path::new("/nonexistent/bwrap")).await.is_err());
    }
}
