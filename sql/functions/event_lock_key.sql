-- event_lock_key.sql — crier.event_lock_key: the advisory-lock key of an event's natural key
-- (tenant, event type, entity id), the same signed 64-bit integer as crier_key_lock in
-- src/base/keys.c: the first 8 bytes, big-endian, of SHA-256 over the domain
-- 'crier.event.v1' and each part as byte 1, its UTF-8 length in 4 bytes big-endian, its bytes.
-- The fan-out takes pg_try_advisory_xact_lock of it in the same statement as its claim
-- (src/engine/fanout.c), so that no two workers fan out events of one entity at once;
-- tests/integration/notification_keys.sh checks it against tests/vectors/notification_keys.tsv.
CREATE OR REPLACE FUNCTION crier.event_lock_key(p_tenant text, p_event_type text, p_entity_id text)
RETURNS bigint
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT ('x' || encode(substr(sha256(
               convert_to('crier.event.v1', 'UTF8')
               || '\x01'::bytea || int4send(octet_length(convert_to(p_tenant, 'UTF8'))) || convert_to(p_tenant, 'UTF8')
               || '\x01'::bytea || int4send(octet_length(convert_to(p_event_type, 'UTF8'))) || convert_to(p_event_type, 'UTF8')
               || '\x01'::bytea || int4send(octet_length(convert_to(p_entity_id, 'UTF8'))) || convert_to(p_entity_id, 'UTF8')
           ), 1, 8), 'hex'))::bit(64)::bigint
$$;
