-- feed_mark_all.sql — crier.feed_mark_all: mark all read (p_what 'read') or seen
-- ('seen'), exactly what the reader was shown (promise 4). What is covered is bounded by
-- transactions (a snapshot: an item whose transaction had not committed when it was taken
-- stays unread, whatever its position or timestamps) and optionally by position:
--   - no bounds: the caller's transaction snapshot (everything committed at the click);
--   - p_upto: items up to that position, in the caller's snapshot, or in p_snapshot
--     (the snapshot the page showing that position was read at);
--   - p_since with p_snapshot and p_upto (a live feed's item): every item visible in
--     p_since (what the feed had sent before) and the items up to p_upto visible in
--     p_snapshot (the update that sent it, oldest first).
-- Returns false, changing nothing, when p_snapshot is not a snapshot this database has
-- passed (p_snapshot within the caller's, p_since within p_snapshot); true otherwise.
--
-- The watermark (a snapshot and an upper position) replaces the stored one when it sees
-- every transaction the stored one saw; then what the stored one covered above the new
-- position is kept as explicit states. Otherwise (the stored one is from a later click)
-- the stored one stays and what this call covers above its position becomes explicit
-- states. Items covered beyond the watermark (p_since's update) become explicit states
-- too. So the read set never shrinks. "All" means all: the explicit "unread"
-- ("unseen") marks of the items covered are cleared (or overridden).
--
-- The clearing starts from the person's marks (few) and looks up each mark's
-- item by its position (one correlated subquery over both tables: written as
-- two EXISTS joined by OR, the planner hashes every audience item of the tenant
-- again); it clears a mark whose item is the person's own item or an audience
-- item of the tenant, within the upper position, visible in the watermark.
DROP FUNCTION IF EXISTS crier.feed_mark_all(text, text, text, bigint);
CREATE OR REPLACE FUNCTION crier.feed_mark_all(p_tenant text, p_recipient text, p_what text, p_upto bigint DEFAULT NULL,
                                               p_snapshot pg_snapshot DEFAULT NULL, p_since pg_snapshot DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_old crier.feed_watermarks;
    v_now pg_snapshot := pg_current_snapshot();
    v_snap pg_snapshot;  -- the watermark of this call: its snapshot …
    v_upto bigint;       -- … and upper position (NULL: none)
    v_old_snap pg_snapshot;
    v_old_upto bigint;
    v_replace boolean;
    v_mark bigint[];     -- covered, beyond the watermark that is stored: explicit states
BEGIN
    IF p_what NOT IN ('read', 'seen') THEN
        RAISE EXCEPTION 'crier.feed_mark_all: what must be read or seen, got %', p_what USING ERRCODE = '22023';
    END IF;
    IF (p_snapshot IS NOT NULL AND NOT crier.snapshot_within(p_snapshot, v_now))
       OR (p_since IS NOT NULL AND (p_snapshot IS NULL OR p_upto IS NULL
                                    OR NOT crier.snapshot_within(p_since, p_snapshot))) THEN
        RETURN false;
    END IF;
    IF p_since IS NOT NULL THEN
        v_snap := p_since;
        v_upto := NULL;
        -- the update's items up to p_upto (committed after p_since: the txid index bounds it)
        v_mark := ARRAY(
            SELECT f.id FROM crier.feed_items f
            WHERE f.tenant = p_tenant AND f.recipient_id = p_recipient AND f.id <= p_upto
              AND f.txid >= pg_snapshot_xmin(p_since) AND NOT pg_visible_in_snapshot(f.txid, p_since)
              AND pg_visible_in_snapshot(f.txid, p_snapshot)
            UNION ALL
            SELECT a.id FROM crier.memberships m
            JOIN crier.audience_items a ON a.tenant = m.tenant AND a.audience = m.audience
            WHERE m.tenant = p_tenant AND m.recipient_id = p_recipient AND a.id <= p_upto
              AND a.txid >= pg_snapshot_xmin(p_since) AND NOT pg_visible_in_snapshot(a.txid, p_since)
              AND pg_visible_in_snapshot(a.txid, p_snapshot));
    ELSE
        v_snap := coalesce(p_snapshot, v_now);
        v_upto := p_upto;
        v_mark := '{}';
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
    v_replace := v_old_snap IS NULL OR crier.snapshot_within(v_old_snap, v_snap);
    IF v_replace AND v_old_snap IS NOT NULL AND v_upto IS NOT NULL AND (v_old_upto IS NULL OR v_old_upto > v_upto) THEN
        -- keep what the old watermark covered above v_upto as explicit states
        INSERT INTO crier.feed_states AS s (tenant, recipient_id, item_id, read, seen)
        SELECT p_tenant, p_recipient, i.id, CASE WHEN p_what = 'read' THEN true END, true
        FROM (SELECT f.id, f.txid FROM crier.feed_items f
              WHERE f.tenant = p_tenant AND f.recipient_id = p_recipient AND f.id > v_upto
                AND (v_old_upto IS NULL OR f.id <= v_old_upto)
              UNION ALL
              SELECT a.id, a.txid FROM crier.memberships m
              JOIN crier.audience_items a ON a.tenant = m.tenant AND a.audience = m.audience
              WHERE m.tenant = p_tenant AND m.recipient_id = p_recipient AND a.id > v_upto
                AND (v_old_upto IS NULL OR a.id <= v_old_upto)) i
        WHERE pg_visible_in_snapshot(i.txid, v_old_snap)
        ON CONFLICT (tenant, recipient_id, item_id) DO UPDATE
            SET read = coalesce(s.read, EXCLUDED.read), seen = coalesce(s.seen, EXCLUDED.seen);
    ELSIF NOT v_replace AND v_old_upto IS NOT NULL AND (v_upto IS NULL OR v_upto > v_old_upto) THEN
        -- the stored watermark stays: what this one covers above its position is marked
        v_mark := v_mark || ARRAY(
            SELECT f.id FROM crier.feed_items f
            WHERE f.tenant = p_tenant AND f.recipient_id = p_recipient AND f.id > v_old_upto
              AND (v_upto IS NULL OR f.id <= v_upto) AND pg_visible_in_snapshot(f.txid, v_snap)
            UNION ALL
            SELECT a.id FROM crier.memberships m
            JOIN crier.audience_items a ON a.tenant = m.tenant AND a.audience = m.audience
            WHERE m.tenant = p_tenant AND m.recipient_id = p_recipient AND a.id > v_old_upto
              AND (v_upto IS NULL OR a.id <= v_upto) AND pg_visible_in_snapshot(a.txid, v_snap));
    END IF;
    IF cardinality(v_mark) > 0 THEN
        INSERT INTO crier.feed_states AS s (tenant, recipient_id, item_id, read, seen)
        SELECT DISTINCT p_tenant, p_recipient, m.id, CASE WHEN p_what = 'read' THEN true END, true
        FROM unnest(v_mark) AS m(id)
        ON CONFLICT (tenant, recipient_id, item_id) DO UPDATE
            SET read = CASE WHEN p_what = 'read' THEN true ELSE s.read END, seen = true, updated_at = now();
    END IF;
    -- "all" means all: items the person had explicitly marked unread (unseen)
    -- that this watermark covers become read (seen) too (when the stored
    -- watermark stays, it covers them: it saw every transaction this one saw)
    UPDATE crier.feed_states s
    SET read = CASE WHEN p_what = 'read' AND s.read = false THEN NULL ELSE s.read END,
        seen = CASE WHEN s.seen = false THEN NULL ELSE s.seen END,
        updated_at = now()
    WHERE s.tenant = p_tenant AND s.recipient_id = p_recipient
      AND (s.read = false OR s.seen = false)
      AND (v_upto IS NULL OR s.item_id <= v_upto)
      AND (v_replace OR v_old_upto IS NULL OR s.item_id <= v_old_upto)
      AND EXISTS (SELECT 1 FROM (SELECT f.txid FROM crier.feed_items f
                                 WHERE f.id = s.item_id AND f.tenant = p_tenant
                                   AND f.recipient_id = p_recipient
                                 UNION ALL
                                 SELECT a.txid FROM crier.audience_items a
                                 WHERE a.id = s.item_id AND a.tenant = p_tenant) i
                  WHERE pg_visible_in_snapshot(i.txid, v_snap));
    -- a watermark that saw every transaction the stored one saw replaces it
    -- (and upto only grows, or what it covered above was materialised)
    IF p_what = 'read' THEN
        UPDATE crier.feed_watermarks
        SET read_snapshot = CASE WHEN v_replace THEN v_snap ELSE read_snapshot END,
            read_upto = CASE WHEN v_replace THEN v_upto ELSE read_upto END, read_at = now()
        WHERE tenant = p_tenant AND recipient_id = p_recipient;
    ELSE
        UPDATE crier.feed_watermarks
        SET seen_snapshot = CASE WHEN v_replace THEN v_snap ELSE seen_snapshot END,
            seen_upto = CASE WHEN v_replace THEN v_upto ELSE seen_upto END, seen_at = now()
        WHERE tenant = p_tenant AND recipient_id = p_recipient;
    END IF;
    RETURN true;
END;
$$;
