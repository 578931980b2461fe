//! `upstream`: the testkit's fake OpenAI-compatible server as a standalone process, so a
//! benchmark can measure weft against an upstream that answers instantly (it echoes the last
//! user message) and the same upstream directly.

use std::path::Path;

use anyhow::Context as _;
use serde_json::json;
use weft_testkit::FakeUpstream;

use crate::cli::UpstreamArgs;

pub async fn run(args: &UpstreamArgs) -> anyhow::Result<()> {
    if args.listen.port() != 0 {
        // `FakeUpstream::start_on` panics when it cannot bind (it is test support); check first
        // so a busy port is an error message, not a panic.
        drop(
            std::net::TcpListener::bind(args.listen)
                .with_context(|| format!("cannot listen on {}", args.listen))?,
        );
    }
    let upstream = FakeUpstream::start_on(args.listen).await;
    eprintln!("upstream: serving {}", upstream.base_url);
    if let Some(path) = &args.ready_file {
        write_ready(path, &upstream)?;
    }
    shutdown_signal().await?;
    eprintln!("upstream: stopping after {} calls", upstream.calls());
    upstream.stop();
    Ok(())
}

fn write_ready(path: &Path, upstream: &FakeUpstream) -> anyhow::Result<()> {
    let doc = json!({"base_url": upstream.base_url, "addr": upstream.addr.to_string()});
    // Write then rename, so a script polling for the file never reads half of it.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{doc}\n")).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("write {}", path.display()))
}

async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("install the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("wait for Ctrl-C"),
        _ = term.recv() => Ok(()),
    }
}
