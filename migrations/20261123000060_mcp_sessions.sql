-- weft's MCP server face (protocol 2025-11-25) keeps each session's initialize parameters
-- here, so a session opened on one gateway replica continues on any other. Not tenant data:
-- every request of a session is authenticated by its own bearer token.
CREATE TABLE mcp_sessions (
    id          text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200),
    state       jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX mcp_sessions_expires ON mcp_sessions (expires_at);

-- Who opened each session (`<tenant>/<subject>`): a session id is honoured only for the principal
-- that opened it, on any replica; for anyone else it does not exist.
CREATE TABLE mcp_session_owners (
    id          text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200),
    owner       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
