-- metrics_delivery_state.sql — crier.metrics_delivery_state: the row trigger that
-- counts the rarer outcomes of a delivery wherever they happen (the fan-out's
-- write, the claim, crier.complete_deliveries, the timers):
-- crier_deliveries_total{channel, outcome="dead"|"digested"} and
-- crier_notifications_suppressed_total{channel, reason}. Its WHEN clauses run
-- for every row but call the function only for those transitions, so the
-- common ones (pending, sending, delivered: counted set-wise by
-- crier.metrics_sent) cost no call.
CREATE OR REPLACE FUNCTION crier.metrics_delivery_state()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'suppressed' THEN
        PERFORM crier.metric_add(ARRAY['crier_notifications_suppressed_total'], ARRAY['channel'], ARRAY[NEW.channel],
                                 ARRAY['reason'], ARRAY[crier.suppression_reason(NEW.last_error)], ARRAY[1::double precision]);
    ELSE
        PERFORM crier.metric_add(ARRAY['crier_deliveries_total'], ARRAY['channel'], ARRAY[NEW.channel],
                                 ARRAY['outcome'], ARRAY[NEW.state], ARRAY[1::double precision]);
    END IF;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER deliveries_metrics_insert AFTER INSERT ON crier.deliveries
    FOR EACH ROW WHEN (NEW.state IN ('dead', 'suppressed', 'digested'))
    EXECUTE FUNCTION crier.metrics_delivery_state();
CREATE OR REPLACE TRIGGER deliveries_metrics_update AFTER UPDATE OF state ON crier.deliveries
    FOR EACH ROW WHEN (NEW.state IN ('dead', 'suppressed', 'digested') AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION crier.metrics_delivery_state();
