//! One run under a lease: the I/O around [`crate::machine`]. It loads the transcript, asks the
//! step function what to do, does it (a model turn over the router's `Chat` stream, tool calls
//! through the ledger, parking, finishing), persists what happened under the lease's epoch,
//! publishes it live, and asks again.
//!
//! Event writes are serialized by `seq` (an async mutex held across the write) so the
//! transcript commits in seq order: a watcher that has seen seq N never later finds a gap below
//! it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use weft_bus::{Dispatch, LiveEvent};
use weft_coord::Admission;
use weft_core::agent::AgentContent;
use weft_core::message::{ContentBlock, FinishReason, Message, Role, Usage};
use weft_core::run::{EventKind, RunSpec, RunStatus, StopReason};
use weft_core::{Error, ErrorCode, Principal, RunId, Scope, Scopes};
use weft_proto::v1;
use weft_store::{Fenced, Lease, LeaseRefused, LedgerEntry, NewRun, RunStoreError};

use crate::Inner;
use crate::machine::{self, Action, Facts, LoopState, ToolCall};
use crate::tools::http::HostAllowlist;
use crate::tools::{Builtin, ToolOutput, specs_for};

/// How a driven run ended for this executor.
enum Outcome {
    /// Finished or parked: the dispatch is done.
    Done,
    /// Another executor took the run; its dispatch is theirs now.
    LeaseLost,
    /// Shutting down: the run was handed back for another executor.
    Released,
    /// An infrastructure failure; retry the dispatch later.
    Retry,
}

/// Handles one dispatch message.
pub(crate) async fn handle(inner: Arc<Inner>, msg: jetstream::Message, stop: CancellationToken) {
    let Some(d) = weft_bus::decode_dispatch(&msg.payload) else {
        tracing::warn!("dropping an undecodable dispatch message");
        let _ = msg.ack_with(AckKind::Term).await;
        return;
    };
    let ttl = i64::try_from(inner.cfg.lease_ttl_ms).unwrap_or(i64::MAX);
    let lease = match inner.store.acquire_lease(d.run_id, &inner.owner, ttl).await {
        Ok(Ok(lease)) => lease,
        Ok(Err(LeaseRefused::Missing | LeaseRefused::NotRunnable(_))) => {
            let _ = msg.ack().await;
            return;
        }
        Ok(Err(LeaseRefused::Held { remaining_ms })) => {
            // The holder may be dead: look again once its lease would have lapsed.
            let wait = Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0) + 250);
            let _ = msg.ack_with(AckKind::Nak(Some(wait))).await;
            return;
        }
        Err(e) => {
            tracing::warn!(run_id = %d.run_id, error = %e, "cannot take a lease");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
            return;
        }
    };
    let run_id = lease.run.id;
    let (cancel, input) = inner.hold(run_id);
    let msg = Arc::new(msg);
    let lost = CancellationToken::new();
    let beat_stop = CancellationToken::new();
    let heartbeat = tokio::spawn(heartbeat(
        inner.clone(),
        lease.clone(),
        msg.clone(),
        lost.clone(),
        beat_stop.clone(),
    ));
    let span = tracing::info_span!("run", run_id = %run_id, tenant = %lease.run.tenant, epoch = lease.epoch);
    let driver = Driver {
        inner: inner.clone(),
        principal: Principal {
            tenant: lease.run.tenant.clone(),
            subject: lease.run.subject.clone(),
            scopes: Scopes::new([Scope::RunsCreate, Scope::RunsRead, Scope::LlmCall]),
            token_id: None,
        },
        spec: serde_json::from_value(lease.run.spec.clone()).unwrap_or_default(),
        lease,
        cancel,
        input,
        lost,
        stop,
        seq: Mutex::new(0),
        children: Arc::new(Semaphore::new(1)),
    };
    let outcome = tracing::Instrument::instrument(driver.drive(), span).await;
    beat_stop.cancel();
    let _ = heartbeat.await;
    inner.unhold(run_id);
    match outcome {
        Outcome::Done => {
            let _ = msg.ack().await;
        }
        Outcome::LeaseLost => {}
        Outcome::Released => {
            let _ = msg.ack_with(AckKind::Nak(None)).await;
        }
        Outcome::Retry => {
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
        }
    }
}

/// Renews the lease, tells JetStream the work goes on, and keeps the admission slot, until
/// `stop`; cancels `lost` when the lease is gone.
async fn heartbeat(
    inner: Arc<Inner>,
    lease: Lease,
    msg: Arc<jetstream::Message>,
    lost: CancellationToken,
    stop: CancellationToken,
) {
    let every = Duration::from_millis(inner.cfg.heartbeat_ms);
    let ttl = i64::try_from(inner.cfg.lease_ttl_ms).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match inner
            .store
            .renew_lease(lease.run.id, lease.epoch, ttl)
            .await
        {
            Ok(()) => {}
            Err(RunStoreError::StaleLease(_)) => {
                tracing::warn!("lease lost; stopping this run here");
                lost.cancel();
                return;
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew the lease"),
        }
        let _ = msg.ack_with(AckKind::Progress).await;
        // Renews only a slot the run holds: a parent that lent its slot to its sub-runs has none.
        let _ = inner
            .coord
            .renew(&lease.run.tenant, lease.run.id, inner.admission_lease)
            .await;
    }
}

