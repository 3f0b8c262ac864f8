-- check_notification_children.sql — crier.check_notification_children: a notification
-- that deliveries refer to cannot be deleted (nor its id changed), as the foreign key
-- deliveries → notifications refused before sql/014; checked once per statement. Its
-- triggers.
CREATE OR REPLACE FUNCTION crier.check_notification_children() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    SELECT o.id INTO v_id FROM removed o
    WHERE EXISTS (SELECT 1 FROM crier.deliveries d WHERE d.notification_id = o.id)
      AND NOT EXISTS (SELECT 1 FROM crier.notifications n WHERE n.id = o.id) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '% on crier.notifications: notification % is still referenced by deliveries', TG_OP, v_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER notifications_check_children_delete AFTER DELETE ON crier.notifications
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION crier.check_notification_children();

-- A changed id (nothing in crier changes one) is checked row by row.
CREATE OR REPLACE FUNCTION crier.check_notification_children_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM crier.deliveries d WHERE d.notification_id = OLD.id) THEN
        RAISE EXCEPTION 'UPDATE on crier.notifications: notification % is still referenced by deliveries', OLD.id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER notifications_check_children_update AFTER UPDATE OF id ON crier.notifications
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION crier.check_notification_children_row();
