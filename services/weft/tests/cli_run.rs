//! `weft run`, `weft attach` and `weft chat` driven through a real terminal — a tmux pane, keys
//! typed into it, Ctrl-C and Ctrl-D sent as the terminal sends them — against a fleet on port 0:
//! streamed text and its exit code, folded tool calls, an interruption answered at the prompt,
//! Ctrl-C cancelling a run that would otherwise go on for minutes, a finished run replayed by
//! `attach`, a chat of two lines ended by Ctrl-D; and, without a terminal, the plain output,
//! a piped chat and the usage and fleet errors.
//!
//! Needs `tmux` on the PATH (the test fails saying so when it is missing).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{TestFleet, mock_model, put_agent, script, stalling_model, wait_event};
use serde_json::json;

/// How long a pane may take to show what a test waits for.
const DEADLINE: Duration = Duration::from_secs(60);

/// What the pane's shell prints when weft exits, before the exit code and a `]`.
const EXITED: &str = "[weft exited ";

/// A tmux server of the test's own (its socket in a directory of its own) running one `weft`
/// command in a 200×50 pane that stays after the command exits, so its screen can still be
/// read. Killed when dropped.
struct Pane {
    dir: PathBuf,
}

impl Pane {
    /// Starts `weft <args>` in a pane with `$WEFT_TOKEN` set to `token`.
    fn start(name: &str, token: &str, args: &[&str]) -> Self {
        match Command::new("tmux").arg("-V").output() {
            Ok(o) if o.status.success() => {}
            _ => panic!(
                "tmux is not installed: these tests drive weft through a terminal in a tmux pane; install it (`apt-get install -y tmux`)"
            ),
        }
        let dir = std::env::temp_dir().join(format!(
            "weft-cli-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("tmux.conf"),
            "set -g remain-on-exit on\nset -g history-limit 50000\n",
        )
        .unwrap();
        let pane = Self { dir };
        // tmux here does not always reap the pane's process (its exit status then never
        // shows, whatever the command), so a shell runs weft and prints its exit code. The
        // shell's trap keeps it alive through a Ctrl-C (sent to it and to weft, as the terminal
        // does to a foreground job) without changing how weft gets the signal: a caught signal
        // is reset to its default in the command the shell starts.
        let mut cmd = pane.tmux();
        cmd.args(["new-session", "-d", "-s", "t", "-x", "200", "-y", "50"])
            .args(["-e", &format!("WEFT_TOKEN={token}")])
            .args([
                "sh",
                "-c",
                &format!("trap : INT; \"$0\" \"$@\"; echo \"{EXITED}$?]\""),
                env!("CARGO_BIN_EXE_weft"),
            ])
            .args(args);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "tmux new-session: {out:?}");
        pane
    }

    /// A tmux command against this test's server.
    fn tmux(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.env_remove("TMUX")
            .arg("-u")
            .arg("-S")
            .arg(self.dir.join("sock"))
            .arg("-f")
            .arg(self.dir.join("tmux.conf"));
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = self.tmux().args(args).output().unwrap();
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        out
    }

    /// Everything the pane showed, wrapped lines joined.
    fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-J", "-S", "-", "-t", "t"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `text` and Enter, as a person would.
    fn type_line(&self, text: &str) {
        self.run(&["send-keys", "-t", "t", "-l", text]);
        self.run(&["send-keys", "-t", "t", "Enter"]);
    }

    /// Presses a key (`C-c`, `C-d`): the terminal turns it into SIGINT or the end of input.
    fn press(&self, key: &str) {
        self.run(&["send-keys", "-t", "t", key]);
    }

