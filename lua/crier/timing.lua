-- crier.timing: when and how many. The time fields of a sending channel block
-- (webhook, email, kafka):
--
--   delay     = "10m"                      hold the delivery this long, then
--   unless    = "read" | "seen"            (with delay) drop it if the same
--                                          notification's feed item was read / seen
--   cancel_on = { "invoice.paid" }         (with delay) drop it if an event of one of
--                                          these types arrived for the same entity
--   throttle  = { limit = 3, per = "1h", key = "builds" | function(event, recipient) }
--                                          at most limit sends per recipient and key
--                                          (default: the event type) in any period of
--                                          per; the excess is suppressed, or joins the
--                                          digest when the block has one
--   digest    = { window = "1h" | every = "1h", key = ..., max_items = 50,
--                 <the channel's content fields: subject, text, html / body> }
--                                          collect the recipient's items under key
--                                          (default: the event type) and send one
--                                          message per window (every: aligned in
--                                          the recipient's local time)
--   quiet_hours = { from = "22:00", to = "07:00", days = { "mon", ... } }, or a
--                 list of such periods, or {} (none)
--                                          in the recipient's local time (their
--                                          time_zone, else UTC): a delivery due
--                                          inside them is held until they end (also
--                                          on a rule, for all its blocks; a person's
--                                          own setting wins over both)
--
-- check() validates the fields at load (problems through report, one per
-- line), spec_for() turns them into the timing spec a planned delivery
-- carries (JSON text, read by crier.apply_timing in SQL, sql/functions/), and
-- digest_event() builds what a digest's templates see. The order in the
-- engine: delay (and its conditions), then quiet hours, then throttle, then
-- digest (in quiet hours a block with a digest joins it at once, and the
-- digest is sent when they end).
-- Pure Lua.

local json = require "crier.json"

local type, pairs, ipairs, tostring, tonumber, next, setmetatable =
    type, pairs, ipairs, tostring, tonumber, next, setmetatable
local format, match, find = string.format, string.match, string.find
local concat, sort = table.concat, table.sort
local floor = math.floor

local timing = {}

-- The time fields a sending channel block may have.
timing.FIELDS = { delay = true, unless = true, cancel_on = true, throttle = true, digest = true, quiet_hours = true }

local WEEKDAYS = { mon = true, tue = true, wed = true, thu = true, fri = true, sat = true, sun = true }

local function show(v)
    return type(v) == "string" and format("%q", v) or tostring(v)
end


local units = { s = 1, m = 60, h = 3600, d = 86400 }
local MAX_SECONDS = 366 * 86400

-- timing.parse_duration(v): seconds from a number or a string like "90s",
-- "10m", "2h", "1d" (1 second to 366 days). Returns seconds, or nil and what
-- a valid value looks like.
function timing.parse_duration(v)
    local seconds
    if type(v) == "number" then
        seconds = v
    elseif type(v) == "string" and #v <= 32 then
        local n, unit = match(v, "^(%d+%.?%d*)([smhd]?)$")
        if n then
            seconds = tonumber(n) * units[unit ~= "" and unit or "s"]
        end
    end
    if type(seconds) ~= "number" or seconds ~= seconds or seconds < 1 or seconds > MAX_SECONDS then
        return nil, format("must be a duration from 1 second to 366 days (a number of seconds or a string like "
            .. "\"10m\", \"2h\", \"1d\"), got %s", type(v) == "string" and format("%q", v) or tostring(v))
    end
    return floor(seconds + 0.5)
end

local function sorted_names(t)
    local out = {}
    for k in pairs(t) do
        out[#out + 1] = tostring(k)
    end
    sort(out)
    return concat(out, ", ")
end

-- Reports each key of t not in allowed.
local function check_known(t, allowed, what, report)
    local unknown = {}
    for k in pairs(t) do
        if not allowed[k] then
            unknown[#unknown + 1] = tostring(k)
        end
    end
    sort(unknown)
    for _, k in ipairs(unknown) do
        report(format("%s: unknown field '%s' (expected one of: %s)", what, k, sorted_names(allowed)))
    end
end

local function is_positive_integer(v, max)
    return type(v) == "number" and v == floor(v) and v >= 1 and v <= max
end

-- A key field: nil (the event type), a non-empty string, or a function(event, recipient).
local function check_key(v, what, report)
    if v ~= nil and not (type(v) == "string" and v ~= "") and type(v) ~= "function" then
        report(what .. ".key must be a non-empty string or a function(event, recipient) returning one, got "
            .. (type(v) == "string" and "\"\"" or type(v)))
    end
end

-- timing.check_quiet_hours(v, what, report): validates quiet hours as a rule
-- writes them — one period { from = "22:00", to = "07:00", days = { "mon",
-- ... } } (days optional: every day; a period whose to is not after its from
-- ends the next day; days are the weekdays it starts on), a list of periods
-- (at most 14), or {} / false for none — in the shape crier.recipient_settings
-- stores (crier.check_quiet_hours in SQL). Returns the list of periods (a
-- JSON array, empty for none); problems go through report("<what> ...").
function timing.check_quiet_hours(v, what, report)
    local out = setmetatable({}, json.array_mt)
    if v == false then
        return out
    end
    if type(v) ~= "table" then
        report(format("%s must be a period { from = \"22:00\", to = \"07:00\" }, a list of them, or {} "
            .. "for none, got %s", what, type(v)))
        return out
    end
    local list = v
    if v.from ~= nil or v.to ~= nil or v.days ~= nil then
        list = { v }
    elseif not (next(v) == nil or json.is_array(v)) then
        report(format("%s must be a period { from = \"22:00\", to = \"07:00\" } or a list of them", what))
        return out
    end
    if #list > 14 then
        report(format("%s has %d periods; at most 14 are allowed", what, #list))
        return out
    end
    for i, p in ipairs(list) do
        local at = #list > 1 and format("%s[%d]", what, i) or what
        if type(p) ~= "table" then
            report(format("%s must be a table { from = \"22:00\", to = \"07:00\" }, got %s", at, type(p)))
        else
            check_known(p, { from = true, to = true, days = true }, at, report)
            local ok = true
            for _, f in ipairs({ "from", "to" }) do
                local h, m = match(type(p[f]) == "string" and p[f] or "", "^(%d%d):(%d%d)$")
                if not h or tonumber(h) > 23 or tonumber(m) > 59 then
                    report(format("%s.%s must be a local time \"HH:MM\" (00:00-23:59), got %s", at, f,
                        p[f] == nil and "nothing" or show(p[f])))
                    ok = false
                end
            end
            if ok and p.from == p.to then
                report(format("%s: the period from %s to %s is empty; give different times", at, p.from, p.to))
            end
            local period = { from = p.from, to = p.to }
            if p.days ~= nil then
                if type(p.days) ~= "table" or #p.days == 0 or not json.is_array(p.days) then
                    report(format("%s.days must be a non-empty list of \"mon\" .. \"sun\" (the days a period "
                        .. "starts on)", at))
                else
                    period.days = setmetatable({}, json.array_mt)
                    for j, d in ipairs(p.days) do
                        if not WEEKDAYS[d] then
                            report(format("%s.days[%d] is %s; expected one of \"mon\", \"tue\", \"wed\", "
                                .. "\"thu\", \"fri\", \"sat\", \"sun\"", at, j, show(d)))
                        end
                        period.days[j] = d
                    end
                end
            end
            out[#out + 1] = period
        end
    end
    return out
end

-- The content fields a digest may override, per channel kind.
timing.DIGEST_CONTENT = {
    email = { subject = true, text = true, html = true, to = true, from = true },
    webhook = { body = true, url = true, secret = true },
    kafka = { body = true, topic = true },
}

-- timing.check(config, kind, report): validates the time fields of a channel
-- block (config: the block as written; kind: its channel kind). Returns the
-- checked spec to keep with the block ({ delay =, unless =, cancel_on =,
-- throttle =, digest = } with durations in seconds), or nil when the block
-- has no time fields. Problems go through report("<kind>.<field> ...").
function timing.check(config, kind, report)
    local spec, any = {}, false
    local what = kind
    if config.delay ~= nil then
        any = true
        local seconds, err = timing.parse_duration(config.delay)
        if not seconds then
            report(what .. ".delay " .. err)
        end
        spec.delay = seconds
    end
    if config.unless ~= nil then
        any = true
        if config.unless ~= "read" and config.unless ~= "seen" then
            report(format("%s.unless must be \"read\" (drop the delayed delivery when the notification's feed "
                .. "item was read) or \"seen\", got %s", what, type(config.unless) == "string"
                and format("%q", config.unless) or tostring(config.unless)))
        end
        spec.unless = config.unless
    end
    if config.cancel_on ~= nil then
        any = true
        local list = config.cancel_on
        if type(list) == "string" then
            list = { list }
        end
        if type(list) ~= "table" or not (next(list) == nil or json.is_array(list)) or #list == 0 then
            report(what .. ".cancel_on must be an event type name or a non-empty list of them, such as "
                .. "{ \"invoice.paid\" }")
        else
            for i, name in ipairs(list) do
                if type(name) ~= "string" or not find(name, "^[%w_%.%-]+$") or #name > 200 then
                    report(format("%s.cancel_on[%d] must be an event type name (1-200 letters, digits, '.', '_' "
                        .. "or '-'), got %s", what, i, type(name) == "string" and format("%q", name) or type(name)))
                end
            end
            spec.cancel_on = list
        end
    end
    if (spec.unless ~= nil or spec.cancel_on ~= nil) and config.delay == nil then
        report(what .. ": unless and cancel_on are checked when a delay ends; add delay = \"10m\" (how long "
            .. "to wait before deciding)")
    end

    local throttle = config.throttle
    if throttle ~= nil then
        any = true
        if type(throttle) ~= "table" then
            report(what .. ".throttle must be a table { limit = 3, per = \"1h\" }, got " .. type(throttle))
        else
            check_known(throttle, { limit = true, per = true, key = true }, what .. ".throttle", report)
            if not is_positive_integer(throttle.limit, 1000000) then
                report(what .. ".throttle.limit must be a whole number from 1 to 1000000 (sends per period), got "
                    .. tostring(throttle.limit))
            end
            local per, err
            if throttle.per == nil then
                err = "is required (the period, such as \"1h\")"
            else
                per, err = timing.parse_duration(throttle.per)
            end
            if not per then
                report(what .. ".throttle.per " .. err)
            end
            check_key(throttle.key, what .. ".throttle", report)
            spec.throttle = { limit = throttle.limit, per = per, key = throttle.key }
        end
    end

    if config.quiet_hours ~= nil then
        any = true
        spec.quiet_hours = timing.check_quiet_hours(config.quiet_hours, what .. ".quiet_hours", report)
    end

    local digest = config.digest
    if digest ~= nil then
        any = true
        if type(digest) ~= "table" then
            report(what .. ".digest must be a table { window = \"1h\", ... }, got " .. type(digest))
        else
            local allowed = { window = true, every = true, key = true, max_items = true }
            for k in pairs(timing.DIGEST_CONTENT[kind] or {}) do
                allowed[k] = true
            end
            check_known(digest, allowed, what .. ".digest", report)
            local d = { key = digest.key }
            if (digest.window == nil) == (digest.every == nil) then
                report(what .. ".digest needs window = \"1h\" (the first item opens a window of that length) or "
                    .. "every = \"1h\" (fixed windows: on the hour, every hour, in the recipient's time zone), "
                    .. "not both")
            else
                local field = digest.window ~= nil and "window" or "every"
                local seconds, err = timing.parse_duration(digest[field])
                if not seconds then
                    report(what .. ".digest." .. field .. " " .. err)
                end
                d[field] = seconds
            end
            if digest.max_items ~= nil and not is_positive_integer(digest.max_items, 10000) then
                report(what .. ".digest.max_items must be a whole number from 1 to 10000 (a fuller window is sent "
                    .. "at once), got " .. tostring(digest.max_items))
            end
            d.max_items = digest.max_items
            check_key(digest.key, what .. ".digest", report)
            spec.digest = d
        end
    end
    return any and spec or nil
end

local function key_value(v, event, recipient, what, fail)
    if v == nil then
        return event.type
    end
    if type(v) == "function" then
        v = v(event, recipient)
        if type(v) == "number" then
            v = json.format_number(v)
        end
        if type(v) ~= "string" or v == "" then
            fail(format("%s.key returned %s; expected a non-empty string", what,
                type(v) == "string" and "\"\"" or type(v)))
        end
    end
    return v
end

-- timing.quiet_for(recipient, block_spec, rule_quiet, exempt): the quiet
-- hours that apply to one delivery, as the timing's "quiet" object
-- { hours = [...], zone = "<IANA name>" | nil }, or nil for none. The
-- person's own (recipient.quiet_hours: their stored setting, or what the
-- rules' recipients gave) win over the channel block's, which win over the
-- rule's; an empty list is none. exempt (a required or urgent event type):
-- none.
function timing.quiet_for(recipient, block_spec, rule_quiet, exempt)
    if exempt then
        return nil
    end
    local hours = recipient.quiet_hours
    if hours == nil or hours == json.null then
        hours = block_spec and block_spec.quiet_hours
        if hours == nil then
            hours = rule_quiet
        end
    end
    if hours == nil or #hours == 0 then
        return nil
    end
    local zone = recipient.time_zone
    return { hours = hours, zone = zone ~= json.null and zone or nil }
end

-- timing.spec_for(spec, kind, event, recipient, fail, quiet): the JSON text of a
-- planned delivery's timing (nil without time fields and quiet hours):
--   { "delay": s, "unless": "read", "cancel_on": [...],
--     "quiet": { "hours": [ { "from": "22:00", "to": "07:00", "days": [...] } ], "zone": "Europe/Berlin" },
--     "throttle": { "limit": n, "per": s, "key": "..." },
--     "digest": { "key": "...", "window": s | "every": s, "max_items": n, "zone": "<IANA name>" (with every),
--                 "recipient": { the recipient table } } }
-- (quiet: timing.quiet_for's answer).
function timing.spec_for(spec, kind, event, recipient, fail, quiet)
    if not spec then
        if not quiet then
            return nil
        end
        spec = {}
    end
    if not (spec.delay or spec.throttle or spec.digest or quiet) then
        return nil
    end
    local out = { delay = spec.delay, unless = spec.unless, quiet = quiet }
    if spec.cancel_on then
        out.cancel_on = setmetatable({}, json.array_mt)
        for i, name in ipairs(spec.cancel_on) do
            out.cancel_on[i] = name
        end
    end
    if spec.throttle then
        out.throttle = {
            limit = spec.throttle.limit,
            per = spec.throttle.per,
            key = key_value(spec.throttle.key, event, recipient, kind .. ".throttle", fail),
        }
    end
    if spec.digest then
        out.digest = {
            key = key_value(spec.digest.key, event, recipient, kind .. ".digest", fail),
            window = spec.digest.window,
            every = spec.digest.every,
            max_items = spec.digest.max_items,
            recipient = recipient,
            -- fixed windows are aligned in the recipient's local time
            zone = spec.digest.every and type(recipient.time_zone) == "string" and recipient.time_zone ~= "UTC"
                and recipient.time_zone or nil,
        }
    end
    local text, err = json.encode(out)
    if not text then
        fail(kind .. ": the recipient cannot be kept for the digest: " .. err)
    end
    return text
end

-- timing.digest_event(input): from what the engine hands over when a digest
-- window closes (decoded JSON: { tenant, event_type, channel, recipient,
-- digest = { key, window_start, window_end }, items = { { id, type,
-- entity_id, payload, created_at }, ... } }), the event the digest's
-- templates and functions see: the last item's event, with
-- event.digest = { key, count, items, first, last, window_start,
-- window_end } (items: events in arrival order, each with created_at).
function timing.digest_event(input)
    local items = setmetatable({}, json.array_mt)
    for i, it in ipairs(input.items or {}) do
        items[i] = {
            id = it.id,
            tenant = input.tenant,
            type = it.type,
            entity_id = it.entity_id,
            payload = it.payload,
            created_at = it.created_at,
        }
    end
    local last = items[#items] or {}
    local d = input.digest or {}
    local digest = {
        key = d.key,
        count = #items,
        items = items,
        first = items[1],
        last = items[#items],
        window_start = d.window_start,
        window_end = d.window_end,
    }
    return {
        id = last.id,
        tenant = input.tenant,
        type = input.event_type,
        entity_id = last.entity_id,
        payload = last.payload,
        digest = digest,
    }
end

-- The words for a number of seconds: "90 s" -> "1 min 30 s", 3600 -> "1 h".
local function duration_words(seconds)
    seconds = floor(tonumber(seconds) or 0)
    local out = {}
    for _, u in ipairs({ { 86400, "d" }, { 3600, "h" }, { 60, "min" }, { 1, "s" } }) do
        if seconds >= u[1] then
            out[#out + 1] = format("%d %s", floor(seconds / u[1]), u[2])
            seconds = seconds % u[1]
        end
    end
    return #out > 0 and concat(out, " ") or "0 s"
end

local function or_list(list)
    local names = {}
    for i, name in ipairs(list) do
        names[i] = tostring(name)
    end
    return concat(names, " or ")
end

-- timing.describe(timing_json): a planned delivery's timing (the JSON text of
-- timing.spec_for) in words, for people (crier try), in the engine's order:
-- the delay and what drops the delivery when it ends, then the throttle,
-- then the digest it joins, e.g.
--   "held 10 min, then dropped if the feed item was read by then; otherwise sent"
--   "at most 3 per 1 h for throttle key build.failed (the excess is suppressed)"
--   "joins digest comment.created for alice, a window of 1 h from its first item, at most 50 items"
-- Returns the text, or nil and why when the JSON is not a timing; a
-- non-string argument is a usage error.
function timing.describe(timing_json)
    if type(timing_json) ~= "string" then
        error("timing.describe: expected the timing's JSON text, got " .. type(timing_json), 2)
    end
    local t, err = json.decode(timing_json)
    if type(t) ~= "table" or json.is_array(t) then
        return nil, "timing.describe: not a timing object: " .. tostring(err or timing_json)
    end
    local delay, throttle, digest = t.delay, t.throttle, t.digest
    if type(throttle) ~= "table" then
        throttle = nil
    end
    if type(digest) ~= "table" then
        digest = nil
    end

    local rest -- what happens after the delay: throttle and/or digest
    if digest then
        local recipient = type(digest.recipient) == "table" and digest.recipient.id
        local words = { format("joins digest %s%s", tostring(digest.key),
            recipient ~= nil and recipient ~= json.null and (" for " .. tostring(recipient)) or "") }
        if digest.every then
            words[#words + 1] = format("fixed windows of %s (aligned to the Unix epoch, in %s)",
                duration_words(digest.every), type(digest.zone) == "string" and (digest.zone .. " local time") or "UTC")
        elseif digest.window then
            words[#words + 1] = format("a window of %s from its first item", duration_words(digest.window))
        end
        if digest.max_items then
            words[#words + 1] = format("at most %s items (a full window is sent at once)",
                json.format_number(digest.max_items))
        end
        rest = concat(words, ", ")
    end
    if throttle then
        local words = format("at most %s per %s for throttle key %s", json.format_number(throttle.limit or 0),
            duration_words(throttle.per), tostring(throttle.key))
        if rest then
            rest = words .. "; the excess " .. rest
        else
            rest = words .. " (the excess is suppressed)"
        end
    end
    local quiet = type(t.quiet) == "table" and type(t.quiet.hours) == "table" and t.quiet or nil
    if quiet then
        local periods = {}
        for i, p in ipairs(quiet.hours) do
            periods[i] = format("%s-%s%s", tostring(p.from), tostring(p.to),
                type(p.days) == "table" and (" " .. concat(p.days, ",")) or "")
        end
        local words = format("in quiet hours (%s, %s) %s until they end", concat(periods, "; "),
            quiet.zone ~= nil and quiet.zone ~= json.null and tostring(quiet.zone) or "UTC",
            digest and "it joins the digest at once and the digest waits" or "it is held")
        rest = rest and (words .. "; then " .. rest) or (words .. "; then sent")
    end
    if not delay then
        return rest or "sent at once"
    end

    local conditions = {}
    if t.unless == "read" then
        conditions[#conditions + 1] = "the feed item was read"
    elseif t.unless == "seen" then
        conditions[#conditions + 1] = "the feed item was seen or read"
    end
    if type(t.cancel_on) == "table" and #t.cancel_on > 0 then
        conditions[#conditions + 1] = or_list(t.cancel_on) .. " arrived for the same entity"
    end
    local words = "held " .. duration_words(delay)
    if #conditions > 0 then
        return format("%s, then dropped if %s by then; otherwise %s", words, concat(conditions, " or "),
            rest or "sent")
    end
    return format("%s, then %s", words, rest or "sent")
end

return timing
