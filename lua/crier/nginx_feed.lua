-- crier.nginx_feed: a person's feed served from nginx — the page (keyset
-- pagination with signed cursors), counts, mark all read/seen and marking one
-- item — with crier serve's user tokens, API keys, cursors, SQL functions
-- and JSON answers (src/api/http_auth.c, http_head.c, http_handlers_feed.c,
-- http_feed_sql.h): a token or cursor made by one is good at the other,
-- and the same request gets the same answer. One crier.pg connection and
-- one transaction per request; PostgreSQL unreachable is 503
-- database_unavailable. The live feed (SSE) stays with crier serve.
--
--   location /v1/feed { content_by_lua_block { require("crier.nginx_feed").serve() } }

local crypto = require "crier.crypto"
local json = require "crier.json"
local adapter = require "crier.nginx"

local type, tostring, tonumber, ipairs, pcall, error, getmetatable, setmetatable =
    type, tostring, tonumber, ipairs, pcall, error, getmetatable, setmetatable
local floor, math_min = math.floor, math.min
local ngx = rawget(_G, "ngx")
local byte, char, find, sub, match, format = string.byte, string.char, string.find, string.sub, string.match,
    string.format
local concat = table.concat

local M = {}

local TOKEN_PREFIX = "cut1."
local API_KEY_PREFIX = "crk_"
local API_KEY_LEN = 4 + 43
local ID_MAX = 200
local PAGE_MAX = 100
local DEFAULT_LIMIT = 20
local CURSOR_VERSION, CURSOR_VERSION_TEXT, CURSOR_MAC_LEN = 1, 2, 16
local SNAPSHOT_MAX = 4096

-- The statements of http_feed_sql.h, as they are there.
local ITEM_JSON = "json_build_object('id', f.id, 'kind', f.kind, 'type', f.event_type, 'content', f.content,"
    .. " 'created_at', f.created_at, 'read', f.read, 'seen', f.seen, 'archived', f.archived)"
local SQL_FEED_PAGE = "SELECT " .. ITEM_JSON
    .. ", f.id FROM crier.feed($1, $2, $3::bigint, $4::int, $5::bool) f ORDER BY f.id DESC"
local SQL_FEED_FIRST_PAGE = "SELECT x.j, x.id, s.snapshot FROM (SELECT pg_current_snapshot()::text AS snapshot) s"
    .. " LEFT JOIN LATERAL (SELECT " .. ITEM_JSON .. " AS j, f.id"
    .. " FROM crier.feed($1, $2, NULL, $3::int, $4::bool) f) x ON true ORDER BY x.id DESC NULLS LAST"
local SQL_FEED_COUNTS = "SELECT json_build_object('unread', c.unread, 'unseen', c.unseen) AS j"
    .. " FROM crier.feed_counts($1, $2) c"
local SQL_FEED_MARK_ALL =
    "SELECT crier.feed_mark_all($1, $2, $3, $4::bigint, $5::pg_snapshot, $6::pg_snapshot) AS usable"
local SQL_TOKEN = "SELECT p.j->>'t' AS t, p.j->>'u' AS u, p.j->>'exp' AS exp, encode(t.secret, 'hex') AS secret"
    .. " FROM (SELECT $1::jsonb AS j) p"
    .. " LEFT JOIN crier.api_tenants t ON jsonb_typeof(p.j->'t') = 'string' AND t.tenant = p.j->>'t'"
    .. " WHERE jsonb_typeof(p.j) = 'object' AND jsonb_typeof(p.j->'u') = 'string'"
    .. "   AND jsonb_typeof(p.j->'exp') = 'number'"
local SQL_KEY = "SELECT k.id, k.tenant, k.revoked_at IS NOT NULL AS revoked, encode(t.secret, 'hex') AS secret"
    .. " FROM crier.api_keys k JOIN crier.api_tenants t ON t.tenant = k.tenant"
    .. " WHERE k.key_hash = decode($1, 'hex')"

-- A refusal travels as an error object up to serve().
local refusal_mt = {}
local function refuse(status, code, message)
    error(setmetatable({ status = status, code = code, message = message }, refusal_mt), 0)
end

local function db_failed(err, sqlstate)
    if sqlstate and sub(sqlstate, 1, 2) == "22" then
        refuse(400, "invalid_field", tostring(match(tostring(err), "^%u+: (.-) %(SQLSTATE") or err))
    end
    refuse(503, "database_unavailable", "the database connection was lost; retry")
