-- feed_change_ids.sql — crier.feed_change_ids: what a live feed (Server-Sent Events)
-- asks: the positions of the items of a person's feed whose transactions committed after
-- p_since was taken (not visible in it), newest first, at most p_limit: candidates
-- (crier.feed(tenant, person, id + 1, 1) tells whether each is in the feed now, within
-- membership windows and not archived, with its states). Only transactions from the
-- snapshot's xmin on can be invisible in it, so the txid indexes bound the search.
CREATE OR REPLACE FUNCTION crier.feed_change_ids(p_tenant text, p_recipient text, p_since pg_snapshot, p_limit integer)
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
