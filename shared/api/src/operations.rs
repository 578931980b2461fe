//! The operator's routes (docs/operations.md "Pause, drain and resume"): a tenant's drain
//! (`/v1/tenants/{tenant}/drain|resume`, for its tenant admin or an operator) and the fleet's
//! maintenance (`/v1/fleet/drain|resume`, operators only). A run's own pause and resume are run
//! routes (`crate::runs`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{TenantName, Timestamp};
use crate::op::Op;

/// Where a drain is: whether it is in force, and where the runs of its scope are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DrainStatus {
    /// the tenant, or `*` for the fleet
    pub scope: String,
    /// whether the drain is in force: no new run is admitted (503 `tenant_paused`)
    pub draining: bool,
    /// when the drain began (null when none is in force)
    pub since: Option<Timestamp>,
    /// the subject that began it (null when none is in force)
    pub by: Option<String>,
    /// the scope's runs that have not ended, by status
    pub runs: DrainRuns,
    /// true while draining once no run of the scope is running or queued: every one is
    /// parked (`paused`, or `awaiting_input`)
    pub complete: bool,
    /// the scope's last drains and resumes, newest first
    pub transitions: Vec<DrainTransition>,
}

/// Runs not ended, by status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DrainRuns {
    #[schemars(range(min = 0))]
    pub running: i64,
    #[schemars(range(min = 0))]
    pub queued: i64,
    #[schemars(range(min = 0))]
    pub paused: i64,
    #[schemars(range(min = 0))]
    pub awaiting_input: i64,
}

/// One drain or resume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DrainTransition {
    /// `drain` or `resume`
    pub action: String,
    /// the tenant and subject of the principal that asked
    pub tenant: String,
    pub subject: String,
    pub at: Timestamp,
}

fn tenant(op: Op) -> Op {
    op.tag("operations")
        .security(crate::Security::Bearer)
        .path::<TenantName>("tenant", Some("acme".into()))
        .error(400, "a tenant name that is not valid")
        .error(401, "missing, invalid, expired or revoked token")
        .error(403, "the token lacks `tenant:admin`")
        .error(404, "another tenant than the caller's, for a tenant admin")
        .error(503, "the database or Redis is unreachable")
}

fn fleet(op: Op) -> Op {
    op.tag("operations")
        .security(crate::Security::Bearer)
        .error(401, "missing, invalid, expired or revoked token")
        .error(403, "the token lacks `admin`")
        .error(503, "the database or Redis is unreachable")
}

pub fn ops() -> Vec<Op> {
    vec![
        tenant(Op::post("/v1/tenants/{tenant}/drain", "Drain a tenant: admit no new run and park every running one at a step boundary"))
            .describe("Scope: tenant:admin (its own tenant) or admin (any tenant). No body. Idempotent (a drain in force keeps its start). New runs, and input that would wake a parked run, get 503 `tenant_paused` with `Retry-After`; every run of the tenant not ended parks in `paused` at its next step boundary (a parked interactive run stays parked, and is paused if woken). Poll `GET` for progress.")
            .answer::<DrainStatus>(202, "draining; poll GET for progress"),
        tenant(Op::get("/v1/tenants/{tenant}/drain", "A tenant's drain and where its runs are"))
            .describe("Scope: tenant:admin (its own tenant) or admin (any tenant). While draining, runs that have not been told yet (a lost message, or a run made as the drain began) are told again.")
            .ok::<DrainStatus>("the drain"),
        tenant(Op::post("/v1/tenants/{tenant}/resume", "End a tenant's drain: admit runs again and resume the runs it paused"))
            .describe("Scope: tenant:admin (its own tenant) or admin (any tenant). No body. Idempotent. Runs paused by the drain are queued again (a `run_resumed` event each); runs paused by themselves stay paused; while the fleet is in maintenance the runs stay paused under it.")
            .ok::<DrainStatus>("resumed (or nothing was draining)"),
        fleet(Op::post("/v1/fleet/drain", "Maintenance: drain every tenant, hold schedules and webhooks"))
            .describe("Scope: admin (an operator) only. No body. Idempotent. As a tenant's drain, for every tenant; besides, schedules hold their fires (a fire that comes due is retried until the resume, so it happens once) and signed webhooks answer 503 with `Retry-After`.")
            .answer::<DrainStatus>(202, "draining; poll GET /v1/fleet/drain"),
        fleet(Op::get("/v1/fleet/drain", "The fleet's maintenance and where every run is"))
            .describe("Scope: admin (an operator) only. While in maintenance, runs that have not been told yet are told again.")
            .ok::<DrainStatus>("the maintenance"),
        fleet(Op::post("/v1/fleet/resume", "End maintenance: admit runs again and resume the runs it paused"))
            .describe("Scope: admin (an operator) only. No body. Idempotent. Runs of a tenant still draining stay paused under its drain.")
            .ok::<DrainStatus>("resumed (or nothing was draining)"),
    ]
}
