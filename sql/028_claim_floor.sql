-- 028_claim_floor.sql — where the fast lane's claim starts in events_pending_lane (issue 12).
-- The done UPDATE leaves each event's old version in events_pending_lane; a leaf page gives
-- such (killed) entries up only when an insert needs its room, and inserts go to the
-- right-hand end. After a backlog or a burst the left-hand pages keep their killed entries
-- until VACUUM, and every claim and probe that starts at the left end steps over them
-- (500,000 done events: 1,919 pages, 2.3-6.9 ms a claim). The claim starts at the lane's
-- floor instead: an id below which no event of the lane can be claimable
-- (sql/functions/claim_floor.sql keeps it and says why it is safe).
CREATE TABLE crier.claim_floor (
    lane smallint PRIMARY KEY CHECK (lane IN (0, 1)),
    floor bigint NOT NULL DEFAULT 0,   -- no claimable event of the lane has a lower id
    next_floor bigint,                 -- a candidate: every id below it is final once ...
    next_xmax xid8,                    -- ... every transaction below this xid has ended
    refreshed_at timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO crier.claim_floor (lane) VALUES (0);

-- Events made pending again with an id that may be below the floor (a scheduled send that
-- fires, a replayed dead event): the claim starts at the lowest of these too, until the next
-- refresh of the floor has seen them.
CREATE TABLE crier.claim_floor_lowered (
    lane smallint NOT NULL,
    id bigint NOT NULL
);
CREATE INDEX claim_floor_lowered_lane_id ON crier.claim_floor_lowered (lane, id);
