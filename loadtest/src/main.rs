//! `weft-loadtest`: weft's load generator. `upstream` serves a fake OpenAI-compatible
//! provider (instant, or paced streams with `--deltas`), `chat` drives a chat-completions
//! endpoint (weft or the upstream directly) and prints a JSON latency report, `streams` holds
//! many paced streams open and reports lost frames and inter-frame gaps, `compare` turns a
//! direct and a through-weft report into what weft adds. `runs` drives agent runs through
//! weft's runs API and `parked` measures what idle interactive runs cost; `memory` drives a
//! set/get/search mix over the memory routes; `channels` drives publishers and long-polling
//! readers on weft's channels. `mcp-server` serves a local MCP server with one `echo` tool and
//! `mcp` calls it directly or through weft's MCP bridge; `webhooks` delivers signed webhooks to
//! weft's receiver. `loadtest/bench.py` runs the whole benchmarks: it makes each scenario's
//! database, ports, config and fleet, runs this generator against it and tears it all down.

use std::process::ExitCode;

use clap::Parser as _;
use weft_loadtest::cli::{Cli, Command};
use weft_loadtest::{
    channels, chat, compare, emit, mcp, mcp_server, memory, parked, proxy, runs, runtime, streams,
    upstream, webhooks,
};

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft-loadtest: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Upstream(args) => runtime(args.threads, true)?.block_on(upstream::run(&args)),
        Command::Proxy(args) => runtime(args.threads, true)?.block_on(proxy::run(&args)),
        Command::Chat(args) => {
            let report = runtime(args.threads, false)?.block_on(chat::run(&args))?;
            emit(&report, args.out.as_deref())
        }
        Command::Streams(args) => {
            let report = runtime(args.threads, false)?.block_on(streams::run(&args))?;
            eprint!("{}", streams::summary(&report));
            emit(&report, args.out.as_deref())
        }
        Command::Compare(args) => compare::run(&args),
        Command::Runs(args) => {
            let report = runtime(args.weft.threads, false)?.block_on(runs::run(&args))?;
            emit(&report, args.weft.out.as_deref())
        }
        Command::Channels(args) => {
            let report = runtime(args.weft.threads, false)?.block_on(channels::run(&args))?;
            emit(&report, args.weft.out.as_deref())
        }
        Command::Parked(args) => {
            let report = runtime(args.weft.threads, false)?.block_on(parked::run(&args))?;
            emit(&report, args.weft.out.as_deref())
        }
        Command::McpServer(args) => runtime(args.threads, true)?.block_on(mcp_server::run(&args)),
        Command::Mcp(args) => {
            let report = runtime(args.load.threads, false)?.block_on(mcp::run(&args))?;
            emit(&report, args.load.out.as_deref())
        }
        Command::Memory(args) => {
            let report = runtime(args.weft.threads, false)?.block_on(memory::run(&args))?;
            emit(&report, args.weft.out.as_deref())
        }
        Command::Webhooks(args) => {
            let report = runtime(args.threads, false)?.block_on(webhooks::run(&args))?;
            emit(&report, args.out.as_deref())
        }
    }
}
