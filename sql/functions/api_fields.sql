-- api_fields.sql — crier.api_fields: the HTTP API's request-body parser. Raises 22P02 (or
-- 22P05, 22021) when the body is not JSON. Returns one row with name NULL, type = the
-- document's JSON type and value = its top-level keys outside p_names (comma-separated,
-- NULL when none), then one row per name of p_names in order: its JSON type (NULL when
-- absent) and value (a string's text, else the value's JSON text).
CREATE OR REPLACE FUNCTION crier.api_fields(p_body text, p_names text[])
RETURNS TABLE (name text, type text, value text) LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_doc jsonb := p_body::jsonb;
BEGIN
    name := NULL;
    type := jsonb_typeof(v_doc);
    value := NULL;
    IF type = 'object' THEN
        SELECT string_agg(k, ', ' ORDER BY k) INTO value
        FROM jsonb_object_keys(v_doc) AS k WHERE k <> ALL (p_names);
    END IF;
    RETURN NEXT;
    IF jsonb_typeof(v_doc) <> 'object' THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT n.name, jsonb_typeof(v_doc -> n.name),
               CASE jsonb_typeof(v_doc -> n.name) WHEN 'string' THEN v_doc ->> n.name
                                                  ELSE (v_doc -> n.name)::text END
        FROM unnest(p_names) WITH ORDINALITY AS n(name, i)
        ORDER BY n.i;
END;
$$;
