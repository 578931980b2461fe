//! Every service of weft in one process: the router and the gateway, each on its own listener,
//! the substrate, the executor, the MCP bridge and the ingress's scheduler (in-process),
//! sharing one shutdown token. The gateway's chat calls reach the router directly
//! ([`weft_router::grpc::Direct`]: no protobuf encoding, JWT or HTTP/2); its other router calls
//! go through the router's gRPC service in-process (same contract, codec and JWT check, no
//! socket hop). The router's own listener still serves other gRPC clients. `deploy/local/test.sh` runs the black-box suite against both this and separate
//! processes.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use rand::RngCore as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weft_auth::InternalJwt;
use weft_config::Config;
use weft_core::{Scope, Scopes, TenantId};
use weft_gateway::tokens::{CreateTokenInput, create_token};
use weft_store::TokenStore;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("{0}")]
    Router(#[from] weft_router::RouterError),
    #[error("{0}")]
    Gateway(#[from] weft_gateway::GatewayError),
    #[error("{0}")]
    Store(#[from] weft_store::StoreError),
    #[error("{0}")]
    Executor(#[from] weft_executor::ExecutorError),
    #[error("{0}")]
    Substrate(#[from] weft_substrate::SubstrateError),
    #[error("{0}")]
    McpBridge(#[from] weft_mcp_bridge::BridgeError),
    #[error("{}", bind_message(.0, .1, .2))]
    Bind(Listener, SocketAddr, std::io::Error),
    #[error("bootstrap token: {0}")]
    Bootstrap(String),
}

/// One of the addresses `weft up` listens on: which service, and how to move it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    Gateway,
    Router,
    Substrate,
}

impl Listener {
    /// Every listener `weft up` binds, in the order it binds them.
    pub const ALL: [Listener; 3] = [Listener::Gateway, Listener::Router, Listener::Substrate];

    /// The service, as people say it.
    pub fn service(self) -> &'static str {
        match self {
            Listener::Gateway => "the gateway (HTTP API and UI)",
            Listener::Router => "the router (gRPC)",
            Listener::Substrate => "the substrate (gRPC)",
        }
    }

    /// The config key of its address.
    pub fn key(self) -> &'static str {
        match self {
            Listener::Gateway => "gateway.listen",
            Listener::Router => "router.listen",
            Listener::Substrate => "substrate.listen",
        }
    }

    /// The `weft up` (and `weft doctor`) flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Listener::Gateway => "--listen",
            Listener::Router => "--router-listen",
            Listener::Substrate => "--substrate-listen",
        }
    }

    /// Its address in `config`.
    pub fn addr(self, config: &Config) -> SocketAddr {
        match self {
            Listener::Gateway => config.gateway.listen,
            Listener::Router => config.router.listen,
            Listener::Substrate => config.substrate.listen,
        }
    }
}

fn bind_message(l: &Listener, addr: &SocketAddr, e: &std::io::Error) -> String {
    let why = if e.kind() == std::io::ErrorKind::AddrInUse {
        "the address is in use (is weft already running? `weft doctor` checks every port)"
            .to_owned()
    } else {
        e.to_string()
    };
    format!(
        "{} cannot listen on {addr}: {why}; pick another address with {} ADDR (or {} in the config)",
        l.service(),
        l.flag(),
        l.key()
    )
}

/// A running fleet.
pub struct Fleet {
    pub gateway_addr: SocketAddr,
    pub router_addr: SocketAddr,
    pub substrate_addr: SocketAddr,
    /// The bootstrap admin token, when this start minted it or could read it back.
    pub admin_token: Option<String>,
    /// Whether this start minted the bootstrap token.
    pub minted: bool,
    /// Whether the minted token was saved to `bootstrap.token_file`.
    pub saved: bool,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("gateway_addr", &self.gateway_addr)
            .field("router_addr", &self.router_addr)
            .finish_non_exhaustive()
    }
}

/// The internal JWT key: from config, or random for a single-process fleet.
pub fn internal_jwt(config: &Config) -> InternalJwt {
    let secret = match &config.auth.internal_jwt_secret {
        Some(s) => s.expose().as_bytes().to_vec(),
        None => {
            let mut b = [0u8; 32];
            rand::rng().fill_bytes(&mut b);
            b.to_vec()
        }
    };
    InternalJwt::from_secret(&secret)
}

