-- feed_position_now.sql — crier.feed_position_now: the last feed position handed out (0
-- before the first).
CREATE OR REPLACE FUNCTION crier.feed_position_now() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM crier.feed_position
$$;