end

local function valid_id(s, max)
    return type(s) == "string" and #s > 0 and #s <= max and not find(s, "[%z\1-\31\127]")
end

---------------------------------------------------------------------------
-- Keys, tokens, cursors (http_auth.c)

local function derive(secret, label)
    return crypto.hmac_sha256(secret, label)
end

local function be64(n)
    local b = {}
    for i = 8, 1, -1 do
        b[i] = char(n % 256)
        n = floor(n / 256)
    end
    return concat(b)
end

local function be32(n)
    return char(floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
end

local function read_be64(s, pos)
    local n = 0
    for i = pos, pos + 7 do
        n = n * 256 + byte(s, i)
    end
    return n
end

local function json_too_deep(s, max_depth)
    local depth, in_string, i = 0, false, 1
    while i <= #s do
        local c = sub(s, i, i)
        if in_string then
            if c == "\\" then
                i = i + 1
            elseif c == '"' then
                in_string = false
            end
        elseif c == '"' then
            in_string = true
        elseif c == "[" or c == "{" then
            depth = depth + 1
            if depth > max_depth then
                return true
            end
        elseif (c == "]" or c == "}") and depth > 0 then
            depth = depth - 1
        end
        i = i + 1
    end
    return false
end

local function cursor_mac(secret, scope, body)
    local msg = { "crier/cursor/v1" }
    for _, part in ipairs(scope) do
        msg[#msg + 1] = be32(#part)
        msg[#msg + 1] = part
    end
    msg[#msg + 1] = body
    return sub(crypto.hmac_sha256(derive(secret, "crier/cursor/v1"), concat(msg)), 1, CURSOR_MAC_LEN)
end

-- M.cursor_sign(secret, scope, values, text): a signed cursor, as
-- crier_http_cursor_sign makes it.
function M.cursor_sign(secret, scope, values, text)
    local raw = { char(text and CURSOR_VERSION_TEXT or CURSOR_VERSION) }
    for _, v in ipairs(values) do
        raw[#raw + 1] = be64(v)
    end
    raw[#raw + 1] = text or ""
    local body = concat(raw)
    return crypto.base64url(body .. cursor_mac(secret, scope, body))
end

-- cursor_decode(secret, cursor, scope, n, with_text): the n values (and the
-- text), or a 400 invalid_cursor refusal.
local function cursor_decode(secret, cursor, scope, n, with_text)
    local raw = crypto.unbase64url(cursor)
    local fixed = 1 + 8 * n + CURSOR_MAC_LEN
    if not raw or #raw < fixed or #cursor > 8192
        or not ((byte(raw, 1) == CURSOR_VERSION and #raw == fixed) or (byte(raw, 1) == CURSOR_VERSION_TEXT
            and with_text)) then
        refuse(400, "invalid_cursor", "the cursor is not valid")
    end
    local body = sub(raw, 1, #raw - CURSOR_MAC_LEN)
    if not crypto.equal(cursor_mac(secret, scope, body), sub(raw, -CURSOR_MAC_LEN)) then
        refuse(400, "invalid_cursor", "the cursor is not valid here (altered, or made for another list or person)")
    end
    local values = {}
    for i = 1, n do
        values[i] = read_be64(body, 2 + 8 * (i - 1))
    end
    local text = sub(body, 2 + 8 * n)
    if find(text, "\0", 1, true) then
        refuse(400, "invalid_cursor", "the cursor is not valid")
    end
    return values, text
end

local function snapshot_valid(s)
    if #s > SNAPSHOT_MAX then
        return false
    end
    local xmin, xmax, rest = match(s, "^(%d+):(%d+):(.*)$")
    xmin, xmax = tonumber(xmin), tonumber(xmax)
    if not xmin or xmin == 0 or xmin > xmax then
        return false
    end
    if rest == "" then
        return true
    end
    if sub(rest, -1) == "," then
        return false
    end
    local prev = 0
    for x in (rest .. ","):gmatch("([^,]*),") do
        local v = match(x, "^%d+$") and tonumber(x)
        if not v or v < xmin or v >= xmax or v <= prev then
            return false
        end
        prev = v
    end
    return true
end

local function authenticate_token(db, token)
    local payload64, mac64 = match(sub(token, #TOKEN_PREFIX + 1), "^([^.]*)%.(.*)$")
    if not payload64 or #token > 2048 then
        refuse(401, "invalid_token", "the user token is malformed")
    end
    local payload, mac = crypto.unbase64url(payload64), crypto.unbase64url(mac64)
    if not payload or #payload == 0 or not mac or #mac ~= 32 or find(payload, "\0", 1, true)
        or json_too_deep(payload, 64) then
        refuse(401, "invalid_token", "the user token is malformed")
    end
    local rows, _, sqlstate = db:query_text(SQL_TOKEN, { payload })
    if not rows then
        if sqlstate and sub(sqlstate, 1, 2) == "22" then
            refuse(401, "invalid_token", "the user token is malformed")
        end
        refuse(503, "database_unavailable", "the database is unavailable; retry")
    end
    local row = rows[1]
    local secret = #rows == 1 and row.secret and crypto.unhex(row.secret)
    if not secret or #secret == 0 then
        refuse(401, "invalid_token", "the user token is not valid")
    end
    local want = crypto.hmac_sha256(derive(secret, "crier/user-token/v1"), TOKEN_PREFIX .. payload64)
    if not crypto.equal(want, mac) then
        refuse(401, "invalid_token", "the user token's signature is not valid")
    end
    if (tonumber(row.exp) or 0) <= ngx.time() then
        refuse(401, "token_expired", "the user token has expired; get a new one")
    end
    if not valid_id(row.t, ID_MAX) or not valid_id(row.u, ID_MAX) then
        refuse(401, "invalid_token", "the user token is not valid")
    end
    return { tenant = row.t, user = row.u, secret = secret }
end

local function authenticate_key(db, key)
    if #key ~= API_KEY_LEN then
        refuse(401, "invalid_api_key", "the API key is not valid")
    end
    local rows, err, sqlstate = db:query_text(SQL_KEY, { crypto.hex(crypto.sha256(key)) })
    if not rows then
        db_failed(err, sqlstate)
    end
    if #rows ~= 1 then
        refuse(401, "invalid_api_key", "the API key is not valid")
    end
    if rows[1].revoked == "t" then
        refuse(401, "api_key_revoked", "the API key was revoked")
    end
    local secret = crypto.unhex(rows[1].secret or "")
    if not secret or #secret == 0 then
        refuse(500, "internal_error", "the tenant's secret is unusable")
    end
    return { tenant = rows[1].tenant, secret = secret, key = true }
end

local function authenticate(db)
    local h = ngx.var.http_authorization
    if not h then
        refuse(401, "unauthorized", "send Authorization: Bearer <API key> (crk_…) or Bearer <user token> (cut1.…)")
    end
    if not match(h, "^[Bb][Ee][Aa][Rr][Ee][Rr] ") then
        refuse(401, "unauthorized", "the Authorization scheme must be Bearer")
    end
    local cred = match(h, "^.......%s*(.*)$")
    if sub(cred, 1, #API_KEY_PREFIX) == API_KEY_PREFIX then
        return authenticate_key(db, cred)
    elseif sub(cred, 1, #TOKEN_PREFIX) == TOKEN_PREFIX then
        return authenticate_token(db, cred)
    end
    refuse(401, "unauthorized", "unknown credential: expected an API key (crk_…) or a user token (cut1.…)")
end

---------------------------------------------------------------------------
-- Arguments

local function arg(name)
    local v = ngx.req.get_uri_args()[name]
    if type(v) == "table" then
        v = v[1]
    end
    if v == true then
        v = ""
    end
    if v and find(v, "[%z\1-\31\127]") then
        refuse(400, "invalid_field", format("query parameter %s holds control characters", name))
    end
    return v
end

local function arg_int(name, min, max, default)
    local v = arg(name)
    if not v then
        return default
    end
    local n = match(v, "^%d+$") and tonumber(v)
    if not n or n < min or n > max then
        refuse(400, "invalid_field", format("query parameter %s must be a whole number from %d to %d", name, min, max))
    end
    return n
end

local function arg_bool(name, default)
    local v = arg(name)
    if not v then
        return default
    end
    if v == "true" or v == "1" then
        return true
    elseif v == "false" or v == "0" then
        return false
    end
    refuse(400, "invalid_field", format("query parameter %s must be true or false", name))
end

local function feed_user(auth)
    local q = arg("user")
    if not auth.key then
        if q and q ~= auth.user then
            refuse(403, "forbidden", "a user token may only read its own user's feed")
        end
        return auth.user
    end
    if not q then
        refuse(400, "invalid_field", "query parameter user is required with an API key")
    end
    if not valid_id(q, ID_MAX) then
        refuse(400, "invalid_field", format("query parameter user must be 1 to %d characters", ID_MAX))
    end
    return q
end

local function q(db, sql, params)
    local rows, err, sqlstate = db:query_text(sql, params)
    if not rows then
        db_failed(err, sqlstate)
    end
    return rows
end

---------------------------------------------------------------------------
-- Endpoints: each returns status, body (JSON text)

local function feed_list(db, auth)
    local user = feed_user(auth)
    local limit = arg_int("limit", 1, PAGE_MAX, DEFAULT_LIMIT)
    local archived = arg_bool("archived", false)
    local cursor = arg("cursor")
    local scope = { "feed", user, archived and "archived" or "live" }
    local before
    if cursor then
        before = cursor_decode(auth.secret, cursor, scope, 1)[1]
    end
    local rows
    if cursor then
        rows = q(db, SQL_FEED_PAGE, { auth.tenant, user, before, limit + 1, archived, n = 5 })
    else
        rows = q(db, SQL_FEED_FIRST_PAGE, { auth.tenant, user, limit + 1, archived, n = 4 })
    end
    local n = #rows
    if not cursor and n == 1 and rows[1].id == nil then
        n = 0
    end
    local out = { '{"items":[' }
    for i = 1, math_min(n, limit) do
        out[#out + 1] = (i > 1 and "," or "") .. (rows[i].j or rows[i].json_build_object)
    end
    out[#out + 1] = '],"next_cursor":'
    if n > limit then
        out[#out + 1] = '"' .. M.cursor_sign(auth.secret, scope, { tonumber(rows[limit].id) }) .. '"'
    else
        out[#out + 1] = "null"
    end
    if not cursor then
        local snapshot = rows[1].snapshot
        out[#out + 1] = ',"head_cursor":'
        if n > 0 then
            out[#out + 1] = '"' .. M.cursor_sign(auth.secret, { "feed-head", user }, { tonumber(rows[1].id) },
                snapshot) .. '"'
        else
            out[#out + 1] = "null"
        end
        out[#out + 1] = ',"last_event_id":"' .. json.quote(snapshot) .. '"'
    else
        out[#out + 1] = ',"head_cursor":null,"last_event_id":null'
    end
    out[#out + 1] = "}"
    return 200, concat(out)
end

local function counts(db, auth, user)
    return 200, q(db, SQL_FEED_COUNTS, { auth.tenant, user })[1].j
end

local function feed_counts(db, auth)
    return counts(db, auth, feed_user(auth))
end

-- is_json(content_type): application/json, with parameters or not.
local function is_json(ct)
    ct = ct and string.lower(ct) or ""
    return ct == "application/json" or sub(ct, 1, 17) == "application/json;" or sub(ct, 1, 17) == "application/json "
end

local function feed_mark_all(db, auth, what)
    local user = feed_user(auth)
    ngx.req.read_body()
    local text = ngx.req.get_body_data()
    local cursor
    if text and #text > 0 and not is_json(ngx.var.content_type) then
        refuse(415, "unsupported_media_type", "send the body as Content-Type: application/json")
    end
    if text and match(text, "%S") then
        local body = json.decode(text)
        if type(body) ~= "table" or json.is_array(body) then
            refuse(400, "invalid_json", "the request body must be a JSON object")
        end
        cursor = body.cursor
        if cursor ~= nil and cursor ~= json.null and type(cursor) ~= "string" then
            refuse(400, "invalid_field", "field cursor must be a string")
        end
        if cursor == json.null then
            cursor = nil
        end
    end
    local upto, snapshot, since
    if cursor then
        local values, ctext = cursor_decode(auth.secret, cursor, { "feed-head", user }, 1, true)
        upto = values[1]
        if ctext ~= "" then
            snapshot, since = match(ctext, "^(%S+) ?(%S*)$")
            if since == "" then
                since = nil
            end
            if not snapshot or not snapshot_valid(snapshot) or (since and not snapshot_valid(since)) then
                refuse(400, "invalid_cursor", "the cursor is not valid")
            end
        end
    end
    local rows = q(db, SQL_FEED_MARK_ALL, { auth.tenant, user, what, upto, snapshot, since, n = 6 })
    if rows[1].usable ~= "t" then
        refuse(400, "invalid_cursor", "the cursor's snapshot is not one this database has passed (restored "
            .. "from a backup since?): reload the feed and use its head_cursor")
    end
    return counts(db, auth, user)
end

local ACTIONS = {
    read = { "read", "true" }, unread = { "read", "false" }, seen = { "seen", "true" },
    unseen = { "seen", "false" }, archive = { "archived", "true" }, unarchive = { "archived", "false" },
}

local function feed_item(db, auth, id_text, action)
    local a = ACTIONS[action]
    if not a then
        refuse(404, "not_found", "no such action: use read, unread, seen, unseen, archive or unarchive")
    end
    if not match(id_text, "^%d+$") or #id_text > 18 or tonumber(id_text) <= 0 then
        refuse(400, "invalid_field", "the item id must be a positive whole number of at most 18 digits")
    end
    local user = feed_user(auth)
    local item = tostring(tonumber(id_text))
    local found = q(db, "SELECT crier.feed_mark($1, $2, $3::bigint, $4, $5::bool) AS found",
        { auth.tenant, user, item, a[1], a[2] })
    if found[1].found ~= "t" then
        refuse(404, "not_found", "no item " .. item .. " in this feed")
    end
    local rows = q(db, "SELECT " .. ITEM_JSON .. " AS j FROM crier.feed($1, $2, $3::bigint + 1, 1, true) f"
        .. " WHERE f.id = $3::bigint", { auth.tenant, user, item })
    if #rows ~= 1 then
        refuse(404, "not_found", "no item " .. item .. " in this feed")
    end
    return 200, rows[1].j
end

-- route(method, path): the endpoint for a request, or a refusal.
local function route(method, path)
    if path == "/v1/feed" and method == "GET" then
        return feed_list
    elseif path == "/v1/feed/counts" and method == "GET" then
        return feed_counts
    elseif (path == "/v1/feed/read-all" or path == "/v1/feed/seen-all") and method == "POST" then
        local what = path == "/v1/feed/read-all" and "read" or "seen"
        return function(db, auth)
            return feed_mark_all(db, auth, what)
        end
    end
    local id, action = match(path, "^/v1/feed/items/([^/]*)/([^/]*)$")
    if id and method == "POST" then
        return function(db, auth)
            return feed_item(db, auth, id, action)
        end
    end
    refuse(404, "not_found", "no such endpoint here: " .. method .. " " .. path)
end

local function reply(status, body)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    ngx.print(body)
end

-- M.serve(): answers the request (content_by_lua). The path is the
-- request's URI (ngx.var.uri), as crier serve's API routes it.
function M.serve()
    local handler_ok, handler = pcall(route, ngx.req.get_method(), ngx.var.uri)
    if not handler_ok then
        local e = handler
        if getmetatable(e) ~= refusal_mt then
            error(e, 0)
        end
        return reply(e.status, json.encode({ error = { code = e.code, message = e.message } }))
    end
    local db, err = adapter.db()
    if not db then
        ngx.log(ngx.WARN, "crier feed: ", err)
        return reply(503, '{"error":{"code":"database_unavailable","message":"the database is unavailable; retry"}}')
    end
    local ok, status, body = pcall(function()
        local began, berr, bstate = db:exec("BEGIN")
        if not began then
            db_failed(berr, bstate)
        end
        local auth = authenticate(db)
        return handler(db, auth)
    end)
    if ok then
        local done, cerr, cstate = db:exec("COMMIT")
        if not done then
            ok, status = false, setmetatable({ status = 503, code = "database_unavailable",
                message = "the database connection was lost; retry" }, refusal_mt)
            ngx.log(ngx.WARN, "crier feed: COMMIT failed: ", cerr, " ", cstate)
        end
    elseif db.state == "ready" then
        db:exec("ROLLBACK")
    end
    db:keepalive()
    if not ok then
        if getmetatable(status) ~= refusal_mt then
            ngx.log(ngx.ERR, "crier feed: ", tostring(status))
            return reply(500, json.encode({ error = { code = "internal_error", message = "internal error" } }))
        end
        return reply(status.status, json.encode({ error = { code = status.code, message = status.message } }))
    end
    reply(status, body)
end

return M
