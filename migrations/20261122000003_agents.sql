-- Agent definitions: versioned, content-addressed, tenant-scoped (the substrate's DefStore).
--
-- `agent_defs` holds one row per (tenant, name): which version is active, whether the name is
-- retired, and how many versions it has. `agent_def_versions` holds every version ever put, by
-- number and by content hash; versions are never updated or deleted.

CREATE TABLE agent_defs (
    tenant_id       text        NOT NULL,
    name            text        NOT NULL,
    -- `sha256:<hex>` of the active version (a row of agent_def_versions of the same name).
    active_version  text        NOT NULL,
    retired         boolean     NOT NULL DEFAULT false,
    -- The highest version number under this name; the next version is version_count + 1.
    version_count   integer     NOT NULL CHECK (version_count >= 1),
    -- The active version's description, so listings do not parse content.
    description     text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE agent_def_versions (
    tenant_id       text        NOT NULL,
    name            text        NOT NULL,
    -- 1-based, per name, without gaps.
    number          integer     NOT NULL CHECK (number >= 1),
    -- `sha256:<hex>` of content_json.
    hash            text        NOT NULL,
    -- The canonical JSON of the content: exactly the bytes that were hashed.
    content_json    text        NOT NULL,
    -- The version this one was derived from (the previously active one, or a fork's source,
    -- possibly of another name in the same tenant); NULL for a name's first put.
    parent_version  text,
    -- `<tenant>/<subject>` of the principal that put it, or `boot` for boot-loaded definitions.
    created_by      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name, number),
    UNIQUE (tenant_id, name, hash),
    FOREIGN KEY (tenant_id, name) REFERENCES agent_defs (tenant_id, name)
);

-- VerifyAgent and cross-name forks look versions up by hash within a tenant.
CREATE INDEX agent_def_versions_hash_idx ON agent_def_versions (tenant_id, hash);

-- The active pointer must name a version of the same name. Deferred, because a name's first
-- put inserts the name row before its first version in one transaction.
ALTER TABLE agent_defs
    ADD CONSTRAINT agent_defs_active_version_fkey
    FOREIGN KEY (tenant_id, name, active_version)
    REFERENCES agent_def_versions (tenant_id, name, hash)
    DEFERRABLE INITIALLY DEFERRED;
