-- 015_retention.sql — retention of finished rows (the retention worker, src/engine/retention.c,
-- calls crier.retain). Notifications stay: their unique key is what keeps a re-emitted event
-- from reaching anyone twice once its event row is gone, and feed items reference them. So a
-- notification no longer needs its event row: the foreign key goes (the fan-out still writes
-- event_id, and the index notifications_event stays for lookups).
ALTER TABLE crier.notifications DROP CONSTRAINT IF EXISTS notifications_event_id_fkey;
