//! `upstream`: a fake OpenAI-compatible provider as a standalone process, so a benchmark can
//! measure weft against an upstream whose own cost is small and known, and the same upstream
//! directly. By default the testkit's fake, which answers instantly (it echoes the last user
//! message); with `--deltas` the paced upstream of [`crate::paced`], whose streams are
//! sequence-numbered deltas a fixed gap apart.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use weft_testkit::FakeUpstream;

use crate::cli::UpstreamArgs;
use crate::paced::{self, Pace};

pub async fn run(args: &UpstreamArgs) -> anyhow::Result<()> {
    if let Some(deltas) = args.deltas {
        let pace = Pace {
            deltas,
            gap: Duration::from_millis(args.gap_ms),
        };
        return run_paced(args, pace).await;
    }
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
        write_ready(path, &upstream.base_url, &upstream.addr.to_string())?;
    }
    shutdown_signal().await?;
    eprintln!("upstream: stopping after {} calls", upstream.calls());
    upstream.stop();
    Ok(())
}

async fn run_paced(args: &UpstreamArgs, pace: Pace) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("read the bound address")?;
    let base_url = format!("http://{addr}/v1");
    eprintln!(
        "upstream: serving {base_url}, paced: {} deltas {:?} apart unless a request's #pace line says otherwise",
        pace.deltas, pace.gap
    );
    let calls = Arc::new(AtomicU64::new(0));
    let server = paced::serve(listener, pace, calls.clone());
    if let Some(path) = &args.ready_file {
        write_ready(path, &base_url, &addr.to_string())?;
    }
    tokio::select! {
        never = server => match never {},
        r = shutdown_signal() => r?,
    }
    eprintln!(
        "upstream: stopping after {} calls",
        calls.load(Ordering::Relaxed)
    );
    Ok(())
}

pub(crate) fn write_ready(path: &Path, base_url: &str, addr: &str) -> anyhow::Result<()> {
    let doc = json!({"base_url": base_url, "addr": addr});
    // Write then rename, so a script polling for the file never reads half of it.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{doc}\n")).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("write {}", path.display()))
}

pub(crate) async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("install the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("wait for Ctrl-C"),
        _ = term.recv() => Ok(()),
    }
}