    /// Waits until `check` holds of the screen; the screen then.
    async fn wait_until(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let screen = self.screen();
            if check(&screen) {
                return screen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the pane never showed {what}; it shows:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_for(&self, needle: &str) -> String {
        self.wait_until(&format!("{needle:?}"), |s| s.contains(needle))
            .await
    }

    /// Waits for the command to exit; its exit code and the screen.
    async fn exit(&self) -> (i32, String) {
        let screen = self.wait_for(EXITED).await;
        let code = screen
            .lines()
            .find_map(|l| l.strip_prefix(EXITED)?.strip_suffix(']')?.parse().ok())
            .unwrap_or_else(|| panic!("no exit code in:\n{screen}"));
        (code, screen)
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The first run id (a UUID) the text shows.
fn run_id(text: &str) -> String {
    text.split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .find(|w| w.len() == 36 && uuid::Uuid::parse_str(w).is_ok())
        .unwrap_or_else(|| panic!("no run id in:\n{text}"))
        .to_owned()
}

async fn status(f: &TestFleet, run: &str) -> String {
    let (code, r) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    assert_eq!(code, 200, "{r}");
    r["status"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn run_streams_the_reply_and_folds_tool_calls_and_attach_replays_the_run() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "echo", json!({"model": "mock-1"})).await;
    put_agent(
        &f,
        &f.admin,
        "helper",
        json!({"model": "mock-1", "tools": ["Context"]}),
    )
    .await;

    let plain = Pane::start(
        "echo",
        &f.admin,
        &["run", "--url", &f.url, "echo", "hello there"],
    );
    let (code, screen) = plain.exit().await;
    assert_eq!(code, 0, "{screen}");
    assert_eq!(screen.matches("echo: hello there").count(), 1, "{screen}");
    assert!(screen.contains("succeeded"), "{screen}");

    let input = script(
        json!([[{"name": "Context", "input": {"op": "time"}}]]),
        "all done",
    );
    let tools = Pane::start(
        "tools",
        &f.admin,
        &["run", "--url", &f.url, "helper", &input],
    );
    let (code, screen) = tools.exit().await;
    assert_eq!(code, 0, "{screen}");
    let lines: Vec<&str> = screen.lines().collect();
    let call = lines
        .iter()
        .position(|l| *l == "⏺ Context({\"op\":\"time\"})")
        .unwrap_or_else(|| panic!("no folded tool call in:\n{screen}"));
    assert!(
        lines[call + 1].starts_with("  ⎿  ") && lines[call + 1].len() > "  ⎿  ".len(),
        "the result on the line after the call:\n{screen}"
    );
    assert!(
        lines[call + 2..].contains(&"all done"),
        "the reply after the tool:\n{screen}"
    );
    assert!(
        !screen.contains("#mock"),
        "weft run does not echo the input back:\n{screen}"
    );
    let run = run_id(&screen);
    assert_eq!(status(&f, &run).await, "succeeded");

    // The finished run, replayed: the same reply (from the transcript: no live text) and tool
    // line, and the user's input this time.
    let again = Pane::start("attach", &f.admin, &["attach", "--url", &f.url, &run]);
    let (code, replay) = again.exit().await;
    assert_eq!(code, 0, "{replay}");
    assert!(replay.contains(&format!("following run {run}")), "{replay}");
    assert!(replay.contains("> #mock"), "{replay}");
    assert!(replay.contains("⏺ Context({\"op\":\"time\"})"), "{replay}");
    assert_eq!(replay.matches("\nall done\n").count(), 1, "{replay}");

    // From a later seq: the run's start (and its input) is not shown again.
    let tail = Pane::start(
        "tail",
        &f.admin,
        &["attach", "--url", &f.url, "--from-seq", "4", &run],
    );
    let (code, replay) = tail.exit().await;
    assert_eq!(code, 0, "{replay}");
    assert!(!replay.contains("> #mock"), "{replay}");
    assert!(replay.contains("all done"), "{replay}");
}

#[tokio::test]
async fn ctrl_c_cancels_a_run_that_would_go_on_for_minutes() {
    // `mock/slow` sends its first word at once and then one a minute.
    let f = TestFleet::start_with(stalling_model).await;
    put_agent(&f, &f.admin, "sleepy", json!({"model": "mock/slow"})).await;
    let pane = Pane::start(
        "ctrl-c",
        &f.admin,
        &["run", "--url", &f.url, "sleepy", "take your time"],
    );
    let run = run_id(&pane.wait_for("weft: run ").await);
    // The executor holding the run is in its model turn (it writes `provider_chosen` as the turn
    // starts), which would go on for minutes.
    wait_event(&f, &f.admin, &run, 1, "provider_chosen").await;
    assert_eq!(status(&f, &run).await, "running");
    pane.press("C-c");
    let (code, screen) = pane.exit().await;
    assert_eq!(code, 130, "{screen}");
    // weft took the signal (a shell reports 130 for a process killed by SIGINT too): it
    // cancelled the run and waited for it to end.
    assert!(
        screen.contains(&format!("cancelling run {run}")),
        "{screen}"
    );
    assert!(screen.contains(&format!("run {run} cancelled")), "{screen}");
    assert_eq!(status(&f, &run).await, "cancelled");
}

#[tokio::test]
async fn leave_running_detaches_and_attach_follows_the_run_live() {
    let f = TestFleet::start_with(stalling_model).await;
    put_agent(&f, &f.admin, "sleepy", json!({"model": "mock/slow"})).await;
    let first = Pane::start(
        "leave",
        &f.admin,
        &[
            "run",
            "--url",
            &f.url,
            "--leave-running",
            "sleepy",
            "take your time",
        ],
    );
    let run = run_id(&first.wait_for("weft: run ").await);
    wait_event(&f, &f.admin, &run, 1, "provider_chosen").await;
    first.press("C-c");
    let (code, screen) = first.exit().await;
    assert_eq!(code, 4, "{screen}");
    assert!(screen.contains("it goes on"), "{screen}");
    assert_eq!(status(&f, &run).await, "running");

    // Attached to the live run: what it did so far, then its end as it happens.
    let second = Pane::start("follow", &f.admin, &["attach", "--url", &f.url, &run]);
    second.wait_for("> take your time").await;
    let (code, r) = f
        .post(&format!("/v1/runs/{run}/cancel"), &f.admin, json!({}))
        .await;
    assert!(code == 200 || code == 202, "{code} {r}");
    let (code, screen) = second.exit().await;
    assert_eq!(code, 130, "{screen}");
    assert!(screen.contains(&format!("run {run} cancelled")), "{screen}");
}

#[tokio::test]
async fn text_streams_live_and_a_dropped_stream_is_re_attached_from_the_last_seq() {
    // `mock/drip` sends a word every 1.5 s: the reply takes seconds to arrive.
    let f = TestFleet::start_with(|c| {
        mock_model(
            c,
            "drip",
            weft_config::MockModelConfig {
                token_delay_ms: 1500,
                ..Default::default()
            },
        );
    })
    .await;
    put_agent(&f, &f.admin, "drip", json!({"model": "mock/drip"})).await;
    let proxy = Proxy::start(&f.url).await;
    let pane = Pane::start(
        "drop",
        &f.admin,
        &["run", "--url", &proxy.url, "drip", "take your time please"],
    );
    // Part of the reply is on the screen while the run still goes: it came live.
    let screen = pane.wait_for("echo: take").await;
    let run = run_id(&screen);
    assert_eq!(status(&f, &run).await, "running");
    proxy.cut();
    pane.wait_for(&format!(
        "the stream of run {run} dropped; re-attaching from seq"
    ))
    .await;
    // The new stream brings the rest and the end.
    let (code, screen) = pane.exit().await;
    assert_eq!(code, 0, "{screen}");
    // The rest of the reply, after the note (the note ends the line the live text was on).
    let note = screen.find("re-attaching from seq").unwrap();
    assert!(
        screen[note..].contains("your time please"),
        "the rest of the reply:\n{screen}"
    );
    assert!(screen.contains(&format!("run {run} succeeded")), "{screen}");
    assert!(proxy.connections() >= 2, "weft connected again");
}

/// A TCP forwarder to a fleet whose connections can be cut, as a network failure would.
struct Proxy {
    url: String,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    open: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(to: &str) -> Self {
        let target = to.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (n, conns) = (accepted.clone(), open.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let target = target.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns.lock().unwrap().push(conn.abort_handle());
            }
        });
        Self {
            url,
            accepted,
            open,
            task,
        }
    }

    /// Drops every connection open now.
    fn cut(&self) {
        for c in self.open.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    fn connections(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

#[tokio::test]
async fn an_interruption_is_answered_at_the_prompt() {
    let f = TestFleet::start().await;
    put_agent(
        &f,
        &f.admin,
        "asker",
        json!({"model": "mock-1", "tools": ["Interruption"]}),
    )
    .await;
    let input = script(
        json!([[{"name": "Interruption", "input": {"op": "ask", "question": "which colour?"}}]]),
        "noted",
    );
    let pane = Pane::start("ask", &f.admin, &["run", "--url", &f.url, "asker", &input]);
    pane.wait_for("? which colour?").await;
    let screen = pane
        .wait_until("the answer prompt", |s| {
            s.lines().any(|l| l.trim_end() == "answer>")
        })
        .await;
    let run = run_id(&screen);
    assert_eq!(status(&f, &run).await, "awaiting_input");
    pane.type_line("blue");
    let (code, screen) = pane.exit().await;
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.lines().any(|l| l == "  ⎿  {\"answer\":\"blue\"}"),
        "the answer is the tool's result:\n{screen}"
    );
    assert!(screen.lines().any(|l| l == "noted"), "{screen}");
}

#[tokio::test]
async fn chat_sends_each_line_and_ctrl_d_ends_it() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "echo", json!({"model": "mock-1"})).await;
    let pane = Pane::start("chat", &f.admin, &["chat", "--url", &f.url, "echo"]);
    let screen = pane
        .wait_until("the prompt", |s| s.lines().any(|l| l.trim_end() == ">"))
        .await;
    let run = run_id(&screen);
    assert_eq!(status(&f, &run).await, "awaiting_input");
    pane.type_line("hello one");
    pane.wait_for("echo: hello one").await;
    pane.type_line("hello two");
    pane.wait_for("echo: hello two").await;
    pane.press("C-d");
    let (code, screen) = pane.exit().await;
    assert_eq!(code, 0, "{screen}");
    assert_eq!(screen.matches("echo: hello one").count(), 1, "{screen}");
    assert_eq!(screen.matches("echo: hello two").count(), 1, "{screen}");
    assert!(
        screen.contains(&format!("chat ended; run {run} cancelled")),
        "{screen}"
    );
    assert_eq!(status(&f, &run).await, "cancelled");
    // Two turns were taken, one per line.
    let (_, page) = f.get(&format!("/v1/runs/{run}/events"), &f.admin).await;
    let inputs: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "user_input")
        .map(|e| e["data"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(inputs, ["hello one", "hello two"]);
}

/// `weft <args>` without a terminal, `stdin` on its standard input: exit code, stdout, stderr.
/// Waited for off the test's runtime, which serves the fleet.
async fn weft(token: Option<&str>, args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let token = token.map(str::to_owned);
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let stdin = stdin.to_owned();
    tokio::task::spawn_blocking(move || weft_blocking(token.as_deref(), &args, &stdin))
        .await
        .unwrap()
}

fn weft_blocking(
    token: Option<&str>,
    args: &[String],
    stdin: &str,
) -> (Option<i32>, String, String) {
    use std::io::Write as _;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.env_remove("WEFT_TOKEN")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(t) = token {
        cmd.env("WEFT_TOKEN", t);
    }
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn without_a_terminal_the_output_is_plain_and_errors_say_what_to_do() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "echo", json!({"model": "mock-1"})).await;
    let token = Some(f.admin.as_str());

    // Standard output is the agent's text alone, with no escape codes anywhere.
    let (code, out, err) = weft(token, &["run", "--url", &f.url, "echo"], "from a pipe\n").await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "echo: from a pipe\n");
    assert!(!err.contains('\x1b'), "{err:?}");
    let run = run_id(&err);
    assert_eq!(status(&f, &run).await, "succeeded");

    // A piped chat: each line is sent when the agent asks for one; the end of input ends it.
    let (code, out, err) = weft(token, &["chat", "--url", &f.url, "echo"], "one\ntwo\n").await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "echo: one\necho: two\n");
    assert_eq!(status(&f, &run_id(&err)).await, "cancelled");

