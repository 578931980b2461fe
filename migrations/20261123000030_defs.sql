-- One definition store for every kind: agent_defs / agent_def_versions become defs /
-- def_versions with a `kind` (`agent`, `skill`, and the kinds that follow) in every key.
-- Existing rows are agents and keep their names, numbers, hashes and lineage.

ALTER TABLE agent_defs DROP CONSTRAINT agent_defs_active_version_fkey;
ALTER TABLE agent_def_versions DROP CONSTRAINT agent_def_versions_tenant_id_name_fkey;
ALTER TABLE agent_def_versions DROP CONSTRAINT agent_def_versions_tenant_id_name_hash_key;
ALTER TABLE agent_def_versions DROP CONSTRAINT agent_def_versions_pkey;
ALTER TABLE agent_defs DROP CONSTRAINT agent_defs_pkey;
DROP INDEX agent_def_versions_hash_idx;

ALTER TABLE agent_defs RENAME TO defs;
ALTER TABLE agent_def_versions RENAME TO def_versions;

-- The kind of definition; the code always names it (no default after the backfill).
ALTER TABLE defs ADD COLUMN kind text NOT NULL DEFAULT 'agent' CHECK (kind ~ '^[a-z][a-z_]{0,31}$');
ALTER TABLE defs ALTER COLUMN kind DROP DEFAULT;
ALTER TABLE def_versions ADD COLUMN kind text NOT NULL DEFAULT 'agent' CHECK (kind ~ '^[a-z][a-z_]{0,31}$');
ALTER TABLE def_versions ALTER COLUMN kind DROP DEFAULT;

ALTER TABLE defs ADD CONSTRAINT defs_pkey PRIMARY KEY (tenant_id, kind, name);
ALTER TABLE def_versions ADD CONSTRAINT def_versions_pkey PRIMARY KEY (tenant_id, kind, name, number);
ALTER TABLE def_versions
    ADD CONSTRAINT def_versions_hash_key UNIQUE (tenant_id, kind, name, hash);
ALTER TABLE def_versions
    ADD CONSTRAINT def_versions_name_fkey
    FOREIGN KEY (tenant_id, kind, name) REFERENCES defs (tenant_id, kind, name);

-- Verify and cross-name forks look versions up by hash within a tenant and kind.
CREATE INDEX def_versions_hash_idx ON def_versions (tenant_id, kind, hash);

-- The active pointer must name a version of the same name. Deferred, because a name's first
-- put inserts the name row before its first version in one transaction.
ALTER TABLE defs
    ADD CONSTRAINT defs_active_version_fkey
    FOREIGN KEY (tenant_id, kind, name, active_version)
    REFERENCES def_versions (tenant_id, kind, name, hash)
    DEFERRABLE INITIALLY DEFERRED;
