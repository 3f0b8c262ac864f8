-- crier.pg: a small PostgreSQL client on nginx's cosockets (ngx.socket.tcp,
-- over TCP or a unix socket), so that a handler waits for the database
-- without blocking its worker. Speaks the frontend/backend protocol 3.0
-- itself: startup, authentication (trust, password, md5, SCRAM-SHA-256 with
-- libcrypto through crier.crypto), the extended query protocol with
-- parameters sent apart from the SQL (never spliced into it), text results
-- decoded for the types crier returns, ErrorResponse as nil, err, sqlstate,
-- timeouts, and connections kept in nginx's pool (setkeepalive).
--
--   local pg = require "crier.pg"
--   local db, err = pg.connect("host=/run/postgresql dbname=app user=app")
--   if not db then return ngx.exit(503) end
--   local rows, err, sqlstate = db:query("SELECT id FROM t WHERE name = $1", { name })
--   db:keepalive()
--
-- The message codecs are plain functions (pg._codec) so busted tests them
-- without nginx; pg.connect takes { socket = obj } to run over any object
-- with connect/send/receive/close (a scripted server in the specs).
-- Misuse raises error(msg, 2); database and network failures return nil, err.

local crypto = require "crier.crypto"
local json = require "crier.json"
local bit = require "bit"

local type, tostring, tonumber, error, pcall, setmetatable, ipairs, pairs =
    type, tostring, tonumber, error, pcall, setmetatable, ipairs, pairs
local byte, char, find, format, sub, gsub, match, gmatch =
    string.byte, string.char, string.find, string.format, string.sub, string.gsub, string.match, string.gmatch
local concat, maxn, sort = table.concat, table.maxn, table.sort
local unpack = unpack
local band, bor, lshift, rshift = bit.band, bit.bor, bit.lshift, bit.rshift
local floor, huge = math.floor, math.huge

local ngx = rawget(_G, "ngx")

local M = {}

-- NULL in results (and a way to send NULL in a params list with holes):
-- ngx.null inside nginx, a sentinel elsewhere.
M.null = ngx and ngx.null or setmetatable({}, { __tostring = function() return "null" end })
local null = M.null

---------------------------------------------------------------------------
-- Codec: pure functions from Lua values to protocol bytes and back.

local codec = {}
M._codec = codec

local function i32(n)
    return char(band(rshift(n, 24), 255), band(rshift(n, 16), 255), band(rshift(n, 8), 255), band(n, 255))
end

local function i16(n)
    return char(band(rshift(n, 8), 255), band(n, 255))
end

-- signed 32-bit big-endian at pos
local function get_i32(s, pos)
    local a, b, c, d = byte(s, pos, pos + 3)
    return bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
end

local function get_i16(s, pos)
    local a, b = byte(s, pos, pos + 1)
    local n = a * 256 + b
    return n >= 32768 and n - 65536 or n
end
codec.i32, codec.i16, codec.get_i32, codec.get_i16 = i32, i16, get_i32, get_i16

