-- crier.tz: IANA time zones from the system's tz database (TZif files under
-- /usr/share/zoneinfo, or $TZDIR; RFC 8536): the UTC offset and abbreviation
-- in force in a zone at an instant, for the template date filter and for
-- validating the zones recipients carry. Reads the version 2+ (64-bit)
-- section of a zone's file and, for instants after its last transition (all
-- instants, with Debian's "slim" files for many zones), the POSIX TZ rule in
-- its footer. Parsed zones are cached per process. Pure Lua (io.open only),
-- so it loads in plain LuaJIT, crier serve and nginx.

local byte, find, format, match, sub = string.byte, string.find, string.format, string.match, string.sub
local floor = math.floor
local calendar = require "crier.calendar"
local type, tonumber, error, ipairs, open = type, tonumber, error, ipairs, io.open

local tz = {}

local getenv = os.getenv
local directory = (getenv and getenv("TZDIR")) or "/usr/share/zoneinfo" -- (TZDIR: as the C library reads it)
local cache = {} -- zone name -> parsed zone, or false and the reason it is not one
local cache_error = {}

-- tz.set_directory(path): where zone files are read from (the default:
-- $TZDIR, else /usr/share/zoneinfo); clears the cache. For tests and unusual
-- systems.
function tz.set_directory(path)
    if type(path) ~= "string" or path == "" then
        error("tz.set_directory: expected a directory path", 2)
    end
    directory = path
    cache, cache_error = {}, {}
end

local days_from_civil = calendar.days_from_civil

local function year_of(secs)
    return (calendar.civil_from_days(floor(secs / 86400)))
end

local function is_leap(y)
    return y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)
end

local month_days = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }

---------------------------------------------------------------------------
-- POSIX TZ strings (the footer): "CET-1CEST,M3.5.0,M10.5.0/3"

-- A name: letters, or <...> quoted. Returns name, next position.
local function posix_name(s, i)
    if sub(s, i, i) == "<" then
        local j = find(s, ">", i, true)
        if not j then
            return nil
        end
        return sub(s, i + 1, j - 1), j + 1
    end
    local name = match(s, "^%a%a%a+", i)
    if not name then
        return nil
    end
    return name, i + #name
end

-- [+-]hh[:mm[:ss]] as seconds (hours up to 167, RFC 8536). Returns seconds, next position.
local function posix_time(s, i)
    local sign, h, rest = match(s, "^([+-]?)(%d%d?%d?)()", i)
    if not h then
        return nil
    end
    local secs = tonumber(h) * 3600
    local mm, after = match(s, "^:(%d%d)()", rest)
    if mm then
        secs, rest = secs + tonumber(mm) * 60, after
        local ss
        ss, after = match(s, "^:(%d%d)()", rest)
        if ss then
            secs, rest = secs + tonumber(ss), after
        end
    end
    if sign == "-" then
        secs = -secs
    end
    return secs, rest
end

-- A transition rule: Jn, n or Mm.w.d, then [/time] (default 02:00).
local function posix_rule(s, i)
    local r = {}
    local j, n, rest = match(s, "^(J?)(%d+)()", i)
    if n then
        r.kind, r.day = j == "J" and "julian" or "zero", tonumber(n)
    else
        local m, w, d
        m, w, d, rest = match(s, "^M(%d%d?)%.(%d)%.(%d)()", i)
        if not m then
            return nil
        end
        r.kind, r.month, r.week, r.wday = "month", tonumber(m), tonumber(w), tonumber(d)
        if r.month < 1 or r.month > 12 or r.week < 1 or r.week > 5 or r.wday > 6 then
            return nil
        end
    end
    r.time = 7200
    if sub(s, rest, rest) == "/" then
        r.time, rest = posix_time(s, rest + 1)
        if not r.time then
            return nil
        end
    end
    return r, rest
end

