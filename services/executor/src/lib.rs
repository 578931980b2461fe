//! The executor: pulls runs from JetStream, takes a fenced lease on each, and runs the agent
//! loop (model → tool_use → tool_result) against the router, persisting every step.
//!
//! One process works on up to `executor.max_concurrent_runs` runs. For each dispatch it pulls,
//! it takes the run's lease (bumping the epoch that fences every later write), rebuilds the
//! loop state from the transcript, and drives [`machine::next_action`] until the run finishes,
//! parks or the lease is lost. A heartbeat renews the lease and tells JetStream the work is in
//! progress; when a process dies, both lapse, JetStream redelivers, and another executor resumes
//! from the transcript.

//!
//! Module layout: `dispatch` (a dispatch message → lease + heartbeat), `sweep` (runs nothing
//! works on, dispatched again or ended), `driver` (the run loop
//! around [`machine`]), `turn` (one model turn), `orchestrate` (tool calls: default-deny and the
//! ledger rules), `hooks` (the tenant's tool-use hooks around each call), `subruns` (the
//! `Agent` tool's children) and [`tools`] (the [`tools::Tool`] trait, the registry, one file
//! per tool).

mod code;
mod compact;
mod dispatch;
mod driver;
mod hooks;
pub mod machine;
mod orchestrate;
mod plan;
mod stop;
mod subruns;
mod sweep;
pub mod tools;
mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weft_auth::InternalJwt;
use weft_bus::{Bus, DispatchPolicy, LiveHub};
use weft_config::{Config, ExecutorConfig};
use weft_coord::{ControlOp, ControlSignal, Coord};
use weft_core::RunId;
use weft_core::agent::AgentContent;
use weft_launch::{LocalExecutor, LocalStart};
use weft_proto::transport::GrpcTransport;
use weft_proto::v1::router_client::RouterClient;
use weft_proto::v1::substrate_client::SubstrateClient;
use weft_store::{RunStore, StepWriter};

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("executor: {0}")]
    Store(#[from] weft_store::StoreError),
    #[error("executor: {0}")]
    Bus(#[from] weft_bus::BusError),
    #[error("executor: {0}")]
    Coord(#[from] weft_coord::CoordError),
    #[error("executor: {0}")]
    Config(String),
}

/// Group writers per executor process: while one commits a batch of steps, the next gathers.
const STEP_WRITERS: usize = 2;

/// A run this process holds: how to stop it and how to tell it input arrived.
struct Held {
    cancel: CancellationToken,
    input: Arc<Notify>,
    /// True while the run is asked to park at its next step boundary (docs/operations.md).
    pause: Arc<tokio::sync::watch::Sender<bool>>,
}

/// Shared by every run task of this process.
pub(crate) struct Inner {
    pub store: RunStore,
    /// Writes the runs' steps, grouping those made at the same time into one commit.
    pub writer: StepWriter,
    pub bus: Bus,
    pub coord: Coord,
    pub router: RouterClient<GrpcTransport>,
    pub substrate: SubstrateClient<GrpcTransport>,
    /// The transport to the substrate, for its other gRPC services (memory, channels, skills):
    /// `weft_proto::transport` builds their clients on it, with the message limit.
    pub substrate_transport: GrpcTransport,
    /// The MCP bridge, for the tools of MCP servers.
    pub mcp_bridge: GrpcTransport,
    pub jwt: InternalJwt,
    pub cfg: ExecutorConfig,
    pub admission_lease: Duration,
    /// Runs one tenant may have working at once (`gateway.tenant_max_concurrent_runs`); sub-runs
    /// count too.
    pub tenant_max_runs: u32,
    /// This process's lease-owner id.
    pub owner: String,
    /// The tools this executor hosts.
    pub tools: tools::Registry,
    /// The tenants' tool-use hooks and their client.
    pub hooks: hooks::Hooks,
    held: Mutex<HashMap<RunId, Held>>,
    /// Agent definitions by content hash: immutable, so cached forever.
    defs: Mutex<HashMap<String, Arc<AgentContent>>>,
    /// Live events of the runs held here, for streams in this process (`weft up`).
    pub hub: LiveHub,
    /// Places for runs (`executor.max_concurrent_runs`), shared by dispatched and local runs.
    slots: Arc<Semaphore>,
    /// Set while [`Executor::run`] works (its shutdown token): local runs are taken only then.
    accepting: std::sync::OnceLock<CancellationToken>,
    /// Runs handed over in this process ([`LocalExecutor`]), waited for on shutdown.
    local_tasks: TaskTracker,
    /// Cancelled once [`Executor::run`] pulls dispatches and takes local runs.
    ready: CancellationToken,
}

impl Inner {
    /// Registers a run this process is about to work on; `None` when it already works on it
    /// (a second dispatch of the same run, e.g. from the sweeper, reached this process).
    fn hold(&self, run: RunId) -> Option<(CancellationToken, Arc<Notify>)> {
        let mut m = self.held.lock().ok()?;
        if m.contains_key(&run) {
            return None;
        }
        let held = Held {
            cancel: CancellationToken::new(),
            input: Arc::new(Notify::new()),
            pause: Arc::new(tokio::sync::watch::Sender::new(false)),
        };
        let out = (held.cancel.clone(), held.input.clone());
        m.insert(run, held);
        Some(out)
    }

    /// The pause flag of a run held here (a fresh one, never set by a message, for a run that
    /// is not).
    fn pause_flag(&self, run: RunId) -> Arc<tokio::sync::watch::Sender<bool>> {
        self.held
            .lock()
            .ok()
            .and_then(|m| m.get(&run).map(|h| h.pause.clone()))
            .unwrap_or_else(|| Arc::new(tokio::sync::watch::Sender::new(false)))
    }

    fn unhold(&self, run: RunId) {
        if let Ok(mut m) = self.held.lock() {
            m.remove(&run);
        }
    }

    fn cached_def(&self, hash: &str) -> Option<Arc<AgentContent>> {
        self.defs.lock().ok()?.get(hash).cloned()
    }

    fn cache_def(&self, hash: &str, def: Arc<AgentContent>) {
        if let Ok(mut m) = self.defs.lock() {
            m.insert(hash.to_owned(), def);
        }
    }

    /// Applies a control message to a held run.
    fn control(&self, run: RunId, op: ControlOp) {
        let Ok(m) = self.held.lock() else { return };
        if let Some(h) = m.get(&run) {
            match op {
                ControlOp::Cancel => h.cancel.cancel(),
                ControlOp::Input => h.input.notify_one(),
                ControlOp::Pause => {
                    h.pause.send_replace(true);
                }
                ControlOp::Resume => {
                    h.pause.send_replace(false);
                }
            }
        }
    }

    fn held_runs(&self) -> Vec<RunId> {
        self.held
            .lock()
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default()
    }
}

/// An executor process's worth of state.
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

impl Executor {
    /// Connects Postgres (migrating when configured), NATS and Redis.
    pub async fn connect(
        config: &Config,
        jwt: InternalJwt,
        router: GrpcTransport,
        substrate: GrpcTransport,
        mcp_bridge: GrpcTransport,
    ) -> Result<Self, ExecutorError> {
        let pool = weft_store::open(&config.database).await?;
        Self::connect_on(config, pool, jwt, router, substrate, mcp_bridge).await
    }

    /// Connects NATS and Redis, working on a pool the caller opened (`weft up` shares one
    /// among its services).
    pub async fn connect_on(
        config: &Config,
        pool: sqlx::PgPool,
        jwt: InternalJwt,
        router: GrpcTransport,
        substrate: GrpcTransport,
        mcp_bridge: GrpcTransport,
    ) -> Result<Self, ExecutorError> {
        let bus = Bus::connect(&config.nats.url, &config.nats.prefix).await?;
        let coord = Coord::new(config.redis.url.expose(), &config.redis.prefix)?;
        let tools = tools::Registry::builtin(&config.executor, &config.volumes)
            .map_err(|e| ExecutorError::Config(e.to_string()))?;
        let hooks = hooks::Hooks::new(&config.executor)
            .map_err(|e| ExecutorError::Config(e.to_string()))?;
        Ok(Self {
            inner: Arc::new(Inner {
                writer: StepWriter::spawn(RunStore::new(pool.clone()), STEP_WRITERS),
                store: RunStore::new(pool),
                bus,
                coord,
                router: weft_proto::transport::router_client(router),
                substrate: weft_proto::transport::substrate_client(substrate.clone()),
                substrate_transport: substrate,
                mcp_bridge,
                jwt,
                cfg: config.executor.clone(),
                admission_lease: Duration::from_secs(config.gateway.admission_lease_secs),
                tenant_max_runs: config.gateway.tenant_max_concurrent_runs,
                owner: format!("executor-{}-{}", std::process::id(), uuid::Uuid::now_v7()),
                tools,
                hooks,
                held: Mutex::new(HashMap::new()),
                defs: Mutex::new(HashMap::new()),
                hub: LiveHub::new(),
                slots: Arc::new(Semaphore::new(config.executor.max_concurrent_runs)),
                accepting: std::sync::OnceLock::new(),
                local_tasks: TaskTracker::new(),
                ready: CancellationToken::new(),
            }),
        })
    }

    /// Hands the live events of the runs held here to `hub`, where streams of this process
    /// read them (`weft up` shares one hub between its gateway and its executor).
    ///
    /// # Panics
    /// When the executor was already cloned (call it while wiring the process).
    #[must_use]
    pub fn with_live_hub(mut self, hub: LiveHub) -> Self {
        #[expect(clippy::expect_used, reason = "a wiring mistake, caught by every test")]
        let inner = Arc::get_mut(&mut self.inner).expect("with_live_hub before any clone");
        inner.hub = hub;
        self
    }

    /// This executor as the launcher's in-process fast path: runs created in this process are
    /// inserted leased to it and handed over in memory while it has a free place.
    pub fn local(&self) -> Arc<dyn LocalExecutor> {
        Arc::new(LocalDoor(self.inner.clone()))
    }

    /// Resolves once [`Executor::run`] pulls dispatches and takes the runs created in this
    /// process (`weft up` serves its gateway only then, so its first runs take the fast path).
    pub fn ready(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.inner.ready.clone().cancelled_owned()
    }

    /// This process's lease-owner id.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// Pulls and runs work until `shutdown`; then stops pulling, lets held runs stop at their
    /// next await point (released for another executor) and returns.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ExecutorError> {
        let inner = self.inner.clone();
        let cfg = &inner.cfg;
        let consumer = inner
            .bus
            .dispatch_consumer(DispatchPolicy {
                ack_wait: Duration::from_millis(cfg.lease_ttl_ms),
                max_deliver: cfg.max_deliver,
                max_ack_pending: 100_000,
            })
            .await?;
        let mut control = inner.coord.control_listener(shutdown.clone());
        let ctl_inner = inner.clone();
        let ctl_stop = shutdown.clone();
        let control_task = tokio::spawn(async move {
            loop {
                let sig = tokio::select! {
                    () = ctl_stop.cancelled() => return,
                    s = control.recv() => s,
                };
                match sig {
                    Some(ControlSignal::Message(c)) => ctl_inner.control(c.run_id, c.op),
                    // Messages sent while the subscription was down are lost: re-check flags (cancel in
                    // Redis, pause in Postgres).
                    Some(ControlSignal::Resubscribed) => {
                        let held = ctl_inner.held_runs();
                        for run in &held {
                            if ctl_inner.coord.is_cancelled(*run).await.unwrap_or(false) {
                                ctl_inner.control(*run, ControlOp::Cancel);
                            }
                        }
                        for run in ctl_inner
                            .store
                            .asked_to_pause(&held)
                            .await
                            .unwrap_or_default()
                        {
                            ctl_inner.control(run, ControlOp::Pause);
                        }
                    }
                    None => return,
                }
            }
        });

        let sweeper = tokio::spawn(sweep::run(inner.clone(), shutdown.clone()));
        let slots = inner.slots.clone();
        let _ = inner.accepting.set(shutdown.clone());
        inner.ready.cancel();
        let batch = cfg.max_concurrent_runs.clamp(1, 64);
        // A tracker, not a JoinSet: a finished run's task (its whole future, tens of KiB) is freed
        // when it ends, not kept until the next dispatch comes to reap it. The runs stop through
        // `shutdown` (below); dropping this future instead would leave them running detached.
        let tasks = TaskTracker::new();
        tracing::info!(owner = %inner.owner, "executor pulling runs");
        'outer: while !shutdown.is_cancelled() {
            let mut messages = match consumer
                .stream()
                .max_messages_per_batch(batch)
                .messages()
                .await
            {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot pull from jetstream; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            loop {
                let permit = tokio::select! {
                    () = shutdown.cancelled() => break 'outer,
                    p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break 'outer },
                };
                let msg = tokio::select! {
                    () = shutdown.cancelled() => break 'outer,
                    m = messages.next() => m,
                };
                match msg {
                    Some(Ok(msg)) => {
                        let inner = inner.clone();
                        let stop = shutdown.clone();
                        // Boxed: the run's future is tens of KiB, and a task copies its
                        // future whole when it is spawned and again when it ends.
                        drop(tasks.spawn(Box::pin(async move {
                            dispatch::handle(inner, msg, stop).await;
                            drop(permit);
                        })));
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "jetstream pull failed; re-subscribing");
                        break;
                    }
                    None => break,
                }
            }
        }
        // Drain: held runs see the shutdown token and release themselves.
        tasks.close();
        tasks.wait().await;
        inner.local_tasks.close();
        inner.local_tasks.wait().await;
        control_task.abort();
        sweeper.abort();
        tracing::info!("executor stopped");
        Ok(())
    }
}

