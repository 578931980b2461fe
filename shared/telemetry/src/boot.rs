//! One boot shape for every weft service: config → telemetry → signals → bind the listeners →
//! [`Service::connect`] (retried with backoff while a dependency is down) → [`Service::serve`]
//! until SIGINT/SIGTERM → exit code (2 for a usage or config error, 1 for any other, printed
//! once on stderr as `<binary>: <message>`).
//!
//! While a service waits for Postgres, Redis or NATS, its listeners are already bound and answer
//! health only: `/healthz` 200 and `/readyz` 503 naming what is down on an HTTP port, the gRPC
//! health service NOT_SERVING on a gRPC port ([`crate::health`]). A SIGTERM ends the wait with a
//! clean exit; a config error still exits 2 at once.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use weft_config::{CommonArgs, Config, Overrides};

use crate::health::{Dependency, Readiness};

/// The first wait between two connection attempts; it doubles up to [`RETRY_CAP`].
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two attempts: a service is ready within about this long (plus one
/// attempt) of its last dependency coming back.
pub const RETRY_CAP: Duration = Duration::from_secs(1);

/// What a request other than health gets while the service waits for its dependencies.
const NOT_YET: &str =
    "the service is starting: it waits for a dependency (GET /readyz names it); retry shortly";

/// [`NOT_YET`] in the error shape of weft's HTTP API.
const NOT_YET_JSON: &str = r#"{"error":{"message":"the service is starting: it waits for a dependency (GET /readyz names it); retry shortly","type":"unavailable","code":"unavailable"}}"#;

/// How long the health-only servers of the wait may take to close their connections.
const WAIT_SERVER_CLOSE: Duration = Duration::from_secs(2);

/// Why a service did not start or stopped with an error.
#[derive(Debug)]
pub enum BootError {
    /// The config or the command line is wrong (exit 2): fixing them is the remedy.
    Config(String),
    /// Anything else (exit 1): a port taken, a failure while serving. Returned by
    /// [`Service::connect`], it means "not yet" (a dependency is down): the connection is
    /// retried.
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

/// What a listening port serves, so the wait can answer health on it in the right protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Face {
    /// HTTP: `/healthz` and `/readyz` while waiting.
    Http,
    /// gRPC: `grpc.health.v1.Health` while waiting, NOT_SERVING for `""` and the service's
    /// [`Service::GRPC_SERVICES`].
    Grpc,
}

/// What [`Service::connect`] gets besides the config: the shutdown token (already wired to the
/// signals), the process's readiness, and the listeners bound before it.
pub struct Boot {
    pub shutdown: CancellationToken,
    pub health: Readiness,
    bound: HashMap<SocketAddr, std::net::TcpListener>,
}

impl Boot {
    /// A context with nothing bound and the readiness of `deps` (for a service started without
    /// [`run`], e.g. in a test).
    pub fn new(config: &Config, deps: &[Dependency], shutdown: CancellationToken) -> Self {
        Self {
            health: Readiness::for_config(config, deps, shutdown.clone()),
            shutdown,
            bound: HashMap::new(),
        }
    }

    /// The listener on `addr`: the one bound before connecting when `addr` is one of
    /// [`Service::ports`] (the same socket, so nothing is refused in between), else a new one.
    pub async fn listen(&self, addr: SocketAddr) -> Result<tokio::net::TcpListener, BootError> {
        let cannot = |e: std::io::Error| BootError::failed(format!("cannot listen on {addr}: {e}"));
        match self.bound.get(&addr) {
            Some(l) => {
                let l = l.try_clone().map_err(cannot)?;
                l.set_nonblocking(true).map_err(cannot)?;
                tokio::net::TcpListener::from_std(l).map_err(cannot)
            }
            None => tokio::net::TcpListener::bind(addr).await.map_err(cannot),
        }
    }
}

/// A service process: connect (everything that can fail before serving), then serve.
pub trait Service: Sized {
    /// What the binary's flags give besides the config (`()` for most).
    type Args: Clone;

    /// What it needs answering before it can serve; each is a check of its readiness.
    const DEPENDENCIES: &'static [Dependency] = &[];

    /// The gRPC services its gRPC port serves (full names), reported by the health service.
    const GRPC_SERVICES: &'static [&'static str] = &[];

    /// The ports it listens on, bound before [`Service::connect`] and answering health while
    /// it waits; `connect` takes each with [`Boot::listen`].
    fn ports(_config: &Config, _args: &Self::Args) -> Vec<(SocketAddr, Face)> {
        Vec::new()
    }

    /// Connects stores and peers and takes its listeners ([`Boot::listen`]). A
    /// [`BootError::Failed`] is retried with backoff, so it must leave nothing running behind.
    fn connect(
        config: Config,
        args: Self::Args,
        boot: &Boot,
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
    let mut boot = Boot::new(&config, S::DEPENDENCIES, shutdown.clone());
    let mut faces = Vec::new();
    for (addr, face) in S::ports(&config, &args) {
        let bound = std::net::TcpListener::bind(addr).and_then(|l| {
            l.set_nonblocking(true)?;
            let served = l.try_clone()?;
            Ok((l, served))
        });
        match bound {
            Ok((l, served)) => {
                boot.bound.insert(addr, l);
                faces.push((served, face));
            }
            Err(e) => return BootError::failed(format!("cannot listen on {addr}: {e}")).exit(name),
        }
    }
    let waiting = WaitServers::start(&boot.health, faces, S::GRPC_SERVICES).await;
    let connected = connect_with_backoff::<S>(name, &config, &args, &boot).await;
    waiting.stop().await;
    let service = match connected {
        Ok(Some(s)) => s,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => return e.exit(name),
    };
    boot.health.set_started();
    match service.serve(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.exit(name),
    }
}

/// [`Service::connect`] until it succeeds (`Some`), shutdown begins (`None`) or it reports a
/// config error; waits 100 ms, 200 ms, … up to [`RETRY_CAP`] between attempts.
async fn connect_with_backoff<S: Service>(
    name: &str,
    config: &Config,
    args: &S::Args,
    boot: &Boot,
) -> Result<Option<S>, BootError> {
    let mut delay = RETRY_FIRST;
    let mut attempt: u32 = 0;
    loop {
        attempt = attempt.saturating_add(1);
        let tried = tokio::select! {
            () = boot.shutdown.cancelled() => return Ok(None),
            r = S::connect(config.clone(), args.clone(), boot) => r,
        };
        match tried {
            Ok(s) => {
                if attempt > 1 {
                    tracing::info!(service = name, attempt, "connected; serving");
                }
                return Ok(Some(s));
            }
            Err(e @ BootError::Config(_)) => return Err(e),
            Err(BootError::Failed(msg)) => {
                let down: Vec<&str> = futures::future::join_all(
                    S::DEPENDENCIES
                        .iter()
                        .map(|d| async move { (!d.answers(config).await).then_some(d.name()) }),
                )
                .await
                .into_iter()
                .flatten()
                .collect();
                tracing::warn!(
                    service = name,
                    attempt,
                    retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    down = ?down,
                    error = %msg,
                    "cannot start yet (not ready); retrying"
                );
            }
        }
        tokio::select! {
            () = boot.shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(RETRY_CAP);
    }
}

/// The health-only servers on a service's ports while it connects.
struct WaitServers {
    stop: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
}

impl WaitServers {
    async fn start(
        health: &Readiness,
        faces: Vec<(std::net::TcpListener, Face)>,
        grpc_services: &[&str],
    ) -> Self {
        let stop = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        for (l, face) in faces {
            let l = match tokio::net::TcpListener::from_std(l) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot answer health while connecting");
                    continue;
                }
            };
            let stop = stop.clone();
            // Anything but health is refused as "not yet" (503 + Retry-After, gRPC UNAVAILABLE),
            // which clients retry, rather than a 404 or UNIMPLEMENTED, which they would not.
            let app: axum::Router = match face {
                Face::Http => health.routes().fallback(|| async {
                    (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        [
                            (axum::http::header::RETRY_AFTER, "1"),
                            (axum::http::header::CONTENT_TYPE, "application/json"),
                        ],
                        NOT_YET_JSON,
                    )
                }),
                Face::Grpc => {
                    tonic::service::Routes::new(crate::health::not_serving(grpc_services).await)
                        .prepare()
                        .into_axum_router()
                        .fallback(|| async {
                            tonic::Status::unavailable(NOT_YET).into_http::<axum::body::Body>()
                        })
                }
            };
            tasks.spawn(async move {
                let _ = axum::serve(l, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await;
            });
        }
        Self { stop, tasks }
    }

    /// Stops accepting (the service's own server takes the same sockets over) and closes the
    /// connections it holds, cutting any still open after [`WAIT_SERVER_CLOSE`].
    async fn stop(mut self) {
        self.stop.cancel();
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(WAIT_SERVER_CLOSE, all).await.is_err() {
            self.tasks.abort_all();
        }
    }
}