-- tz.parse_posix(s): the parsed POSIX TZ string { std = { offset, abbr },
-- dst = nil | { offset, abbr }, start_rule, end_rule } (offsets in seconds
-- east of UTC), or nil and why.
function tz.parse_posix(s)
    if type(s) ~= "string" then
        return nil, "not a string"
    end
    local std, i = posix_name(s, 1)
    if not std then
        return nil, "no standard time name in " .. format("%q", s)
    end
    local off
    off, i = posix_time(s, i)
    if not off then
        return nil, "no standard offset in " .. format("%q", s)
    end
    local z = { std = { offset = 0 - off, abbr = std, isdst = false } }
    if i > #s then
        return z
    end
    local dst
    dst, i = posix_name(s, i)
    if not dst then
        return nil, "bad daylight time name in " .. format("%q", s)
    end
    local dst_off = 3600 - off
    if i <= #s and sub(s, i, i) ~= "," then
        local o
        o, i = posix_time(s, i)
        if not o then
            return nil, "bad daylight offset in " .. format("%q", s)
        end
        dst_off = 0 - o
    end
    z.dst = { offset = dst_off, abbr = dst, isdst = true }
    if sub(s, i, i) ~= "," then
        -- no rules: POSIX leaves them implementation-defined; the US rules are the usual default
        z.start_rule = { kind = "month", month = 3, week = 2, wday = 0, time = 7200 }
        z.end_rule = { kind = "month", month = 11, week = 1, wday = 0, time = 7200 }
        if i <= #s then
            return nil, "trailing text in " .. format("%q", s)
        end
        return z
    end
    z.start_rule, i = posix_rule(s, i + 1)
    if not z.start_rule or sub(s, i, i) ~= "," then
        return nil, "bad daylight start rule in " .. format("%q", s)
    end
    z.end_rule, i = posix_rule(s, i + 1)
    if not z.end_rule or i <= #s then
        return nil, "bad daylight end rule in " .. format("%q", s)
    end
    return z
end

