-- check_digest_reference.sql — crier.check_digest_reference: a delivery's digest_id names a
-- digest, as the foreign key deliveries → digests required before sql/024; the digest is
-- locked FOR KEY SHARE, as the key locked it, so that it cannot go away before the
-- transaction ends. Its triggers fire only for rows that name a digest (their WHEN clause),
-- so the fan-out's inserts, which never do, queue nothing.
CREATE OR REPLACE FUNCTION crier.check_digest_reference() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM crier.digests g WHERE g.id = NEW.digest_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION '% on crier.deliveries: delivery % names digest %, which does not exist',
            TG_OP, NEW.id, NEW.digest_id
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Create the digest first, or leave digest_id NULL.';
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER deliveries_check_digest_insert AFTER INSERT ON crier.deliveries
    FOR EACH ROW WHEN (NEW.digest_id IS NOT NULL) EXECUTE FUNCTION crier.check_digest_reference();

CREATE OR REPLACE TRIGGER deliveries_check_digest_update AFTER UPDATE OF digest_id ON crier.deliveries
    FOR EACH ROW WHEN (NEW.digest_id IS NOT NULL AND NEW.digest_id IS DISTINCT FROM OLD.digest_id)
    EXECUTE FUNCTION crier.check_digest_reference();
