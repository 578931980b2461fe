-- Volumes: file trees stored as content-addressed blobs plus a per-volume index, with a
-- changelog (one row per mutation, written in the mutation's transaction), snapshots (a tree
-- hash and the index it names) and byte usage per volume and per tenant, checked in the write's
-- transaction. Named volumes also have a `volume` definition (mode, quota) in `defs`; ephemeral
-- ones belong to a root run and are purged when it ends.

CREATE TABLE volumes (
    id          uuid        PRIMARY KEY,
    tenant_id   text        NOT NULL,
    -- A named volume's name; for an ephemeral one, `run:<root run id>`.
    name        text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('named', 'ephemeral')),
    -- The root run of an ephemeral volume.
    root_run_id uuid,
    -- `rw` or `ro`: a `ro` volume refuses every write whatever a binding says.
    mode        text        NOT NULL DEFAULT 'rw' CHECK (mode IN ('rw', 'ro')),
    -- Bytes the volume may hold (its files' sizes; snapshots and history not counted).
    quota_bytes bigint      NOT NULL,
    bytes       bigint      NOT NULL DEFAULT 0,
    files       integer     NOT NULL DEFAULT 0,
    -- The tree hash of the current index (`sha256:<hex>`), kept with every change.
    tree_hash   text        NOT NULL,
    -- Changes so far; a change's `seq` is this value after it.
    seq         bigint      NOT NULL DEFAULT 0,
    -- A named volume's description (a copy of its definition's).
    description text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name),
    CHECK ((kind = 'ephemeral') = (root_run_id IS NOT NULL))
);
CREATE INDEX volumes_root_run_idx ON volumes (root_run_id) WHERE root_run_id IS NOT NULL;

-- Blobs by content, per tenant (one tenant never learns that another holds some content).
-- `data` is set when the blob is stored in Postgres; otherwise `store` names where it is
-- (`dir` or `s3`, under the key `<tenant>/<sha256>`).
CREATE TABLE volume_blobs (
    tenant_id  text        NOT NULL,
    sha256     text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size       bigint      NOT NULL,
    store      text        NOT NULL CHECK (store IN ('pg', 'dir', 's3')),
    data       bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- When a write last stored or named the blob (PutBlobs, an Apply's put). The collector
    -- deletes a blob no index, change or snapshot names only once this is older than its grace
    -- period, and a write that names a blob updates this in its transaction, so the collector's
    -- row lock re-checks it and skips the blob.
    touched_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, sha256),
    CHECK ((store = 'pg') = (data IS NOT NULL))
);

-- The index: one row per file.
CREATE TABLE volume_files (
    volume_id  uuid        NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
    -- Relative to the volume root, `/`-separated, no `.`/`..` segments (bytewise order).
    path       text COLLATE "C" NOT NULL,
    sha256     text        NOT NULL,
    size       bigint      NOT NULL,
    -- 420 (0644) or 493 (0755).
    mode       integer     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (volume_id, path)
);
-- The blob collector asks whether any file names a blob.
CREATE INDEX volume_files_sha_idx ON volume_files (sha256);

-- The changelog: one row per mutation (a tool call, an HTTP write, an import, an undo, a
-- restore, a sandboxed command's sync).
CREATE TABLE volume_changes (
    id          uuid        PRIMARY KEY,
    tenant_id   text        NOT NULL,
    volume_id   uuid        NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
    seq         bigint      NOT NULL,
    -- The caller's exactly-once key (the executor's "<run_id>:<tool_use_id>"); a repeat returns
    -- this change instead of applying again.
    op_key      text,
    run_id      uuid,
    tool_use_id text,
    -- What made it: a tool name (`Write`, `Edit`, `Move`, `Delete`, `Exec`), `http`, `import`,
    -- `undo` or `restore`.
    source      text        NOT NULL,
    -- The principal's subject.
    subject     text        NOT NULL,
    -- The change this one undid, for an undo.
    undoes      uuid,
    -- Set when a later undo reverted this change.
    undone_by   uuid,
    tree_before text        NOT NULL,
    tree_after  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (volume_id, seq)
);
CREATE UNIQUE INDEX volume_changes_op_key_idx ON volume_changes (tenant_id, op_key)
    WHERE op_key IS NOT NULL;
CREATE INDEX volume_changes_run_idx ON volume_changes (volume_id, run_id) WHERE run_id IS NOT NULL;

-- The files a change touched: `before_sha`/`after_sha` are NULL where the file did not exist.
CREATE TABLE volume_change_files (
    change_id  uuid NOT NULL REFERENCES volume_changes (id) ON DELETE CASCADE,
    path       text COLLATE "C" NOT NULL,
    before_sha text,
    after_sha  text,
    -- Modes before and after (NULL where the file did not exist).
    before_mode integer,
    after_mode  integer,
    -- Sizes before and after (NULL where the file did not exist): an undo restores the before
    -- side without looking its blob up.
    before_size bigint,
    after_size  bigint,
    PRIMARY KEY (change_id, path)
);
-- The blob collector asks whether any change names a blob.
CREATE INDEX volume_change_files_before_idx ON volume_change_files (before_sha)
    WHERE before_sha IS NOT NULL;
CREATE INDEX volume_change_files_after_idx ON volume_change_files (after_sha)
    WHERE after_sha IS NOT NULL;

-- Snapshots: a tree hash and the index it names, as JSON `[[path, sha256, size, mode], …]`.
CREATE TABLE volume_snapshots (
    id         uuid        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    volume_id  uuid        NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
    label      text        NOT NULL DEFAULT '',
    tree_hash  text        NOT NULL,
    seq        bigint      NOT NULL,
    files      integer     NOT NULL,
    bytes      bigint      NOT NULL,
    entries    jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX volume_snapshots_volume_idx ON volume_snapshots (volume_id, created_at);
-- The blob collector asks whether any snapshot names a blob (`entries @> [[sha]]`).
CREATE INDEX volume_snapshots_entries_idx ON volume_snapshots USING gin (entries jsonb_path_ops);

-- Bytes of files in every volume of a tenant; changed in the transaction of every write.
CREATE TABLE volume_usage (
    tenant_id text   PRIMARY KEY,
    bytes     bigint NOT NULL DEFAULT 0
);
