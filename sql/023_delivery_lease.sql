-- 023_delivery_lease.sql — a delivery's claim changes no indexed column (issue 12, item 3;
-- docs/BENCHMARKS.md, "the lease in its own column").
--
-- A claim used to set state = 'sending' and due_at = the lease's end. Both columns are named
-- by indexes (state by the partial indexes' predicates, due_at by deliveries_due), so every
-- claim was a non-HOT update: a new row version wherever there was room, a new entry in the
-- primary key and in deliveries_due, and as many dead entries for vacuum. The lease now has
-- its own column, which no index names: a claim keeps state = 'pending' and due_at, raises
-- attempts and sets lease_until, an update that stays on its page (fillfactor 70, sql/021)
-- with no index entry at all. Being sent is now state = 'pending' AND lease_until IS NOT NULL
-- (what 'sending' meant, an expired lease not yet claimed again included); the API, the
-- metrics and crier status still call it 'sending'. Claims take due rows whose lease is
-- absent or over; a result clears the lease (the attempt number stays the fence against a
-- worker whose lease was taken over). The state 'sending' is no longer stored.
ALTER TABLE crier.deliveries ADD COLUMN lease_until timestamptz;
UPDATE crier.deliveries SET state = 'pending', lease_until = due_at WHERE state = 'sending';
