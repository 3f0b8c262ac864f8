-- 008_feed_speed.sql — the feed at a million items (measured with `crier
-- bench feed`; plans and figures in docs/BENCHMARKS.md): indexes that fit its
-- queries, crier.feed_counts planned once per connection instead of at every
-- call, and crier.feed_mark_all's clearing of explicit marks driven by the
-- person's own marks instead of every audience item of the tenant. The
-- functions keep their signatures and their results.

-- A person's memberships, current and past: crier.feed, crier.feed_counts and
-- crier.feed_mark_all look them up by (tenant, recipient) without a left_at
-- condition (past memberships bound what the person saw), which the partial
-- memberships_person index cannot serve: every call scanned the whole table.
-- The included columns make the lookup an index-only scan.
CREATE INDEX memberships_recipient ON crier.memberships (tenant, recipient_id)
    INCLUDE (audience, joined_position, left_position);

-- A person's items by position, with the inserting transaction: the counts
-- read (id, txid) of every item, an index-only scan instead of a heap fetch
-- per item. Same key as before, so pages still walk it backwards.
DROP INDEX crier.feed_items_person;
CREATE INDEX feed_items_person ON crier.feed_items (tenant, recipient_id, id) INCLUDE (txid);

-- An audience's items by position, with what the counts read.
DROP INDEX crier.audience_items_audience;
CREATE INDEX audience_items_audience ON crier.audience_items (tenant, audience, id)
    INCLUDE (txid, backfill);

-- The same query as 005's crier.feed_counts, in PL/pgSQL: a SQL function that
-- cannot be inlined (it returns a row, not a set) has its body planned again
-- at every call, which cost more than running it for most people (0.4 of
-- 0.7 ms); PL/pgSQL keeps the plan for the connection (custom plans for the
-- first calls, then the generic plan a SQL function always used).
CREATE OR REPLACE FUNCTION crier.feed_counts(p_tenant text, p_recipient text, OUT unread bigint, OUT unseen bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    WITH w AS (
        SELECT * FROM crier.feed_watermarks WHERE tenant = p_tenant AND recipient_id = p_recipient
    ), items AS (
        SELECT f.id, f.txid FROM crier.feed_items f
        WHERE f.tenant = p_tenant AND f.recipient_id = p_recipient
        UNION
        SELECT a.id, a.txid FROM crier.memberships m
        JOIN crier.audience_items a ON a.tenant = m.tenant AND a.audience = m.audience
            AND (a.backfill OR a.id > m.joined_position)
            AND (m.left_position IS NULL OR a.id <= m.left_position)
        WHERE m.tenant = p_tenant AND m.recipient_id = p_recipient
    ), states AS (
        SELECT i.id,
               coalesce(s.read, crier.feed_covered(i.id, i.txid, w.read_snapshot, w.read_upto)) AS read,
               coalesce(s.seen, CASE WHEN s.read THEN true END,
                        crier.feed_covered(i.id, i.txid, w.seen_snapshot, w.seen_upto)
                        OR crier.feed_covered(i.id, i.txid, w.read_snapshot, w.read_upto)) AS seen,
               coalesce(s.archived, false) AS archived
        FROM items i
        LEFT JOIN w ON true
        LEFT JOIN crier.feed_states s
            ON s.tenant = p_tenant AND s.recipient_id = p_recipient AND s.item_id = i.id
    )
    SELECT count(*) FILTER (WHERE NOT read AND NOT archived), count(*) FILTER (WHERE NOT seen AND NOT archived)
    INTO unread, unseen
    FROM states;
END;
$$;

-- As in 007, except the clearing of explicit "unread" ("unseen") marks: it
-- starts from the person's marks (few) and looks up each mark's item by its
-- position (one correlated subquery over both tables: written as two EXISTS
-- joined by OR, the planner hashes every audience item of the tenant again),
-- where 007 joined the marks with every audience item of the tenant. The same
-- rows are cleared: a mark whose item is the person's own item or an
-- audience item of the tenant, within p_upto, visible in the snapshot.
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
