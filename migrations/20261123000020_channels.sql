-- Channels: named, tenant-scoped message streams with per-consumer cursors (the substrate's
-- ChannelStore).
--
-- `channels` holds one row per (tenant, name) with its scope and bounds; `id` names the channel
-- in cursors and wake-up subjects, and a channel deleted and created again gets a new id (old
-- cursors are then refused). A channel's scope splits it into partitions: `partition` is '' for
-- a tenant channel, `user:<subject>` or `agent:<name>` otherwise. `channel_partitions` holds the
-- next sequence number of each partition; publishing locks that row, so seqs are assigned in
-- commit order without gaps. `channel_messages` holds the messages (JSON text), trimmed to
-- `max_messages` per partition in the publishing transaction and swept after `expires_at`.
-- `channel_cursors` holds each consumer's committed position (the seq it has acked).

CREATE TABLE channels (
    tenant_id       text        NOT NULL,
    name            text        NOT NULL,
    id              bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    scope           text        NOT NULL CHECK (scope IN ('agent', 'user', 'tenant')),
    ttl_seconds     bigint      NOT NULL CHECK (ttl_seconds >= 1),
    max_messages    bigint      NOT NULL CHECK (max_messages >= 1),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE channel_partitions (
    tenant_id       text        NOT NULL,
    channel_id      bigint      NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    partition       text        NOT NULL,
    -- The seq the next message gets (seqs start at 1; a cursor at 0 is the beginning).
    next_seq        bigint      NOT NULL CHECK (next_seq >= 1),
    PRIMARY KEY (channel_id, partition)
);

CREATE TABLE channel_messages (
    tenant_id       text        NOT NULL,
    channel_id      bigint      NOT NULL,
    partition       text        NOT NULL,
    seq             bigint      NOT NULL CHECK (seq >= 1),
    payload         text        NOT NULL,
    -- Exactly-once key of the publish (`<run_id>:<tool_use_id>` from the executor).
    op_key          text,
    -- `<tenant>/<subject>` of the publisher.
    published_by    text        NOT NULL,
    published_at    timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (channel_id, partition, seq),
    FOREIGN KEY (channel_id, partition) REFERENCES channel_partitions (channel_id, partition)
        ON DELETE CASCADE
);

CREATE UNIQUE INDEX channel_messages_op_key
    ON channel_messages (channel_id, partition, op_key) WHERE op_key IS NOT NULL;
CREATE INDEX channel_messages_expiry ON channel_messages (expires_at);

CREATE TABLE channel_cursors (
    tenant_id       text        NOT NULL,
    channel_id      bigint      NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    partition       text        NOT NULL,
    consumer        text        NOT NULL,
    -- The last acked seq.
    seq             bigint      NOT NULL CHECK (seq >= 0),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel_id, partition, consumer)
);