impl Fleet {
    /// Binds the configured addresses and starts everything.
    pub async fn start(config: Config) -> Result<Self, FleetError> {
        let bind = async |l: Listener| {
            let addr = l.addr(&config);
            TcpListener::bind(addr)
                .await
                .map_err(|e| FleetError::Bind(l, addr, e))
        };
        let gw = bind(Listener::Gateway).await?;
        let rt = bind(Listener::Router).await?;
        let sb = bind(Listener::Substrate).await?;
        Self::start_on(config, gw, rt, sb).await
    }

    /// Starts everything on listeners the caller bound (tests bind port 0).
    pub async fn start_on(
        config: Config,
        gateway: TcpListener,
        router: TcpListener,
        substrate: TcpListener,
    ) -> Result<Self, FleetError> {
        let jwt = internal_jwt(&config);
        let shutdown = CancellationToken::new();
        let gateway_addr = gateway
            .local_addr()
            .map_err(|e| FleetError::Bind(Listener::Gateway, config.gateway.listen, e))?;
        let router_addr = router
            .local_addr()
            .map_err(|e| FleetError::Bind(Listener::Router, config.router.listen, e))?;

        let substrate_addr = substrate
            .local_addr()
            .map_err(|e| FleetError::Bind(Listener::Substrate, config.substrate.listen, e))?;
        let substrate_listener = substrate;

        let routing = weft_router::connect(&config).await?;
        // One pool for every service of the process, sized by database.max_connections.
        let pool = weft_store::open(&config.database).await?;
        let defs = weft_substrate::DefStore::new(pool.clone());
        weft_substrate::boot::load_boot_definitions(&defs, &config.substrate).await?;
        let parts = weft_substrate::connect_parts(
            &config,
            defs,
            Some(in_process(&routing, &jwt)),
            jwt.clone(),
        )
        .await?;
        let substrate =
            weft_proto::transport::in_process(weft_substrate::grpc_service(&parts, jwt.clone()));
        // Chat calls reach the router directly (no gRPC), and memory calls the substrate's
        // memory; embeddings, the model list and the other substrate calls go through their
        // gRPC services in-process.
        let state = weft_gateway::connect_on(
            &config,
            pool.clone(),
            jwt.clone(),
            in_process(&routing, &jwt),
            substrate.clone(),
        )
        .await?
        .with_direct_router(std::sync::Arc::new(weft_router::grpc::Direct::new(
            routing.clone(),
        )))
        .with_direct_memory(std::sync::Arc::new(
            weft_substrate::memory::grpc::MemoryService::new(parts.memory.clone()),
        ));
        let bridge = weft_mcp_bridge::Bridge::new(&config, substrate.clone())?;
        let executor = if config.executor.embedded {
            Some(
                weft_executor::Executor::connect_on(
                    &config,
                    pool,
                    jwt.clone(),
                    in_process(&routing, &jwt),
                    substrate,
                    weft_proto::transport::in_process(bridge.grpc_service(jwt.clone())),
                )
                .await?,
            )
        } else {
            None
        };
        // The in-process fast path: runs created here go to this executor, and their live
        // events reach this gateway's streams through memory.
        let (state, executor) = match executor {
            Some(e) if config.executor.local_fast_path => {
                let hub = weft_bus::LiveHub::new();
                let e = e.with_live_hub(hub.clone());
                (state.with_local_executor(e.local(), hub), Some(e))
            }
            e => (state, e),
        };
        let (admin_token, minted, saved) =
            bootstrap(&state.tokens, &config.bootstrap.token_file).await?;

        // One readiness for the whole process: its gRPC servers are SERVING while Postgres,
        // Redis and NATS answer and it is not shutting down.
        let health = weft_telemetry::health::Readiness::for_config(
            &config,
            &[
                weft_telemetry::health::Dependency::Postgres,
                weft_telemetry::health::Dependency::Redis,
                weft_telemetry::health::Dependency::Nats,
            ],
            shutdown.clone(),
        );
        health.set_started();
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(bridge.reap_until(shutdown.clone())));
        let stop = shutdown.clone();
        let substrate_jwt = jwt.clone();
        let substrate_health = health.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = weft_substrate::serve(
                substrate_listener,
                parts,
                substrate_jwt,
                substrate_health,
                stop.clone(),
            )
            .await
            {
                tracing::error!(error = %e, "substrate stopped");
                stop.cancel();
            }
        }));
        let stop = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = weft_router::serve(router, routing, jwt, health, stop.clone()).await {
                tracing::error!(error = %e, "router stopped");
                stop.cancel();
            }
        }));
        // The scheduler ticks in-process (the gateway serves the webhook receiver); with
        // `ingress.embedded = false`, separate `weft-ingress` processes fire the schedules.
        if config.ingress.embedded {
            tasks.push(tokio::spawn(weft_ingress::scheduler::run(
                state.ingress.clone(),
                shutdown.child_token(),
            )));
        }
        let executor_ready = executor.as_ref().map(weft_executor::Executor::ready);
        if let Some(executor) = executor {
            let stop = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = executor.run(stop.clone()).await {
                    tracing::error!(error = %e, "executor stopped");
                    stop.cancel();
                }
            }));
        }
        // The gateway serves once the executor takes runs (its first runs take the fast path).
        // An executor that failed to start stops the fleet; one that is slow to is waited for
        // 30 s, and runs created before it is ready wait in JetStream.
        if let Some(ready) = executor_ready {
            tokio::select! {
                () = ready => {}
                () = shutdown.cancelled() => {}
                () = tokio::time::sleep(Duration::from_secs(30)) => {
                    tracing::warn!("the executor is not pulling runs after 30 s; serving anyway");
                }
            }
        }
        let stop = shutdown.clone();
        let max_body = config.gateway.max_body_bytes;
        tasks.push(tokio::spawn(async move {
            if let Err(e) = weft_gateway::serve(gateway, state, max_body, stop.clone()).await {
                tracing::error!(error = %e, "gateway stopped");
                stop.cancel();
            }
        }));
        Ok(Self {
            gateway_addr,
            router_addr,
            substrate_addr,
            admin_token,
            minted,
            saved,
            shutdown,
            tasks,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.gateway_addr)
    }

    /// A token that is cancelled when the fleet stops (or a service in it fails).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stops every service and waits up to `deadline` for in-flight work to drain.
    pub async fn stop(self, deadline: Duration) {
        self.shutdown.cancel();
        let all = futures_join(self.tasks);
        if tokio::time::timeout(deadline, all).await.is_err() {
            tracing::warn!("fleet did not drain within the deadline; exiting anyway");
        }
    }
}

