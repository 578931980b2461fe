//! Sub-runs: the `Agent` tool's children. Each child is created (or found again, on resume)
//! with its parent's record of it in one transaction, takes an admission slot of the tenant,
//! and is awaited under the parent's `max_concurrent_children`; a parent cancelled meanwhile
//! cancels its children.

use std::time::Duration;

use futures::StreamExt as _;
use serde::Serialize;
use serde_json::{Map, Value};
use weft_bus::Dispatch;
use weft_core::RunId;
use weft_core::agent::AgentContent;
use weft_core::run::{
    EventKind, Narrowing, RunEvent, RunSpec, RunStarted, SubRunFinished, SubRunStarted, UserInput,
};
use weft_store::{NewRun, RunRecord};

use crate::driver::Driver;
use crate::stop::Stop;
use crate::tools::agent::ChildOutcome;
use crate::tools::http::HostAllowlist;

/// What the parent's ledger records of its call: the children made so far, by index, so a
/// resumed call finds them.
#[derive(Serialize)]
struct Children {
    children: std::collections::BTreeMap<String, RunId>,
}

impl Driver {
    /// Runs `items` (agent, input) as sub-runs of call `tool_use_id` and returns each one's
    /// outcome, in order. While it waits on its sub-runs this run does no work: it lends its
    /// slot to them (each sub-run takes a slot of the tenant before it starts) and takes one
    /// again after, so the tenant's cap counts working runs and a parent never deadlocks its own
    /// children.
    pub(crate) async fn spawn_children(
        &self,
        tool_use_id: &str,
        items: Vec<(String, String)>,
    ) -> Result<Vec<ChildOutcome>, Stop> {
        let _ = self
            .inner
            .coord
            .release(&self.lease.run.tenant, self.run_id())
            .await;
        let results = futures::future::join_all(
            items
                .into_iter()
                .enumerate()
                .map(|(i, (agent, text))| self.child(tool_use_id, i, agent, text)),
        )
        .await;
        self.wait_for_slot(self.run_id()).await?;
        results.into_iter().collect()
    }

    /// Starts (or finds, on resume) one child run, waits for it under the concurrency cap and
    /// returns its outcome — a child's failure is a value, not an error of this call.
    async fn child(
        &self,
        tool_use_id: &str,
        index: usize,
        agent: String,
        text: String,
    ) -> Result<ChildOutcome, Stop> {
        let Ok(_permit) = self.children.clone().acquire_owned().await else {
            return Err(Stop::Infra("child semaphore closed".into()));
        };
        let parent_id = self.lease.run.id;
        let request = ChildRequest {
            key: format!("sub:{parent_id}:{tool_use_id}:{index}"),
            agent: &agent,
            text,
            read_only: false,
            model: None,
            response_format: None,
        };
        let made = self
            .make_child(request, |run| {
                let children = Children {
                    children: [(index.to_string(), run.id)].into(),
                };
                (
                    vec![RunEvent::SubRunStarted(SubRunStarted {
                        run_id: run.id,
                        agent: run.agent_name.clone(),
                        tool_use_id: tool_use_id.to_owned(),
                        index,
                    })],
                    Some((
                        tool_use_id.to_owned(),
                        serde_json::to_value(&children).unwrap_or_default(),
                    )),
                )
            })
            .await?;
        let record = match made {
            Made::Refused(why) => return Ok(ChildOutcome::failed(agent, why)),
            Made::Cancelled(id) => return Ok(ChildOutcome::cancelled(id, agent)),
            Made::Run(r) => *r,
        };
        let Some(record) = self.watch_child(record.clone()).await? else {
            return Ok(ChildOutcome::cancelled(Some(record.id), record.agent_name));
        };
        let output = self.inner.store.last_assistant_text(record.id).await?;
        let result = ChildOutcome::Finished {
            run_id: record.id,
            agent: record.agent_name.clone(),
            status: record.status,
            stop_reason: record.stop_reason,
            output,
            error: record.error.clone(),
        };
        self.persist(
            None,
            vec![RunEvent::SubRunFinished(SubRunFinished {
                run_id: record.id,
                status: record.status,
                stop_reason: record.stop_reason,
            })],
        )
        .await?;
        Ok(result)
    }

