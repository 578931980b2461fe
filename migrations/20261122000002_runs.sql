-- Agent runs, their append-only transcripts and the tool ledger.

CREATE TABLE runs (
    id               uuid PRIMARY KEY,
    tenant_id        text        NOT NULL,
    -- The subject of the principal that created the run.
    subject          text        NOT NULL,
    agent_name       text        NOT NULL,
    agent_hash       text        NOT NULL,
    parent_run_id    uuid REFERENCES runs (id),
    root_run_id      uuid        NOT NULL,
    depth            integer     NOT NULL DEFAULT 0,
    status           text        NOT NULL CHECK (status IN
                         ('queued', 'running', 'awaiting_input', 'succeeded', 'failed', 'cancelled')),
    stop_reason      text CHECK (stop_reason IN
                         ('end_turn', 'max_iterations', 'max_tokens', 'cancelled', 'error', 'timeout')),
    interactive      boolean     NOT NULL DEFAULT false,
    -- What the run was asked to do, resolved at creation: model, effective tools, allowed
    -- hosts, sampling, limits, metadata. Never credentials.
    spec             jsonb       NOT NULL,
    idempotency_key  text,
    -- The fence: bumped by every lease acquisition; every executor write carries it.
    lease_epoch      bigint      NOT NULL DEFAULT 0,
    lease_owner      text,
    lease_expires_at timestamptz,
    -- A pending Interruption.ask: {id, tool_use_id, question}.
    pending_interrupt jsonb,
    usage            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    iterations       integer     NOT NULL DEFAULT 0,
    error            jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX runs_idempotency_idx ON runs (tenant_id, subject, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_tenant_idx ON runs (tenant_id, id DESC);
CREATE INDEX runs_parent_idx ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

-- The transcript: append-only, one row per persisted event, `seq` from 1 without gaps.
CREATE TABLE run_events (
    run_id     uuid        NOT NULL REFERENCES runs (id),
    seq        bigint      NOT NULL,
    tenant_id  text        NOT NULL,
    kind       text        NOT NULL,
    data       jsonb       NOT NULL,
    -- The lease epoch of the writer (0 for writes made without a lease, e.g. by the gateway).
    epoch      bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);

-- Tool calls: recorded before they run ('started') and after ('finished').
CREATE TABLE tool_ledger (
    run_id      uuid        NOT NULL REFERENCES runs (id),
    tool_use_id text        NOT NULL,
    tenant_id   text        NOT NULL,
    tool        text        NOT NULL,
    input       jsonb       NOT NULL,
    idempotent  boolean     NOT NULL,
    status      text        NOT NULL CHECK (status IN ('started', 'finished')),
    result      text,
    is_error    boolean,
    -- Tool-specific progress written with the state change it describes (e.g. child run ids).
    state       jsonb,
    epoch       bigint      NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    PRIMARY KEY (run_id, tool_use_id)
);

-- Input waiting for a run: steering for a running run, or the wake-up of a parked one.
CREATE TABLE run_inputs (
    id         uuid PRIMARY KEY,
    run_id     uuid        NOT NULL REFERENCES runs (id),
    tenant_id  text        NOT NULL,
    text       text        NOT NULL,
    consumed   boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX run_inputs_pending_idx ON run_inputs (run_id) WHERE NOT consumed;
