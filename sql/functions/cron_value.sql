-- cron_value.sql — crier.cron_value: one number or name of a cron field, checked against the
-- field's range (crier.cron_parse's helper; raises 22023 naming the expression and field).
CREATE OR REPLACE FUNCTION crier.cron_value(p_expr text, p_name text, p_field int, p_text text, p_lo int, p_hi int)
RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v int;
BEGIN
    IF p_text ~ '^[0-9]{1,9}$' THEN
        v := p_text::int;
    ELSIF p_field = 5 THEN
        v := array_position(ARRAY['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'],
                            upper(p_text));
    ELSIF p_field = 6 THEN
        v := array_position(ARRAY['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'], upper(p_text)) - 1;
    END IF;
    IF v IS NULL THEN
        RAISE EXCEPTION 'crier.cron_parse: %: %: % is not a number%', quote_literal(p_expr), p_name,
            quote_literal(p_text),
            CASE p_field WHEN 5 THEN ' or a month name (JAN-DEC)' WHEN 6 THEN ' or a day name (SUN-SAT)' ELSE '' END
            USING ERRCODE = '22023';
    END IF;
    IF v < p_lo OR v > p_hi THEN
        RAISE EXCEPTION 'crier.cron_parse: %: %: % is out of range %-%', quote_literal(p_expr), p_name, v, p_lo, p_hi
            USING ERRCODE = '22023';
    END IF;
    RETURN v;
END
$$;
