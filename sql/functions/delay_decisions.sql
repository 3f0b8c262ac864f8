-- delay_decisions.sql — crier.delay_decisions: what the end of a delay does to each of the
-- deliveries p_delivery_ids, decided for the whole set in one statement (crier.fire_delay
-- for one delivery, crier.fire_timers for a batch). It locks the deliveries (FOR UPDATE, in
-- id order) and changes nothing else: the caller applies the decisions in the same
-- transaction. One row per distinct id (NULLs ignored), in no particular order; every join
-- is by index, so the cost is linear in the ids whatever the plan's row estimates:
--   'skip'         the delivery is gone or no longer held (a replay, an operator): outcome
--                  says which; nothing is done;
--   'suppress'     its condition says so — unless = 'read' / 'seen' and the same
--                  notification's feed item is read / seen (explicitly or by a mark-all
--                  watermark), or an event of a cancel_on type arrived for the same tenant
--                  and entity after the notification's event: outcome is the reason;
--   'release'      no throttle, digest or quiet hours: it is due now (outcome 'pending', what
--                  crier.release_delivery returns for it);
--   'release_each' a throttle, a digest or quiet hours: the caller hands it to crier.release_delivery,
--                  one at a time and in its own order (outcome NULL).
CREATE OR REPLACE FUNCTION crier.delay_decisions(p_delivery_ids bigint[])
RETURNS TABLE (delivery_id bigint, action text, outcome text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH ids AS (
        SELECT DISTINCT u.id FROM unnest(p_delivery_ids) AS u(id) WHERE u.id IS NOT NULL
    ), held AS (
        SELECT dl.id, dl.state, dl.timing, dl.notification_id, n.tenant, n.entity_id, n.event_id
        FROM crier.deliveries dl JOIN crier.notifications n ON n.id = dl.notification_id
        WHERE dl.id IN (SELECT ids.id FROM ids)
        ORDER BY dl.id
        FOR UPDATE OF dl
    ), decided AS (
        SELECT h.id, h.state, h.timing,
               coalesce(u.reason, CASE WHEN c.id IS NOT NULL THEN
                   format('cancelled: event %s (%s) arrived for %s within the delay (cancel_on)',
                          c.id, c.event_type, h.entity_id) END) AS reason
        FROM held h
        LEFT JOIN LATERAL (
            SELECT CASE
                       WHEN h.timing->>'unless' = 'read' AND f.is_read
                           THEN 'cancelled: the feed item was read within the delay (unless = "read")'
                       WHEN h.timing->>'unless' = 'seen' AND (f.is_seen OR f.is_read)
                           THEN 'cancelled: the feed item was seen within the delay (unless = "seen")'
                   END AS reason
            FROM (SELECT coalesce(s.read, crier.feed_covered(i.id, i.txid, w.read_snapshot, w.read_upto)) AS is_read,
                         coalesce(s.seen, CASE WHEN s.read THEN true END,
                                  crier.feed_covered(i.id, i.txid, w.seen_snapshot, w.seen_upto)) AS is_seen
                  FROM crier.feed_items i
                  LEFT JOIN crier.feed_states s
                      ON s.tenant = i.tenant AND s.recipient_id = i.recipient_id AND s.item_id = i.id
                  LEFT JOIN crier.feed_watermarks w ON w.tenant = i.tenant AND w.recipient_id = i.recipient_id
                  WHERE i.notification_id = h.notification_id
                  LIMIT 1) f
            WHERE h.state = 'held' AND h.timing->>'unless' IS NOT NULL
        ) u ON true
        LEFT JOIN LATERAL (
            SELECT e.id, e.event_type FROM crier.events e
            WHERE h.state = 'held' AND u.reason IS NULL AND h.timing ? 'cancel_on'
              AND e.tenant = h.tenant AND e.entity_id = h.entity_id
              AND e.event_type IN (SELECT jsonb_array_elements_text(h.timing->'cancel_on'))
              AND e.id > h.event_id
            ORDER BY e.id LIMIT 1
        ) c ON true
    )
    SELECT d.id,
           CASE WHEN d.state <> 'held' THEN 'skip'
                WHEN d.reason IS NOT NULL THEN 'suppress'
                WHEN d.timing->'throttle' IS NOT NULL OR d.timing->'digest' IS NOT NULL OR d.timing ? 'quiet' THEN 'release_each'
                ELSE 'release' END,
           CASE WHEN d.state <> 'held' THEN 'nothing to do: the delivery is ' || d.state
                WHEN d.reason IS NOT NULL THEN d.reason
                WHEN d.timing->'throttle' IS NOT NULL OR d.timing->'digest' IS NOT NULL OR d.timing ? 'quiet' THEN NULL
                ELSE 'pending' END
    FROM decided d
    UNION ALL
    SELECT ids.id, 'skip', 'nothing to do: the delivery is gone' FROM ids
    WHERE NOT EXISTS (SELECT 1 FROM crier.deliveries dl WHERE dl.id = ids.id);
END
$$;