-- Local seconds since 1970 (in the year y's local reckoning) at which rule r
-- fires, before its time of day is added.
local function rule_day(r, y)
    local jan1 = days_from_civil(y, 1, 1)
    if r.kind == "julian" then -- 1..365, February 29th never counted
        local d = r.day - 1
        if is_leap(y) and r.day >= 60 then
            d = d + 1
        end
        return jan1 + d
    elseif r.kind == "zero" then -- 0..365
        return jan1 + r.day
    end
    local first = days_from_civil(y, r.month, 1)
    local wday_first = (first + 4) % 7 -- 0 = Sunday
    local d = first + (r.wday - wday_first) % 7 + (r.week - 1) * 7
    local last = month_days[r.month] + ((r.month == 2 and is_leap(y)) and 1 or 0)
    while d >= first + last do
        d = d - 7
    end
    return d
end

-- The offset in force at UTC instant t under a parsed POSIX rule.
local function posix_at(z, t)
    if not z.dst then
        return z.std
    end
    local std, dst = z.std, z.dst
    -- look at the local year of t and its neighbours' transitions
    local y = year_of(t + std.offset)
    for _, year in ipairs({ y - 1, y, y + 1 }) do
        -- the start is given in standard local time, the end in daylight local time
        local s = rule_day(z.start_rule, year) * 86400 + z.start_rule.time - std.offset
        local e = rule_day(z.end_rule, year) * 86400 + z.end_rule.time - dst.offset
        if s < e then -- northern: daylight inside the year
            if t >= s and t < e then
                return dst
            end
        elseif year == y then -- southern: daylight across the new year
            if t < e or t >= s then
                return dst
            end
            return std
        end
    end
    return std
end

---------------------------------------------------------------------------
-- TZif files

local function u32(s, i)
    local a, b, c, d = byte(s, i, i + 3)
    return ((a * 256 + b) * 256 + c) * 256 + d
end

local function s32(s, i)
    local v = u32(s, i)
    return v >= 2147483648 and v - 4294967296 or v
end

local function s64(s, i)
    return s32(s, i) * 4294967296 + u32(s, i + 4)
end

local function counts(s, i)
    if sub(s, i, i + 3) ~= "TZif" or #s < i + 43 then
        return nil
    end
    return {
        version = byte(s, i + 4),
        isutcnt = u32(s, i + 20), isstdcnt = u32(s, i + 24), leapcnt = u32(s, i + 28),
        timecnt = u32(s, i + 32), typecnt = u32(s, i + 36), charcnt = u32(s, i + 40),
    }
end

-- tz.parse_tzif(data): a zone from the bytes of a TZif file: { times =
-- { utc seconds, ... }, types = { { offset, abbr, isdst }, ... }, index =
-- { type number per transition }, first = the type before any transition,
-- footer = parsed POSIX rule or nil }, or nil and why.
function tz.parse_tzif(data)
    local h = counts(data, 1)
    if not h then
        return nil, "not a TZif file"
    end
    local tsize, i = 4, 45
    if h.version >= 50 then -- '2', '3', '4': skip the 32-bit block, read the 64-bit one
        i = i + h.timecnt * 5 + h.typecnt * 6 + h.charcnt + h.leapcnt * 8 + h.isstdcnt + h.isutcnt
        h = counts(data, i)
        if not h then
            return nil, "TZif version 2+ file without its 64-bit header"
        end
        tsize, i = 8, i + 44
    end
    local need = i + h.timecnt * (tsize + 1) + h.typecnt * 6 + h.charcnt - 1
    if #data < need or h.typecnt < 1 then
        return nil, "truncated TZif file"
    end
    local z = { times = {}, index = {}, types = {} }
    for k = 1, h.timecnt do
        z.times[k] = tsize == 8 and s64(data, i) or s32(data, i)
        i = i + tsize
    end
    for k = 1, h.timecnt do
        z.index[k] = byte(data, i) + 1
        i = i + 1
    end
    local chars_at = i + h.typecnt * 6
    for k = 1, h.typecnt do
        local abbr_at = chars_at + byte(data, i + 5)
        local e = find(data, "\0", abbr_at, true) or abbr_at
        z.types[k] = { offset = s32(data, i), isdst = byte(data, i + 4) == 1, abbr = sub(data, abbr_at, e - 1) }
        i = i + 6
    end
    for k = 1, h.timecnt do
        if not z.types[z.index[k]] then
            return nil, "TZif transition names a missing type"
        end
    end
    -- instants before the first transition have time type 0 (RFC 8536 3.2)
    z.first = z.types[1]
    i = chars_at + h.charcnt + h.leapcnt * (tsize + 4) + h.isstdcnt + h.isutcnt
    if tsize == 8 then
        local footer = match(data, "^\n([^\n]*)\n", i)
        if footer and footer ~= "" then
            local rule, err = tz.parse_posix(footer)
            if not rule then
                return nil, "bad TZ footer: " .. err
            end
            z.footer = rule
        end
    end
    return z
end

-- A zone name: letters, digits, "_", "+", "-" in "/"-separated parts, the
-- first starting with a letter (no ".", so no path can leave the directory).
local function valid_name(name)
    return type(name) == "string" and #name <= 64 and find(name, "^%a[%w_+%-]*$") ~= nil
        or (type(name) == "string" and #name <= 64 and find(name, "^%a[%w_+%-]*/[%w_+%-/]*[%w_+%-]$") ~= nil
            and not find(name, "//", 1, true))
end

-- tz.load(name): the parsed zone for an IANA name such as "Europe/Berlin"
-- (cached), or nil and a message saying what is wrong with the name.
-- "UTC" always exists, with or without a tz database.
function tz.load(name)
    local z = cache[name]
    if z then
        return z
    elseif z == false then
        return nil, cache_error[name]
    end
    if not valid_name(name) then
        return nil, format("%s is not a time zone name (an IANA name like \"Europe/Berlin\" or "
            .. "\"America/Los_Angeles\")", type(name) == "string" and format("%q", name) or type(name))
    end
    local err
    local f = open(directory .. "/" .. name, "rb")
    if f then
        local data = f:read(65536)
        f:close()
        z, err = tz.parse_tzif(data or "")
        if not z then
            err = format("time zone %q: %s (%s/%s)", name, err, directory, name)
        end
    elseif name == "UTC" or name == "Etc/UTC" then
        z = { times = {}, index = {}, types = { { offset = 0, abbr = "UTC", isdst = false } } }
        z.first = z.types[1]
    else
        err = format("unknown time zone %q (not in the tz database at %s; use an IANA name like "
            .. "\"Europe/Berlin\" or \"America/Los_Angeles\")", name, directory)
    end
    if not z then
        cache[name], cache_error[name] = false, err
        return nil, err
    end
    cache[name] = z
    return z
end

-- tz.check(name): true when name is a zone of the tz database, else nil and why.
function tz.check(name)
    local z, err = tz.load(name)
    if not z then
        return nil, err
    end
    return true
end

-- tz.at(name, t): the local time type in force in zone name at UTC instant t
-- (Unix seconds): offset (seconds east of UTC), abbreviation (such as "CEST",
-- or "+0530" where the database has none) and isdst; or nil and why.
function tz.at(name, t)
    local z, err = tz.load(name)
    if not z then
        return nil, err
    end
    local times = z.times
    local n = #times
    local ty
    if n == 0 or t < times[1] then
        ty = (n == 0 and z.footer) and posix_at(z.footer, t) or z.first
    elseif t >= times[n] and z.footer then
        ty = posix_at(z.footer, t)
    else
        local lo, hi = 1, n -- the last transition at or before t
        while lo < hi do
            local mid = floor((lo + hi + 1) / 2)
            if times[mid] <= t then
                lo = mid
            else
                hi = mid - 1
            end
        end
        ty = z.types[z.index[lo]]
    end
    return ty.offset, ty.abbr, ty.isdst
end

return tz
