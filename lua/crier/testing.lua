-- crier.testing: helpers for unit-testing rules with busted, without a
-- database. Load a rules directory (or files, or a source string) into a
-- generation exactly as the engine does, build events, plan them with fake
-- query rows and stored preferences, and look at the result: recipients in
-- order, each notification's key and message id, deliveries with their bodies
-- decoded (webhook and Kafka JSON) or rendered (email subject, text, html),
-- and whether a recipient's preferences would suppress a delivery. Pure Lua
-- (LuaJIT for the SHA-256 of keys and rules versions).
--
--   local testing = require "crier.testing"
--   local rules = testing.load("examples/rules", { settings = { billing_webhook_url = "https://h.test/x" } })
--   local result = rules:plan { tenant = "acme", type = "invoice.created", entity_id = "inv_1",
--                               payload = { invoice_id = "inv_1", amount_cents = 1250, currency = "EUR" } }
--   testing.assert_recipients(result, { "alice", "bob", "carol" })
--   local hook = testing.assert_delivered(result, "alice", "webhook")
--   assert.are.equal("inv_1", hook.body.invoice_id)
--
-- Misuse (bad arguments) raises error(msg, 2); a failing plan raises from
-- rules:plan and returns nil, err, code from rules:try_plan. The file and
-- directory readers refuse to run while rules load or run, so the module is
-- harmless where the rules' sandbox hands it out.

local crier = require "crier"
local json = require "crier.json"
local runtime = require "crier.runtime"
local nginx = require "crier.nginx"

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
    local plan, err, code = gen:plan(event)
    gen:set_query_backend(nil)
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
        misuse(api .. ": opts must be a table { queries =, preferences = }")
    end
    for k in pairs(opts) do
        if k ~= "queries" and k ~= "preferences" and k ~= "max_pages" then
            misuse(format("%s: unknown option '%s' (expected queries, preferences, max_pages)", api, tostring(k)))
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
-- and per recipient). Returns the result, or nil, err, code ("unknown_event_type",
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