/// [`Executor::local`].
struct LocalDoor(Arc<Inner>);

impl LocalExecutor for LocalDoor {
    fn reserve(&self, id: RunId, tenant: &weft_core::TenantId) -> Option<Box<dyn LocalStart>> {
        let stop = self.0.accepting.get()?;
        if stop.is_cancelled() {
            return None;
        }
        let permit = self.0.slots.clone().try_acquire_owned().ok()?;
        let (cancel, input) = self.0.hold(id)?;
        Some(Box::new(Reserved {
            inner: self.0.clone(),
            id,
            tenant: tenant.clone(),
            stop: stop.clone(),
            // The drain waits for a reserved run too, until it started or was given back.
            _tracked: self.0.local_tasks.token(),
            parts: Some((permit, cancel, input)),
        }))
    }
}

/// A place [`LocalDoor::reserve`] took: the permit and the run's control registration.
struct Reserved {
    inner: Arc<Inner>,
    id: RunId,
    tenant: weft_core::TenantId,
    stop: CancellationToken,
    /// Held only to keep the drain waiting while the run is reserved.
    _tracked: tokio_util::task::task_tracker::TaskTrackerToken,
    parts: Option<(
        tokio::sync::OwnedSemaphorePermit,
        CancellationToken,
        Arc<Notify>,
    )>,
}

