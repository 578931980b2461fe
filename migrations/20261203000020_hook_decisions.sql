-- Tool-use hooks (docs/hooks.md): what the hooks of a call decided, recorded with the call so a
-- replay after a crash reuses the decision instead of calling the hooks again.
-- `{"pre": {...}}` is written before the tool runs (with the input it runs with); `"post"` is
-- added with the result. NULL: no hook applied to the call.
ALTER TABLE tool_ledger ADD COLUMN hooks jsonb;
