//! One run under a lease: the run loop around [`crate::machine`]. It loads the transcript, asks
//! the step function what to do, does it (a model turn — [`crate::turn`]; tool calls through the
//! ledger — [`crate::orchestrate`]; parking, finishing), persists what happened under the lease's
//! epoch, publishes it live, and asks again. Taking the lease and keeping it is
//! [`crate::dispatch`]'s job.
//!
//! Event writes are serialized by `seq` (an async mutex held across the write) so the
//! transcript commits in seq order: a watcher that has seen seq N never later finds a gap below
//! it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use weft_bus::{Dispatch, LiveEvent};
use weft_coord::Admission;
use weft_core::agent::AgentContent;
use weft_core::run::{
    AwaitingInput, ErrorEvent, EventKind, RunEvent, RunFinished, RunPaused, RunSpec, RunStatus,
    StopReason, TextDelta, UserInput,
};
use weft_core::{Error, ErrorCode, Principal, RunId};
use weft_proto::v1;
use weft_store::{Fenced, Lease, LedgerDone, LedgerEntry, RunStoreError, Step, StepChange};

use crate::Inner;
use crate::machine::{self, Action, Facts, LoopState};
use crate::stop::Stop;

/// How a driven run ended for this executor.
pub(crate) enum Outcome {
    /// Finished or parked: the dispatch is done.
    Done,
    /// Another executor took the run; its dispatch is theirs now.
    LeaseLost,
    /// Shutting down: the run was handed back for another executor.
    Released,
    /// An infrastructure failure; retry the dispatch later.
    Retry,
}

/// One run being worked under a lease, and the services its steps (and its tools, through
/// [`crate::tools::ToolCtx`]) use.
pub(crate) struct Driver {
    pub(crate) inner: Arc<Inner>,
    /// The run's identity, sent to the router and the substrate as an internal JWT.
    pub(crate) principal: Principal,
    pub(crate) lease: Lease,
    /// The whole transcript of a run created leased to this executor in this process (the
    /// in-process fast path): nothing to read back, no cancel flag or admission slot to check
    /// (its creator took the slot, and registered it for cancels before it existed).
    pub(crate) fresh: Option<Vec<(String, Value)>>,
    pub(crate) spec: RunSpec,
    /// Cancelled by a cancel request.
    pub(crate) cancel: CancellationToken,
    /// Notified when input arrives for this run.
    pub(crate) input: Arc<Notify>,
    /// Cancelled when the heartbeat finds the lease gone.
    pub(crate) lost: CancellationToken,
    /// The process is shutting down.
    pub(crate) stop: CancellationToken,
    /// The next free seq; held across each write so commits happen in seq order.
    pub(crate) seq: Arc<Mutex<i64>>,
    /// Sub-runs live at once (`max_concurrent_children`).
    pub(crate) children: Arc<Semaphore>,
    /// The run's MCP tools, listed at the first turn of this lease.
    pub(crate) mounted: tokio::sync::OnceCell<Arc<crate::tools::Mount>>,
    /// Calls the last model turn recorded in the ledger that have not started yet: forgotten if
    /// the run is handed back before they start, so the next executor runs them rather than
    /// calling their outcome unknown.
    pub(crate) unstarted: std::sync::Mutex<Vec<String>>,
    /// The run's credentials (from Redis), read on first use.
    pub(crate) credentials: tokio::sync::OnceCell<Arc<std::collections::BTreeMap<String, String>>>,
    /// What [`Driver::defer`] folded into the loop state without writing it: it goes first in
    /// the run's next step.
    pub(crate) deferred: std::sync::Mutex<Deferred>,
    /// The model's context window, asked of the router once per lease (when needed).
    pub(crate) window: tokio::sync::OnceCell<Option<u32>>,
    /// What `Context {op: self}` reports of the run's context.
    pub(crate) gauge: std::sync::Mutex<crate::tools::Gauge>,
    /// The tool specs' share of the gauge's estimate, counted at the lease's first model turn:
    /// a run's tools do not change within a lease, and counting them means serializing every
    /// schema.
    pub(crate) tools_tokens: std::sync::OnceLock<u64>,
    /// True while the run is asked to park at its next step boundary: set by a control message
    /// or at the lease's start (`runs.paused_by`), cleared when the pause was called off.
    pub(crate) pause: Arc<tokio::sync::watch::Sender<bool>>,
}

/// Events already folded into the loop state at the seqs that follow the last committed one,
/// and the tool results that go with them, waiting to be written by the run's next step.
/// Only what is safe to lose in a crash is deferred: the result of a read-only call (its ledger
/// row says it may run again, and a resumed run runs it again), and a model turn without tool
/// calls (a resumed run calls the model again); either way nothing is recorded twice.
#[derive(Default)]
pub(crate) struct Deferred {
    events: Vec<(String, Value)>,
    done: Vec<LedgerDone>,
    /// A deferred turn's progress (model turns taken, usage so far): the step that writes it
    /// records that too, unless it records newer progress of its own.
    progress: Option<(i32, Value)>,
}