struct Driver {
    inner: Arc<Inner>,
    principal: Principal,
    lease: Lease,
    spec: RunSpec,
    /// Cancelled by a cancel request.
    cancel: CancellationToken,
    /// Notified when input arrives for this run.
    input: Arc<Notify>,
    /// Cancelled when the heartbeat finds the lease gone.
    lost: CancellationToken,
    /// The process is shutting down.
    stop: CancellationToken,
    /// The next free seq; held across each write so commits happen in seq order.
    seq: Mutex<i64>,
    /// Sub-runs live at once (`max_concurrent_children`).
    children: Arc<Semaphore>,
}

/// Why the loop stopped early.
enum Stop {
    Lost,
    Shutdown,
    /// Worth retrying: the database or a peer was unreachable.
    Infra(String),
    /// Never worth retrying: the database refused what this step writes.
    Permanent(String),
}

impl From<RunStoreError> for Stop {
    fn from(e: RunStoreError) -> Self {
        match e {
            RunStoreError::StaleLease(_) => Self::Lost,
            e if e.is_permanent() => Self::Permanent(e.to_string()),
            e => Self::Infra(e.to_string()),
        }
    }
}

impl Driver {
    fn run_id(&self) -> RunId {
        self.lease.run.id
    }

    async fn drive(mut self) -> Outcome {
        match self.drive_inner().await {
            Ok(()) => Outcome::Done,
            Err(Stop::Lost) => Outcome::LeaseLost,
            Err(Stop::Shutdown) => match self.release().await {
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
        if self.load(&mut state).await.is_err() {
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
        if self
            .inner
            .coord
            .is_cancelled(self.run_id())
            .await
            .unwrap_or(false)
        {
            self.cancel.cancel();
        }
        // A run works only while it holds one of its tenant's slots: the gateway took it for a
        // new root run, a parent for its sub-run; a run resumed after a crash or after lending
        // its slot to its sub-runs takes one again here, waiting while the tenant is full.
        self.wait_for_slot(self.run_id()).await?;
        let def = match self.agent().await {
            Ok(d) => d,
            Err(e) => {
                let mut state = LoopState::default();
                self.load(&mut state).await?;
                return self.fail(&state, &e).await;
            }
        };
        self.children = Arc::new(Semaphore::new(
            usize::try_from(self.spec.max_concurrent_children.max(1)).unwrap_or(1),
        ));
        let mut state = LoopState::default();
        let mut ledger = self.load(&mut state).await?;
        let mut input_waiting = self.inner.store.has_inputs(self.run_id()).await?;
        loop {
            if self.lost.is_cancelled() {
                return Err(Stop::Lost);
            }
            if self.stop.is_cancelled() {
                return Err(Stop::Shutdown);
            }
            if !self.cancel.is_cancelled()
                && self
                    .inner
                    .coord
                    .is_cancelled(self.run_id())
                    .await
                    .unwrap_or(false)
            {
                self.cancel.cancel();
            }
            let facts = Facts {
                max_iterations: self.spec.max_iterations.max(1),
                interactive: self.lease.run.interactive,
                cancelled: self.cancel.is_cancelled(),
                input_waiting,
            };
            match machine::next_action(&state, facts) {
                Action::Done => return Ok(()),
                Action::Finish(reason) => return self.finish(&state, reason, None).await,
                Action::Park => return self.park(&state, None).await,
                Action::TakeInput => {
                    self.take_input(&mut state).await?;
                    input_waiting = false;
                }
                Action::CallModel => {
                    if let Err(e) = self.model_turn(&def, &mut state).await? {
                        if self.cancel.is_cancelled() {
                            continue;
                        }
                        return self.fail(&state, &e).await;
                    }
                }
                Action::RunTools(calls) => {
                    if let Some(parked) =
                        self.run_tools(&def, &mut state, &mut ledger, calls).await?
                    {
                        return self.park(&state, Some(parked)).await;
                    }
                }
            }
            // Steering input that arrived meanwhile is taken before the next model turn.
            if futures::FutureExt::now_or_never(self.input.notified()).is_some() {
                input_waiting = true;
            }
        }
    }

    /// A gRPC request carrying this run's principal as an internal JWT, and the trace context.
    fn internal<T>(&self, msg: T) -> Result<tonic::Request<T>, Error> {
        let mut req = tonic::Request::new(msg);
        let token = self.inner.jwt.sign(&self.principal)?;
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::internal())?;
        req.metadata_mut().insert("authorization", value);
        weft_telemetry::inject_trace_context(req.metadata_mut());
        Ok(req)
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

    async fn get_agent(
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

    /// Folds the transcript into `state`; returns the ledger by call id.
    async fn load(&self, state: &mut LoopState) -> Result<HashMap<String, LedgerEntry>, Stop> {
        let mut from = 1;
        loop {
            let page = self.inner.store.events(self.run_id(), from, 1000).await?;
            let n = page.len();
            for e in &page {
                machine::apply(state, e.seq, &e.kind, &e.data);
                from = e.seq + 1;
            }
            if n < 1000 {
                break;
            }
        }
        *self.seq.lock().await = state.last_seq + 1;
        let ledger = self.inner.store.ledger(self.run_id()).await?;
        Ok(ledger
            .into_iter()
            .map(|l| (l.tool_use_id.clone(), l))
            .collect())
    }

    /// Appends events under the lease, folds them into `state` and publishes them live.
    async fn persist(
        &self,
        state: Option<&mut LoopState>,
        events: Vec<(EventKind, Value)>,
    ) -> Result<(), Stop> {
        let mut events = named(events);
        let mut seq = self.seq.lock().await;
        let first = *seq;
        self.inner
            .store
            .append(&self.lease, first, &mut events)
            .await?;
        *seq += i64::try_from(events.len()).unwrap_or(0);
        drop(seq);
        self.after_commit(state, first, &events).await;
        Ok(())
    }

    /// One fenced transaction: `write` makes its changes and returns the events that go with
    /// them; they are appended at the next seqs, committed together, folded into `state` and
    /// published. The seq lock is held throughout, so commits land in seq order.
    async fn commit(
        &self,
        state: Option<&mut LoopState>,
        write: impl AsyncFnOnce(&mut Fenced) -> Result<Vec<(EventKind, Value)>, RunStoreError>,
    ) -> Result<(), Stop> {
        let mut seq = self.seq.lock().await;
        let first = *seq;
        let mut f = self.inner.store.fenced(&self.lease).await?;
        let mut events = named(write(&mut f).await?);
        f.append(first, &mut events).await?;
        f.commit().await?;
        *seq += i64::try_from(events.len()).unwrap_or(0);
        drop(seq);
        self.after_commit(state, first, &events).await;
        Ok(())
    }

    async fn after_commit(
        &self,
        mut state: Option<&mut LoopState>,
        first: i64,
        events: &[(String, Value)],
    ) {
        for (i, (kind, data)) in (0i64..).zip(events) {
            if let Some(s) = state.as_deref_mut() {
                machine::apply(s, first + i, kind, data);
            }
            let ev = LiveEvent {
                seq: first + i,
                kind: kind.clone(),
                persisted: true,
                data: data.clone(),
            };
            if let Err(e) = self.inner.bus.publish_event(self.run_id(), &ev).await {
                tracing::debug!(error = %e, "live event not published; watchers read it from the transcript");
            }
        }
    }

    async fn live_delta(&self, last_seq: i64, text: &str) {
        let ev = LiveEvent {
            seq: last_seq,
            kind: EventKind::TextDelta.as_str().to_owned(),
            persisted: false,
            data: json!({ "text": text }),
        };
        let _ = self.inner.bus.publish_event(self.run_id(), &ev).await;
    }

    /// One model turn. `Ok(Err(e))` is a model failure that ends the run.
    async fn model_turn(
        &self,
        def: &AgentContent,
        state: &mut LoopState,
    ) -> Result<Result<(), Error>, Stop> {
        let mut messages = Vec::with_capacity(state.messages.len() + 1);
        if !def.system_prompt.is_empty() {
            messages.push(weft_proto::message_to_proto(&Message {
                role: Role::System,
                content: vec![ContentBlock::text(def.system_prompt.clone())],
                name: None,
            }));
        }
        messages.extend(state.messages.iter().map(weft_proto::message_to_proto));
        let tools = specs_for(&self.spec.tools)
            .iter()
            .map(weft_proto::tool_to_proto)
            .collect();
        let s = &self.spec.sampling;
        let req = v1::ChatRequest {
            model: self.spec.model.clone(),
            messages,
            tools,
            sampling: Some(v1::Sampling {
                temperature: s.temperature,
                top_p: s.top_p,
                max_tokens: self.spec.max_tokens,
                stop: s.stop.clone(),
                seed: s.seed,
                presence_penalty: None,
                frequency_penalty: None,
            }),
            stream: true,
            ..Default::default()
        };
        let call = self.stream_turn(req, state.last_seq);
        let turn = tokio::select! {
            () = self.cancel.cancelled() => return Ok(Err(Error::new(ErrorCode::Conflict, "cancelled"))),
            () = self.lost.cancelled() => return Err(Stop::Lost),
            () = self.stop.cancelled() => return Err(Stop::Shutdown),
            t = call => t,
        };
        let turn = match turn {
            Ok(t) => t,
            Err(TurnError::Model(e)) => return Ok(Err(e)),
            Err(TurnError::Stop(s)) => return Err(s),
        };
        let mut content = Vec::new();
        if !turn.text.is_empty() {
            content.push(ContentBlock::text(turn.text));
        }
        let mut calls = Vec::new();
        for (id, name, args) in turn.calls.into_values() {
            calls.push((
                EventKind::ToolCall,
                json!({"id": id, "name": name, "input": parse_input(&args)}),
            ));
            content.push(ContentBlock::ToolUse {
                id,
                name,
                input_json: args,
            });
        }
        let message = Message {
            role: Role::Assistant,
            content,
            name: None,
        };
        let mut events = Vec::new();
        events.push((
            EventKind::AssistantMessage,
            json!({"message": message, "finish_reason": turn.finish.unwrap_or(FinishReason::Stop).as_openai()}),
        ));
        events.extend(calls);
        events.push((
            EventKind::Usage,
            serde_json::to_value(turn.usage).unwrap_or_default(),
        ));
        // Persist the turn and the run's progress together.
        let mut total = state.usage;
        total.add(&turn.usage);
        let iterations = i32::try_from(state.iterations + 1).unwrap_or(i32::MAX);
        self.commit(Some(state), async |f| {
            f.progress(iterations, &serde_json::to_value(total).unwrap_or_default())
                .await?;
            Ok(events)
        })
        .await?;
        Ok(Ok(()))
    }

    /// Streams one turn from the router: `provider_chosen` is persisted as soon as the router
    /// picks a candidate (so a watcher knows an executor is on the turn), text deltas go out live.
    async fn stream_turn(&self, req: v1::ChatRequest, last_seq: i64) -> Result<Turn, TurnError> {
        let mut last_seq = last_seq;
        let r = self.internal(req)?;
        let mut client = self.inner.router.clone();
        let mut stream = client
            .chat(r)
            .await
            .map_err(|s| Error::from(&s))?
            .into_inner();
        let mut turn = Turn::default();
        while let Some(ev) = stream.next().await {
            let ev = ev.map_err(|s| Error::from(&s))?;
            match ev.event {
                Some(v1::chat_event::Event::ProviderChosen(p)) => {
                    let chosen =
                        json!({"provider": p.provider, "model": p.model, "fallbacks": p.fallbacks});
                    self.persist(None, vec![(EventKind::ProviderChosen, chosen)])
                        .await
                        .map_err(TurnError::Stop)?;
                    last_seq = *self.seq.lock().await - 1;
                }
                Some(v1::chat_event::Event::TextDelta(t)) => {
                    self.live_delta(last_seq, &t.text).await;
                    turn.text.push_str(&t.text);
                }
                Some(v1::chat_event::Event::ToolCallStart(t)) => {
                    let e = turn.calls.entry(t.index).or_default();
                    e.0 = t.id;
                    e.1 = t.name;
                }
                Some(v1::chat_event::Event::ToolCallDelta(t)) => {
                    turn.calls
                        .entry(t.index)
                        .or_default()
                        .2
                        .push_str(&t.arguments);
                }
                Some(v1::chat_event::Event::Usage(u)) => {
                    turn.usage = weft_proto::usage_from_proto(u)
                }
                Some(v1::chat_event::Event::Finish(f)) => {
                    turn.finish = Some(weft_proto::finish_from_proto(f.reason));
                }
                Some(v1::chat_event::Event::ProviderFallback(f)) => {
                    let failed = json!({"provider": f.provider, "model": f.model, "code": f.code, "message": f.message});
                    self.persist(None, vec![(EventKind::ProviderFallback, failed)])
                        .await
                        .map_err(TurnError::Stop)?;
                    last_seq = *self.seq.lock().await - 1;
                }
                Some(
                    v1::chat_event::Event::ReasoningDelta(_)
                    | v1::chat_event::Event::ReasoningSignature(_),
                )
                | None => {}
            }
        }
        Ok(turn)
    }

    /// Runs the pending calls of a turn. Returns the interruption to park on, if one asks.
    async fn run_tools(
        &self,
        def: &AgentContent,
        state: &mut LoopState,
        ledger: &mut HashMap<String, LedgerEntry>,
        calls: Vec<ToolCall>,
    ) -> Result<Option<Value>, Stop> {
        // Results recorded before (a resumed run) are reused, never re-executed; calls that
        // started without a recorded result are re-run only when idempotent.
        let mut to_run = Vec::new();
        let mut ask = None;
        for c in calls {
            let input = parse_input(&c.input_json);
            let builtin = Builtin::parse(&c.name).filter(|_| self.spec.tools.contains(&c.name));
            match ledger.get(&c.id) {
                Some(l) if l.finished => {
                    let out = ToolOutput {
                        text: l.result.clone().unwrap_or_default(),
                        is_error: l.is_error.unwrap_or(false),
                    };
                    self.persist(
                        Some(state),
                        vec![(EventKind::ToolResult, result_event(&c, &out, true))],
                    )
                    .await?;
                    continue;
                }
                Some(l) if !l.idempotent => {
                    let out = ToolOutput::error(format!(
                        "the outcome of this `{}` call is unknown: it started before the run moved to another executor and its result was never recorded, so it may or may not have taken effect; check before repeating it",
                        c.name
                    ));
                    self.finish_call(state, &c, &out).await?;
                    continue;
                }
                _ => {}
            }
            match builtin {
                None => {
                    let out = ToolOutput::error(format!(
                        "tool `{}` is not available to this run; available: {}",
                        c.name,
                        self.spec.tools.join(", ")
                    ));
                    self.finish_call(state, &c, &out).await?;
                }
                Some(Builtin::Interruption) if ask.is_none() => ask = Some((c, input)),
                Some(b) => to_run.push((c, input, b)),
            }
        }
        // Record every call before any runs.
        if !to_run.is_empty() {
            let mut f = self.inner.store.fenced(&self.lease).await?;
            for (c, input, b) in &to_run {
                f.ledger_start(&c.id, &c.name, input, b.is_idempotent(input))
                    .await?;
            }
            f.commit().await?;
        }
        let limit = self.inner.cfg.max_parallel_tools.max(1);
        let iteration = state.iterations;
        let mut running =
            futures::stream::iter(to_run.into_iter().map(|(c, input, b)| async move {
                let out = self.call_tool(def, iteration, &c, &input, b).await;
                (c, out)
            }))
            .buffer_unordered(limit);
        let mut done = Vec::new();
        loop {
            let next = tokio::select! {
                () = self.lost.cancelled() => return Err(Stop::Lost),
                () = self.stop.cancelled() => return Err(Stop::Shutdown),
                n = running.next() => n,
            };
            let Some((c, out)) = next else { break };
            done.push((c, out?));
        }
        drop(running);
        for (c, out) in done {
            self.finish_call(state, &c, &out).await?;
            ledger.remove(&c.id);
        }
        let Some((c, input)) = ask else {
            return Ok(None);
        };
        if let Some(l) = ledger.get(&c.id).filter(|l| l.finished) {
            let out = ToolOutput {
                text: l.result.clone().unwrap_or_default(),
                is_error: l.is_error.unwrap_or(false),
            };
            self.persist(
                Some(state),
                vec![(EventKind::ToolResult, result_event(&c, &out, true))],
            )
            .await?;
            return Ok(None);
        }
        let question = input
            .get("question")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if question.is_empty() {
            let out = ToolOutput::error(
                "`question` is required: Interruption {\"op\": \"ask\", \"question\": \"…\"}",
            );
            self.finish_call(state, &c, &out).await?;
            return Ok(None);
        }
        let interrupt =
            json!({"id": format!("int_{}", c.id), "tool_use_id": c.id, "question": question});
        self.commit(Some(state), async |f| {
            f.ledger_start(&c.id, &c.name, &input, true).await?;
            Ok(vec![(EventKind::Interruption, interrupt.clone())])
        })
        .await?;
        Ok(Some(interrupt))
    }

    /// Records a call's result in the ledger and the transcript, together.
    async fn finish_call(
        &self,
        state: &mut LoopState,
        c: &ToolCall,
        out: &ToolOutput,
    ) -> Result<(), Stop> {
        self.commit(Some(state), async |f| {
            f.ledger_start(&c.id, &c.name, &parse_input(&c.input_json), false)
                .await?;
            f.ledger_finish(&c.id, &out.text, out.is_error).await?;
            Ok(vec![(EventKind::ToolResult, result_event(c, out, false))])
        })
        .await
    }

    async fn call_tool(
        &self,
        def: &AgentContent,
        iteration: u32,
        c: &ToolCall,
        input: &Value,
        b: Builtin,
    ) -> Result<ToolOutput, Stop> {
        Ok(match b {
            Builtin::Context => self.context_tool(def, iteration, input),
            Builtin::Http => {
                let allow = HostAllowlist::narrow(
                    &self.inner.cfg.allowed_hosts,
                    self.spec.allowed_hosts.as_deref(),
                    self.spec.caller_allowed_hosts.as_deref(),
                );
                self.inner.http.call(input, &allow).await
            }
            Builtin::Agent => self.agent_tool(c, input).await?,
            Builtin::Interruption => ToolOutput::error("only one Interruption.ask per turn"),
        })
    }

    fn context_tool(&self, def: &AgentContent, iteration: u32, input: &Value) -> ToolOutput {
        match input.get("op").and_then(Value::as_str) {
            Some("time") => {
                let now = time::OffsetDateTime::now_utc()
                    .format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_default();
                ToolOutput::ok(json!({ "time": now }).to_string())
            }
            Some("self") => ToolOutput::ok(
                json!({
                    "run_id": self.run_id(),
                    "agent": self.lease.run.agent_name,
                    "version": self.lease.run.agent_hash,
                    "description": def.description,
                    "model": self.spec.model,
                    "iteration": iteration,
                    "depth": self.lease.run.depth,
                    "limits": {
                        "max_iterations": self.spec.max_iterations,
                        "max_tokens": self.spec.max_tokens,
                        "max_concurrent_children": self.spec.max_concurrent_children,
                        "max_depth": self.inner.cfg.max_depth,
                    },
                    "tools": self.spec.tools,
                })
                .to_string(),
            ),
            other => ToolOutput::error(format!(
                "`op` must be \"time\" or \"self\", got {}",
                other.map_or_else(|| "nothing".to_owned(), |o| format!("{o:?}"))
            )),
        }
    }

    /// `Agent.spawn` / `Agent.parallel_spawn`.
    async fn agent_tool(&self, c: &ToolCall, input: &Value) -> Result<ToolOutput, Stop> {
        let op = input.get("op").and_then(Value::as_str);
        let items: Vec<(String, String)> = match op {
            Some("spawn") => {
                let agent = input.get("agent").and_then(Value::as_str);
                let text = input.get("input").and_then(Value::as_str);
                match (agent, text) {
                    (Some(a), Some(t)) => vec![(a.to_owned(), t.to_owned())],
                    _ => {
                        return Ok(ToolOutput::error(
                            "spawn needs `agent` and `input` (strings)",
                        ));
                    }
                }
            }
            Some("parallel_spawn") => {
                let Some(runs) = input.get("runs").and_then(Value::as_array) else {
                    return Ok(ToolOutput::error(
                        "parallel_spawn needs `runs`: [{agent, input}, …]",
                    ));
                };
                let mut items = Vec::new();
                for (i, r) in runs.iter().enumerate() {
                    match (
                        r.get("agent").and_then(Value::as_str),
                        r.get("input").and_then(Value::as_str),
                    ) {
                        (Some(a), Some(t)) => items.push((a.to_owned(), t.to_owned())),
                        _ => {
                            return Ok(ToolOutput::error(format!(
                                "runs[{i}] needs `agent` and `input` (strings)"
                            )));
                        }
                    }
                }
                items
            }
            _ => {
                return Ok(ToolOutput::error(
                    "`op` must be \"spawn\" or \"parallel_spawn\"",
                ));
            }
        };
        if items.is_empty() || items.len() > 64 {
            return Ok(ToolOutput::error(format!(
                "give between 1 and 64 runs, got {}",
                items.len()
            )));
        }
        let depth = u32::try_from(self.lease.run.depth)
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        if depth > self.inner.cfg.max_depth {
            return Ok(ToolOutput::error(format!(
                "sub-runs may nest at most {} deep (executor.max_depth); this run is at depth {}",
                self.inner.cfg.max_depth, self.lease.run.depth
            )));
        }
        // While it waits on its sub-runs this run does no work: it lends its slot to them (each
        // sub-run takes a slot of the tenant before it starts) and takes one again after, so
        // the tenant's cap counts working runs and a parent never deadlocks its own children.
        let _ = self
            .inner
            .coord
            .release(&self.lease.run.tenant, self.run_id())
            .await;
        let results = futures::future::join_all(
            items
                .into_iter()
                .enumerate()
                .map(|(i, (agent, text))| self.child(c, i, agent, text)),
        )
        .await;
        self.wait_for_slot(self.run_id()).await?;
        let mut out = Vec::new();
        for r in results {
            out.push(r?);
        }
        let text = if op == Some("spawn") {
            out.into_iter().next().unwrap_or(Value::Null).to_string()
        } else {
            json!({ "results": out }).to_string()
        };
        Ok(ToolOutput::ok(text))
    }

    /// Starts (or finds, on resume) one child run, waits for it under the concurrency cap and
    /// returns its outcome — a child's failure is a value, not an error of this call.
    async fn child(
        &self,
        c: &ToolCall,
        index: usize,
        agent: String,
        text: String,
    ) -> Result<Value, Stop> {
        let Ok(_permit) = self.children.clone().acquire_owned().await else {
            return Err(Stop::Infra("child semaphore closed".into()));
        };
        let v = match self.get_agent(&agent, None).await {
            Ok(v) => v,
            Err(e) => return Ok(json!({"agent": agent, "status": "failed", "error": e.message})),
        };
        let def: AgentContent = match serde_json::from_str(&v.content_json) {
            Ok(d) => d,
            Err(_) => {
                return Ok(
                    json!({"agent": agent, "status": "failed", "error": "the agent definition could not be read"}),
                );
            }
        };
        let parent = &self.lease.run;
        // The child may reach at most what this run may: this run's effective list narrows it.
        let mine = HostAllowlist::narrow(
            &self.inner.cfg.allowed_hosts,
            self.spec.allowed_hosts.as_deref(),
            self.spec.caller_allowed_hosts.as_deref(),
        )
        .patterns();
        let allowed_hosts =
            Some(HostAllowlist::narrow(&mine, def.allowed_hosts.as_deref(), None).patterns());
        let spec = RunSpec {
            model: def.model_ref(),
            tools: def.tools.clone(),
            allowed_hosts,
            caller_allowed_hosts: None,
            sampling: def.sampling.clone(),
            max_iterations: def.max_iterations,
            max_tokens: def.max_tokens,
            max_concurrent_children: def.max_concurrent_children,
            metadata: json!({}),
        };
        let child_id = RunId::new();
        let Some(took) = self.wait_for_slot(child_id).await? else {
            return Ok(json!({"agent": agent, "status": "cancelled"}));
        };
        let new = NewRun {
            id: child_id,
            tenant: parent.tenant.clone(),
            subject: parent.subject.clone(),
            agent_name: v.name.clone(),
            agent_hash: v.hash.clone(),
            parent_run_id: Some(parent.id),
            root_run_id: parent.root_run_id,
            depth: parent.depth + 1,
            interactive: false,
            spec: serde_json::to_value(&spec).unwrap_or_default(),
            idempotency_key: Some(format!("sub:{}:{}:{index}", parent.id, c.id)),
            initial_events: vec![
                (
                    EventKind::RunStarted.as_str().to_owned(),
                    json!({"agent": v.name, "agent_hash": v.hash, "model": spec.model, "parent_run_id": parent.id, "depth": parent.depth + 1}),
                ),
                (
                    EventKind::UserInput.as_str().to_owned(),
                    json!({ "text": text }),
                ),
            ],
        };
        // The child row and the parent's record of it commit together.
        let mut child = None;
        self.commit(None, async |f| {
            let (run, created) = f.create_child(&new).await?;
            let mut events = Vec::new();
            if created {
                f.ledger_state(&c.id, &json!({ "children": { index.to_string(): run.id } }))
                    .await?;
                events.push((
                    EventKind::SubRunStarted,
                    json!({"run_id": run.id, "agent": run.agent_name, "tool_use_id": c.id, "index": index}),
                ));
            }
            child = Some(run);
            Ok(events)
        })
        .await?;
        let Some(child) = child else {
            return Err(Stop::Infra("the child run was not recorded".into()));
        };
        if child.id != child_id {
            // Resumed: the child was made before. The slot taken for a new one goes back, and
            // the existing child, if still live, needs a slot of its own.
            if took {
                let _ = self.inner.coord.release(&parent.tenant, child_id).await;
            }
            if !child.status.is_terminal() && self.wait_for_slot(child.id).await?.is_none() {
                return Ok(
                    json!({"run_id": child.id, "agent": child.agent_name, "status": "cancelled"}),
                );
            }
        }
        let mut sub = self
            .inner
            .bus
            .subscribe_events(child.id)
            .await
            .map_err(|e| Stop::Infra(e.to_string()))?;
        let mut record = child;
        if !record.status.is_terminal() {
            self.inner
                .bus
                .dispatch(&Dispatch {
                    run_id: record.id,
                    tenant: record.tenant.clone(),
                })
                .await
                .map_err(|e| Stop::Infra(e.to_string()))?;
        }
        let mut recheck = tokio::time::interval(Duration::from_secs(2));
        loop {
            if let Some(r) = self.inner.store.get(&record.tenant, record.id).await? {
                record = r;
            }
            if record.status.is_terminal() {
                break;
            }
            tokio::select! {
                () = self.cancel.cancelled() => {
                    let _ = self.inner.coord.cancel(record.id).await;
                    if matches!(self.inner.store.cancel_unheld(record.id, Some("parent cancelled")).await, Ok(true)) {
                        let _ = self.inner.coord.release(&record.tenant, record.id).await;
                    }
                    return Ok(json!({"run_id": record.id, "agent": record.agent_name, "status": "cancelled"}));
                }
                () = self.lost.cancelled() => return Err(Stop::Lost),
                () = self.stop.cancelled() => return Err(Stop::Shutdown),
                m = sub.next() => {
                    let finished = m
                        .and_then(|m| weft_bus::decode_event(&m.payload))
                        .is_some_and(|e| e.kind == EventKind::RunFinished.as_str());
                    if !finished { continue; }
                }
                _ = recheck.tick() => {}
            }
        }
        let output = self.inner.store.last_assistant_text(record.id).await?;
        let result = json!({
            "run_id": record.id,
            "agent": record.agent_name,
            "status": record.status,
            "stop_reason": record.stop_reason,
            "output": output,
            "error": record.error,
        });
        self.persist(
            None,
            vec![(
                EventKind::SubRunFinished,
                json!({"run_id": record.id, "status": record.status, "stop_reason": record.stop_reason}),
            )],
        )
        .await?;
        Ok(result)
    }

    async fn take_input(&self, state: &mut LoopState) -> Result<(), Stop> {
        self.commit(Some(state), async |f| {
            let texts = f.take_inputs().await?;
            Ok(texts
                .into_iter()
                .map(|t| (EventKind::UserInput, json!({ "text": t })))
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
        self.commit(None, async |f| {
            f.park(interrupt.as_ref()).await?;
            f.progress(
                i32::try_from(state.iterations).unwrap_or(i32::MAX),
                &serde_json::to_value(state.usage).unwrap_or_default(),
            )
            .await?;
            Ok(vec![(
                EventKind::AwaitingInput,
                json!({ "reason": reason, "interrupt": interrupt, "executor": self.inner.owner }),
            )])
        })
        .await?;
        // A parked run costs a row, not an admission slot; `input` admits it again.
        let _ = self
            .inner
            .coord
            .release(&self.lease.run.tenant, self.run_id())
            .await;
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

    async fn fail(&self, state: &LoopState, e: &Error) -> Result<(), Stop> {
        self.persist(
            None,
            vec![(
                EventKind::Error,
                json!({"code": e.code.as_str(), "message": e.message}),
            )],
        )
        .await?;
        self.finish(
            state,
            StopReason::Error,
            Some(json!({"code": e.code.as_str(), "message": e.message})),
        )
        .await
    }

    async fn finish(
        &self,
        state: &LoopState,
        reason: StopReason,
        error: Option<Value>,
    ) -> Result<(), Stop> {
        let usage = serde_json::to_value(state.usage).unwrap_or_default();
        let status: RunStatus = reason.final_status();
        self.commit(None, async |f| {
            f.progress(i32::try_from(state.iterations).unwrap_or(i32::MAX), &usage)
                .await?;
            f.finish(reason, &usage, error.as_ref()).await?;
            Ok(vec![(
                EventKind::RunFinished,
                json!({"status": status, "stop_reason": reason, "usage": usage, "iterations": state.iterations, "executor": self.inner.owner}),
            )])
        })
        .await?;
        let _ = self
            .inner
            .coord
            .release(&self.lease.run.tenant, self.run_id())
            .await;
        if reason == StopReason::Cancelled {
            self.cascade_cancel().await;
        }
        Ok(())
    }

    /// Waits until `run` (this run or one of its sub-runs) holds one of the tenant's admission
    /// slots. `Some(true)` when this call took the slot, `Some(false)` when the run already held
    /// one, `None` when this run was cancelled meanwhile (it then works on without one only to
    /// finish). Redis being unreachable is waited out like a full tenant.
    async fn wait_for_slot(&self, run: RunId) -> Result<Option<bool>, Stop> {
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
    async fn release(&self) -> Result<(), Stop> {
        let mut f = self.inner.store.fenced(&self.lease).await?;
        f.release().await?;
        f.commit().await?;
        Ok(())
    }
}

/// Why a model turn did not complete.
enum TurnError {
    /// The model call failed: the run ends with this error.
    Model(Error),
    /// The lease was lost or the process is stopping.
    Stop(Stop),
}

impl From<Error> for TurnError {
    fn from(e: Error) -> Self {
        Self::Model(e)
    }
}

#[derive(Default)]
struct Turn {
    text: String,
    /// By index: (id, name, arguments).
    calls: BTreeMap<u32, (String, String, String)>,
    usage: Usage,
    finish: Option<FinishReason>,
}

/// Events with their kinds' names. The store makes them storable in place as it appends them
/// (`weft_core::storable`), so the state folded from them afterwards is the state a resumed run
/// reads back.
fn named(events: Vec<(EventKind, Value)>) -> Vec<(String, Value)> {
    events
        .into_iter()
        .map(|(k, d)| (k.as_str().to_owned(), d))
        .collect()
}

/// The arguments as JSON, or the raw text when the model produced invalid JSON.
fn parse_input(args: &str) -> Value {
    if args.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(args).unwrap_or_else(|_| Value::String(args.to_owned()))
}

fn result_event(c: &ToolCall, out: &ToolOutput, reused: bool) -> Value {
    json!({
        "tool_use_id": c.id,
        "name": c.name,
        "content": out.text,
        "is_error": out.is_error,
        "reused": reused,
    })
}
