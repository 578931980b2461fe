-- API tokens. Only the SHA-256 of a token is stored; the token itself is shown once.
CREATE TABLE tokens (
    id          uuid PRIMARY KEY,
    tenant_id   text        NOT NULL,
    subject     text        NOT NULL,
    name        text        NOT NULL,
    scopes      text[]      NOT NULL,
    token_hash  bytea       NOT NULL UNIQUE,
    -- The first characters of the token, so an operator can tell tokens apart.
    prefix      text        NOT NULL,
    created_by  text,
    bootstrap   boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    revoked_at  timestamptz
);

CREATE INDEX tokens_tenant_created_idx ON tokens (tenant_id, created_at DESC);
