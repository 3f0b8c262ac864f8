-- check_event_children.sql — crier.check_event_children: an event that notifications refer
-- to cannot be deleted (nor its id changed), as the foreign key notifications → events
-- refused before sql/014; checked once per statement — except for crier.retain, which
-- retires finished events whose notifications stay (sql/015). Its triggers.
CREATE OR REPLACE FUNCTION crier.check_event_children() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    -- the retention worker retires finished events on purpose: their notifications stay (their
    -- keys are the dedupe horizon, sql/015_retention.sql), so it says so (crier.retain)
    IF current_setting('crier.retention', true) = 'on' THEN
        RETURN NULL;
    END IF;
    SELECT o.id INTO v_id FROM removed o
    WHERE EXISTS (SELECT 1 FROM crier.notifications n WHERE n.event_id = o.id)
      AND NOT EXISTS (SELECT 1 FROM crier.events e WHERE e.id = o.id) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '% on crier.events: event % is still referenced by notifications', TG_OP, v_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER events_check_children_delete AFTER DELETE ON crier.events
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION crier.check_event_children();

-- A changed id (nothing in crier changes one) is checked row by row.
CREATE OR REPLACE FUNCTION crier.check_event_children_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM crier.notifications n WHERE n.event_id = OLD.id) THEN
        RAISE EXCEPTION 'UPDATE on crier.events: event % is still referenced by notifications', OLD.id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER events_check_children_update AFTER UPDATE OF id ON crier.events
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION crier.check_event_children_row();