    let (code, _, err) = weft(None, &["run", "--url", &f.url, "echo", "hi"], "").await;
    assert_eq!(code, Some(2));
    assert!(
        err.contains("no token: set $WEFT_TOKEN or give --token"),
        "{err}"
    );

    let (code, _, err) = weft(token, &["run", "--url", &f.url, "echo"], "  \n").await;
    assert_eq!(code, Some(2));
    assert!(err.contains("the input is empty"), "{err}");

    let (code, _, err) = weft(token, &["run", "--url", &f.url, "nope", "hi"], "").await;
    assert_eq!(code, Some(3));
    assert!(
        err.contains("cannot start a run of agent `nope` (404: "),
        "the fleet's own message: {err}"
    );

    let (code, _, err) = weft(
        Some("wft_not_a_token"),
        &["attach", "--url", &f.url, &run],
        "",
    )
    .await;
    assert_eq!(code, Some(3));
    assert!(
        err.contains("(401: ") && err.contains("check $WEFT_TOKEN"),
        "{err}"
    );

    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let (code, _, err) = weft(token, &["run", "--url", &dead, "echo", "hi"], "").await;
    assert_eq!(code, Some(3));
    assert!(
        err.contains(&format!("cannot reach the fleet at {dead}")) && err.contains("weft up"),
        "{err}"
    );
}
