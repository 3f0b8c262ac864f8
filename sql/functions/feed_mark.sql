-- feed_mark.sql — crier.feed_mark: marks one item read, seen, archived, or
-- unread/unseen/unarchived (p_value false). Returns false when the person has no such
-- item (another tenant's or another person's item is not theirs).
CREATE OR REPLACE FUNCTION crier.feed_mark(p_tenant text, p_recipient text, p_item bigint, p_what text, p_value boolean)
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