async fn futures_join(tasks: Vec<JoinHandle<()>>) {
    for t in tasks {
        let _ = t.await;
    }
}

/// The router's gRPC service called in-process: the gateway keeps the gRPC contract, codec and
/// JWT check, without a socket hop.
fn in_process(
    routing: &std::sync::Arc<weft_router::Routing>,
    jwt: &InternalJwt,
) -> weft_gateway::RouterTransport {
    weft_proto::transport::in_process(weft_router::grpc_service(routing.clone(), jwt.clone()))
}

/// Mints the bootstrap admin token on first start and keeps it in `token_file` (mode 0600).
/// On later starts, reads it back from the file if it is still active.
async fn bootstrap(
    store: &TokenStore,
    token_file: &Path,
) -> Result<(Option<String>, bool, bool), FleetError> {
    if store.has_active_bootstrap().await? {
        let existing = std::fs::read_to_string(token_file)
            .ok()
            .map(|s| s.trim().to_owned());
        let active = match &existing {
            Some(t) => store
                .find_by_hash(&weft_auth::hash_token(t))
                .await?
                .is_some_and(|r| r.is_active(time::OffsetDateTime::now_utc())),
            None => false,
        };
        return Ok((existing.filter(|_| active), false, false));
    }
    let input = CreateTokenInput {
        name: "bootstrap admin".into(),
        tenant: TenantId::parse("default").map_err(|e| FleetError::Bootstrap(e.message))?,
        subject: "bootstrap-admin".into(),
        scopes: Scopes::new([Scope::Admin]),
        expires_at: None,
        bootstrap: true,
    };
    let (_, secret) = create_token(store, None, input)
        .await
        .map_err(|e| FleetError::Bootstrap(e.message))?;
    let saved = match write_secret_file(token_file, &secret) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(path = %token_file.display(), error = %e, "could not save the bootstrap token; it is printed once");
            false
        }
    };
    Ok((Some(secret), true, saved))
}

fn write_secret_file(path: &Path, secret: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    use std::io::Write as _;
    let mut f = opts.open(path)?;
    f.write_all(secret.as_bytes())?;
    f.write_all(b"\n")
}

/// A random secret suitable for `auth.internal_jwt_secret`.
pub fn random_secret() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}
