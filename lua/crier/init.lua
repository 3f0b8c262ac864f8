-- crier: the rule DSL that rule files use (`local crier = require "crier"`) to
-- declare event types with payload schemas, the rule that routes each type to
-- recipients and channels, and settings. Declarations are checked as they are
-- made and recorded, with their file:line, in the registry of the rules
-- generation being loaded (crier.runtime owns that registry; nothing leaks
-- between generations). Pure Lua: loads in LuaJIT, the crier daemon and nginx.

local json = require "crier.json"
local template = require "crier.template"
local locale = require "crier.locale"
local timing = require "crier.timing"
local cron = require "crier.cron"

local type, pairs, ipairs, next, tostring, tonumber, error, select, setmetatable, getmetatable =
    type, pairs, ipairs, next, tostring, tonumber, error, select, setmetatable, getmetatable
local find, format, gsub, match, sub = string.find, string.format, string.gsub, string.match, string.sub
local sort, concat = table.sort, table.concat
local getinfo = debug.getinfo

local crier = {
    _VERSION = "0.1.0",
    json = json,
    template = template,
    timing = timing,
}

-- The registry declarations go to: set by crier.runtime while it loads or
-- runs a generation, nil otherwise.
local current

-- crier._set_registry(registry): used by crier.runtime only. Makes registry
-- the target of declarations and settings (nil detaches). Returns the
-- previous registry so calls can nest.
function crier._set_registry(registry)
    local previous = current
    current = registry
    return previous
end

-- "path:line" being executed at stack level `level`, counted like error()'s
-- level: 1 is the function calling where(), 2 is its caller.
local function where(level)
    local info = getinfo(level + 1, "Sl")
    if not info then
        return "?"
    end
    local src = info.source or "?"
    if sub(src, 1, 1) == "@" then
        src = sub(src, 2)
    else
        src = info.short_src or src
    end
    return src .. ":" .. (info.currentline or 0)
end

-- crier._registry(): the registry being loaded or run (crier.runtime only).
function crier._registry()
    return current
end

-- The registry for a declaration made by user code; misuse outside a load is
-- reported at the user's call site (level 3: user -> api -> here).
local function loading_registry(api)
    if not current then
        error(api .. ": no rules are being loaded (rules are loaded by crier.runtime.new_generation)", 3)
    end
    if current.phase ~= "load" then
        error(api .. ": declarations are only allowed while rules load, not while they run", 3)
    end
    return current
end

