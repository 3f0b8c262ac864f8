-- 012_event_lanes.sql — fan-out lanes: every event starts in the fast lane (0); one whose
-- rules ran longer than the fast lane's soft limit moves to the slow lane (1), where a
-- worker of its own plans it with the full limits, so that a looping or pathological
-- rule holds back neither the fast lane nor delivery (src/engine/fanout.h).
ALTER TABLE crier.events ADD COLUMN lane smallint NOT NULL DEFAULT 0 CHECK (lane IN (0, 1));

-- The claim: the due events of one lane, in id order.
CREATE INDEX events_pending_lane ON crier.events (lane, id) WHERE state = 'pending';
DROP INDEX crier.events_pending;
