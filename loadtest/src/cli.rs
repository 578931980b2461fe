//! The command line: `upstream`, `chat`, `streams`, `compare`, `runs`, `parked`, `memory`,
//! `channels`, `mcp-server`, `mcp` and `webhooks`, and the small value parsers they share (durations such
//! as `10s`/`500ms`, positive rates).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// weft's load generator.
#[derive(Debug, Parser)]
#[command(name = "weft-loadtest", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the fake OpenAI-compatible upstream until Ctrl-C or SIGTERM.
    Upstream(UpstreamArgs),
    /// Run a bare reverse proxy to an upstream (axum serving, hyper's client calling, nothing
    /// else) until Ctrl-C or SIGTERM: the floor under weft's CPU per request on this machine.
    Proxy(ProxyArgs),
    /// Drive `POST {url}/chat/completions` and print a latency report as JSON.
    Chat(ChatArgs),
    /// Hold many concurrent streaming chat completions of sequence-numbered deltas open and
    /// report lost frames and the inter-frame gaps as JSON.
    Streams(StreamsArgs),
    /// Print what weft adds: `through - direct` at each percentile, of a `chat` or a `streams`
    /// pair of reports.
    Compare(CompareArgs),
    /// Drive agent runs (`POST /v1/runs`, then the run's stream) in a closed loop, cancelling
    /// every K-th, and print a JSON report.
    Runs(RunsArgs),
    /// Park many interactive runs and report the executor's memory before and after.
    Parked(ParkedArgs),
    /// Drive a set/get/search mix over weft's memory routes in a closed loop and print a JSON
    /// report.
    Memory(MemoryArgs),
    /// N publishers and M long-polling readers on channels: publish and delivery latency,
    /// ops/s, CPU per message.
    Channels(ChannelsArgs),
    /// Serve a local MCP server (streamable HTTP at `/mcp`) with one fast read-only tool,
    /// `echo {text}`, until Ctrl-C or SIGTERM.
    McpServer(McpServerArgs),
    /// Call the `echo` tool in a closed loop, on the MCP server directly or through weft's MCP
    /// bridge (gRPC `CallTool`, as the executor calls it), and print a JSON report.
    Mcp(McpArgs),
    /// Deliver GitHub-signed webhooks to weft's receiver (`POST /v1/_webhooks/{tenant}/{name}`)
    /// in a closed loop and print a JSON report: deliveries/s and latency of the 202s.
    Webhooks(WebhooksArgs),
}

/// What the `runs` and `parked` scenarios share: where weft is and what to watch.
#[derive(Clone, Debug, Args)]
pub struct WeftArgs {
    /// weft's base URL (a trailing `/v1` is accepted).
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    pub url: String,
    /// Bearer token sent as `Authorization: Bearer …` (prefer the env var: argv is visible to
    /// `ps`). Needs `runs:create` and `runs:read`.
    #[arg(long, env = "WEFT_LOADTEST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The executor's process id (under `weft up`, weft's): its `VmRSS`/`VmHWM` go into the
    /// report.
    #[arg(long)]
    pub executor_pid: Option<u32>,
    /// Tokio worker threads for the generator (1: a current-thread runtime, one core at most).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Also write the report here (parent directories are created).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    #[command(flatten)]
    pub weft: WeftArgs,
    /// The agent of the measured runs: a mock model and the `Context` tool.
    #[arg(long, default_value = "bench")]
    pub agent: String,
    /// The agent of the cancelled runs: a slow mock model, `Context`, and `max_iterations`
    /// above `--slow-turns`.
    #[arg(long, default_value = "bench-slow")]
    pub slow_agent: String,
    /// Closed loop: this many workers, each starting its next run when the last one finished.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub concurrency: u32,
    /// How long to measure, after the warm-up.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// Runs started before measuring starts, not recorded.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Every K-th run of a worker is a long run on `--slow-agent`, cancelled once a model call
    /// started; 0 cancels none.
    #[arg(long, default_value_t = 10)]
    pub cancel_every: u64,
    /// Model turns of the long run's script that call `Context` once each, before its reply.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=999))]
    pub slow_turns: u32,
    /// Words of the long run's reply: on a model that paces its tokens (`token_delay_ms`), the
    /// cancel lands while the reply streams.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub slow_words: u32,
    /// Deadline of one run, from `POST /v1/runs` to `run_finished`; a run still going then
    /// counts as a `<phase>:timeout` failure.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// Stop after this many measured runs even if the duration has not elapsed.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_runs: Option<u64>,
    /// Skip the runs sent before the load (one plain, one cancelled) to fail fast on a wrong
    /// URL, token or agent.
    #[arg(long)]
    pub no_preflight: bool,
}

