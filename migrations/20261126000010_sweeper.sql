-- The sweeper: runs that nothing will work on (a dispatch lost between the insert and the
-- publish, JetStream giving up after max_deliver, a lease that lapsed with no redelivery) are
-- found by any executor replica and dispatched again, or ended when they keep losing their
-- executors.

-- How often the sweeper dispatched this run again, and when it last did (its backoff).
ALTER TABLE runs ADD COLUMN sweeps integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN swept_at timestamptz;
-- Leases taken over from an executor whose lease had lapsed (it died or lost its database).
ALTER TABLE runs ADD COLUMN lapses integer NOT NULL DEFAULT 0;

-- The sweeper scans live runs only. Only `status` is in the predicate, and it changes a few
-- times in a run's life, so the progress updates of a running run stay HOT.
CREATE INDEX runs_live_idx ON runs (id) WHERE status IN ('queued', 'running');