    /// Makes the sub-run `req` asks for — or, on resume, finds the one made before under its
    /// key — with a slot of the tenant's. `on_created` gives the events (and the ledger state
    /// of a tool call) committed with a new child's row, in one transaction.
    pub(crate) async fn make_child(
        &self,
        req: ChildRequest<'_>,
        on_created: impl FnOnce(&RunRecord) -> (Vec<RunEvent>, Option<(String, Value)>),
    ) -> Result<Made, Stop> {
        let v = match self.get_agent(req.agent, None).await {
            Ok(v) => v,
            Err(e) => return Ok(Made::Refused(e.message)),
        };
        let Ok(def) = serde_json::from_str::<AgentContent>(&v.content_json) else {
            return Ok(Made::Refused(
                "the agent definition could not be read".into(),
            ));
        };
        let parent = &self.lease.run;
        // The child may reach at most what this run may: this run's effective list narrows it.
        let mine = HostAllowlist::narrow(
            &self.inner.cfg.allowed_hosts,
            self.spec.allowed_hosts.as_deref(),
            self.spec.caller_allowed_hosts.as_deref(),
        )
        .patterns();
        let mut volumes = self.spec.volumes.clone();
        if req.read_only {
            for b in &mut volumes {
                b.mode = weft_core::volume::VolumeMode::Ro;
            }
        }
        let mut spec = RunSpec::resolve(
            &def,
            Narrowing {
                allowed_hosts: Some(mine),
                // Sub-runs inherit their parent's channel ACL and can never widen it.
                channels: Some(self.spec.channels.clone()),
                // ... and its volumes: the intersection of parent and child, `ro` winning.
                volumes: Some(volumes),
                tools: req
                    .read_only
                    .then(|| READ_ONLY_TOOLS.iter().map(|t| (*t).to_owned()).collect()),
                metadata: Value::Object(Map::new()),
                // Sub-runs inherit the parent's compaction settings unless their agent has its own.
                inherited_compaction: self.spec.compaction.clone(),
                ..Narrowing::default()
            },
        );
        if let Some(model) = req.model {
            spec.model = model;
        }
        // A shape for every answer only binds a run that answers with text alone: a run with
        // tools answers with tool calls on the way.
        if spec.tools.is_empty() {
            spec.response_format = req.response_format;
        }
        // Tools a plan takes from every sub-run below it (its roles' and theirs), by name or
        // glob.
        let excluded = self.plan_exclusions().await?;
        spec.tools
            .retain(|t| !excluded.iter().any(|g| weft_core::mcp::glob_matches(g, t)));
        // A sub-run uses its parent's credentials.
        spec.credentials = self.spec.credentials.clone();
        let child_id = RunId::new();
        let Some(took) = self.wait_for_slot(child_id).await? else {
            return Ok(Made::Cancelled(None));
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
            idempotency_key: Some(req.key),
            lease: None,
            initial_events: vec![
                RunEvent::RunStarted(RunStarted {
                    agent: v.name.clone(),
                    agent_hash: v.hash.clone(),
                    model: spec.model.clone(),
                    parent_run_id: Some(parent.id),
                    depth: Some(parent.depth + 1),
                    ..RunStarted::default()
                })
                .into_parts(),
                RunEvent::UserInput(UserInput::text(req.text)).into_parts(),
            ],
        };
        // The child row and the parent's record of it commit together.
        let mut child = None;
        self.commit(None, async |f| {
            let (run, created) = f.create_child(&new).await?;
            let mut events = Vec::new();
            if created {
                let (evs, ledger) = on_created(&run);
                if let Some((tool_use_id, state)) = ledger {
                    f.ledger_state(&tool_use_id, &state).await?;
                }
                events = evs;
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
                return Ok(Made::Cancelled(Some(child.id)));
            }
        }
        Ok(Made::Run(Box::new(child)))
    }

    /// The tools (names or globs) a sub-run of this run may not have: below a plan run, its
    /// process's `tools_excluded` and `Interruption` — nobody watches a sub-run of a plan, so a
    /// question from it would park it, and the plan, for good; a plan asks people only its own
    /// questions (an approval, a split vote). Nothing elsewhere. A plan run's own list is in its
    /// spec; a sub-run further down finds its nearest plan ancestor's.
    async fn plan_exclusions(&self) -> Result<Vec<String>, Stop> {
        let inherited = match &self.spec.plan {
            Some(plan) => Some(plan.tools_excluded.clone()),
            None if self.lease.run.parent_run_id.is_some() => {
                self.inner
                    .store
                    .plan_exclusions(&self.lease.run.tenant, self.run_id())
                    .await?
            }
            None => None,
        };
        Ok(inherited
            .map(|mut list| {
                list.push(PLAN_EXCLUDED_TOOL.to_owned());
                list
            })
            .unwrap_or_default())
    }

    /// Cancels sub-run `child` (it ends `cancelled` wherever it is), saying `why`.
    pub(crate) async fn stop_child(&self, child: RunId, why: &str) {
        let _ = self.inner.coord.cancel(child).await;
        if matches!(
            self.inner.store.cancel_unheld(child, Some(why)).await,
            Ok(true)
        ) {
            let _ = self
                .inner
                .coord
                .release(&self.lease.run.tenant, child)
                .await;
        }
    }

    /// Dispatches a live child and waits for it to end: its final row, or `None` when this run
    /// was cancelled meanwhile, or (a plan run) its wall-time budget ran out — the child is
    /// cancelled too.
    pub(crate) async fn watch_child(&self, child: RunRecord) -> Result<Option<RunRecord>, Stop> {
        let mut sub = self
            .inner
            .bus
            .subscribe_events(child.id)
            .await
            .map_err(|e| Stop::Infra(e.to_string()))?;
        let mut record = child;
        if !record.status.is_terminal() {
            // A sub-run uses its parent's credentials (its MCP servers may need them).
            if !self.spec.credentials.is_empty() {
                let credentials = self.credentials().await;
                if credentials.is_empty() {
                    return Err(Stop::Infra(
                        "the run's credentials could not be read for its sub-run".into(),
                    ));
                }
                self.inner
                    .coord
                    .put_credentials(record.id, &credentials, 7 * 24 * 3600)
                    .await
                    .map_err(|e| Stop::Infra(e.to_string()))?;
            }
            self.inner
                .bus
                .dispatch(&Dispatch {
                    run_id: record.id,
                    tenant: record.tenant.clone(),
                })
                .await
                .map_err(|e| Stop::Infra(e.to_string()))?;
        }
        // The loop reads the row first; the recheck's first tick is 2 s later, not at once.
        let mut recheck = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(2),
            Duration::from_secs(2),
        );
        // One grace for the wait, however often the child's row is read again.
        let grace = self.pause_grace_over();
        tokio::pin!(grace);
        // Whether the child's event subscription is still open; once closed, the 2 s recheck
        // alone notices its end.
        let mut open = true;
        loop {
            if let Some(r) = self.inner.store.get(&record.tenant, record.id).await? {
                record = r;
            }
            if record.status.is_terminal() {
                return Ok(Some(record));
            }
            // A paused parent whose child parked too has nothing to wait for: it parks (the
            // resumed parent finds the child by its key and waits again).
            if record.status == weft_core::run::RunStatus::Paused && *self.pause.borrow() {
                return Err(Stop::Paused);
            }
            // A plan run's deadline stops what it waits on: a sub-run that never ends (one
            // that parked, or just runs long) cannot hold the run past its budget.
            let left = self.wall_time_left();
            if left == Some(Duration::ZERO) {
                let why = if self.spec.plan.is_some() {
                    "the plan run's wall-time budget ran out"
                } else {
                    "the code agent's wall clock (code.max_wall_s) ran out"
                };
                self.stop_child(record.id, why).await;
                return Ok(None);
            }
            let deadline = async {
                match left {
                    // A hair past it, so the budget's own reckoning agrees it ran out.
                    Some(d) => tokio::time::sleep(d + Duration::from_millis(10)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(deadline);
            // The child's row is read again on its `run_finished`, the recheck or the
            // deadline, not on each of its other events.
            loop {
                tokio::select! {
                    () = self.cancel.cancelled() => {
                        let _ = self.inner.coord.cancel(record.id).await;
                        if matches!(self.inner.store.cancel_unheld(record.id, Some("parent cancelled")).await, Ok(true)) {
                            let _ = self.inner.coord.release(&record.tenant, record.id).await;
                        }
                        return Ok(None);
                    }
                    () = self.lost.cancelled() => return Err(Stop::Lost),
                    () = self.stop.cancelled() => return Err(Stop::Shutdown),
                    () = &mut grace => return Err(Stop::Paused),
                    m = sub.next(), if open => match m {
                        None => open = false,
                        Some(m) if weft_bus::decode_events(&m.payload)
                            .iter()
                            .any(|e| e.kind == EventKind::RunFinished.as_str()) => break,
                        Some(_) => {}
                    },
                    _ = recheck.tick() => break,
                    () = &mut deadline => break,
                }
            }
        }
    }

    /// Seconds since this run was created.
    pub(crate) fn elapsed_s(&self) -> u64 {
        let elapsed = time::OffsetDateTime::now_utc() - self.lease.run.created_at;
        u64::try_from(elapsed.whole_seconds()).unwrap_or(0)
    }

    /// What is left of a plan run's wall-time budget or a code agent's wall clock (`max_wall_s`
    /// since it was created; zero once it ran out, as the step function reckons it from
    /// [`Driver::elapsed_s`]); `None` for a run without one.
    pub(crate) fn wall_time_left(&self) -> Option<Duration> {
        let max = match &self.spec.plan {
            Some(plan) => plan.limits.max_wall_s,
            None => u64::from(self.spec.max_wall_s?),
        };
        if max == 0 {
            return None;
        }
        if self.elapsed_s() >= max {
            return Some(Duration::ZERO);
        }
        let end = self.lease.run.created_at + time::Duration::seconds(i64::try_from(max).ok()?);
        let left = end - time::OffsetDateTime::now_utc();
        Some(Duration::try_from(left).unwrap_or(Duration::ZERO))
    }
}

/// The tool no sub-run below a plan run gets: a question to a person nobody watches for.
const PLAN_EXCLUDED_TOOL: &str = "Interruption";

/// The tools a read-only sub-run (a verifier) may keep of its agent's: none that writes.
const READ_ONLY_TOOLS: &[&str] = &["Read", "Glob", "Grep", "List", "Context"];

/// A sub-run to make: its key (unique per parent; a resumed parent finds the child made
/// before), agent, first message, and whether it may only read (its volumes bound `ro`, only
/// [`READ_ONLY_TOOLS`]), on which model (`None` = its agent's).
pub(crate) struct ChildRequest<'a> {
    pub key: String,
    pub agent: &'a str,
    pub text: String,
    pub read_only: bool,
    pub model: Option<String>,
    /// The shape of its answers (`RunSpec::response_format`), kept only when it has no tools.
    pub response_format: Option<Value>,
}

/// What [`Driver::make_child`] made.
pub(crate) enum Made {
    Run(Box<RunRecord>),
    /// The agent cannot be used (unknown, unreadable): the message says why.
    Refused(String),
    /// This run was cancelled before the child started (the child's id when it exists).
    Cancelled(Option<RunId>),
}
