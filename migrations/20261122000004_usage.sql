-- One row per model call, written in batches by the usage writer from the usage stream (NATS).
-- `id` is the record's UUIDv7 and the JetStream message id: a redelivered record is written once.
CREATE TABLE usage (
    id                  uuid             PRIMARY KEY,
    -- When the call finished.
    at                  timestamptz      NOT NULL,
    tenant_id           text             NOT NULL,
    subject             text             NOT NULL,
    -- The token the caller presented, when the call came from one.
    token_id            text,
    -- `chat` or `embed`.
    kind                text             NOT NULL,
    -- The provider and model that served the call, and what the caller asked for (a model, an
    -- alias or a tier).
    provider            text             NOT NULL,
    model               text             NOT NULL,
    requested_model     text             NOT NULL,
    input_tokens        bigint           NOT NULL,
    output_tokens       bigint           NOT NULL,
    cache_read_tokens   bigint           NOT NULL,
    cache_write_tokens  bigint           NOT NULL,
    latency_ms          bigint           NOT NULL,
    -- From the price table in config at the time of the call; 0 when the model had no price.
    cost_usd            double precision NOT NULL,
    -- `ok`, or the weft error code that ended the call after the upstream accepted it.
    outcome             text             NOT NULL
);

-- Every query is one tenant over a time range.
CREATE INDEX usage_tenant_at_idx ON usage (tenant_id, at);
