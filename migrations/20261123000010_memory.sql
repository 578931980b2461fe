-- Memory: JSON values by key per (tenant, scope, scope id), with versions, TTLs, the byte usage
-- the quotas are checked against, and the op keys that make tool-call writes exactly-once.

CREATE TABLE memory_entries (
    tenant_id       text        NOT NULL,
    scope           text        NOT NULL CHECK (scope IN ('run', 'agent', 'user', 'tenant')),
    scope_id        text        NOT NULL,
    -- Bytewise order, so listing by prefix and cursor follow UTF-8 order on any locale.
    key             text COLLATE "C" NOT NULL,
    -- Compact JSON, at most 64 KiB.
    value_json      text        NOT NULL,
    -- What the entry counts against the quotas: key + value bytes.
    bytes           integer     NOT NULL,
    -- 1 on create, +1 on every change.
    version         bigint      NOT NULL,
    -- The agent whose quota the entry counts against ('' = none: tenant quota only).
    agent           text        NOT NULL DEFAULT '',
    expires_at      timestamptz,
    -- Set for entries written with `embed`: the vector and the model that made it.
    embedding       real[],
    embedding_model text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id, key)
);

CREATE INDEX memory_entries_expiry_idx ON memory_entries (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE INDEX memory_entries_embedded_idx ON memory_entries (tenant_id, scope, scope_id)
    WHERE embedding IS NOT NULL;

-- Bytes in use per tenant (agent = '') and per (tenant, agent); changed in the transaction of
-- every write and of the expiry sweep, so the quota check is exact under concurrency.
CREATE TABLE memory_usage (
    tenant_id text   NOT NULL,
    agent     text   NOT NULL,
    bytes     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, agent)
);

-- Write operations already applied, by the caller's op key (the executor's
-- "<run_id>:<tool_use_id>"), with the result to return to a repeat.
CREATE TABLE memory_ops (
    tenant_id  text        NOT NULL,
    op_key     text        NOT NULL,
    -- What the op was: `set|delete|incr` and the entry it named; a repeat must match.
    target     text        NOT NULL,
    result     jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, op_key)
);

CREATE INDEX memory_ops_created_idx ON memory_ops (created_at);
