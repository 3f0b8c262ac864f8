-- crier.testing: helpers for unit-testing rules with busted, without a
-- database. Load a rules directory (or files, or a source string) into a
-- generation exactly as the engine does, build events, plan them with fake
-- query rows and stored preferences, and look at the result: recipients in
-- order, each notification's key and message id, deliveries with their bodies
-- decoded (webhook and Kafka JSON) or rendered (email subject, text, html),
-- and whether a recipient's preferences would suppress a delivery; and
-- rules:timeline, the engine's time features (delay, unless, cancel_on,
-- throttle, digest) on a clock the spec moves. Pure Lua (LuaJIT for the
-- SHA-256 of keys and rules versions).
--
--   local testing = require "crier.testing"
--   local rules = testing.load("examples/rules", { settings = { billing_webhook_url = "https://h.test/x" } })
--   local result = rules:plan { tenant = "acme", type = "invoice.created", entity_id = "inv_1",
--                               payload = { invoice_id = "inv_1", amount_cents = 1250, currency = "EUR" } }
--   testing.assert_recipients(result, { "alice", "bob", "carol" })
--   local hook = testing.assert_delivered(result, "alice", "webhook")
--   assert.are.equal("inv_1", hook.body.invoice_id)
--
--   local sim = rules:timeline { start = "2026-01-05T09:00:00Z" }
--   sim:emit { type = "comment.created", entity_id = "c1", payload = { ... } }
--   sim:advance "61m"
--   local sent = sim:sent("alice", "email")   -- what went out, in order
--
-- Misuse (bad arguments) raises error(msg, 2); a failing plan raises from
-- rules:plan and returns nil, err, code from rules:try_plan. The file and
-- directory readers refuse to run while rules load or run, so the module is
-- harmless where the rules' sandbox hands it out.

local crier = require "crier"
local json = require "crier.json"
local runtime = require "crier.runtime"
local nginx = require "crier.nginx"
local timing = require "crier.timing"
local tz = require "crier.tz"

local type, pairs, ipairs, next, tostring, tonumber, error, setmetatable, getmetatable, pcall, assert =
    type, pairs, ipairs, next, tostring, tonumber, error, setmetatable, getmetatable, pcall, assert
local char, find, format, gmatch, gsub, match, sub = string.char, string.find, string.format, string.gmatch,
    string.gsub, string.match, string.sub
local concat, sort = table.concat, table.sort
local floor = math.floor
local io_open, io_popen = io.open, io.popen

local testing = {}

local Rules = {}
Rules.__index = Rules

local Result = {}
Result.__index = Result

---------------------------------------------------------------------------
-- Small helpers

-- Raises misuse at the caller of the public function (level 3: user -> api -> here).
local function misuse(msg)
    error("crier.testing: " .. msg, 3)
end

local function refuse_inside_rules(api)
    if crier._registry() ~= nil then
        error(format("crier.testing.%s cannot be used while rules load or run (it is for spec files)", api), 3)
    end
end

local function describe_value(v)
    if type(v) == "string" then
        return format("%q", v)
    end
    return tostring(v)
end

local function show_list(list)
    local out = {}
    for i, v in ipairs(list) do
        out[i] = describe_value(v)
    end
    return "{ " .. concat(out, ", ") .. " }"
end

local function copy(t)
    local c = {}
    for k, v in pairs(t or {}) do
        c[k] = v
    end
    return c
end

-- b's entries over a's (either may be nil).
local function merged(a, b)
    local m = copy(a)
    for k, v in pairs(b or {}) do
        m[k] = v
    end
    return m
end

local function basename(path)
    return match(path, "([^/]*)$")
end

---------------------------------------------------------------------------
-- Notification keys (src/base/keys.c): the readable key, the key hash (first 128
-- bits of SHA-256 over a length-prefixed tuple) as a uuid, and the message id
-- "msg_<32 hex>" that side effects carry.

-- One key component: a presence byte, a 4-byte big-endian length, the bytes
-- (up to a NUL, as the C core reads strings); nil is a single 0 byte.
local function key_component(s)
    if s == nil then
        return "\0"
    end
    local nul = find(s, "\0", 1, true)
    if nul then
        s = sub(s, 1, nul - 1)
    end
    local n = #s
    return "\1" .. char(floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256) .. s
end

local function escape_key_part(s)
    return (gsub(s, "[\\:]", "\\%0"))
end

-- testing.key(tenant, event_type, entity_id, recipient_id[, discriminator]):
-- { key = "type:entity:recipient[:discriminator]", key_hash = "<uuid>",
--   message_id = "msg_<32 hex>" }, the same values crier try prints and the
-- engine stores (webhook-id, Message-ID, Kafka key).
function testing.key(tenant, event_type, entity_id, recipient_id, discriminator)
    for i, v in ipairs({ tenant, event_type, entity_id, recipient_id }) do
        if type(v) ~= "string" then
            misuse(format("key: argument %d must be a string, got %s", i, type(v)))
        end
    end
    if discriminator ~= nil and type(discriminator) ~= "string" then
        misuse("key: the discriminator must be a string or nil, got " .. type(discriminator))
    end
    local hex = nginx.sha256_hex("crier.notification.v1" .. key_component(tenant) .. key_component(event_type)
        .. key_component(entity_id) .. key_component(recipient_id) .. key_component(discriminator))
    local parts = { escape_key_part(event_type), escape_key_part(entity_id), escape_key_part(recipient_id) }
    if discriminator ~= nil then
        parts[4] = escape_key_part(discriminator)
    end
    return {
        key = concat(parts, ":"),
        key_hash = format("%s-%s-%s-%s-%s", sub(hex, 1, 8), sub(hex, 9, 12), sub(hex, 13, 16), sub(hex, 17, 20),
            sub(hex, 21, 32)),
        message_id = "msg_" .. sub(hex, 1, 32),
    }
end

---------------------------------------------------------------------------
-- Reading rule files

-- The engine's rule (src/rules/rules.c is_rule_file): "*.lua", not "*_spec.lua",
-- not starting with ".".
testing.is_rule_file = nginx.is_rule_file

local function shell_quote(s)
    return "'" .. gsub(s, "'", "'\\''") .. "'"
end

