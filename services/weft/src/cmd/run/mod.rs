//! `weft run <agent> [input]`, `weft attach <run>` and `weft chat <agent>`: a run on a fleet,
//! followed from a terminal (docs/runs.md, "From a terminal: weft run, attach, chat").
//!
//! Each starts a run (`POST /v1/runs` with `stream: true`, so the stream is open before the
//! first live text) or finds one, over the HTTP API with the caller's token (`--token` or
//! `$WEFT_TOKEN`), and follows its stream until `run_finished`, showing the events as
//! [`render`] does. A stream that drops is opened again (`GET /v1/runs/{id}/stream`) from the
//! seq after the last event received (`from_seq`), for up to a minute of failures. When the run waits for input
//! (an interactive run at the end of a turn, or an `Interruption.ask`) and standard input is a
//! terminal (always, for `chat`), the next line typed is sent to it (`POST …/input` or
//! `POST …/interrupts/{id}`). Ctrl-C cancels the run (`POST …/cancel`) and waits for it to end;
//! a second Ctrl-C stops waiting. The exit code says how the run ended ([`EXIT_CODES`]).

mod render;
mod sse;

use std::collections::VecDeque;
use std::io::{IsTerminal as _, Read as _};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::api::{Api, refused};
use render::{Inputs, Render};
use sse::{Frame, Parser};

/// The exit codes, as `--help` shows them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0    the run succeeded (weft chat: the chat was ended with /exit or Ctrl-D)
  1    the run failed
  2    a usage error: a bad flag or URL, no token, no input
  3    the fleet could not be reached, or refused (unknown agent or run, bad token), or the
       stream was lost for a minute
  4    weft stopped following a run that goes on (--leave-running, or standard input ended
       while the run waited for input); `weft attach <run>` follows it again
  130  the run was cancelled (by Ctrl-C or by anyone else)";

const EXIT_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_FLEET: u8 = 3;
const EXIT_DETACHED: u8 = 4;
const EXIT_CANCELLED: u8 = 130;

/// After the stream has been quiet this long, weft asks whether the run waits for input.
const QUIET: Duration = Duration::from_millis(200);
/// A stream that cannot be opened again for this long is given up.
const GIVE_UP: Duration = Duration::from_secs(60);

/// The fleet to talk to and the token to act with.
#[derive(Args, Debug)]
pub struct Conn {
    /// The fleet's base URL (its gateway).
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    url: String,
    /// The `wft_` token to act with (scopes runs:create and runs:read).
    #[arg(long, env = "WEFT_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

/// `weft run`'s arguments.
#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES)]
pub struct RunArgs {
    /// The agent to run (its active version).
    agent: String,
    /// The task. When not given, it is read from standard input (which must not be a
    /// terminal then).
    input: Option<String>,
    #[command(flatten)]
    conn: Conn,
    /// On Ctrl-C, stop following and leave the run going (exit 4) instead of cancelling it.
    #[arg(long)]
    leave_running: bool,
}

/// `weft attach`'s arguments.
#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES)]
pub struct AttachArgs {
    /// The run's id (`weft run` prints it when it starts one).
    run: String,
    /// Replay from this seq instead of from the run's first event.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..))]
    from_seq: i64,
    #[command(flatten)]
    conn: Conn,
    /// On Ctrl-C, stop following and leave the run going (exit 4) instead of cancelling it.
    #[arg(long)]
    leave_running: bool,
}

/// `weft chat`'s arguments.
#[derive(Args, Debug)]
#[command(after_help = EXIT_CODES)]
pub struct ChatArgs {
    /// The agent to chat with (its active version).
    agent: String,
    /// A first message; without one the agent waits for the first line.
    input: Option<String>,
    #[command(flatten)]
    conn: Conn,
}

/// Which command follows the run: what it shows and how it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Run,
    Attach,
    Chat,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Attach => "attach",
            Self::Chat => "chat",
        }
    }
}