local function problem(registry, at, msg)
    local list = registry.problems
    list[#list + 1] = at .. ": " .. msg
end

local function sorted_keys(t)
    local keys = {}
    for k in pairs(t) do
        keys[#keys + 1] = k
    end
    sort(keys, function(a, b)
        return tostring(a) < tostring(b)
    end)
    return keys
end

-- Reports keys of spec that are not in allowed (a set), in sorted order.
local function check_fields(registry, at, what, spec, allowed)
    local unknown = {}
    for _, k in ipairs(sorted_keys(spec)) do
        if not allowed[k] then
            unknown[#unknown + 1] = k
        end
    end
    if #unknown > 0 then
        local names = sorted_keys(allowed)
        for i, k in ipairs(unknown) do
            problem(registry, at, format("%s: unknown field '%s' (expected one of: %s)", what,
                tostring(k), i == 1 and concat(names, ", ") or "see above"))
        end
    end
end

local function describe_value(v)
    return type(v) == "string" and format("%q", v) or tostring(v)
end

local function is_list(v)
    return type(v) == "table" and (next(v) == nil or json.is_array(v))
end

---------------------------------------------------------------------------
-- Limits

-- crier.limits { instructions = 50000000, time = "1s", memory = "256MB" }: the
-- budget of each rule call (VM instructions, CPU time, heap growth); crier
-- serve also caps its rules' Lua state at the memory limit plus a margin. A rule that exceeds one fails that event
-- only (retried, then quarantined). Applies to the rule files loaded after it
-- and to every event; declare it once, first.
function crier.limits(spec)
    local registry = loading_registry("crier.limits")
    local limits, err = require("crier.sandbox").parse_limits(spec)
    if not limits then
        problem(registry, where(2), "crier.limits: " .. err)
        return
    end
    registry.limits = limits
end

---------------------------------------------------------------------------
-- Retry schedules

local duration_units = { s = 1, m = 60, h = 3600, d = 86400 }

-- crier.parse_retry(schedule): a schedule is a list of delays before each
-- attempt — numbers of seconds or strings like "5s", "30m", "2h", "1d" — the
-- first normally 0; its length is the number of attempts (1 to 32). Returns
-- the PostgreSQL integer array literal "{0,5,300}" the engine stores, or nil
-- and a message saying what is wrong.
function crier.parse_retry(schedule)
    if type(schedule) ~= "table" or not json.is_array(schedule) or #schedule == 0 then
        return nil, "retry must be a non-empty list of delays such as { 0, \"5s\", \"5m\", \"30m\" }"
    end
    if #schedule > 32 then
        return nil, "retry has " .. #schedule .. " attempts; the limit is 32"
    end
    local out = {}
    for i, v in ipairs(schedule) do
        local seconds
        if type(v) == "number" then
            seconds = v
        elseif type(v) == "string" and #v <= 32 then -- (the length keeps the pattern's backtracking short)
            local n, unit = match(v, "^(%d+%.?%d*)([smhd]?)$")
            if n then
                seconds = tonumber(n) * duration_units[unit ~= "" and unit or "s"]
            end
        end
        if type(seconds) ~= "number" or seconds ~= seconds or seconds < 0 or seconds > 30 * 86400 then
            return nil, format("retry[%d] must be a delay from 0 to 30 days (a number of seconds or a string "
                .. "like \"5m\"), got %s", i, type(v) == "string" and format("%q", v) or tostring(v))
        end
        out[i] = format("%d", math.floor(seconds + 0.5))
    end
    return "{" .. concat(out, ",") .. "}"
end

-- Checks a { channel = schedule } table; returns { channel = literal }.
local function parse_retry_by_channel(registry, at, what, spec)
    local literals = {}
    if type(spec) ~= "table" or json.is_array(spec) then
        problem(registry, at, what .. ": retry must be a table { webhook = { 0, \"5s\", ... }, ... }")
        return literals
    end
    for _, channel in ipairs(sorted_keys(spec)) do
        if not crier.channel_kinds[channel] then
            problem(registry, at, format("%s: retry names unknown channel %s (known: %s)", what,
                tostring(channel), concat(sorted_keys(crier.channel_kinds), ", ")))
        else
            local literal, err = crier.parse_retry(spec[channel])
            if literal then
                literals[channel] = literal
            else
                problem(registry, at, format("%s: %s.%s", what, channel, err))
            end
        end
    end
    return literals
end

-- crier.retry { webhook = { 0, "5s", "5m", ... }, email = { ... } }: the retry
-- schedule per channel for every rule of this rules directory (an event type's
-- retry and a rule's channel block override it).
function crier.retry(spec)
    local registry = loading_registry("crier.retry")
    local at = where(2)
    for channel, literal in pairs(parse_retry_by_channel(registry, at, "crier.retry", spec)) do
        registry.retry[channel] = literal
    end
end

---------------------------------------------------------------------------
-- Schedules

local schedule_fields = {
    cron = true, time_zone = true, tenants = true, event = true, entity = true, payload = true, catch_up = true,
    description = true,
}

-- crier.schedule(name) { cron = "0 8 * * *", time_zone = "Europe/Berlin",
--     tenants = { "acme" }, event = "summary.daily", entity = "daily",
--     payload = { ... }, catch_up = "each" | "latest" }
-- Declares a recurring schedule: each occurrence of cron (lua/crier/cron.lua's
-- grammar; six fields for seconds) in time_zone (default "UTC") emits, for
-- each tenant, one event of type event (declared by the rules) whose entity
-- id is entity (default: the schedule's name) followed by ":" and the
-- occurrence, with payload plus the fields schedule (the name) and
-- occurrence (the instant, RFC 3339 UTC); its dedupe key is derived
-- from the name and the occurrence, so it is emitted once whichever daemon
-- fires it. catch_up (default "each"): what a daemon that was down emits for
-- the occurrences it missed: each (at most the 100 latest) or only the
-- latest. Problems (a bad cron field, an unknown zone, a duplicate; an
-- undeclared event type or a payload its schema refuses, checked once every
-- file is loaded) are load errors at the declaration's file:line. Calling it
-- outside a load, or with a bad name, raises an error.
function crier.schedule(name)
    local registry = loading_registry("crier.schedule")
    if type(name) ~= "string" or not find(name, "^[%w_][%w_%.%-]*$") or #name > 100 then
        error("crier.schedule: name must be 1-100 letters, digits, '.', '_' or '-' like \"daily-digest\", got "
            .. (type(name) == "string" and format("%q", name) or type(name)), 2)
    end
    local at = where(2)
    return function(spec)
        if type(spec) ~= "table" then
            error(format("crier.schedule \"%s\": expected a table { cron = ..., event = ..., tenants = ... }, got %s",
                name, type(spec)), 2)
        end
        local what = "schedule '" .. name .. "'"
        local ok = true
        local function bad(msg)
            problem(registry, at, what .. ": " .. msg)
            ok = false
        end
        check_fields(registry, at, what, spec, schedule_fields)
        local parsed, err = cron.parse(spec.cron)
        if spec.cron == nil then
            bad("cron is required, like cron = \"0 8 * * *\" (minute hour day-of-month month day-of-week)")
        elseif not parsed then
            bad("cron " .. err)
        end
        local zone = spec.time_zone == nil and "UTC" or spec.time_zone
        local zone_ok, zone_err = cron.valid_zone(zone)
        if not zone_ok then
            bad(zone_err)
        end
        local tenants = {}
        if type(spec.tenants) ~= "table" or not is_list(spec.tenants) or #spec.tenants == 0 then
            bad("tenants must be a non-empty list of tenant ids, like tenants = { \"acme\" }")
        else
            for i, t in ipairs(spec.tenants) do
                if type(t) ~= "string" or t == "" or #t > 200 then
                    bad(format("tenants[%d] must be a tenant id (1-200 characters), got %s", i, describe_value(t)))
                else
                    tenants[#tenants + 1] = t
                end
            end
        end
        if type(spec.event) ~= "string" or not find(spec.event, "^[%w_][%w_%.%-]*$") then
            bad("event must be the name of a declared event type, like event = \"summary.daily\"")
        end
        local entity = spec.entity == nil and name or spec.entity
        if type(entity) ~= "string" or entity == "" or #entity > 400 then
            bad("entity must be a string of 1-400 characters (default: the schedule's name; each event's entity "
                .. "id is it followed by \":\" and the occurrence)")
        end
        local payload = spec.payload == nil and {} or spec.payload
        local payload_json
        if type(payload) ~= "table" or (next(payload) ~= nil and json.is_array(payload)) then
            bad("payload must be a table of fields (a JSON object)")
        else
            local text, jerr = json.encode(payload)
            if not text then
                bad("payload is not JSON-encodable: " .. tostring(jerr))
            elseif text == "[]" then
                payload_json = "{}"
            else
                payload_json = text
            end
        end
        local catch_up = spec.catch_up == nil and "each" or spec.catch_up
        if catch_up ~= "each" and catch_up ~= "latest" then
            bad(format("catch_up must be \"each\" (every missed occurrence, at most the 100 latest) or "
                .. "\"latest\" (only the latest), got %s", describe_value(catch_up)))
        end
        if spec.description ~= nil and type(spec.description) ~= "string" then
            bad("description must be a string")
        end
        local previous = registry.schedules[name]
        if previous then
            problem(registry, at, format("%s is declared twice (first at %s)", what, previous.where))
            return
        end
        if not ok then
            return
        end
        registry.schedules[name] = {
            name = name, where = at, cron = spec.cron, spec = parsed, time_zone = zone, tenants = tenants,
            event_type = spec.event, entity = entity, payload_json = payload_json, catch_up = catch_up,
            description = spec.description,
        }
        registry.schedule_order[#registry.schedule_order + 1] = name
    end
end

---------------------------------------------------------------------------
-- Event types

-- Payload field types a schema may name; a trailing "?" makes a field optional.
crier.payload_types = {
    string = true, number = true, integer = true, boolean = true, table = true, array = true,
}

local event_type_fields = { description = true, payload = true, retry = true, required = true, strict = true,
    urgent = true }

-- crier.event_type(name) { description = "...", payload = { field = "type" } }
-- Declares an event type in the generation being loaded. payload maps each
-- field to one of crier.payload_types, "?"-suffixed when optional; fields not
-- named are allowed, unless strict = true. Problems (bad type names,
-- duplicates) are load errors reported at the declaration's file:line.
-- Calling it outside a load, or with a name that is not a non-empty string,
-- raises an error.
function crier.event_type(name)
    local registry = loading_registry("crier.event_type")
    if type(name) ~= "string" or not find(name, "^[%w_][%w_%.%-]*$") or #name > 200 then
        error("crier.event_type: name must be 1-200 letters, digits, '.', '_' or '-' like \"invoice.created\", got "
            .. (type(name) == "string" and format("%q", name) or type(name)), 2)
    end
    local at = where(2)
    return function(spec)
        if type(spec) ~= "table" then
            error(format("crier.event_type \"%s\": expected a table { payload = {...} }, got %s",
                name, type(spec)), 2)
        end
        local what = "event type '" .. name .. "'"
        check_fields(registry, at, what, spec, event_type_fields)
        if spec.description ~= nil and type(spec.description) ~= "string" then
            problem(registry, at, what .. ": description must be a string")
        end
        local fields = {}
        if spec.payload ~= nil and type(spec.payload) ~= "table" then
            problem(registry, at, what .. ": payload must be a table of field = \"type\"")
        elseif spec.payload then
            for _, field in ipairs(sorted_keys(spec.payload)) do
                local decl = spec.payload[field]
                local base, optional
                if type(decl) == "string" then
                    base, optional = match(decl, "^(%a+)(%??)$")
                end
                if type(field) ~= "string" then
                    problem(registry, at, what .. ": payload field names must be strings, got "
                        .. type(field))
                elseif not base or not crier.payload_types[base] then
                    problem(registry, at, format("%s: payload field '%s' has type %s; expected one of "
                        .. "string, number, integer, boolean, table, array (optionally with a trailing ?)",
                        what, field, type(decl) == "string" and format("%q", decl) or type(decl)))
                else
                    fields[#fields + 1] = { name = field, type = base, optional = optional == "?" }
                end
            end
        end
        local previous = registry.event_types[name]
        if previous then
            problem(registry, at, format("%s is declared twice (first at %s)", what, previous.where))
            return
        end
        local declared, names = {}, {}
        for i, f in ipairs(fields) do
            declared[f.name], names[i] = f, f.name
        end
        registry.event_types[name] = {
            name = name,
            where = at,
            description = spec.description,
            fields = fields,
            declared = declared, -- field name -> its entry in fields
            declared_names = concat(names, ", "),
            retry = spec.retry ~= nil and parse_retry_by_channel(registry, at, what, spec.retry) or {},
            required = spec.required == true,
            urgent = spec.urgent == true, -- (sent in quiet hours too; preferences still apply)
            strict = spec.strict == true,
        }
        if spec.required ~= nil and type(spec.required) ~= "boolean" then
            problem(registry, at, what .. ": required must be true or false (true: recipients' preferences "
                .. "cannot mute it)")
        end
        if spec.urgent ~= nil and type(spec.urgent) ~= "boolean" then
            problem(registry, at, what .. ": urgent must be true or false (true: sent in the recipients' quiet "
                .. "hours too)")
        end
        if spec.strict ~= nil and type(spec.strict) ~= "boolean" then
            problem(registry, at, what .. ": strict must be true or false (true: payload fields the type does "
                .. "not declare are refused; false, the default: they are accepted)")
        end
        registry.event_type_order[#registry.event_type_order + 1] = name
    end
end

---------------------------------------------------------------------------
-- Channels

-- Default webhook (and Kafka) body when a rule gives none.
local function default_body(event, recipient)
    return {
        event_id = event.id,
        type = event.type,
        tenant = event.tenant,
        entity_id = event.entity_id,
        recipient = recipient.id,
        payload = event.payload,
    }
end

-- locale: the render's locale (crier._localized), read by templates as
-- {{ locale }} and by the locale-aware filters.
local function template_context(event, recipient, render_locale)
    return setmetatable({ recipient = recipient, event = event, locale = render_locale }, { __index = event })
end

-- A field that is a template string (compiled at load) or a function(event,
-- recipient); returns the compiled form to keep in the config.
local function check_text_field(config, field, what, report, compile, opts, required)
    local v = config[field]
    if v == nil then
        if required then
            report(what .. "." .. field .. " is required")
        end
        return nil
    end
    if type(v) == "string" then
        local fn, err = compile(v, opts, what .. "." .. field)
        if not fn then
            report(err)
        end
        return fn
    elseif type(v) ~= "function" then
        report(format("%s.%s must be a template string or a function(event, recipient), got %s", what, field,
            type(v)))
    end
    return nil
end

-- Renders a text field: its compiled template, or its function's result.
local function render_text_field(config, compiled, field, what, event, recipient, fail)
    local v = config[field]
    if v == nil then
        return nil
    end
    local out, err
    if compiled then
        out, err = compiled(template_context(event, recipient, config.render_locale))
        if not out then
            fail(err)
        end
    else
        out = v(event, recipient)
        if out ~= nil and type(out) ~= "string" then
            fail(format("%s.%s returned %s; expected a string or nil", what, field, type(out)))
        end
    end
    return out
end

-- JSON bodies (webhook, kafka): a function, a table or a JSON template string.
local function check_json_body(config, what, report, compile)
    local body = config.body
    if type(body) == "string" then
        -- A string body is a template rendered per recipient; inserted values
        -- are escaped for JSON string literals.
        local fn, err = compile(body, { json = true }, what .. ".body")
        if not fn then
            report(err)
        end
        return { body_template = fn }
    elseif type(body) == "table" then
        local text, err = json.encode(body)
        if not text then
            report(what .. ".body: " .. err)
        end
        return { body_text = text }
    elseif body ~= nil and type(body) ~= "function" then
        report(what .. ".body must be a function(event, recipient), a table or a template string, got "
            .. type(body))
    end
    return {}
end

local function render_json_body(config, what, event, recipient, fail)
    if config.body_text then
        return config.body_text
    end
    local body, err
    if config.body_template then
        body, err = config.body_template(template_context(event, recipient, config.render_locale))
        if not body then
            fail(err)
        end
    else
        body = (config.body or default_body)(event, recipient)
    end
    if type(body) == "table" then
        body, err = json.encode(body)
        if not body then
            fail(what .. ".body: " .. err)
        end
    elseif type(body) == "string" then
        local ok
        ok, err = json.decode(body)
        if ok == nil then
            fail(what .. ".body is not valid JSON: " .. err)
        end
    else
        fail(what .. ".body returned " .. type(body) .. "; expected a table or a JSON string")
    end
    return body
end

-- A channel block's own retry schedule (overrides the event type's and crier.retry's).
local function check_retry(config, what, report)
    if config.retry == nil then
        return nil
    end
    local literal, err = crier.parse_retry(config.retry)
    if not literal then
        report(what .. "." .. err)
    end
    return literal
end

-- Webhook secrets: "whsec_…", or a list of them while a secret is rotated
-- (each signs; the receiver accepts any). Returns the space-separated form.
local function secrets_text(v)
    if type(v) == "table" then
        if not json.is_array(v) then
            return nil, "must be a string or a list of strings"
        end
        for i, s in ipairs(v) do
            if type(s) ~= "string" or not find(s, "^whsec_[%w+/]+=*$") then
                return nil, format("[%d] must be a \"whsec_<base64>\" secret (a list is for rotating them)", i)
            end
        end
        return #v > 0 and concat(v, " ") or nil
    end
    if v == "" then
        return nil
    end
    if type(v) == "string" and find(v, "^whsec_") and not find(v, "^whsec_[%w+/]+=*$") then
        return nil, "the part after whsec_ must be base64"
    end
    return v
end

local email_address_pattern = "^[^%s@<>\"(),;:\\%[%]]+@[^%s@<>\"(),;:\\%[%]]+$"

-- Channel kinds a rule may route to. Each is name -> {
--   fields  = set of config keys allowed in the rule's <name> = { ... } block,
--   check   = function(config, report, compile) at load: reports problems
--             through report("<name>.<field> ..."), may compile templates with
--             compile(source, opts, name), returns extra config fields to keep,
--   deliver = function(config, event, recipient, fail) while planning:
--             returns one delivery table { channel = name, target = ..., body =
--             ..., ... } or calls fail(msg), which raises a rule error. }
crier.channel_kinds = {
    webhook = {
        fields = { url = true, secret = true, body = true, retry = true },
        check = function(config, report, compile)
            if config.url == nil then
                report("webhook.url is required")
            elseif type(config.url) == "string" then
                if not find(config.url, "^https?://[^%s]+$") then
                    report("webhook.url must start with http:// or https:// (got " .. format("%q", config.url) .. ")")
                end
            elseif type(config.url) ~= "function" then
                report("webhook.url must be a string or a function(event, recipient), got " .. type(config.url))
            end
            local secret = config.secret
            if secret ~= nil and type(secret) ~= "function" then
                local _, err = secrets_text(secret)
                if err or (type(secret) ~= "string" and type(secret) ~= "table") then
                    report("webhook.secret must be a string, a list of strings (while rotating), nil or a "
                        .. "function(event, recipient)" .. (err and (": " .. err) or ""))
                end
            end
            local extra = check_json_body(config, "webhook", report, compile)
            extra.retry_literal = check_retry(config, "webhook", report)
            return extra
        end,
        deliver = function(config, event, recipient, fail)
            local url = config.url
            if type(url) == "function" then
                url = url(event, recipient)
                if type(url) ~= "string" or not find(url, "^https?://[^%s]+$") then
                    fail("webhook.url returned " .. (type(url) == "string" and format("%q", url) or type(url))
                        .. "; expected an http:// or https:// URL")
                end
            end
            local secret = config.secret
            if type(secret) == "function" then
                secret = secret(event, recipient)
            end
            local text, err = secrets_text(secret)
            if err or (secret ~= nil and type(secret) ~= "string" and type(secret) ~= "table") then
                fail("webhook.secret returned " .. type(secret) .. (err and (" that " .. err) or "")
                    .. "; expected a string, a list of strings or nil")
            end
            local body = render_json_body(config, "webhook", event, recipient, fail)
            return { channel = "webhook", target = url, url = url, body = body, secret = text,
                     retry_literal = config.retry_literal }
        end,
    },

    email = {
        fields = { to = true, from = true, subject = true, text = true, html = true, retry = true },
        check = function(config, report, compile)
            local extra = {}
            if config.to ~= nil and type(config.to) ~= "string" and type(config.to) ~= "function" then
                report("email.to must be a template string or a function(event, recipient), got " .. type(config.to))
            end
            extra.to_template = type(config.to) == "string"
                and check_text_field(config, "to", "email", report, compile, {}) or nil
            local from = config.from
            if from ~= nil and (type(from) ~= "string" or not find(from, email_address_pattern)) then
                report("email.from must be an address like \"billing@example.com\", got "
                    .. (type(config.from) == "string" and format("%q", config.from) or type(config.from)))
            end
            extra.subject_template = check_text_field(config, "subject", "email", report, compile, {}, true)
            extra.text_template = check_text_field(config, "text", "email", report, compile, {})
            extra.html_template = check_text_field(config, "html", "email", report, compile, { html = true })
            if config.text == nil and config.html == nil then
                report("email needs a text or an html body (or both)")
            end
            extra.retry_literal = check_retry(config, "email", report)
            return extra
        end,
        deliver = function(config, event, recipient, fail)
            local to
            if config.to == nil then
                to = recipient.email
                if to == nil then
                    fail(format("recipient %q has no email and the rule's email block gives no to", recipient.id))
                end
            else
                to = render_text_field(config, config.to_template, "to", "email", event, recipient, fail)
            end
            if type(to) ~= "string" or not find(to, email_address_pattern) then
                fail(format("email.to for recipient %q is not an address: %s", recipient.id,
                    type(to) == "string" and format("%q", to) or type(to)))
            end
            local subject = render_text_field(config, config.subject_template, "subject", "email", event,
                recipient, fail)
            local text = render_text_field(config, config.text_template, "text", "email", event, recipient, fail)
            local html = render_text_field(config, config.html_template, "html", "email", event, recipient, fail)
            return { channel = "email", target = to, from = config.from, subject = subject or "",
                     body = text or "", html = html, retry_literal = config.retry_literal }
        end,
    },

    kafka = {
        fields = { topic = true, body = true, retry = true },
        check = function(config, report, compile)
            if config.topic == nil then
                report("kafka.topic is required")
            elseif type(config.topic) == "string" then
                if not find(config.topic, "^[%w%._%-]+$") or #config.topic > 249 then
                    report("kafka.topic must be 1-249 letters, digits, '.', '_' or '-' (got "
                        .. format("%q", config.topic) .. ")")
                end
            elseif type(config.topic) ~= "function" then
                report("kafka.topic must be a string or a function(event, recipient), got " .. type(config.topic))
            end
            local extra = check_json_body(config, "kafka", report, compile)
            extra.retry_literal = check_retry(config, "kafka", report)
            return extra
        end,
        deliver = function(config, event, recipient, fail)
            local topic = config.topic
            if type(topic) == "function" then
                topic = topic(event, recipient)
            end
            if type(topic) ~= "string" or not find(topic, "^[%w%._%-]+$") or #topic > 249 then
                fail("kafka.topic " .. (type(topic) == "string" and format("%q", topic) or type(topic))
                    .. " is not a topic name (1-249 letters, digits, '.', '_' or '-')")
            end
            local body = render_json_body(config, "kafka", event, recipient, fail)
            return { channel = "kafka", target = topic, body = body, retry_literal = config.retry_literal }
        end,
    },

    -- In-app feed: one item per recipient in their feed (no sending). In a
    -- rule with mode = "read", one item for the whole audience instead.
    feed = {
        fields = { title = true, body = true, data = true, url = true },
        check = function(config, report, compile)
            local extra = {}
            extra.title_template = check_text_field(config, "title", "feed", report, compile, {}, true)
            extra.body_template = check_text_field(config, "body", "feed", report, compile, {})
            extra.url_template = check_text_field(config, "url", "feed", report, compile, {})
            if config.data ~= nil and type(config.data) ~= "table" and type(config.data) ~= "function" then
                report("feed.data must be a table or a function(event, recipient), got " .. type(config.data))
            end
            return extra
        end,
        deliver = function(config, event, recipient, fail)
            local content = {
                title = render_text_field(config, config.title_template, "title", "feed", event, recipient, fail),
                body = render_text_field(config, config.body_template, "body", "feed", event, recipient, fail),
                url = render_text_field(config, config.url_template, "url", "feed", event, recipient, fail),
                type = event.type,
                entity_id = event.entity_id,
            }
            local data = config.data
            if type(data) == "function" then
                data = data(event, recipient)
            end
            if data ~= nil and type(data) ~= "table" then
                fail("feed.data returned " .. type(data) .. "; expected a table or nil")
            end
            content.data = data
            local text, err = json.encode(content)
            if not text then
                fail("feed: " .. err)
            end
            return { channel = "feed", target = recipient and recipient.id or "", body = text }
        end,
    },
}

---------------------------------------------------------------------------
-- Queries and pages

-- The backend that runs queries: set per generation by the embedder
-- (crier serve and crier try: PostgreSQL, read-only; crier.testing: a fake
-- directory). function(name, sql, params) -> rows (a list of { column =
-- value } with string values) or nil, err.
-- The metatable of objects a rule holds but may not change (queries, pages):
-- the object is empty, its fields live in `fields` (weak by object), a write
-- raises, and the metatable is protected (rules see it as a read-only view).
local function sealed_metatable(what, fields)
    local mt = {
        __index = function(object, k)
            return fields[object][k]
        end,
        __newindex = function(_, k)
            error(format("rules may not change %s (its %s): it is fixed when the rules load", what, tostring(k)), 2)
        end,
    }
    mt.__metatable = mt
    return mt
end

-- Query objects: read-only, so the SQL stays what was declared.
local query_fields = setmetatable({}, { __mode = "k" })
local query_mt = sealed_metatable("a crier.query", query_fields)
crier.query_mt = query_mt

-- crier.query(name, sql): declares a read-only, parameterised query at load
-- time; call the returned object with the parameters ($1, $2, …) while a rule
-- runs: members(event.payload.team) -> rows. The SQL text is fixed when the
-- rules load — event data reaches the database only as parameters, never as
-- SQL. The engine runs it on a read-only connection with a statement timeout.
function crier.query(name, sql)
    local registry = loading_registry("crier.query")
    local at = where(2)
    if type(name) ~= "string" or not find(name, "^[%a_][%w_%.%-]*$") then
        error("crier.query: name must be a string like \"team_members\", got " .. describe_value(name), 2)
    end
    if type(sql) ~= "string" or not find(sql, "%S") then
        error(format("crier.query \"%s\": sql must be a non-empty string", name), 2)
    end
    local n = 0
    for d in string.gmatch(sql, "%$(%d+)") do
        n = math.max(n, tonumber(d))
    end
    if registry.queries[name] then
        problem(registry, at, format("crier.query \"%s\" is declared twice (first at %s)", name,
            registry.queries[name].where))
    end
    local q = setmetatable({}, query_mt)
    query_fields[q] = { name = name, sql = sql, n_params = n, where = at }
    registry.queries[name] = q
    return q
end

-- Runs a declared query with params (a list); used by calling the query object.
-- page (crier.pages only) tells a fake backend which page is wanted.
function crier.run_query(q, params, page)
    q = query_fields[q]
    if not q then
        error("crier.run_query: not a query declared with crier.query", 2)
    end
    local registry = current
    if not registry or registry.phase ~= "run" then
        error(format("crier.query \"%s\" can only run while a rule runs, not while rules load", q.name), 3)
    end
    local backend = registry.query_backend
    if not backend then
        error(format("crier.query \"%s\": no database is available here (crier try --no-db: give fake rows "
            .. "as \"queries\" in EVENT.json)", q.name), 3)
    end
    local values = {}
    for i = 1, q.n_params do
        local v = params[i]
        local t = type(v)
        if t == "number" then
            v = json.format_number(v) or tostring(v)
        elseif t == "boolean" then
            v = v and "true" or "false"
        elseif v ~= nil and t ~= "string" then
            error(format("crier.query \"%s\": parameter $%d is a %s; pass strings, numbers, booleans or nil",
                q.name, i, t), 3)
        end
        values[i] = v
    end
    local rows, err = backend(q.name, q.sql, values, q.n_params, page)
    if not rows then
        error(format("crier.query \"%s\" failed: %s", q.name, tostring(err)), 3)
    end
    return rows
end

query_mt.__call = function(q, ...)
    return crier.run_query(q, { ... })
end

-- Pages objects are read-only like queries.
local pages_fields = setmetatable({}, { __mode = "k" })
local pages_mt = sealed_metatable("a crier.pages", pages_fields)
crier.pages_mt = pages_mt

-- crier.pages { query = q, params = function(event) return { ... } end,
--               cursor = "id", first = "", page_size = 1000 }
-- Recipients for large audiences, fetched and fanned out one page per batch
-- (flat memory, no transaction held for the whole audience, resumed after a
-- crash from the last committed page). q's SQL takes the params, then the
-- cursor ($n+1: the cursor column's value in the last row of the previous
-- page, or first) and the page size ($n+2), and must order by the cursor:
--   SELECT user_id AS id, email FROM members WHERE org = $1 AND user_id > $2
--   ORDER BY user_id LIMIT $3
function crier.pages(spec)
    local registry = loading_registry("crier.pages")
    local at = where(2)
    if type(spec) ~= "table" or not query_fields[spec.query] then
        error("crier.pages: expected { query = crier.query(...), params = function(event) ... end, "
            .. "cursor = \"id\", page_size = 1000 }", 2)
    end
    local size = spec.page_size or 1000
    if type(size) ~= "number" or size < 1 or size > 100000 or size ~= math.floor(size) then
        problem(registry, at, "crier.pages: page_size must be a whole number from 1 to 100000")
    end
    if spec.params ~= nil and type(spec.params) ~= "function" then
        problem(registry, at, "crier.pages: params must be a function(event) returning a list")
    end
    if spec.cursor ~= nil and type(spec.cursor) ~= "string" then
        problem(registry, at, "crier.pages: cursor must be the name of a column of the query")
    end
    for k in pairs(spec) do
        if k ~= "query" and k ~= "params" and k ~= "cursor" and k ~= "first" and k ~= "page_size" then
            problem(registry, at, format("crier.pages: unknown field '%s' (expected query, params, cursor, "
                .. "first, page_size)", tostring(k)))
        end
    end
    local p = setmetatable({}, pages_mt)
    pages_fields[p] = { query = spec.query, params = spec.params, cursor = spec.cursor or "id",
        first = spec.first ~= nil and tostring(spec.first) or "", page_size = size }
    return p
end

---------------------------------------------------------------------------
-- Preferences

-- crier.preference_allows(prefs, event_type, channel): whether stored
-- preferences let a notification of event_type reach a recipient on channel.
-- prefs is a list of { event_type = name|"*", channel = name|"*", enabled =
-- bool }; the most specific matching entry decides — (type, channel), then
-- (type, *), then (*, channel), then (*, *) — and none means allowed. The
-- engine applies the same rule in SQL (crier.preferences) when it writes
-- deliveries; this is for crier.testing and crier try.
function crier.preference_allows(prefs, event_type, channel)
    local deciding = crier.deciding_preference(prefs, event_type, channel)
    return deciding == nil or deciding.enabled ~= false
end

-- crier.deciding_preference(prefs, event_type, channel): the entry that
-- decides (the most specific match), or nil when none matches.
function crier.deciding_preference(prefs, event_type, channel)
    local best, best_rank
    for _, p in ipairs(prefs or {}) do
        local et, ch = p.event_type or "*", p.channel or "*"
        if (et == "*" or et == event_type) and (ch == "*" or ch == channel) then
            local rank = (et ~= "*" and 2 or 0) + (ch ~= "*" and 1 or 0)
            if not best_rank or rank > best_rank then
                best, best_rank = p, rank
            end
        end
    end
    return best
end

---------------------------------------------------------------------------
-- Filters of one's own

local function file_of(at)
    return match(at, "^(.*):%d+$") or at
end

-- crier.filter(name, fn): declares a template filter for the templates of
-- the rules declared after it in the same file; other files do not see it
-- (the built-in filters are shared and read-only). fn(value, args, locale)
-- gets the value (nil or json.null when missing), the arguments' values
-- (named ones under their names) and the render's locale tag (or nil), and
-- returns the new value, or nil and a message that fails the render; it runs
-- under the rules' limits. A built-in filter's name, or a name declared twice
-- in a file, is a load error at the declaration's line; a name that is not a
-- word or a fn that is not a function raises.
function crier.filter(name, fn)
    local registry, at = loading_registry("crier.filter"), where(2)
    if type(name) ~= "string" or not find(name, "^[%a_][%w_]*$") then
        error("crier.filter: name must be a word like \"initials\", got " .. describe_value(name), 2)
    elseif type(fn) ~= "function" then
        error(format("crier.filter \"%s\": expected a function(value, args), got %s", name, type(fn)), 2)
    end
    if template.filters[name] then
        problem(registry, at, format("crier.filter \"%s\": a built-in filter has this name; built-in filters "
            .. "cannot be replaced, choose another name", name))
        return
    end
    -- per file: { filters = the built-in ones and the file's, where = name -> file:line }
    registry.file_filters = registry.file_filters or {}
    local file = file_of(at)
    local own = registry.file_filters[file]
    if not own then
        own = { filters = {}, where = {} }
        for builtin, f in pairs(template.filters) do
            own.filters[builtin] = f
        end
        registry.file_filters[file] = own
    end
    if own.where[name] then
        problem(registry, at, format("crier.filter \"%s\" is declared twice in this file (first at %s)", name,
            own.where[name]))
        return
    end
    own.filters[name], own.where[name] = fn, at
end

-- The filters that templates of a rule declared at `at` may use: the
-- built-in ones, plus those its file declared before it (nil: the built-in
-- ones only).
local function filters_for(registry, at)
    local own = registry.file_filters and registry.file_filters[file_of(at)]
    return own and own.filters
end

---------------------------------------------------------------------------
-- Rules

-- Fields a rule may have besides one block per channel kind.
local rule_fields = {
    description = true, recipients = true, channels = true, discriminator = true, preferences = true,
    mode = true, audience = true, backfill = true, locale = true, quiet_hours = true,
}

local function allowed_rule_fields()
    local allowed = {}
    for k in pairs(rule_fields) do
        allowed[k] = true
    end
    for kind in pairs(crier.channel_kinds) do
        allowed[kind] = true
    end
    return allowed
end

local function union(a, b)
    local out = {}
    for k in pairs(a) do
        out[k] = true
    end
    for k in pairs(b) do
        out[k] = true
    end
    return out
end

local function without_fields(t, fields)
    local out = {}
    for k, v in pairs(t) do
        if not fields[k] then
            out[k] = v
        end
    end
    return out
end

-- The channel block a digest's message is rendered with: the block's own
-- fields, with those the digest table gives (subject, text, body, ...)
-- instead; its templates are named "<kind>.digest.<field>" and may read
-- digest.* (timing.digest_event).
local function digest_config(def, kind, config, report, compile)
    local merged = without_fields(config, timing.FIELDS)
    for k, v in pairs(config.digest) do
        if timing.DIGEST_CONTENT[kind][k] then
            merged[k] = v
        end
    end
    local function digest_compile(source, opts, name)
        return compile(source, opts, (gsub(name or (kind .. ".body"), "^([%w_]+)%.", "%1.digest.")))
    end
    local compiled = def.check(merged, function(msg)
        report("digest: " .. msg)
    end, digest_compile)
    for k, v in pairs(compiled or {}) do
        merged[k] = v
    end
    return merged
end

---------------------------------------------------------------------------
-- Content per locale

-- The fields a channel block's locales = { <tag> = { ... } } may translate.
local LOCALE_CONTENT = {
    email = { subject = true, text = true, html = true, digest = true },
    webhook = { body = true, digest = true },
    kafka = { body = true, digest = true },
    feed = { title = true, body = true, url = true },
}

-- Checks a block's locales table and compiles one config per declared tag:
-- the block with the fields of the tag's chain laid over it, least specific
-- first ("de-AT" gets the block's fields, then de's, then de-AT's). Returns
-- key -> compiled config (nil when there are none or problems).
local function locale_configs(def, kind, config, base, report, compile)
    local variants = config.locales
    if type(variants) ~= "table" or getmetatable(variants) ~= nil then
        report(format("%s.locales must be a table like { de = { ... }, [\"de-AT\"] = { ... } }, got %s", kind,
            type(variants)))
        return nil
    end
    local blocks, tags, ok = {}, {}, true
    local allowed = LOCALE_CONTENT[kind]
    for _, tag in ipairs(sorted_keys(variants)) do
        local block = variants[tag]
        local norm, err = locale.normalize(tag)
        local key = norm and string.lower(norm)
        if not norm then
            report(format("%s.locales: %s", kind, err))
            ok = false
        elseif blocks[key] then
            report(format("%s.locales: %q and %q are the same locale", kind, tags[key], tag))
            ok = false
        elseif type(block) ~= "table" then
            report(format("%s.locales[%q] must be a table of the fields to translate (%s), got %s", kind, tag,
                concat(sorted_keys(allowed), ", "), type(block)))
            ok = false
        else
            for _, field in ipairs(sorted_keys(block)) do
                if not allowed[field] then
                    report(format("%s.locales[%q]: unknown field '%s' (a locale translates: %s)", kind, tag,
                        tostring(field), concat(sorted_keys(allowed), ", ")))
                    ok = false
                end
            end
            if block.digest ~= nil and (type(block.digest) ~= "table" or config.digest == nil) then
                report(format("%s.locales[%q].digest: %s", kind, tag, config.digest == nil
                    and "the block has no digest to translate" or "must be a table of digest fields"))
                ok = false
            end
            blocks[key], tags[key] = block, norm
        end
    end
    if not ok then
        return nil
    end
    local out = {}
    for key, norm in pairs(tags) do
        -- chain from the language to the tag itself
        local chain = locale.chain(norm)
        local merged, origin = {}, {}
        for k, v in pairs(config) do
            if k ~= "locales" then
                merged[k] = v
            end
        end
        local digest, digest_origin = nil, {}
        if config.digest then
            digest = {}
            for k, v in pairs(config.digest) do
                digest[k] = v
            end
        end
        for i = #chain, 1, -1 do
            local block = blocks[chain[i]]
            if block then
                for k, v in pairs(block) do
                    if k == "digest" then
                        for dk, dv in pairs(v) do
                            digest[dk], digest_origin[dk] = dv, tags[chain[i]]
                        end
                    else
                        merged[k], origin[k] = v, tags[chain[i]]
                    end
                end
            end
        end
        merged.digest = digest
        -- template names say which locale block a template came from
        local function locale_compile(source, opts, name)
            name = name or (kind .. ".body")
            local k, field = match(name, "^([%w_]+)%.digest%.([%w_]+)$")
            if k and digest_origin[field] then
                name = format("%s.locales[%q].digest.%s", k, digest_origin[field], field)
            else
                k, field = match(name, "^([%w_]+)%.([%w_]+)$")
                if k and origin[field] then
                    name = format("%s.locales[%q].%s", k, origin[field], field)
                end
            end
            return compile(source, opts, name)
        end
        local compiled = def.check(merged, report, locale_compile)
        local c = {}
        for k, v in pairs(merged) do
            c[k] = v
        end
        for k, v in pairs(compiled or {}) do
            c[k] = v
        end
        c.timing, c.default_locale = base.timing, base.default_locale
        if base.digest_config then
            c.digest_config = digest_config(def, kind, merged, report, locale_compile)
        end
        out[key] = c
    end
    return out
end

local function localized_view(chosen, render_locale)
    if not render_locale then
        return chosen
    end
    return setmetatable({ render_locale = render_locale }, { __index = chosen })
end

-- crier._localized(config, recipient[, field]): the compiled channel block
-- to render for recipient (config.locales' entry for the first tag of the
-- recipient's locale chain that has one, else config itself), as a view
-- whose render_locale is the locale the templates render in: the
-- recipient's locale when a block of its chain is used (or the rule's
-- locale is in its chain), else the rule's locale (nil: none). field
-- "digest_config": the chosen block's digest instead. A recipient locale
-- that is not a tag counts as none.
function crier._localized(config, recipient, field)
    local variants, default = config.locales, config.default_locale
    if not variants and not default then
        return field and config[field] or config
    end
    local want = type(recipient) == "table" and recipient.locale or nil
    local chain = type(want) == "string" and locale.chain(want) or {}
    local chosen, render
    for _, key in ipairs(chain) do
        if variants and variants[key] then
            chosen, render = variants[key], locale.normalize(want)
            break
        end
    end
    if not chosen then
        chosen, render = config, default
        local default_key = default and string.lower(default)
        for _, key in ipairs(chain) do
            if key == default_key then
                render = locale.normalize(want)
            end
        end
    end
    if field then
        return chosen[field] and localized_view(chosen[field], render)
    end
    return localized_view(chosen, render)
end

-- crier.rule(event_type) { recipients = ..., channels = ..., webhook = {...} }
-- Declares the rule for an event type (declared in any file of the
-- generation). Fields:
--   recipients     list of ids / { id = ... } tables, or function(event) -> list
--   channels       list of channel names, or function(event, recipient) -> list
--   discriminator  optional string, or function(event, recipient) -> string|nil
--   webhook        { url = string|function, secret = string|function|nil,
--                    body = function|table|template string|nil }
--   locale         optional tag: the language of the blocks' own content
-- A channel block's locales = { [tag] = { content fields } } gives its
-- content per locale (LOCALE_CONTENT; crier._localized picks per recipient).
-- Problems (unknown fields or channels, a listed channel without its config,
-- a second rule for a type, a type that no file declares) are load errors at
-- the declaration's file:line. Calling it outside a load, or with a bad
-- event type name, raises an error.
function crier.rule(event_type)
    local registry = loading_registry("crier.rule")
    if type(event_type) ~= "string" or event_type == "" then
        error("crier.rule: expected an event type name, got "
            .. (type(event_type) == "string" and "\"\"" or type(event_type)), 2)
    end
    local at = where(2)
    return function(spec)
        if type(spec) ~= "table" then
            error(format("crier.rule \"%s\": expected a table { recipients = ..., channels = ... }, got %s",
                event_type, type(spec)), 2)
        end
        local what = "rule '" .. event_type .. "'"
        local function report(msg)
            problem(registry, at, what .. ": " .. msg)
        end
        check_fields(registry, at, what, spec, allowed_rule_fields())

        local read_mode = spec.mode == "read"
        if read_mode then
            -- fan-out on read: stored once for an audience, shown in its
            -- members' feeds; no recipients, the feed channel only
            if spec.recipients ~= nil then
                report("a rule in mode \"read\" has an audience, not recipients")
            end
            if type(spec.audience) ~= "string" and type(spec.audience) ~= "function" then
                report("audience is required in mode \"read\": a name like \"team:core\" or a function(event) "
                    .. "returning names")
            end
            if spec.channels ~= nil and not (is_list(spec.channels) and #spec.channels == 1
                and spec.channels[1] == "feed") then
                report("a rule in mode \"read\" has the feed channel only (channels = { \"feed\" } or none)")
            end
            if type(spec.feed) ~= "table" then
                report("a rule in mode \"read\" needs a feed = { title = ..., ... } block")
            end
            if spec.backfill ~= nil and type(spec.backfill) ~= "boolean" then
                report("backfill must be true or false (true: members who join later see it too)")
            end
        elseif spec.audience ~= nil or spec.backfill ~= nil then
            report("audience and backfill belong to rules in mode \"read\"")
        end

        local recipients = spec.recipients
        if read_mode then
            recipients = {}
        elseif recipients == nil then
            report("recipients is required (a list of ids or a function(event))")
        elseif type(recipients) ~= "function" and not is_list(recipients)
            and getmetatable(recipients) ~= pages_mt then
            report("recipients must be a list, a function(event) or crier.pages { ... }, got " .. type(recipients))
        end

        local channels = spec.channels
        if read_mode then
            channels = { "feed" }
        elseif channels == nil then
            report("channels is required (for example channels = { \"webhook\" })")
        elseif type(channels) == "table" then
            if not is_list(channels) then
                report("channels must be a list of channel names")
            else
                for _, name in ipairs(channels) do
                    if not crier.channel_kinds[name] then
                        report(format("unknown channel %s (known: %s)",
                            type(name) == "string" and format("'%s'", name) or type(name),
                            concat(sorted_keys(crier.channel_kinds), ", ")))
                    elseif spec[name] == nil then
                        report(format("channel '%s' is listed but has no %s = { ... } block", name, name))
                    end
                end
            end
        elseif type(channels) ~= "function" then
            report("channels must be a list or a function(event, recipient), got " .. type(channels))
        end

        local discriminator = spec.discriminator
        if discriminator ~= nil and type(discriminator) ~= "string" and type(discriminator) ~= "function" then
            report("discriminator must be a string or a function(event, recipient), got " .. type(discriminator))
        end
        if spec.description ~= nil and type(spec.description) ~= "string" then
            report("description must be a string")
        end
        if spec.preferences ~= nil and spec.preferences ~= "honor" and spec.preferences ~= "ignore" then
            report("preferences must be \"honor\" (the default) or \"ignore\" (deliver even to recipients "
                .. "who muted this), got " .. describe_value(spec.preferences))
        end
        local default_locale
        if spec.locale ~= nil then
            local err
            default_locale, err = locale.normalize(spec.locale)
            if not default_locale then
                report("locale (the language of the rule's content): " .. err)
            end
        end
        if spec.mode ~= nil and spec.mode ~= "write" and spec.mode ~= "read" then
            report("mode must be \"write\" (a notification per recipient, the default) or \"read\" (stored "
                .. "once for an audience, fanned out when read), got " .. describe_value(spec.mode))
        end

        local rule_quiet
        if spec.quiet_hours ~= nil then
            if read_mode then
                report("quiet_hours: a rule in mode \"read\" only adds feed items, which are silent")
            else
                rule_quiet = timing.check_quiet_hours(spec.quiet_hours, "quiet_hours", report)
            end
        end

        local configs, template_paths = {}, {}
        for kind, def in pairs(crier.channel_kinds) do
            local config = spec[kind]
            if config ~= nil then
                if type(config) ~= "table" then
                    report(format("%s must be a table, got %s", kind, type(config)))
                else
                    local allowed = def.fields
                    local allowed_here = allowed
                    if kind == "feed" then
                        for field in pairs(timing.FIELDS) do
                            if config[field] ~= nil then
                                report(format("feed.%s: feed items are shown at once (and make no sound); "
                                    .. "delay, unless, cancel_on, throttle, digest and quiet_hours belong to a "
                                    .. "sending channel's block (email, webhook, kafka)", field))
                            end
                        end
                        config = without_fields(config, timing.FIELDS)
                    else
                        allowed_here = union(def.fields, timing.FIELDS)
                    end
                    check_fields(registry, at, what .. ": " .. kind, config, union(allowed_here, { locales = true }))
                    local locales_spec = config.locales
                    config = without_fields(config, { locales = true })
                    local function compile(source, opts, name)
                        opts.name = name or (kind .. ".body")
                        opts.filters = filters_for(registry, at)
                        opts.paths = {}
                        local fn, err = template.compile(source, opts)
                        for _, use in ipairs(opts.paths) do
                            use.template = opts.name
                            template_paths[#template_paths + 1] = use
                        end
                        return fn, err
                    end
                    local problems_before = #registry.problems
                    local compiled = def.check(config, report, compile)
                    local c = {}
                    for k, v in pairs(config) do
                        c[k] = v
                    end
                    for k, v in pairs(compiled or {}) do
                        c[k] = v
                    end
                    if kind ~= "feed" then
                        c.timing = timing.check(config, kind, report)
                        if c.timing and c.timing.digest and #registry.problems == problems_before then
                            c.digest_config = digest_config(def, kind, config, report, compile)
                        end
                    end
                    c.default_locale = default_locale
                    if locales_spec ~= nil and #registry.problems == problems_before then
                        config.locales = locales_spec
                        c.locales = locale_configs(def, kind, config, c, report, compile)
                        config.locales = nil
                    end
                    configs[kind] = c
                end
            end
        end

        if is_list(channels) then
            local has_feed = false
            for _, name in ipairs(channels) do
                has_feed = has_feed or name == "feed"
            end
            for kind, c in pairs(configs) do
                if c.timing and c.timing.unless and not has_feed then
                    report(format("%s.unless = %q decides by the notification's feed item, but the rule does not "
                        .. "route the feed channel: add \"feed\" to channels (with a feed = { title = ... } block)",
                        kind, c.timing.unless))
                end
            end
        end

        local previous = registry.rules[event_type]
        if previous then
            report(format("a second rule for this event type (first at %s)", previous.where))
            return
        end
        registry.rules[event_type] = {
            event_type = event_type,
            where = at,
            description = spec.description,
            recipients = recipients,
            channels = channels,
            discriminator = discriminator,
            configs = configs,
            preferences = spec.preferences or "honor",
            mode = spec.mode or "write",
            audience = spec.audience,
            backfill = spec.backfill == true,
            quiet_hours = rule_quiet, -- (the default of its sending blocks; nil: none)
            template_paths = template_paths, -- checked against the event type once every file has loaded
        }
        registry.rule_order[#registry.rule_order + 1] = event_type
    end
end

---------------------------------------------------------------------------
-- Template paths against the payload schema

-- What templates see (crier.rule's template context) and what events hold.
local template_names = { payload = true, event = true, recipient = true, id = true, tenant = true, type = true,
    entity_id = true, cursor = true, locale = true }
local event_names = { payload = true, id = true, tenant = true, type = true, entity_id = true, cursor = true }
local scalar_types = { string = "a string", number = "a number", integer = "an integer", boolean = "a boolean" }

-- The problem with one path a template reads, or nil.
local function path_problem(event_type, path, in_digest)
    local first = path[1]
    local field_at
    if first == "digest" and in_digest then
        return nil
    elseif not template_names[first] then
        return format("template uses %s, but templates see only payload, event, recipient, locale, id, tenant, "
            .. "type, entity_id and cursor", concat(path, "."))
    elseif first == "payload" then
        field_at = 2
    elseif first == "event" and path[2] == "payload" then
        field_at = 3
    elseif first == "event" and path[2] and not event_names[path[2]] then
        return format("template uses %s, but events have only id, tenant, type, entity_id, payload and cursor",
            concat(path, "."))
    end
    local name = field_at and path[field_at]
    if not name then
        return nil
    end
    local field = event_type.declared[name]
    if not field then
        local declared = event_type.declared_names
        return format("template uses %s, which event type %s does not declare (%s)", concat(path, ".", 1, field_at),
            event_type.name, declared ~= "" and "declared: " .. declared or "it declares no payload fields")
    elseif path[field_at + 1] and scalar_types[field.type] then
        return format("template uses %s, but %s is %s", concat(path, "."), concat(path, ".", 1, field_at),
            scalar_types[field.type])
    end
end

-- crier._check_template_paths(registry, rule): used by crier.runtime once
-- every file has loaded (an event type may be declared in a later file).
-- Reports, at the rule's file:line, each path its templates read that can
-- never hold a value: a payload field the event type does not declare, a
-- path below a field that is not a table, a name templates do not see.
function crier._check_template_paths(registry, rule)
    local event_type = registry.event_types[rule.event_type]
    local reported = {}
    for _, use in ipairs(rule.template_paths or {}) do
        local msg = path_problem(event_type, use.path, find(use.template, "%.digest%.") ~= nil)
        if msg and not reported[use.template .. msg] then
            reported[use.template .. msg] = true
            problem(registry, rule.where, format("rule '%s': %s:%d: %s (column %d)", rule.event_type, use.template,
                use.line, msg, use.column))
        end
    end
end

-- crier._check_cancel_on(registry, rule): used by crier.runtime once every
-- file has loaded. A cancel_on naming a type no file declares would never
-- cancel anything (a typo, most likely): reported at the rule's file:line.
function crier._check_cancel_on(registry, rule)
    for _, kind in ipairs(sorted_keys(rule.configs)) do
        local t = rule.configs[kind].timing
        for _, name in ipairs(t and t.cancel_on or {}) do
            if type(name) == "string" and not registry.event_types[name] then
                problem(registry, rule.where, format("rule '%s': %s.cancel_on names event type '%s', which no rule "
                    .. "file declares: declare it with crier.event_type \"%s\" { ... } (no rule needed) or fix "
                    .. "the name", rule.event_type, kind, name, name))
            end
        end
    end
end

---------------------------------------------------------------------------
-- Settings

-- The environment variable that sets a setting: CRIER_SET_ + the name as
-- written (the CLI reads CRIER_SET_<name>=value).
local function setting_env_name(name)
    return "CRIER_SET_" .. name
end

-- crier.setting(name[, default]): the value of setting name (a string from
-- `--set name=value` or the environment), else default. With no default
-- argument at all, a missing setting is an error at the caller's file:line
-- saying how to set it; an explicit nil default makes the setting optional.
-- Usable while rules load and while they run.
function crier.setting(name, ...)
    if type(name) ~= "string" or name == "" then
        error("crier.setting: name must be a non-empty string, got " .. type(name), 2)
    end
    if not current then
        error("crier.setting: no rules are being loaded or run", 2)
    end
    local value = current.settings[name]
    if value ~= nil then
        return value
    end
    if select("#", ...) > 0 then
        return (...)
    end
    error(format("setting '%s' is not set: pass --set %s=VALUE or set %s=VALUE", name, name,
        setting_env_name(name)), 2)
end


return crier
