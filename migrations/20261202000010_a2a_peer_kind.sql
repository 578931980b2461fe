-- The definition kind `a2a_peer` (A2A peers, docs/a2a.md) has a digit: kinds are now
-- `[a-z][a-z0-9_]{0,31}`.
ALTER TABLE defs DROP CONSTRAINT defs_kind_check;
ALTER TABLE defs ADD CONSTRAINT defs_kind_check CHECK (kind ~ '^[a-z][a-z0-9_]{0,31}$');
ALTER TABLE def_versions DROP CONSTRAINT def_versions_kind_check;
ALTER TABLE def_versions ADD CONSTRAINT def_versions_kind_check CHECK (kind ~ '^[a-z][a-z0-9_]{0,31}$');
