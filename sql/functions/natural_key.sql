-- natural_key.sql — crier.natural_key: the default dedupe key of an event: its natural
-- key, with ':' and '\' inside components escaped so that no two different (type, entity)
-- pairs share it.
CREATE OR REPLACE FUNCTION crier.natural_key(p_event_type text, p_entity_id text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT replace(replace(p_event_type, '\', '\\'), ':', '\:') || ':' ||
           replace(replace(p_entity_id, '\', '\\'), ':', '\:')
$$;
