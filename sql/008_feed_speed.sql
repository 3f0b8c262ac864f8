-- 008_feed_speed.sql — the feed at a million items (measured with `crier
-- bench feed`; plans and figures in docs/BENCHMARKS.md): indexes that fit its
-- queries. The functions it also changed (crier.feed_counts planned once per
-- connection, crier.feed_mark_all's clearing of explicit marks driven by the
-- person's own marks) live in sql/functions/.

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
