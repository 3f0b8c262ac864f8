-- feed_notify_people.sql — crier.feed_notify_people: the trigger that announces, on
-- channel crier_feed, that people's feeds changed (TG_ARGV[0] 'p': items or states; 'm':
-- memberships), one payload per distinct person per statement, or one per tenant in upper
-- case when a statement touches more than 16 people (see feed_notify_payload.sql); and
-- the triggers on the tables it watches.
CREATE OR REPLACE FUNCTION crier.feed_notify_people() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT count(*) FROM (SELECT DISTINCT tenant, recipient_id FROM changed LIMIT 17) x) > 16 THEN
        PERFORM pg_notify('crier_feed', crier.feed_notify_payload(upper(TG_ARGV[0]), x.tenant, ''))
        FROM (SELECT DISTINCT tenant FROM changed) x;
    ELSE
        PERFORM pg_notify('crier_feed', crier.feed_notify_payload(TG_ARGV[0], x.tenant, x.recipient_id))
        FROM (SELECT DISTINCT tenant, recipient_id FROM changed) x;
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER feed_items_notify AFTER INSERT ON crier.feed_items
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('p');
CREATE OR REPLACE TRIGGER feed_states_notify_insert AFTER INSERT ON crier.feed_states
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('p');
CREATE OR REPLACE TRIGGER feed_states_notify_update AFTER UPDATE ON crier.feed_states
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('p');
CREATE OR REPLACE TRIGGER feed_watermarks_notify_update AFTER UPDATE ON crier.feed_watermarks
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('p');
CREATE OR REPLACE TRIGGER memberships_notify_insert AFTER INSERT ON crier.memberships
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('m');
CREATE OR REPLACE TRIGGER memberships_notify_update AFTER UPDATE ON crier.memberships
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('m');