#[derive(Clone, Debug, Args)]
pub struct ChannelsArgs {
    /// weft and the token (needs `tenant:admin` to create the channels, or channels made
    /// beforehand and `channels:publish` + `channels:read`).
    #[command(flatten)]
    pub weft: WeftArgs,
    /// Publishers, each publishing its share of `--rate`, one publish in flight at a time.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub publishers: u32,
    /// Long-polling readers, spread over the channels (at least one per channel).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub readers: u32,
    /// Channels `<prefix>-0` … (tenant scope; created if missing).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub channels: u32,
    /// The channel name prefix.
    #[arg(long, default_value = "bench")]
    pub prefix: String,
    /// Messages published per second, in total.
    #[arg(long, default_value_t = 1000.0, value_parser = parse_rate)]
    pub rate: f64,
    /// The readers' long-poll (`wait_ms`, at most 30000).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u32).range(0..=30_000))]
    pub wait_ms: u32,
    /// How long to measure, after the warm-up.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// Load applied before measuring starts, not recorded.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// The weft process (under `weft up`, weft's pid): its CPU time goes into the report.
    #[arg(long)]
    pub server_pid: Option<u32>,
}

#[derive(Debug, Args)]
pub struct MemoryArgs {
    #[command(flatten)]
    pub weft: WeftArgs,
    /// The memory scope the keys live in (the token needs `memory:read` and `memory:write` and
    /// must be allowed the scope id).
    #[arg(long, default_value = "tenant")]
    pub scope: String,
    /// The scope id (for `tenant`, the token's tenant).
    #[arg(long, default_value = "default")]
    pub scope_id: String,
    /// Closed loop: this many workers, each sending its next op when the last one finished.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub concurrency: u32,
    /// How long to measure, after the warm-up.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// Ops sent before measuring starts, not recorded.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Keys seeded before the load and used by gets and sets.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub keys: u64,
    /// Seeded keys written with `embed: true` (the search candidates).
    #[arg(long, default_value_t = 100)]
    pub embedded: u64,
    /// Bytes of text in a set's value.
    #[arg(long, default_value_t = 100)]
    pub value_bytes: usize,
    /// Percent of ops that are sets.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=100))]
    pub set_pct: u64,
    /// Percent of ops that are searches.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=100))]
    pub search_pct: u64,
}

#[derive(Debug, Args)]
pub struct WebhooksArgs {
    /// weft's base URL (a trailing `/v1` is accepted).
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    pub url: String,
    /// The tenant in the receiver's path (`default` for the admin's tenant under `weft up`).
    #[arg(long, default_value = "default")]
    pub tenant: String,
    /// The webhook definition's name; it must use `"signature": "github"`.
    #[arg(long, default_value = "bench-run")]
    pub webhook: String,
    /// The signing secret: the value of the env var the definition's `secret_env` names on
    /// weft's side (prefer the env var: argv is visible to `ps`).
    #[arg(long, env = "WEFT_LOADTEST_WEBHOOK_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// Closed loop: this many workers, each sending its next delivery when the last one was
    /// answered.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub concurrency: u32,
    /// How long to measure, after the warm-up.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// Deliveries sent before measuring starts, not recorded.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Deadline of one delivery; one still unanswered then counts as a `timeout` failure.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// Tokio worker threads for the generator (1: a current-thread runtime, one core at most).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Also write the report here (parent directories are created).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the single delivery sent before the load to fail fast on a wrong URL, webhook or
    /// secret.
    #[arg(long)]
    pub no_preflight: bool,
}

