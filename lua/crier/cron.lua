-- crier.cron: cron expressions of recurring schedules (crier.schedule): parsed
-- and checked when rules load (crier check), without a database. The daemon
-- computes occurrences in the schedule's time zone with the same grammar in
-- SQL (sql/functions/cron_next.sql); tests/vectors/cron.tsv pins both to the
-- same expressions. Pure Lua: loads in LuaJIT, the crier daemon and nginx.
--
-- Grammar: five fields "minute hour day-of-month month day-of-week", or six
-- with a leading "second". A field is a comma list of items: "*", "N",
-- "N-M", each optionally followed by "/STEP" ("N/STEP" is "N-max/STEP").
-- Months may be named JAN-DEC, weekdays SUN-SAT (case-insensitive); weekday 7
-- is Sunday, like 0. When both day-of-month and day-of-week are restricted
-- (neither starts with "*"), a day matches either (classic cron); otherwise
-- both. Macros: @yearly (@annually), @monthly, @weekly, @daily (@midnight),
-- @hourly.

local type, tonumber, ipairs, format = type, tonumber, ipairs, string.format
local match, gmatch, lower, upper, floor = string.match, string.gmatch, string.lower, string.upper, math.floor
local concat = table.concat
local calendar = require "crier.calendar"

local M = {}

local macros = {
    ["@yearly"] = "0 0 1 1 *", ["@annually"] = "0 0 1 1 *", ["@monthly"] = "0 0 1 * *",
    ["@weekly"] = "0 0 * * 0", ["@daily"] = "0 0 * * *", ["@midnight"] = "0 0 * * *", ["@hourly"] = "0 * * * *",
}

local month_names = { JAN = 1, FEB = 2, MAR = 3, APR = 4, MAY = 5, JUN = 6, JUL = 7, AUG = 8, SEP = 9, OCT = 10,
    NOV = 11, DEC = 12 }
local day_names = { SUN = 0, MON = 1, TUE = 2, WED = 3, THU = 4, FRI = 5, SAT = 6 }

-- name, min, max, names
local FIELDS = {
    second = { "second", 0, 59 },
    minute = { "minute", 0, 59 },
    hour = { "hour", 0, 23 },
    dom = { "day of month", 1, 31 },
    month = { "month", 1, 12, month_names },
    dow = { "day of week", 0, 7, day_names },
}

local function value_of(text, field)
    local n = match(text, "^%d+$") and tonumber(text)
    if not n and field[4] then
        n = field[4][upper(text)]
    end
    if not n then
        return nil, format("%s: %q is not a number%s", field[1], text,
            field[4] and (field == FIELDS.month and " or a month name (JAN-DEC)" or " or a day name (SUN-SAT)")
                or "")
    end
    if n < field[2] or n > field[3] then
        return nil, format("%s: %d is out of range %d-%d", field[1], n, field[2], field[3])
    end
    return n
end

-- Parses one field into a set { [n] = true } (weekday 7 folded into 0).
local function parse_field(text, field)
    local set = {}
    if text == "" then
        return nil, field[1] .. ": empty"
    end
    for item in gmatch(text .. ",", "([^,]*),") do
        if item == "" then
            return nil, format("%s: %q has an empty list item", field[1], text)
        end
        local range, step = match(item, "^([^/]+)/(.*)$")
        if not range then
            range = item
        end
        local lo, hi, err
        if range == "*" then
            lo, hi = field[2], field[3]
        else
            local a, b = match(range, "^([^-]+)-(.+)$")
            if a then
                lo, err = value_of(a, field)
                if not lo then return nil, err end
                hi, err = value_of(b, field)
                if not hi then return nil, err end
                if hi < lo then
                    return nil, format("%s: range %q runs backwards", field[1], range)
                end
            else
                lo, err = value_of(range, field)
                if not lo then return nil, err end
                hi = step and field[3] or lo
            end
        end
        local by = 1
        if step then
            by = match(step, "^%d+$") and tonumber(step)
            if not by or by < 1 then
                return nil, format("%s: step %q must be a whole number of at least 1", field[1], step)
            end
        end
        for n = lo, hi, by do
            set[(field == FIELDS.dow and n == 7) and 0 or n] = true
        end
    end
    return set
end

local DAYS_IN_MONTH = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }

