-- Web UI sessions: a browser exchanges a token for a session cookie. Only the SHA-256 of the
-- cookie's value is stored. A session acts with its token's tenant, subject and scopes, read
-- through the join on every request, so revoking the token ends its sessions at once.
CREATE TABLE ui_sessions (
    id_hash     bytea       PRIMARY KEY,
    token_id    uuid        NOT NULL REFERENCES tokens (id) ON DELETE CASCADE,
    -- Sent back by the page in `x-csrf-token` on every state-changing call.
    csrf_token  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);

CREATE INDEX ui_sessions_expires_idx ON ui_sessions (expires_at);
CREATE INDEX ui_sessions_token_idx ON ui_sessions (token_id);
