-- The Responses API's stored responses (`POST /v1/responses` with `store`, the default): each
-- row is one response, readable (`GET /v1/responses/{id}`), deletable and continued
-- (`previous_response_id`) only by the principal that made it, until `expires_at`.
CREATE TABLE responses (
    id          text        PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 100),
    tenant_id   text        NOT NULL,
    subject     text        NOT NULL,
    -- The response this one continued, as the caller named it (a chain is read through it).
    previous_id text,
    -- This turn's conversation in weft's message model, as JSON text: the input items (not
    -- `instructions`, which a continuation does not inherit) and the answer, so a continuation
    -- replays the chain. Text, not jsonb: this door stores what a client sent, and jsonb cannot
    -- hold the escape of U+0000 that JSON text can; nothing queries inside either column.
    items       text        NOT NULL,
    -- The response object as `GET /v1/responses/{id}` returns it (JSON text).
    response    text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX responses_expires ON responses (expires_at);
-- The sweeper keeps a response while another continues it.
CREATE INDEX responses_previous ON responses (previous_id) WHERE previous_id IS NOT NULL;
