-- Pause, drain and resume (docs/operations.md): a paused run parks at a step boundary in status
-- `paused`; a tenant's drain or the fleet's maintenance pauses every run of its scope and stops
-- admitting new ones.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status IN
    ('queued', 'running', 'awaiting_input', 'paused', 'succeeded', 'failed', 'cancelled'));

-- Who asked the run to pause (set as soon as it is asked, before the run parks; cleared when it
-- resumes). An executor parks the run at its next step boundary only while this is set.
ALTER TABLE runs ADD COLUMN paused_by text CHECK (paused_by IN ('run', 'tenant', 'fleet'));
CREATE INDEX runs_paused_by_idx ON runs (tenant_id) WHERE paused_by IS NOT NULL;

-- The pauses in force: one row per draining tenant (`scope` is the tenant id), and `*` while the
-- fleet is in maintenance. Redis mirrors them for admission; this is the record.
CREATE TABLE pauses (
    scope      text        PRIMARY KEY,
    since      timestamptz NOT NULL DEFAULT now(),
    -- The principal that asked: its tenant and subject.
    tenant_id  text        NOT NULL,
    subject    text        NOT NULL
);

-- Every drain and resume, in order.
CREATE TABLE pause_transitions (
    id         bigserial   PRIMARY KEY,
    scope      text        NOT NULL,
    action     text        NOT NULL CHECK (action IN ('drain', 'resume')),
    tenant_id  text        NOT NULL,
    subject    text        NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pause_transitions_scope_idx ON pause_transitions (scope, id DESC);
