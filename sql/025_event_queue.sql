-- 025_event_queue.sql — the events waiting for fan-out, and the quarantined ones, are found
-- through narrow tables of their own instead of partial indexes of crier.events, so that
-- marking an event done is a HOT update (issue 12).
--
-- A partial index WHERE state = 'pending' (events_pending_lane) or WHERE state = 'dead'
-- (events_dead) makes every update that changes the state a non-HOT one: PostgreSQL writes a
-- new version of the event with entries in its primary key, dedupe and entity indexes. That
-- was the cost of marking a batch done: 50,000 events claimed and marked done in batches of
-- 500 took 1,180-1,420 ms; through crier.event_queue, with the events' pages 40 % full so
-- that each new version fits beside the old one, 705-870 ms (alternating runs of a psql
-- loop; docs/BENCHMARKS.md, twelfth session).
--
--   crier.event_queue   one row per (lane, event) that may be due: inserted when an event
--                       is inserted or updated into state 'pending', or its lane or
--                       available_at changes while pending (functions/queue_events.sql);
--                       deleted by the fan-out's write when it marks the event done, or by
--                       a claim that finds its event no longer pending there. crier.events
--                       stays the truth: a claim returns only events whose state, lane and
--                       available_at say so (functions/claim_events.sql).
--   crier.dead_events   one row per event that went into state 'dead': the dead-letter list
--                       and its counts read it (and the event's row to confirm it).
CREATE TABLE crier.event_queue (
    lane         smallint NOT NULL,
    id           bigint NOT NULL,
    available_at timestamptz NOT NULL,
    PRIMARY KEY (lane, id)
);
INSERT INTO crier.event_queue (lane, id, available_at)
    SELECT lane, id, available_at FROM crier.events WHERE state = 'pending';

CREATE TABLE crier.dead_events (
    id           bigint PRIMARY KEY,
    tenant       text NOT NULL,
    processed_at timestamptz
);
CREATE INDEX dead_events_tenant ON crier.dead_events (tenant, processed_at);
INSERT INTO crier.dead_events (id, tenant, processed_at)
    SELECT id, tenant, processed_at FROM crier.events WHERE state = 'dead';

DROP INDEX crier.events_pending_lane;
DROP INDEX crier.events_dead;

-- Room on each page for the new versions of its events, which are marked done in the same
-- transaction (the claim's batch): a HOT update needs the new version on the old one's page,
-- and the new version is larger (processed_at and rules_version are set). At 50 % a fan-out
-- of 200 small events made 155 of 197 updates HOT, at 40 % all of them
-- (tests/integration/event_queue.sh).
ALTER TABLE crier.events SET (fillfactor = 40);

-- The events waiting for fan-out (due or not), for the counts of GET /metrics, the status
-- and the outbox lag: through the queue, not a scan of every event.
CREATE VIEW crier.pending_events AS
    SELECT e.* FROM crier.event_queue q JOIN crier.events e ON e.id = q.id AND e.lane = q.lane
    WHERE e.state = 'pending';