impl Deferred {
    /// `change`, recording this deferred progress when it records none of its own.
    fn with_progress(&self, change: StepChange) -> StepChange {
        match (&self.progress, change) {
            (Some((iterations, usage)), StepChange::Events) => StepChange::Turn {
                iterations: *iterations,
                usage: usage.clone(),
                calls: Vec::new(),
            },
            (Some((iterations, usage)), StepChange::LedgerStart(calls)) => StepChange::Turn {
                iterations: *iterations,
                usage: usage.clone(),
                calls,
            },
            (_, change) => change,
        }
    }
}

impl Driver {
    pub(crate) fn run_id(&self) -> RunId {
        self.lease.run.id
    }

    /// The run's credentials (read from Redis once per lease); none when Redis cannot be read
    /// right now — that is not kept, the next call reads again (MCP calls needing one then say
    /// which is missing).
    pub(crate) async fn credentials(&self) -> Arc<std::collections::BTreeMap<String, String>> {
        if self.spec.credentials.is_empty() {
            return Arc::default();
        }
        let read = self
            .credentials
            .get_or_try_init(|| async {
                self.inner
                    .coord
                    .credentials(self.run_id())
                    .await
                    .map(Arc::new)
            })
            .await;
        match read {
            Ok(c) => c.clone(),
            Err(e) => {
                tracing::warn!(error = %e, "the run's credentials could not be read");
                Arc::default()
            }
        }
    }

    /// The run's MCP tools (listed once per lease).
    pub(crate) async fn mounted(&self, def: &AgentContent) -> Arc<crate::tools::Mount> {
        self.mounted
            .get_or_init(|| async { Arc::new(crate::tools::mount(self, def).await) })
            .await
            .clone()
    }

    /// The tool `name` if this run may call it: a built-in one in its spec, or a mounted MCP or
    /// A2A tool (or, for a server or peer that could not be listed, one that says why).
    pub(crate) async fn tool_for(
        &self,
        def: &AgentContent,
        name: &str,
    ) -> Option<Arc<dyn crate::tools::Tool>> {
        if let Some(t) = self.inner.tools.allowed(name, &self.spec.tools) {
            return Some(t);
        }
        if let Some((peer, skill)) = weft_core::a2a_peer::split_tool(name) {
            if !crate::tools::a2a::permitted(&self.spec.tools, peer, skill) {
                return None;
            }
            let mount = self.mounted(def).await;
            if let Some(t) = mount.get(name) {
                return Some(t);
            }
            return mount
                .failed
                .get(&crate::tools::a2a::failure_key(peer))
                .map(|why| {
                    Arc::new(crate::tools::Unmounted {
                        name: name.to_owned(),
                        reason: format!("A2A peer `{peer}` is unavailable: {why}"),
                    }) as Arc<dyn crate::tools::Tool>
                });
        }
        let (server, tool) = crate::tools::mcp::split(name)?;
        if !def.mcp_servers.iter().any(|s| s == server)
            || !crate::tools::mcp::permitted(&self.spec.tools, server, tool)
        {
            return None;
        }
        let mount = self.mounted(def).await;
        if let Some(t) = mount.get(name) {
            return Some(t);
        }
        mount.failed.get(server).map(|why| {
            Arc::new(crate::tools::Unmounted {
                name: name.to_owned(),
                reason: format!("MCP server `{server}` is unavailable: {why}"),
            }) as Arc<dyn crate::tools::Tool>
        })
    }

    /// The specs of every tool the run may call: built-in, then A2A and MCP.
    pub(crate) async fn tool_specs(&self, def: &AgentContent) -> Vec<weft_core::message::ToolSpec> {
        let mut specs = self.inner.tools.specs_for(&self.spec.tools);
        specs.extend(self.mounted(def).await.tools.iter().map(|t| t.spec()));
        specs
    }

    pub(crate) async fn drive(mut self) -> Outcome {
        match self.drive_inner().await {
            Ok(()) => Outcome::Done,
            Err(Stop::Lost) => Outcome::LeaseLost,
            // A pause that abandoned a call outside the loop's own tool step: handed back, and
            // the next lease parks it at once (its `paused_by` is set).
            Err(Stop::Shutdown | Stop::Paused) => match self.release().await {
                Ok(()) => Outcome::Released,
                Err(_) => Outcome::LeaseLost,
            },
            Err(Stop::Infra(e)) => {
                tracing::warn!(error = %e, "run interrupted by an infrastructure failure; retrying");
                Outcome::Retry
            }
            Err(Stop::Permanent(e)) => self.fail_unstorable(&e).await,
        }
    }

