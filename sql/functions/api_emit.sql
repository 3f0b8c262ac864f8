-- api_emit.sql — crier.api_emit: POST /v1/events' database work in one statement
-- (inside the request's transaction): the Idempotency-Key (p_idem_key NULL: none)
-- claimed or replayed, crier.emit, the answer built, and the answer stored for
-- the key. Returns status (201 created, 200 duplicate or replay, 409 refused),
-- code (of a 409), body (the JSON answer) and replayed (the first response of this key, sent again). A 409's code is
-- 'in_use' (the first request with this key has not finished) or 'reused' (the
-- key came with another body); the caller words the error. A concurrent
-- request with the same key waits on the key's row until the first one commits
-- or rolls back. p_body is the request body, hashed as canonical jsonb text so
-- that a replay must carry the same request. p_not_before: a scheduled send
-- (crier.emit's not before), NULL: now.
DROP FUNCTION IF EXISTS crier.api_emit(text, text, text, jsonb, text, text, text);
CREATE OR REPLACE FUNCTION crier.api_emit(p_tenant text, p_type text, p_entity text, p_payload jsonb,
                                          p_dedupe text, p_idem_key text, p_body text,
                                          p_not_before timestamptz,
                                          OUT status integer, OUT code text, OUT body text, OUT replayed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_id      bigint;
    v_claimed boolean;
    v_hash    bytea;
    r         record;
BEGIN
    replayed := false;
    IF p_idem_key IS NOT NULL THEN
        v_hash := sha256(convert_to(p_body::jsonb::text, 'UTF8'));
        DELETE FROM crier.api_idempotency
        WHERE tenant = p_tenant AND key = p_idem_key AND created_at < now() - interval '24 hours';
        INSERT INTO crier.api_idempotency (tenant, key, request_hash) VALUES (p_tenant, p_idem_key, v_hash)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        IF NOT v_claimed THEN
            SELECT i.request_hash = v_hash AS same, i.status, i.response INTO r
            FROM crier.api_idempotency i WHERE i.tenant = p_tenant AND i.key = p_idem_key;
            IF NOT FOUND OR r.response IS NULL THEN
                status := 409; code := 'in_use';
            ELSIF NOT r.same THEN
                status := 409; code := 'reused';
            ELSE
                status := 200; body := r.response; replayed := true;
            END IF;
            RETURN;
        END IF;
    END IF;

    v_id := crier.emit(p_tenant, p_type, p_entity, p_payload, p_dedupe, p_not_before);
    -- the row was inserted by this transaction unless it was a duplicate
    SELECT CASE WHEN e.xmin = pg_current_xact_id()::xid THEN 201 ELSE 200 END,
           json_build_object('id', e.id, 'type', e.event_type, 'entity_id', e.entity_id,
                             'dedupe_key', e.dedupe_key, 'state', e.state, 'not_before', e.not_before,
                             'created_at', e.created_at,
                             'duplicate', e.xmin <> pg_current_xact_id()::xid)::text
    INTO status, body
    FROM crier.events e WHERE e.id = v_id AND e.tenant = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'crier.api_emit: the emitted event % vanished', v_id;
    END IF;
    IF p_idem_key IS NOT NULL THEN
        UPDATE crier.api_idempotency SET status = api_emit.status, response = api_emit.body
        WHERE tenant = p_tenant AND key = p_idem_key;
    END IF;
END;
$$;
