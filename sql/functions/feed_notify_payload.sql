-- feed_notify_payload.sql — crier.feed_notify_payload: the payload of a live-feed
-- announcement on channel crier_feed (Server-Sent Events of crier serve's HTTP API).
-- Changes to a feed are announced when they commit, and a stream asks "what became
-- visible since the snapshot I last read at" (crier.feed_change_ids): an exact question
-- whatever order transactions commit in, the same way mark-all-read is exact.
--
-- Payloads (one per distinct person or audience per statement; identical
-- payloads of one transaction are folded by PostgreSQL):
--   p<len>:<tenant><recipient>   a person's items or states changed
--   m<len>:<tenant><recipient>   a person's memberships changed
--   a<len>:<tenant><audience>    an audience received items
--   P<len>:<tenant>, M<len>:<tenant>   the same for many people of the tenant
--                                 at once (a statement touching more than 16
--                                 people: a bulk fan-out page sends one
--                                 notification, not one per recipient)
-- <len> is the tenant's length in bytes, so ids may hold any character.
CREATE OR REPLACE FUNCTION crier.feed_notify_payload(p_kind text, p_tenant text, p_who text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_kind || octet_length(p_tenant) || ':' || p_tenant || p_who
$$;
