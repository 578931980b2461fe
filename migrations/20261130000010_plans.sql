-- Plan runs (docs/harness.md): the versions of each plan run's plan, people's approvals and
-- retry/skip requests waiting for the run's orchestrator, and evaluations (every verdict, and
-- what the `Evaluation` tool submits), aggregated per agent definition version.

-- One row per plan version. The executor writes a version when a writer's plan validates
-- (`proposed`), marks it `accepted` when it runs (older ones `superseded`); the gateway records
-- an approval on it (`approved_by`), or an edit as the next version, approved.
CREATE TABLE run_plans (
    run_id      uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    version     integer     NOT NULL CHECK (version >= 1),
    tenant_id   text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('proposed', 'accepted', 'superseded')),
    source      text        NOT NULL CHECK (source IN ('planner', 'caller', 'replanner', 'person')),
    tasks       jsonb       NOT NULL,
    approved_by text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, version)
);

CREATE INDEX run_plans_tenant_idx ON run_plans (tenant_id, run_id);

-- A person's retry or skip of a task, taken (and marked) by the run's orchestrator between
-- batches, in the same transaction as the events that record it.
CREATE TABLE plan_controls (
    id          bigserial   PRIMARY KEY,
    run_id      uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    tenant_id   text        NOT NULL,
    task_id     text        NOT NULL,
    action      text        NOT NULL CHECK (action IN ('retry', 'skip')),
    subject     text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    taken_at    timestamptz
);

CREATE INDEX plan_controls_waiting_idx ON plan_controls (run_id) WHERE taken_at IS NULL;

-- One row per verdict (or submitted evaluation), written with the event that records it.
CREATE TABLE evaluations (
    id           uuid        PRIMARY KEY,
    tenant_id    text        NOT NULL,
    run_id       uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    task_id      text        NOT NULL DEFAULT '',
    attempt      integer     NOT NULL DEFAULT 0,
    -- The definition evaluated: the agent that did the work, at its content hash.
    agent_name   text        NOT NULL,
    agent_hash   text        NOT NULL,
    emitter_role text        NOT NULL CHECK (emitter_role IN ('checks', 'verifier', 'human', 'agent')),
    verdict      text        NOT NULL CHECK (verdict IN ('pass', 'fail', 'inconclusive')),
    score        double precision NOT NULL CHECK (score >= 0 AND score <= 1),
    dimensions   jsonb       NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- A verdict is recorded once per attempt and role, however often a resumed run gets there.
    UNIQUE (run_id, task_id, attempt, emitter_role)
);

CREATE INDEX evaluations_agent_idx ON evaluations (tenant_id, agent_name, agent_hash);

-- A plan run can stop on a budget (`budget_exhausted`, status `failed`).
ALTER TABLE runs DROP CONSTRAINT runs_stop_reason_check;
ALTER TABLE runs ADD CONSTRAINT runs_stop_reason_check CHECK (stop_reason IN
    ('end_turn', 'max_iterations', 'max_tokens', 'cancelled', 'error', 'timeout', 'budget_exhausted'));