/// `weft run <agent> [input]`.
pub async fn start(a: &RunArgs) -> ExitCode {
    let input = match &a.input {
        Some(i) => i.clone(),
        None if std::io::stdin().is_terminal() => {
            return usage(
                "no input: give the task as an argument (`weft run <agent> \"…\"`) or pipe it on standard input",
            );
        }
        None => {
            let mut s = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut s) {
                return usage(&format!("cannot read the input from standard input: {e}"));
            }
            s
        }
    };
    if input.trim().is_empty() {
        return usage("the input is empty: give the agent a task");
    }
    let body = json!({"agent": a.agent, "input": input});
    begin(&a.conn, Mode::Run, &a.agent, body, a.leave_running).await
}

/// `weft chat <agent> [input]`.
pub async fn chat(a: &ChatArgs) -> ExitCode {
    let mut body = json!({"agent": a.agent, "interactive": true});
    if let Some(i) = a.input.as_ref().filter(|i| !i.trim().is_empty()) {
        body["input"] = json!(i);
    }
    begin(&a.conn, Mode::Chat, &a.agent, body, false).await
}

/// `weft attach <run>`.
pub async fn attach(a: &AttachArgs) -> ExitCode {
    let api = match connect(&a.conn) {
        Ok(api) => api,
        Err(code) => return code,
    };
    let interrupts = Interrupts::install();
    let mut s = Session::new(
        api,
        a.run.clone(),
        Mode::Attach,
        a.leave_running,
        interrupts,
    );
    s.follow.next_seq = a.from_seq;
    let from = if a.from_seq > 1 {
        format!(" from seq {}", a.from_seq)
    } else {
        String::new()
    };
    s.render.note(&format!("following run {}{from}", a.run));
    s.run().await
}

/// Starts a run with `body` and follows it. The run is created with `stream: true`, so its
/// stream is open from the start and no live text is missed.
async fn begin(conn: &Conn, mode: Mode, agent: &str, mut body: Value, leave: bool) -> ExitCode {
    let api = match connect(conn) {
        Ok(api) => api,
        Err(code) => return code,
    };
    // Ctrl-C is ours from here on: before the run exists it only stops weft.
    let mut interrupts = Interrupts::install();
    body["stream"] = json!(true);
    let created = tokio::select! {
        r = api.create_streaming(&body) => r,
        () = interrupts.next() => return ExitCode::from(EXIT_CANCELLED),
    };
    let resp = match created {
        Ok(resp) => resp,
        Err(Ok(r)) => {
            return fleet_error(&refused(
                &format!("cannot start a run of agent `{agent}`"),
                r.status,
                &r.body,
            ));
        }
        Err(Err(e)) => return fleet_error(&e),
    };
    let Some(run) = resp
        .headers()
        .get("x-weft-run-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return fleet_error(&format!(
            "the fleet at {} started a run without saying its id (no x-weft-run-id); is this weft as new as the fleet?",
            api.base
        ));
    };
    let mut s = Session::new(api, run.clone(), mode, leave, interrupts);
    s.follow.opened(resp);
    match mode {
        Mode::Chat => s.render.note(&format!(
            "chatting with {agent} in run {run}: /exit or Ctrl-D ends the chat, Ctrl-C cancels the run"
        )),
        Mode::Run | Mode::Attach => s.render.note(&format!(
            "run {run} of {agent} (`weft attach {run}` follows it again)"
        )),
    }
    s.run().await
}

/// The API client of `conn`, or the usage error that stops it.
fn connect(conn: &Conn) -> Result<Api, ExitCode> {
    let Some(token) = conn.token.as_deref().filter(|t| !t.trim().is_empty()) else {
        return Err(usage(
            "no token: set $WEFT_TOKEN or give --token (mint one with `weft token create`, or POST /v1/tokens)",
        ));
    };
    match reqwest::Url::parse(&conn.url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => {
            return Err(usage(&format!(
                "--url `{}` is not an http(s) URL; give the gateway's, e.g. http://127.0.0.1:8787",
                conn.url
            )));
        }
    }
    Api::new(&conn.url, token).map_err(|e| fleet_error(&e))
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("weft: {msg}");
    ExitCode::from(EXIT_USAGE)
}

fn fleet_error(msg: &str) -> ExitCode {
    eprintln!("weft: {msg}");
    ExitCode::from(EXIT_FLEET)
}

/// What the run waits for, as the fleet said last.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wait {
    /// Input (`POST …/input`).
    Input,
    /// The answer to interruption `id` (`POST …/interrupts/{id}`).
    Answer(String),
}

