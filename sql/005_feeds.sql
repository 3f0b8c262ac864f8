-- 005_feeds.sql — in-app feeds. A person's feed merges their own items
-- (fan-out on write: a rule's "feed" channel, one row per recipient) with the
-- items of the audiences they belong to (fan-out on read: a rule in mode
-- "read" stores the event once for an audience). Read, seen and archived are
-- per person and item; "mark all read" stores the reader's snapshot, so it is
-- exact: an item whose transaction had not committed when the person clicked
-- stays unread, whatever its timestamps say.

-- Positions in feeds: one sequence for both kinds of items, so a merged feed
-- pages by one key.
CREATE SEQUENCE crier.feed_position;

CREATE TABLE crier.feed_items (
    id              bigint      PRIMARY KEY DEFAULT nextval('crier.feed_position'),
    tenant          text        NOT NULL,
    recipient_id    text        NOT NULL,
    notification_id bigint      NOT NULL UNIQUE REFERENCES crier.notifications (id),
    event_type      text        NOT NULL,
    content         jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- the inserting transaction: compared with stored snapshots by mark-all-read
    txid            xid8        NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX feed_items_person ON crier.feed_items (tenant, recipient_id, id);
CREATE INDEX feed_items_person_txid ON crier.feed_items (tenant, recipient_id, txid);

CREATE TABLE crier.audience_items (
    id         bigint      PRIMARY KEY DEFAULT nextval('crier.feed_position'),
    tenant     text        NOT NULL,
    audience   text        NOT NULL,
    event_id   bigint      NOT NULL REFERENCES crier.events (id),
    event_type text        NOT NULL,
    content    jsonb       NOT NULL,
    backfill   boolean     NOT NULL DEFAULT false, -- visible to members who join later
    created_at timestamptz NOT NULL DEFAULT now(),
    txid       xid8        NOT NULL DEFAULT pg_current_xact_id(),
    UNIQUE (event_id, audience)
);
CREATE INDEX audience_items_audience ON crier.audience_items (tenant, audience, id);
CREATE INDEX audience_items_audience_txid ON crier.audience_items (tenant, audience, txid);

-- Who belongs to an audience, from when. Leaving sets left_at; joining again
-- starts a new row.
CREATE TABLE crier.memberships (
    tenant       text        NOT NULL,
    audience     text        NOT NULL,
    recipient_id text        NOT NULL,
    joined_at    timestamptz NOT NULL DEFAULT now(),
    left_at      timestamptz,
    -- the position of the feed when the person joined: later audience items
    -- only (unless an item backfills)
    joined_position bigint   NOT NULL,
    left_position   bigint,
    PRIMARY KEY (tenant, audience, recipient_id, joined_at)
);
CREATE INDEX memberships_person ON crier.memberships (tenant, recipient_id) WHERE left_at IS NULL;

-- Per person and item: explicit states (an item marked one by one). NULL:
-- not set, the watermarks decide; true/false override them (so an item can
-- be marked unread below the mark-all-read watermark).
CREATE TABLE crier.feed_states (
    tenant       text        NOT NULL,
    recipient_id text        NOT NULL,
    item_id      bigint      NOT NULL,
    read         boolean,
    seen         boolean,
    archived     boolean,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, recipient_id, item_id)
);

-- Per person: the snapshots of the last "mark all read" / "mark all seen".
-- An item is read by the watermark when its transaction is visible in the
-- snapshot and its position is at most read_upto (NULL: any position).
CREATE TABLE crier.feed_watermarks (
    tenant        text        NOT NULL,
    recipient_id  text        NOT NULL,
    read_snapshot pg_snapshot,
    read_upto     bigint,
    read_at       timestamptz,
    seen_snapshot pg_snapshot,
    seen_upto     bigint,
    seen_at       timestamptz,
    PRIMARY KEY (tenant, recipient_id)
);

-- Is an item (position, inserting transaction) covered by a watermark?
CREATE FUNCTION crier.feed_covered(p_id bigint, p_txid xid8, p_snapshot pg_snapshot, p_upto bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_snapshot IS NOT NULL AND (p_upto IS NULL OR p_id <= p_upto)
           AND pg_visible_in_snapshot(p_txid, p_snapshot)
$$;

-- A person's feed items, newest first: their own items and the items of their
-- audiences within their membership windows, with states. Not archived
-- unless p_archived. Keyset: items with position < p_before (NULL: from the top).
CREATE FUNCTION crier.feed(p_tenant text, p_recipient text, p_before bigint, p_limit integer,
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

-- Unread and unseen counts, computed from the items themselves (no counter
-- that could drift): items not archived, not marked, not covered by the
-- watermarks. Only items newer than the watermark snapshot's xmin need the
-- visibility test; older ones are covered if within read_upto.
CREATE FUNCTION crier.feed_counts(p_tenant text, p_recipient text, OUT unread bigint, OUT unseen bigint)
LANGUAGE sql STABLE AS $$
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
    FROM states
$$;

-- Mark all read (p_what 'read') or seen ('seen'), optionally only up to the
-- position p_upto: stores the caller's transaction snapshot. The read set
-- never shrinks: if an earlier watermark covered positions beyond p_upto, the
-- items it covered there are kept as explicit states first.
CREATE FUNCTION crier.feed_mark_all(p_tenant text, p_recipient text, p_what text, p_upto bigint DEFAULT NULL)
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
    IF p_what = 'read' THEN
        UPDATE crier.feed_watermarks SET read_snapshot = v_snap, read_upto = p_upto, read_at = now()
        WHERE tenant = p_tenant AND recipient_id = p_recipient;
    ELSE
        UPDATE crier.feed_watermarks SET seen_snapshot = v_snap, seen_upto = p_upto, seen_at = now()
        WHERE tenant = p_tenant AND recipient_id = p_recipient;
    END IF;
END;
$$;

-- Marks one item read, seen, archived, or unread/unseen/unarchived (p_value
-- false). Returns false when the person has no such item (another tenant's or
-- another person's item is not theirs).
CREATE FUNCTION crier.feed_mark(p_tenant text, p_recipient text, p_item bigint, p_what text, p_value boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF p_what NOT IN ('read', 'seen', 'archived') THEN
        RAISE EXCEPTION 'crier.feed_mark: what must be read, seen or archived, got %', p_what
            USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM crier.feed(p_tenant, p_recipient, p_item + 1, 1, true) f WHERE f.id = p_item) THEN
        RETURN false;
    END IF;
    -- reading an item also makes it seen
    INSERT INTO crier.feed_states AS s (tenant, recipient_id, item_id, read, seen, archived)
    VALUES (p_tenant, p_recipient, p_item,
            CASE WHEN p_what = 'read' THEN p_value END,
            CASE WHEN p_what = 'seen' THEN p_value WHEN p_what = 'read' AND p_value THEN true END,
            CASE WHEN p_what = 'archived' THEN p_value END)
    ON CONFLICT (tenant, recipient_id, item_id) DO UPDATE SET
        read = CASE WHEN p_what = 'read' THEN p_value ELSE s.read END,
        seen = CASE WHEN p_what = 'seen' THEN p_value WHEN p_what = 'read' AND p_value THEN true ELSE s.seen END,
        archived = CASE WHEN p_what = 'archived' THEN p_value ELSE s.archived END,
        updated_at = now();
    RETURN true;
END;
$$;

-- The last position handed out (0 before the first).
CREATE FUNCTION crier.feed_position_now() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM crier.feed_position
$$;

-- Membership changes apply from now: a person joining sees the audience's
-- items from this position on (and items that backfill).
CREATE FUNCTION crier.join_audience(p_tenant text, p_audience text, p_recipient text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO crier.memberships (tenant, audience, recipient_id, joined_position)
    SELECT p_tenant, p_audience, p_recipient, crier.feed_position_now()
    WHERE NOT EXISTS (SELECT 1 FROM crier.memberships WHERE tenant = p_tenant AND audience = p_audience
                      AND recipient_id = p_recipient AND left_at IS NULL)
$$;

CREATE FUNCTION crier.leave_audience(p_tenant text, p_audience text, p_recipient text) RETURNS void
LANGUAGE sql AS $$
    UPDATE crier.memberships SET left_at = now(), left_position = crier.feed_position_now()
    WHERE tenant = p_tenant AND audience = p_audience AND recipient_id = p_recipient AND left_at IS NULL
$$;
