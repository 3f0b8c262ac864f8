-- api_dead_letters.sql — crier.api_dead_letters: a tenant's dead letters for GET
-- /v1/dead: crier.dead_letters (dead_letters.sql) for one tenant, which it insists on
-- (the API never asks for "all tenants"), in the API's shape: newest first by (sort_us,
-- kind_rank, id), the keyset of its pages. Filters are optional (NULL: no filter).
CREATE OR REPLACE FUNCTION crier.api_dead_letters(p_tenant text, p_type text, p_channel text, p_since timestamptz,
                                                  p_until timestamptz, p_kind text, p_id bigint, p_event bigint)
RETURNS TABLE (kind text, id bigint, event_id bigint, event_type text, entity_id text, recipient text,
               channel text, target text, attempts integer, died_at timestamptz, last_status integer,
               last_error text, sort_us bigint, kind_rank integer)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_tenant IS NULL THEN
        RAISE EXCEPTION 'crier.api_dead_letters: a tenant is required' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT x.kind, x.id, x.event_id, x.event_type, x.entity_id, x.recipient, x.channel, x.target, x.attempts,
           x.died_at, x.last_status, x.last_error, x.sort_us, x.kind_rank
    FROM crier.dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event) x;
END;
$$;
