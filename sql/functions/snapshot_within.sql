-- snapshot_within.sql — crier.snapshot_within: does snapshot p_b see every transaction
-- p_a sees (p_a taken no later than p_b)? Mark-all-read compares the snapshots that
-- bound what a reader was shown (a page's, a live feed's) with each other and with its
-- own, so that a stored watermark never moves back. A transaction below p_a's xmax that
-- p_a sees is invisible to p_b only when p_b lists it as in progress, or lies past p_b's
-- xmax.
CREATE OR REPLACE FUNCTION crier.snapshot_within(p_a pg_snapshot, p_b pg_snapshot)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT pg_snapshot_xmax(p_a) <= pg_snapshot_xmax(p_b)
           AND NOT EXISTS (SELECT 1 FROM pg_snapshot_xip(p_b) x WHERE pg_visible_in_snapshot(x, p_a))
$$;
