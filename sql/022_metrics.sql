-- 022_metrics.sql — the counters and histograms of GET /metrics that must
-- equal rows (events fanned out, notifications created, deliveries delivered,
-- …). They are added in the transaction that changes the rows — a rolled-back
-- batch counts nothing, a worker's death loses nothing — by the statements
-- that change them (the fan-out's write, crier.complete_deliveries, …) or, for
-- the rarer transitions (dead, suppressed, digested), by a row trigger whose
-- WHEN clause keeps it off the hot path. crier.emit adds nothing: the events
-- accepted are computed at scrape time (fanned out + quarantined - replayed +
-- waiting), so an application's transaction pays nothing for metrics.
--
-- Each database backend adds to its own rows (shard = its pg_backend_pid()), so
-- workers never wait on each other's counter rows and cannot deadlock on them;
-- a scrape sums the shards, and the heartbeat folds the shards of backends that
-- are gone into shard 0. A histogram's buckets are stored per bucket (not
-- cumulative) with label2 = 'le' and value2 = the bucket's upper bound; the
-- scrape makes them cumulative.
CREATE TABLE crier.metric_counters (
    metric  text             NOT NULL,
    label1  text             NOT NULL DEFAULT '',
    value1  text             NOT NULL DEFAULT '',
    label2  text             NOT NULL DEFAULT '',
    value2  text             NOT NULL DEFAULT '',
    shard   integer          NOT NULL,
    value   double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (metric, label1, value1, label2, value2, shard)
);
