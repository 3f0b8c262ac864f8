-- claim_floor_truncated.sql — crier.claim_floor_truncated: the trigger that starts the fast
-- lane's floor over (sql/functions/claim_floor.sql) when crier.events is emptied by TRUNCATE,
-- and that trigger. With RESTART IDENTITY the new events' ids start again at 1, below the
-- floor the old ones had raised: the claim and the awake daemon's probe (crier.events_waiting)
-- started above them and did not see them until the next refresh, which only a claim makes
-- (at most once a second): a daemon with --exit-when-idle, or one asleep, found nothing to do
-- (seen as crier bench deliver's preload fanning out nothing after its TRUNCATE).
CREATE OR REPLACE FUNCTION crier.claim_floor_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM crier.claim_floor_reset(NULL, '-infinity'); -- every lane; the next claim refreshes
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER events_truncate_claim_floor AFTER TRUNCATE ON crier.events
    FOR EACH STATEMENT EXECUTE FUNCTION crier.claim_floor_truncated();
