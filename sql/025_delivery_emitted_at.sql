-- 025_delivery_emitted_at.sql — each delivery carries its event's commit time (issue 12).
--
-- GET /metrics' crier_delivery_latency_seconds (commit -> delivered) took the event's
-- created_at through the delivery's notification and the notification's event: two index
-- lookups per delivered row in every batch of results, 3.2 µs of the 30 µs of SQL a delivery
-- costs (docs/BENCHMARKS.md, bench deliver, fourteenth session). The fan-out knows that time
-- when it makes the delivery (crier.claim_events returns it) and now writes it here (a
-- digest's delivery: its last event's); the lookup is left for rows made before this
-- migration.
-- Nullable with no default: adding the column rewrites nothing.
ALTER TABLE crier.deliveries ADD COLUMN emitted_at timestamptz;
COMMENT ON COLUMN crier.deliveries.emitted_at IS
    'the commit time of the event this delivery is for (NULL: not recorded; see crier.metrics_sent)';
