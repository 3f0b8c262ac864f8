-- cron_parse.sql — crier.cron_parse: a cron expression of a recurring schedule (crier.schedule)
-- parsed into the sets of each field, the same grammar as lua/crier/cron.lua (which checks
-- rules without a database; tests/vectors/cron.tsv pins both): five fields "minute hour
-- day-of-month month day-of-week" or six with a leading "second"; items "*", "N", "N-M", each
-- with an optional "/STEP" ("N/STEP" is "N-max/STEP"), comma lists; JAN-DEC and SUN-SAT names;
-- weekday 7 is Sunday; macros @yearly @annually @monthly @weekly @daily @midnight @hourly.
-- dom_star / dow_star: the field starts with "*" (when neither does, a day matches either).
-- Raises 22023 with what is wrong.
CREATE OR REPLACE FUNCTION crier.cron_parse(p_expr text, OUT seconds int[], OUT minutes int[], OUT hours int[],
                                            OUT doms int[], OUT months int[], OUT dows int[],
                                            OUT dom_star boolean, OUT dow_star boolean)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_text text := btrim(coalesce(p_expr, ''));
    v_parts text[];
    v_names text[] := ARRAY['second', 'minute', 'hour', 'day of month', 'month', 'day of week'];
    v_lo int[] := ARRAY[0, 0, 0, 1, 1, 0];
    v_hi int[] := ARRAY[59, 59, 23, 31, 12, 7];
    v_set int[];
    v_item text;
    v_range text;
    v_step text;
    v_a text;
    v_b text;
    v_from int;
    v_to int;
    v_by int;
    v_i int;
    v_possible boolean := false;
BEGIN
    v_text := CASE lower(v_text)
        WHEN '@yearly' THEN '0 0 1 1 *' WHEN '@annually' THEN '0 0 1 1 *' WHEN '@monthly' THEN '0 0 1 * *'
        WHEN '@weekly' THEN '0 0 * * 0' WHEN '@daily' THEN '0 0 * * *' WHEN '@midnight' THEN '0 0 * * *'
        WHEN '@hourly' THEN '0 * * * *' ELSE v_text END;
    IF v_text LIKE '@%' THEN
        RAISE EXCEPTION 'crier.cron_parse: unknown macro % (use @yearly, @monthly, @weekly, @daily or @hourly)',
            quote_literal(v_text) USING ERRCODE = '22023';
    END IF;
    v_parts := regexp_split_to_array(v_text, '\s+');
    IF v_text = '' OR cardinality(v_parts) NOT IN (5, 6) THEN
        RAISE EXCEPTION 'crier.cron_parse: % has % fields; expected 5 (minute hour day-of-month month day-of-week) or 6 (second first)',
            quote_literal(coalesce(p_expr, '')), CASE WHEN v_text = '' THEN 0 ELSE cardinality(v_parts) END
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(v_parts) = 5 THEN
        v_parts := '0'::text || v_parts;
    END IF;
    FOR v_i IN 1..6 LOOP
        v_set := '{}';
        IF v_parts[v_i] = '' OR v_parts[v_i] LIKE '%,,%' OR v_parts[v_i] LIKE ',%' OR v_parts[v_i] LIKE '%,' THEN
            RAISE EXCEPTION 'crier.cron_parse: %: %: % has an empty list item', quote_literal(p_expr), v_names[v_i],
                quote_literal(v_parts[v_i]) USING ERRCODE = '22023';
        END IF;
        FOREACH v_item IN ARRAY string_to_array(v_parts[v_i], ',') LOOP
            v_range := split_part(v_item, '/', 1);
            v_step := CASE WHEN position('/' IN v_item) > 0 THEN substr(v_item, position('/' IN v_item) + 1) END;
            IF v_range = '*' THEN
                v_from := v_lo[v_i]; v_to := v_hi[v_i];
            ELSE
                IF position('-' IN v_range) > 1 THEN
                    v_a := split_part(v_range, '-', 1);
                    v_b := substr(v_range, position('-' IN v_range) + 1);
                ELSE
                    v_a := v_range; v_b := NULL;
                END IF;
                v_from := crier.cron_value(p_expr, v_names[v_i], v_i, v_a, v_lo[v_i], v_hi[v_i]);
                IF v_b IS NOT NULL THEN
                    v_to := crier.cron_value(p_expr, v_names[v_i], v_i, v_b, v_lo[v_i], v_hi[v_i]);
                    IF v_to < v_from THEN
                        RAISE EXCEPTION 'crier.cron_parse: %: %: range % runs backwards', quote_literal(p_expr),
                            v_names[v_i], quote_literal(v_range) USING ERRCODE = '22023';
                    END IF;
                ELSE
                    v_to := CASE WHEN v_step IS NOT NULL THEN v_hi[v_i] ELSE v_from END;
                END IF;
            END IF;
            v_by := 1;
            IF v_step IS NOT NULL THEN
                IF v_step !~ '^[0-9]{1,9}$' OR v_step::int < 1 THEN
                    RAISE EXCEPTION 'crier.cron_parse: %: %: step % must be a whole number of at least 1',
                        quote_literal(p_expr), v_names[v_i], quote_literal(v_step) USING ERRCODE = '22023';
                END IF;
                v_by := v_step::int;
            END IF;
            v_set := v_set || ARRAY(SELECT CASE WHEN v_i = 6 AND g = 7 THEN 0 ELSE g END
                                    FROM generate_series(v_from, v_to, v_by) g);
        END LOOP;
        v_set := ARRAY(SELECT DISTINCT x FROM unnest(v_set) x ORDER BY x);
        CASE v_i
            WHEN 1 THEN seconds := v_set; WHEN 2 THEN minutes := v_set; WHEN 3 THEN hours := v_set;
            WHEN 4 THEN doms := v_set; WHEN 5 THEN months := v_set; ELSE dows := v_set;
        END CASE;
    END LOOP;
    dom_star := v_parts[4] LIKE '*%';
    dow_star := v_parts[6] LIKE '*%';
    IF dom_star OR dow_star THEN
        SELECT EXISTS (SELECT 1 FROM unnest(months) m, unnest(doms) d
                       WHERE d <= (ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[m])
        INTO v_possible;
        IF NOT v_possible THEN
            RAISE EXCEPTION 'crier.cron_parse: % never occurs: no chosen month has that day', quote_literal(p_expr)
                USING ERRCODE = '22023';
        END IF;
    END IF;
END
$$;
