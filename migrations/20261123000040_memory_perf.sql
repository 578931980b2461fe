-- Memory set in one statement: the advisory lock on the entry's address, the row read
-- FOR UPDATE, the `if_version` check, the upsert and the usage move (with the quota check) that
-- the substrate used to send as five or six statements in a transaction, now one round trip.
-- The same steps in the same order as before (lock, row, usage rows in bytewise agent order,
-- the tenant's total '' first), so it interleaves safely with the writes that still run them
-- one by one (delete, incr, and the op-key bookkeeping around a set).
--
-- Errors the substrate turns into 409s:
--   WM001 the usage would exceed a quota: DETAIL = the bytes it would reach, HINT = the agent
--         ('' = the tenant's total);
--   WM002 `if_version` does not match: DETAIL = the live version (0 = no live entry).

CREATE FUNCTION weft_memory_set(
    p_tenant       text,
    p_scope        text,
    p_scope_id     text,
    p_key          text,
    p_value_json   text,
    p_bytes        integer,
    p_agent        text,
    p_ttl_seconds  bigint,
    p_if_version   bigint,
    p_embedding    real[],
    p_model        text,
    p_tenant_limit bigint,
    p_agent_limit  bigint)
RETURNS TABLE (
    key        text,
    value_json text,
    version    bigint,
    expires_at timestamptz,
    updated_at timestamptz,
    embedded   boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    had_row      boolean;
    old_ctid     tid;
    old_version  bigint;
    old_bytes    bigint := 0;
    old_agent    text := '';
    old_live     boolean := false;
    live_version bigint := 0;
    who          text[];
    delta        bigint[];
    d            record;
    now_bytes    bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(
        p_tenant || '/' || p_scope || '/' || length(p_scope_id)::text || '/' || p_scope_id
            || '/' || p_key, 7));
    SELECT e.ctid, e.version, e.bytes::bigint, e.agent,
           (e.expires_at IS NULL OR e.expires_at > now())
      INTO old_ctid, old_version, old_bytes, old_agent, old_live
      FROM memory_entries e
     WHERE e.tenant_id = p_tenant AND e.scope = p_scope AND e.scope_id = p_scope_id
       AND e.key = p_key
       FOR UPDATE;
    had_row := FOUND;
    IF NOT had_row THEN
        old_bytes := 0;
        old_agent := '';
        old_live := false;
    END IF;
    IF had_row AND old_live THEN
        live_version := old_version;
    END IF;
    IF p_if_version IS NOT NULL AND p_if_version <> live_version THEN
        RAISE EXCEPTION 'memory version conflict'
            USING ERRCODE = 'WM002', DETAIL = live_version::text;
    END IF;

    IF had_row THEN
        -- The row is locked: update that very tuple, no second index lookup.
        UPDATE memory_entries e SET
            value_json = p_value_json, bytes = p_bytes, version = live_version + 1,
            agent = p_agent, expires_at = now() + make_interval(secs => p_ttl_seconds),
            embedding = p_embedding, embedding_model = p_model, updated_at = now()
         WHERE e.ctid = old_ctid
        RETURNING e.key, e.value_json, e.version, e.expires_at, e.updated_at,
                  e.embedding IS NOT NULL
             INTO key, value_json, version, expires_at, updated_at, embedded;
    ELSE
        -- Every writer of an address holds its advisory lock, so nothing inserts it meanwhile;
        -- ON CONFLICT only keeps a surprise from being an error.
        INSERT INTO memory_entries AS e
            (tenant_id, scope, scope_id, key, value_json, bytes, version, agent, expires_at,
             embedding, embedding_model)
        VALUES (p_tenant, p_scope, p_scope_id, p_key, p_value_json, p_bytes, 1, p_agent,
                now() + make_interval(secs => p_ttl_seconds), p_embedding, p_model)
        ON CONFLICT (tenant_id, scope, scope_id, key) DO UPDATE SET
            value_json = EXCLUDED.value_json, bytes = EXCLUDED.bytes,
            version = EXCLUDED.version, agent = EXCLUDED.agent,
            expires_at = EXCLUDED.expires_at, embedding = EXCLUDED.embedding,
            embedding_model = EXCLUDED.embedding_model, updated_at = now()
        RETURNING e.key, e.value_json, e.version, e.expires_at, e.updated_at,
                  e.embedding IS NOT NULL
             INTO key, value_json, version, expires_at, updated_at, embedded;
    END IF;

    -- The usage moves from the replaced row (its agent, its bytes) to the new one.
    who := ARRAY[''];
    delta := ARRAY[p_bytes - old_bytes];
    IF old_agent = p_agent THEN
        IF p_agent <> '' THEN
            who := who || p_agent;
            delta := delta || (p_bytes - old_bytes);
        END IF;
    ELSE
        IF old_agent <> '' THEN
            who := who || old_agent;
            delta := delta || (-old_bytes);
        END IF;
        IF p_agent <> '' THEN
            who := who || p_agent;
            delta := delta || p_bytes::bigint;
        END IF;
    END IF;
    FOR d IN
        SELECT t.w, t.x FROM unnest(who, delta) AS t(w, x) ORDER BY t.w COLLATE "C"
    LOOP
        CONTINUE WHEN d.x = 0;
        INSERT INTO memory_usage AS u (tenant_id, agent, bytes) VALUES (p_tenant, d.w, d.x)
        ON CONFLICT (tenant_id, agent) DO UPDATE SET bytes = u.bytes + EXCLUDED.bytes
        RETURNING u.bytes INTO now_bytes;
        IF d.x > 0
           AND now_bytes > (CASE WHEN d.w = '' THEN p_tenant_limit ELSE p_agent_limit END) THEN
            RAISE EXCEPTION 'memory quota exceeded'
                USING ERRCODE = 'WM001', DETAIL = now_bytes::text, HINT = d.w;
        END IF;
    END LOOP;
    RETURN NEXT;
END
$$;