-- A message: type byte (none for startup), int32 length (itself included), body.
local function message(kind, body)
    return kind .. i32(#body + 4) .. body
end
codec.message = message

-- codec.startup(params): the StartupMessage for { user =, database =, ... }.
function codec.startup(params)
    local parts = { i32(196608) } -- protocol 3.0
    local keys = {}
    for k in pairs(params) do
        keys[#keys + 1] = k
    end
    sort(keys)
    for _, k in ipairs(keys) do
        parts[#parts + 1] = k .. "\0" .. params[k] .. "\0"
    end
    parts[#parts + 1] = "\0"
    local body = concat(parts)
    return i32(#body + 4) .. body
end

-- codec.param_text(v): a Lua value as a parameter's text, or nil for NULL.
-- Strings pass unchanged; numbers in full precision; booleans as t/f;
-- tables as JSON text (for json/jsonb parameters).
function codec.param_text(v)
    local t = type(v)
    if v == nil or v == null then
        return nil
    elseif t == "string" then
        return v
    elseif t == "number" then
        if v ~= v or v == huge or v == -huge then
            return v ~= v and "NaN" or (v > 0 and "Infinity" or "-Infinity")
        end
        if v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then
            return format("%d", v)
        end
        return format("%.17g", v)
    elseif t == "boolean" then
        return v and "t" or "f"
    elseif t == "table" then
        local text, err = json.encode(v)
        if not text then
            error("crier.pg: a table parameter must be JSON-encodable: " .. tostring(err), 3)
        end
        return text
    elseif t == "cdata" then
        return (gsub(tostring(v), "U?LL$", ""))
    end
    error("crier.pg: cannot send a " .. t .. " as a parameter", 3)
end

-- codec.extended(sql, params, n): Parse, Bind, Describe (portal), Execute
-- and Sync for one statement with n text parameters (unnamed statement
-- and portal), as one string.
function codec.extended(sql, params, n)
    if find(sql, "\0", 1, true) then
        error("crier.pg: the SQL text contains a NUL byte", 3)
    end
    local bind = { "\0\0", i16(0), i16(n) } -- portal "", statement "", all formats text
    for i = 1, n do
        local text = codec.param_text(params[i])
        if text == nil then
            bind[#bind + 1] = i32(-1)
        else
            bind[#bind + 1] = i32(#text)
            bind[#bind + 1] = text
        end
    end
    bind[#bind + 1] = i16(0) -- results in text
    return concat({
        message("P", "\0" .. sql .. "\0" .. i16(0)),
        message("B", concat(bind)),
        message("D", "P\0"),
        message("E", "\0" .. i32(0)),
        message("S", ""),
    })
end

-- codec.simple(sql): a Query message (simple protocol: no parameters).
function codec.simple(sql)
    return message("Q", sql .. "\0")
end

local ERROR_FIELDS = {
    S = "severity", V = "severity_v", C = "sqlstate", M = "message", D = "detail", H = "hint",
    P = "position", W = "where", s = "schema", t = "table", c = "column", n = "constraint",
}

-- codec.error_fields(body): an ErrorResponse/NoticeResponse body as a table
-- { severity =, sqlstate =, message =, detail =, hint =, ... }.
function codec.error_fields(body)
    local fields, pos = {}, 1
    while pos <= #body do
        local code = sub(body, pos, pos)
        if code == "\0" then
            break
        end
        local stop = find(body, "\0", pos + 1, true) or #body + 1
        fields[ERROR_FIELDS[code] or code] = sub(body, pos + 1, stop - 1)
        pos = stop + 1
    end
    return fields
end

-- codec.error_text(fields): "ERROR: message (SQLSTATE xxxxx)" and the detail.
function codec.error_text(f)
    local text = format("%s: %s (SQLSTATE %s)", f.severity_v or f.severity or "ERROR", f.message or "?",
        f.sqlstate or "?????")
    if f.detail then
        text = text .. "; " .. f.detail
    end
    return text
end

-- codec.row_description(body): { { name =, type = oid }, ... }.
function codec.row_description(body)
    local n = get_i16(body, 1)
    local cols, pos = {}, 3
    for i = 1, n do
        local stop = find(body, "\0", pos, true)
        cols[i] = { name = sub(body, pos, stop - 1), type = get_i32(body, stop + 7) }
        pos = stop + 19
    end
    return cols
end

local function decode_bool(s)
    return s == "t"
end
local function decode_int(s)
    if #s <= 15 then
        return tonumber(s)
    end
    local n = tonumber(s)
    return (n and n > -2 ^ 53 and n < 2 ^ 53) and n or s
end
local function decode_float(s)
    return tonumber(s) or s
end
local function decode_json(s)
    local v = json.decode(s)
    if v == nil then
        return s
    end
    return v
end
local DECODERS = {
    [16] = decode_bool, [20] = decode_int, [21] = decode_int, [23] = decode_int, [26] = decode_int,
    [700] = decode_float, [701] = decode_float, [114] = decode_json, [3802] = decode_json,
}
codec.DECODERS = DECODERS

-- codec.data_row(body, cols, raw): one DataRow as { name = value }. raw:
-- every value as its text and NULL columns absent (the rules' rows, as in
-- crier serve); else decoded by type (bool, integers, floats, json/jsonb;
-- numeric, timestamps and the rest stay text) and NULL as pg.null.
function codec.data_row(body, cols, raw)
    local row, pos = {}, 3
    for i = 1, get_i16(body, 1) do
        local len = get_i32(body, pos)
        pos = pos + 4
        local col = cols[i]
        if len < 0 then
            if not raw then
                row[col.name] = null
            end
        else
            local s = sub(body, pos, pos + len - 1)
            pos = pos + len
            if raw then
                row[col.name] = s
            else
                local decode = DECODERS[col.type]
                row[col.name] = decode and decode(s) or s
            end
        end
    end
    return row
end

---------------------------------------------------------------------------
-- SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL uses it: no channel
-- binding, the user name left empty (the startup message names the user).

local function saslname(s)
    return (gsub(gsub(s, "=", "=3D"), ",", "=2C"))
end

-- codec.scram_first(user, nonce): the client-first message and its bare part.
function codec.scram_first(user, nonce)
    local bare = "n=" .. saslname(user or "") .. ",r=" .. nonce
    return "n,," .. bare, bare
end

-- codec.scram_final(password, first_bare, server_first, client_nonce): the
-- client-final message and the server signature expected in server-final,
-- or nil, err when server-first is not acceptable.
function codec.scram_final(password, first_bare, server_first, client_nonce)
    local nonce = match(server_first, "^r=([^,]+)")
    local salt64 = match(server_first, ",s=([^,]+)")
    local iterations = tonumber(match(server_first, ",i=(%d+)"))
    if not nonce or not salt64 or not iterations then
        return nil, "malformed SCRAM server-first message"
    end
    if sub(nonce, 1, #client_nonce) ~= client_nonce or #nonce <= #client_nonce then
        return nil, "the server's SCRAM nonce does not extend ours"
    end
    if iterations < 1 or iterations > 10000000 then
        return nil, "SCRAM iteration count out of range"
    end
    local salt = crypto.unbase64(salt64)
    if not salt then
        return nil, "malformed SCRAM salt"
    end
    local salted = crypto.pbkdf2_sha256(password, salt, iterations, 32)
    local client_key = crypto.hmac_sha256(salted, "Client Key")
    local stored_key = crypto.sha256(client_key)
    local without_proof = "c=biws,r=" .. nonce
    local auth_message = first_bare .. "," .. server_first .. "," .. without_proof
    local client_signature = crypto.hmac_sha256(stored_key, auth_message)
    local proof = crypto.xor(client_key, client_signature)
    local server_key = crypto.hmac_sha256(salted, "Server Key")
    local server_signature = crypto.hmac_sha256(server_key, auth_message)
    return without_proof .. ",p=" .. crypto.base64(proof), crypto.base64(server_signature)
end

-- codec.md5_password(user, password, salt): "md5" .. hex(md5(hex(md5(password
-- .. user)) .. salt)).
function codec.md5_password(user, password, salt)
    return "md5" .. crypto.hex(crypto.md5(crypto.hex(crypto.md5(password .. user)) .. salt))
end

---------------------------------------------------------------------------
-- Connection strings

-- M.parse_conninfo(s): a libpq key=value string ("host=/run/postgresql
-- dbname=app user=app password='a b'") or a postgresql:// URI as a table of
-- its keywords, or nil, err.
function M.parse_conninfo(s)
    if type(s) ~= "string" then
        error("crier.pg.parse_conninfo: expected a string", 2)
    end
    local out = {}
    if match(s, "^postgres(q?l?)://") then
        local rest = gsub(s, "^postgres[a-z]*://", "")
        local query
        rest, query = match(rest, "^([^?]*)%??(.*)$")
        local auth, hostpart = match(rest, "^(.*)@(.*)$")
        hostpart = hostpart or rest
        local function unescape(x)
            return (gsub(x, "%%(%x%x)", function(h) return char(tonumber(h, 16)) end))
        end
        if auth then
            local u, p = match(auth, "^([^:]*):?(.*)$")
            out.user = unescape(u)
            if find(auth, ":", 1, true) then
                out.password = unescape(p)
            end
        end
        local hostport, db = match(hostpart, "^([^/]*)/?(.*)$")
        local host, port = match(hostport, "^(.-):?(%d*)$")
        if host ~= "" then out.host = unescape(host) end
        if port ~= "" then out.port = port end
        if db ~= "" then out.dbname = unescape(db) end
        for k, v in gmatch(query, "([^&=]+)=([^&]*)") do
            out[unescape(k)] = unescape(v)
        end
        return out
    end
    local pos, len = 1, #s
    while true do
        pos = find(s, "%S", pos)
        if not pos then
            break
        end
        local key, after = match(s, "^([%w_]+)%s*=%s*()", pos)
        if not key then
            return nil, "malformed connection string near " .. format("%q", sub(s, pos, pos + 20))
        end
        pos = after
        local value
        if sub(s, pos, pos) == "'" then
            local parts = {}
            pos = pos + 1
            while true do
                if pos > len then
                    return nil, "unterminated quoted value for " .. key
                end
                local c = sub(s, pos, pos)
                if c == "\\" then
                    parts[#parts + 1] = sub(s, pos + 1, pos + 1)
                    pos = pos + 2
                elseif c == "'" then
                    pos = pos + 1
                    break
                else
                    parts[#parts + 1] = c
                    pos = pos + 1
                end
            end
            value = concat(parts)
        else
            value = match(s, "^%S*", pos)
            pos = pos + #value
            value = gsub(value, "\\(.)", "%1")
        end
        out[key] = value
    end
    return out
end

---------------------------------------------------------------------------
-- Connections

local Conn = {}
Conn.__index = Conn
M.Connection = Conn

local DEFAULTS = {
    connect_timeout = 3000, send_timeout = 5000, read_timeout = 15000,
    pool_size = 32, keepalive_timeout = 60000,
}
M.defaults = DEFAULTS

-- Reads one message: returns kind, body, or nil, err.
function Conn:_read()
    local sock = self.sock
    local head, err = sock:receive(5)
    if not head then
        return nil, err
    end
    local len = get_i32(head, 2) - 4
    if len < 0 or len > 1073741824 then
        return nil, "protocol error: message length " .. len
    end
    local body = ""
    if len > 0 then
        body, err = sock:receive(len)
        if not body then
            return nil, err
        end
    end
    return sub(head, 1, 1), body
end

-- Marks the connection broken (not to be pooled) and returns nil, err.
function Conn:_broken(err)
    self.state = "broken"
    if self.sock then
        self.sock:close()
    end
    return nil, err
end

local function options_of(opts)
    if type(opts) == "string" then
        local parsed, err = M.parse_conninfo(opts)
        if not parsed then
            return nil, err
        end
        opts = parsed
    elseif type(opts) ~= "table" then
        error("crier.pg.connect: expected a connection string or a table", 3)
    end
    local o = {}
    for k, v in pairs(DEFAULTS) do
        o[k] = v
    end
    for k, v in pairs(opts) do
        o[k] = v
    end
    if type(o.conninfo) == "string" then
        local parsed, err = M.parse_conninfo(o.conninfo)
        if not parsed then
            return nil, err
        end
        for k, v in pairs(parsed) do
            if opts[k] == nil then
                o[k] = v
            end
        end
    end
    o.user = o.user or "postgres"
    o.dbname = o.dbname or o.database or o.user
    o.port = tonumber(o.port) or 5432
    o.host = o.host or "127.0.0.1"
    if sub(o.host, 1, 1) == "/" then
        o.address = "unix:" .. o.host .. "/.s.PGSQL." .. o.port
    elseif sub(o.host, 1, 5) == "unix:" then
        o.address = o.host
    end
    o.pool = o.pool or format("crier.pg:%s:%s:%s:%s%s", o.user, o.dbname, o.host, o.port,
        o.session and (":" .. o.session) or "")
    return o
end

-- Authenticates after the startup message; returns true or nil, err.
function Conn:_authenticate(o)
    local first_bare, client_nonce, server_signature
    while true do
        local kind, body = self:_read()
        if not kind then
            return nil, "reading the server's answer to the startup: " .. tostring(body)
        end
        if kind == "E" then
            local f = codec.error_fields(body)
            return nil, codec.error_text(f), f.sqlstate
        elseif kind == "R" then
            local code = get_i32(body, 1)
            if code == 0 then
                return true
            elseif code == 3 or code == 5 then
                if not o.password then
                    return nil, "the server asks for a password and none was given"
                end
                local pw = code == 3 and o.password or codec.md5_password(o.user, o.password, sub(body, 5, 8))
                local sent, err = self.sock:send(message("p", pw .. "\0"))
                if not sent then
                    return nil, "sending the password: " .. tostring(err)
                end
            elseif code == 10 then
                if not find(body, "SCRAM-SHA-256\0", 5, true) then
                    return nil, "the server offers no SASL mechanism this client knows: "
                        .. gsub(sub(body, 5), "%z", " ")
                end
                if not o.password then
                    return nil, "the server asks for a password (SCRAM-SHA-256) and none was given"
                end
                local raw, err = crypto.random(18)
                if not raw then
                    return nil, err
                end
                client_nonce = crypto.base64(raw)
                local first
                first, first_bare = codec.scram_first("", client_nonce)
                local sent, serr = self.sock:send(message("p", "SCRAM-SHA-256\0" .. i32(#first) .. first))
                if not sent then
                    return nil, "sending SCRAM client-first: " .. tostring(serr)
                end
            elseif code == 11 then
                if not first_bare then
                    return nil, "protocol error: SASL continue without a start"
                end
                local final, sig = codec.scram_final(o.password, first_bare, sub(body, 5), client_nonce)
                if not final then
                    return nil, sig
                end
                server_signature = sig
                local sent, serr = self.sock:send(message("p", final))
                if not sent then
                    return nil, "sending SCRAM client-final: " .. tostring(serr)
                end
            elseif code == 12 then
                local v = match(sub(body, 5), "v=([^,]+)")
                if not server_signature or not v or not crypto.equal(v, server_signature) then
                    return nil, "the server's SCRAM signature is wrong: not the server that knows the password"
                end
            else
                return nil, "unsupported authentication request " .. code
            end
        else
            return nil, "protocol error: unexpected message '" .. kind .. "' during authentication"
        end
    end
end

-- Reads until ReadyForQuery after the startup; returns true or nil, err.
function Conn:_wait_ready()
    while true do
        local kind, body = self:_read()
        if not kind then
            return nil, body
        end
        if kind == "Z" then
            self.tx_status = body
            return true
        elseif kind == "E" then
            -- an error during startup is FATAL: the server closes the connection
            local err_fields = codec.error_fields(body)
            return nil, codec.error_text(err_fields), err_fields.sqlstate
        elseif kind == "K" then
            self.backend_pid = get_i32(body, 1)
        elseif kind == "S" then
            local name, value = match(body, "^(%Z*)%z(%Z*)")
            self.parameters[name] = value
        end
    end
end

-- M.connect(opts): a connection, from nginx's pool when one is idle there,
-- or nil, err, sqlstate. opts is a connection string or a table: host (a
-- name, an address, or a unix socket directory), port, user, password,
-- dbname, application_name, options (startup "-c name=value" settings),
-- connect_timeout, send_timeout, read_timeout (ms), pool (a name; default from
-- user, dbname, host, port), pool_size, keepalive_timeout (ms), socket (an
-- object to use instead of ngx.socket.tcp()), conninfo (a string whose
-- keywords fill what the table leaves out).
function M.connect(opts)
    local o, err = options_of(opts)
    if not o then
        return nil, err
    end
    local sock = o.socket
    if not sock then
        if not ngx then
            error("crier.pg.connect: outside nginx, pass { socket = ... }", 2)
        end
        sock, err = ngx.socket.tcp()
        if not sock then
            return nil, err
        end
    end
    local self = setmetatable({ sock = sock, opts = o, parameters = {}, state = "new" }, Conn)
    if sock.settimeouts then
        sock:settimeouts(o.connect_timeout, o.send_timeout, o.read_timeout)
    end
    local ok
    local pool_opts = { pool = o.pool, pool_size = o.pool_size, backlog = o.backlog }
    if o.address then
        ok, err = sock:connect(o.address, pool_opts)
    else
        ok, err = sock:connect(o.host, o.port, pool_opts)
    end
    if not ok then
        return nil, format("cannot connect to PostgreSQL at %s: %s", o.address or (o.host .. ":" .. o.port),
            tostring(err))
    end
    if sock.getreusedtimes and (sock:getreusedtimes() or 0) > 0 then
        self.state, self.tx_status, self.reused = "ready", "I", true
        return self
    end
    local params = { user = o.user, database = o.dbname, application_name = o.application_name or "crier nginx",
        client_encoding = "UTF8" }
    if o.options then
        params.options = o.options
    end
    local sent
    sent, err = sock:send(codec.startup(params))
    if not sent then
        return self:_broken("sending the startup message: " .. tostring(err))
    end
    local sqlstate
    ok, err, sqlstate = self:_authenticate(o)
    if ok then
        ok, err, sqlstate = self:_wait_ready()
    end
    if not ok then
        self:_broken()
        return nil, err, sqlstate
    end
    self.state = "ready"
    if o.setup then
        ok, err, sqlstate = self:exec(o.setup)
        if not ok then
            self:_broken()
            return nil, "setting the session up: " .. tostring(err), sqlstate
        end
    end
    return self
end

-- Reads a statement's answer up to ReadyForQuery: rows (a list, with
-- .columns and .command) or nil, err, sqlstate. raw: see codec.data_row.
function Conn:_results(raw)
    local rows, cols, err_fields = { }, nil, nil
    while true do
        local kind, body = self:_read()
        if not kind then
            return self:_broken("reading from PostgreSQL: " .. tostring(body))
        end
        if kind == "D" then
            if cols then
                rows[#rows + 1] = codec.data_row(body, cols, raw)
            end
        elseif kind == "T" then
            cols = codec.row_description(body)
            rows.columns = cols
        elseif kind == "C" then
            rows.command = sub(body, 1, -2)
            rows.affected = tonumber(match(rows.command, "(%d+)$"))
        elseif kind == "E" then
            err_fields = err_fields or codec.error_fields(body)
        elseif kind == "Z" then
            self.tx_status = body
            self.state = "ready"
            if err_fields then
                return nil, codec.error_text(err_fields), err_fields.sqlstate
            end
            return rows
        end
        -- '1' ParseComplete, '2' BindComplete, 'n' NoData, 'I' EmptyQuery,
        -- 'N' notices, 'S' parameter changes, 'A' notifications: nothing to keep
    end
end

local function check_usable(self, what)
    if self.state ~= "ready" then
        return nil, format("crier.pg: %s on a connection that is %s", what, self.state == "broken"
            and "broken (a network error or timeout happened on it)" or self.state)
    end
    return true
end

-- db:query(sql, params, raw): runs one statement with params (a list; a
-- hole or pg.null is NULL; params.n counts trailing NULLs) through the
-- extended protocol. Returns rows (list of { column = value }, with
-- .columns, .command and .affected) or nil, err, sqlstate. After a network
-- error or a timeout the connection is closed: get another.
function Conn:query(sql, params, raw)
    if type(sql) ~= "string" then
        error("db:query: sql must be a string", 2)
    end
    if params ~= nil and type(params) ~= "table" then
        error("db:query: params must be a list", 2)
    end
    local ok, err = check_usable(self, "query")
    if not ok then
        return nil, err
    end
    params = params or {}
    local n = params.n or maxn(params)
    local msg = codec.extended(sql, params, n)
    self.state = "busy"
    local sent
    sent, err = self.sock:send(msg)
    if not sent then
        return self:_broken("sending to PostgreSQL: " .. tostring(err))
    end
    return self:_results(raw)
end

-- db:query_text(sql, params): like db:query with every value as text and
-- NULL columns absent (what crier.query gives rules).
function Conn:query_text(sql, params)
    return self:query(sql, params, true)
end

-- db:exec(sql): runs sql through the simple protocol (no parameters; may
-- hold several statements: for BEGIN, COMMIT, SET). Returns rows of the
-- last statement (as text) or nil, err, sqlstate.
function Conn:exec(sql)
    if type(sql) ~= "string" then
        error("db:exec: sql must be a string", 2)
    end
    local ok, err = check_usable(self, "exec")
    if not ok then
        return nil, err
    end
    self.state = "busy"
    local sent
    sent, err = self.sock:send(codec.simple(sql))
    if not sent then
        return self:_broken("sending to PostgreSQL: " .. tostring(err))
    end
    return self:_results(true)
end

-- Whether s is an RFC 3339 date-time with its offset (the shape a "not
-- before" time must have; the database checks the calendar).
local function rfc3339(s)
    return type(s) == "string"
        and (s:match("^%d%d%d%d%-%d%d%-%d%d[Tt ]%d%d:%d%d:%d%d[Zz]$")
            or s:match("^%d%d%d%d%-%d%d%-%d%d[Tt ]%d%d:%d%d:%d%d%.%d+[Zz]$")
            or s:match("^%d%d%d%d%-%d%d%-%d%d[Tt ]%d%d:%d%d:%d%d[+-]%d%d:%d%d$")
            or s:match("^%d%d%d%d%-%d%d%-%d%d[Tt ]%d%d:%d%d:%d%d%.%d+[+-]%d%d:%d%d$")) ~= nil
end

-- db:emit(tenant, type, entity, payload, dedupe_key, not_before): crier.emit
-- on this connection (inside its transaction when one is open). payload is a
-- table (encoded as JSON), JSON text, or nil ({}). not_before (optional, a
-- scheduled send): an RFC 3339 time with its offset; the event fans out then,
-- not before. Returns the event id (a duplicate dedupe key returns the first
-- event's id) or nil, err, sqlstate (a not_before of another shape: 22023).
function Conn:emit(tenant, event_type, entity, payload, dedupe_key, not_before)
    if payload == nil then
        payload = "{}"
    elseif type(payload) == "table" then
        local text, err = json.encode(payload)
        if not text then
            return nil, "the payload is not JSON-encodable: " .. tostring(err)
        end
        payload = text
    elseif type(payload) ~= "string" then
        error("emit: payload must be a table, JSON text or nil", 2)
    end
    if not_before ~= nil and not rfc3339(not_before) then
        return nil, "crier.emit: not_before must be an RFC 3339 time with its offset, such as "
            .. "2026-03-01T08:00:00Z or 2026-03-01T09:00:00+01:00", "22023"
    end
    local rows, err, sqlstate = self:query("SELECT crier.emit($1, $2, $3, $4::jsonb, $5, $6::timestamptz) AS id",
        { tenant, event_type, entity, payload, dedupe_key, not_before, n = 6 })
    if not rows then
        return nil, err, sqlstate
    end
    return rows[1].id
end

-- db:transaction(fn, ...): BEGIN; fn(db, ...); COMMIT. fn raising, or
-- returning nil (or false), err, rolls back, and so does a COMMIT that fails.
-- Returns what fn returned (true when it returned nothing) after the
-- commit, or nil, err, sqlstate after the rollback. A raised error's message
-- is in err; it does not propagate.
function Conn:transaction(fn, ...)
    if type(fn) ~= "function" then
        error("db:transaction: expected a function", 2)
    end
    local ok, err, sqlstate = self:exec("BEGIN")
    if not ok then
        return nil, err, sqlstate
    end
    local results = { pcall(fn, self, ...) }
    local n = maxn(results)
    local failed, why, why_state
    if not results[1] then
        failed, why = true, tostring(results[2])
    elseif not results[2] and results[3] ~= nil then
        failed, why, why_state = true, tostring(results[3]), results[4]
    end
    if failed then
        if self.state == "ready" then
            local rolled, rerr = self:exec("ROLLBACK")
            if not rolled then
                self:_broken()
                return nil, why .. " (and ROLLBACK failed: " .. tostring(rerr) .. ")", why_state
            end
        else
            self:_broken() -- an interrupted read: closing the connection rolls back
        end
        return nil, why, why_state
    end
    local done
    done, err, sqlstate = self:exec("COMMIT")
    if not done then
        return nil, err, sqlstate
    end
    if done.command ~= "COMMIT" then
        -- COMMIT of a transaction a statement failed in answers ROLLBACK
        return nil, "the transaction was rolled back (a statement in it failed)", "25P02"
    end
    if n < 2 then
        return true
    end
    return unpack(results, 2, n)
end

-- db:keepalive(): gives the connection back to nginx's pool when it is
-- idle and outside a transaction, otherwise closes it. Returns true or
-- nil, err.
function Conn:keepalive()
    local sock = self.sock
    if not sock then
        return nil, "closed"
    end
    self.sock = nil
    if self.state ~= "ready" or self.tx_status ~= "I" or not sock.setkeepalive then
        self.state = "closed"
        return sock:close()
    end
    self.state = "closed"
    return sock:setkeepalive(self.opts.keepalive_timeout, self.opts.pool_size)
end

-- db:close(): closes the connection (Terminate, then the socket).
function Conn:close()
    local sock = self.sock
    if not sock then
        return nil, "closed"
    end
    self.sock = nil
    if self.state == "ready" then
        sock:send(message("X", ""))
    end
    self.state = "closed"
    return sock:close()
end

-- M.with(opts, fn, ...): connects, calls fn(db, ...), gives the connection
-- back to the pool (or closes it) and returns fn's results, or nil, err,
-- sqlstate when the connection failed. A raise in fn closes the connection
-- and re-raises.
function M.with(opts, fn, ...)
    local db, err, sqlstate = M.connect(opts)
    if not db then
        return nil, err, sqlstate
    end
    local results = { pcall(fn, db, ...) }
    if not results[1] then
        db:close()
        error(results[2], 0)
    end
    db:keepalive()
    return unpack(results, 2, maxn(results))
end

return M
