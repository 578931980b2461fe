//! `weft`: the operator CLI — run the fleet, migrate, manage tokens, check the machine, test
//! processes, run agents and follow their runs. This file only parses and dispatches; each
//! subcommand lives in [`cmd`].

mod cmd;

weft_telemetry::global_allocator!();

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use weft_config::{CommonArgs, DatabaseFlags, FlagLayer, Overrides};

use cmd::hash::HashCmd;
use cmd::mcp::McpArgs;
use cmd::process::ProcessCmd;
use cmd::router::RouterArgs;
use cmd::run::{AttachArgs, ChatArgs, RunArgs};
use cmd::tenant::TenantCmd;
use cmd::token::TokenCmd;
use cmd::up::{ListenArgs, UpArgs};

#[derive(Parser, Debug)]
#[command(
    name = "weft",
    version,
    about = "weft: an OpenAI-compatible LLM gateway and agent runtime"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    cmd: Cmd,
}

/// The flags every subcommand takes; serializes as the config keys they set.
#[derive(Args, Serialize, Debug)]
struct Common {
    #[command(flatten)]
    #[serde(flatten)]
    shared: CommonArgs,
    #[command(flatten)]
    database: DatabaseFlags,
}

impl FlagLayer for Common {}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the whole fleet in one process on loopback (mock provider by default), apply
    /// migrations, and print the URL and the bootstrap admin token (the token itself only on the
    /// start that mints it; later starts print the file it is kept in).
    Up(UpArgs),
    /// Apply pending database migrations.
    Migrate,
    /// Manage API tokens directly in the database.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Export a tenant to an archive (a tar on standard output) or import one, directly in the
    /// database (docs/operations.md, "Tenant export and import").
    #[command(subcommand)]
    Tenant(TenantCmd),
    /// Check the config, Postgres, Redis, NATS and every port `weft up` binds (give the same
    /// flags as to `weft up`); exit 1 if any check fails. Changes nothing (never creates the
    /// database it checks).
    Doctor(ListenArgs),
    /// Run only a run executor, against the router and substrate at executor.router_url and
    /// executor.substrate_url (needs auth.internal_jwt_secret shared with them).
    Executor,
    /// Run only an ingress replica: the schedule ticker, and the webhook receiver on
    /// ingress.listen, against the substrate at ingress.substrate_url (needs
    /// auth.internal_jwt_secret shared with the fleet). Run several: each fire happens once.
    Ingress,
    /// Run only the provider router (gRPC on router.listen; needs auth.internal_jwt_secret
    /// shared with the gateway and executors).
    Router(RouterArgs),
    /// Print the content hash a deployment will report for a definition file.
    #[command(subcommand)]
    Hash(HashCmd),
    /// Serve weft's MCP tools on standard input/output for an MCP client that launches its
    /// servers (Claude Desktop, Claude Code), forwarding to the fleet at --upstream with the
    /// token in $WEFT_TOKEN.
    Mcp(McpArgs),
    /// Work with processes (plan-run recipes) on a running fleet, over its HTTP API.
    #[command(subcommand)]
    Process(ProcessCmd),
    /// Start a run of an agent on a fleet and stream it here: its text on standard output as
    /// it comes, tool calls folded to one line each on standard error. Ctrl-C cancels the run.
    /// The exit code says how the run ended.
    Run(RunArgs),
    /// Follow a run again: replay it from its first event (or --from-seq), then follow it live
    /// until it ends, as `weft run` shows it.
    Attach(AttachArgs),
    /// Chat with an agent in an interactive run: each line typed is sent when the agent waits
    /// for input; /exit or Ctrl-D ends the chat and cancels the run.
    Chat(ChatArgs),
    /// Pause a run (--run: it parks at its next step boundary), drain a tenant (--tenant: no new
    /// run is admitted and every running one parks) or put the fleet in maintenance (--fleet:
    /// every tenant drains, schedules hold, webhooks answer 503), over the fleet's HTTP API.
    Pause(cmd::pause::PauseArgs),
    /// Resume what `weft pause` paused: the runs it parked go on where they stopped.
    Resume(cmd::pause::TargetArgs),
    /// Where a run, a tenant's drain or the fleet's maintenance is.
    Status(cmd::pause::TargetArgs),
}

fn main() -> ExitCode {
    weft_telemetry::runtime::run("weft", program())
}

async fn program() -> ExitCode {
    let cli = Cli::parse();
    // The flag layer: typed flags, merged in this order on top of the environment.
    let mut o = Overrides::default();
    o.flags(&cli.common);
    // Subcommands that load no config (doctor loads its own, to report on it).
    match &cli.cmd {
        Cmd::Doctor(a) => {
            o.flags(a);
            return cmd::doctor::run(&cli.common.shared, o).await;
        }
        Cmd::Hash(h) => return cmd::hash::run(h),
        Cmd::Mcp(a) => return cmd::mcp::run(a).await,
        Cmd::Process(c) => return cmd::process::run(c).await,
        Cmd::Run(a) => return cmd::run::start(a).await,
        Cmd::Attach(a) => return cmd::run::attach(a).await,
        Cmd::Chat(a) => return cmd::run::chat(a).await,
        Cmd::Pause(a) => return cmd::pause::pause(a).await,
        Cmd::Resume(a) => return cmd::pause::resume(a).await,
        Cmd::Status(a) => return cmd::pause::status(a).await,
        Cmd::Up(a) => {
            o.flags(&a.listen);
        }
        Cmd::Router(a) => {
            o.flags(&a.listen);
        }
        Cmd::Migrate | Cmd::Token(_) | Cmd::Tenant(_) | Cmd::Executor | Cmd::Ingress => {}
    }
    let config = match cli.common.shared.load(o) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft: {e}");
            return ExitCode::from(2);
        }
    };
    let _guard = match weft_telemetry::init("weft", &config.telemetry) {
        Ok(g) => g,
        Err(e) => return cmd::fail(e),
    };
    match cli.cmd {
        Cmd::Up(a) => cmd::up::run(config, a).await,
        Cmd::Migrate => cmd::migrate::run(&config).await,
        Cmd::Token(t) => cmd::token::run(&config, t).await,
        Cmd::Tenant(t) => cmd::tenant::run(&config, t).await,
        Cmd::Executor => cmd::executor::run(config).await,
        Cmd::Ingress => {
            weft_telemetry::boot::run::<weft_ingress::IngressService>("weft", config, ()).await
        }
        Cmd::Router(_) => cmd::router::run(config).await,
        Cmd::Doctor(_)
        | Cmd::Hash(_)
        | Cmd::Mcp(_)
        | Cmd::Process(_)
        | Cmd::Run(_)
        | Cmd::Attach(_)
        | Cmd::Chat(_)
        | Cmd::Pause(_)
        | Cmd::Resume(_)
        | Cmd::Status(_) => ExitCode::SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
