-- 002_delivery.sql — the delivery engine's tables: channel content columns,
-- per-delivery retry schedules, a record of every attempt, endpoint health
-- (pause, probe, resume, disable). The two statements the workers run per
-- batch are in sql/functions/: claim_deliveries.sql, complete_deliveries.sql
-- (and probe_delay.sql).

-- Content for channels other than webhook, and the retry policy.
--   webhook: target = URL, body = JSON, secret = whsec_… (several, space-separated, while rotating)
--   email:   target = recipient address, subject, body = text part, html = HTML part, sender = From
--   kafka:   target = topic, body = message value
ALTER TABLE crier.deliveries
    ADD COLUMN subject        text,
    ADD COLUMN html           text,
    ADD COLUMN sender         text,
    -- retry_schedule[n] is the delay in seconds before attempt n (attempt 1 is
    -- normally 0); its length is the number of attempts. NULL: the channel's default.
    ADD COLUMN retry_schedule integer[],
    -- attempts made before the last replay: the schedule restarts from here.
    ADD COLUMN budget_start   integer NOT NULL DEFAULT 0,
    ADD COLUMN dead_at        timestamptz;

ALTER TABLE crier.deliveries DROP CONSTRAINT deliveries_state_check;
-- paused: waits for its endpoint to recover (attempts are not spent meanwhile).
ALTER TABLE crier.deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('pending', 'sending', 'paused', 'delivered', 'dead'));
CREATE INDEX deliveries_dead ON crier.deliveries (dead_at) WHERE state = 'dead';
CREATE INDEX deliveries_paused ON crier.deliveries (tenant, channel, target) WHERE state = 'paused';

-- One row per attempt, whatever its outcome.
CREATE TABLE crier.delivery_attempts (
    delivery_id      bigint           NOT NULL REFERENCES crier.deliveries (id),
    attempt          integer          NOT NULL,
    started_at       timestamptz      NOT NULL,
    duration_ms      double precision NOT NULL,
    -- delivered, retry (another attempt is scheduled), dead, released (shutdown)
    outcome          text             NOT NULL,
    status           integer,          -- HTTP status or SMTP reply code
    error            text,
    response_excerpt text,             -- bounded
    PRIMARY KEY (delivery_id, attempt)
);

-- Endpoints that have failed at least once (rows appear on the first failure).
-- A run of consecutive failures pauses the endpoint: its deliveries wait in
-- state 'paused', one is sent as a probe at next_probe_at, a success resumes
-- the endpoint; failing for longer than the disable horizon disables it.
CREATE TABLE crier.endpoints (
    id                   bigserial   PRIMARY KEY,
    tenant               text        NOT NULL,
    channel              text        NOT NULL,
    target               text        NOT NULL,
    state                text        NOT NULL DEFAULT 'active'
                                     CHECK (state IN ('active', 'paused', 'disabled')),
    consecutive_failures integer     NOT NULL DEFAULT 0,
    failing_since        timestamptz,
    paused_at            timestamptz,
    next_probe_at        timestamptz,
    probes               integer     NOT NULL DEFAULT 0,
    disabled_at          timestamptz,
    last_status          integer,
    last_error           text,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, channel, target)
);
CREATE INDEX endpoints_probe ON crier.endpoints (next_probe_at) WHERE state = 'paused';
