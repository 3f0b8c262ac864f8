-- crier_openresty: the nginx side of the tests/integration/openresty_*.sh
-- tests: crier.pg, crier.nginx's emit and transactions, rules reloaded by
-- every worker, rule queries. Locations (all answer JSON):
--   GET  /plain                      "ok" (no database: the never-blocks probe)
--   GET  /pg/echo?v=                 the value sent as a parameter and read back
--   POST /pg/store?v=                stores v (or the body) in app.strings, returns {id, stored}
--   GET  /pg/error?q=name            a failing statement: {err, sqlstate}
--   GET  /pg/sleep?s=                pg_sleep(s) and the backend's pid: {pid} or {err}
--   GET  /pg/pid                     the backend pid of a pooled connection
--   GET  /pg/auth?host=&user=&password=&dbname=   connects: {ok} or {err, sqlstate}
--   POST /emit?tenant=&type=&entity=&dedupe=      body: payload JSON; {id} or {err, sqlstate}
--   POST /order?id=&customer=&total=[&fail=1]     app.orders row + order.created in one transaction
--   GET  /rules                      crier.nginx.rules_status()
--   GET  /plan?type=&tenant=&entity= the plan of one event (the rules may query)
-- A failure to reach PostgreSQL is 503 {"error": {...}}.
local ngx = ngx -- luacheck: ignore 113

local json = require "crier.json"
local pg = require "crier.pg"
local adapter = require "crier.nginx"

local M = {}

local function send(status, value)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    ngx.say(assert(json.encode(value)))
end

local function arg(name)
    local v = ngx.req.get_uri_args()[name]
    if type(v) == "table" then
        v = v[#v]
    end
    return v ~= true and v or nil
end

local function body()
    ngx.req.read_body()
    return ngx.req.get_body_data()
end

local function unavailable(err, sqlstate)
    send(503, { error = { code = "database_unavailable", message = tostring(err), sqlstate = sqlstate } })
end

-- with_db(fn): runs fn(db) on a pooled connection; a failed connect is 503.
local function with_db(fn)
    local db, err, sqlstate = adapter.db()
    if not db then
        return unavailable(err, sqlstate)
    end
    fn(db)
    db:keepalive()
end

function M.plain()
    ngx.header["Content-Type"] = "text/plain"
    ngx.print("ok\n")
end

function M.echo()
    with_db(function(db)
        local rows, err, sqlstate = db:query("SELECT $1::text AS v, $2::int AS n, $3::bool AS b, $4::jsonb AS j",
            { arg("v"), 42, true, { k = arg("v") } })
        if not rows then
            return send(500, { err = err, sqlstate = sqlstate })
        end
        send(200, rows[1])
    end)
end

function M.store()
    local v = arg("v") or body()
    with_db(function(db)
        local rows, err, sqlstate = db:query("INSERT INTO app.strings (v) VALUES ($1) RETURNING id, v AS stored", { v })
        if not rows then
            return send(500, { err = err, sqlstate = sqlstate })
        end
        send(200, rows[1])
    end)
end

local FAILING = {
    syntax = "SELEC 1",
    unique = "INSERT INTO app.strings (id, v) VALUES (1, 'dup'), (1, 'dup')",
    division = "SELECT 1 / (SELECT count(*) FROM app.strings WHERE false)::int",
    params = "SELECT $1::int", -- given "x"
}

function M.error()
    local name = arg("q") or "syntax"
    with_db(function(db)
        local rows, err, sqlstate = db:query(FAILING[name], name == "params" and { "x" } or nil)
        -- the connection is usable after an error
        local again, again_err = db:query("SELECT 1 AS one")
        send(200, { rows = rows and #rows, err = err, sqlstate = sqlstate,
            after = again and again[1].one or again_err })
    end)
end

function M.sleep()
    with_db(function(db)
        local rows, err, sqlstate = db:query("SELECT pg_backend_pid() AS pid, pg_sleep($1::float8) AS slept",
            { tonumber(arg("s")) or 1 })
        if not rows then
            return send(500, { err = err, sqlstate = sqlstate, state = db.state })
        end
        send(200, { pid = rows[1].pid })
    end)
end

function M.pid()
    with_db(function(db)
        local rows, err, sqlstate = db:query("SELECT pg_backend_pid() AS pid")
        if not rows then
            return send(500, { err = err, sqlstate = sqlstate })
        end
        send(200, { pid = rows[1].pid, reused = db.reused or false })
    end)
end

function M.auth()
    local db, err, sqlstate = pg.connect({
        host = arg("host"), port = arg("port"), user = arg("user"), password = arg("password"),
        dbname = arg("dbname") or "postgres", pool = "auth-test:" .. (arg("user") or "") .. ngx.now(),
    })
    if not db then
        return send(200, { err = err, sqlstate = sqlstate })
    end
    local rows, qerr = db:query("SELECT current_user AS u")
    db:close()
    send(200, { ok = rows and rows[1].u or qerr })
end

function M.emit()
    local payload = body()
    local id, err, sqlstate = adapter.emit(arg("tenant"), arg("type"), arg("entity"), payload, arg("dedupe"),
        arg("not_before"))
    if not id then
        -- the caller's data was refused (22xxx, 23xxx, 54xxx): 400; anything
        -- else (no connection, no database, a timeout) is the server's: 503
        local refused = sqlstate and (sqlstate:match("^2[23]") or sqlstate:match("^54"))
        return send(refused and 400 or 503, { err = err, sqlstate = sqlstate })
    end
    send(200, { id = id })
end

function M.order()
    local id, customer, total = arg("id"), arg("customer"), tonumber(arg("total"))
    local event_id, err, sqlstate = adapter.transaction(function(tx)
        local rows, qerr, qstate = tx:query(
            "INSERT INTO app.orders (id, customer, total_cents) VALUES ($1, $2, $3) RETURNING id",
            { id, customer, total })
        if not rows then
            return nil, qerr, qstate
        end
        local eid, eerr, estate = tx:emit("acme", "order.created", id,
            { order_id = id, customer = customer, total_cents = total }, "order:" .. id)
        if not eid then
            return nil, eerr, estate
        end
        if arg("fail") == "1" then
            error("the handler failed after the insert and the emit")
        end
        return eid
    end)
    if not event_id then
        return send(sqlstate and 409 or 500, { err = err, sqlstate = sqlstate })
    end
    send(200, { event_id = event_id })
end

function M.rules()
    send(200, adapter.rules_status())
end

function M.plan()
    local loaded = adapter.rules()
    local plan, err, code = loaded.generation:plan({
        id = 1, tenant = arg("tenant") or "acme", type = arg("type") or "ping", entity_id = arg("entity") or "e1",
        payload_json = "{}",
    })
    if not plan then
        return send(code == "rule_error" and 500 or 400, { error = { code = code, message = err } })
    end
    local recipients = json.array()
    for _, entry in ipairs(plan) do
        recipients[#recipients + 1] = entry.recipient
    end
    send(200, { version = loaded.version, recipients = recipients })
end

return M
