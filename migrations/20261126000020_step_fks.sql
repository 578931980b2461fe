-- The transcript and the tool ledger drop their foreign keys to `runs`. Every row of them is
-- written by a statement that first finds (and locks, or updates) its run row under the lease's
-- epoch, or in the transaction that inserts the run, and runs are never deleted; the key check
-- repeated that lookup once per inserted row, about a third of a step's cost in Postgres.
ALTER TABLE run_events DROP CONSTRAINT IF EXISTS run_events_run_id_fkey;
ALTER TABLE tool_ledger DROP CONSTRAINT IF EXISTS tool_ledger_run_id_fkey;
