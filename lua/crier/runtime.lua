-- crier.runtime: what the C core (src/rules/rules.c) and test harnesses call. It
-- loads a set of rule files into a new generation (declarations collected in
-- the generation's own registry, every problem reported as "path:line:
-- message"), and runs events through that generation: payload decoding and
-- schema validation, then the rule, producing a fan-out plan of recipients and
-- deliveries. Pure Lua.

local crier = require "crier"
local json = require "crier.json"
local sandbox = require "crier.sandbox"
local timing = require "crier.timing"
local tz = require "crier.tz"

local type, pairs, ipairs, next, tostring, tonumber, error, load, xpcall, setmetatable, getmetatable =
    type, pairs, ipairs, next, tostring, tonumber, error, load, xpcall, setmetatable, getmetatable
local find, format, gsub, sub, match = string.find, string.format, string.gsub, string.sub, string.match
local concat, sort = table.concat, table.sort
local floor, huge = math.floor, math.huge
local unpack = unpack
local traceback = debug.traceback

local null, array_mt = json.null, json.array_mt

local runtime = {}

local Generation = {}
Generation.__index = Generation

local check_schedules -- (below, beside payload validation)

---------------------------------------------------------------------------
-- Loading

-- Lua shortens long chunk names in messages to "...tail"; put the full path back.
local function restore_path(msg, files)
    local tail = match(msg, "^%.%.%.([^\n]-):%d+:")
    if tail then
        for _, f in ipairs(files) do
            if sub(f.path, -#tail) == tail then
                return f.path .. sub(msg, 4 + #tail)
            end
        end
    end
    return msg
end

-- One problem line: the message (with its location, or path: prepended when
-- it has none), newlines folded so each problem stays on one line.
local function problem_line(msg, path, files)
    msg = restore_path(tostring(msg), files)
    if not find(msg, "^[^\n]-:%d+: ") then
        msg = path .. ": " .. msg
    end
    return (gsub(msg, "%s+", function(space) -- (not "%s*\n%s*": quadratic on long runs of spaces)
        return find(space, "\n", 1, true) and " " or nil
    end))
end

local function message_only(err)
    if type(err) == "string" then
        return err
    end
    local mt = getmetatable(err)
    if mt and mt.__tostring then
        return tostring(err)
    end
    return "(error object is a " .. type(err) .. " value)"
end

-- Orders problem lines by file (in load order), then line, then as reported;
-- a line reported twice is kept once.
local function sort_problems(problems, files)
    local file_rank = {}
    for i, f in ipairs(files) do
        file_rank[f.path] = i
    end
    local keyed = {}
    for i, line in ipairs(problems) do
        local path, n = match(line, "^(.-):(%d+): ")
        keyed[i] = { line = line, file = file_rank[path] or #files + 1, n = tonumber(n) or 0, i = i }
    end
    sort(keyed, function(a, b)
        if a.file ~= b.file then
            return a.file < b.file
        elseif a.n ~= b.n then
            return a.n < b.n
        end
        return a.i < b.i
    end)
    local out, seen = {}, {}
    for _, k in ipairs(keyed) do
        if not seen[k.line] then -- (a write to a read-only table is recorded, then raised)
            seen[k.line] = true
            out[#out + 1] = k.line
        end
    end
    return out
end

-- Rule files are text (no bytecode), run in the generation's sandbox
-- environment under the limits declared so far (crier.limits).
local function load_files(registry, files)
    for _, f in ipairs(files) do
        local chunk, err = load(f.source, "@" .. f.path, "t", registry.env)
        if not chunk then
            registry.problems[#registry.problems + 1] = problem_line(err, f.path, files)
        else
            sandbox.protect(chunk)
            local ok, run_err = sandbox.run(registry.limits, chunk, message_only)
            if not ok then
                registry.problems[#registry.problems + 1] = problem_line(run_err, f.path, files)
            end
        end
    end
end

-- runtime.new_generation(files, settings): loads rule files into a new
-- generation. files is an array of { path = "<full path>", source = "<text>" }
-- run in order; settings maps setting names to string values (may be nil).
-- Returns the generation, or nil and one "path:line: message" line per
-- problem (syntax errors, errors raised by a file, bad declarations, rules for
-- undeclared event types, missing settings). Malformed arguments raise.
-- Event types the engine itself emits; rules may route them like any other
-- (crier.rule "crier.endpoint.disabled" { ... }) without declaring them.
local function declare_builtin_event_types()
    crier.event_type "crier.endpoint.disabled" {
        description = "a webhook endpoint failed for longer than the disable horizon and was disabled",
        payload = {
            endpoint_id = "integer", channel = "string", target = "string", failing_since = "string",
            consecutive_failures = "integer", last_status = "integer?", last_error = "string?",
        },
    }
end

function runtime.new_generation(files, settings)
    if type(files) ~= "table" then
        error("runtime.new_generation: files must be an array of { path =, source = }", 2)
    end
    for i, f in ipairs(files) do
        if type(f) ~= "table" or type(f.path) ~= "string" or type(f.source) ~= "string" then
            error(format("runtime.new_generation: files[%d] must be { path = string, source = string }", i), 2)
        end
    end
    local copied = {}
    if settings ~= nil then
        if type(settings) ~= "table" then
            error("runtime.new_generation: settings must be a table of name = string", 2)
        end
        for k, v in pairs(settings) do
            if type(k) ~= "string" or type(v) ~= "string" then
                error("runtime.new_generation: settings must map names to strings", 2)
            end
            copied[k] = v
        end
    end

    local registry = {
        phase = "load",
        settings = copied,
        event_types = {},
        event_type_order = {},
        rules = {},
        rule_order = {},
        problems = {},
        schedules = {},
        schedule_order = {},
        retry = {},
        queries = {},
        limits = sandbox.parse_limits({}), -- a copy per generation
        env = sandbox.env(),
    }
    local previous = crier._set_registry(registry)
    local ok, err = xpcall(declare_builtin_event_types, traceback)
    for _, et in pairs(registry.event_types) do
        et.builtin = true
    end
    registry.event_type_order = {}
    if ok then
        ok, err = xpcall(load_files, traceback, registry, files)
    end
    crier._set_registry(previous)
    if not ok then
        error(err, 0)
    end

    for _, name in ipairs(registry.rule_order) do
        local rule = registry.rules[name]
        if not registry.event_types[name] then
            registry.problems[#registry.problems + 1] = format(
                "%s: rule for undeclared event type '%s' (declare it with crier.event_type \"%s\" { ... })",
                rule.where, name, name)
        else
            crier._check_template_paths(registry, rule)
            crier._check_cancel_on(registry, rule)
        end
    end
    check_schedules(registry)
    if #registry.problems > 0 then
        return nil, concat(sort_problems(registry.problems, files), "\n")
    end

    registry.phase = "run"
    return setmetatable({ registry = registry }, Generation)
end

---------------------------------------------------------------------------
-- Payload validation

local articles = {
    string = "a string", number = "a number", integer = "an integer",
    boolean = "a boolean", table = "a table", array = "an array",
}

local function is_json_array(v)
    return getmetatable(v) == array_mt or v == json.empty_array
end

-- The JSON kind of a decoded value, for messages.
local function kind_of(v)
    if v == null then
        return "null"
    elseif type(v) == "table" then
        return is_json_array(v) and "array" or "object"
    end
    return type(v)
end

-- The largest integer a double holds exactly, with all below it (2^53 - 1):
-- integer fields beyond it would be silently rounded, so they are refused.
local MAX_EXACT = 2 ^ 53 - 1

local field_checks = {
    string = function(v) return type(v) == "string" end,
    number = function(v) return type(v) == "number" end,
    integer = function(v)
        return type(v) == "number" and v == floor(v) and v ~= huge and v ~= -huge
    end,
    boolean = function(v) return type(v) == "boolean" end,
    table = function(v) return type(v) == "table" and v ~= null end,
    array = is_json_array,
}

-- Decodes payload_json and checks it against the event type's schema.
-- Returns the payload table, or nil and a message naming the type and field.
local function check_payload(event_type, payload_json)
    local name = event_type.name
    if type(payload_json) ~= "string" then
        return nil, name .. ": payload must be JSON text, got " .. type(payload_json)
    end
    local payload, err = json.decode(payload_json)
    if payload == nil then
        return nil, name .. ": payload is not valid JSON: " .. gsub(err, "^json%.decode: ", "")
    end
    if type(payload) ~= "table" or payload == null or is_json_array(payload) then
        return nil, name .. ": payload must be a JSON object, got " .. kind_of(payload)
    end
    local problems
    for _, field in ipairs(event_type.fields) do
        local v = payload[field.name]
        local msg
        if v == nil or v == null then
            if not field.optional then
                msg = format("payload field '%s' is required (%s)", field.name, articles[field.type])
            end
        elseif field.type == "integer" and type(v) == "number" and (v > MAX_EXACT or v < -MAX_EXACT) then
            msg = format("payload field '%s' is outside the integers a rule can hold exactly (-9007199254740991 "
                .. "to 9007199254740991, that is ±(2^53-1)); send larger values as strings", field.name)
        elseif not field_checks[field.type](v) then
            msg = format("payload field '%s' must be %s, got %s", field.name, articles[field.type], kind_of(v))
        end
        if msg then
            problems = problems or {}
            problems[#problems + 1] = msg
        end
    end
    if event_type.strict then
        local undeclared = {}
        for k in pairs(payload) do
            if not event_type.declared[k] then
                undeclared[#undeclared + 1] = k
            end
        end
        sort(undeclared)
        for _, k in ipairs(undeclared) do
            problems = problems or {}
            problems[#problems + 1] = format("payload field '%s' is not declared (strict = true; declared: %s)", k,
                event_type.declared_names)
        end
    end
    if problems then
        return nil, name .. ": " .. concat(problems, "; ")
    end
    return payload
end

-- Each schedule's event type must be declared and accept the schedule's
-- payload with the fields every occurrence adds (schedule, occurrence).
function check_schedules(registry)
    for _, name in ipairs(registry.schedule_order) do
        local sc = registry.schedules[name]
        local et = registry.event_types[sc.event_type]
        if not et or et.builtin then
            registry.problems[#registry.problems + 1] = format(
                "%s: schedule '%s': event type '%s' is not declared (declare it with crier.event_type \"%s\" "
                .. "{ ... })", sc.where, name, sc.event_type, sc.event_type)
        else
            local payload = json.decode(sc.payload_json)
            payload.schedule, payload.occurrence = name, "2026-01-01T00:00:00Z"
            local ok, err = check_payload(et, json.encode(payload))
            if not ok then
                registry.problems[#registry.problems + 1] = format(
                    "%s: schedule '%s': its events would be refused: %s (each occurrence's payload is the "
                    .. "schedule's payload plus schedule and occurrence, strings)", sc.where, name, err)
            end
        end
    end
end

-- gen:schedules(): the schedules the rules declare, in declaration order:
-- { { name, where, cron, time_zone, tenants, event_type, entity,
-- payload_json, catch_up, description } } (copies).
function Generation:schedules()
    local out = {}
    for i, name in ipairs(self.registry.schedule_order) do
        local sc = self.registry.schedules[name]
        local tenants = {}
        for j, t in ipairs(sc.tenants) do
            tenants[j] = t
        end
        out[i] = { name = name, where = sc.where, cron = sc.cron, time_zone = sc.time_zone, tenants = tenants,
            event_type = sc.event_type, entity = sc.entity, payload_json = sc.payload_json,
            catch_up = sc.catch_up, description = sc.description }
    end
    return out
end

-- gen:describe_schedules(now): the schedules as text for crier check, one
-- line each: name, file:line, cron, zone, tenants, event type, catch-up and
-- the next occurrence after now (Unix seconds), in UTC, computed on the
-- schedule's wall clock with the system's tz database (crier.cron.next_in_zone).
-- "" when there are none.
function Generation:describe_schedules(now)
    local cron = require "crier.cron"
    local lines = {}
    for _, sc in ipairs(self:schedules()) do
        local t, err = cron.next_in_zone(assert(cron.parse(sc.cron)), sc.time_zone, floor(tonumber(now) or 0))
        local nxt = t and cron.format_utc(t) or err or "none within 8 years"
        lines[#lines + 1] = format("schedule %s (%s): %q in %s for %s -> %s, catch_up %s; next: %s", sc.name,
            sc.where, sc.cron, sc.time_zone, concat(sc.tenants, ", "), sc.event_type, sc.catch_up, nxt)
    end
    return #lines > 0 and concat(lines, "\n") .. "\n" or ""
end

-- gen:schedules_json(): the schedules as the JSON array crier.fire_schedules
-- takes ([] when there are none): { name, cron, time_zone, tenants,
-- event_type, entity, payload, catch_up } each.
function Generation:schedules_json()
    local parts = {}
    for i, sc in ipairs(self:schedules()) do
        parts[i] = format('{"name":%s,"cron":%s,"time_zone":%s,"tenants":%s,"event_type":%s,"entity":%s,'
            .. '"payload":%s,"catch_up":%s}', json.encode(sc.name), json.encode(sc.cron), json.encode(sc.time_zone),
            json.encode(setmetatable(sc.tenants, array_mt)), json.encode(sc.event_type), json.encode(sc.entity),
            sc.payload_json, json.encode(sc.catch_up))
    end
    return "[" .. concat(parts, ",") .. "]"
end

---------------------------------------------------------------------------
-- Planning

-- runtime.PLAN_FIELDS: the shape of the plan gen:plan returns, which the C
-- core reads (src/rules/rules.c, append_plan) and nothing else may change
-- silently. One table per level: the plan itself (its array part holds the
-- entries), an entry (one notification), a delivery (one channel of an
-- entry), an audience item (mode "read"). A field's kind is "string",
-- "boolean" or "list", with "?" when it may be nil. rules.c reads exactly
-- these fields, through constants named PLAN_<LEVEL>_<FIELD> (the plan's own
-- without a level); tests/lua/plan_fields_spec.lua checks rules.c and this
-- planner against this table. Other fields (a webhook's url, say) are for
-- Lua callers such as crier.testing.
runtime.PLAN_FIELDS = {
    plan = { next_cursor = "string?", audience_items = "list?" },
    entry = { recipient = "string", discriminator = "string?", deliveries = "list" },
    delivery = {
        channel = "string", target = "string", body = "string", secret = "string?", subject = "string?",
        html = "string?", from = "string?", retry_literal = "string?", honor_preferences = "boolean?",
        timing = "string?",
    },
    audience_item = { audience = "string", content = "string", backfill = "boolean?" },
}

-- Errors raised by the planner itself (bad values returned by rule code)
-- carry this metatable; they need no traceback.
local rule_failure_mt = {}

local check_recipient_time

local function rule_fail(rule, msg)
    error(setmetatable({ message = format("rule '%s' (%s): %s", rule.event_type, rule.where, msg) },
        rule_failure_mt), 0)
end

-- The fail(msg) a channel's deliver gets for a rule: one closure per rule,
-- made on first use (a closure made per recipient cost an allocation each,
-- and LuaJIT cannot compile a trace through the making of one, nor through
-- the closing of its upvalue: make_failer holds both, out of the hot path).
local failers = setmetatable({}, { __mode = "k" })

local function make_failer(rule)
    local fail = function(msg)
        rule_fail(rule, msg)
    end
    failers[rule] = fail
    return fail
end

local function failer_for(rule)
    return failers[rule] or make_failer(rule)
end

local function on_rule_error(err)
    if getmetatable(err) == rule_failure_mt then
        return err
    end
    if sandbox.is_limit_error(err) then
        if err.slow then
            return { message = err.message, slow = true }
        end
        return { message = traceback(message_only(err), 2), raw = true, limit = true }
    end
    return { message = traceback(message_only(err), 2), raw = true }
end

local function describe(v)
    if type(v) == "string" then
        return format("%q", v)
    end
    return type(v)
end

-- A recipient's time_zone (an IANA name of the system's tz database, crier.tz)
-- and quiet_hours (as a rule writes them) are checked: a bad one fails the
-- event, naming the recipient (retried, then quarantined like any rule error).
function check_recipient_time(rule, r)
    local zone = r.time_zone
    if zone ~= nil and zone ~= null then
        local ok, err = tz.check(zone)
        if not ok then
            rule_fail(rule, format("recipient %q has time_zone %s: %s", r.id, describe(zone), err))
        end
    end
    local quiet = r.quiet_hours
    if quiet ~= nil and quiet ~= null then
        local problems = {}
        r.quiet_hours = timing.check_quiet_hours(quiet, "quiet_hours", function(msg)
            problems[#problems + 1] = msg
        end)
        if #problems > 0 then
            rule_fail(rule, format("recipient %q has bad %s", r.id, concat(problems, "; ")))
        end
    end
end

-- The recipient table handed to rule functions: { id = "<string>", ... }.
local function normalize_recipient(rule, entry, i)
    local t = type(entry)
    if t == "string" then
        if entry == "" then
            rule_fail(rule, format("recipient #%d is an empty string", i))
        end
        return { id = entry }
    elseif t == "number" then
        local id = json.format_number(entry)
        if not id then
            rule_fail(rule, format("recipient #%d is the number %s", i, tostring(entry)))
        end
        return { id = id }
    elseif t == "table" and entry ~= null then
        local id = entry.id
        if type(id) == "number" then
            id = json.format_number(id)
        end
        if type(id) ~= "string" or id == "" then
            rule_fail(rule, format("recipient #%d has id %s; expected a non-empty string or a number",
                i, describe(entry.id)))
        end
        local r = {}
        for k, v in pairs(entry) do
            r[k] = v
        end
        r.id = id
        check_recipient_time(rule, r)
        return r
    end
    rule_fail(rule, format("recipient #%d must be an id (string or number) or a table with an id, got %s",
        i, t))
end

local function is_list(v)
    if type(v) ~= "table" or v == null then
        return false
    end
    return next(v) == nil or json.is_array(v)
end

local function discriminator_for(rule, event, recipient)
    local d = rule.discriminator
    if type(d) == "function" then
        d = d(event, recipient)
    end
    if type(d) == "number" then
        d = json.format_number(d)
    end
    if d == nil or d == "" then
        return nil
    end
    if type(d) ~= "string" then
        rule_fail(rule, "discriminator returned " .. type(d) .. "; expected a string, a number or nil")
    end
    return d
end

local function deliveries_for(rule, event, recipient)
    local channels = rule.channels
    if type(channels) == "function" then
        channels = channels(event, recipient)
        if channels == nil then
            channels = {}
        elseif not is_list(channels) then
            rule_fail(rule, format("channels returned %s for recipient %q; expected a list of channel names",
                type(channels), recipient.id))
        end
    end
    local fail = failer_for(rule)
    local deliveries, seen = {}, {}
    for _, name in ipairs(channels) do
        local kind = crier.channel_kinds[name]
        if not kind then
            local known = {}
            for k in pairs(crier.channel_kinds) do
                known[#known + 1] = k
            end
            sort(known)
            rule_fail(rule, format("channels returned unknown channel %s for recipient %q (known: %s)", describe(name),
                recipient.id, concat(known, ", ")))
        end
        local config = rule.configs[name]
        if not config then
            rule_fail(rule, format("channel '%s' has no %s = { ... } block", name, name))
        end
        if not seen[name] then
            seen[name] = true
            -- the block's content in the recipient's locale (crier._localized)
            local d = kind.deliver(crier._localized(config, recipient), event, recipient, fail)
            local registry = crier._registry()
            local et = registry.event_types[event.type]
            -- retry: the channel block's, else the event type's, else crier.retry's
            if d.retry_literal == nil then
                d.retry_literal = (et and et.retry[name]) or registry.retry[name]
            end
            -- stored preferences apply unless the type is required or the rule
            -- says preferences = "ignore"
            d.honor_preferences = not ((et and et.required) or rule.preferences == "ignore")
            -- when and how many: delay, quiet hours, throttle, digest (crier.timing); required and
            -- urgent types are sent in quiet hours too, and feed items are silent
            d.timing = timing.spec_for(config.timing, name, event, recipient, fail,
                timing.quiet_for(recipient, config.timing, rule.quiet_hours,
                    name == "feed" or (et and (et.required or et.urgent))))
            deliveries[#deliveries + 1] = d
        end
    end
    return deliveries
end

local no_discriminator = {}

-- One page of a paged audience: its rows, and the cursor of the next page
-- (nil when this page was the last).
local function next_page(rule, pages, event)
    local params = {}
    if pages.params then
        params = pages.params(event)
        if type(params) ~= "table" then
            rule_fail(rule, "pages.params returned " .. type(params) .. "; expected a list")
        end
    end
    local q = pages.query
    local n = q.n_params - 2
    local values = {}
    for i = 1, n do
        values[i] = params[i]
    end
    values[n + 1] = event.cursor or pages.first
    values[n + 2] = pages.page_size
    local rows = crier.run_query(q, values,
        { cursor = pages.cursor, after = values[n + 1], limit = pages.page_size })
    local next_cursor
    if #rows >= pages.page_size then
        next_cursor = rows[#rows][pages.cursor]
        if next_cursor == nil then
            rule_fail(rule, format("pages: the query's rows have no column %q to continue from", pages.cursor))
        end
        next_cursor = tostring(next_cursor)
    end
    return rows, next_cursor
end

-- mode = "read": one feed item per audience, no per-recipient plan.
local function run_read_rule(rule, event)
    local audiences = rule.audience
    if type(audiences) == "function" then
        audiences = audiences(event)
    end
    if type(audiences) == "string" then
        audiences = { audiences }
    end
    if type(audiences) ~= "table" then
        rule_fail(rule, "audience returned " .. type(audiences) .. "; expected a name or a list of names")
    end
    local fail = function(msg)
        rule_fail(rule, msg)
    end
    local item = crier.channel_kinds.feed.deliver(crier._localized(rule.configs.feed, nil), event, nil, fail)
    local out, seen = {}, {}
    for i, name in ipairs(audiences) do
        if type(name) ~= "string" or name == "" then
            rule_fail(rule, format("audience #%d is %s; expected a non-empty string", i, describe(name)))
        end
        if not seen[name] then
            seen[name] = true
            out[#out + 1] = { audience = name, content = item.body, backfill = rule.backfill }
        end
    end
    return { audience_items = out }
end

-- The rule's recipients for an event: the list (as the rule gives it) and
-- the cursor of the next page, if any.
local function recipients_of(rule, event)
    local list = rule.recipients
    local next_cursor
    if getmetatable(list) == crier.pages_mt then
        list, next_cursor = next_page(rule, list, event)
    elseif type(list) == "function" then
        list = list(event)
        if list == nil then
            list = {}
        end
    end
    return list, next_cursor
end

-- A person's stored settings (crier.recipient_settings, loaded for the
-- batch: gen:set_batch_settings) fill the recipient's time_zone, locale and
-- quiet_hours: the person's choice wins over what the rules gave. A stored
-- zone the system's tz database does not know is left out.
local function apply_settings(recipient, stored)
    if stored.time_zone and tz.check(stored.time_zone) then
        recipient.time_zone = stored.time_zone
    end
    if stored.locale then
        recipient.locale = stored.locale
    end
    if stored.quiet_hours then
        recipient.quiet_hours = stored.quiet_hours
    end
end

local function batch_key(event)
    return format("%s|%s", tostring(event.id), event.cursor or "")
end

local function run_rule(rule, event, batch)
    if rule.mode == "read" then
        return run_read_rule(rule, event)
    end
    local list, next_cursor
    local cached = batch and batch.lists[batch_key(event)]
    if cached then
        list, next_cursor = cached.list, cached.next_cursor
    else
        list, next_cursor = recipients_of(rule, event)
    end
    if not is_list(list) then
        rule_fail(rule, "recipients returned " .. type(list) .. "; expected a list")
    end
    local settings = batch and batch.settings
    local plan, index = {}, {}
    for i = 1, #list do
        local recipient = normalize_recipient(rule, list[i], i)
        local stored = settings and settings[event.tenant .. "\0" .. recipient.id]
        if stored then
            apply_settings(recipient, stored)
        end
        local forced_locale = crier._registry().recipient_locale
        if forced_locale then
            recipient.locale = forced_locale -- gen:set_recipient_locale (crier try --locale)
        end
        local discriminator = discriminator_for(rule, event, recipient)
        local by_discriminator = index[recipient.id]
        if not by_discriminator then
            by_discriminator = {}
            index[recipient.id] = by_discriminator
        end
        local key = discriminator == nil and no_discriminator or discriminator
        if not by_discriminator[key] then
            local entry = {
                recipient = recipient.id,
                discriminator = discriminator,
                deliveries = deliveries_for(rule, event, recipient),
            }
            by_discriminator[key] = entry
            plan[#plan + 1] = entry
        end
    end
    plan.next_cursor = next_cursor
    return plan
end

-- The limits an event's rule runs under: the rules' own, with a soft limit
-- on top when event.slow_after is set (past it the run stops with code
-- "slow"; the caller plans the event again apart).
local function limits_for(self, event)
    local limits = self.registry.limits
    if event.slow_after then
        local soft = self.soft_limits
        if not soft then
            soft = setmetatable({}, { __index = limits })
            self.soft_limits = soft
        end
        soft.soft = event.slow_after
        limits = soft
    end
    return limits
end

-- gen:plan(event): runs one event through the generation. event is
-- { id = number, tenant = string, type = string, entity_id = string,
-- payload_json = string, cursor = nil|string (the page to continue from, for
-- rules with crier.pages), slow_after = nil|seconds (a soft limit: past it the
-- run stops with code "slow") }. Returns the plan (its shape:
-- runtime.PLAN_FIELDS), an array (in recipient order, one entry per distinct
-- recipient + discriminator) of
--   { recipient = "id", discriminator = nil|"...", deliveries = {
--       { channel = "webhook", target = "...", body = "<json>", secret = nil|"...", ... } } }
-- (an event type without a rule plans nobody: {}); plan.next_cursor is set when
-- a paged audience has more pages (plan the event again with cursor = it); a
-- rule in mode "read" returns { audience_items = { { audience, content,
-- backfill }, ... } } instead; or nil, err, code with code
-- "unknown_event_type", "invalid_payload", "rule_error" (rule errors carry
-- a traceback; a fourth value "limit" when the rule exceeded one of its
-- limits) or "slow" (the soft limit passed). A non-table event raises.
function Generation:plan(event)
    if type(event) ~= "table" then
        error("gen:plan: event must be a table, got " .. type(event), 2)
    end
    local registry = self.registry
    local event_type = registry.event_types[event.type]
    if not event_type then
        return nil, format("unknown event type %s", describe(event.type)), "unknown_event_type"
    end
    local payload, err = check_payload(event_type, event.payload_json)
    if not payload then
        return nil, err, "invalid_payload"
    end
    local rule = registry.rules[event.type]
    if not rule then
        return {}
    end
    local ev = {
        id = event.id,
        tenant = event.tenant,
        type = event.type,
        entity_id = event.entity_id,
        payload = payload,
        cursor = event.cursor,
    }
    local limits = limits_for(self, event)
    local previous = crier._set_registry(registry)
    local ok, result = sandbox.run(limits, run_rule, on_rule_error, rule, ev, self.batch)
    crier._set_registry(previous)
    if not ok then
        if type(result) == "table" and result.slow then
            return nil, result.message, "slow"
        end
        if type(result) ~= "table" then
            -- memory errors do not run the error handler
            result = { message = message_only(result), raw = true }
        end
        if result.raw then
            return nil, format("rule '%s' (%s) failed: %s", rule.event_type, rule.where, result.message),
                "rule_error", result.limit and "limit" or nil
        end
        return nil, result.message, "rule_error"
    end
    return result
end

-- Stored settings for a fan-out batch (the engine, src/engine/fanout.c, when
-- crier.recipient_settings has rows): gen:batch_recipients(event) runs the
-- rule's recipients for an event of the batch (event as for gen:plan) and
-- keeps the list for gen:plan; it returns the recipients' ids (distinct; an
-- empty list when the event has no rule, a bad payload or a failing
-- recipients function — gen:plan then reports it as usual).
-- gen:set_batch_settings(rows) takes the stored rows of those recipients
-- ({ tenant, recipient_id, time_zone?, locale?, quiet_hours? (JSON text) });
-- gen:plan applies them (they win over the rules' fields) until
-- gen:end_batch() forgets the batch.
-- The batch's state (gen:batch_recipients' lists, gen:set_batch_settings'
-- rows), made on first use and dropped by gen:end_batch.
local function batch_state(self)
    local batch = self.batch
    if not batch then
        batch = { lists = {}, settings = {} }
        self.batch = batch
    end
    return batch
end

-- gen:forget_batch_recipients(event): drops the list gen:batch_recipients
-- kept for event (its recipients function met a query deferred to the slow
-- lane: the list is not the event's).
function Generation:forget_batch_recipients(event)
    if self.batch and type(event) == "table" then
        self.batch.lists[batch_key(event)] = nil
    end
end

function Generation:batch_recipients(event)
    if type(event) ~= "table" then
        error("gen:batch_recipients: event must be a table, got " .. type(event), 2)
    end
    local ids = {}
    local registry = self.registry
    local rule = registry.rules[event.type]
    local event_type = registry.event_types[event.type]
    if not rule or not event_type or rule.mode == "read" then
        return ids
    end
    local payload = check_payload(event_type, event.payload_json)
    if not payload then
        return ids
    end
    local ev = { id = event.id, tenant = event.tenant, type = event.type, entity_id = event.entity_id,
        payload = payload, cursor = event.cursor }
    local previous = crier._set_registry(registry)
    local ok, list, next_cursor = sandbox.run(limits_for(self, event), recipients_of, on_rule_error, rule, ev)
    crier._set_registry(previous)
    if not ok or not is_list(list) then
        return ids
    end
    local batch = batch_state(self)
    batch.lists[batch_key(event)] = { list = list, next_cursor = next_cursor }
    local seen = {}
    for i = 1, #list do
        local entry = list[i]
        local id = type(entry) == "table" and entry ~= null and entry.id or entry
        if type(id) == "number" then
            id = json.format_number(id)
        end
        if type(id) == "string" and id ~= "" and not seen[id] then
            seen[id] = true
            ids[#ids + 1] = id
        end
    end
    return ids
end

function Generation:set_batch_settings(rows)
    if type(rows) ~= "table" then
        error("gen:set_batch_settings: rows must be a list, got " .. type(rows), 2)
    end
    local batch = batch_state(self)
    for _, row in ipairs(rows) do
        local quiet = row.quiet_hours
        if type(quiet) == "string" then
            quiet = json.decode(quiet)
            quiet = type(quiet) == "table" and quiet or nil
            if quiet and #quiet == 0 then
                quiet = setmetatable({}, array_mt)
            end
        end
        batch.settings[tostring(row.tenant) .. "\0" .. tostring(row.recipient_id)] = {
            time_zone = row.time_zone, locale = row.locale, quiet_hours = quiet,
        }
    end
end

function Generation:end_batch()
    self.batch = nil
end

-- gen:render_digest(input_json): the message of a digest whose window closed.
-- input_json is what crier.fire_timers returns for it (see
-- timing.digest_event): the rule of input.event_type renders its
-- input.channel block's digest message for input.recipient. Returns a plan of
-- one entry with one delivery (the shape of gen:plan's), or nil, err, code
-- like gen:plan ("unknown_event_type" when the type or its rule is gone,
-- "rule_error").
function Generation:render_digest(input_json)
    if type(input_json) ~= "string" then
        error("gen:render_digest: input must be JSON text, got " .. type(input_json), 2)
    end
    local input, err = json.decode(input_json)
    if type(input) ~= "table" or type(input.recipient) ~= "table" or type(input.channel) ~= "string" then
        return nil, "gen:render_digest: malformed input: " .. tostring(err or "recipient and channel are required"),
            "rule_error"
    end
    local registry = self.registry
    local rule = registry.rules[input.event_type]
    local config = rule and rule.configs[input.channel]
    if not config or not config.digest_config then
        return nil, format("the digest's rule is gone: no rule for %s has a %s block with a digest in the "
            .. "rules loaded now; restore it (the digest waits and is retried)", describe(input.event_type),
            tostring(input.channel)), "unknown_event_type"
    end
    local kind = crier.channel_kinds[input.channel]
    local event = timing.digest_event(input)
    local recipient = input.recipient
    local function digest_run()
        local d = kind.deliver(crier._localized(config, recipient, "digest_config"), event, recipient, function(msg)
            rule_fail(rule, "digest: " .. msg)
        end)
        local et = registry.event_types[input.event_type]
        if d.retry_literal == nil then
            d.retry_literal = (et and et.retry[input.channel]) or registry.retry[input.channel]
        end
        d.honor_preferences = false -- each item was checked when it joined
        return { { recipient = recipient.id, deliveries = { d } } }
    end
    local previous = crier._set_registry(registry)
    local ok, result = sandbox.run(registry.limits, digest_run, on_rule_error)
    crier._set_registry(previous)
    if not ok then
        if type(result) ~= "table" then
            result = { message = message_only(result), raw = true }
        end
        if result.raw then
            return nil, format("rule '%s' (%s) failed rendering a digest: %s", rule.event_type, rule.where,
                result.message), "rule_error", result.limit and "limit" or nil
        end
        return nil, result.message, "rule_error"
    end
    return result
end

-- gen:validate(type, payload_json): checks that type is declared and the
-- payload satisfies its schema, without running the rule. Returns true, or
-- nil, err, code ("unknown_event_type" or "invalid_payload").
function Generation:validate(type_name, payload_json)
    local event_type = self.registry.event_types[type_name]
    if not event_type then
        return nil, format("unknown event type %s", describe(type_name)), "unknown_event_type"
    end
    local payload, err = check_payload(event_type, payload_json)
    if not payload then
        return nil, err, "invalid_payload"
    end
    return true
end

-- gen:set_query_backend(fn): how this generation's crier.query objects run:
-- fn(name, sql, params, n_params, page) -> rows (list of { column = value }) or
-- nil, err; page is { cursor = column, after = value, limit = n } when the
-- call fetches a page of crier.pages (a fake backend uses it; SQL already
-- has it as its last two parameters).
function Generation:set_query_backend(fn)
    if fn ~= nil and type(fn) ~= "function" then
        error("gen:set_query_backend: expected a function or nil", 2)
    end
    self.registry.query_backend = fn
end

-- gen:set_recipient_locale(tag): plans render as for recipients whose
-- locale is tag (it replaces the locale the rules' recipients give), as
-- crier try --locale does; nil: the recipients' own. Returns true, or nil and
-- a message when tag is not a locale tag.
function Generation:set_recipient_locale(tag)
    if tag == nil then
        self.registry.recipient_locale = nil
        return true
    end
    local norm, err = require("crier.locale").normalize(tag)
    if not norm then
        return nil, err
    end
    self.registry.recipient_locale = norm
    return true
end

-- runtime.fake_query_backend(queries): a backend for tests and crier try
-- --no-db: queries maps a query's name to its rows (a list of { column =
-- value }) or to a function(...) returning them; pages are cut from the rows
-- by the cursor column (rows sorted by it, those after the cursor, up to the
-- page size). A query without an entry fails with a message naming it.
function runtime.fake_query_backend(queries)
    if type(queries) ~= "table" then
        error("runtime.fake_query_backend: expected a table of name = rows", 2)
    end
    return function(name, _, values, n, page)
        local rows = queries[name]
        if rows == nil then
            return nil, format("no fake rows for query %q (give them as queries = { %s = { ... } })", name, name)
        end
        if type(rows) == "function" then
            rows = rows(unpack(values, 1, n))
        end
        if not page then
            return rows
        end
        local sorted = {}
        for _, row in ipairs(rows) do
            if row[page.cursor] ~= nil and tostring(row[page.cursor]) > (page.after or "") then
                sorted[#sorted + 1] = row
            end
        end
        sort(sorted, function(a, b)
            return tostring(a[page.cursor]) < tostring(b[page.cursor])
        end)
        local out = {}
        for i = 1, math.min(#sorted, tonumber(page.limit) or #sorted) do
            out[i] = sorted[i]
        end
        return out
    end
end

-- gen:memory_limit(): the memory ceiling in bytes the rules declared (or the default).
function Generation:memory_limit()
    return self.registry.limits.memory
end

-- gen:event_types(): the event type names the rules declare, sorted (the
-- engine's own, such as crier.endpoint.disabled, are left out).
function Generation:event_types()
    local names = {}
    for name, et in pairs(self.registry.event_types) do
        if not et.builtin then
            names[#names + 1] = name
        end
    end
    sort(names)
    return names
end

-- gen:describe_event_type(name): { name, description, where, fields =
-- { { name, type, optional } }, rule = { where, description } | nil } for
-- tooling (crier check / try), or nil when the type is not declared.
function Generation:describe_event_type(name)
    local et = self.registry.event_types[name]
    if not et then
        return nil
    end
    local fields = {}
    for i, f in ipairs(et.fields) do
        fields[i] = { name = f.name, type = f.type, optional = f.optional }
    end
    local rule = self.registry.rules[name]
    return {
        name = name,
        description = et.description,
        where = et.where,
        fields = fields,
        rule = rule and { where = rule.where, description = rule.description } or nil,
    }
end

return runtime
