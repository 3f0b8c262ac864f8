-- queue_events.sql — keep crier.event_queue and crier.dead_events (sql/025_event_queue.sql) in
-- step with crier.events, whoever writes the events (crier.emit, the timers, a replay, an
-- operator's UPDATE): two triggers and their functions.
--
-- crier.queue_inserted_events: once per INSERT statement, the inserted events that are
-- pending enter the queue, the dead ones the dead list (ON CONFLICT: a queue row left behind
-- by a TRUNCATE of crier.events and an id used again).
CREATE OR REPLACE FUNCTION crier.queue_inserted_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- one statement (two cost an emit 2-3 us more)
    WITH queued AS (
        INSERT INTO crier.event_queue (lane, id, available_at)
        SELECT a.lane, a.id, a.available_at FROM added a WHERE a.state = 'pending'
        ON CONFLICT (lane, id) DO UPDATE SET available_at = EXCLUDED.available_at
    )
    INSERT INTO crier.dead_events (id, tenant, processed_at)
    SELECT a.id, a.tenant, a.processed_at FROM added a WHERE a.state = 'dead'
    ON CONFLICT (id) DO UPDATE SET tenant = EXCLUDED.tenant, processed_at = EXCLUDED.processed_at;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER events_queue_inserted AFTER INSERT ON crier.events
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION crier.queue_inserted_events();

-- crier.queue_updated_event: an event that becomes pending, or whose lane or available_at
-- changes while pending, enters the queue (its row in another lane, if any, is left for the
-- claim of that lane to drop); an event that becomes dead enters the dead list, one that
-- stops being dead leaves it. The WHEN clause keeps every other update (marking done, a page
-- cursor) from calling it; the fan-out deletes the queue rows of the events it marks done
-- itself (src/engine/fanout.c), and a claim drops the rows of events that are not pending
-- any more (functions/claim_events.sql).
CREATE OR REPLACE FUNCTION crier.queue_updated_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'pending' THEN
        INSERT INTO crier.event_queue (lane, id, available_at) VALUES (NEW.lane, NEW.id, NEW.available_at)
            ON CONFLICT (lane, id) DO UPDATE SET available_at = EXCLUDED.available_at;
    END IF;
    IF NEW.state = 'dead' THEN
        INSERT INTO crier.dead_events (id, tenant, processed_at) VALUES (NEW.id, NEW.tenant, NEW.processed_at)
            ON CONFLICT (id) DO UPDATE SET tenant = EXCLUDED.tenant, processed_at = EXCLUDED.processed_at;
    ELSIF OLD.state = 'dead' THEN
        DELETE FROM crier.dead_events WHERE id = OLD.id;
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER events_queue_updated AFTER UPDATE ON crier.events
    FOR EACH ROW
    WHEN ((NEW.state = 'pending' AND (OLD.state <> 'pending' OR OLD.lane <> NEW.lane
                                      OR OLD.available_at <> NEW.available_at))
          OR (NEW.state = 'dead') <> (OLD.state = 'dead')
          OR (NEW.state = 'dead' AND (OLD.processed_at IS DISTINCT FROM NEW.processed_at
                                      OR OLD.tenant <> NEW.tenant)))
    EXECUTE FUNCTION crier.queue_updated_event();