#[derive(Debug, Args)]
pub struct McpServerArgs {
    /// Address to listen on; port 0 picks a free port (see `--ready-file`).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Tokio worker threads (a multi-thread runtime).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Once serving, write `{"url": "http://…/mcp", "addr": "…"}` here.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
}

/// Where the `mcp` scenario sends its calls. The profiling targets that link the bridge into
/// the generator (`pool`, `bridge-in-process`) are `weft-mcp-profile`'s (loadtest/mcp-profile):
/// this generator only talks to a running fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum McpTarget {
    /// The MCP server itself: one rmcp client session per worker.
    Direct,
    /// weft's MCP bridge: `weft.v1.McpBridge/CallTool` over gRPC with an internal JWT.
    Bridge,
    /// Profiling: `CallTool` to the bridge with arguments that are not a JSON object, which it
    /// refuses after the JWT check and the definition lookup, before the pool: the gRPC hop and
    /// the bridge's front half, no MCP call.
    BridgeHop,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// `direct`: an MCP session per worker to `--url`; `bridge`: gRPC `CallTool` to
    /// `--bridge-url` for the server definition `--server`.
    #[arg(long, value_enum)]
    pub target: McpTarget,
    /// The MCP server's streamable HTTP endpoint (`--target direct`), e.g.
    /// `http://127.0.0.1:8791/mcp`.
    #[arg(long, required_if_eq("target", "direct"))]
    pub url: Option<String>,
    /// The bridge's gRPC URL (`--target bridge`), e.g. `http://127.0.0.1:8790`.
    #[arg(long, required_if_eq_any([("target", "bridge"), ("target", "bridge-hop")]))]
    pub bridge_url: Option<String>,
    #[command(flatten)]
    pub caller: McpCallerArgs,
    #[command(flatten)]
    pub load: McpLoadArgs,
}

/// Who the bridge calls are made as (`--target bridge`, `bridge-hop`; and `weft-mcp-profile`'s
/// `bridge-in-process`).
#[derive(Clone, Debug, Args)]
pub struct McpCallerArgs {
    /// The MCP server definition's name in `--tenant` (`--target bridge`).
    #[arg(long, default_value = "bench")]
    pub server: String,
    /// The fleet's `auth.internal_jwt_secret`, to sign the internal JWT (prefer the env var:
    /// argv is visible to `ps`).
    #[arg(long, env = "WEFT_LOADTEST_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// The tenant the internal JWT names (the definition is looked up there).
    #[arg(long, default_value = "default")]
    pub tenant: String,
    /// The subject the internal JWT names (a run's creator, for the executor).
    #[arg(long, default_value = "weft-loadtest")]
    pub subject: String,
}

/// The closed loop of the `mcp` scenario, whatever the target.
#[derive(Clone, Debug, Args)]
pub struct McpLoadArgs {
    /// Closed loop: this many workers, each making its next call when the last one finished.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,
    /// How long to measure, after the warm-up.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// Calls made before measuring starts, not recorded.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// The text sent to `echo` (each call appends ` <worker>:<n>` and checks it comes back).
    #[arg(long, default_value = "hello from the load generator")]
    pub text: String,
    /// Deadline of one call; a call still running then counts as a `timeout` error.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// Tokio worker threads for the generator (1: a current-thread runtime, one core at most).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Also write the report here (parent directories are created).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the single call made before the load to fail fast on a wrong URL, server name or
    /// secret.
    #[arg(long)]
    pub no_preflight: bool,
}

#[derive(Debug, Args)]
pub struct ParkedArgs {
    #[command(flatten)]
    pub weft: WeftArgs,
    /// The agent of the interactive runs.
    #[arg(long, default_value = "bench")]
    pub agent: String,
    /// How many interactive runs to park.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub count: u32,
    /// Create requests in flight at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub in_flight: u32,
    /// The first user message of each run.
    #[arg(long, default_value = "hi")]
    pub input: String,
    /// Give up waiting for the runs to park after this long (from the last create).
    #[arg(long, default_value = "120s", value_parser = parse_positive_duration)]
    pub park_timeout: Duration,
    /// How often to list the parked runs while waiting.
    #[arg(long, default_value = "500ms", value_parser = parse_positive_duration)]
    pub poll_interval: Duration,
    /// Wait this long after all parked before the last memory reading.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub settle: Duration,
    /// Deadline of one request.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// Leave the runs parked at the end instead of cancelling them.
    #[arg(long)]
    pub keep_parked: bool,
}