-- The names in directory dir, or nil, err. Uses LuaFileSystem when it is
-- installed, else `ls` (plain Lua cannot list a directory).
local function list_dir(dir)
    local ok, lfs = pcall(require, "lfs")
    if ok and type(lfs) == "table" and lfs.dir then
        if lfs.attributes(dir, "mode") ~= "directory" then
            return nil, dir .. ": cannot open rules directory: not a directory"
        end
        local names = {}
        for name in lfs.dir(dir) do
            names[#names + 1] = name
        end
        return names
    end
    local probe = io_open(dir, "rb")
    if not probe then
        return nil, dir .. ": cannot open rules directory"
    end
    probe:close()
    if not io_popen then
        return nil, dir .. ": cannot list a directory here (no io.popen and no LuaFileSystem): pass a list of files"
    end
    local p = io_popen("ls -1a -- " .. shell_quote(dir) .. " 2>/dev/null")
    if not p then
        return nil, dir .. ": cannot list the directory"
    end
    local names = {}
    for line in p:lines() do
        names[#names + 1] = line
    end
    p:close()
    return names
end

local function read_file(path)
    local f, err = io_open(path, "rb")
    if not f then
        return nil, err
    end
    local source, read_err, errno = f:read("*a")
    f:close()
    if not source then
        return nil, path .. ": " .. tostring(read_err), errno == 21 -- EISDIR
    end
    return source
end

-- Files to load, { { name =, path =, source = } } in the engine's order
-- (sorted by name), from a directory, a file or a list of files.
local function collect_files(what)
    local paths = {}
    if type(what) == "string" and sub(what, -4) == ".lua" then
        what = { what }
    end
    if type(what) == "string" then
        local names, err = list_dir(what)
        if not names then
            return nil, err
        end
        local dir = sub(what, -1) == "/" and what or what .. "/"
        for _, name in ipairs(names) do
            if testing.is_rule_file(name) then
                paths[#paths + 1] = dir .. name
            end
        end
    else
        for i, path in ipairs(what) do
            if type(path) ~= "string" then
                return nil, format("files[%d] must be a path, got %s", i, type(path))
            end
            if not testing.is_rule_file(basename(path)) then
                return nil, format("%s is not a rule file (the engine loads *.lua files except *_spec.lua and "
                    .. "names starting with '.')", path)
            end
            paths[#paths + 1] = path
        end
    end
    local files = {}
    for _, path in ipairs(paths) do
        local source, err, is_dir = read_file(path)
        if source then
            files[#files + 1] = { name = basename(path), path = path, source = source }
        elseif not (is_dir and type(what) == "string") then
            return nil, err
        end
        -- like the engine's stat(): a directory named x.lua in a rules directory is skipped
    end
    sort(files, function(a, b)
        if a.name ~= b.name then
            return a.name < b.name
        end
        return a.path < b.path
    end)
    return files
end

---------------------------------------------------------------------------
-- Options: settings, fake query rows, preferences

local function check_settings(settings)
    local out = {}
    if settings == nil then
        return out
    end
    if type(settings) ~= "table" then
        return nil, "opts.settings must be a table { name = value }"
    end
    for k, v in pairs(settings) do
        if type(k) ~= "string" then
            return nil, "opts.settings: names must be strings"
        end
        if type(v) == "number" then
            v = json.format_number(v) or tostring(v)
        elseif type(v) == "boolean" then
            v = tostring(v)
        elseif type(v) ~= "string" then
            return nil, format("opts.settings.%s must be a string (as --set gives it), got %s", k, type(v))
        end
        out[k] = v
    end
    return out
end

local function check_queries(where, queries)
    if queries ~= nil and type(queries) ~= "table" then
        return nil, where .. ".queries must be a table { query_name = rows or function(...) }"
    end
    for name, rows in pairs(queries or {}) do
        if type(name) ~= "string" or (type(rows) ~= "table" and type(rows) ~= "function") then
            return nil, format("%s.queries.%s must be a list of rows or a function(...) returning one", where,
                tostring(name))
        end
    end
    return true
end

local preference_channels = { ["*"] = true, webhook = true, email = true, kafka = true, feed = true }

-- Checks opts.preferences: { [recipient_id] = { { event_type =, channel =,
-- enabled = }, ... } } with the constraints crier.set_preference enforces, or
-- a function(recipient_id, event) returning such a list.
local function check_preferences(where, prefs)
    if prefs == nil or type(prefs) == "function" then
        return true
    end
    if type(prefs) ~= "table" then
        return nil, where .. ".preferences must be a table { [recipient_id] = { { event_type =, channel =, "
            .. "enabled = }, ... } } or a function(recipient_id, event)"
    end
    for id, list in pairs(prefs) do
        if type(list) ~= "table" then
            return nil, format("%s.preferences[%s] must be a list of preferences", where, describe_value(id))
        end
        for i, p in ipairs(list) do
            local at = format("%s.preferences[%s][%d]", where, describe_value(id), i)
            if type(p) ~= "table" then
                return nil, at .. " must be a table { event_type =, channel =, enabled = }"
            end
            local et, ch = p.event_type or "*", p.channel or "*"
            if type(et) ~= "string" or (et ~= "*" and not find(et, "^[%w_%.%-]+$")) then
                return nil, at .. ".event_type must be \"*\" or an event type name, got " .. describe_value(et)
            end
            if not preference_channels[ch] then
                return nil, at .. ".channel must be \"*\", \"webhook\", \"email\", \"kafka\" or \"feed\", got "
                    .. describe_value(ch)
            end
            if type(p.enabled) ~= "boolean" then
                return nil, at .. ".enabled must be true or false, got " .. describe_value(p.enabled)
            end
        end
    end
    return true
end

-- A row as PostgreSQL's text results give it to rules: every value a string
-- (numbers as their text, booleans "t"/"f", tables as JSON), NULL columns absent.
local function pg_row(name, i, row)
    if type(row) ~= "table" then
        error(format("crier.testing: query %q: row %d must be a table { column = value }, got %s", name, i,
            type(row)), 0)
    end
    local out = {}
    for column, v in pairs(row) do
        local t = type(v)
        if v == json.null then
            v = nil
        elseif t == "number" then
            v = json.format_number(v) or tostring(v)
        elseif t == "boolean" then
            v = v and "t" or "f"
        elseif t == "table" then
            v = assert(json.encode(v))
        elseif t ~= "string" then
            error(format("crier.testing: query %q: row %d column %s is a %s", name, i, tostring(column), t), 0)
        end
        out[column] = v
    end
    return out
end

local function pg_rows(name, rows)
    local out = {}
    for i, row in ipairs(rows) do
        out[i] = pg_row(name, i, row)
    end
    return out
end

-- A query backend over runtime.fake_query_backend that records each call in
-- calls and converts rows the way the database would.
local function fake_backend(queries, calls)
    local failed
    local converted = {}
    for name, rows in pairs(queries) do
        if type(rows) == "function" then
            converted[name] = function(...)
                local got, err = rows(...)
                if got == nil then
                    failed = err or "the fake query returned nil"
                    return {}
                end
                return pg_rows(name, got)
            end
        else
            converted[name] = pg_rows(name, rows)
        end
    end
    local fake = runtime.fake_query_backend(converted)
    return function(name, sql, values, n, page)
        local params = {}
        for i = 1, n do
            params[i] = values[i]
        end
        calls[#calls + 1] = { name = name, sql = sql, params = params, n = n, page = page }
        failed = nil
        local rows, err = fake(name, sql, values, n, page)
        if failed then
            return nil, failed
        end
        return rows, err
    end
end

---------------------------------------------------------------------------
-- Loading

local function new_rules(files, opts)
    opts = opts or {}
    if type(opts) ~= "table" then
        return nil, "opts must be a table { settings =, queries =, preferences = }"
    end
    for k in pairs(opts) do
        if k ~= "settings" and k ~= "queries" and k ~= "preferences" then
            return nil, format("opts: unknown field '%s' (expected settings, queries, preferences)", tostring(k))
        end
    end
    local settings, err = check_settings(opts.settings)
    if not settings then
        return nil, err
    end
    local ok
    ok, err = check_queries("opts", opts.queries)
    if ok then
        ok, err = check_preferences("opts", opts.preferences)
    end
    if not ok then
        return nil, err
    end
    local loaded = {}
    for i, f in ipairs(files) do
        loaded[i] = { path = f.path, source = f.source }
    end
    local generation, problems = runtime.new_generation(loaded, settings)
    if not generation then
        return false, problems
    end
    local names = {}
    for i, f in ipairs(files) do
        names[i] = f.name
    end
    local paths = {}
    for i, f in ipairs(files) do
        paths[i] = f.path
    end
    return setmetatable({
        generation = generation,
        files = names,
        paths = paths,
        version = nginx.version(files),
        queries = copy(opts.queries),
        preferences = opts.preferences,
    }, Rules)
end

-- Shared by load and try_load: rules, or nil, err, misuse (a message that
-- is the caller's mistake rather than a problem in the rules).
local function load_rules(what, opts)
    if type(what) ~= "string" and type(what) ~= "table" then
        return nil, "load: expected a rules directory, a .lua file or a list of files, got " .. type(what), true
    end
    local files, err = collect_files(what)
    if not files then
        return nil, err, true
    end
    if #files == 0 then
        return nil, format("no rule files in %s", type(what) == "string" and what or show_list(what)), true
    end
    local rules
    rules, err = new_rules(files, opts)
    if rules == nil then
        return nil, err, true
    end
    if not rules then
        return nil, err
    end
    return rules
end

-- testing.load(dir_or_files, opts): loads rule files the way the engine
-- does. dir_or_files is a rules directory (its *.lua files except *_spec.lua
-- and dot files, sorted by name), one ".lua" path, or a list of paths (sorted
-- by file name too). opts (optional):
--   settings    = { name = value }  what --set / CRIER_SET_name would give
--   queries     = { query_name = rows | function(...) -> rows }  fake rows for
--                 crier.query / crier.pages (see rules:plan)
--   preferences = { [recipient_id] = { { event_type =, channel =, enabled = }, ... } }
--                 or function(recipient_id, event) -> such a list
-- Returns the rules object: rules.generation (crier.runtime's), rules.files
-- (names in load order), rules.version (the rules version crier check prints
-- a prefix of). Raises when the rules do not load, with the problems as
-- "path:line: message" lines, and on misuse.
function testing.load(what, opts)
    refuse_inside_rules("load")
    local rules, err, is_misuse = load_rules(what, opts)
    if not rules then
        if is_misuse then
            misuse(err)
        end
        error("crier.testing: the rules did not load:\n" .. err, 2)
    end
    return rules
end

-- testing.try_load(dir_or_files, opts): like load, but returns nil and the
-- problems ("path:line: message" lines, exactly as crier check prints them)
-- when the rules do not load. Misuse still raises.
function testing.try_load(what, opts)
    refuse_inside_rules("try_load")
    local rules, err, is_misuse = load_rules(what, opts)
    if not rules and is_misuse then
        misuse(err)
    end
    return rules, err
end

-- testing.load_source(source, opts): loads one rule file given as text,
-- named opts.path (default "rules.lua"); other opts as for load. Raises
-- when it does not load (use try_load_source to see the problems).
local function source_files(source, opts)
    if type(source) ~= "string" then
        misuse("load_source: source must be a string, got " .. type(source))
    end
    opts = copy(opts)
    local path = opts.path or "rules.lua"
    opts.path = nil
    if type(path) ~= "string" then
        misuse("load_source: opts.path must be a string")
    end
    return { { name = basename(path), path = path, source = source } }, opts
end

function testing.load_source(source, opts)
    local files
    files, opts = source_files(source, opts)
    local rules, err = new_rules(files, opts)
    if rules == nil then
        misuse(err)
    elseif not rules then
        error("crier.testing: the rules did not load:\n" .. err, 2)
    end
    return rules
end

function testing.try_load_source(source, opts)
    local files
    files, opts = source_files(source, opts)
    local rules, err = new_rules(files, opts)
    if rules == nil then
        misuse(err)
    end
    return rules or nil, err
end

---------------------------------------------------------------------------
-- Events

local next_event_id = 0

-- testing.event { type =, tenant = "acme", entity_id = "entity_<id>",
-- payload = { ... } | "<json text>", id = <next number>, cursor = nil }:
-- the event table the engine hands to the rules (payload encoded as
-- payload_json). Only type is required.
function testing.event(spec)
    if type(spec) ~= "table" then
        misuse("event: expected a table { type =, tenant =, entity_id =, payload = }, got " .. type(spec))
    end
    for k in pairs(spec) do
        if k ~= "type" and k ~= "tenant" and k ~= "entity_id" and k ~= "payload" and k ~= "payload_json"
            and k ~= "id" and k ~= "cursor" then
            misuse(format("event: unknown field '%s' (expected type, tenant, entity_id, payload, id, cursor)",
                tostring(k)))
        end
    end
    if type(spec.type) ~= "string" or spec.type == "" then
        misuse("event: type must be an event type name, got " .. describe_value(spec.type))
    end
    local id = spec.id
    if id == nil then
        next_event_id = next_event_id + 1
        id = next_event_id
    elseif type(id) ~= "number" then
        misuse("event: id must be a number, got " .. type(id))
    end
    local payload_json = spec.payload_json
    if payload_json == nil then
        local payload = spec.payload
        if payload == nil then
            payload_json = "{}"
        elseif type(payload) == "string" then
            payload_json = payload -- raw JSON text, to test what the engine refuses
        elseif type(payload) == "table" then
            local err
            payload_json, err = json.encode(payload)
            if not payload_json then
                misuse("event: payload cannot be encoded as JSON: " .. err)
            end
            if payload_json == "[]" and next(payload) == nil then
                payload_json = "{}"
            end
        else
            misuse("event: payload must be a table or JSON text, got " .. type(payload))
        end
    elseif type(payload_json) ~= "string" then
        misuse("event: payload_json must be JSON text")
    end
    local tenant = spec.tenant or "acme"
    local entity_id = spec.entity_id or ("entity_" .. (json.format_number(id) or tostring(id)))
    if type(tenant) ~= "string" or type(entity_id) ~= "string" then
        misuse("event: tenant and entity_id must be strings")
    end
    if spec.cursor ~= nil and type(spec.cursor) ~= "string" then
        misuse("event: cursor must be a string")
    end
    return { id = id, tenant = tenant, type = spec.type, entity_id = entity_id, payload_json = payload_json,
        cursor = spec.cursor }
end

local function as_event(event)
    if type(event) ~= "table" then
        return nil
    end
    if event.payload_json ~= nil and event.payload == nil then
        return event
    end
    return testing.event(event)
end

---------------------------------------------------------------------------
-- Planning

local function retry_list(literal)
    if literal == nil then
        return nil
    end
    local list = {}
    for n in gmatch(literal, "%d+") do
        list[#list + 1] = tonumber(n)
    end
    return list
end

local function split_secrets(text)
    if text == nil then
        return nil
    end
    local list = {}
    for s in gmatch(text, "%S+") do
        list[#list + 1] = s
    end
    return list
end

local function preferences_for(prefs, recipient_id, event)
    if type(prefs) == "function" then
        local list = prefs(recipient_id, event)
        if list ~= nil then
            local ok, err = check_preferences("preferences(" .. describe_value(recipient_id) .. ")",
                { [recipient_id] = list })
            if not ok then
                error("crier.testing: " .. err, 0)
            end
        end
        return list
    end
    return prefs and prefs[recipient_id]
end

-- A delivery of the plan as a spec sees it.
local function view_delivery(d, entry, event, prefs)
    local v = {
        channel = d.channel,
        recipient = entry.recipient,
        discriminator = entry.discriminator,
        key = entry.key,
        message_id = entry.message_id,
        target = d.target,
        raw = d.body,
        retry_literal = d.retry_literal,
        retry = retry_list(d.retry_literal),
        honor_preferences = d.honor_preferences ~= false,
        plan = d,
    }
    if d.channel == "webhook" or d.channel == "kafka" then
        local decoded, err = json.decode(d.body)
        if decoded == nil then
            error(format("crier.testing: the %s body for %s is not JSON (%s): %s", d.channel, entry.recipient, err,
                d.body), 0)
        end
        v.body = decoded
        if d.channel == "webhook" then
            v.url = d.url or d.target
            v.secret = d.secret
            v.secrets = split_secrets(d.secret)
            v.signed = d.secret ~= nil
        else
            v.topic = d.target
        end
    elseif d.channel == "feed" then
        -- the feed item's content, stored as JSON: title, body, url, data, ...
        local decoded = json.decode(d.body)
        v.body = decoded or d.body
        v.content = decoded
    elseif d.channel == "email" then
        v.to = d.target
        v.from = d.from
        v.subject = d.subject
        v.text = d.body
        v.html = d.html
        v.body = d.body
    else
        v.body = d.body
    end
    local list = preferences_for(prefs, entry.recipient, event)
    v.suppressed = v.honor_preferences and not crier.preference_allows(list, event.type, d.channel)
    if v.suppressed then
        v.suppressed_by = crier.deciding_preference(list, event.type, d.channel)
    end
    return v
end

local function new_result(event, calls)
    return setmetatable({
        event = event,
        entries = {},
        recipients = {},
        queries = calls,
        pages = 0,
        duplicates = 0,
        by_key = {},
    }, Result)
end

-- Adds one plan (a page) to result: entries in order, a notification key
-- kept once (a later page naming it again is what the unique index drops).
local function add_plan(result, plan, event, prefs)
    result.pages = result.pages + 1
    local seen_recipient = {}
    for _, id in ipairs(result.recipients) do
        seen_recipient[id] = true
    end
    for _, e in ipairs(plan) do
        local k = testing.key(event.tenant, event.type, event.entity_id, e.recipient, e.discriminator)
        if result.by_key[k.key_hash] then
            result.duplicates = result.duplicates + 1
        else
            local entry = {
                recipient = e.recipient,
                discriminator = e.discriminator,
                key = k.key,
                key_hash = k.key_hash,
                message_id = k.message_id,
                page = result.pages,
                deliveries = {},
            }
            for i, d in ipairs(e.deliveries) do
                entry.deliveries[i] = view_delivery(d, entry, event, prefs)
            end
            result.by_key[k.key_hash] = entry
            result.entries[#result.entries + 1] = entry
            if not seen_recipient[e.recipient] then
                seen_recipient[e.recipient] = true
                result.recipients[#result.recipients + 1] = e.recipient
            end
        end
    end
    -- mode = "read": items stored once per audience instead of per recipient
    for _, item in ipairs(plan.audience_items or {}) do
        result.audience_items = result.audience_items or {}
        local content = type(item.content) == "string" and json.decode(item.content) or nil
        result.audience_items[#result.audience_items + 1] = {
            audience = item.audience,
            content = content or item.content,
            raw = item.content,
            backfill = item.backfill,
        }
    end
    result.next_cursor = plan.next_cursor
end

-- Runs one plan with opts' fakes; returns the result, or nil, err, code.
function Rules:_plan(event, opts, result)
    local queries = merged(self.queries, opts.queries)
    local prefs = opts.preferences
    if prefs == nil then
        prefs = self.preferences
    elseif type(prefs) == "table" and type(self.preferences) == "table" then
        prefs = merged(self.preferences, prefs)
    end
    local calls = result and result.queries or {}
    local gen = self.generation
    gen:set_query_backend(fake_backend(queries, calls))
    if opts.locale ~= nil then
        assert(gen:set_recipient_locale(opts.locale))
    end
    local plan, err, code = gen:plan(event)
    gen:set_query_backend(nil)
    gen:set_recipient_locale(nil)
    if not plan then
        return nil, err, code
    end
    result = result or new_result(event, calls)
    add_plan(result, plan, event, prefs)
    return result
end

local function check_plan_args(self, event, opts, api)
    if getmetatable(self) ~= Rules then
        misuse(api .. ": call it as rules:" .. api .. "(event, opts)")
    end
    local ev = as_event(event)
    if not ev then
        misuse(api .. ": event must be a table (testing.event { ... } or its fields), got " .. type(event))
    end
    opts = opts or {}
    if type(opts) ~= "table" then
        misuse(api .. ": opts must be a table { queries =, preferences =, locale = }")
    end
    for k in pairs(opts) do
        if k ~= "queries" and k ~= "preferences" and k ~= "max_pages" and k ~= "locale" then
            misuse(format("%s: unknown option '%s' (expected queries, preferences, max_pages, locale)", api,
                tostring(k)))
        end
    end
    if opts.locale ~= nil then
        local _, bad = require("crier.locale").normalize(opts.locale)
        if bad then
            misuse(api .. ": opts.locale: " .. bad)
        end
    end
    local ok, err = check_queries("opts", opts.queries)
    if ok then
        ok, err = check_preferences("opts", opts.preferences)
    end
    if not ok then
        misuse(api .. ": " .. err)
    end
    return ev, opts
end

-- rules:try_plan(event, opts): runs one event (a testing.event, or the
-- fields to build one) through the rules, as the engine's fan-out would for
-- one batch: one page of a crier.pages audience, from event.cursor. opts:
-- queries and preferences as for testing.load (these win, per query name
-- and per recipient); locale = "de-AT": render as for recipients with that
-- locale (as crier try --locale; recipients can also carry a locale field).
-- Returns the result, or nil, err, code ("unknown_event_type",
-- "invalid_payload" or "rule_error").
--
-- The result: result.recipients (distinct ids in order), result.entries (one
-- per notification: recipient, discriminator, key, key_hash, message_id,
-- deliveries), result.next_cursor (more pages to go), result.queries (each
-- query run: name, sql, params, page), result.event; result:recipient(id),
-- result:delivery(id, channel), result:deliveries([channel]),
-- result:delivered_to(channel). A delivery: channel, recipient, key,
-- message_id, target, retry (list of delays in seconds) and retry_literal,
-- honor_preferences, suppressed (and suppressed_by: the preference that
-- decided), raw (the text the engine stores), and per channel — webhook:
-- url, body (decoded JSON), secret, secrets, signed; kafka: topic, body
-- (decoded); email: to, from, subject, text (= body), html; feed: content
-- (= body, decoded). A rule in mode "read" plans no recipients:
-- result.audience_items lists { audience, content (decoded), raw, backfill }.
function Rules:try_plan(event, opts)
    local ev
    ev, opts = check_plan_args(self, event, opts, "try_plan")
    return self:_plan(ev, opts)
end

local function raise_plan_error(err, code)
    error(format("crier.testing: plan failed (%s): %s", tostring(code), tostring(err)), 3)
end

-- rules:plan(event, opts): like try_plan, but a failure raises with the
-- message and its code.
function Rules:plan(event, opts)
    local ev
    ev, opts = check_plan_args(self, event, opts, "plan")
    local result, err, code = self:_plan(ev, opts)
    if not result then
        raise_plan_error(err, code)
    end
    return result
end

-- rules:plan_all_pages(event, opts): plans the event page after page, each
-- from the previous page's next_cursor, until none is left (as successive
-- batches of the engine would), and returns one result over all pages:
-- result.pages counts them, entries carry their page number, and a
-- notification planned again on a later page is kept once (counted in
-- result.duplicates; the engine's unique index drops it). Raises on a
-- failure, when a cursor does not advance, or after opts.max_pages (default
-- 10000) pages.
function Rules:plan_all_pages(event, opts)
    local ev
    ev, opts = check_plan_args(self, event, opts, "plan_all_pages")
    local max_pages = opts.max_pages or 10000
    local result, seen_cursors = nil, {}
    ev = copy(ev)
    repeat
        local err, code
        result, err, code = self:_plan(ev, opts, result)
        if not result then
            raise_plan_error(err, code)
        end
        local cursor = result.next_cursor
        if cursor ~= nil then
            if seen_cursors[cursor] or cursor == ev.cursor then
                error(format("crier.testing: plan_all_pages: the cursor %q came back; the audience's query "
                    .. "must return rows after the cursor, ordered by it", cursor), 2)
            end
            seen_cursors[cursor] = true
            if result.pages >= max_pages then
                error(format("crier.testing: plan_all_pages: more than %d pages", max_pages), 2)
            end
        end
        ev.cursor = cursor
    until cursor == nil
    return result
end

-- rules:validate(type, payload): true, or nil, err, code, as the engine's
-- intake checks an event (payload a table or JSON text).
function Rules:validate(type_name, payload)
    if type(payload) == "table" then
        payload = assert(json.encode(payload))
        if payload == "[]" then
            payload = "{}"
        end
    end
    return self.generation:validate(type_name, payload or "{}")
end

-- rules:event_types(): the declared event type names, sorted.
function Rules:event_types()
    return self.generation:event_types()
end

-- result:recipient(id[, discriminator]): the entry for recipient id (with
-- that discriminator when given, else the first), or nil.
function Result:recipient(id, discriminator)
    for _, e in ipairs(self.entries) do
        if e.recipient == id and (discriminator == nil or e.discriminator == discriminator) then
            return e
        end
    end
    return nil
end

-- result:delivery(id, channel[, discriminator]): the delivery to recipient
-- id on channel, or nil.
function Result:delivery(id, channel, discriminator)
    local e = self:recipient(id, discriminator)
    for _, d in ipairs(e and e.deliveries or {}) do
        if d.channel == channel then
            return d
        end
    end
    return nil
end

-- result:deliveries([channel]): every delivery (of channel), in plan order.
function Result:deliveries(channel)
    local out = {}
    for _, e in ipairs(self.entries) do
        for _, d in ipairs(e.deliveries) do
            if channel == nil or d.channel == channel then
                out[#out + 1] = d
            end
        end
    end
    return out
end

-- result:delivered_to(channel): ids of the recipients who would get a
-- delivery on channel (suppressed ones left out), in order.
function Result:delivered_to(channel)
    local out, seen = {}, {}
    for _, d in ipairs(self:deliveries(channel)) do
        if not d.suppressed and not seen[d.recipient] then
            seen[d.recipient] = true
            out[#out + 1] = d.recipient
        end
    end
    return out
end

---------------------------------------------------------------------------
-- Time: a timeline with a controllable clock
--
-- rules:timeline { start = "2026-01-05T09:00:00Z" } simulates, without a
-- database, what the engine does with a delivery's timing (delay, unless,
-- cancel_on, throttle, digest; lua/crier/timing.lua) — the semantics of
-- sql/functions/apply_timing.sql, release_delivery.sql, digest_join.sql,
-- fire_delay.sql, fire_timers.sql and flush_digests.sql — on a clock that
-- moves only when the spec says so. Content is the real planner's
-- (rules:plan) and the real digest renderer's (gen:render_digest); only the
-- timing is simulated. Times are kept in whole microseconds since the Unix
-- epoch, as PostgreSQL keeps timestamptz.

local Timeline = {}
Timeline.__index = Timeline

-- What emit returns: the event as stored (its metatable tells mark_read an
-- event from a feed item or a delivery).
local Emitted = {}
Emitted.__index = Emitted

local US = 1000000 -- microseconds per second
local DEFAULT_START = "2026-01-01T00:00:00Z"
local SENDING = { webhook = true, email = true, kafka = true }
-- What emit takes (id and cursor only to refuse them with a reason).
local EMIT_FIELDS = { type = true, tenant = true, entity_id = true, payload = true, payload_json = true,
    dedupe_key = true, id = true, cursor = true }

-- Days since 1970-01-01 of a proleptic Gregorian date, and back: the
-- date filter's calendar (plain arithmetic, no os.time: local time).
local calendar = require "crier.calendar"
local days_from_civil, civil_from_days = calendar.days_from_civil, calendar.civil_from_days

local MIN_TIME, MAX_TIME = 0, days_from_civil(10000, 1, 1) * 86400 * US - 1

-- A time as microseconds: an ISO 8601 UTC string "2026-01-05T09:00:00Z"
-- (optionally with a fraction of up to 6 digits) or a number of seconds
-- since the epoch. Returns the microseconds, or nil and what is expected.
local function parse_time(v)
    local us
    if type(v) == "number" then
        if v == v and v >= 0 and v < MAX_TIME / US then
            us = floor(v * US + 0.5)
        end
    elseif type(v) == "string" then
        local y, mo, d, h, mi, s, frac = match(v, "^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)%.?(%d*)Z$")
        if y and #frac <= 6 and not (frac == "" and find(v, ".", 1, true)) then
            y, mo, d, h, mi, s = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(s)
            if mo >= 1 and mo <= 12 and d >= 1 and d <= 31 and h <= 23 and mi <= 59 and s <= 59 then
                local days = days_from_civil(y, mo, d)
                local cy, cm = civil_from_days(days)
                if cy == y and cm == mo then -- (not 2026-02-30)
                    us = ((days * 24 + h) * 60 + mi) * 60 + s
                    us = us * US + (frac ~= "" and tonumber(frac .. sub("000000", #frac + 1)) or 0)
                end
            end
        end
    end
    if not us or us < MIN_TIME or us > MAX_TIME then
        return nil, "a UTC time like \"2026-01-05T09:00:00Z\" (or seconds since the Unix epoch), from 1970 to "
            .. "9999, got " .. describe_value(v)
    end
    return us
end

-- The parts of a time: date and time of day as text, and the microseconds.
local function time_parts(us)
    local s = floor(us / US)
    local frac = us - s * US
    local days = floor(s / 86400)
    local sod = s - days * 86400
    local y, m, d = civil_from_days(days)
    return format("%04d-%02d-%02d", y, m, d),
        format("%02d:%02d:%02d", floor(sod / 3600), floor(sod / 60) % 60, sod % 60), frac
end

-- "2026-01-05T09:00:00Z", with the fraction (trailing zeros dropped) when
-- there is one: what sim:now() and the records' times show.
local function format_time(us)
    local date, tod, frac = time_parts(us)
    if frac == 0 then
        return date .. "T" .. tod .. "Z"
    end
    return date .. "T" .. tod .. "." .. gsub(format("%06d", frac), "0+$", "") .. "Z"
end

-- to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'): whole seconds
-- (a digest's window_start / window_end).
local function format_time_seconds(us)
    local date, tod = time_parts(us)
    return date .. "T" .. tod .. "Z"
end

-- to_char(..., 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'): a digest's discriminator.
local function format_time_us(us)
    local date, tod, frac = time_parts(us)
    return format("%sT%s.%06dZ", date, tod, frac)
end

-- A digest item's created_at, as crier.fire_timers writes it:
-- "2026-01-05T09:00:00.000000Z".
local format_time_json = format_time_us

-- A length of time in microseconds: seconds (a number >= 0) or a duration
-- string ("90s", "10m", "2h", "1d"). Returns it, or nil and what is expected.
local function parse_span(v)
    if type(v) == "number" then
        if v == v and v >= 0 and v <= MAX_TIME / US then
            return floor(v * US + 0.5)
        end
    elseif type(v) == "string" then
        local seconds = timing.parse_duration(v)
        if seconds then
            return seconds * US
        end
    end
    return nil, "seconds (a number >= 0) or a duration like \"90s\", \"10m\", \"2h\", \"1d\", got "
        .. describe_value(v)
end

-- crier.natural_key (sql/functions/natural_key.sql): an event's default dedupe key.
local function natural_key(event_type, entity_id)
    local function esc(s)
        return (gsub(s, "[\\:]", "\\%0"))
    end
    return esc(event_type) .. ":" .. esc(entity_id)
end

local function check_timeline(self, api)
    if getmetatable(self) ~= Timeline then
        error(format("crier.testing: %s: call it as sim:%s(...) on what rules:timeline returned", api, api), 3)
    end
end

-- Checks the (recipient, channel) filter of the listing methods; raises at
-- the spec's line.
local function check_filter(api, recipient, channel, allow_feed)
    if recipient ~= nil and type(recipient) ~= "string" then
        error(format("crier.testing: %s: recipient must be a recipient id (a string) or nil for everyone, got %s",
            api, describe_value(recipient)), 3)
    end
    if channel == "feed" and not allow_feed then
        error(format("crier.testing: %s: feed items are not sent; list them with sim:feed(recipient)", api), 3)
    end
    if channel ~= nil and not SENDING[channel] and not (allow_feed and channel == "feed") then
        error(format("crier.testing: %s: channel must be \"webhook\", \"email\", \"kafka\" or nil for every "
            .. "channel, got %s", api, describe_value(channel)), 3)
    end
end

local function check_emit_opts(opts, api)
    if opts == nil then
        return {}
    end
    if type(opts) ~= "table" then
        error(format("crier.testing: %s: opts must be a table { queries =, preferences = }, got %s", api,
            type(opts)), 3)
    end
    for k in pairs(opts) do
        if k ~= "queries" and k ~= "preferences" then
            error(format("crier.testing: %s: unknown option '%s' (expected queries, preferences)", api,
                tostring(k)), 3)
        end
    end
    local ok, err = check_queries("opts", opts.queries)
    if ok then
        ok, err = check_preferences("opts", opts.preferences)
    end
    if not ok then
        error(format("crier.testing: %s: %s", api, err), 3)
    end
    return opts
end

-- rules:timeline(opts): a simulation of the engine's time features on a
-- controllable clock. opts (optional): start (a UTC time "2026-01-05T09:00:00Z"
-- or seconds since the epoch; default 2026-01-01T00:00:00Z), queries and
-- preferences (as for rules:plan; they apply to every emit, and emit's own
-- win per query name and per recipient). Returns the timeline (sim); see
-- docs/RULES.md "Time: testing with a clock".
function Rules:timeline(opts)
    if getmetatable(self) ~= Rules then
        misuse("timeline: call it as rules:timeline { start = \"2026-01-05T09:00:00Z\" }")
    end
    if opts ~= nil and type(opts) ~= "table" then
        misuse("timeline: opts must be a table { start = \"2026-01-05T09:00:00Z\", queries =, preferences = }, got "
            .. type(opts))
    end
    opts = opts or {}
    for k in pairs(opts) do
        if k ~= "start" and k ~= "queries" and k ~= "preferences" then
            misuse(format("timeline: unknown option '%s' (expected start, queries, preferences)", tostring(k)))
        end
    end
    local start, err = parse_time(opts.start == nil and DEFAULT_START or opts.start)
    if not start then
        misuse("timeline: start must be " .. err)
    end
    local ok
    ok, err = check_queries("opts", opts.queries)
    if ok then
        ok, err = check_preferences("opts", opts.preferences)
    end
    if not ok then
        misuse("timeline: " .. err)
    end
    return setmetatable({
        rules = self,
        queries = opts.queries,
        preferences = opts.preferences,
        clock = start,
        last_id = { event = 0, delivery = 0, digest = 0, timer = 0, feed_item = 0 },
        events = {},          -- in id order
        events_by_dedupe = {}, -- tenant \0 dedupe key -> event
        notifications = {},   -- key_hash -> true: one notification per key
        delivery_list = {},   -- in id order
        messages = {},        -- deliveries sent, in the order they were
        feed_items = {},      -- in id order
        feed_by_key = {},     -- notification key_hash -> its feed item
        digest_list = {},     -- in id order
        open_digests = {},    -- window identity -> the open digest
        last_window_start = {}, -- window identity -> the latest window_start
        throttle_hits = {},   -- throttle identity -> times of the sends counted
        timers = {},          -- pending timers
        lines = {},           -- sim:log()
    }, Timeline)
end

local function next_id(self, what)
    local n = self.last_id[what] + 1
    self.last_id[what] = n
    return n
end

local function note(self, fmt, ...)
    self.lines[#self.lines + 1] = format_time(self.clock) .. "  " .. format(fmt, ...)
end

local function who(dl)
    return format("%s %s", dl.recipient, dl.channel)
end

local function add_timer(self, kind, due, target)
    local t = { id = next_id(self, "timer"), kind = kind, due = due, target = target, attempts = 0 }
    self.timers[#self.timers + 1] = t
    return t
end

-- The delivery goes out now (the engine: state pending, then sent).
local function send(self, dl)
    dl.state = "sent"
    dl.at = format_time(self.clock)
    dl.due = nil
    self.messages[#self.messages + 1] = dl
    note(self, "%s: sent%s", who(dl), dl.digest and format(" (digest %d, %d item(s))", dl.digest.id,
        dl.digest.count) or "")
end

local function suppress(self, dl, reason)
    dl.state = "suppressed"
    dl.reason = reason
    dl.at = format_time(self.clock)
    dl.due = nil
    note(self, "%s: suppressed: %s", who(dl), reason)
end

-- crier.digest_join: the window the item joins, or a new one.
local function digest_join(self, dl, spec)
    local identity = concat({ dl.tenant, dl.recipient, dl.channel, spec.key }, "\0")
    local now = self.clock
    local g = self.open_digests[identity]
    if g then
        g.count = g.count + 1
        g.items[#g.items + 1] = dl
        if spec.max_items and g.count >= spec.max_items then
            g.state = "closed"
            self.open_digests[identity] = nil
            if g.timer.due > now then
                g.timer.due = now
                g.due = format_time(now)
            end
        end
        return g
    end
    local prev = self.last_window_start[identity]
    local start, stop
    if spec.every then
        -- aligned in the recipient's local time (crier.digest_join: spec.zone), else UTC
        local zone = spec.zone
        local function offset(t)
            return zone and ((tz.at(zone, floor(t / US)) or 0) * US) or 0
        end
        local function to_utc(l)
            local u = l - offset(l)
            return l - offset(u)
        end
        local every = spec.every * US
        start = to_utc(floor((now + offset(now)) / every) * every)
        if prev and start <= prev then
            start = prev + 1
        end
        stop = to_utc((floor((start + offset(start)) / every) + 1) * every)
        if stop <= now then
            stop = now + every
        end
    else
        start = now
        if prev and start <= prev then
            start = prev + 1
        end
        stop = start + spec.window * US
    end
    local full = spec.max_items ~= nil and spec.max_items <= 1
    g = {
        id = next_id(self, "digest"),
        identity = identity,
        tenant = dl.tenant,
        recipient = dl.recipient,
        channel = dl.channel,
        key = spec.key,
        event_type = dl.type, -- the rule whose digest block renders it: the first item's
        start_us = start,
        end_us = stop,
        window_start = format_time_seconds(start),
        window_end = format_time_seconds(stop),
        max_items = spec.max_items,
        count = 1,
        items = { dl },
        state = full and "closed" or "open",
    }
    self.digest_list[#self.digest_list + 1] = g
    self.last_window_start[identity] = start
    if not full then
        self.open_digests[identity] = g
    end
    g.timer = add_timer(self, "digest", full and now or stop, g)
    g.due = format_time(g.timer.due)
    return g
end

-- crier.release_delivery: throttle, then digest, else due now. Quiet hours
-- are not simulated (the engine decides them with PostgreSQL's tz database,
-- crier.quiet_hours_end): the timeline's log says so once per delivery.
local function release(self, dl)
    local t = dl.timing
    if t.quiet and not dl.quiet_noted then
        dl.quiet_noted = true
        note(self, "%s: has quiet hours (%s); the timeline does not hold it in them (the engine does, in %s)",
            who(dl), assert(json.encode(t.quiet.hours)), t.quiet.zone or "UTC")
    end
    local throttle, digest = t.throttle, t.digest
    if throttle then
        local identity = concat({ dl.tenant, dl.recipient, dl.channel, throttle.key }, "\0")
        local hits = self.throttle_hits[identity] or {}
        local kept = {}
        for _, at in ipairs(hits) do
            if at > self.clock - throttle.per * US then
                kept[#kept + 1] = at
            end
        end
        self.throttle_hits[identity] = kept
        if #kept < throttle.limit then
            kept[#kept + 1] = self.clock
            send(self, dl)
            return "pending"
        end
        if not digest then
            suppress(self, dl, format("throttled: %d %s already sent to %s for throttle key %s in the last %s s "
                .. "(throttle = { limit = %s, per = %s s })", #kept, dl.channel, dl.recipient, throttle.key,
                json.format_number(throttle.per), json.format_number(throttle.limit),
                json.format_number(throttle.per)))
            return "throttled"
        end
    end
    if digest then
        local g = digest_join(self, dl, digest)
        dl.state = "digested"
        dl.digest_id = g.id
        dl.at = format_time(self.clock)
        dl.due = nil
        note(self, "%s: joined digest %d (key %s, %s to %s, %d item(s)%s)", who(dl), g.id, g.key, g.window_start,
            g.window_end, g.count, g.state == "closed" and ", closed: sent at once" or "")
        return "digested"
    end
    send(self, dl)
    return "pending"
end

-- crier.fire_delay: the delay is over; the conditions drop it, or it is released.
local function fire_delay(self, dl)
    if dl.state ~= "held" then
        return
    end
    local t, reason = dl.timing, nil
    if t.unless ~= nil then
        local item = self.feed_by_key[dl.key_hash]
        if item and t.unless == "read" and item.read then
            reason = "cancelled: the feed item was read within the delay (unless = \"read\")"
        elseif item and t.unless == "seen" and (item.seen or item.read) then
            reason = "cancelled: the feed item was seen within the delay (unless = \"seen\")"
        end
    end
    if reason == nil and t.cancel_on ~= nil then
        local types = {}
        for _, name in ipairs(t.cancel_on) do
            types[name] = true
        end
        for _, e in ipairs(self.events) do
            if e.id > dl.event_id and e.tenant == dl.tenant and e.entity_id == dl.entity_id and types[e.type] then
                reason = format("cancelled: event %d (%s) arrived for %s within the delay (cancel_on)", e.id, e.type,
                    dl.entity_id)
                break
            end
        end
    end
    if reason then
        suppress(self, dl, reason)
    else
        release(self, dl)
    end
end

-- A digest's items as the engine hands them over: the JSON of crier.fire_timers' input.
local function digest_input(g)
    local items = {}
    for i, dl in ipairs(g.items) do
        items[i] = format("{\"created_at\":\"%s\",\"entity_id\":\"%s\",\"id\":%d,\"payload\":%s,\"type\":\"%s\"}",
            format_time_json(dl.created_us), json.quote(dl.entity_id), dl.event_id, dl.payload_json,
            json.quote(dl.type))
    end
    local last = g.items[#g.items]
    local recipient = assert(json.encode(last.timing.digest.recipient or { id = g.recipient }))
    local head = assert(json.encode({
        tenant = g.tenant,
        event_type = g.event_type,
        channel = g.channel,
        digest = { id = g.id, key = g.key, window_start = g.window_start, window_end = g.window_end },
    }))
    return sub(head, 1, -2) .. ",\"recipient\":" .. recipient .. ",\"items\":[" .. concat(items, ",") .. "]}"
end

-- A record of one delivery, from the plan's view of it (view_delivery).
local function new_delivery(self, view, fields)
    local dl = {}
    for k, v in pairs(view) do
        dl[k] = v
    end
    for k, v in pairs(fields) do
        dl[k] = v
    end
    dl.suppressed = nil -- (the plan's preference verdict: here state and reason say it)
    dl.id = next_id(self, "delivery")
    self.delivery_list[#self.delivery_list + 1] = dl
    return dl
end

-- The digest timer fired: render its message with the rules and send it
-- (crier.fire_timers + crier.flush_digests). Returns true, or nil and the
-- error (the timer is tried again after the engine's back-off).
local function fire_digest(self, timer)
    local g = timer.target
    sort(g.items, function(a, b)
        return a.id < b.id
    end)
    local last = g.items[#g.items]
    local gen = self.rules.generation
    gen:set_query_backend(fake_backend(merged(self.rules.queries, self.queries), {}))
    local plan, err, code = gen:render_digest(digest_input(g))
    gen:set_query_backend(nil)
    if not plan then
        local wait = math.min(300, 5 * 2 ^ timer.attempts)
        timer.attempts = timer.attempts + 1
        timer.due = self.clock + wait * US
        self.timers[#self.timers + 1] = timer
        g.due = format_time(timer.due)
        note(self, "digest %d for %s %s: render failed (%s): %s", g.id, g.recipient, g.channel, tostring(code),
            tostring(err))
        return nil, format("crier.testing: the digest %d for %s on %s (key %s, %s to %s) failed to render (%s): %s\n"
            .. "(the engine keeps its items and tries again in %d s; the clock stopped at %s)", g.id, g.recipient,
            g.channel, g.key, g.window_start, g.window_end, tostring(code), tostring(err), wait,
            format_time(self.clock))
    end
    local discriminator = "digest:" .. g.channel .. ":" .. format_time_us(g.start_us)
    local k = testing.key(g.tenant, g.event_type, g.key, g.recipient, discriminator)
    g.state = "sent"
    g.sent_at = format_time(self.clock)
    g.due = nil
    if self.open_digests[g.identity] == g then
        self.open_digests[g.identity] = nil -- the next item opens the next window
    end
    if self.notifications[k.key_hash] then
        note(self, "digest %d for %s %s: its notification exists already; nothing sent", g.id, g.recipient, g.channel)
        return true
    end
    self.notifications[k.key_hash] = true
    local entry = { recipient = g.recipient, discriminator = discriminator, key = k.key, key_hash = k.key_hash,
        message_id = k.message_id }
    local view = view_delivery(plan[1].deliveries[1], entry, nil, nil)
    local items = {}
    for i, dl in ipairs(g.items) do
        items[i] = { id = dl.event_id, type = dl.type, entity_id = dl.entity_id,
            created_at = format_time(dl.created_us), delivery_id = dl.id }
    end
    local dl = new_delivery(self, view, {
        tenant = g.tenant,
        type = g.event_type,
        entity_id = g.key,
        event_id = last.event_id,
        key_hash = k.key_hash,
        digest = { id = g.id, key = g.key, count = #g.items, items = items, window_start = g.window_start,
            window_end = g.window_end },
    })
    g.message = dl
    send(self, dl)
    return true
end

-- Fires every timer due up to stop_at (microseconds), earliest first (ties in
-- creation order), moving the clock to each; then sets the clock to stop_at.
-- Returns true, or nil and the error of a digest that failed to render (the
-- clock stays at its time).
local function run_timers(self, stop_at)
    while true do
        local best, at
        for i, t in ipairs(self.timers) do
            if t.due <= stop_at and (not best or t.due < best.due or (t.due == best.due and t.id < best.id)) then
                best, at = t, i
            end
        end
        if not best then
            break
        end
        table.remove(self.timers, at)
        if best.due > self.clock then
            self.clock = best.due
        end
        if best.kind == "delay" then
            fire_delay(self, best.target)
        else
            local ok, err = fire_digest(self, best)
            if not ok then
                return nil, err
            end
        end
    end
    if stop_at > self.clock then
        self.clock = stop_at
    end
    return true
end

-- crier.apply_timing, for one batch: the deliveries with a timing, in
-- (tenant, recipient, channel, throttle key, digest key, id) order; a delay
-- holds one, the others are released.
local function apply_timing(self, timed)
    local function key_of(dl, what)
        local t = dl.timing[what]
        return t and t.key
    end
    local function before(x, y) -- nil (SQL NULL) sorts last
        if x == y then
            return nil
        elseif x == nil then
            return false
        elseif y == nil then
            return true
        end
        return x < y
    end
    sort(timed, function(a, b)
        local r = before(a.tenant, b.tenant)
        if r == nil then r = before(a.recipient, b.recipient) end
        if r == nil then r = before(a.channel, b.channel) end
        if r == nil then r = before(key_of(a, "throttle"), key_of(b, "throttle")) end
        if r == nil then r = before(key_of(a, "digest"), key_of(b, "digest")) end
        if r == nil then r = a.id < b.id end
        return r
    end)
    for _, dl in ipairs(timed) do
        if dl.timing.delay then
            local due = self.clock + dl.timing.delay * US
            dl.state = "held"
            dl.due = format_time(due)
            dl.at = format_time(self.clock)
            add_timer(self, "delay", due, dl)
            note(self, "%s: held until %s", who(dl), dl.due)
        else
            release(self, dl)
        end
    end
end

-- One batch: the new notifications of one page, written as the fan-out's
-- statement writes them (feed items, deliveries: suppressed by preference,
-- due now, or decided by their timing).
local function write_batch(self, event, entries)
    local timed = {}
    for _, entry in ipairs(entries) do
        for _, view in ipairs(entry.deliveries) do
            if view.channel == "feed" then
                if not view.suppressed then
                    local item = {
                        id = next_id(self, "feed_item"),
                        tenant = event.tenant,
                        recipient = entry.recipient,
                        key = entry.key,
                        key_hash = entry.key_hash,
                        message_id = entry.message_id,
                        event_id = event.id,
                        type = event.type,
                        entity_id = event.entity_id,
                        content = view.content,
                        read = false,
                        seen = false,
                        at = format_time(self.clock),
                    }
                    self.feed_items[#self.feed_items + 1] = item
                    self.feed_by_key[entry.key_hash] = item
                    note(self, "%s feed: item %d", entry.recipient, item.id)
                end
            else
                local dl = new_delivery(self, view, {
                    tenant = event.tenant,
                    type = event.type,
                    entity_id = event.entity_id,
                    event_id = event.id,
                    key_hash = entry.key_hash,
                    payload_json = event.payload_json,
                    created_us = self.clock,
                    timing = view.plan.timing and assert(json.decode(view.plan.timing)),
                })
                if view.suppressed then
                    local p = view.suppressed_by or {}
                    suppress(self, dl, format("suppressed by the recipient's preference (event type %s, channel %s)",
                        p.event_type or "*", p.channel or "*"))
                elseif dl.timing then
                    dl.state = "timing"
                    timed[#timed + 1] = dl
                else
                    send(self, dl)
                end
            end
        end
    end
    apply_timing(self, timed)
end

-- Checks emit's event and returns the fields for testing.event and the dedupe key.
local function emit_fields(event)
    if type(event) ~= "table" then
        return nil, "the event must be a table { type =, tenant =, entity_id =, payload =, dedupe_key = }, got "
            .. type(event)
    end
    local fields = {}
    for k, v in pairs(event) do
        if not EMIT_FIELDS[k] then
            return nil, format("unknown field '%s' (expected type, tenant, entity_id, payload, dedupe_key)",
                tostring(k))
        end
        fields[k] = v
    end
    if fields.payload_json ~= nil and fields.payload == nil and fields.id ~= nil then
        fields.id = nil -- a testing.event: the timeline numbers it
    end
    if fields.id ~= nil then
        return nil, "the timeline numbers events in emit order, as the database does: leave id out"
    end
    if fields.cursor ~= nil then
        return nil, "the timeline plans every page of an audience at once: leave cursor out"
    end
    local dedupe_key = fields.dedupe_key
    fields.dedupe_key = nil
    if dedupe_key ~= nil and (type(dedupe_key) ~= "string" or dedupe_key == "" or #dedupe_key > 500) then
        return nil, "dedupe_key must be a non-empty string of at most 500 characters (crier.emit's), got "
            .. describe_value(dedupe_key)
    end
    if fields.tenant == "" or fields.entity_id == "" then
        return nil, "tenant and entity_id must not be empty (crier.emit refuses them)"
    end
    local ok, err = pcall(testing.event, merged(fields, { id = 0 }))
    if not ok then
        return nil, (gsub(tostring(err), "^.-crier%.testing: event: ", ""))
    end
    return fields, dedupe_key
end

-- Emits one event at the clock's time. Returns the event record, or nil, err, code.
local function emit(self, fields, dedupe_key, opts)
    local ev = testing.event(merged(fields, { id = self.last_id.event + 1 }))
    local valid, err, code = self.rules.generation:validate(ev.type, ev.payload_json)
    if not valid then
        return nil, err, code -- the intake refuses it
    end
    local identity = ev.tenant .. "\0" .. (dedupe_key or natural_key(ev.type, ev.entity_id))
    local existing = self.events_by_dedupe[identity]
    if existing then
        note(self, "event %s %s: the same as event %d (dedupe key): nothing planned", ev.type, ev.entity_id,
            existing.id)
        return existing
    end
    local plan_opts = { queries = merged(self.queries, opts.queries), preferences = opts.preferences }
    if plan_opts.preferences == nil then
        plan_opts.preferences = self.preferences
    elseif type(plan_opts.preferences) == "table" and type(self.preferences) == "table" then
        plan_opts.preferences = merged(self.preferences, plan_opts.preferences)
    end
    local result, seen_cursors = nil, {}
    local page_event = copy(ev)
    repeat
        result, err, code = self.rules:_plan(page_event, plan_opts, result)
        if not result then
            return nil, err, code
        end
        local cursor = result.next_cursor
        if cursor ~= nil and (seen_cursors[cursor] or cursor == page_event.cursor) then
            return nil, format("the cursor %q came back; the audience's query must return rows after the cursor, "
                .. "ordered by it", cursor), "rule_error"
        end
        if cursor ~= nil then
            seen_cursors[cursor] = true
        end
        page_event.cursor = cursor
    until cursor == nil

    next_id(self, "event")
    local record = setmetatable({
        id = ev.id,
        tenant = ev.tenant,
        type = ev.type,
        entity_id = ev.entity_id,
        payload = json.decode(ev.payload_json),
        payload_json = ev.payload_json,
        dedupe_key = dedupe_key or natural_key(ev.type, ev.entity_id),
        at = format_time(self.clock),
        result = result,
        notifications = {},
    }, Emitted)
    self.events[#self.events + 1] = record
    self.events_by_dedupe[identity] = record
    note(self, "event %d %s %s", record.id, record.type, record.entity_id)
    local pages = {}
    for _, entry in ipairs(result.entries) do
        if self.notifications[entry.key_hash] then
            note(self, "%s: notification %s exists already: nothing new", entry.recipient, entry.key)
        else
            self.notifications[entry.key_hash] = true
            record.notifications[#record.notifications + 1] = entry
            local list = pages[entry.page]
            if not list then
                list = {}
                pages[entry.page] = list
            end
            list[#list + 1] = entry
        end
    end
    for page = 1, result.pages do
        if pages[page] then
            write_batch(self, record, pages[page])
        end
    end
    return record
end

-- sim:emit(event[, opts]): emits an event now, as crier.emit would, and
-- fans it out (every page): event is the fields of testing.event (type,
-- tenant, entity_id, payload) plus an optional dedupe_key; ids are the
-- timeline's, in emit order. opts: queries, preferences for this event.
-- Returns the event record { id, tenant, type, entity_id, payload,
-- dedupe_key, at, result (the plan), notifications (the new ones) } — the
-- same record when its (tenant, dedupe key) was emitted before (by default
-- the dedupe key is type:entity_id): the engine keeps one event and plans
-- nothing again. Timers that come due now (a full digest) fire. A plan that
-- fails raises "crier.testing: emit failed (<code>): <message>" and stores
-- nothing, as the intake refuses the event.
function Timeline:emit(event, opts)
    check_timeline(self, "emit")
    local fields, dedupe_key = emit_fields(event)
    if not fields then
        misuse("emit: " .. dedupe_key)
    end
    opts = check_emit_opts(opts, "emit")
    local record, err, code = emit(self, fields, dedupe_key, opts)
    if not record then
        error(format("crier.testing: emit failed (%s): %s", tostring(code), tostring(err)), 2)
    end
    local ok
    ok, err = run_timers(self, self.clock)
    if not ok then
        error(err, 2)
    end
    return record
end

-- sim:try_emit(event[, opts]): like emit, but a failing plan returns nil,
-- err, code ("unknown_event_type", "invalid_payload", "rule_error") instead
-- of raising.
function Timeline:try_emit(event, opts)
    check_timeline(self, "try_emit")
    local fields, dedupe_key = emit_fields(event)
    if not fields then
        misuse("try_emit: " .. dedupe_key)
    end
    opts = check_emit_opts(opts, "try_emit")
    local record, err, code = emit(self, fields, dedupe_key, opts)
    if not record then
        return nil, err, code
    end
    local ok
    ok, err = run_timers(self, self.clock)
    if not ok then
        error(err, 2)
    end
    return record
end

-- sim:advance(span): moves the clock forward by span (seconds, or "90s",
-- "10m", "2h", "1d"), firing every timer that comes due on the way at its
-- own time, earliest first. Returns the new time (as sim:now()). A digest
-- whose message fails to render raises, with the clock at that moment.
function Timeline:advance(span)
    check_timeline(self, "advance")
    local us, err = parse_span(span)
    if not us then
        misuse("advance: expected " .. err)
    end
    if self.clock + us > MAX_TIME then
        misuse("advance: that goes past the year 9999")
    end
    local ok
    ok, err = run_timers(self, self.clock + us)
    if not ok then
        error(err, 2)
    end
    return format_time(self.clock)
end

-- sim:advance_to(time): moves the clock to time (a UTC time
-- "2026-01-05T10:00:00Z" or seconds since the epoch; not before now), as
-- advance does.
function Timeline:advance_to(time)
    check_timeline(self, "advance_to")
    local us, err = parse_time(time)
    if not us then
        misuse("advance_to: expected " .. err)
    end
    if us < self.clock then
        misuse(format("advance_to: %s is before the timeline's clock (%s); the clock only goes forward",
            format_time(us), format_time(self.clock)))
    end
    local ok
    ok, err = run_timers(self, us)
    if not ok then
        error(err, 2)
    end
    return format_time(self.clock)
end

-- sim:now(): the clock, "2026-01-05T09:00:00Z".
function Timeline:now()
    check_timeline(self, "now")
    return format_time(self.clock)
end

local function select_deliveries(list, recipient, channel, state)
    local out = {}
    for _, dl in ipairs(list) do
        if (recipient == nil or dl.recipient == recipient) and (channel == nil or dl.channel == channel)
            and (state == nil or dl.state == state) then
            out[#out + 1] = dl
        end
    end
    return out
end

-- sim:sent([recipient[, channel]]): the messages that went out (to
-- recipient, on channel; nil for all), in the order they went. Each is a
-- delivery as rules:plan shows it (subject, text, html, body, url, topic,
-- key, message_id, ...) with id, event_id, tenant, type, entity_id, state
-- "sent", at (when), timing (the rule's, decoded) and, for a digest,
-- digest = { id, key, count, items = { { id, type, entity_id, created_at,
-- delivery_id } }, window_start, window_end }.
function Timeline:sent(recipient, channel)
    check_timeline(self, "sent")
    check_filter("sent", recipient, channel)
    return select_deliveries(self.messages, recipient, channel)
end

-- sim:suppressed([recipient[, channel]]): deliveries dropped, in delivery
-- order, each with reason (the engine's last_error: "throttled: ...",
-- "cancelled: ...", "suppressed by the recipient's preference ...").
function Timeline:suppressed(recipient, channel)
    check_timeline(self, "suppressed")
    check_filter("suppressed", recipient, channel)
    return select_deliveries(self.delivery_list, recipient, channel, "suppressed")
end

-- sim:held([recipient[, channel]]): deliveries whose delay runs, in
-- delivery order, each with due (when the delay ends).
function Timeline:held(recipient, channel)
    check_timeline(self, "held")
    check_filter("held", recipient, channel)
    return select_deliveries(self.delivery_list, recipient, channel, "held")
end

-- sim:deliveries([recipient[, channel]]): every delivery, in creation
-- order, with its state: "held", "sent", "suppressed" or "digested" (an
-- item in the digest digest_id); digest messages are deliveries too.
function Timeline:deliveries(recipient, channel)
    check_timeline(self, "deliveries")
    check_filter("deliveries", recipient, channel)
    return select_deliveries(self.delivery_list, recipient, channel)
end

-- sim:digests([recipient[, channel]]): the digest windows, in the order
-- they opened: { id, tenant, recipient, channel, key, event_type,
-- window_start, window_end, max_items, count, items (the item deliveries),
-- state ("open", "closed" or "sent"), due (while not sent), sent_at, message
-- (the sent delivery) }.
function Timeline:digests(recipient, channel)
    check_timeline(self, "digests")
    check_filter("digests", recipient, channel)
    return select_deliveries(self.digest_list, recipient, channel)
end

-- sim:feed(recipient): recipient's feed items, newest first (as the feed
-- API lists them): { id, tenant, recipient, key, key_hash, message_id,
-- event_id, type, entity_id, content (decoded: title, body, ...), read,
-- seen, at }.
function Timeline:feed(recipient)
    check_timeline(self, "feed")
    if type(recipient) ~= "string" then
        misuse("feed: expected a recipient id (a string), got " .. describe_value(recipient))
    end
    local out = {}
    for i = #self.feed_items, 1, -1 do
        local item = self.feed_items[i]
        if item.recipient == recipient then
            out[#out + 1] = item
        end
    end
    return out
end

-- The feed items of recipient that `what` names: an entity id (string), an
-- event record (sim:emit's), or a feed item, delivery or plan entry (by
-- its notification's key_hash). Raises at the spec's line when none.
local function items_for(self, api, recipient, what)
    if type(recipient) ~= "string" then
        error(format("crier.testing: %s: expected a recipient id (a string), got %s", api,
            describe_value(recipient)), 4)
    end
    local match_item
    if type(what) == "string" then
        match_item = function(item)
            return item.entity_id == what
        end
    elseif getmetatable(what) == Emitted then
        match_item = function(item)
            return item.event_id == what.id
        end
    elseif type(what) == "table" and type(what.key_hash) == "string" then
        match_item = function(item)
            return item.key_hash == what.key_hash
        end
    else
        error(format("crier.testing: %s: say which item: an entity id, the event sim:emit returned, or a feed "
            .. "item, delivery or plan entry; got %s", api, describe_value(what)), 4)
    end
    local out = {}
    for _, item in ipairs(self.feed_items) do
        if item.recipient == recipient and match_item(item) then
            out[#out + 1] = item
        end
    end
    if #out == 0 then
        local have = {}
        for _, item in ipairs(self.feed_items) do
            if item.recipient == recipient then
                have[#have + 1] = item.key
            end
        end
        error(format("crier.testing: %s: %s has no feed item for %s (the rule must route the feed channel, and "
            .. "the recipient's preferences allow it); %s's feed: %s", api, describe_value(recipient),
            type(what) == "string" and describe_value(what) or (what.key or ("event " .. tostring(what.id))),
            recipient, #have > 0 and show_list(have) or "empty"), 4)
    end
    return out
end

local function mark(self, api, recipient, what, field)
    local items = items_for(self, api, recipient, what)
    for _, item in ipairs(items) do
        item[field] = true
        item.seen = true
        note(self, "%s feed: item %d %s", recipient, item.id, field)
    end
    return items
end

-- sim:mark_read(recipient, what): marks recipient's feed items read (and
-- seen), as the feed API does: what is an entity id, the event sim:emit
-- returned, or a feed item / delivery (by its notification). Returns the
-- items marked; raises when there is none.
function Timeline:mark_read(recipient, what)
    check_timeline(self, "mark_read")
    local items = mark(self, "mark_read", recipient, what, "read")
    return items -- (not a tail call: the error levels count this frame)
end

-- sim:mark_seen(recipient, what): marks them seen (not read).
function Timeline:mark_seen(recipient, what)
    check_timeline(self, "mark_seen")
    local items = mark(self, "mark_seen", recipient, what, "seen")
    return items
end

local function mark_all(self, api, recipient, field)
    if type(recipient) ~= "string" then
        error(format("crier.testing: %s: expected a recipient id (a string), got %s", api,
            describe_value(recipient)), 3)
    end
    local n = 0
    for _, item in ipairs(self.feed_items) do
        if item.recipient == recipient then
            item[field] = true
            item.seen = true
            n = n + 1
        end
    end
    note(self, "%s feed: all %d item(s) %s", recipient, n, field)
    return n
end

-- sim:mark_all_read(recipient): marks every item in recipient's feed read
-- (items that arrive later are unread). Returns how many.
function Timeline:mark_all_read(recipient)
    check_timeline(self, "mark_all_read")
    local n = mark_all(self, "mark_all_read", recipient, "read")
    return n
end

-- sim:mark_all_seen(recipient): marks every item in recipient's feed seen.
function Timeline:mark_all_seen(recipient)
    check_timeline(self, "mark_all_seen")
    local n = mark_all(self, "mark_all_seen", recipient, "seen")
    return n
end

-- sim:log(): what happened so far, one line per decision ("<time>  alice
-- email: held until ..."), for failure messages.
function Timeline:log()
    check_timeline(self, "log")
    return concat(self.lines, "\n")
end

---------------------------------------------------------------------------
-- Assertions: plain functions that raise with a message saying what was
-- planned, usable from busted or anything else. Each returns what it found.

local function fail(msg)
    error(msg, 3)
end

local function summary(result)
    local lines = {}
    for _, e in ipairs(result.entries) do
        local channels = {}
        for _, d in ipairs(e.deliveries) do
            channels[#channels + 1] = d.channel .. (d.suppressed and " (suppressed)" or "")
        end
        lines[#lines + 1] = format("  %s%s: %s", e.recipient, e.discriminator and (" [" .. e.discriminator .. "]")
            or "", #channels > 0 and concat(channels, ", ") or "no channels")
    end
    if #lines == 0 then
        return "  (nobody)"
    end
    return concat(lines, "\n")
end

local function check_result(result, api)
    if getmetatable(result) ~= Result then
        error(format("crier.testing.%s: expected a result of rules:plan, got %s", api, type(result)), 3)
    end
end

-- testing.assert_recipients(result, { "alice", "bob" }): the distinct
-- recipients, in this order.
function testing.assert_recipients(result, expected)
    check_result(result, "assert_recipients")
    if type(expected) ~= "table" then
        error("crier.testing.assert_recipients: expected a list of recipient ids", 2)
    end
    local same = #expected == #result.recipients
    for i = 1, #expected do
        same = same and expected[i] == result.recipients[i]
    end
    if not same then
        fail(format("expected recipients %s, planned %s:\n%s", show_list(expected), show_list(result.recipients),
            summary(result)))
    end
    return result.recipients
end

-- testing.assert_delivered(result, id, channel): id gets a delivery on
-- channel that preferences do not suppress; returns the delivery.
function testing.assert_delivered(result, id, channel)
    check_result(result, "assert_delivered")
    local d = result:delivery(id, channel)
    if not d then
        fail(format("expected a %s delivery to %s; planned:\n%s", tostring(channel), describe_value(id),
            summary(result)))
    end
    if d.suppressed then
        fail(format("expected a %s delivery to %s, but the recipient's preference %s suppresses it",
            channel, describe_value(id), d.suppressed_by and format("(event type %s, channel %s, enabled = false)",
                d.suppressed_by.event_type or "*", d.suppressed_by.channel or "*") or ""))
    end
    return d
end

-- testing.assert_suppressed(result, id, channel): the delivery is planned
-- but the recipient's preferences suppress it; returns the delivery.
function testing.assert_suppressed(result, id, channel)
    check_result(result, "assert_suppressed")
    local d = result:delivery(id, channel)
    if not d then
        fail(format("expected a suppressed %s delivery to %s, but none is planned:\n%s", tostring(channel),
            describe_value(id), summary(result)))
    end
    if not d.suppressed then
        fail(format("expected the %s delivery to %s to be suppressed, but it is sent%s", channel,
            describe_value(id), d.honor_preferences and "" or
                " (the event type is required or the rule ignores preferences)"))
    end
    return d
end

-- testing.assert_not_planned(result, id[, channel]): nothing is planned for
-- id (on channel, when given) — not even a suppressed delivery.
function testing.assert_not_planned(result, id, channel)
    check_result(result, "assert_not_planned")
    if channel == nil and result:recipient(id) then
        fail(format("expected no notification for %s; planned:\n%s", describe_value(id), summary(result)))
    elseif channel ~= nil and result:delivery(id, channel) then
        fail(format("expected no %s delivery to %s; planned:\n%s", channel, describe_value(id), summary(result)))
    end
end

-- testing.assert_plan_error(rules, event, code[, fragment][, opts]): planning
-- fails with code ("unknown_event_type", "invalid_payload", "rule_error")
-- and, when fragment is given, a message containing it (plain text); returns
-- the message.
function testing.assert_plan_error(rules, event, code, fragment, opts)
    local result, err, got = rules:try_plan(event, opts)
    if result then
        fail(format("expected the plan to fail with %s, but it planned:\n%s", tostring(code), summary(result)))
    end
    if got ~= code then
        fail(format("expected a %s failure, got %s: %s", tostring(code), tostring(got), err))
    end
    if fragment ~= nil and not find(err, fragment, 1, true) then
        fail(format("expected the %s message to contain %q, got: %s", code, fragment, err))
    end
    return err
end

return testing
