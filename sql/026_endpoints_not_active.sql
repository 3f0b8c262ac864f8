-- 026_endpoints_not_active.sql — the endpoints that are not active, found without reading
-- the others (issue 12).
--
-- crier.claim_deliveries asks once per claim whether any endpoint is paused or disabled, and
-- looks up each claimed delivery's endpoint only when one is: 200 index probes per claim of
-- 200 otherwise, for the usual answer "none" (docs/BENCHMARKS.md, bench deliver, fourteenth
-- session). Endpoints that are active (most, and every one that never failed) are not in
-- this index, so both the question and the probes read a tiny index.
CREATE INDEX endpoints_not_active ON crier.endpoints (tenant, channel, target) WHERE state <> 'active';
