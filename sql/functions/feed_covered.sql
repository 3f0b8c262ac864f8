-- feed_covered.sql — crier.feed_covered: is an item (position, inserting transaction)
-- covered by a watermark (a mark-all snapshot and its upper position)?
CREATE OR REPLACE FUNCTION crier.feed_covered(p_id bigint, p_txid xid8, p_snapshot pg_snapshot, p_upto bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_snapshot IS NOT NULL AND (p_upto IS NULL OR p_id <= p_upto)
           AND pg_visible_in_snapshot(p_txid, p_snapshot)
$$;
