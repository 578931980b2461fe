-- Ingress (issue 12): the runtime state of cron schedules, their fires, and webhook deliveries.
-- A schedule's definition is versioned in `defs` like every kind; this row is its live state,
-- written by the substrate whenever the active version changes and by the ingress ticker.
CREATE TABLE schedules (
    id            uuid PRIMARY KEY,
    tenant_id     text        NOT NULL,
    name          text        NOT NULL,
    -- The active version: its hash and canonical content (cron, timezone, agent, input, ...),
    -- so a tick needs nothing but this row.
    def_hash      text        NOT NULL,
    content       text        NOT NULL,
    enabled       boolean     NOT NULL,
    paused        boolean     NOT NULL DEFAULT false,
    -- The next cron slot not yet claimed; NULL when the schedule will not fire again.
    next_fire_at  timestamptz,
    -- Cron fires claimed (what `max_fires` counts), run-now fires, slots skipped by policy.
    cron_fires    bigint      NOT NULL DEFAULT 0,
    run_now_fires bigint      NOT NULL DEFAULT 0,
    skipped       bigint      NOT NULL DEFAULT 0,
    last_fire_at  timestamptz,
    last_run_id   uuid,
    -- Set when `max_fires` is reached or the definition is retired or deleted.
    retired_at    timestamptz,
    retired_why   text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);
-- What every ingress replica's tick scans: due, live schedules in fire-time order.
CREATE INDEX schedules_due ON schedules (next_fire_at)
    WHERE next_fire_at IS NOT NULL AND enabled AND NOT paused AND retired_at IS NULL;

-- One row per fire. (schedule, kind, fire time) is unique: a slot can be claimed once, ever.
CREATE TABLE schedule_fires (
    id            uuid PRIMARY KEY,
    schedule_id   uuid        NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    tenant_id     text        NOT NULL,
    kind          text        NOT NULL CHECK (kind IN ('cron', 'run_now')),
    fire_at       timestamptz NOT NULL,
    def_hash      text        NOT NULL,
    -- claimed: in the database, not yet a run; dispatched: the run exists; skipped: the overlap
    -- policy skipped it; failed: the run could not be made (the error says why).
    status        text        NOT NULL CHECK (status IN ('claimed', 'dispatched', 'skipped', 'failed')),
    claimed_by    text        NOT NULL,
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0,
    run_id        uuid,
    error         text,
    dispatched_at timestamptz,
    -- on_complete actions: NULL = none; pending until the run ends; then done or failed.
    on_complete        text CHECK (on_complete IN ('pending', 'done', 'failed')),
    on_complete_result jsonb,
    UNIQUE (schedule_id, kind, fire_at)
);
-- Claimed fires not yet dispatched (the sweeper's scan), and fires waiting for on_complete.
CREATE INDEX schedule_fires_claimed ON schedule_fires (claimed_at) WHERE status = 'claimed';
-- The claim's overlap check (is a fire of this schedule claimed and not yet a run?) reads only
-- the few claimed rows of one schedule, however many fires it has had.
CREATE INDEX schedule_fires_claimed_by_schedule ON schedule_fires (schedule_id) WHERE status = 'claimed';
CREATE INDEX schedule_fires_on_complete ON schedule_fires (dispatched_at) WHERE on_complete = 'pending';
CREATE INDEX schedule_fires_by_schedule ON schedule_fires (schedule_id, fire_at DESC);

-- Accepted webhook deliveries: the dedupe memory. A delivery id is burned only once accepted;
-- a replay answers with the same run. Rejected deliveries are not stored here (triage keeps
-- the last few verdicts in Redis).
CREATE TABLE webhook_deliveries (
    tenant_id    text        NOT NULL,
    webhook      text        NOT NULL,
    delivery_id  text        NOT NULL CHECK (length(delivery_id) BETWEEN 1 AND 300),
    run_id       uuid,
    channel_seq  bigint,
    accepted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, webhook, delivery_id)
);
CREATE INDEX webhook_deliveries_age ON webhook_deliveries (accepted_at);
