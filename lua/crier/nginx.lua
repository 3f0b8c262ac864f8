-- crier.nginx: what an nginx (lua-nginx-module / OpenResty) server needs to
-- run crier at the edge without ever blocking a worker:
--   * rules: a rules directory (listed with opendir/readdir through the FFI)
--     read into a generation with the same rules version the C core computes
--     (src/rules/rules.c); M.rules_init in init_by_lua loads it, M.rules_start
--     in init_worker_by_lua starts a timer in each worker that loads a
--     changed directory as a new generation and swaps it in, or refuses a
--     broken one (logged with file:line) and keeps the old;
--   * the database: M.configure names it; M.db() is a crier.pg connection
--     on cosockets (from nginx's pool), M.emit and M.transaction emit events
--     alone or in the handler's own transaction;
--   * rules' crier.query in nginx: run by crier.pg as the unprivileged
--     role crier_rules in a read-only transaction, as in crier serve;
--   * feeds at the edge: crier.nginx_feed (the person's feed, counts and
--     marks, with crier serve's tokens, cursors and JSON).
-- The rules part is plain Lua and loads in plain LuaJIT too (busted); the
-- rest needs ngx.

local runtime = require "crier.runtime"

local type, ipairs, pairs, error, tostring, tonumber, pcall, unpack =
    type, ipairs, pairs, error, tostring, tonumber, pcall, unpack
local byte, char, find, rep, sub, match = string.byte, string.char, string.find, string.rep, string.sub, string.match
local concat, sort = table.concat, table.sort
local floor = math.floor
local open = io.open

local M = {}

---------------------------------------------------------------------------
-- SHA-256 (FIPS 180-4), for the rules version. Needs LuaJIT's bit library.

local K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

-- be64(n): n (a non-negative integer below 2^53) as 8 big-endian bytes.
local function be64(n)
    local b = {}
    for i = 8, 1, -1 do
        b[i] = char(n % 256)
        n = floor(n / 256)
    end
    return concat(b)
end

-- sha256_lua(s): the SHA-256 of the string s as 64 lowercase hex digits,
-- in Lua: only where OpenSSL's libcrypto cannot be reached (M.sha256_hex
-- uses it through crier.crypto whenever it can).
local function sha256_lua(s)
    local bit = require "bit"
    local band, bxor, bnot, bor, lshift, rshift, ror, tobit, tohex =
        bit.band, bit.bxor, bit.bnot, bit.bor, bit.lshift, bit.rshift, bit.ror, bit.tobit, bit.tohex
    local k = {}
    for i = 1, 64 do
        k[i - 1] = tobit(K[i])
    end
    local h0, h1, h2, h3 = tobit(0x6a09e667), tobit(0xbb67ae85), tobit(0x3c6ef372), tobit(0xa54ff53a)
    local h4, h5, h6, h7 = tobit(0x510e527f), tobit(0x9b05688c), tobit(0x1f83d9ab), tobit(0x5be0cd19)
    local len = #s
    s = s .. "\128" .. rep("\0", (55 - len) % 64) .. be64(len * 8)
    local w = {}
    for chunk = 1, #s, 64 do
        for i = 0, 15 do
            local a, b, c, d = byte(s, chunk + i * 4, chunk + i * 4 + 3)
            w[i] = bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
        end
        for i = 16, 63 do
            local x, y = w[i - 15], w[i - 2]
            local s0 = bxor(ror(x, 7), ror(x, 18), rshift(x, 3))
            local s1 = bxor(ror(y, 17), ror(y, 19), rshift(y, 10))
            w[i] = tobit(w[i - 16] + s0 + w[i - 7] + s1)
        end
        local a, b, c, d, e, f, g, h = h0, h1, h2, h3, h4, h5, h6, h7
        for i = 0, 63 do
            local S1 = bxor(ror(e, 6), ror(e, 11), ror(e, 25))
            local ch = bxor(band(e, f), band(bnot(e), g))
            local t1 = h + S1 + ch + k[i] + w[i]
            local S0 = bxor(ror(a, 2), ror(a, 13), ror(a, 22))
            local maj = bxor(band(a, b), band(a, c), band(b, c))
            h, g, f, e = g, f, e, tobit(d + t1)
            d, c, b, a = c, b, a, tobit(t1 + S0 + maj)
        end
        h0, h1, h2, h3 = tobit(h0 + a), tobit(h1 + b), tobit(h2 + c), tobit(h3 + d)
        h4, h5, h6, h7 = tobit(h4 + e), tobit(h5 + f), tobit(h6 + g), tobit(h7 + h)
    end
    return tohex(h0) .. tohex(h1) .. tohex(h2) .. tohex(h3) .. tohex(h4) .. tohex(h5) .. tohex(h6) .. tohex(h7)
end

local crypto_ok, crypto = pcall(require, "crier.crypto")
if not (crypto_ok and crypto.available()) then
    crypto = nil
end

-- M.sha256_hex(s): the SHA-256 of the string s as 64 lowercase hex digits.
function M.sha256_hex(s)
    if crypto then
        return crypto.hex(crypto.sha256(s))
    end
    return sha256_lua(s)
end

---------------------------------------------------------------------------
-- Rules from disk

-- M.is_rule_file(name): the C core's rule: "*.lua", not "*_spec.lua", not
-- starting with "." (editor and deploy temp files).
function M.is_rule_file(name)
    return type(name) == "string" and sub(name, 1, 1) ~= "." and #name > 4 and sub(name, -4) == ".lua"
        and not (#name >= 9 and sub(name, -9) == "_spec.lua") and not find(name, "/", 1, true)
end

-- M.version(files): the rules version of files ({ name =, source = }, in
-- load order): hex SHA-256 over, per file, the 8-byte big-endian length of
-- its name, the name, the 8-byte big-endian length of its source, the source
-- (as src/rules/rules.c computes it, so `crier check` prints the same prefix).
function M.version(files)
    local parts = {}
    for _, f in ipairs(files) do
        parts[#parts + 1] = be64(#f.name)
        parts[#parts + 1] = f.name
        parts[#parts + 1] = be64(#f.source)
        parts[#parts + 1] = f.source
    end
    return M.sha256_hex(concat(parts))
end

local function read_all(path)
    local f, err = open(path, "rb")
    if not f then
        return nil, err
    end
    local source, read_err = f:read("*a")
    f:close()
    if not source then
        return nil, path .. ": " .. tostring(read_err)
    end
    return source
end

-- The directory listing, through the FFI (plain Lua cannot list a
-- directory). struct dirent as glibc lays it out on 64-bit Linux.
local dir_ffi
local function dir_api()
    if dir_ffi == nil then
        dir_ffi = false
        local ok, ffi = pcall(require, "ffi")
        if ok then
            pcall(ffi.cdef, [[
                typedef struct __dirstream DIR;
                struct crier_dirent {
                    uint64_t d_ino; int64_t d_off; unsigned short d_reclen; unsigned char d_type;
                    char d_name[256];
                };
                DIR *opendir(const char *name);
                struct crier_dirent *readdir(DIR *dirp) __asm__("readdir64");
                int closedir(DIR *dirp);
                char *strerror(int errnum);
            ]])
            dir_ffi = ffi
        end
    end
    return dir_ffi
end

-- M.list_dir(dir): the rule files of directory dir (M.is_rule_file), sorted
-- by name (the C core's load order), or nil, err.
function M.list_dir(dir)
    if type(dir) ~= "string" or dir == "" then
        error("crier.nginx.list_dir: dir must be a directory path", 2)
    end
    local ffi = dir_api()
    if not ffi then
        return nil, "cannot list " .. dir .. ": no FFI here (name the files)"
    end
    local C = ffi.C
    local d = C.opendir(dir)
    if d == nil then
        return nil, "cannot list " .. dir .. ": " .. ffi.string(C.strerror(ffi.errno()))
    end
    local names = {}
    while true do
        local e = C.readdir(d)
        if e == nil then
            break
        end
        local name = ffi.string(e.d_name)
        if M.is_rule_file(name) then
            names[#names + 1] = name
        end
    end
    C.closedir(d)
    sort(names)
    return names
end

-- M.read_rules(dir, names): reads the rule files of dir in the C core's
-- order (sorted by name; names that are not rule files are skipped). names
-- (optional) restricts them to a list of file names; by default the
-- directory is listed. Returns an array of { name =, path =, source = }, or
-- nil, err.
function M.read_rules(dir, names)
    if type(dir) ~= "string" or dir == "" then
        error("crier.nginx.read_rules: dir must be a directory path", 2)
    end
    if names ~= nil and type(names) ~= "table" then
        error("crier.nginx.read_rules: names must be nil or a list of file names", 2)
    end
    if names == nil then
        local err
        names, err = M.list_dir(dir)
        if not names then
            return nil, err
        end
    end
    local sorted = {}
    for _, name in ipairs(names) do
        if M.is_rule_file(name) then
            sorted[#sorted + 1] = name
        end
    end
    sort(sorted)
    local files = {}
    for i, name in ipairs(sorted) do
        local path = sub(dir, -1) == "/" and dir .. name or dir .. "/" .. name
        local source, err = read_all(path)
        if not source then
            return nil, err
        end
        files[i] = { name = name, path = path, source = source }
    end
    return files
end

-- load_files(files, settings): a new generation of files. Returns
-- { generation =, version =, files = { names } }, or nil and the problems.
local function load_files(files, settings, version)
    local generation, problems = runtime.new_generation(files, settings)
    if not generation then
        return nil, problems
    end
    local loaded = {}
    for i, f in ipairs(files) do
        loaded[i] = f.name
    end
    return { generation = generation, version = version or M.version(files), files = loaded }
end

-- M.load_rules(dir, names, settings): reads the rule files (names: nil to
-- list the directory) and loads them into a new generation
-- (crier.runtime.new_generation). Returns { generation =, version = "<64
-- hex>", files = { names } }, or nil and the problems ("path:line: message"
-- lines) or the read error.
function M.load_rules(dir, names, settings)
    local files, err = M.read_rules(dir, names)
    if not files then
        return nil, err
    end
    return load_files(files, settings)
end

---------------------------------------------------------------------------
-- The database (needs ngx: cosockets)

local config = {
    database = nil,        -- crier.pg options for emits and feeds
    rules_database = nil,  -- crier.pg options for rules' queries
    rules_query_timeout = 5000,
}

local function ngx_api()
    local ngx = rawget(_G, "ngx")
    if not ngx then
        error("crier.nginx: this part runs inside nginx (lua-nginx-module) only", 3)
    end
    return ngx
end

local function copy(t)
    local out = {}
    for k, v in pairs(t) do
        out[k] = v
    end
    return out
end

-- M.configure(opts): where the database is. opts.database: a libpq
-- connection string or a crier.pg options table (timeouts, pool_size…);
-- opts.rules_database: the same for rules' crier.query (default: the
-- database's with user=crier_rules and no password);
-- opts.rules_query_timeout: ms (statement_timeout of rules' queries, 5000).
-- Call from init_by_lua (or init_worker_by_lua). Raises on misuse.
function M.configure(opts)
    if type(opts) ~= "table" then
        error("crier.nginx.configure: expected a table", 2)
    end
    local pg = require "crier.pg"
    local function options(v, what)
        if type(v) == "string" then
            local parsed, err = pg.parse_conninfo(v)
            if not parsed then
                error("crier.nginx.configure: " .. what .. ": " .. err, 3)
            end
            return parsed
        elseif type(v) == "table" then
            return copy(v)
        end
        error("crier.nginx.configure: " .. what .. " must be a connection string or a table", 3)
    end
    if opts.database ~= nil then
        config.database = options(opts.database, "database")
    end
    if opts.rules_query_timeout ~= nil then
        config.rules_query_timeout = opts.rules_query_timeout
    end
    if opts.rules_database ~= nil then
        config.rules_database = options(opts.rules_database, "rules_database")
    elseif config.database then
        local r = copy(config.database)
        r.user, r.password, r.pool = "crier_rules", nil, nil
        config.rules_database = r
    end
    if config.rules_database then
        config.rules_database.session = "rules"
        config.rules_database.application_name = "crier rules"
        config.rules_database.setup = "SET default_transaction_read_only = on; SET statement_timeout = "
            .. math.floor(tonumber(config.rules_query_timeout) or 5000)
    end
end

-- M.db(): a crier.pg connection to the configured database (from nginx's
-- pool when one is idle), or nil, err, sqlstate. Give it back with
-- db:keepalive().
function M.db()
    ngx_api()
    if not config.database then
        error("crier.nginx.db: no database configured (crier.nginx.configure { database = ... })", 2)
    end
    return require("crier.pg").connect(config.database)
end

-- M.emit(tenant, type, entity, payload, dedupe_key, not_before): crier.emit
-- in its own transaction; returns the event id (a duplicate dedupe key
-- returns the first event's id) or nil, err, sqlstate. not_before (optional):
-- an RFC 3339 time with its offset, a scheduled send. The worker serves
-- other requests while it waits.
function M.emit(tenant, event_type, entity, payload, dedupe_key, not_before)
    local db, err, sqlstate = M.db()
    if not db then
        return nil, err, sqlstate
    end
    local id
    id, err, sqlstate = db:emit(tenant, event_type, entity, payload, dedupe_key, not_before)
    db:keepalive()
    return id, err, sqlstate
end

-- M.transaction(fn, ...): a connection, BEGIN, fn(tx, ...), COMMIT (see
-- crier.pg's db:transaction: fn raising or returning nil, err rolls back);
-- tx:query, tx:emit write in the same transaction. Returns fn's results or
-- nil, err, sqlstate.
function M.transaction(fn, ...)
    if type(fn) ~= "function" then
        error("crier.nginx.transaction: expected a function", 2)
    end
    local db, err, sqlstate = M.db()
    if not db then
        return nil, err, sqlstate
    end
    local results = { db:transaction(fn, ...) }
    db:keepalive()
    return unpack(results, 1, table.maxn(results))
end

-- What the connected role may do beyond the data granted to it (the check
-- of src/rules/rules_query.c): the role and its powers, "" when none.
local SQL_PRIVILEGES = [[
SELECT current_user AS role, concat_ws(', ',
  CASE WHEN r.rolsuper THEN 'is a superuser' END,
  CASE WHEN pg_has_role(current_user, 'pg_execute_server_program', 'USAGE')
       THEN 'runs programs on the server (pg_execute_server_program)' END,
  CASE WHEN pg_has_role(current_user, 'pg_read_server_files', 'USAGE')
       THEN 'reads the server''s files (pg_read_server_files)' END,
  CASE WHEN pg_has_role(current_user, 'pg_write_server_files', 'USAGE')
       THEN 'writes the server''s files (pg_write_server_files)' END,
  CASE WHEN pg_has_role(current_user, 'pg_read_all_data', 'USAGE')
       THEN 'reads every table (pg_read_all_data)' END,
  CASE WHEN EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = 'crier'
                    AND has_schema_privilege(n.oid, 'USAGE'))
       THEN 'uses schema crier (crier''s own tables and secrets)' END) AS powers
FROM pg_roles r WHERE r.rolname = current_user]]

-- run_rule_query(sql, values, n): one rule query in a READ ONLY transaction
-- that is rolled back, as crier_rules. Rows of text, NULL columns absent.
local function run_rule_query(sql, values, n)
    local pg = require "crier.pg"
    if not config.rules_database then
        return nil, "no database is configured for queries (crier.nginx.configure { database = ... })"
    end
    local db, err = pg.connect(config.rules_database)
    if not db then
        return nil, "cannot connect for rule queries: " .. tostring(err)
    end
    if not db.reused then
        local rows, perr = db:query_text(SQL_PRIVILEGES)
        if not rows then
            db:close()
            return nil, "cannot check the rule queries' role: " .. tostring(perr)
        end
        if rows[1] and rows[1].powers ~= "" then
            db:close()
            return nil, "rule queries would run as role " .. tostring(rows[1].role) .. ", which "
                .. rows[1].powers .. ": rules must read only the data granted to an unprivileged role "
                .. "(crier_rules; or rules_database in crier.nginx.configure)"
        end
    end
    local ok
    ok, err = db:exec("BEGIN READ ONLY")
    if not ok then
        db:close()
        return nil, err
    end
    local params = { n = n }
    for i = 1, n do
        params[i] = values[i]
    end
    local rows
    rows, err = db:query_text(sql, params)
    if rows and not rows.columns then
        rows, err = nil, "the statement returned no rows (use a SELECT)"
    end
    if db:exec("ROLLBACK") then
        db:keepalive()
    else
        db:close()
    end
    if not rows then
        return nil, err
    end
    local out = {}
    for i, row in ipairs(rows) do
        out[i] = row
    end
    return out
end

-- M.query_backend(name, sql, values, n): crier.query's backend in nginx
-- (gen:set_query_backend). While it waits for PostgreSQL the worker runs
-- other requests: the rule's limits are paused around the wait
-- (crier.sandbox.pause) so nothing else runs under them.
function M.query_backend(_, sql, values, n)
    local crier = require "crier"
    local sandbox = require "crier.sandbox"
    local token = sandbox.pause()
    local registry = crier._set_registry(nil)
    local ok, rows, err = pcall(run_rule_query, sql, values, n or 0)
    crier._set_registry(registry)
    sandbox.resume(token)
    if not ok then
        return nil, tostring(rows)
    end
    return rows, err
end

---------------------------------------------------------------------------
-- Rules reloaded by every worker

local rules = {
    dir = nil, settings = nil, interval = 1, dict = nil,
    current = nil,  -- { generation =, version =, files =, loaded_at = }
    refused = nil,  -- { version =, error = } the last version refused
}

-- M.rules_init(opts): in init_by_lua. Loads opts.dir (listed) with
-- opts.settings; raises when it does not load (nginx does not start).
-- opts.interval: seconds between the workers' checks (1); opts.shared_dict:
-- the name of a lua_shared_dict where each worker writes the version it
-- runs (optional).
function M.rules_init(opts)
    if type(opts) ~= "table" or type(opts.dir) ~= "string" then
        error("crier.nginx.rules_init: expected { dir = \"/path/to/rules\", settings = {...} }", 2)
    end
    rules.dir, rules.settings = opts.dir, opts.settings
    rules.interval = opts.interval or 1
    rules.dict = opts.shared_dict
    local loaded, err = M.load_rules(opts.dir, nil, opts.settings)
    if not loaded then
        error("crier rules did not load from " .. opts.dir .. ":\n" .. tostring(err), 0)
    end
    if config.rules_database then
        loaded.generation:set_query_backend(M.query_backend)
    end
    loaded.loaded_at = os.time()
    rules.current = loaded
    return loaded
end

-- M.rules(): what this worker runs: { generation =, version =, files =,
-- loaded_at = } (nil before rules_init).
function M.rules()
    return rules.current
end

local function publish(ngx)
    if rules.dict and ngx.shared[rules.dict] and rules.current then
        ngx.shared[rules.dict]:set("rules:" .. ngx.worker.pid(), rules.current.version, 0)
    end
end

-- Seconds between the two reads of a changed rules directory that must
-- agree before it is loaded or refused.
local SETTLE_SECONDS = 0.05

-- M.rules_check(): reads the rules directory and, when its version changed,
-- loads it and swaps this worker's generation; a version that does not load
-- is refused (logged once, with each problem's file:line) and the old one
-- kept. A changed directory is read again SETTLE_SECONDS later (in nginx)
-- and acted on only when both reads agree: a file caught while an editor or
-- `printf >` is still writing it (truncated, then written) is neither loaded
-- nor refused, and the next check looks again. Returns "same", "swapped",
-- "refused" or "settling", and the error.
function M.rules_check()
    local ngx = rawget(_G, "ngx")
    local files, err = M.read_rules(rules.dir)
    if not files then
        return "refused", err
    end
    local version = M.version(files)
    if rules.current and version == rules.current.version then
        return "same"
    end
    if rules.refused and rules.refused.version == version then
        return "refused", rules.refused.error
    end
    if ngx and ngx.sleep then
        ngx.sleep(SETTLE_SECONDS)
        local again = M.read_rules(rules.dir)
        if not again or M.version(again) ~= version then
            return "settling"
        end
    end
    local loaded, problems = load_files(files, rules.settings, version)
    if not loaded then
        rules.refused = { version = version, error = problems }
        if ngx then
            ngx.log(ngx.ERR, "crier: rules version ", sub(version, 1, 12), " refused; still running ",
                rules.current and sub(rules.current.version, 1, 12) or "none", ":\n", problems)
        end
        return "refused", problems
    end
    if config.rules_database then
        loaded.generation:set_query_backend(M.query_backend)
    end
    loaded.loaded_at = os.time()
    local old = rules.current
    rules.current, rules.refused = loaded, nil
    if ngx then
        ngx.log(ngx.NOTICE, "crier: rules version ", sub(version, 1, 12), " loaded (was ",
            old and sub(old.version, 1, 12) or "none", "), files: ", concat(loaded.files, ", "))
        publish(ngx)
    end
    return "swapped"
end

-- M.rules_start(): in init_worker_by_lua: publishes the version this worker
-- runs and starts its timer (every opts.interval seconds) running
-- M.rules_check. Returns true or nil, err.
function M.rules_start()
    local ngx = ngx_api()
    if not rules.dir then
        error("crier.nginx.rules_start: call crier.nginx.rules_init in init_by_lua first", 2)
    end
    publish(ngx)
    return ngx.timer.every(rules.interval, function(premature)
        if premature then
            return
        end
        local ok, err = pcall(M.rules_check)
        if not ok then
            ngx.log(ngx.ERR, "crier: rules check failed: ", tostring(err))
        end
    end)
end

-- M.rules_status(): { version =, files =, loaded_at =, pid =, refused =
-- { version =, error = } or nil, workers = { pid = version } (from the
-- shared dict; this worker only without one) }.
function M.rules_status()
    local ngx = ngx_api()
    local cur = rules.current or {}
    local workers = {}
    local dict = rules.dict and ngx.shared[rules.dict]
    if dict then
        for _, key in ipairs(dict:get_keys(0)) do
            local pid = match(key, "^rules:(%d+)$")
            if pid then
                workers[pid] = dict:get(key)
            end
        end
    else
        workers[tostring(ngx.worker.pid())] = cur.version
    end
    return {
        version = cur.version, files = cur.files, loaded_at = cur.loaded_at, pid = ngx.worker.pid(),
        refused = rules.refused, workers = workers,
    }
end

return M
