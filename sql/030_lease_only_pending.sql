-- 030_lease_only_pending.sql — a lease only on a pending delivery (issue 12; docs/BENCHMARKS.md,
-- "crier bench deliver", twenty-fifth session).
--
-- The results' fence (crier.apply_delivery_results) was d.attempts = … AND d.state = 'pending'
-- AND d.lease_until IS NOT NULL. The state test made deliveries_due (predicate: state IN
-- ('pending', 'sending')) a way to reach the rows without any condition on its key, and a plan
-- made on an empty or freshly analyzed table read that whole index — the whole due backlog —
-- for each batch of results. The fence is now the attempt number under a lease, which names no
-- partial index's column. A lease means "pending and being sent": every writer that moves a
-- delivery out of 'pending' clears it (the results, the claim's parking), and this constraint
-- makes that a rule rather than a habit. A lease left on a row that is no longer pending (none
-- is known) meant nothing and is cleared first.
UPDATE crier.deliveries SET lease_until = NULL WHERE lease_until IS NOT NULL AND state <> 'pending';
ALTER TABLE crier.deliveries ADD CONSTRAINT deliveries_lease_only_pending
    CHECK (lease_until IS NULL OR state = 'pending') NOT VALID;
ALTER TABLE crier.deliveries VALIDATE CONSTRAINT deliveries_lease_only_pending;
