-- check_digest_children.sql — crier.check_digest_children: a digest that deliveries refer to
-- cannot be deleted (nor its id changed), as the foreign key deliveries → digests refused
-- before sql/024; checked once per statement. Its triggers.
CREATE OR REPLACE FUNCTION crier.check_digest_children() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    SELECT o.id INTO v_id FROM removed o
    WHERE EXISTS (SELECT 1 FROM crier.deliveries d WHERE d.digest_id = o.id)
      AND NOT EXISTS (SELECT 1 FROM crier.digests g WHERE g.id = o.id) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '% on crier.digests: digest % is still referenced by deliveries', TG_OP, v_id
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Delete the deliveries that name it first (crier.retain does so after their retention).';
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER digests_check_children_delete AFTER DELETE ON crier.digests
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION crier.check_digest_children();

-- A changed id (nothing in crier changes one) is checked row by row.
CREATE OR REPLACE FUNCTION crier.check_digest_children_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM crier.deliveries d WHERE d.digest_id = OLD.id) THEN
        RAISE EXCEPTION 'UPDATE on crier.digests: digest % is still referenced by deliveries', OLD.id
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Digest ids never change; leave the id as it is.';
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER digests_check_children_update AFTER UPDATE OF id ON crier.digests
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION crier.check_digest_children_row();