/// One wake-up of the session loop.
enum Wake {
    Stream(Result<Got, String>),
    Interrupt,
    Line(Option<Line>),
    Quiet,
}

/// One run followed from this terminal.
struct Session {
    api: Api,
    run: String,
    mode: Mode,
    /// Ctrl-C detaches instead of cancelling.
    leave: bool,
    render: Render<std::io::Stdout, std::io::Stderr>,
    follow: Follower,
    /// Lines of standard input (`None` for its end), when input is taken from it.
    lines: Option<mpsc::Receiver<Option<Line>>>,
    /// When the prompt on the screen was shown.
    prompted_at: Option<std::time::Instant>,
    /// Standard input is a terminal: prompts are shown.
    prompts: bool,
    interrupts: Interrupts,
    /// A Ctrl-C cancelled the run; weft waits for it to end.
    cancelling: bool,
    /// The run may be waiting for input: ask the fleet once the stream is quiet.
    check_wait: bool,
    waiting: Option<Wait>,
}

impl Session {
    fn new(api: Api, run: String, mode: Mode, leave: bool, interrupts: Interrupts) -> Self {
        let prompts = std::io::stdin().is_terminal();
        let lines = (prompts || mode == Mode::Chat).then(read_lines);
        let inputs = if mode == Mode::Attach {
            Inputs::Show
        } else {
            Inputs::Hide
        };
        Self {
            follow: Follower::new(run.clone()),
            api,
            run,
            mode,
            leave,
            render: Render::terminal(inputs),
            lines,
            prompted_at: None,
            prompts,
            interrupts,
            cancelling: false,
            check_wait: true,
            waiting: None,
        }
    }

    /// Follows the run until it ends, or the user or the fleet stops it.
    async fn run(mut self) -> ExitCode {
        loop {
            let take_line = self.waiting.is_some() && self.lines.is_some() && !self.cancelling;
            let wake = tokio::select! {
                r = self.follow.next(&self.api) => Wake::Stream(r),
                () = self.interrupts.next() => Wake::Interrupt,
                l = recv(&mut self.lines), if take_line => Wake::Line(l),
                () = tokio::time::sleep(QUIET), if self.check_wait && !self.cancelling => Wake::Quiet,
            };
            let done = match wake {
                Wake::Stream(Ok(Got::Frame(f))) => self.on_frame(&f),
                Wake::Stream(Ok(Got::Dropped)) => {
                    self.render.reattached();
                    self.render.note(&format!(
                        "the stream of run {} dropped; re-attaching from seq {}",
                        self.run, self.follow.next_seq
                    ));
                    None
                }
                Wake::Stream(Err(e)) => {
                    self.render.error(&e);
                    Some(ExitCode::from(EXIT_FLEET))
                }
                Wake::Interrupt => self.on_interrupt().await,
                Wake::Line(l) => self.on_line(l).await,
                Wake::Quiet => {
                    self.check_waiting().await;
                    None
                }
            };
            if let Some(code) = done {
                return code;
            }
        }
    }

    fn on_frame(&mut self, f: &Frame) -> Option<ExitCode> {
        let v: Value = serde_json::from_str(&f.data).unwrap_or(Value::Null);
        let kind = if f.event.is_empty() {
            v["kind"].as_str().unwrap_or_default()
        } else {
            f.event.as_str()
        };
        let data = &v["data"];
        self.render.event(kind, data);
        match kind {
            "text_delta" | "interruption" => {}
            "awaiting_input" => self.check_wait = true,
            "run_finished" => return Some(self.finished(data)),
            // Any other event: the run moved on, whatever it waited for is given.
            _ => self.waiting = None,
        }
        None
    }

    /// The run ended: say how, and exit with it.
    fn finished(&mut self, data: &Value) -> ExitCode {
        let status = data["status"].as_str().unwrap_or("ended");
        let reason = data["stop_reason"]
            .as_str()
            .filter(|r| *r != status)
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let msg = format!("run {} {status}{reason}", self.run);
        match status {
            "succeeded" => {
                self.render.note(&msg);
                ExitCode::SUCCESS
            }
            "cancelled" => {
                self.render.note(&msg);
                ExitCode::from(EXIT_CANCELLED)
            }
            _ => {
                self.render.error(&msg);
                ExitCode::from(EXIT_FAILED)
            }
        }
    }

