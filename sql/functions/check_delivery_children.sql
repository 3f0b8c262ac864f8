-- check_delivery_children.sql — crier.check_delivery_children: a delivery that attempts refer
-- to cannot be deleted (nor its id changed), as the foreign key delivery_attempts →
-- deliveries refused before sql/021; checked once per statement. Its triggers.
CREATE OR REPLACE FUNCTION crier.check_delivery_children() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    SELECT o.id INTO v_id FROM removed o
    WHERE EXISTS (SELECT 1 FROM crier.delivery_attempts a WHERE a.delivery_id = o.id)
      AND NOT EXISTS (SELECT 1 FROM crier.deliveries d WHERE d.id = o.id) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '% on crier.deliveries: delivery % is still referenced by delivery attempts', TG_OP, v_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER deliveries_check_children_delete AFTER DELETE ON crier.deliveries
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION crier.check_delivery_children();

-- A changed id (nothing in crier changes one) is checked row by row.
CREATE OR REPLACE FUNCTION crier.check_delivery_children_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM crier.delivery_attempts a WHERE a.delivery_id = OLD.id) THEN
        RAISE EXCEPTION 'UPDATE on crier.deliveries: delivery % is still referenced by delivery attempts', OLD.id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER deliveries_check_children_update AFTER UPDATE OF id ON crier.deliveries
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION crier.check_delivery_children_row();
