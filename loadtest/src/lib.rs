//! The load generator as a library: every scenario of the `weft-loadtest` binary (see
//! `main.rs`), and what `weft-mcp-profile` (loadtest/mcp-profile) reuses of the `mcp` scenario
//! to run its in-process targets with the same closed loop and report.

pub mod api;
pub mod channels;
pub mod chat;
pub mod cli;
pub mod client;
pub mod compare;
pub mod cpu;
pub mod mcp;
pub mod mcp_server;
pub mod memory;
pub mod paced;
pub mod parked;
pub mod proxy;
pub mod report;
pub mod rss;
pub mod runs;
pub mod sse;
pub mod streams;
pub mod upstream;
pub mod webhooks;

use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;

/// One thread and no `multi_thread` wish gives a current-thread runtime: no work stealing, no
/// cross-thread wake-ups, the lightest generator for a small machine.
pub fn runtime(threads: u16, multi_thread: bool) -> anyhow::Result<tokio::runtime::Runtime> {
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
pub fn emit<T: Serialize>(value: &T, out: Option<&Path>) -> anyhow::Result<()> {
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
