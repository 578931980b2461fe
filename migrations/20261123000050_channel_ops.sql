-- Exactly-once publishes: the op keys of channel publishes (the executor's
-- "<run_id>:<tool_use_id>"), with where the message went, so a repeat returns the original seq
-- and time even after the message itself was trimmed (`max_messages`) or swept (TTL).
--
-- A row is written in the publishing transaction (INSERT ... ON CONFLICT DO NOTHING: a repeat
-- finds the recorded row instead), never by the trim or the message expiry, and is swept by the
-- channel sweeper 7 days after `published_at` (like `memory_ops`). A key is remembered per
-- (channel, partition); deleting the channel deletes its keys.
--
-- `channel_messages.op_key` is no longer written: a message may outlive its key (ttl up to 30
-- days), and a repeat after the key was swept must not collide with its unique index. The keys
-- already on stored messages are copied here below.

CREATE TABLE channel_ops (
    tenant_id       text        NOT NULL,
    channel_id      bigint      NOT NULL,
    partition       text        NOT NULL,
    op_key          text        NOT NULL,
    -- The seq the publish got, and its time (the message's `published_at`).
    seq             bigint      NOT NULL CHECK (seq >= 1),
    published_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, channel_id, partition, op_key),
    FOREIGN KEY (channel_id, partition) REFERENCES channel_partitions (channel_id, partition)
        ON DELETE CASCADE
);

-- The FK's cascade from channel_partitions, and the sweep.
CREATE INDEX channel_ops_partition ON channel_ops (channel_id, partition);
CREATE INDEX channel_ops_published ON channel_ops (published_at);

INSERT INTO channel_ops (tenant_id, channel_id, partition, op_key, seq, published_at)
SELECT tenant_id, channel_id, partition, op_key, seq, published_at
FROM channel_messages
WHERE op_key IS NOT NULL
ON CONFLICT DO NOTHING;
