-- 009_feed_stream.sql — live feeds (Server-Sent Events of crier serve's HTTP
-- API). Changes to a feed are announced on the channel crier_feed when they
-- commit, and a stream asks "what became visible since the snapshot I last
-- read at": an exact question whatever order transactions commit in, the
-- same way mark-all-read is exact.
--
-- Payloads (one per distinct person or audience per statement; identical
-- payloads of one transaction are folded by PostgreSQL):
--   p<len>:<tenant><recipient>   a person's items or states changed
--   m<len>:<tenant><recipient>   a person's memberships changed
--   a<len>:<tenant><audience>    an audience received items
--   P<len>:<tenant>, M<len>:<tenant>   the same for many people of the tenant
--                                 at once (a statement touching more than 16
--                                 people: a bulk fan-out page sends one
--                                 notification, not one per recipient)
-- <len> is the tenant's length in bytes, so ids may hold any character.

CREATE FUNCTION crier.feed_notify_payload(p_kind text, p_tenant text, p_who text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_kind || octet_length(p_tenant) || ':' || p_tenant || p_who
$$;

CREATE FUNCTION crier.feed_notify_people() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE FUNCTION crier.feed_notify_audiences() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('crier_feed', crier.feed_notify_payload('a', x.tenant, x.audience))
    FROM (SELECT DISTINCT tenant, audience FROM changed) x;
    RETURN NULL;
END;
$$;

CREATE TRIGGER feed_items_notify AFTER INSERT ON crier.feed_items
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('p');
CREATE TRIGGER audience_items_notify AFTER INSERT ON crier.audience_items
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_audiences();
CREATE TRIGGER feed_states_notify_insert AFTER INSERT ON crier.feed_states
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('p');
CREATE TRIGGER feed_states_notify_update AFTER UPDATE ON crier.feed_states
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('p');
CREATE TRIGGER feed_watermarks_notify_update AFTER UPDATE ON crier.feed_watermarks
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('p');
CREATE TRIGGER memberships_notify_insert AFTER INSERT ON crier.memberships
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('m');
CREATE TRIGGER memberships_notify_update AFTER UPDATE ON crier.memberships
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION crier.feed_notify_people('m');

-- The positions of the items of a person's feed whose transactions committed
-- after p_since was taken (not visible in it), newest first, at most p_limit:
-- candidates (crier.feed(tenant, person, id + 1, 1) tells whether each is in
-- the feed now, within membership windows and not archived, with its states).
-- Only transactions from the snapshot's xmin on can be invisible in it, so
-- the txid indexes bound the search.
CREATE FUNCTION crier.feed_change_ids(p_tenant text, p_recipient text, p_since pg_snapshot, p_limit integer)
RETURNS SETOF bigint LANGUAGE sql STABLE AS $$
    SELECT c.id FROM (
        (SELECT f.id FROM crier.feed_items f
         WHERE f.tenant = p_tenant AND f.recipient_id = p_recipient
           AND f.txid >= pg_snapshot_xmin(p_since) AND NOT pg_visible_in_snapshot(f.txid, p_since))
        UNION
        (SELECT a.id FROM crier.memberships m
         JOIN crier.audience_items a ON a.tenant = m.tenant AND a.audience = m.audience
         WHERE m.tenant = p_tenant AND m.recipient_id = p_recipient
           AND a.txid >= pg_snapshot_xmin(p_since) AND NOT pg_visible_in_snapshot(a.txid, p_since))
    ) c
    ORDER BY c.id DESC
    LIMIT p_limit
$$;