impl LocalStart for Reserved {
    fn forget(mut self: Box<Self>) {
        if self.parts.take().is_some() {
            self.inner.unhold(self.id);
        }
    }

    fn lease(&self) -> weft_store::NewLease {
        weft_store::NewLease {
            owner: self.inner.owner.clone(),
            ttl_ms: i64::try_from(self.inner.cfg.lease_ttl_ms).unwrap_or(i64::MAX),
        }
    }

    fn start(
        mut self: Box<Self>,
        run: weft_store::RunRecord,
        events: Vec<(String, serde_json::Value)>,
    ) {
        let Some((permit, cancel, input)) = self.parts.take() else {
            return;
        };
        let inner = self.inner.clone();
        let stop = self.stop.clone();
        let lease = weft_store::Lease {
            epoch: run.lease_epoch,
            run,
        };
        // The creating request's trace context, as a dispatch would carry it in its headers.
        let mut trace = Vec::new();
        weft_telemetry::inject_trace_context_with(|k, v| trace.push((k.to_owned(), v)));
        // Boxed, as in the pull loop: the run's future is not copied when spawned or ended.
        self.inner.local_tasks.spawn(Box::pin(async move {
            dispatch::work_local(inner, lease, events, trace, cancel, input, stop).await;
            drop(permit);
        }));
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        // Neither started nor forgotten: the creation's request went away after the insert, or
        // its commit's outcome is unknown. The run may exist, leased to this executor: its
        // dispatch brings it back here at once (or finds it missing).
        if self.parts.take().is_none() {
            return;
        }
        self.inner.unhold(self.id);
        let d = weft_bus::Dispatch {
            run_id: self.id,
            tenant: self.tenant.clone(),
        };
        let inner = self.inner.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = inner.bus.dispatch(&d).await {
                    tracing::warn!(run_id = %d.run_id, error = %e, "cannot dispatch a run whose creation was cut short; the sweeper will");
                }
            });
        }
    }
}

