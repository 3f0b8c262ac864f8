-- 025_delivery_emitted_at.sql — each delivery carries its event's commit time (issue 12).
--
-- GET /metrics' crier_delivery_latency_seconds (commit -> delivered) took the event's
-- created_at through the delivery's notification and the notification's event: two index
-- lookups per delivered row in every batch of results, 3.2 µs of the 30 µs of SQL a delivery
-- costs (docs/BENCHMARKS.md, bench deliver, fourteenth session). The fan-out knows that time
-- when it makes the delivery (crier.claim_events returns it) and writes it here; a digest's
-- delivery gets its last event's (crier.flush_digests).
--
-- Deliveries that can still be sent (not yet final, or dead and so replayable) get theirs
-- now, the event's created_at, or the delivery's own when retention removed the event; the
-- others are never measured again and keep NULL.
ALTER TABLE crier.deliveries ADD COLUMN emitted_at timestamptz;
UPDATE crier.deliveries d
SET emitted_at = coalesce((SELECT e.created_at FROM crier.notifications n JOIN crier.events e ON e.id = n.event_id
                           WHERE n.id = d.notification_id), d.created_at)
WHERE d.state NOT IN ('delivered', 'suppressed', 'digested');
COMMENT ON COLUMN crier.deliveries.emitted_at IS
    'the commit time of the event this delivery is for (NULL only on deliveries final before sql/025)';
