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

mod api;
mod channels;
mod chat;
mod cli;
mod client;
mod compare;
mod cpu;
mod mcp;
mod mcp_server;
mod memory;
mod paced;
mod parked;
mod proxy;
mod report;
mod rss;
mod runs;
mod sse;
mod streams;
mod upstream;
mod webhooks;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use serde::Serialize;

use crate::cli::{Cli, Command};

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
            let report = runtime(args.threads, false)?.block_on(mcp::run(&args))?;
            emit(&report, args.out.as_deref())
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

/// One thread and no `multi_thread` wish gives a current-thread runtime: no work stealing, no
/// cross-thread wake-ups, the lightest generator for a small machine.
fn runtime(threads: u16, multi_thread: bool) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = if threads == 1 && !multi_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(usize::from(threads.max(1)));
        b
    };
    builder
        .enable_all()
        .build()
        .context("start the tokio runtime")
}

/// Prints `value` as pretty JSON on stdout and, when asked, writes the same to `out`.
pub(crate) fn emit<T: Serialize>(value: &T, out: Option<&Path>) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    print!("{text}");
    if let Some(path) = out {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        std::fs::write(path, &text).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