#[derive(Debug, Args)]
pub struct UpstreamArgs {
    /// Address to listen on; port 0 picks a free port (see `--ready-file`).
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,
    /// Tokio worker threads (a multi-thread runtime). One leaves the other cores to weft and the
    /// generator on a small machine.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Once serving, write `{"base_url": "...", "addr": "..."}` here.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// Serve the paced upstream instead of the testkit's echo: every streamed completion is this
    /// many content deltas, the k-th carrying `k` (from 0) as its text, `--gap-ms` apart. A
    /// request can choose its own with a `#pace {"deltas": N, "gap_ms": D}` line in its last
    /// user message.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_DELTAS))]
    pub deltas: Option<u32>,
    /// The paced upstream's default time between two deltas of one stream, in milliseconds.
    #[arg(long, default_value_t = 20, requires = "deltas", value_parser = clap::value_parser!(u64).range(0..=MAX_GAP_MS))]
    pub gap_ms: u64,
}

#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Address to listen on; port 0 picks a free port (see `--ready-file`).
    #[arg(long, default_value = "127.0.0.1:8091")]
    pub listen: SocketAddr,
    /// Where requests go: the upstream's origin (`http://host:port`; the path is the request's).
    #[arg(long)]
    pub upstream: String,
    /// Tokio worker threads (a multi-thread runtime), as many as weft's on a 2-core machine.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Once serving, write `{"base_url": "...", "addr": "..."}` here.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
}

