-- 003_rules_status.sql — what each running crier serve has loaded: its rules
-- version, and whether the last reload was rejected (and why). Written by the
-- engine at start and after every reload; read by crier status.

CREATE TABLE crier.rules_status (
    worker          text        PRIMARY KEY, -- host:pid
    rules_dir       text        NOT NULL,
    version         text        NOT NULL,    -- the version in use (content hash)
    loaded_at       timestamptz NOT NULL,    -- when that version was swapped in
    reloads_ok      integer     NOT NULL DEFAULT 0,
    reloads_failed  integer     NOT NULL DEFAULT 0,
    last_error      text,                    -- the last rejected reload's problems, NULL after a good one
    last_error_at   timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
