//! One boot shape for every weft service: config → telemetry → signals → [`Service::connect`] →
//! [`Service::serve`] until SIGINT/SIGTERM → exit code (2 for a usage or config error, 1 for any
//! other, printed once on stderr as `<binary>: <message>`).

use std::future::Future;
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;
use weft_config::{CommonArgs, Config, Overrides};

/// Why a service did not start or stopped with an error.
#[derive(Debug)]
pub enum BootError {
    /// The config or the command line is wrong (exit 2): fixing them is the remedy.
    Config(String),
    /// Anything else (exit 1): a port taken, a peer unreachable, a failure while serving.
    Failed(String),
}

impl BootError {
    /// A config or usage error.
    pub fn config(msg: impl std::fmt::Display) -> Self {
        Self::Config(msg.to_string())
    }

    /// Any other failure.
    pub fn failed(msg: impl std::fmt::Display) -> Self {
        Self::Failed(msg.to_string())
    }

    fn exit(&self, name: &str) -> ExitCode {
        match self {
            Self::Config(msg) => {
                eprintln!("{name}: {msg}");
                ExitCode::from(2)
            }
            Self::Failed(msg) => {
                tracing::error!(error = %msg, "{name} failed");
                eprintln!("{name}: {msg}");
                ExitCode::from(1)
            }
        }
    }
}

/// A service process: connect (everything that can fail before serving), then serve.
pub trait Service: Sized {
    /// What the binary's flags give besides the config (`()` for most).
    type Args;

    /// Binds listeners, connects stores and peers; `shutdown` is already wired to the signals.
    fn connect(
        config: Config,
        args: Self::Args,
        shutdown: CancellationToken,
    ) -> impl Future<Output = Result<Self, BootError>>;

    /// Serves until `shutdown` is cancelled, then drains.
    fn serve(self, shutdown: CancellationToken) -> impl Future<Output = Result<(), BootError>>;
}

/// A service binary's `main` after parsing flags: load the config, start telemetry, [`run`].
pub async fn boot<S: Service>(
    name: &'static str,
    common: &CommonArgs,
    overrides: Overrides,
    args: S::Args,
) -> ExitCode {
    let (config, _guard) = match crate::start(name, common, overrides) {
        Ok(started) => started,
        Err(e) => return BootError::Config(e).exit(name),
    };
    run::<S>(name, config, args).await
}

/// Connects and serves `S` until SIGINT/SIGTERM, with config and telemetry already set up.
pub async fn run<S: Service>(name: &'static str, config: Config, args: S::Args) -> ExitCode {
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::shutdown_on_signal(shutdown.clone()));
    let service = match S::connect(config, args, shutdown.clone()).await {
        Ok(s) => s,
        Err(e) => return e.exit(name),
    };
    match service.serve(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.exit(name),
    }
}
