-- timer_key.sql — crier.timer_key: the deterministic key of a timer or a throttle: the
-- first 128 bits of SHA-256 over the length-prefixed parts (what the timer is for), so the
-- same cause always names the same row.
CREATE OR REPLACE FUNCTION crier.timer_key(p_parts text[]) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(sha256(convert_to(
               (SELECT string_agg(CASE WHEN x IS NULL THEN '-' ELSE octet_length(x)::text || ':' || x END, ''
                                  ORDER BY i)
                FROM unnest(p_parts) WITH ORDINALITY AS u(x, i)), 'UTF8')) FROM 1 FOR 16), 'hex')::uuid
$$;