    async fn on_interrupt(&mut self) -> Option<ExitCode> {
        if self.cancelling {
            self.render.note(&format!(
                "stopped waiting for run {} to end (`weft attach {}` follows it again)",
                self.run, self.run
            ));
            return Some(ExitCode::from(EXIT_CANCELLED));
        }
        if self.leave {
            self.render.note(&format!(
                "stopped following run {}; it goes on (`weft attach {}` follows it again)",
                self.run, self.run
            ));
            return Some(ExitCode::from(EXIT_DETACHED));
        }
        self.cancelling = true;
        self.waiting = None;
        self.render.note(&format!(
            "cancelling run {} (Ctrl-C again to stop waiting for it)",
            self.run
        ));
        let reason = format!("Ctrl-C in weft {}", self.mode.name());
        match cancel(&self.api, &self.run, &reason).await {
            Ok(()) => None,
            Err(e) => {
                // Keep following: the run may still end, and a second Ctrl-C leaves.
                self.render.error(&e);
                None
            }
        }
    }

    /// A line of standard input (`None`: it ended), taken while the run waits for input.
    async fn on_line(&mut self, line: Option<Line>) -> Option<ExitCode> {
        // A line typed before the prompt appeared was echoed by the terminal above it: show it
        // after the prompt too, so the prompt line reads as what was sent. A line typed at the
        // prompt ended the prompt line itself; the end of input did not (the next line weft
        // writes starts with a newline).
        let prompted_at = self.prompted_at.take();
        let Some(Line { text: line, at }) = line else {
            self.lines = None;
            if self.mode == Mode::Chat {
                return Some(self.end_chat().await);
            }
            self.render.note(&format!(
                "standard input ended while run {} waits for input; it goes on (`weft attach {}` from a terminal answers it)",
                self.run, self.run
            ));
            return Some(ExitCode::from(EXIT_DETACHED));
        };
        match prompted_at {
            Some(p) if at < p => self.render.prompt_echo(&line),
            Some(_) => self.render.prompt_answered(),
            None => {}
        }
        if self.mode == Mode::Chat && line.trim() == "/exit" {
            return Some(self.end_chat().await);
        }
        if line.trim().is_empty() {
            self.show_wait();
            return None;
        }
        let (path, body, what) = match self.waiting.take() {
            Some(Wait::Answer(id)) => (
                format!("/v1/runs/{}/interrupts/{id}", self.run),
                json!({ "answer": line }),
                "the answer",
            ),
            _ => (
                format!("/v1/runs/{}/input", self.run),
                json!({ "text": line }),
                "the input",
            ),
        };
        let sent = self
            .api
            .call(reqwest::Method::POST, &path, Some(body))
            .await;
        let failed = match sent {
            Ok((status, _)) if status < 300 => return None,
            Ok((status, body)) => refused(
                &format!("run {} did not take {what}", self.run),
                status,
                &body,
            ),
            Err(e) => e,
        };
        self.render.error(&format!("{failed}; type it again"));
        // Whatever the run waits for now, the fleet says.
        self.check_wait = true;
        None
    }

    /// `/exit` or the end of input in `weft chat`: the run is cancelled, the chat is over.
    async fn end_chat(&mut self) -> ExitCode {
        match cancel(&self.api, &self.run, "weft chat ended").await {
            Ok(()) => {
                self.render
                    .note(&format!("chat ended; run {} cancelled", self.run));
                ExitCode::SUCCESS
            }
            Err(e) => {
                self.render.error(&e);
                ExitCode::from(EXIT_FLEET)
            }
        }
    }

    /// Asks the fleet whether the run waits for input, and shows the prompt if it does.
    async fn check_waiting(&mut self) {
        self.check_wait = false;
        let Ok((200, run)) = self
            .api
            .call(
                reqwest::Method::GET,
                &format!("/v1/runs/{}", self.run),
                None,
            )
            .await
        else {
            // The stream says what happens next; a failed look only costs the prompt.
            return;
        };
        if run["status"] != "awaiting_input" {
            return;
        }
        self.waiting = Some(match run["pending_interrupt"]["id"].as_str() {
            Some(id) => Wait::Answer(id.to_owned()),
            None => Wait::Input,
        });
        self.show_wait();
    }

