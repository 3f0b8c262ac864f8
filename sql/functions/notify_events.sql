-- notify_events.sql — crier.notify_events: the trigger that wakes a sleeping daemon (NOTIFY
-- crier_events) once per statement inserting events, and that trigger.
--
-- A NOTIFY serialises commits (the notifying transaction holds a database-wide lock through
-- its commit's WAL flush), so it is sent only while a daemon sleeps. A sleeping daemon holds
-- the advisory lock (1668442469, 1) exclusive, or waits for it while going to sleep
-- (src/engine/wake.h); otherwise this transaction takes it shared until it ends, which makes
-- a daemon going to sleep wait for this commit before its last look for events.
CREATE OR REPLACE FUNCTION crier.notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock_shared(1668442469, 1) THEN
        PERFORM pg_notify('crier_events', '');
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER events_notify AFTER INSERT ON crier.events
    FOR EACH STATEMENT EXECUTE FUNCTION crier.notify_events();