/// Most deltas one paced stream may have.
pub const MAX_DELTAS: i64 = 100_000;
/// Longest gap between two paced deltas, in milliseconds.
pub const MAX_GAP_MS: u64 = 60_000;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("length").args(["rounds", "duration"])))]
pub struct StreamsArgs {
    /// Base URL including `/v1`: the paced upstream directly, or weft.
    #[arg(long)]
    pub url: String,
    /// Bearer token sent as `Authorization: Bearer …` (prefer the env var: argv is visible to
    /// `ps`).
    #[arg(long, env = "WEFT_LOADTEST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Model name in the request body.
    #[arg(long, default_value = "bench")]
    pub model: String,
    /// Streams open at once: this many workers, each opening its next stream when the last one
    /// ended.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub concurrency: u32,
    /// Content deltas per stream (asked of the upstream with a `#pace` line).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=MAX_DELTAS))]
    pub deltas: u32,
    /// Time between two deltas of one stream at the upstream, in milliseconds.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=MAX_GAP_MS))]
    pub gap_ms: u64,
    /// Measured streams per worker, after the warm-up ones (the default: 3).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub rounds: Option<u32>,
    /// Instead of `--rounds`: each worker opens measured streams until this long after its
    /// warm-up; streams open at the end run to their end.
    #[arg(long, value_parser = parse_positive_duration)]
    pub duration: Option<Duration>,
    /// Streams per worker before measuring (connections, pools, allocators), not recorded.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1_000))]
    pub warmup_rounds: u32,
    /// The workers' first streams start spread evenly over this long, so the requests and the
    /// deltas of different streams do not all fall on the same instants; default one stream's
    /// length (`deltas × gap`).
    #[arg(long, value_parser = parse_duration)]
    pub ramp: Option<Duration>,
    /// Deadline of one stream; default `deltas × gap + 30s`. A stream still open then counts as
    /// a `timeout` failure.
    #[arg(long, value_parser = parse_positive_duration)]
    pub timeout: Option<Duration>,
    /// Tokio worker threads for the generator (1: a current-thread runtime, one core at most).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Also write the report here (parent directories are created).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the short stream sent before the load to fail fast on a wrong URL, model or token,
    /// or an upstream that does not pace.
    #[arg(long)]
    pub no_preflight: bool,
    /// The process(es) being measured (under `weft up`, weft's pid; split, the gateway's and the
    /// router's): their CPU time (user + system, from `/proc/<pid>/stat`) over the whole run (warm-up rounds too)
    /// goes into the report, per frame forwarded, next to their memory. Repeat for several.
    #[arg(long = "server-pid")]
    pub server_pids: Vec<u32>,
    /// An extra header on every request, `Name: value` (a peer gateway's routing headers).
    /// Repeat for several.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("load").required(true).args(["concurrency", "rate"])))]
pub struct ChatArgs {
    /// Base URL including `/v1`, e.g. `http://127.0.0.1:8080/v1`.
    #[arg(long)]
    pub url: String,
    /// Bearer token sent as `Authorization: Bearer …` (prefer the env var: argv is visible to `ps`).
    #[arg(long, env = "WEFT_LOADTEST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Model name in the request body.
    #[arg(long, default_value = "bench")]
    pub model: String,
    /// Closed loop: this many workers, each sending its next request when the last one finished.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub concurrency: Option<u32>,
    /// Open loop: requests arrive at this many per second whatever the latency.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// How long to measure, after the warm-up (`10s`, `500ms`, `2m`).
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// Load applied before measuring starts, not recorded (connections, caches, JIT-free but
    /// allocator and pool warm-up still matter).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Ask for an SSE stream (`stream: true`, `stream_options.include_usage`).
    #[arg(long)]
    pub stream: bool,
    /// The door: `chat` (`POST {url}/chat/completions`), `responses` (`POST {url}/responses`,
    /// OpenAI's Responses API, with `store: false`; a stream must end in `response.completed`)
    /// or `responses-stored` (the same with `store: true`, OpenAI's default: one insert each).
    #[arg(long, value_enum, default_value_t = crate::client::Door::Chat)]
    pub door: crate::client::Door,
    /// The user message.
    #[arg(
        long,
        default_value = "Say hello to the load generator in a few words."
    )]
    pub prompt: String,
    /// Stop after this many measured requests even if the duration has not elapsed.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_requests: Option<u64>,
    /// Open loop only: at most this many requests in flight; arrivals beyond it are dropped and
    /// counted as `dropped` errors.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_in_flight: u32,
    /// Per-request deadline; a request still running then counts as a `timeout` error.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// Tokio worker threads for the generator. 1 (the default) runs a current-thread runtime so
    /// the generator takes one core and leaves the rest to what it measures.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Also write the report here (parent directories are created).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the single request sent before the run to fail fast on a wrong URL, model or token.
    #[arg(long)]
    pub no_preflight: bool,
    /// The process(es) being measured (under `weft up`, weft's pid; split, the gateway's and the
    /// router's): their CPU time (user + system, from `/proc/<pid>/stat`) over the measured part
    /// goes into the report, per request, next to their memory. Repeat for several.
    #[arg(long = "server-pid")]
    pub server_pids: Vec<u32>,
    /// An extra header on every request, `Name: value` (a peer gateway's routing headers, e.g.
    /// `x-portkey-provider: openai`). Repeat for several.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Report of the run against the upstream directly (`chat` or `streams`).
    #[arg(long)]
    pub direct: PathBuf,
    /// Report of the same run through weft.
    #[arg(long)]
    pub through: PathBuf,
    /// Also write the comparison here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Parses `10s`, `1.5s`, `500ms`, `250us`, `2m`, `1h`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a duration; write e.g. `10s`, `500ms` or `2m`"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown duration unit `{other}` in `{s}`; use us, ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("`{s}` is not a valid duration: {e}"))
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("the duration must be greater than zero, got `{s}`"));
    }
    Ok(d)
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let r: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a rate; write requests per second, e.g. `1000`"))?;
    if !(r.is_finite() && r > 0.0 && r <= 10_000_000.0) {
        return Err(format!(
            "the rate must be between 0 and 10000000 requests per second, got `{s}`"
        ));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("weft-loadtest").chain(args.iter().copied()))
    }

    #[test]
    fn durations_accept_common_units() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_positive_duration("0s").is_err());
    }

    #[test]
    fn chat_needs_exactly_one_load_shape() {
        assert!(parse(&["chat", "--url", "http://x/v1"]).is_err());
        assert!(
            parse(&[
                "chat",
                "--url",
                "http://x/v1",
                "--concurrency",
                "2",
                "--rate",
                "10"
            ])
            .is_err()
        );
        assert!(parse(&["chat", "--url", "http://x/v1", "--concurrency", "0"]).is_err());
        assert!(parse(&["chat", "--url", "http://x/v1", "--rate", "0"]).is_err());
        assert!(parse(&["chat", "--url", "http://x/v1", "--rate", "-5"]).is_err());
    }

    #[test]
    fn chat_defaults_and_flags() {
        let cli = parse(&[
            "chat",
            "--url",
            "http://127.0.0.1:1/v1",
            "--rate",
            "2500",
            "--duration",
            "3s",
            "--warmup",
            "0s",
            "--stream",
            "--max-requests",
            "100",
            "--threads",
            "2",
        ])
        .unwrap();
        let Command::Chat(a) = cli.command else {
            panic!("expected chat");
        };
        assert_eq!(a.rate, Some(2500.0));
        assert_eq!(a.concurrency, None);
        assert_eq!(a.duration, Duration::from_secs(3));
        assert_eq!(a.warmup, Duration::ZERO);
        assert!(a.stream);
        assert_eq!(a.max_requests, Some(100));
        assert_eq!(a.threads, 2);
        assert_eq!(a.model, "bench");
        assert_eq!(a.max_in_flight, 512);

        let cli = parse(&["chat", "--url", "http://h/v1", "--concurrency", "64"]).unwrap();
        let Command::Chat(a) = cli.command else {
            panic!("expected chat");
        };
        assert_eq!(a.concurrency, Some(64));
        assert_eq!(a.duration, Duration::from_secs(10));
        assert_eq!(a.warmup, Duration::from_secs(2));
        assert_eq!(a.threads, 1);
        assert!(!a.stream);
    }

    #[test]
    fn runs_and_parked_defaults() {
        let Command::Runs(a) = parse(&["runs"]).unwrap().command else {
            panic!("expected runs");
        };
        assert_eq!(a.weft.url, "http://127.0.0.1:8787");
        assert_eq!(a.agent, "bench");
        assert_eq!(a.slow_agent, "bench-slow");
        assert_eq!(a.concurrency, 16);
        assert_eq!(a.cancel_every, 10);
        assert_eq!((a.slow_turns, a.slow_words), (0, 100));
        assert_eq!(a.weft.executor_pid, None);
        assert!(parse(&["runs", "--concurrency", "0"]).is_err());
        let Command::Runs(a) = parse(&[
            "runs",
            "--url",
            "http://h:1/v1",
            "--concurrency",
            "64",
            "--cancel-every",
            "0",
            "--executor-pid",
            "42",
            "--duration",
            "5s",
        ])
        .unwrap()
        .command
        else {
            panic!("expected runs");
        };
        assert_eq!(a.concurrency, 64);
        assert_eq!(a.cancel_every, 0);
        assert_eq!(a.weft.executor_pid, Some(42));
        assert_eq!(a.duration, Duration::from_secs(5));

        let Command::Parked(p) = parse(&["parked", "--count", "500"]).unwrap().command else {
            panic!("expected parked");
        };
        assert_eq!(p.count, 500);
        assert_eq!(p.in_flight, 64);
        assert_eq!(p.input, "hi");
        assert!(!p.keep_parked);
        assert!(parse(&["parked", "--count", "0"]).is_err());
    }

    #[test]
    fn upstream_and_compare_parse() {
        let cli = parse(&["upstream", "--listen", "127.0.0.1:0"]).unwrap();
        let Command::Upstream(a) = cli.command else {
            panic!("expected upstream");
        };
        assert_eq!(a.listen.port(), 0);
        assert_eq!(a.deltas, None);
        assert!(
            parse(&["upstream", "--gap-ms", "5"]).is_err(),
            "--gap-ms needs --deltas"
        );
        let Command::Upstream(a) = parse(&["upstream", "--deltas", "64", "--gap-ms", "5"])
            .unwrap()
            .command
        else {
            panic!("expected upstream");
        };
        assert_eq!((a.deltas, a.gap_ms), (Some(64), 5));
        assert!(parse(&["upstream", "--deltas", "0"]).is_err());
        assert!(parse(&["compare", "--direct", "a.json"]).is_err());
        assert!(parse(&["compare", "--direct", "a.json", "--through", "b.json"]).is_ok());
    }

    #[test]
    fn streams_defaults_and_exclusive_lengths() {
        let Command::Streams(a) = parse(&["streams", "--url", "http://h:1/v1"])
            .unwrap()
            .command
        else {
            panic!("expected streams");
        };
        assert_eq!((a.concurrency, a.deltas, a.gap_ms), (512, 64, 20));
        assert_eq!((a.rounds, a.duration, a.warmup_rounds), (None, None, 1));
        assert_eq!((a.ramp, a.timeout, a.threads), (None, None, 1));
        let Command::Streams(a) = parse(&[
            "streams",
            "--url",
            "http://h:1/v1",
            "--duration",
            "20s",
            "--ramp",
            "0s",
        ])
        .unwrap()
        .command
        else {
            panic!("expected streams");
        };
        assert_eq!(a.duration, Some(Duration::from_secs(20)));
        assert_eq!(a.ramp, Some(Duration::ZERO));
        assert!(
            parse(&["streams", "--url", "u", "--rounds", "2", "--duration", "5s"]).is_err(),
            "rounds and duration exclude each other"
        );
        assert!(parse(&["streams", "--url", "u", "--deltas", "0"]).is_err());
        assert!(parse(&["streams", "--url", "u", "--rounds", "0"]).is_err());
    }

    #[test]
    fn webhooks_defaults() {
        let Command::Webhooks(a) = parse(&["webhooks", "--secret", "s"]).unwrap().command else {
            panic!("expected webhooks");
        };
        assert_eq!(
            (a.tenant.as_str(), a.webhook.as_str()),
            ("default", "bench-run")
        );
        assert_eq!(a.concurrency, 16);
        assert_eq!(a.duration, Duration::from_secs(10));
        assert_eq!(a.warmup, Duration::from_secs(2));
        assert_eq!(a.secret.as_deref(), Some("s"));
        assert!(parse(&["webhooks", "--concurrency", "0"]).is_err());
    }

    #[test]
    fn mcp_targets_need_their_addresses() {
        assert!(parse(&["mcp", "--target", "direct"]).is_err());
        assert!(parse(&["mcp", "--target", "bridge", "--url", "http://h/mcp"]).is_err());
        // In-process profiling lives in weft-mcp-profile.
        assert!(parse(&["mcp", "--target", "pool", "--url", "http://h/mcp"]).is_err());
        assert!(parse(&["mcp", "--target", "bridge-hop", "--url", "http://h/mcp"]).is_err());
        let Command::Mcp(a) = parse(&["mcp", "--target", "direct", "--url", "http://h/mcp"])
            .unwrap()
            .command
        else {
            panic!("expected mcp");
        };
        assert_eq!(a.target, McpTarget::Direct);
        assert_eq!(a.load.concurrency, 1);
        assert_eq!(a.load.duration, Duration::from_secs(10));
        assert_eq!(a.load.warmup, Duration::from_secs(2));
        assert_eq!(a.caller.tenant, "default");
        assert_eq!(a.caller.server, "bench");
        let Command::Mcp(a) = parse(&[
            "mcp",
            "--target",
            "bridge",
            "--bridge-url",
            "http://127.0.0.1:1",
            "--server",
            "s",
            "--jwt-secret",
            "x",
            "--concurrency",
            "8",
        ])
        .unwrap()
        .command
        else {
            panic!("expected mcp");
        };
        assert_eq!(a.target, McpTarget::Bridge);
        assert_eq!(a.load.concurrency, 8);
        assert_eq!(a.caller.jwt_secret.as_deref(), Some("x"));
    }
}