    /// Shows what the run waits for: a prompt, or, with no terminal to read from, how else to
    /// give it.
    fn show_wait(&mut self) {
        let Some(wait) = &self.waiting else {
            return;
        };
        let prompt = match (wait, self.lines.is_some()) {
            (Wait::Input, true) if self.prompts => "> ",
            (Wait::Answer(_), true) if self.prompts => "answer> ",
            (_, true) => return,
            (Wait::Input, false) => {
                return self.render.note(&format!(
                "run {} waits for input: `weft attach {}` from a terminal, or POST /v1/runs/{}/input {{\"text\": …}}",
                self.run, self.run, self.run
                ));
            }
            (Wait::Answer(id), false) => {
                return self.render.note(&format!(
                "run {} waits for an answer: `weft attach {}` from a terminal, or POST /v1/runs/{}/interrupts/{id} {{\"answer\": …}}",
                self.run, self.run, self.run
                ));
            }
        };
        self.render.prompt(prompt);
        self.prompted_at = Some(std::time::Instant::now());
    }
}

/// Cancels `run` (cancelling a run that already ended is no error).
async fn cancel(api: &Api, run: &str, reason: &str) -> Result<(), String> {
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/runs/{run}/cancel"),
            Some(json!({ "reason": reason })),
        )
        .await?;
    if status < 300 {
        Ok(())
    } else {
        Err(refused(&format!("cannot cancel run {run}"), status, &body))
    }
}

/// A line of standard input, without its line ending.
struct Line {
    text: String,
    /// When it was read (the user pressed Enter).
    at: std::time::Instant,
}

/// The next line of `lines`; never, without them.
async fn recv(lines: &mut Option<mpsc::Receiver<Option<Line>>>) -> Option<Line> {
    match lines {
        // A closed channel is the end of input too.
        Some(rx) => rx.recv().await.flatten(),
        None => std::future::pending().await,
    }
}

