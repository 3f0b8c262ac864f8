-- feed_notify_audiences.sql — crier.feed_notify_audiences: the trigger that announces, on
-- channel crier_feed, that an audience received items (payload a<len>:<tenant><audience>,
-- see feed_notify_payload.sql), once per distinct audience per statement.
CREATE OR REPLACE FUNCTION crier.feed_notify_audiences() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('crier_feed', crier.feed_notify_payload('a', x.tenant, x.audience))
    FROM (SELECT DISTINCT tenant, audience FROM changed) x;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER audience_items_notify AFTER INSERT ON crier.audience_items
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_audiences();
