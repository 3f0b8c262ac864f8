-- 016_worker_heartbeats.sql — liveness of the crier serve workers: each one
-- upserts its row of crier.rules_status every --heartbeat seconds (and once
-- more with stopped_at when it stops cleanly) with what it is doing;
-- crier.worker_state() says alive, stopped or dead (3 missed beats). Rows of
-- workers stopped or dead for an hour are deleted by the others' heartbeats.

ALTER TABLE crier.rules_status
    ADD COLUMN started_at           timestamptz,                -- when this process started
    ADD COLUMN heartbeat_at         timestamptz,                -- its last heartbeat
    ADD COLUMN heartbeat_interval   real        NOT NULL DEFAULT 5, -- seconds between its beats
    ADD COLUMN stopped_at           timestamptz,                -- set by a clean stop
    ADD COLUMN events_in_flight     integer     NOT NULL DEFAULT 0, -- claimed by its fan-out batch now
    ADD COLUMN deliveries_in_flight integer     NOT NULL DEFAULT 0, -- sends in flight and results unwritten
    ADD COLUMN events_fanned_out    bigint      NOT NULL DEFAULT 0, -- since it started
    ADD COLUMN deliveries_claimed   bigint      NOT NULL DEFAULT 0; -- since it started