/// Lines of standard input, read by a thread of their own; `None` once it ends. The thread
/// reads ahead at most one line, so lines typed while the run works wait for it to ask.
fn read_lines() -> mpsc::Receiver<Option<Line>> {
    let (tx, rx) = mpsc::channel(1);
    // A read of standard input cannot be interrupted, so this thread has no way to stop but
    // the end of input or the process's exit, which does not wait for it. When it cannot be
    // started, the channel closes and input has ended.
    let _ = std::thread::Builder::new()
        .name("weft-stdin".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            let mut line = String::new();
            loop {
                line.clear();
                match stdin.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.blocking_send(None);
                        return;
                    }
                    Ok(_) => {
                        let line = Line {
                            text: line.trim_end_matches(['\n', '\r']).to_owned(),
                            at: std::time::Instant::now(),
                        };
                        if tx.blocking_send(Some(line)).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    rx
}

/// Ctrl-C (SIGINT), taken from the default action (which would kill weft) once installed.
struct Interrupts {
    #[cfg(unix)]
    sig: Option<tokio::signal::unix::Signal>,
}

impl Interrupts {
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self {
                sig: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// The next Ctrl-C (cancel-safe: one that arrives between calls is not lost).
    async fn next(&mut self) {
        #[cfg(unix)]
        match &mut self.sig {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// What the follower got.
enum Got {
    Frame(Frame),
    /// The connection dropped; the next call opens it again from `next_seq`.
    Dropped,
}

/// The run's event stream, opened again where it left off when it drops. Its state lives
/// here, not in the `next` future, so the future can be dropped (another branch of the
/// session's `select!` won) without losing a frame.
struct Follower {
    run: String,
    /// The seq to ask for when (re)connecting: the one after the last persisted event received.
    next_seq: i64,
    body: Option<BoxStream<'static, Result<Vec<u8>, reqwest::Error>>>,
    parser: Parser,
    queue: VecDeque<Frame>,
    /// When to try connecting again.
    retry_at: Option<Instant>,
    failures: u32,
    /// Since when no stream is open (`None` while one is).
    lost_since: Option<Instant>,
    connected_once: bool,
}

impl Follower {
    fn new(run: String) -> Self {
        Self {
            run,
            next_seq: 1,
            body: None,
            parser: Parser::default(),
            queue: VecDeque::new(),
            retry_at: None,
            failures: 0,
            lost_since: None,
            connected_once: false,
        }
    }

    /// Reads from the stream `resp` from here on.
    fn opened(&mut self, resp: reqwest::Response) {
        self.parser.reset();
        self.body = Some(resp.bytes_stream().map(|c| c.map(|b| b.to_vec())).boxed());
        self.connected_once = true;
    }

    async fn next(&mut self, api: &Api) -> Result<Got, String> {
        loop {
            if let Some(f) = self.queue.pop_front() {
                return Ok(Got::Frame(f));
            }
            let Some(body) = self.body.as_mut() else {
                if let Some(at) = self.retry_at {
                    tokio::time::sleep_until(at).await;
                    self.retry_at = None;
                }
                match api.stream(&self.run, self.next_seq).await {
                    Ok(resp) => self.opened(resp),
                    Err(Ok(r)) if r.status == 429 || r.status >= 500 => {
                        let why = refused(
                            &format!("cannot follow run {}", self.run),
                            r.status,
                            &r.body,
                        );
                        self.retry(r.retry_after, why)?;
                    }
                    Err(Ok(r)) => {
                        return Err(refused(
                            &format!("cannot follow run {}", self.run),
                            r.status,
                            &r.body,
                        ));
                    }
                    Err(Err(e)) if !self.connected_once => return Err(e),
                    Err(Err(e)) => self.retry(None, e)?,
                }
                continue;
            };
            match body.next().await {
                Some(Ok(chunk)) => {
                    let mut progress = false;
                    let mut failed = None;
                    for f in self.parser.push(&chunk) {
                        // A stream that fails on the fleet's side (not the run) ends with an
                        // `error` frame without a seq: a lost stream, followed again.
                        if f.event == "error" && f.id.is_none() {
                            let v: Value = serde_json::from_str(&f.data).unwrap_or(Value::Null);
                            failed = Some(
                                v["error"]["message"]
                                    .as_str()
                                    .unwrap_or("no reason given")
                                    .to_owned(),
                            );
                            continue;
                        }
                        // `text_delta` carries the seq of the event it follows; every other
                        // frame's seq is its own, and one already received is not shown twice.
                        if f.event != "text_delta"
                            && let Some(seq) = f.id
                        {
                            if seq < self.next_seq {
                                continue;
                            }
                            self.next_seq = seq + 1;
                        }
                        progress = true;
                        self.queue.push_back(f);
                    }
                    // Only progress resets the give-up clock: a fleet that answers every
                    // attempt with a failure (or with nothing new) is given up on after a while.
                    if progress {
                        self.failures = 0;
                        self.lost_since = None;
                    }
                    if let Some(why) = failed {
                        self.body = None;
                        self.retry(
                            None,
                            format!("the fleet's stream of run {} failed: {why}", self.run),
                        )?;
                    }
                }
                Some(Err(e)) => {
                    self.body = None;
                    self.retry(None, api.unreachable(&e))?;
                    return Ok(Got::Dropped);
                }
                None => {
                    self.body = None;
                    self.retry(None, format!("the fleet at {} closed the stream", api.base))?;
                    return Ok(Got::Dropped);
                }
            }
        }
    }

    /// Schedules the next attempt to connect, backing off; an error once the stream has been
    /// lost for [`GIVE_UP`].
    fn retry(&mut self, after: Option<Duration>, why: String) -> Result<(), String> {
        let now = Instant::now();
        let since = *self.lost_since.get_or_insert(now);
        if now.duration_since(since) >= GIVE_UP {
            return Err(format!(
                "{why}; gave up following run {} after {} s (`weft attach {} --from-seq {}` follows it again)",
                self.run,
                GIVE_UP.as_secs(),
                self.run,
                self.next_seq
            ));
        }
        let backoff = Duration::from_millis(250 << self.failures.min(4));
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Some(now + after.unwrap_or(backoff).min(Duration::from_secs(10)));
        Ok(())
    }
}
