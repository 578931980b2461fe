//! Health for every weft server, one implementation: `/healthz` (the process answers), `/readyz`
//! (its dependencies answer, it has started — stores opened, migrations applied — and it is not
//! shutting down) and the standard gRPC health service (`grpc.health.v1.Health`), SERVING only
//! when `/readyz` would say ready. docs/operations.md, "Health", is the operator's view.
//!
//! A [`Readiness`] is made per process by [`crate::boot`] before the service connects, so a
//! service waiting for Postgres, Redis or NATS already answers 503 and NOT_SERVING, naming what is
//! down. The dependency probes speak just enough of each protocol to know that the server
//! answers (Postgres' SSL request, Redis' `PING`, NATS' `INFO`), so they need none of the
//! services' clients; a service may replace a probe by a check through its own client
//! ([`Readiness::check`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::FutureExt as _;
use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use weft_api::base::{Check, Health, ReadyStatus};

/// How long one check may take before it counts as not answering.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a gRPC server's health status is re-evaluated.
const GRPC_POLL: Duration = Duration::from_millis(500);

/// The name of the check that is ok once the service has connected (stores opened, migrations
/// applied when `database.migrate_on_start`).
pub const STARTED: &str = "started";

/// The name of the check that is ok until shutdown begins (SIGTERM).
pub const ACCEPTING: &str = "accepting";

/// A piece of infrastructure a service needs before it can serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dependency {
    Postgres,
    Redis,
    Nats,
}

impl Dependency {
    /// Its name in `/readyz`, logs and `weft doctor`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Redis => "redis",
            Self::Nats => "nats",
        }
    }

    /// Whether the server at the URL `config` gives for it answers, within [`CHECK_TIMEOUT`].
    pub async fn answers(self, config: &weft_config::Config) -> bool {
        let url = match self {
            Self::Postgres => config.database.url.expose().to_owned(),
            Self::Redis => config.redis.url.expose().to_owned(),
            Self::Nats => config.nats.url.clone(),
        };
        probe(self, &url).await
    }
}

/// A named check: `true` when the thing it checks answered.
pub type CheckFn = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

/// A process's readiness: its checks, whether it has started, whether it is shutting down.
/// Cheap to clone; every clone is the same state.
#[derive(Clone)]
pub struct Readiness {
    inner: Arc<Inner>,
}

struct Inner {
    checks: RwLock<Vec<(String, CheckFn)>>,
    started: AtomicBool,
    stopping: CancellationToken,
}

impl Readiness {
    /// No checks yet, not started; not ready once `stopping` is cancelled.
    pub fn new(stopping: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                checks: RwLock::new(Vec::new()),
                started: AtomicBool::new(false),
                stopping,
            }),
        }
    }

    /// A probe of each of `deps` at the URLs of `config`.
    pub fn for_config(
        config: &weft_config::Config,
        deps: &[Dependency],
        stopping: CancellationToken,
    ) -> Self {
        let r = Self::new(stopping);
        for &dep in deps {
            let config = Arc::new(config.clone());
            r.check(dep.name(), move || {
                let config = config.clone();
                async move { dep.answers(&config).await }.boxed()
            });
        }
        r
    }

    /// Adds the check `name`, or replaces the one of that name.
    pub fn check<F>(&self, name: &str, f: impl Fn() -> F + Send + Sync + 'static)
    where
        F: Future<Output = bool> + Send + 'static,
    {
        let f: CheckFn = Arc::new(move || f().boxed());
        let mut checks = self
            .inner
            .checks
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match checks.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = f,
            None => checks.push((name.to_owned(), f)),
        }
    }

    /// The service has connected: from now on only its checks and shutdown decide.
    pub fn set_started(&self) {
        self.inner.started.store(true, Ordering::Release);
    }

    /// Whether shutdown has begun.
    pub fn stopping(&self) -> bool {
        self.inner.stopping.is_cancelled()
    }

    /// Runs every check (at once, each within [`CHECK_TIMEOUT`]) and says whether it is ready.
    pub async fn report(&self) -> Report {
        let checks: Vec<(String, CheckFn)> = self
            .inner
            .checks
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        evaluate(
            checks.into_iter().map(|(n, f)| (n, f())),
            self.inner.started.load(Ordering::Acquire),
            self.stopping(),
        )
        .await
    }

    /// `/healthz` and `/readyz` over this readiness, to merge into a server's routes.
    pub fn routes<S: Clone + Send + Sync + 'static>(&self) -> axum::Router<S> {
        let r = self.clone();
        axum::Router::new()
            .route("/healthz", axum::routing::get(healthz))
            .route(
                "/readyz",
                axum::routing::get(move || {
                    let r = r.clone();
                    async move { r.report().await.into_response() }
                }),
            )
    }

    /// The gRPC health service for a server of `services` (full names, e.g. `weft.v1.Router`):
    /// the overall status `""` and each name are SERVING exactly when [`Readiness::report`] is
    /// ready, re-evaluated every 500 ms by a task that stops (after turning NOT_SERVING) when
    /// shutdown begins.
    pub async fn grpc(
        &self,
        services: &[&str],
    ) -> tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>
    {
        let (reporter, server) = tonic_health::server::health_reporter();
        let names: Vec<String> = std::iter::once(String::new())
            .chain(services.iter().map(|s| (*s).to_owned()))
            .collect();
        set_all(&reporter, &names, ServingStatus::NotServing).await;
        let r = self.clone();
        tokio::spawn(async move {
            let mut last = ServingStatus::NotServing;
            loop {
                let ready = tokio::select! {
                    () = r.inner.stopping.cancelled() => break,
                    report = r.report() => report.ready,
                };
                let now = if ready {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                if now != last {
                    set_all(&reporter, &names, now).await;
                    last = now;
                }
                tokio::select! {
                    () = r.inner.stopping.cancelled() => break,
                    () = tokio::time::sleep(GRPC_POLL) => {}
                }
            }
            set_all(&reporter, &names, ServingStatus::NotServing).await;
        });
        server
    }
}

