-- notify_events.sql — crier.notify_events: the trigger that wakes the daemon (NOTIFY
-- crier_events) once per statement inserting events, and that trigger.
CREATE OR REPLACE FUNCTION crier.notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('crier_events', '');
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER events_notify AFTER INSERT ON crier.events
    FOR EACH STATEMENT EXECUTE FUNCTION crier.notify_events();
