-- feed_mark_all.sql — crier.feed_mark_all: mark all read (p_what 'read') or seen
-- ('seen'), optionally only up to the position p_upto: stores the caller's transaction
-- snapshot, so it is exact (an item whose transaction had not committed when the person
-- clicked stays unread, whatever its timestamps say). The read set never shrinks: if an
-- earlier watermark covered positions beyond p_upto, the items it covered there are kept
-- as explicit states first. "All" means all: the explicit "unread" ("unseen") marks of
-- the items it covers are cleared.
--
-- The clearing starts from the person's marks (few) and looks up each mark's
-- item by its position (one correlated subquery over both tables: written as
-- two EXISTS joined by OR, the planner hashes every audience item of the tenant
-- again); it clears a mark whose item is the person's own item or an audience
-- item of the tenant, within p_upto, visible in the snapshot.
CREATE OR REPLACE FUNCTION crier.feed_mark_all(p_tenant text, p_recipient text, p_what text, p_upto bigint DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_old crier.feed_watermarks;
    v_snap pg_snapshot := pg_current_snapshot();
    v_old_snap pg_snapshot;
    v_old_upto bigint;
BEGIN
    IF p_what NOT IN ('read', 'seen') THEN
        RAISE EXCEPTION 'crier.feed_mark_all: what must be read or seen, got %', p_what USING ERRCODE = '22023';
    END IF;
    INSERT INTO crier.feed_watermarks (tenant, recipient_id) VALUES (p_tenant, p_recipient)
        ON CONFLICT DO NOTHING;
    SELECT * INTO v_old FROM crier.feed_watermarks
        WHERE tenant = p_tenant AND recipient_id = p_recipient FOR UPDATE;
    IF p_what = 'read' THEN
        v_old_snap := v_old.read_snapshot; v_old_upto := v_old.read_upto;
    ELSE
        v_old_snap := v_old.seen_snapshot; v_old_upto := v_old.seen_upto;
    END IF;
    IF v_old_snap IS NOT NULL AND p_upto IS NOT NULL AND (v_old_upto IS NULL OR v_old_upto > p_upto) THEN
        -- keep what the old watermark covered above p_upto as explicit states
        INSERT INTO crier.feed_states AS s (tenant, recipient_id, item_id, read, seen)
        SELECT p_tenant, p_recipient, i.id, CASE WHEN p_what = 'read' THEN true END, true
        FROM (SELECT f.id, f.txid FROM crier.feed_items f
              WHERE f.tenant = p_tenant AND f.recipient_id = p_recipient AND f.id > p_upto
                AND (v_old_upto IS NULL OR f.id <= v_old_upto)
              UNION ALL
              SELECT a.id, a.txid FROM crier.memberships m
              JOIN crier.audience_items a ON a.tenant = m.tenant AND a.audience = m.audience
              WHERE m.tenant = p_tenant AND m.recipient_id = p_recipient AND a.id > p_upto
                AND (v_old_upto IS NULL OR a.id <= v_old_upto)) i
        WHERE pg_visible_in_snapshot(i.txid, v_old_snap)
        ON CONFLICT (tenant, recipient_id, item_id) DO UPDATE
            SET read = coalesce(s.read, EXCLUDED.read), seen = coalesce(s.seen, EXCLUDED.seen);
    END IF;
    -- a later snapshot sees everything an earlier one saw: replacing it never
    -- un-reads an item (and upto only grows, or was materialised above)
    -- "all" means all: items the person had explicitly marked unread (unseen)
    -- that this watermark covers become read (seen) too
    UPDATE crier.feed_states s
    SET read = CASE WHEN p_what = 'read' AND s.read = false THEN NULL ELSE s.read END,
        seen = CASE WHEN s.seen = false THEN NULL ELSE s.seen END,
        updated_at = now()
    WHERE s.tenant = p_tenant AND s.recipient_id = p_recipient
      AND (s.read = false OR s.seen = false)
      AND (p_upto IS NULL OR s.item_id <= p_upto)
      AND EXISTS (SELECT 1 FROM (SELECT f.txid FROM crier.feed_items f
                                 WHERE f.id = s.item_id AND f.tenant = p_tenant
                                   AND f.recipient_id = p_recipient
                                 UNION ALL
                                 SELECT a.txid FROM crier.audience_items a
                                 WHERE a.id = s.item_id AND a.tenant = p_tenant) i
                  WHERE pg_visible_in_snapshot(i.txid, v_snap));
    IF p_what = 'read' THEN
        UPDATE crier.feed_watermarks SET read_snapshot = v_snap, read_upto = p_upto, read_at = now()
        WHERE tenant = p_tenant AND recipient_id = p_recipient;
    ELSE
        UPDATE crier.feed_watermarks SET seen_snapshot = v_snap, seen_upto = p_upto, seen_at = now()
        WHERE tenant = p_tenant AND recipient_id = p_recipient;
    END IF;
END;
$$;
