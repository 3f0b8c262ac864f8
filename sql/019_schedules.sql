-- 019_schedules.sql — time in rules, part 2: scheduled sends and recurring schedules
-- (sql/functions/emit.sql, fire_timers.sql, fire_schedules.sql, cron_next.sql; docs/RULES.md
-- "Schedules", docs/API.md "not_before").

-- Scheduled sends: an event emitted with a "not before" time in the future waits in the
-- state 'scheduled' (which the fan-out's claim never takes) with a timer of kind 'send'
-- due at that time; firing the timer makes the event pending. not_before keeps the time
-- asked for (NULL: an ordinary emit).
ALTER TABLE crier.events ADD COLUMN not_before timestamptz;
ALTER TABLE crier.events DROP CONSTRAINT events_state_check;
ALTER TABLE crier.events ADD CONSTRAINT events_state_check
    CHECK (state IN ('pending', 'done', 'dead', 'scheduled'));

ALTER TABLE crier.timers ADD COLUMN event_id bigint; -- kind send
ALTER TABLE crier.timers DROP CONSTRAINT timers_kind_check;
ALTER TABLE crier.timers ADD CONSTRAINT timers_kind_check CHECK (kind IN ('delay', 'digest', 'send'));

-- Recurring schedules: what rules declare (crier.schedule) lives in the rules; this table
-- keeps, per (schedule, tenant), what has been fired: the last occurrence handled and the
-- next one due. A daemon's timer worker locks the rows that are due (FOR UPDATE SKIP
-- LOCKED), emits one event per occurrence (its dedupe key derived from the schedule and
-- the occurrence's instant) and moves the row on, in one transaction. The definition
-- columns are those of the last daemon that fired the row (crier status shows them).
CREATE TABLE crier.schedules (
    name            text        NOT NULL,
    tenant          text        NOT NULL,
    cron            text        NOT NULL,
    time_zone       text        NOT NULL,
    event_type      text        NOT NULL,
    catch_up        text        NOT NULL CHECK (catch_up IN ('each', 'latest')),
    last_occurrence timestamptz,          -- the last occurrence handled (emitted or skipped)
    next_occurrence timestamptz,          -- NULL: the expression has no more occurrences
    last_event_id   bigint,
    last_fired_at   timestamptz,
    last_error      text,                 -- why the last attempt failed
    retry_after     timestamptz,          -- after a failure: not tried again before
    seen_at         timestamptz NOT NULL DEFAULT now(), -- the last time a daemon fired or registered it
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, tenant)
);
CREATE INDEX schedules_due ON crier.schedules (next_occurrence);