    /// A step the database refuses would be refused again on every retry (and each retry
    /// would pay for its model turn again): the run ends `failed` with a clear error instead.
    async fn fail_unstorable(&self, detail: &str) -> Outcome {
        tracing::error!(error = %detail, "a step of this run cannot be stored; failing the run");
        let mut state = LoopState::default();
        if self.load(&mut state, None).await.is_err() {
            return Outcome::Retry;
        }
        let e = Error::new(
            ErrorCode::Internal,
            "a step of this run could not be stored (the database refused its content, so \
             retrying cannot help); the run was failed",
        );
        match self.fail(&state, &e).await {
            Ok(()) => Outcome::Done,
            Err(Stop::Lost) => Outcome::LeaseLost,
            Err(_) => Outcome::Retry,
        }
    }

    async fn drive_inner(&mut self) -> Result<(), Stop> {
        let fresh = self.fresh.take();
        // The cancel flag is read once, after this process registered the run for control
        // messages (`Inner::hold`): a cancel sent before that set the flag, one sent after
        // arrives on the control channel (and a lost subscription re-checks every held run's
        // flag when it comes back). If Redis cannot answer now, it is asked again before each
        // step until it does. A fresh run was registered before it existed: nothing to read.
        let mut cancel_read = fresh.is_some() || self.read_cancel_flag().await;
        // A run works only while it holds one of its tenant's slots: the gateway took it for a
        // new root run, a parent for its sub-run; a run resumed after a crash or after lending
        // its slot to its sub-runs takes one again here, waiting while the tenant is full.
        // A run asked to pause (or leased while its tenant drains) parks before anything,
        // a slot included.
        if *self.pause.borrow()
            && !self.cancel.is_cancelled()
            && self.park_paused_with(None).await?
        {
            return Ok(());
        }
        if fresh.is_none() {
            self.wait_for_slot(self.run_id()).await?;
        }
        // A plan run is orchestrated, not looped: its roles' sub-runs do the model turns.
        if let Some(plan) = self.spec.plan.clone() {
            if !cancel_read {
                self.read_cancel_flag().await;
            }
            return match self.drive_plan(&plan, fresh).await {
                Err(Stop::Paused) => {
                    if self.park_paused_with(None).await? {
                        Ok(())
                    } else {
                        Err(Stop::Shutdown)
                    }
                }
                done => done,
            };
        }
        let mut state = LoopState::with_budget(machine::Budget::of(self.spec.compaction.as_ref()));
        let def = match self.agent().await {
            Ok(d) => d,
            Err(e) => {
                self.load(&mut state, fresh).await?;
                return self.fail(&state, &e).await;
            }
        };
        // A code agent's script is replayed whole each turn: it is sent every result in full.
        if def.code.is_some() {
            state.budget = machine::Budget::UNLIMITED;
        }
        self.children = Arc::new(Semaphore::new(
            usize::try_from(self.spec.max_concurrent_children.max(1)).unwrap_or(1),
        ));
        let (mut ledger, mut input_waiting) = self.load(&mut state, fresh).await?;
        // Tool calls this lease's own turns recorded in the ledger.
        let mut recorded = Vec::new();
        loop {
            if self.lost.is_cancelled() {
                return Err(Stop::Lost);
            }
            if self.stop.is_cancelled() {
                return Err(Stop::Shutdown);
            }
            if !cancel_read {
                cancel_read = self.read_cancel_flag().await;
            }
            // A pause parks the run here, between steps (a cancel wins over it).
            if *self.pause.borrow()
                && !self.cancel.is_cancelled()
                && !state.finished
                && self.park_paused(&state).await?
            {
                return Ok(());
            }
            let facts = Facts {
                max_iterations: self.spec.max_iterations.max(1),
                // A code agent's run ends when its script returns.
                interactive: self.lease.run.interactive && def.code.is_none(),
                cancelled: self.cancel.is_cancelled(),
                // A code agent reads only its first message: input sent later is not taken.
                input_waiting: input_waiting && def.code.is_none(),
            };
            // A compaction asked for (manual or self) happens at the first step boundary, before
            // the run parks or calls the model again.
            // A code agent has no model view to compact.
            if let Some(trigger) = state.compact_pending
                && def.code.is_none()
                && !state.finished
                && machine::pending_calls(&state).is_empty()
            {
                Box::pin(self.compact(&def, &mut state, trigger)).await?;
                continue;
            }
            match machine::next_action(&state, facts) {
                Action::Done => return Ok(()),
                Action::Finish(reason) => return self.finish(&state, reason, None).await,
                Action::Park => return self.park(&state, None).await,
                Action::TakeInput => {
                    self.take_input(&mut state).await?;
                    input_waiting = false;
                }
                // A code agent's turn is its script's.
                Action::CallModel if let Some(code) = &def.code => {
                    match Box::pin(self.code_turn(&def, code, &mut state)).await? {
                        Some(ids) => recorded = self.not_started(ids),
                        None => return Ok(()),
                    }
                }
                // Boxed: a model turn's future (several KiB, the stream it reads included) would
                // otherwise be laid out inside every run's task, parked or not, all its life.
                // Automatic compaction first, when the prompt has grown to its share of the window
                // (and something can be folded): then the loop asks again.
                Action::CallModel
                    if self.spec.compaction.is_some()
                        && self.auto_compaction_due(&def, &state).await
                        && Box::pin(self.compact(
                            &def,
                            &mut state,
                            weft_api::context::CompactTrigger::Auto,
                        ))
                        .await? => {}
                Action::CallModel => match Box::pin(tracing::Instrument::instrument(
                    self.model_turn(&def, &mut state),
                    tracing::info_span!("model_turn"),
                ))
                .await?
                {
                    Ok(ids) => recorded = self.not_started(ids),
                    Err(e) => {
                        if self.cancel.is_cancelled() {
                            continue;
                        }
                        return self.fail(&state, &e).await;
                    }
                },
                Action::RunTools(calls) => {
                    match self
                        .run_tools(&def, &mut state, &mut ledger, &recorded, calls)
                        .await
                    {
                        Ok(Some(parked)) => return self.park(&state, Some(parked)).await,
                        Ok(None) => {}
                        // A call outlived the pause's grace and was abandoned: the run parks;
                        // should the pause have been called off meanwhile, it is handed back,
                        // and whoever takes it reads the abandoned calls from the ledger.
                        Err(Stop::Paused) => {
                            return if self.park_paused(&state).await? {
                                Ok(())
                            } else {
                                Err(Stop::Shutdown)
                            };
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            // Steering input that arrived meanwhile is taken before the next model turn.
            if futures::FutureExt::now_or_never(self.input.notified()).is_some() {
                input_waiting = true;
            }
        }
    }

    /// Notes the calls a turn just recorded in the ledger as not started yet (see
    /// [`Driver::unstarted`]), and gives them back.
    fn not_started(&self, ids: Vec<String>) -> Vec<String> {
        ids.clone_into(
            &mut self
                .unstarted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        ids
    }

    /// Reads the run's cancel flag (cancelling it when set); false when Redis did not answer.
    async fn read_cancel_flag(&self) -> bool {
        match self.inner.coord.is_cancelled(self.run_id()).await {
            Ok(cancelled) => {
                if cancelled {
                    self.cancel.cancel();
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the run's cancel flag; asking again");
                false
            }
        }
    }

    /// A gRPC request carrying this run's principal as an internal JWT, and the trace context.
    pub(crate) fn internal<T>(&self, msg: T) -> Result<tonic::Request<T>, Error> {
        weft_auth::rpc::request(&self.inner.jwt, &self.principal, msg)
    }

    /// The agent definition of this run, by content hash (cached).
    async fn agent(&self) -> Result<Arc<AgentContent>, Error> {
        let hash = &self.lease.run.agent_hash;
        if let Some(d) = self.inner.cached_def(hash) {
            return Ok(d);
        }
        let v = self
            .get_agent(&self.lease.run.agent_name, Some(hash.clone()))
            .await?;
        let def: AgentContent =
            serde_json::from_str(&v.content_json).map_err(|_| Error::internal())?;
        let def = Arc::new(def);
        self.inner.cache_def(hash, def.clone());
        Ok(def)
    }

    pub(crate) async fn get_agent(
        &self,
        name: &str,
        version: Option<String>,
    ) -> Result<v1::AgentVersion, Error> {
        let req = self.internal(v1::GetAgentRequest {
            name: name.to_owned(),
            version,
        })?;
        let mut client = self.inner.substrate.clone();
        client
            .get_agent(req)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| Error::from(&s))
    }

    /// Folds the transcript into `state`; returns the ledger by call id and whether input is
    /// waiting (one query; none for a fresh run, whose transcript is `fresh` and which has no
    /// ledger or pending input yet).
    async fn load(
        &self,
        state: &mut LoopState,
        fresh: Option<Vec<(String, Value)>>,
    ) -> Result<(HashMap<String, LedgerEntry>, bool), Stop> {
        if let Some(events) = fresh {
            for (seq, (kind, data)) in (1i64..).zip(&events) {
                machine::apply(state, seq, kind, data);
            }
            *self.seq.lock().await = state.last_seq + 1;
            return Ok((HashMap::new(), false));
        }
        let t = self.inner.store.transcript(self.run_id()).await?;
        for e in &t.events {
            machine::apply(state, e.seq, &e.kind, &e.data);
        }
        *self.seq.lock().await = state.last_seq + 1;
        let ledger = t
            .ledger
            .into_iter()
            .map(|l| (l.tool_use_id.clone(), l))
            .collect();
        Ok((ledger, t.input_waiting))
    }

    /// Appends events under the lease, folds them into `state` and publishes them live.
    pub(crate) async fn persist(
        &self,
        state: Option<&mut LoopState>,
        events: Vec<RunEvent>,
    ) -> Result<(), Stop> {
        self.step(state, events, StepChange::Events).await
    }

    /// One fenced step, written by the process's group writer ([`weft_store::StepWriter`]):
    /// `events` appended at the next seqs together with `change`, committed (with the steps
    /// other runs made meanwhile), then folded into `state` and published. The seq lock is held
    /// throughout, so steps land in seq order. Whatever was deferred goes first.
    pub(crate) async fn step(
        &self,
        state: Option<&mut LoopState>,
        events: Vec<RunEvent>,
        change: StepChange,
    ) -> Result<(), Stop> {
        self.step_with(state, events, change, Vec::new()).await
    }

    /// [`Driver::step`], recording tool results (`done`) too.
    pub(crate) async fn step_with(
        &self,
        state: Option<&mut LoopState>,
        events: Vec<RunEvent>,
        mut change: StepChange,
        mut done: Vec<LedgerDone>,
    ) -> Result<(), Stop> {
        let mut seq = Arc::clone(&self.seq).lock_owned().await;
        let deferred = std::mem::take(&mut *self.deferred_lock());
        let mut events = named(events);
        let mut folded = 0;
        if !deferred.events.is_empty() || !deferred.done.is_empty() {
            let again = |id: &str| {
                done.iter().any(|d| d.tool_use_id == id)
                    || match &change {
                        StepChange::Turn { calls, .. } | StepChange::LedgerStart(calls) => {
                            calls.iter().any(|c| c.tool_use_id == id)
                        }
                        _ => false,
                    }
            };
            if deferred.done.iter().any(|d| again(&d.tool_use_id)) {
                // One statement touches a ledger row once: a call id the model used again goes
                // in a step after the deferred result of its first use.
                let first_change = deferred.with_progress(StepChange::Events);
                let (s, first, written) = self
                    .write_locked(seq, deferred.events, first_change, deferred.done)
                    .await?;
                seq = s;
                self.after_commit(None, first, written.len(), &written)
                    .await;
            } else {
                change = deferred.with_progress(change);
                folded = deferred.events.len();
                events.splice(0..0, deferred.events);
                done.splice(0..0, deferred.done);
            }
        }
        // A run that finishes or parks gives its admission slot back beside the step's commit,
        // not after its events are published: a client that sees `run_finished` (or
        // `awaiting_input`) can start (or wake) a run of the tenant's at once. Should the commit
        // fail, whoever resumes the run takes a slot again before its next step.
        let frees_slot = matches!(change, StepChange::Finish { .. } | StepChange::Park { .. });
        let (written, ()) = tokio::join!(self.write_locked(seq, events, change, done), async {
            if frees_slot {
                let _ = self
                    .inner
                    .coord
                    .release(&self.lease.run.tenant, self.run_id())
                    .await;
            }
        });
        let (seq, first, written) = written?;
        drop(seq);
        self.after_commit(state, first, folded, &written).await;
        Ok(())
    }

    /// Writes one step at the seq `seq` holds through the group writer and moves `seq` past its
    /// events; the lock back, the step's first seq and its events as written.
    ///
    /// The write, and the seq moving past it, go on even if this future is dropped (a turn
    /// cancelled while its provider events are written): once queued the step is committed
    /// whoever waits, and the next step must not take its seqs. The seq stays locked until then.
    async fn write_locked(
        &self,
        mut seq: tokio::sync::OwnedMutexGuard<i64>,
        events: Vec<(String, Value)>,
        change: StepChange,
        done: Vec<LedgerDone>,
    ) -> Result<(tokio::sync::OwnedMutexGuard<i64>, i64, Vec<(String, Value)>), Stop> {
        let first = *seq;
        let writer = self.inner.writer.clone();
        let step = Step {
            run: self.run_id(),
            epoch: self.lease.epoch,
            first_seq: first,
            events,
            change,
            done,
        };
        let (seq, written) = tokio::spawn(async move {
            let written = writer.write(step).await;
            if let Ok(events) = &written {
                *seq += i64::try_from(events.len()).unwrap_or(0);
            }
            (seq, written)
        })
        .await
        .map_err(|e| Stop::Infra(format!("the step's writer task failed: {e}")))?;
        Ok((seq, first, written?))
    }

    fn deferred_lock(&self) -> std::sync::MutexGuard<'_, Deferred> {
        self.deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Folds `events` into `state` at the seqs after the last committed (and deferred) one
    /// without writing them, and keeps them, with the tool results `done` and a turn's
    /// `progress`, for the run's next step — which the loop always makes: a model turn (within
    /// `executor.step_hold_ms` of its router call, see [`crate::turn`]), parking, finishing,
    /// taking input, or handing the run back. Only for what is safe to lose in a crash (see
    /// [`Deferred`]).
    pub(crate) async fn defer(
        &self,
        state: &mut LoopState,
        events: Vec<RunEvent>,
        done: Vec<LedgerDone>,
        progress: Option<(i32, Value)>,
    ) {
        let seq = self.seq.lock().await;
        let mut d = self.deferred_lock();
        let mut events = named(events);
        weft_store::storable(&mut events);
        let first = *seq + i64::try_from(d.events.len()).unwrap_or(0);
        for (i, (kind, data)) in (0i64..).zip(&events) {
            machine::apply(state, first + i, kind, data);
        }
        d.events.extend(events);
        d.done.extend(done);
        if progress.is_some() {
            d.progress = progress;
        }
    }

    /// Whether anything waits in [`Driver::defer`]'s keeping.
    pub(crate) fn has_deferred(&self) -> bool {
        let d = self.deferred_lock();
        !d.events.is_empty() || !d.done.is_empty()
    }

    /// Writes whatever was deferred, as a step of its own.
    pub(crate) async fn flush_deferred(&self) -> Result<(), Stop> {
        if self.has_deferred() {
            self.step(None, Vec::new(), StepChange::Events).await?;
        }
        Ok(())
    }

    /// One fenced transaction: `write` makes its changes and returns the events that go with
    /// them; they are appended at the next seqs, committed together, folded into `state` and
    /// published. The seq lock is held throughout, so commits land in seq order.
    pub(crate) async fn commit(
        &self,
        state: Option<&mut LoopState>,
        write: impl AsyncFnOnce(&mut Fenced) -> Result<Vec<RunEvent>, RunStoreError>,
    ) -> Result<(), Stop> {
        self.flush_deferred().await?;
        let mut seq = self.seq.lock().await;
        let first = *seq;
        let mut f = self.inner.store.fenced(&self.lease).await?;
        let mut events = named(write(&mut f).await?);
        f.append(first, &mut events).await?;
        f.commit().await?;
        *seq += i64::try_from(events.len()).unwrap_or(0);
        drop(seq);
        self.after_commit(state, first, 0, &events).await;
        Ok(())
    }

    /// Folds the committed `events` (from seq `first`) into `state`, bar the first `folded`
    /// (deferred ones, folded already), and publishes them all.
    async fn after_commit(
        &self,
        mut state: Option<&mut LoopState>,
        first: i64,
        folded: usize,
        events: &[(String, Value)],
    ) {
        let mut live = Vec::with_capacity(events.len());
        for (i, (kind, data)) in (0i64..).zip(events) {
            if let Some(s) = state.as_deref_mut()
                && usize::try_from(i).unwrap_or(usize::MAX) >= folded
            {
                machine::apply(s, first + i, kind, data);
            }
            live.push(LiveEvent {
                seq: first + i,
                kind: kind.clone(),
                persisted: true,
                data: data.clone(),
            });
        }
        self.publish_live(live).await;
    }

    /// Hands live events to the streams of this process (memory) and of every other (NATS).
    async fn publish_live(&self, live: Vec<LiveEvent>) {
        let live: weft_bus::LiveBatch = live.into();
        self.inner.hub.publish(self.run_id(), &live);
        if let Err(e) = self.inner.bus.publish_events(self.run_id(), &live).await {
            tracing::debug!(error = %e, "live events not published; watchers read them from the transcript");
        }
    }

    pub(crate) async fn live_delta(&self, last_seq: i64, text: &str) {
        let (kind, data) = RunEvent::TextDelta(TextDelta {
            text: text.to_owned(),
        })
        .into_parts();
        self.publish_live(vec![LiveEvent {
            seq: last_seq,
            kind,
            persisted: false,
            data,
        }])
        .await;
    }

    async fn take_input(&self, state: &mut LoopState) -> Result<(), Stop> {
        self.commit(Some(state), async |f| {
            let inputs = f.take_inputs().await?;
            Ok(inputs
                .into_iter()
                .map(|(kind, t)| match kind {
                    weft_store::InputKind::Text => RunEvent::UserInput(UserInput::text(t)),
                    weft_store::InputKind::Compact => {
                        RunEvent::CompactionRequested(weft_core::run::CompactionRequested {
                            trigger: "manual".to_owned(),
                        })
                    }
                })
                .collect())
        })
        .await
    }

    async fn park(&self, state: &LoopState, interrupt: Option<Value>) -> Result<(), Stop> {
        let reason = if interrupt.is_some() {
            "interruption"
        } else {
            "end_turn"
        };
        let usage = serde_json::to_value(state.usage).unwrap_or_default();
        self.step(
            None,
            vec![RunEvent::AwaitingInput(AwaitingInput {
                reason: reason.to_owned(),
                interrupt: interrupt.clone(),
                executor: self.inner.owner.clone(),
            })],
            StepChange::Park {
                iterations: i32::try_from(state.iterations).unwrap_or(i32::MAX),
                usage,
                interrupt: interrupt.clone(),
            },
        )
        .await?;
        // A parked run costs a row, not an admission slot (given back with the park's step);
        // `input` admits it again.
        // Input that raced the park: wake ourselves through the normal path.
        if self
            .inner
            .store
            .has_inputs(self.run_id())
            .await
            .unwrap_or(false)
            && self
                .inner
                .store
                .wake_if_parked(self.run_id())
                .await
                .unwrap_or(false)
        {
            let _ = self
                .inner
                .bus
                .dispatch(&Dispatch {
                    run_id: self.run_id(),
                    tenant: self.lease.run.tenant.clone(),
                })
                .await;
        }
        Ok(())
    }

    pub(crate) async fn fail(&self, state: &LoopState, e: &Error) -> Result<(), Stop> {
        self.fail_as(state, StopReason::Error, e).await
    }

    /// Ends the run `failed` for `reason` (`error`, `timeout`), with `e` as its error.
    pub(crate) async fn fail_as(
        &self,
        state: &LoopState,
        reason: StopReason,
        e: &Error,
    ) -> Result<(), Stop> {
        self.persist(
            None,
            vec![RunEvent::Error(ErrorEvent {
                code: e.code.as_str().to_owned(),
                message: e.message.clone(),
            })],
        )
        .await?;
        self.finish(
            state,
            reason,
            Some(json!({"code": e.code.as_str(), "message": e.message})),
        )
        .await
    }

    pub(crate) async fn finish(
        &self,
        state: &LoopState,
        reason: StopReason,
        error: Option<Value>,
    ) -> Result<(), Stop> {
        let usage = serde_json::to_value(state.usage).unwrap_or_default();
        let status: RunStatus = reason.final_status();
        self.step(
            None,
            vec![RunEvent::RunFinished(RunFinished {
                status,
                stop_reason: reason,
                usage: usage.clone(),
                iterations: Some(state.iterations),
                executor: Some(self.inner.owner.clone()),
                reason: None,
            })],
            StepChange::Finish {
                iterations: i32::try_from(state.iterations).unwrap_or(i32::MAX),
                usage,
                reason,
                error,
            },
        )
        .await?;
        metrics::counter!("weft_runs_finished_total", "status" => status.as_str()).increment(1);
        // The admission slot went back with the step.
        if !self.spec.credentials.is_empty() {
            let _ = self.inner.coord.drop_credentials(self.run_id()).await;
        }
        // A root run's ephemeral volume ends with it (a sub-run binds `run` only if its root does).
        if self.lease.run.parent_run_id.is_none()
            && self
                .spec
                .volumes
                .iter()
                .any(|b| b.name == weft_core::volume::RUN_VOLUME)
        {
            let transport = self.inner.substrate_transport.clone();
            crate::tools::files::purge_run_volume(
                &self.inner.jwt,
                &self.principal,
                transport,
                self.run_id(),
            )
            .await;
        }
        // A plan run may end (a budget, a failure) with sub-runs still live: they end with it.
        if reason == StopReason::Cancelled || self.spec.plan.is_some() {
            self.cascade_cancel().await;
        }
        Ok(())
    }

    /// Waits until `run` (this run or one of its sub-runs) holds one of the tenant's admission
    /// slots. `Some(true)` when this call took the slot, `Some(false)` when the run already held
    /// one, `None` when this run was cancelled meanwhile (it then works on without one only to
    /// finish). Redis being unreachable is waited out like a full tenant.
    pub(crate) async fn wait_for_slot(&self, run: RunId) -> Result<Option<bool>, Stop> {
        let tenant = &self.lease.run.tenant;
        loop {
            let wait = match self
                .inner
                .coord
                .admit(
                    tenant,
                    run,
                    self.inner.tenant_max_runs,
                    self.inner.admission_lease,
                )
                .await
            {
                Ok(Admission::Admitted) => return Ok(Some(true)),
                Ok(Admission::AlreadyHeld) => return Ok(Some(false)),
                Ok(Admission::Full { retry_after }) => {
                    retry_after.clamp(Duration::from_millis(20), Duration::from_millis(500))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "admission unavailable; waiting");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = self.cancel.cancelled() => return Ok(None),
                () = self.lost.cancelled() => return Err(Stop::Lost),
                () = self.stop.cancelled() => return Err(Stop::Shutdown),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Cancels every live descendant.
    async fn cascade_cancel(&self) {
        let Ok(children) = self
            .inner
            .store
            .live_descendants(&self.lease.run.tenant, self.run_id())
            .await
        else {
            return;
        };
        for child in children {
            let _ = self.inner.coord.cancel(child).await;
            if let Ok(true) = self
                .inner
                .store
                .cancel_unheld(child, Some("parent cancelled"))
                .await
            {
                let _ = self
                    .inner
                    .coord
                    .release(&self.lease.run.tenant, child)
                    .await;
            }
        }
    }

    /// Hands the run back (queued) for another executor.
    /// Parks the run as `paused` (a `run_paused` event), if it is still asked to: true; false
    /// when a resume came first (the flag is cleared and the run goes on).
    pub(crate) async fn park_paused(&self, state: &LoopState) -> Result<bool, Stop> {
        let iterations = i32::try_from(state.iterations).unwrap_or(i32::MAX);
        let usage = serde_json::to_value(state.usage).unwrap_or_default();
        self.park_paused_with(Some((iterations, usage))).await
    }

    /// [`Driver::park_paused`], recording the run's progress when given (a plan run's is its
    /// own steps' business).
    pub(crate) async fn park_paused_with(
        &self,
        progress: Option<(i32, Value)>,
    ) -> Result<bool, Stop> {
        self.flush_deferred().await?;
        let mut seq = Arc::clone(&self.seq).lock_owned().await;
        let mut f = self.inner.store.fenced(&self.lease).await?;
        let Some(by) = f.pause(progress).await? else {
            f.commit().await?;
            self.pause.send_replace(false);
            return Ok(false);
        };
        // Calls the last turn recorded but did not start are run by the resume, not called
        // unknown.
        let unstarted = std::mem::take(
            &mut *self
                .unstarted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if !unstarted.is_empty() {
            f.forget_unstarted(&unstarted).await?;
        }
        // Parked before its transcript was read (at the lease's start): the seq is read here.
        let first = if *seq > 0 { *seq } else { f.next_seq().await? };
        let mut events = named(vec![RunEvent::RunPaused(RunPaused {
            by: by.as_str().to_owned(),
            executor: self.inner.owner.clone(),
        })]);
        f.append(first, &mut events).await?;
        f.commit().await?;
        *seq = first + 1;
        drop(seq);
        // A paused run holds no admission slot; the resume's lease takes one again.
        let _ = self
            .inner
            .coord
            .release(&self.lease.run.tenant, self.run_id())
            .await;
        tracing::info!(by = by.as_str(), "run paused");
        self.after_commit(None, first, 0, &events).await;
        // A cancel that came while the park committed found the run still held, and left it to
        // this executor: the run, parked now, is ended as a parked one is.
        let cancelled = self.cancel.is_cancelled()
            || self
                .inner
                .coord
                .is_cancelled(self.run_id())
                .await
                .unwrap_or(false);
        if cancelled
            && let Ok(Some((seq, data))) = self
                .inner
                .store
                .cancel_unheld_event(self.run_id(), Some("cancelled while pausing"))
                .await
        {
            self.publish_live(vec![LiveEvent {
                seq,
                kind: EventKind::RunFinished.as_str().to_owned(),
                persisted: true,
                data,
            }])
            .await;
        }
        Ok(true)
    }

    /// Waits until the run is asked to pause and the grace for calls under way has passed
    /// (`executor.pause_grace_ms`); never, while it is not asked.
    pub(crate) async fn pause_grace_over(&self) {
        let mut rx = self.pause.subscribe();
        loop {
            if rx.wait_for(|p| *p).await.is_err() {
                return std::future::pending().await;
            }
            let grace = Duration::from_millis(self.inner.cfg.pause_grace_ms);
            let called_off = tokio::select! {
                () = tokio::time::sleep(grace) => false,
                _ = rx.wait_for(|p| !*p) => true,
            };
            // Called off meanwhile (a resume's message), or in Postgres (a message lost): the
            // calls go on; wait for the next ask.
            if called_off || !*rx.borrow() {
                continue;
            }
            match self.inner.store.asked_to_pause(&[self.run_id()]).await {
                Ok(asked) if asked.is_empty() => {
                    self.pause.send_replace(false);
                }
                _ => return,
            }
        }
    }

    async fn release(&self) -> Result<(), Stop> {
        // What was deferred is written first: the next executor need not repeat it.
        self.flush_deferred().await?;
        let unstarted = std::mem::take(
            &mut *self
                .unstarted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut f = self.inner.store.fenced(&self.lease).await?;
        if !unstarted.is_empty() {
            f.forget_unstarted(&unstarted).await?;
        }
        f.release().await?;
        f.commit().await?;
        Ok(())
    }
}

/// Events with their kinds' names. The store makes them storable in place as it appends them
/// (`weft_core::storable`), so the state folded from them afterwards is the state a resumed run
/// reads back.
fn named(events: Vec<RunEvent>) -> Vec<(String, Value)> {
    events.into_iter().map(RunEvent::into_parts).collect()
}

/// The arguments as JSON, or the raw text when the model produced invalid JSON.
pub(crate) fn parse_input(args: &str) -> Value {
    if args.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(args).unwrap_or_else(|_| Value::String(args.to_owned()))
}

impl crate::tools::RunHost for Driver {
    fn inner(&self) -> &Inner {
        &self.inner
    }

    fn principal(&self) -> &Principal {
        &self.principal
    }

    fn record(&self) -> &weft_store::RunRecord {
        &self.lease.run
    }

    fn spec(&self) -> &RunSpec {
        &self.spec
    }

    fn credentials(
        &self,
    ) -> futures::future::BoxFuture<'_, Arc<std::collections::BTreeMap<String, String>>> {
        Box::pin(Driver::credentials(self))
    }

    fn context_gauge(&self) -> futures::future::BoxFuture<'_, crate::tools::Gauge> {
        Box::pin(async move {
            let window = self.window().await;
            let mut g = self.gauge.lock().map(|g| *g).unwrap_or_default();
            g.window_tokens = window;
            g
        })
    }

    fn spawn_children<'a>(
        &'a self,
        tool_use_id: &'a str,
        items: Vec<(String, String)>,
    ) -> futures::future::BoxFuture<'a, Result<Vec<crate::tools::agent::ChildOutcome>, Stop>> {
        Box::pin(Driver::spawn_children(self, tool_use_id, items))
    }
}