/// The executor as its own process (`weft-executor`, `weft executor`), in the shared boot shape
/// ([`weft_telemetry::boot`]): the shared internal key from config, the operations listener
/// (`/metrics`, `/healthz`, `/readyz`), the stores and peers connected; then runs until
/// SIGINT/SIGTERM and drains.
pub struct ExecutorService {
    executor: Executor,
    ops: Option<tokio::net::TcpListener>,
    health: weft_telemetry::health::Readiness,
}

impl weft_telemetry::boot::Service for ExecutorService {
    type Args = ();
    const DEPENDENCIES: &'static [weft_telemetry::health::Dependency] = &[
        weft_telemetry::health::Dependency::Postgres,
        weft_telemetry::health::Dependency::Redis,
        weft_telemetry::health::Dependency::Nats,
    ];

    fn ports(config: &Config, (): &()) -> Vec<(std::net::SocketAddr, weft_telemetry::boot::Face)> {
        config
            .executor
            .metrics_listen
            .map(|a| (a, weft_telemetry::boot::Face::Http))
            .into_iter()
            .collect()
    }

    async fn connect(
        config: Config,
        (): (),
        boot: &weft_telemetry::boot::Boot,
    ) -> Result<Self, weft_telemetry::boot::BootError> {
        use weft_telemetry::boot::BootError;
        let secret = config
            .required_jwt_secret("router")
            .map_err(BootError::config)?;
        let jwt = InternalJwt::from_secret(secret.expose().as_bytes());
        let router = weft_proto::transport::channel(&config.executor.router_url)
            .map_err(|e| BootError::config(format!("executor.router_url: {e}")))?;
        let substrate = weft_proto::transport::channel(&config.executor.substrate_url)
            .map_err(|e| BootError::config(format!("executor.substrate_url: {e}")))?;
        let mcp_bridge = weft_proto::transport::channel(&config.executor.mcp_bridge_url)
            .map_err(|e| BootError::config(format!("executor.mcp_bridge_url: {e}")))?;
        let ops = match config.executor.metrics_listen {
            Some(addr) => Some(boot.listen(addr).await?),
            None => None,
        };
        let executor = Executor::connect(&config, jwt, router, substrate, mcp_bridge)
            .await
            .map_err(|e| match e {
                ExecutorError::Config(_) => BootError::config(e),
                e => BootError::failed(e),
            })?;
        Ok(Self {
            executor,
            ops,
            health: boot.health.clone(),
        })
    }

    async fn serve(
        self,
        shutdown: CancellationToken,
    ) -> Result<(), weft_telemetry::boot::BootError> {
        if let Some(l) = self.ops {
            tokio::spawn(weft_telemetry::health::serve_ops(
                l,
                self.health,
                shutdown.clone(),
            ));
        }
        self.executor
            .run(shutdown)
            .await
            .map_err(weft_telemetry::boot::BootError::failed)
    }
}
