-- 027_drop_metric_observe.sql — crier.metric_observe had one caller, crier.metrics_sent, which
-- now writes its histograms in its own single INSERT (functions/metrics_sent.sql; issue 12).
DROP FUNCTION IF EXISTS crier.metric_observe(text, text, text[], double precision[]);
DELETE FROM crier.schema_functions WHERE name = 'metric_observe.sql';