-- cron.parse(expr): { expr, seconds, minutes, hours, doms, months, dows (sets),
-- dom_star, dow_star, with_seconds } or nil, err (what is wrong, which field).
-- An expression that can never occur (30 2 *: February 30th) is an error.
function M.parse(expr)
    if type(expr) ~= "string" then
        return nil, "a cron expression must be a string like \"0 8 * * *\", got " .. type(expr)
    end
    local text = match(expr, "^%s*(.-)%s*$")
    text = macros[lower(text)] or text
    if match(text, "^@") then
        return nil, format("unknown macro %q (use @yearly, @monthly, @weekly, @daily or @hourly)", text)
    end
    local parts = {}
    for p in gmatch(text, "%S+") do
        parts[#parts + 1] = p
    end
    if #parts ~= 5 and #parts ~= 6 then
        return nil, format("%q has %d fields; expected 5 (minute hour day-of-month month day-of-week) "
            .. "or 6 (second first)", expr, #parts)
    end
    local with_seconds = #parts == 6
    if not with_seconds then
        table.insert(parts, 1, "0")
    end
    local names = { "second", "minute", "hour", "dom", "month", "dow" }
    local sets = {}
    for i, name in ipairs(names) do
        local set, err = parse_field(parts[i], FIELDS[name])
        if not set then
            return nil, format("%q: %s", expr, err)
        end
        sets[name] = set
    end
    local spec = {
        expr = expr, seconds = sets.second, minutes = sets.minute, hours = sets.hour, doms = sets.dom,
        months = sets.month, dows = sets.dow, with_seconds = with_seconds,
        dom_star = match(parts[4], "^%*") ~= nil, dow_star = match(parts[6], "^%*") ~= nil,
    }
    -- a day of month that no chosen month has, and no weekday to match instead
    if spec.dow_star or spec.dom_star then
        local possible = false
        for m = 1, 12 do
            if spec.months[m] then
                for d = 1, DAYS_IN_MONTH[m] do
                    if spec.doms[d] then
                        possible = true
                    end
                end
            end
        end
        if not possible then
            return nil, format("%q never occurs: no chosen month has that day", expr)
        end
    end
    return spec
end

local days_from_civil, civil_from_days = calendar.days_from_civil, calendar.civil_from_days

local function day_matches(spec, y, m, d, days)
    if not spec.months[m] then
        return false
    end
    local _, _, last = civil_from_days(days_from_civil(m == 12 and y + 1 or y, m == 12 and 1 or m + 1, 1) - 1)
    if d > last then
        return false
    end
    local dom = spec.doms[d] == true
    local dow = spec.dows[(days + 4) % 7] == true -- 1970-01-01 was a Thursday
    if spec.dom_star or spec.dow_star then
        return dom and dow
    end
    return dom or dow
end

-- cron.next_utc(spec, after): the first occurrence strictly after `after`
-- (Unix seconds) with the clock in UTC, as Unix seconds; nil when there is
-- none within 8 years. (The daemon computes occurrences in the schedule's
-- zone in SQL; this serves crier check and specs.)
function M.next_utc(spec, after)
    local t = floor(after) + 1
    local days = floor(t / 86400)
    local sod = t - days * 86400
    for _ = 0, 366 * 8 do
        local y, m, d = civil_from_days(days)
        if day_matches(spec, y, m, d, days) then
            for h = 0, 23 do
                if spec.hours[h] and (h + 1) * 3600 > sod then
                    for mi = 0, 59 do
                        if spec.minutes[mi] and h * 3600 + (mi + 1) * 60 > sod then
                            for s = 0, 59 do
                                if spec.seconds[s] and h * 3600 + mi * 60 + s >= sod then
                                    return days * 86400 + h * 3600 + mi * 60 + s
                                end
                            end
                        end
                    end
                end
            end
        end
        days, sod = days + 1, 0
    end
    return nil
end

-- The UTC instant of local wall-clock time `wall` (Unix seconds as if the
-- wall clock were UTC) in zone: the instant itself when the time occurs once;
-- the first of the two when it occurs twice (clocks set back); the jump when
-- the clocks skip it (set forward) — the rules crier.cron_local_instant
-- follows in SQL. Assumes at most one change of offset within a day of it.
local function local_instant(tz, zone, wall)
    local before = tz.at(zone, wall - 86400)
    local after = tz.at(zone, wall + 86400)
    local best
    for _, o in ipairs({ before, after }) do
        local u = wall - o
        if tz.at(zone, u) == o and (not best or u < best) then
            best = u
        end
    end
    if best then
        return best
    end
    -- skipped: the first instant whose offset is the later one (the jump)
    local lo, hi = wall - after, wall - before
    while lo < hi do
        local mid = floor((lo + hi) / 2)
        if tz.at(zone, mid) == after then
            hi = mid
        else
            lo = mid + 1
        end
    end
    return lo
end

-- cron.next_in_zone(spec, zone, after): the first occurrence strictly after
-- `after` (Unix seconds) of spec on zone's wall clock (the system's tz
-- database, crier.tz), as a UTC instant; nil when there is none within 8
-- years; nil, err for a zone the database does not have. crier check uses
-- it; the daemon computes the same in SQL (tests/vectors/cron.tsv pins both).
function M.next_in_zone(spec, zone, after)
    if zone == "UTC" then
        return M.next_utc(spec, after)
    end
    local tz = require "crier.tz"
    local ok, err = tz.check(zone)
    if not ok then
        return nil, err
    end
    -- from a little before the local time of `after`: clocks set back can
    -- give a later instant an earlier wall-clock time
    local wall = floor(after) + tz.at(zone, floor(after)) - 3 * 3600
    for _ = 1, 100000 do
        wall = M.next_utc(spec, wall)
        if not wall then
            return nil
        end
        local u = local_instant(tz, zone, wall)
        if u > after then
            return u
        end
    end
    return nil
end

-- cron.format_utc(t): Unix seconds as "YYYY-MM-DDTHH:MM:SSZ".
function M.format_utc(t)
    local days = floor(t / 86400)
    local sod = t - days * 86400
    local y, m, d = civil_from_days(days)
    return format("%04d-%02d-%02dT%02d:%02d:%02dZ", y, m, d, floor(sod / 3600), floor(sod % 3600 / 60), sod % 60)
end

-- cron.parse_utc(text): "YYYY-MM-DDTHH:MM:SSZ" as Unix seconds, or nil.
function M.parse_utc(text)
    local y, m, d, h, mi, sec = match(tostring(text), "^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)Z$")
    if not y then
        return nil
    end
    return days_from_civil(tonumber(y), tonumber(m), tonumber(d)) * 86400 + tonumber(h) * 3600
        + tonumber(mi) * 60 + tonumber(sec)
end

-- cron.valid_zone(name): true when name is a time zone of the system's tz
-- database (TZDIR, else /usr/share/zoneinfo), "UTC" always; nil, err
-- otherwise. Without a readable tz database (or without io, in a sandbox)
-- only the name's shape is checked; the daemon's database checks it again.
function M.valid_zone(name)
    if type(name) ~= "string" or name == "" or #name > 100 or match(name, "%.%.")
        or not match(name, "^[%w_+%-]+[%w_+%-/]*$") or match(name, "/$") or match(name, "^/") then
        return nil, format("time zone %s is not a zone name like \"Europe/Berlin\" or \"UTC\"",
            type(name) == "string" and format("%q", name) or type(name))
    end
    if name == "UTC" then
        return true
    end
    local io_ = rawget(_G, "io")
    local os_ = rawget(_G, "os")
    if type(io_) ~= "table" or type(io_.open) ~= "function" then
        return true
    end
    local dir = (type(os_) == "table" and os_.getenv and os_.getenv("TZDIR")) or "/usr/share/zoneinfo"
    local probe = io_.open(dir .. "/UTC", "rb")
    if not probe then
        return true -- no tz database here to check against
    end
    probe:close()
    local f = io_.open(dir .. "/" .. name, "rb")
    if not f then
        return nil, format("unknown time zone %q (a name of the tz database, like \"Europe/Berlin\", "
            .. "\"America/New_York\" or \"UTC\")", name)
    end
    local head = f:read(4)
    f:close()
    if head ~= "TZif" then
        return nil, format("unknown time zone %q (a name of the tz database, like \"Europe/Berlin\")", name)
    end
    return true
end

-- cron.describe(spec): the parsed sets back as a normalized text, field by
-- field (second minute hour dom month dow), each a comma list of numbers or
-- "*" — what tests/vectors/cron.tsv compares with SQL's crier.cron_parse.
function M.describe(spec)
    local out = {}
    local function list(set, lo, hi)
        local all, items = true, {}
        for n = lo, hi do
            if set[n] then
                items[#items + 1] = tostring(n)
            else
                all = false
            end
        end
        return all and "*" or concat(items, ",")
    end
    out[1] = list(spec.seconds, 0, 59)
    out[2] = list(spec.minutes, 0, 59)
    out[3] = list(spec.hours, 0, 23)
    out[4] = list(spec.doms, 1, 31)
    out[5] = list(spec.months, 1, 12)
    out[6] = list(spec.dows, 0, 6)
    return concat(out, " ")
end

return M
