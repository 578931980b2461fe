-- Long runs (docs/runs.md "Long runs"): a run's pending input may be a request to compact its
-- context (`POST /v1/runs/{id}/compact`) as well as text.
ALTER TABLE run_inputs ADD COLUMN kind text NOT NULL DEFAULT 'text'
    CHECK (kind IN ('text', 'compact'));