async fn set_all(
    reporter: &tonic_health::server::HealthReporter,
    names: &[String],
    s: ServingStatus,
) {
    for n in names {
        reporter.set_service_status(n, s).await;
    }
}

/// A gRPC health service that answers NOT_SERVING for `""` and each of `services`, for a server
/// that is not serving its own services yet.
pub async fn not_serving(
    services: &[&str],
) -> tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health> {
    let (reporter, server) = tonic_health::server::health_reporter();
    let names: Vec<String> = std::iter::once(String::new())
        .chain(services.iter().map(|s| (*s).to_owned()))
        .collect();
    set_all(&reporter, &names, ServingStatus::NotServing).await;
    server
}

/// The answer of `/healthz`: the process answers.
pub async fn healthz() -> Response {
    Json(Health::default()).into_response()
}

/// What `/readyz` answers: 200 when ready, else 503; the body names every check.
#[derive(Clone, Debug)]
pub struct Report {
    pub ready: bool,
    pub body: weft_api::base::Readiness,
}

impl IntoResponse for Report {
    fn into_response(self) -> Response {
        let status = if self.ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (status, Json(self.body)).into_response()
    }
}

/// Runs `checks` at once, each within [`CHECK_TIMEOUT`]; ready when every one answered, the
/// service has `started` and it is not `stopping`. Both of those are in the body too
/// ([`STARTED`], [`ACCEPTING`]).
pub async fn evaluate<F>(
    checks: impl IntoIterator<Item = (String, F)>,
    started: bool,
    stopping: bool,
) -> Report
where
    F: Future<Output = bool>,
{
    let results = futures::future::join_all(checks.into_iter().map(|(name, f)| async move {
        let ok = matches!(tokio::time::timeout(CHECK_TIMEOUT, f).await, Ok(true));
        (name, ok)
    }))
    .await;
    let mut map: BTreeMap<String, Check> = results
        .into_iter()
        .map(|(n, ok)| (n, Check::from(ok)))
        .collect();
    map.insert(STARTED.to_owned(), Check::from(started));
    map.insert(ACCEPTING.to_owned(), Check::from(!stopping));
    let ready = map.values().all(|c| *c == Check::Ok);
    Report {
        ready,
        body: weft_api::base::Readiness {
            status: if ready {
                ReadyStatus::Ready
            } else {
                ReadyStatus::NotReady
            },
            checks: map,
        },
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` until `shutdown`: the operations
/// listener of a service without an HTTP API of its own (`router.metrics_listen`,
/// `executor.metrics_listen`).
pub async fn serve_ops(
    listener: tokio::net::TcpListener,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let handle = crate::prometheus();
    let app = readiness.routes().route(
        "/metrics",
        axum::routing::get(move || async move { handle.render() }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// Whether the server of `dep` at `url` answers its protocol's first exchange.
pub async fn probe(dep: Dependency, url: &str) -> bool {
    let targets = targets(dep, url);
    for t in targets {
        if matches!(
            tokio::time::timeout(CHECK_TIMEOUT, probe_one(dep, &t)).await,
            Ok(Ok(true))
        ) {
            return true;
        }
    }
    false
}

/// Where a probe connects.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Tcp { host: String, port: u16, tls: bool },
    Unix(std::path::PathBuf),
}

/// The servers `url` names (NATS takes a comma-separated list; a URL without a scheme is one).
fn targets(dep: Dependency, url: &str) -> Vec<Target> {
    let (scheme, default_port) = match dep {
        Dependency::Postgres => ("postgres", 5432),
        Dependency::Redis => ("redis", 6379),
        Dependency::Nats => ("nats", 4222),
    };
    url.split(',')
        .filter_map(|one| {
            let one = one.trim();
            let full = if one.contains("://") {
                one.to_owned()
            } else {
                format!("{scheme}://{one}")
            };
            let u = url::Url::parse(&full).ok()?;
            let tls = matches!(u.scheme(), "rediss" | "tls");
            let port = u.port().unwrap_or(default_port);
            // libpq's `?host=/path` (a Unix socket folder) wins over the URL's host.
            if dep == Dependency::Postgres
                && let Some((_, h)) = u.query_pairs().find(|(k, _)| k == "host")
            {
                if h.starts_with('/') {
                    let path = std::path::Path::new(h.as_ref()).join(format!(".s.PGSQL.{port}"));
                    return Some(Target::Unix(path));
                }
                return Some(Target::Tcp {
                    host: h.into_owned(),
                    port,
                    tls,
                });
            }
            let host = u
                .host_str()
                .filter(|h| !h.is_empty())
                .unwrap_or("localhost")
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            Some(Target::Tcp { host, port, tls })
        })
        .collect()
}

async fn probe_one(dep: Dependency, target: &Target) -> std::io::Result<bool> {
    match target {
        Target::Unix(path) => {
            let s = tokio::net::UnixStream::connect(path).await?;
            exchange(dep, s, false).await
        }
        Target::Tcp { host, port, tls } => {
            let s = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            let _ = s.set_nodelay(true);
            exchange(dep, s, *tls).await
        }
    }
}

/// The first exchange of `dep`'s protocol on `s`; over TLS (`rediss://`, `tls://`) a connection
/// that was accepted is all a probe without a TLS client can see.
async fn exchange<S>(dep: Dependency, mut s: S, tls: bool) -> std::io::Result<bool>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut first = [0u8; 4];
    match dep {
        // The SSL request: a server answers one byte, `S` or `N`.
        Dependency::Postgres => {
            s.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).await?;
            let n = s.read(&mut first[..1]).await?;
            Ok(n == 1 && matches!(first[0], b'S' | b'N'))
        }
        Dependency::Redis if tls => Ok(true),
        // Any RESP answer (`+PONG`, or `-NOAUTH` when a password is needed) is a server.
        Dependency::Redis => {
            s.write_all(b"PING\r\n").await?;
            let n = s.read(&mut first[..1]).await?;
            Ok(n == 1 && matches!(first[0], b'+' | b'-'))
        }
        // A NATS server speaks first: `INFO {...}`.
        Dependency::Nats => {
            s.read_exact(&mut first).await?;
            Ok(&first == b"INFO")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_read_each_url_form() {
        let t = targets(Dependency::Nats, "nats://a:1, b:2,tls://c");
        assert_eq!(
            t,
            vec![
                Target::Tcp {
                    host: "a".into(),
                    port: 1,
                    tls: false
                },
                Target::Tcp {
                    host: "b".into(),
                    port: 2,
                    tls: false
                },
                Target::Tcp {
                    host: "c".into(),
                    port: 4222,
                    tls: true
                },
            ]
        );
        let t = targets(
            Dependency::Postgres,
            "postgres://u:p@db/weft?sslmode=disable",
        );
        assert_eq!(
            t,
            vec![Target::Tcp {
                host: "db".into(),
                port: 5432,
                tls: false
            }]
        );
        let t = targets(Dependency::Postgres, "postgres:///weft?host=/run/pg");
        assert_eq!(t, vec![Target::Unix("/run/pg/.s.PGSQL.5432".into())]);
        let t = targets(Dependency::Redis, "redis://:pw@[::1]:6380/0");
        assert_eq!(
            t,
            vec![Target::Tcp {
                host: "::1".into(),
                port: 6380,
                tls: false
            }]
        );
    }

    #[tokio::test]
    async fn a_closed_port_does_not_answer_and_a_fake_nats_does() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        assert!(!probe(Dependency::Nats, &format!("nats://{addr}")).await);
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            s.write_all(b"INFO {}\r\n").await.unwrap();
        });
        assert!(probe(Dependency::Nats, &format!("{addr}")).await);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn readiness_needs_started_checks_and_no_shutdown() {
        let stop = CancellationToken::new();
        let r = Readiness::new(stop.clone());
        r.check("x", || async { true });
        assert!(!r.report().await.ready, "not started yet");
        r.set_started();
        let rep = r.report().await;
        assert!(rep.ready);
        assert_eq!(rep.body.checks.get("x"), Some(&Check::Ok));
        r.check("x", || async { false });
        let rep = r.report().await;
        assert!(!rep.ready);
        assert_eq!(rep.body.checks.get("x"), Some(&Check::Unavailable));
        r.check("x", || async { true });
        stop.cancel();
        let rep = r.report().await;
        assert!(!rep.ready, "shutting down");
        assert_eq!(rep.body.checks.get(ACCEPTING), Some(&Check::Unavailable));
    }
}
