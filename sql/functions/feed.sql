-- feed.sql — crier.feed: a person's feed items, newest first: their own items and the
-- items of their audiences within their membership windows, with states. Not archived
-- unless p_archived. Keyset: items with position < p_before (NULL: from the top).
CREATE OR REPLACE FUNCTION crier.feed(p_tenant text, p_recipient text, p_before bigint, p_limit integer,
                           p_archived boolean DEFAULT false)
RETURNS TABLE (id bigint, kind text, event_type text, content jsonb, created_at timestamptz,
               read boolean, seen boolean, archived boolean)
LANGUAGE sql STABLE AS $$
    WITH w AS (
        SELECT * FROM crier.feed_watermarks WHERE tenant = p_tenant AND recipient_id = p_recipient
    ), items AS (
        (SELECT f.id, 'direct'::text AS kind, f.event_type, f.content, f.created_at, f.txid
         FROM crier.feed_items f
         WHERE f.tenant = p_tenant AND f.recipient_id = p_recipient AND (p_before IS NULL OR f.id < p_before)
         ORDER BY f.id DESC LIMIT p_limit * 2 + 10)
        UNION ALL
        (SELECT a.id, 'audience', a.event_type, a.content, a.created_at, a.txid
         FROM crier.memberships m
         CROSS JOIN LATERAL (
             SELECT a.* FROM crier.audience_items a
             WHERE a.tenant = m.tenant AND a.audience = m.audience
               AND (p_before IS NULL OR a.id < p_before)
               AND (a.backfill OR a.id > m.joined_position)
               AND (m.left_position IS NULL OR a.id <= m.left_position)
             ORDER BY a.id DESC LIMIT p_limit * 2 + 10) a
         WHERE m.tenant = p_tenant AND m.recipient_id = p_recipient)
    )
    SELECT i.id, i.kind, i.event_type, i.content, i.created_at,
           coalesce(s.read, crier.feed_covered(i.id, i.txid, w.read_snapshot, w.read_upto)),
           coalesce(s.seen, CASE WHEN s.read THEN true END,
                    crier.feed_covered(i.id, i.txid, w.seen_snapshot, w.seen_upto)
                    OR crier.feed_covered(i.id, i.txid, w.read_snapshot, w.read_upto)),
           coalesce(s.archived, false)
    FROM (SELECT DISTINCT ON (items.id) items.* FROM items) i
    LEFT JOIN w ON true
    LEFT JOIN crier.feed_states s
        ON s.tenant = p_tenant AND s.recipient_id = p_recipient AND s.item_id = i.id
    WHERE p_archived OR s.archived IS NOT true
    ORDER BY i.id DESC
    LIMIT p_limit
$$;
