//! `weft-fake-upstream`: every provider kind's recorded fixtures served at once, for black-box
//! tests that point weft at fake upstreams.
//!
//! ```text
//! weft-fake-upstream --fixtures services/router/tests/fixtures --listen 127.0.0.1:0
//! ```
//!
//! Prints `listening on http://ADDR` as its first stdout line. Each kind lives under its own
//! prefix, so providers are configured with `base_url` `http://ADDR/openai/v1`,
//! `http://ADDR/anthropic`, `http://ADDR/gemini/v1beta`, `http://ADDR/deepseek` and
//! `http://ADDR/ollama`. Answers are chosen from each request (auto mode, see
//! `weft_testkit::fixtures`). Stops on SIGTERM or SIGINT.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: weft-fake-upstream --fixtures <dir holding openai/, anthropic/, …> [--listen 127.0.0.1:0]";

fn parse_args() -> Result<(PathBuf, String), String> {
    let mut fixtures = None;
    let mut listen = "127.0.0.1:0".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
            None => (arg, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))
        };
        match flag.as_str() {
            "--fixtures" => fixtures = Some(PathBuf::from(value()?)),
            "--listen" => listen = value()?,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`; {USAGE}")),
        }
    }
    let fixtures = fixtures.ok_or_else(|| format!("--fixtures is required; {USAGE}"))?;
    if !fixtures.is_dir() {
        return Err(format!(
            "--fixtures {} is not a directory; pass the directory holding openai/, anthropic/, …",
            fixtures.display()
        ));
    }
    Ok((fixtures, listen))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let (fixtures, listen) = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("weft-fake-upstream: {e}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("weft-fake-upstream: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("weft-fake-upstream: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    if writeln!(out, "listening on http://{addr}")
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    drop(out);
    for kind in weft_testkit::Kind::ALL {
        if !fixtures.join(kind.name()).is_dir() {
            eprintln!(
                "weft-fake-upstream: no fixtures for {} in {}; its requests will fail",
                kind.name(),
                fixtures.display()
            );
        }
    }
    weft_testkit::fixtures::serve_all(listener, &fixtures, shutdown_signal()).await;
    ExitCode::SUCCESS
}
