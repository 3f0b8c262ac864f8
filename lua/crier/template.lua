-- crier.template: the template language for notification content (email
-- subjects and bodies, webhook and Kafka bodies, feed text). compile() parses
-- a template once into a tree of Lua closures; the render function it returns
-- runs per recipient. Templates never evaluate Lua and values are never parsed
-- as template syntax, so hostile payload strings are inserted literally
-- (escaped for HTML or JSON when asked). Results are identical in plain
-- LuaJIT, crier serve and nginx: dates are computed here, not by os.date.
--
-- Syntax
--   {{ payload.invoice.id }}    a value by dotted path; numeric segments index
--                               lists (payload.lines.1). Missing values are a
--                               render error unless a filter such as default
--                               supplies one. Numbers print without a trailing
--                               ".0", booleans as true/false; a table is an
--                               error (use | json).
--   {{ 'text' }} {{ 12 }}       literals: '...' or "..." (no escapes), numbers,
--                               true, false, null. Literal "{{", "{%" or "{#"
--                               in text: {{ '{{' }}, {{ '{%' }}, {{ '{#' }}.
--   {{ v | f | g(arg, ...) }}   filters, applied left to right; an argument is a
--                               literal or a path; some filters take named
--                               arguments: plural(one='# item', other='# items').
--   {% if cond %} ... {% elif cond %} ... {% else %} ... {% endif %}
--       cond: a value (false when nil, false, null, "" or an empty list or
--       object; 0 is true), "not cond", "a == b", "!=", "<", ">", "<=", ">="
--       (a, b: values with filters), "and", "or", parentheses. == and != never
--       convert types ("1" ~= 1; null == a missing value). Ordering needs two
--       numbers or two strings (byte-wise), otherwise it is a render error.
--   {% for item in payload.lines %} ... {% else %} (empty) {% endfor %}
--       iterates a list (a missing or null value counts as empty; an object or
--       a string is an error). item shadows outer names; loop.index (from 1),
--       loop.first, loop.last and loop.length belong to the innermost loop.
--   {# comment #}
--   {{- -}} {%- -%} {#- -#}     a "-" beside the delimiter removes all
--                               whitespace (newlines included) on that side.
--
-- Filters (template.filters; a missing value passes through as nil, so it
-- can be followed by default; each takes time linear in its input, as does
-- compiling, since one call cannot be interrupted by the rules' limits):
--   default(x)      x when the value is missing or null
--   upper, lower    ASCII case mapping (other bytes unchanged)
--   trim            strips leading and trailing whitespace
--   truncate(n[, end])  at most n UTF-8 characters, ending with end
--                   (default "...", counted in n; whitespace before it is
--                   dropped) when shortened
--   money(currency[, group[, decimal]])  integer minor units as
--                   "1234.50 EUR": decimals per ISO 4217
--                   (template.currency_decimals; 2 when unlisted), "-" for
--                   negatives, fractional minor units rounded half away from
--                   zero, no thousands separator unless group is given
--                   (money('USD', ',') gives "1,234.50 USD"); decimal
--                   replaces ".". With the currency alone and a render
--                   locale (the context's locale field; crier.locale), the
--                   locale's way instead: "$1,234.50", "1.234,50 €",
--                   "￥1,235". Numbers beyond ±(2^53-1) are refused (a
--                   double does not hold them exactly); digit strings
--                   ("123456") are exact at any size.
--   date([format[, zone]])  an ISO-8601 string (YYYY-MM-DD, optionally
--                   THH:MM[:SS[.fff]] and Z or +HH:MM / -HHMM / +HH; no offset
--                   means UTC; a leap second :60 rolls over) or unix
--                   seconds (fractions dropped), printed in the time zone
--                   zone (an IANA name, crier.tz), else the recipient's
--                   recipient.time_zone when rendering for one, else UTC, with
--                   %Y %m %d %H %M %S %b %B %a %A %e %j %y %I %p %F %T %%,
--                   %Z (the zone's abbreviation: "CEST", "UTC") and %z
--                   ("+0200") (names in the render locale's language,
--                   English when it has none); default format
--                   "%Y-%m-%dT%H:%M:%SZ" in UTC, RFC 3339 with the offset
--                   ("2026-03-29T03:00:00+02:00") in a zone. The formats
--                   'short', 'medium', 'long', 'full' (dates) and 'time' are
--                   the locale's styles (English without one). Years
--                   0000-9999.
--   json            the value as JSON text (crier.json.encode)
--   length          characters of a string (UTF-8), items of a list, keys of
--                   an object
--   join([sep])     a list's items joined with sep (default ", ")
--   plural(one=..., few=..., other=...)  the form for a count's CLDR plural
--                   category (zero one two few many other) in the render's
--                   locale (English rules without one); a missing category
--                   uses other, which is required; "#" in the form is the
--                   count, with the locale's separators
-- There is no "safe" filter: with opts.html every inserted value is escaped,
-- whatever its filters. A filter is function(value, args, ctx) returning the
-- new value, or nil and a message to fail the render (ctx: what the template
-- renders, with ctx.recipient when it renders for a recipient and ctx.locale,
-- the render's locale).
--
-- Errors are single lines: "<name>:<line>: <problem> (column <c>)", with
-- "; <hint>" after it when there is one; columns count bytes from 1.

local json = require "crier.json"
local locale = require "crier.locale"
local calendar = require "crier.calendar"
local tz = require "crier.tz"

local byte, find, format, gmatch, gsub, lower, match, rep, sub, upper = string.byte, string.find, string.format,
    string.gmatch, string.gsub, string.lower, string.match, string.rep, string.sub, string.upper
local concat, sort = table.concat, table.sort
local floor = math.floor
local type, tostring, tonumber, error, next, pairs, ipairs, pcall, setmetatable, getmetatable =
    type, tostring, tonumber, error, next, pairs, ipairs, pcall, setmetatable, getmetatable

local null, array_mt = json.null, json.array_mt
local format_number = json.format_number

local template = {}

local html_escapes = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }

-- template.escape_html(s): s with & < > " ' replaced by HTML entities.
function template.escape_html(s)
    if not find(s, "[&<>\"']") then
        return s
    end
    return (gsub(s, "[&<>\"']", html_escapes))
end
local escape_html = template.escape_html

---------------------------------------------------------------------------
-- Values

-- A short single-line description of v for error messages.
local function describe(v)
    local vt = type(v)
    if v == nil then
        return "a missing value"
    elseif v == null then
        return "null"
    elseif vt == "string" then
        local s = v
        if #s > 40 then
            local cut = 38
            while cut > 1 and byte(s, cut) >= 0x80 and byte(s, cut) < 0xC0 do
                cut = cut - 1
            end
            s = sub(s, 1, cut - 1) .. "..."
        end
        s = gsub(s, '[%c"\\]', function(c)
            return format("\\%03d", byte(c))
        end)
        return 'the string "' .. s .. '"'
    elseif vt == "number" then
        return "the number " .. (format_number(v) or tostring(v))
    elseif vt == "boolean" then
        return tostring(v)
    elseif vt == "table" then
        return "a table"
    end
    return "a " .. vt
end

-- The kind of v for comparison errors.
local function kind(v)
    if v == nil then
        return "a missing value"
    elseif v == null then
        return "null"
    end
    return "a " .. type(v)
end

-- Condition truth: nil, false, null, "" and empty lists/objects are false.
local function truthy(v)
    if v == nil or v == false or v == "" then
        return false
    end
    if type(v) == "table" and next(v) == nil then
        local mt = getmetatable(v)
        if not mt or mt == array_mt then
            return false -- {}, json.array(), json.null, json.empty_array
        end
    end
    return true
end

-- Text of a scalar for filters that work on text; nil, message otherwise.
local function as_text(filter, v)
    local vt = type(v)
    if vt == "string" then
        return v
    elseif vt == "number" then
        return format_number(v) or tostring(v)
    elseif vt == "boolean" then
        return v and "true" or "false"
    end
    return nil, filter .. ": expected text, got " .. describe(v)
end

local function utf8_length(s)
    local _, continuation = gsub(s, "[\128-\191]", "")
    return #s - continuation
end

-- The first n UTF-8 characters of s.
local function utf8_prefix(s, n)
    local count = 0
    for i = 1, #s do
        local b = byte(s, i)
        if b < 0x80 or b >= 0xC0 then
            if count == n then
                return sub(s, 1, i - 1)
            end
            count = count + 1
        end
    end
    return s
end

-- Whitespace as %s sees it: space, \t, \n, \v, \f, \r.
local function is_space(b)
    return b == 32 or (b and b >= 9 and b <= 13)
end

-- The index of the last byte of s[1..last] that is not whitespace (0 when
-- none): a backward scan, linear where match(s, "^(.-)%s*$") is quadratic on
-- runs of whitespace.
local function last_non_space(s, last)
    while last > 0 and is_space(byte(s, last)) do
        last = last - 1
    end
    return last
end

-- s without leading and trailing whitespace, in linear time.
local function trim_space(s)
    local first = find(s, "%S")
    if not first then
        return ""
    end
    return sub(s, first, last_non_space(s, #s))
end

---------------------------------------------------------------------------
-- Dates: proleptic Gregorian calendar in UTC (crier.calendar).

local days_from_civil, civil_from_days = calendar.days_from_civil, calendar.civil_from_days

-- template.days_from_civil(y, m, d) -> days since 1970-01-01, and
-- template.civil_from_days(days) -> y, m, d: the calendar the date filter
-- uses (crier.calendar's; kept here for callers of crier.template).
template.days_from_civil = days_from_civil
template.civil_from_days = civil_from_days

local function days_in_month(y, m)
    if m == 2 then
        return (y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)) and 29 or 28
    end
    return (m == 4 or m == 6 or m == 9 or m == 11) and 30 or 31
end

local MIN_TIME = days_from_civil(0, 1, 1) * 86400
local MAX_TIME = days_from_civil(9999, 12, 31) * 86400 + 86399

-- Unix seconds of an ISO-8601 timestamp, or nil when s is not one.
local function parse_iso8601(s)
    local y, mo, d, rest = match(s, "^(%d%d%d%d)%-(%d%d)%-(%d%d)(.*)$")
    if not y then
        return nil
    end
    y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
    local h, mi, sec, offset = 0, 0, 0, 0
    if rest ~= "" then
        local hh, mm, after = match(rest, "^[Tt ](%d%d):(%d%d)(.*)$")
        if not hh then
            return nil
        end
        h, mi, rest = tonumber(hh), tonumber(mm), after
        local ss
        ss, after = match(rest, "^:(%d%d)(.*)$")
        if ss then
            sec, rest = tonumber(ss), match(after, "^[%.,]%d+(.*)$") or after
        end
        if rest ~= "Z" and rest ~= "z" and rest ~= "" then
            local sign, oh, om = match(rest, "^([+-])(%d%d):?(%d%d)$")
            if not sign then
                sign, oh = match(rest, "^([+-])(%d%d)$")
                om = "00"
            end
            if not sign then
                return nil
            end
            oh, om = tonumber(oh), tonumber(om)
            if oh > 23 or om > 59 then
                return nil
            end
            offset = (oh * 60 + om) * 60
            if sign == "-" then
                offset = -offset
            end
        end
    end
    if mo < 1 or mo > 12 or d < 1 or d > days_in_month(y, mo) or h > 23 or mi > 59 or sec > 60 then
        return nil
    end
    return days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset
end

local date_directives = {
    Y = function(t) return format("%04d", t.year) end,
    y = function(t) return format("%02d", t.year % 100) end,
    m = function(t) return format("%02d", t.month) end,
    d = function(t) return format("%02d", t.day) end,
    e = function(t) return format("%2d", t.day) end,
    H = function(t) return format("%02d", t.hour) end,
    I = function(t) return format("%02d", (t.hour + 11) % 12 + 1) end,
    p = function(t) return t.hour < 12 and t.names.am or t.names.pm end,
    M = function(t) return format("%02d", t.min) end,
    S = function(t) return format("%02d", t.sec) end,
    j = function(t) return format("%03d", t.yday) end,
    b = function(t) return t.names.months_abbr[t.month] end,
    B = function(t) return t.names.months[t.month] end,
    a = function(t) return t.names.days_abbr[t.wday] end,
    A = function(t) return t.names.days[t.wday] end,
    F = function(t) return format("%04d-%02d-%02d", t.year, t.month, t.day) end,
    T = function(t) return format("%02d:%02d:%02d", t.hour, t.min, t.sec) end,
    Z = function(t) return t.abbr end,
    z = function(t)
        local o = t.offset
        local sign = o < 0 and "-" or "+"
        o = o < 0 and -o or o
        return format("%s%02d%02d", sign, floor(o / 3600), floor(o % 3600 / 60))
    end,
    ["%"] = function() return "%" end,
}
local date_directive_list = "%Y %m %d %H %M %S %b %B %a %A %e %j %y %I %p %F %T %Z %z %%"

-- nil when fmt is a valid date format, else a message.
local function check_date_format(fmt)
    if type(fmt) ~= "string" then
        return "date: the format must be a string, got " .. describe(fmt)
    end
    if locale.STYLES[fmt] then
        return nil
    end
    local i = 1
    while true do
        i = find(fmt, "%", i, true)
        if not i then
            return nil
        end
        local c = sub(fmt, i + 1, i + 1)
        if not date_directives[c] then
            return format("date: unknown directive '%%%s' in the format (known: %s)", c, date_directive_list)
        end
        i = i + 2
    end
end

local DEFAULT_DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

-- The render's locale tag (ctx.locale), or nil.
local function render_locale(ctx)
    local loc = type(ctx) == "table" and ctx.locale or nil
    return type(loc) == "string" and loc or nil
end

-- The zone a date is printed in: the filter's second argument, else the
-- recipient's time_zone (ctx.recipient, when rendering for one), else UTC.
-- Returns the zone name or nil for UTC, or false and a message.
local function date_zone(args, ctx)
    local zone = args[2]
    if zone == nil then
        local recipient = type(ctx) == "table" and ctx.recipient
        zone = type(recipient) == "table" and recipient.time_zone or nil
        if zone == null then
            zone = nil
        end
    end
    if zone == nil or zone == "UTC" then
        return nil
    end
    local ok, err = tz.check(zone)
    if not ok then
        return false, "date: " .. err
    end
    return zone
end

local function format_date(value, args, ctx)
    if value == nil or value == null then
        return nil
    end
    local fmt = args[1]
    if fmt == nil then
        fmt = DEFAULT_DATE_FORMAT
    end
    local bad = check_date_format(fmt)
    if bad then
        return nil, bad
    end
    local zone, zone_err = date_zone(args, ctx)
    if zone == false then
        return nil, zone_err
    end
    local secs
    if type(value) == "number" then
        if value ~= value then
            return nil, "date: expected an ISO-8601 timestamp or unix seconds, got " .. describe(value)
        end
        secs = floor(value)
    elseif type(value) == "string" then
        secs = parse_iso8601(value)
        if not secs then
            return nil, "date: expected an ISO-8601 timestamp or unix seconds, got " .. describe(value)
        end
    else
        return nil, "date: expected an ISO-8601 timestamp or unix seconds, got " .. describe(value)
    end
    if secs < MIN_TIME or secs > MAX_TIME then
        return nil, "date: " .. describe(value) .. " is outside the years 0000-9999"
    end
    local offset, abbr = 0, "UTC"
    if zone then -- (crier.tz: the zone's offset at this instant)
        offset, abbr = tz.at(zone, secs)
        if fmt == DEFAULT_DATE_FORMAT then -- RFC 3339 with the zone's offset
            fmt = "%Y-%m-%dT%H:%M:%S" .. (offset == 0 and "Z" or gsub(date_directives.z({ offset = offset }),
                "(%d%d)$", ":%1"))
        end
    end
    local lsecs = secs + offset
    local days = floor(lsecs / 86400)
    local rest = lsecs - days * 86400
    local y, m, d = civil_from_days(days)
    local t = {
        year = y, month = m, day = d,
        hour = floor(rest / 3600), min = floor(rest % 3600 / 60), sec = rest % 60,
        wday = (days + 4) % 7 + 1, -- 1970-01-01 was a Thursday; 1 = Sunday
        yday = days - days_from_civil(y, 1, 1) + 1,
        offset = offset, abbr = abbr,
    }
    local loc = render_locale(ctx)
    local formats = loc and locale.formats(loc)
    if locale.STYLES[fmt] then
        return locale.format_style(formats, fmt, t)
    end
    t.names = locale.names(formats)
    return (gsub(fmt, "%%(.)", function(c)
        return date_directives[c](t)
    end))
end

---------------------------------------------------------------------------
-- Money

-- template.currency_decimals: ISO 4217 minor-unit digits where they are not
-- 2. money() uses 2 for any currency not listed.
template.currency_decimals = {
    BIF = 0, CLP = 0, DJF = 0, GNF = 0, ISK = 0, JPY = 0, KMF = 0, KRW = 0, PYG = 0, RWF = 0, UGX = 0,
    UYI = 0, VND = 0, VUV = 0, XAF = 0, XOF = 0, XPF = 0,
    BHD = 3, IQD = 3, JOD = 3, KWD = 3, LYD = 3, OMR = 3, TND = 3,
    CLF = 4, UYW = 4,
}

-- The largest integer a double holds exactly, with all below it: 2^53 - 1.
local MAX_EXACT = 2 ^ 53 - 1

local function check_currency(code)
    if code == nil or code == null then
        return "money: the currency is missing"
    end
    if type(code) ~= "string" or not find(code, "^%a%a%a$") then
        return "money: the currency must be a 3-letter code like 'EUR', got " .. describe(code)
    end
end

local function check_separator(filter, what, sep)
    if sep ~= nil and type(sep) ~= "string" then
        return filter .. ": the " .. what .. " must be a string, got " .. describe(sep)
    end
end

local function money(value, args, ctx)
    local loc = render_locale(ctx)
    if value == nil or value == null then
        return nil
    end
    local currency, group, point = args[1], args[2], args[3]
    local bad = check_currency(currency) or check_separator("money", "group separator", group)
        or check_separator("money", "decimal separator", point)
    if bad then
        return nil, bad
    end
    currency = upper(currency)
    local negative, digits
    if type(value) == "number" then
        if value ~= value or value > MAX_EXACT or value < -MAX_EXACT then
            return nil, "money: " .. describe(value) .. " is not an exact amount of minor units: it is outside "
                .. "±9007199254740991, what a number holds exactly; pass larger amounts as a string of digits"
        end
        local units = value < 0 and -value or value
        if units ~= floor(units) then
            units = floor(units + 0.5) -- (exact: a fraction means units < 2^52)
        end
        negative, digits = value < 0 and units ~= 0, format("%.0f", units)
    elseif type(value) == "string" and find(value, "^%-?%d+$") then
        negative = sub(value, 1, 1) == "-"
        digits = match(value, "^%-?0*(%d-)$")
        if digits == "" then
            digits, negative = "0", false
        end
    else
        return nil, "money: expected an amount in minor units (an integer), got " .. describe(value)
    end
    local decimals = template.currency_decimals[currency] or 2
    if #digits <= decimals then
        digits = rep("0", decimals + 1 - #digits) .. digits
    end
    local whole, fraction = sub(digits, 1, #digits - decimals), sub(digits, #digits - decimals + 1)
    local formats = group == nil and point == nil and loc and locale.formats(loc)
    if formats then
        return locale.format_money(formats, negative, whole, fraction, currency)
    end
    if group and group ~= "" and #whole > 3 then
        local first = (#whole - 1) % 3 + 1
        local parts = { sub(whole, 1, first) }
        for i = first + 1, #whole, 3 do
            parts[#parts + 1] = sub(whole, i, i + 2)
        end
        whole = concat(parts, group)
    end
    local out = whole
    if decimals > 0 then
        out = out .. (point or ".") .. fraction
    end
    return (negative and "-" or "") .. out .. " " .. currency
end

---------------------------------------------------------------------------
-- Filters

local function is_count(n)
    return type(n) == "number" and n >= 0 and n == floor(n) and n < 2 ^ 31
end

local function truncate(value, args)
    if value == nil or value == null then
        return nil
    end
    local n, ending = args[1], args[2]
    if not is_count(n) then
        return nil, "truncate: the length must be a whole number >= 0, got " .. describe(n)
    end
    local bad = check_separator("truncate", "ending", ending)
    if bad then
        return nil, bad
    end
    local s, err = as_text("truncate", value)
    if not s then
        return nil, err
    end
    if utf8_length(s) <= n then
        return s
    end
    ending = ending or "..."
    local room = n - utf8_length(ending)
    if room <= 0 then
        return utf8_prefix(s, n)
    end
    local prefix = utf8_prefix(s, room)
    return sub(prefix, 1, last_non_space(prefix, #prefix)) .. ending
end

local function text_filter(name, fn)
    return function(value)
        if value == nil or value == null then
            return nil
        end
        local s, err = as_text(name, value)
        if not s then
            return nil, err
        end
        return fn(s)
    end
end

local function length(value)
    if value == nil or value == null then
        return nil
    end
    local vt = type(value)
    if vt == "string" then
        return utf8_length(value)
    elseif vt == "table" then
        local n = #value
        if n == 0 then
            for _ in pairs(value) do
                n = n + 1
            end
        end
        return n
    end
    return nil, "length: expected text, a list or an object, got " .. describe(value)
end

local function join(value, args)
    if value == nil or value == null then
        return nil
    end
    local sep = args[1]
    if sep == nil then
        sep = ", "
    end
    local bad = check_separator("join", "separator", sep)
    if bad then
        return nil, bad
    end
    if type(value) ~= "table" or (#value == 0 and next(value) ~= nil) then
        return nil, "join: expected a list, got " .. describe(value)
    end
    local parts = {}
    for i = 1, #value do
        local item = value[i]
        local s = item ~= null and as_text("join", item)
        if not s then
            return nil, format("join: item %d is %s, not text", i, describe(item))
        end
        parts[i] = s
    end
    return concat(parts, sep)
end

local function to_json(value)
    if value == nil then
        return nil
    end
    local text, err = json.encode(value)
    if not text then
        return nil, "json: " .. err
    end
    return text
end

-- plural(zero=, one=, two=, few=, many=, other=): the form for the value's
-- CLDR plural category in the render's locale (crier.locale; English rules
-- when the render has no locale); a category without a form uses other. "#"
-- in the form is replaced by the value, written with the locale's separators.
local function plural(value, args, ctx)
    local loc = render_locale(ctx)
    if value == nil or value == null then
        return nil
    end
    local category = locale.plural_category(loc, value)
    if not category then
        return nil, "plural: expected a number or a decimal string, got " .. describe(value)
    end
    local form = args[category]
    if form == nil or form == null then
        form = args.other
    end
    local s, err = as_text("plural", form)
    if not s then
        return nil, err
    end
    if find(s, "#", 1, true) then
        local text = type(value) == "number" and (format_number(value) or tostring(value)) or value
        text = locale.format_number(loc and locale.formats(loc), text)
        s = gsub(s, "#", (gsub(text, "%%", "%%%%")))
    end
    return s
end

-- Filters: name -> function(value, args, ctx) returning the new value, or
-- nil and a message to fail the render. args holds the arguments' values
-- (literals or the values of paths; named arguments, name='x', under their
-- names; do not modify it); ctx is the render's context (ctx.locale: its
-- locale tag, ctx.recipient: the recipient it renders for). A filter sees nil or json.null for
-- a missing value; the renderer fails if nil or null comes out of the last
-- filter. Pass opts.filters to compile() to use another set.
template.filters = {
    -- default(fallback): fallback when the value is missing or JSON null.
    default = function(value, args)
        if value == nil or value == null then
            return args[1]
        end
        return value
    end,
    upper = text_filter("upper", upper),
    lower = text_filter("lower", lower),
    trim = text_filter("trim", trim_space),
    truncate = truncate,
    money = money,
    date = format_date,
    json = to_json,
    length = length,
    join = join,
    plural = plural,
}

-- Arity and compile-time argument checks of the built-in filters, keyed by
-- function so they follow a filter renamed in opts.filters. check(args)
-- returns a message or nil; args[i] is the literal or DYNAMIC for a path.
local DYNAMIC = setmetatable({}, { __tostring = function() return "a path" end })
local function literal(v)
    return v ~= DYNAMIC and v or nil
end
local filter_rules = {
    [template.filters.default] = { 1, 1 },
    [template.filters.upper] = { 0, 0 },
    [template.filters.lower] = { 0, 0 },
    [template.filters.trim] = { 0, 0 },
    [truncate] = { 1, 2, function(args)
        local n = literal(args[1])
        if n ~= nil and not is_count(n) then
            return "truncate: the length must be a whole number >= 0, got " .. describe(n)
        end
        return check_separator("truncate", "ending", literal(args[2]))
    end },
    [money] = { 1, 3, function(args)
        return (args[1] ~= DYNAMIC and check_currency(args[1]))
            or check_separator("money", "group separator", literal(args[2]))
            or check_separator("money", "decimal separator", literal(args[3]))
    end },
    [format_date] = { 0, 2, function(args)
        local fmt = literal(args[1])
        local zone = literal(args[2])
        if zone ~= nil and zone ~= "UTC" then
            local ok, err = tz.check(zone)
            if not ok then
                return "date: " .. err
            end
        end
        return fmt ~= nil and check_date_format(fmt) or nil
    end },
    [to_json] = { 0, 0 },
    [length] = { 0, 0 },
    [join] = { 0, 1, function(args)
        return check_separator("join", "separator", literal(args[1]))
    end },
    [plural] = { 0, math.huge, function(args)
        if args[1] ~= nil then
            return "plural: give the forms by category, e.g. plural(one='# item', other='# items') (categories: "
                .. "zero, one, two, few, many, other; CLDR's, per language)"
        end
        if args.other == nil then
            return "plural: the form for 'other' is missing (every language has it; a category without a form "
                .. "uses it), e.g. plural(one='# item', other='# items')"
        end
        for name, v in pairs(args) do
            if v ~= DYNAMIC and type(v) ~= "string" then
                return "plural: the form for '" .. tostring(name) .. "' must be a string, got " .. describe(v)
            end
        end
    end, named = locale.CATEGORIES, named_list = "zero, one, two, few, many, other" },
}

---------------------------------------------------------------------------
-- Parsing: template text -> tree of nodes. A parse error is raised as a
-- failure_mt table and returned by compile() as nil, message.

local failure_mt = {}
local MAX_DEPTH = 32 -- nested blocks, and nested not/parentheses in a condition
local MAX_TERMS = 64 -- and/or terms in one condition

-- Byte offsets where each line of src starts.
local function line_starts(src)
    local starts, i = { 1 }, 1
    while true do
        i = find(src, "\n", i, true)
        if not i then
            return starts
        end
        i = i + 1
        starts[#starts + 1] = i
    end
end

local function locate(P, pos)
    local starts = P.lines
    local lo, hi = 1, #starts
    while lo < hi do
        local mid = floor((lo + hi + 1) / 2)
        if starts[mid] <= pos then
            lo = mid
        else
            hi = mid - 1
        end
    end
    return lo, pos - starts[lo] + 1
end

-- "<name>:<line>: " and " (column <c>)" for a byte position.
local function location(P, pos)
    local line, col = locate(P, pos)
    return format("%s:%d: ", P.name, line), format(" (column %d)", col)
end

local function message(P, pos, problem, hint)
    local before, after = location(P, pos)
    return before .. problem .. after .. (hint and ("; " .. hint) or "")
end

local function fail(P, pos, problem, hint)
    error(setmetatable({ message = message(P, pos, problem, hint) }, failure_mt), 0)
end

-- Source text between two byte positions, on one line.
local function excerpt(P, from, to)
    return (gsub(trim_space(sub(P.src, from, to)), "%s+", " "))
end

local two_char_ops = { ["=="] = true, ["!="] = true, ["<="] = true, [">="] = true }
local one_char_ops = { ["<"] = true, [">"] = true, ["|"] = true, ["("] = true, [")"] = true, [","] = true }

-- Splits a tag's inside, from pos up to the close delimiter ("}}" or "%}"),
-- into tokens { k = "lit"|"path"|"op"|"end", v, s = source text, p = start,
-- e = end }. Returns the tokens, the position after the tag and whether the
-- tag ended with "-".
local function lex(P, pos, close, open, opener)
    local src = P.src
    local toks = {}
    while true do
        pos = find(src, "%S", pos)
        if not pos then
            fail(P, open, "unterminated '" .. opener .. "'", "missing '" .. close .. "'")
        end
        local c = sub(src, pos, pos)
        local two = sub(src, pos, pos + 1)
        if two == close or (c == "-" and sub(src, pos + 1, pos + 2) == close) then
            local trim = c == "-"
            toks[#toks + 1] = { k = "end", p = pos, e = pos - 1, s = close }
            return toks, pos + (trim and 3 or 2), trim
        end
        local tok
        if c == "'" or c == '"' then
            local q = find(src, c, pos + 1, true)
            if not q then
                fail(P, pos, "unterminated string", "missing " .. c)
            end
            tok = { k = "lit", v = sub(src, pos + 1, q - 1), e = q }
        elseif find(c, "[%w_]") or (c == "-" and find(src, "^%d", pos + 1)) then
            local s, e = find(src, "^%-?[%w_%.]+", pos)
            local word = sub(src, s, e)
            tok = { e = e }
            if find(word, "^%-?%d+$") or find(word, "^%-?%d+%.%d+$") then
                tok.k, tok.v = "lit", tonumber(word)
            else
                local segs, texts = {}, {}
                for seg in gmatch(word, "[^%.]+") do
                    texts[#texts + 1] = seg
                end
                local ok = #texts > 0 and not find(word, "%.%.") and sub(word, -1) ~= "."
                    and find(texts[1], "^[%a_][%w_]*$")
                for i = 1, #texts do
                    local seg = texts[i]
                    if find(seg, "^%d+$") and i > 1 then
                        segs[i] = tonumber(seg)
                    elseif find(seg, "^[%a_][%w_]*$") then
                        segs[i] = seg
                    else
                        ok = false
                    end
                end
                if not ok then
                    fail(P, pos, "bad path '" .. word .. "'")
                end
                tok.k, tok.v, tok.texts = "path", segs, texts
            end
        elseif two_char_ops[two] then
            tok = { k = "op", v = two, e = pos + 1 }
        elseif c == "=" and #toks >= 2 and toks[#toks].k == "path" and toks[#toks - 1].k == "op"
            and (toks[#toks - 1].v == "(" or toks[#toks - 1].v == ",") then
            tok = { k = "op", v = "=", e = pos } -- a named filter argument: f(name='x')
        elseif one_char_ops[c] then
            tok = { k = "op", v = c, e = pos }
        else
            fail(P, pos, "unexpected character '" .. c .. "'",
                (c == "=" or c == "!") and "compare with == or !=" or nil)
        end
        tok.p, tok.s = pos, sub(src, pos, tok.e)
        toks[#toks + 1] = tok
        pos = tok.e + 1
    end
end

local function peek(P)
    return P.toks[P.i]
end

local function take(P)
    local t = P.toks[P.i]
    if t.k ~= "end" then
        P.i = P.i + 1
    end
    return t
end

local function show(t)
    if t.k == "end" then
        return "end of tag"
    elseif t.k == "lit" and type(t.v) == "string" then
        return "string " .. t.s
    end
    return "'" .. t.s .. "'"
end

local function is_op(t, op)
    return t.k == "op" and t.v == op
end

local function is_word(t, word)
    return t.k == "path" and t.s == word
end

local function expect_end(P, expected)
    local t = take(P)
    if t.k ~= "end" then
        fail(P, t.p, "unexpected " .. show(t) .. " in '" .. P.tag .. "'", "expected " .. expected)
    end
end

local reserved = { ["true"] = true, ["false"] = true, null = true, loop = true, ["and"] = true, ["or"] = true,
    ["not"] = true, ["in"] = true }
local loop_fields = { index = true, first = true, last = true, length = true }
local word_literals = { ["true"] = true, ["false"] = false, null = null }

-- A path token resolved against the loop variables in scope.
local function resolve_path(P, t)
    local segs, texts = t.v, t.texts
    local first = segs[1]
    local node
    for i = #P.scopes, 1, -1 do
        local scope = P.scopes[i]
        if scope.name == first then
            node = { t = "var", slot = scope.slot }
            break
        end
    end
    if not node and first == "loop" and #P.scopes > 0 then
        local field = segs[2]
        if #segs ~= 2 or not loop_fields[field] then
            fail(P, t.p, "'" .. t.s .. "' is not a loop field", "loop has index, first, last and length")
        end
        return { t = "loop", field = field, slot = P.scopes[#P.scopes].slot, p = t.p, e = t.e }
    end
    if not node then
        node = { t = "ctx" }
        if P.paths then
            local line, column = locate(P, t.p)
            P.paths[#P.paths + 1] = { path = texts, line = line, column = column }
        end
    end
    local from = node.t == "var" and 2 or 1
    node.segs, node.alts = {}, {}
    for i = from, #segs do
        node.segs[#node.segs + 1] = segs[i]
        node.alts[#node.segs] = type(segs[i]) == "number" and texts[i] or false
    end
    node.p, node.e = t.p, t.e
    return node
end

local function parse_operand(P)
    local t = take(P)
    if t.k == "lit" then
        return { t = "lit", v = t.v, p = t.p, e = t.e }
    elseif t.k == "path" then
        if word_literals[t.s] ~= nil then
            return { t = "lit", v = word_literals[t.s], p = t.p, e = t.e }
        end
        return resolve_path(P, t)
    end
    fail(P, t.p, "expected a value in '" .. P.tag .. "', got " .. show(t))
end

local function known_filters(P)
    local names = {}
    for k, v in pairs(P.filters) do
        if type(k) == "string" and type(v) == "function" then
            names[#names + 1] = k
        end
    end
    sort(names)
    return "known: " .. concat(names, ", ")
end

local function count_words(n)
    return n == 1 and "1 argument" or (n .. " arguments")
end

-- value := operand ( "|" name [ "(" arg { "," arg } ")" ] )*
-- arg := operand | word "=" operand
local function parse_value(P)
    local base = parse_operand(P)
    local filters, last = nil, base.e
    while is_op(peek(P), "|") do
        take(P)
        local nt = take(P)
        if nt.k ~= "path" or #nt.v ~= 1 then
            fail(P, nt.p, "expected a filter name after '|' in '" .. P.tag .. "', got " .. show(nt))
        end
        local fn = P.filters[nt.s]
        if type(fn) ~= "function" then
            fail(P, nt.p, "unknown filter '" .. nt.s .. "'", known_filters(P))
        end
        local filter = { name = nt.s, fn = fn, p = nt.p, args = {} }
        local values, dynamic = {}, false
        last = nt.e
        if is_op(peek(P), "(") then
            take(P)
            if is_op(peek(P), ")") then
                last = take(P).e
            else
                while true do
                    local key
                    local nt2 = P.toks[P.i + 1]
                    if peek(P).k == "path" and nt2 and is_op(nt2, "=") then
                        local name = take(P)
                        take(P)
                        key = name.s
                        if #name.v ~= 1 then
                            fail(P, name.p, "bad argument name '" .. key .. "'")
                        elseif filter.named and filter.named[key] then
                            fail(P, name.p, "argument '" .. key .. "' of '" .. nt.s .. "' is given twice")
                        end
                        filter.named = filter.named or {}
                        filter.named_at = filter.named_at or {}
                        filter.named_at[key] = name.p
                    end
                    local arg = parse_operand(P)
                    if key then
                        filter.named[key] = arg
                    else
                        filter.args[#filter.args + 1] = arg
                        key = #filter.args
                    end
                    if arg.t == "lit" then
                        values[key] = arg.v
                    else
                        values[key], dynamic = DYNAMIC, true
                    end
                    local sep = take(P)
                    if is_op(sep, ")") then
                        last = sep.e
                        break
                    elseif not is_op(sep, ",") then
                        fail(P, sep.p, "expected ',' or ')' after an argument of '" .. nt.s .. "', got " .. show(sep))
                    end
                end
            end
        end
        local rule = filter_rules[fn]
        if rule then
            local n = #filter.args
            if n < rule[1] or n > rule[2] then
                local wanted = rule[1] == rule[2] and count_words(rule[1])
                    or (rule[1] .. " to " .. count_words(rule[2]))
                fail(P, nt.p, format("filter '%s' takes %s, got %d", nt.s, wanted, n))
            end
            for key in pairs(filter.named or {}) do
                if not (rule.named and rule.named[key]) then
                    fail(P, filter.named_at[key], format("filter '%s' has no argument named '%s'", nt.s, key),
                        rule.named and ("its named arguments: " .. rule.named_list) or "it takes no named arguments")
                end
            end
            local bad = rule[3] and rule[3](values)
            if bad then
                fail(P, nt.p, bad)
            end
        end
        filter.constant = not dynamic and values or nil
        filters = filters or {}
        filters[#filters + 1] = filter
    end
    if not filters then
        return base
    end
    return { t = "filtered", base = base, filters = filters, p = base.p, e = last }
end

local comparisons = { ["=="] = true, ["!="] = true, ["<"] = true, [">"] = true, ["<="] = true, [">="] = true }

local parse_or

local function nest(P, pos)
    P.depth = P.depth + 1
    if P.depth > MAX_DEPTH then
        fail(P, pos, "condition nested too deeply")
    end
end

-- term := "not" term | "(" or ")" | value [ comparison value ]
local function parse_term(P)
    local t = peek(P)
    if is_word(t, "not") then
        take(P)
        nest(P, t.p)
        local c = parse_term(P)
        P.depth = P.depth - 1
        return { t = "not", c = c, p = t.p, e = c.e }
    elseif is_op(t, "(") then
        take(P)
        nest(P, t.p)
        local c = parse_or(P)
        local close = take(P)
        if not is_op(close, ")") then
            fail(P, close.p, "expected ')' in '" .. P.tag .. "', got " .. show(close))
        end
        P.depth = P.depth - 1
        return c
    end
    local a = parse_value(P)
    local op = peek(P)
    if is_op(op, "=") then
        fail(P, op.p, "unexpected '='", "compare with == or !=")
    end
    if op.k == "op" and comparisons[op.v] then
        take(P)
        local b = parse_value(P)
        return { t = "cmp", op = op.v, a = a, b = b, p = op.p, from = a.p, e = b.e }
    end
    return { t = "truth", value = a, p = a.p, e = a.e }
end

local function parse_chain(P, word, parse_next)
    local a = parse_next(P)
    while is_word(peek(P), word) do
        local t = take(P)
        P.terms = P.terms + 1
        if P.terms > MAX_TERMS then
            fail(P, t.p, "condition has more than " .. MAX_TERMS .. " and/or terms")
        end
        local b = parse_next(P)
        a = { t = word, a = a, b = b, p = a.p, e = b.e }
    end
    return a
end

local function parse_and(P)
    return parse_chain(P, "and", parse_term)
end

parse_or = function(P)
    return parse_chain(P, "or", parse_and)
end

local function parse_condition(P)
    P.depth, P.terms = 0, 0
    if peek(P).k == "end" then
        fail(P, peek(P).p, "missing condition in '{% " .. P.tag .. " %}'")
    end
    local c = parse_or(P)
    expect_end(P, "'and', 'or' or '%}'")
    return c
end

-- Handles one {% %} tag: updates the block stack and returns the list that
-- following nodes go into.
local function statement(P, body, stack, open)
    local t = take(P)
    local word = t.k == "path" and t.s
    local top = stack[#stack]
    local function misplaced(what, wanted)
        if top then
            fail(P, open, format("{%% %s %%} inside {%% %s %%} opened at line %d", what, top.kind,
                (locate(P, top.pos))), "close it with {% end" .. top.kind .. " %} first")
        end
        fail(P, open, format("{%% %s %%} without {%% %s %%}", what, wanted))
    end
    if word == "if" then
        if #stack >= MAX_DEPTH then
            fail(P, open, "blocks nested too deeply (more than " .. MAX_DEPTH .. ")")
        end
        local node = { t = "if", branches = { { cond = parse_condition(P), body = {} } } }
        body[#body + 1] = node
        stack[#stack + 1] = { kind = "if", node = node, pos = open, parent = body }
        return node.branches[1].body
    elseif word == "elif" then
        if not top or top.kind ~= "if" then
            misplaced("elif", "if")
        elseif top.in_else then
            fail(P, open, "{% elif %} after {% else %}")
        end
        local branch = { cond = parse_condition(P), body = {} }
        top.node.branches[#top.node.branches + 1] = branch
        return branch.body
    elseif word == "else" then
        expect_end(P, "'%}'")
        if not top then
            fail(P, open, "{% else %} without {% if %} or {% for %}")
        elseif top.in_else then
            fail(P, open, "second {% else %} in {% " .. top.kind .. " %}")
        end
        top.in_else = true
        if top.kind == "for" then
            P.scopes[#P.scopes] = nil
        end
        top.node.else_body = {}
        return top.node.else_body
    elseif word == "endif" or word == "endfor" then
        expect_end(P, "'%}'")
        local block = sub(word, 4)
        if not top or top.kind ~= block then
            misplaced(word, block)
        end
        stack[#stack] = nil
        if block == "for" and not top.in_else then
            P.scopes[#P.scopes] = nil
        end
        return top.parent
    elseif word == "for" then
        if #stack >= MAX_DEPTH then
            fail(P, open, "blocks nested too deeply (more than " .. MAX_DEPTH .. ")")
        end
        local var = take(P)
        if var.k ~= "path" or #var.v ~= 1 or reserved[var.s] then
            fail(P, var.p, "expected a loop variable name after 'for', got " .. show(var),
                "write {% for item in list %}")
        end
        local kin = take(P)
        if not is_word(kin, "in") then
            fail(P, kin.p, "expected 'in' after 'for " .. var.s .. "', got " .. show(kin))
        end
        local iter = parse_value(P)
        expect_end(P, "'|' or '%}'")
        local slot = P.slots + 1
        P.slots = P.slots + 3 -- item, index, length
        P.scopes[#P.scopes + 1] = { name = var.s, slot = slot }
        local node = { t = "for", slot = slot, iter = iter, body = {}, p = iter.p }
        body[#body + 1] = node
        stack[#stack + 1] = { kind = "for", node = node, pos = open, parent = body }
        return node.body
    elseif t.k == "end" then
        fail(P, open, "empty {% %}")
    end
    fail(P, t.p, "unknown tag " .. show(t), "known: if, elif, else, endif, for, endfor")
end

-- Parses the whole template into a list of nodes:
--   { t = "text", parts = { pieces of text to join } } | { t = "out", value }
--   | { t = "if", branches, else_body }
--   | { t = "for", slot, iter, body, else_body }
local function parse_template(P)
    local src = P.src
    local root = {}
    local body, stack = root, {}
    local pos, trim_next = 1, false
    while true do
        local open = find(src, "{[{%%#]", pos)
        local text = sub(src, pos, (open or #src + 1) - 1)
        if trim_next then
            text = sub(text, find(text, "%S") or #text + 1)
        end
        local trim_before = open and byte(src, open + 2) == 45 -- "-"
        if trim_before then
            text = sub(text, 1, last_non_space(text, #text))
        end
        if text ~= "" then
            -- text around comments: pieces joined once, when compiled
            local last = body[#body]
            if last and last.t == "text" then
                last.parts[#last.parts + 1] = text
            else
                body[#body + 1] = { t = "text", parts = { text } }
            end
        end
        if not open then
            break
        end
        local opener = sub(src, open, open + 1)
        local start = open + (trim_before and 3 or 2)
        if opener == "{#" then
            local close = find(src, "#}", start, true)
            if not close then
                fail(P, open, "unterminated '{#'", "missing '#}'")
            end
            trim_next = close > start and byte(src, close - 1) == 45
            pos = close + 2
        else
            local toks, after, trim = lex(P, start, opener == "{{" and "}}" or "%}", open, opener)
            P.toks, P.i = toks, 1
            P.tag = excerpt(P, start, toks[#toks].p - 1)
            if opener == "{{" then
                if toks[1].k == "end" then
                    fail(P, open, "empty {{ }}")
                end
                local value = parse_value(P)
                expect_end(P, "'|' or '}}'")
                body[#body + 1] = { t = "out", value = value }
            else
                body = statement(P, body, stack, open)
            end
            trim_next, pos = trim, after
        end
    end
    local top = stack[#stack]
    if top then
        fail(P, top.pos, "unclosed {% " .. top.kind .. " %}",
            "no {% end" .. top.kind .. " %} before the end of the template")
    end
    return root
end

---------------------------------------------------------------------------
-- Compiling: nodes -> closures. A value evaluator is function(ctx, vars)
-- returning value, or nil, message; a block is function(ctx, vars, out, n)
-- appending to out[n + 1 ...] and returning the new n, or nil, message. vars
-- holds loop state: vars[slot] item, vars[slot + 1] index, vars[slot + 2]
-- length.

-- One step of a path: t[key] (or t[alt], the key's text, for a numeric
-- segment of an object); nil when t is not a table.
local function step(t, key, alt)
    if type(t) ~= "table" or t == null then
        return nil
    end
    local v = t[key]
    if v == nil and alt then
        v = t[alt]
    end
    return v
end

local function walk(t, segs, alts, count)
    for i = 1, count do
        if type(t) ~= "table" or t == null then
            return nil
        end
        local v = t[segs[i]]
        if v == nil and alts[i] then
            v = t[alts[i]]
        end
        t = v
    end
    return t
end

local compile_value

local function compile_path(node)
    local segs, alts = node.segs, node.alts
    local count = #segs
    local k1, a1, k2, a2 = segs[1], alts[1], segs[2], alts[2]
    if node.t == "var" then
        local slot = node.slot
        if count == 0 then
            return function(_, vars)
                return vars[slot]
            end
        end
        return function(_, vars)
            return walk(vars[slot], segs, alts, count)
        end
    elseif count == 1 then
        return function(ctx)
            return step(ctx, k1, a1)
        end
    elseif count == 2 then
        return function(ctx)
            return step(step(ctx, k1, a1), k2, a2)
        end
    end
    return function(ctx)
        return walk(ctx, segs, alts, count)
    end
end

local function compile_loop_field(node)
    local slot = node.slot
    local field = node.field
    if field == "index" then
        return function(_, vars)
            return vars[slot + 1]
        end
    elseif field == "length" then
        return function(_, vars)
            return vars[slot + 2]
        end
    elseif field == "first" then
        return function(_, vars)
            return vars[slot + 1] == 1
        end
    end
    return function(_, vars)
        return vars[slot + 1] == vars[slot + 2]
    end
end

local function compile_filtered(P, node)
    local base = compile_value(P, node.base)
    local source = excerpt(P, node.p, node.e)
    local count = #node.filters
    local fns, constants, dynamic, errors = {}, {}, {}, {}
    for i, f in ipairs(node.filters) do
        fns[i] = f.fn
        constants[i] = f.constant
        if not f.constant then
            local args = {}
            for j, arg in ipairs(f.args) do
                args[j] = compile_value(P, arg)
            end
            for name, arg in pairs(f.named or {}) do
                args[#args + 1] = { name, compile_value(P, arg) }
            end
            dynamic[i] = args
        end
        local before, after = location(P, f.p)
        errors[i] = { before .. "'" .. source .. "': ", after }
    end
    return function(ctx, vars)
        local v, err = base(ctx, vars)
        if err then
            return nil, err
        end
        for i = 1, count do
            local args = constants[i]
            if not args then
                local evaluators = dynamic[i]
                args = {}
                for j = 1, #evaluators do
                    local e = evaluators[j]
                    if type(e) == "table" then
                        args[e[1]], err = e[2](ctx, vars)
                    else
                        args[j], err = e(ctx, vars)
                    end
                    if err then
                        return nil, err
                    end
                end
            end
            v, err = fns[i](v, args, ctx)
            if err then
                local e = errors[i]
                return nil, e[1] .. gsub(tostring(err), "[\r\n]+", " ") .. e[2]
            end
        end
        return v
    end
end

compile_value = function(P, node)
    local t = node.t
    if t == "lit" then
        local v = node.v
        return function()
            return v
        end
    elseif t == "loop" then
        return compile_loop_field(node)
    elseif t == "filtered" then
        return compile_filtered(P, node)
    end
    return compile_path(node)
end

local orderings = {
    ["<"] = function(a, b) return a < b end,
    [">"] = function(a, b) return a > b end,
    ["<="] = function(a, b) return a <= b end,
    [">="] = function(a, b) return a >= b end,
}

-- A condition evaluator is function(ctx, vars) returning a boolean, or nil,
-- message.
local function compile_condition(P, node)
    local t = node.t
    if t == "truth" then
        local value = compile_value(P, node.value)
        return function(ctx, vars)
            local v, err = value(ctx, vars)
            if err then
                return nil, err
            end
            return truthy(v)
        end
    elseif t == "not" then
        local c = compile_condition(P, node.c)
        return function(ctx, vars)
            local b, err = c(ctx, vars)
            if err then
                return nil, err
            end
            return not b
        end
    elseif t == "and" or t == "or" then
        local a, b = compile_condition(P, node.a), compile_condition(P, node.b)
        local want = t == "or" -- the result of a that decides without b
        return function(ctx, vars)
            local r, err = a(ctx, vars)
            if err then
                return nil, err
            end
            if r == want then
                return r
            end
            return b(ctx, vars)
        end
    end
    -- comparison
    local a, b = compile_value(P, node.a), compile_value(P, node.b)
    local op = node.op
    if op == "==" or op == "!=" then
        local equal = op == "=="
        return function(ctx, vars)
            local x, err = a(ctx, vars)
            if err then
                return nil, err
            end
            local y
            y, err = b(ctx, vars)
            if err then
                return nil, err
            end
            if x == null then
                x = nil
            end
            if y == null then
                y = nil
            end
            return (x == y) == equal
        end
    end
    local order = orderings[op]
    local before, after = location(P, node.p)
    before = before .. "'" .. excerpt(P, node.from, node.e) .. "': cannot compare "
    return function(ctx, vars)
        local x, err = a(ctx, vars)
        if err then
            return nil, err
        end
        local y
        y, err = b(ctx, vars)
        if err then
            return nil, err
        end
        local tx, ty = type(x), type(y)
        if tx ~= ty or (tx ~= "number" and tx ~= "string") or x == null then
            return nil, before .. kind(x) .. " with " .. kind(y) .. after
        end
        return order(x, y)
    end
end

local compile_block

local function compile_output(P, node, escape)
    local value = compile_value(P, node.value)
    local source = excerpt(P, node.value.p, node.value.e)
    local missing = message(P, node.value.p, "'" .. source .. "' is missing", "add | default('...') to allow that")
    local before, after = location(P, node.value.p)
    before = before .. "'" .. source .. "' is "
    return function(ctx, vars, out, n)
        local v, err = value(ctx, vars)
        if err then
            return nil, err
        end
        local vt = type(v)
        if vt ~= "string" then
            if vt == "number" then
                v = format_number(v) or tostring(v)
            elseif vt == "boolean" then
                v = v and "true" or "false"
            elseif v == nil or v == null then
                return nil, missing
            else
                return nil, before .. "a " .. vt .. ", not text" .. after
            end
        end
        if escape then
            v = escape(v)
        end
        n = n + 1
        out[n] = v
        return n
    end
end

local function compile_if(P, node)
    local conditions, blocks = {}, {}
    for i, branch in ipairs(node.branches) do
        conditions[i] = compile_condition(P, branch.cond)
        blocks[i] = compile_block(P, branch.body)
    end
    local count = #conditions
    local otherwise = node.else_body and compile_block(P, node.else_body)
    return function(ctx, vars, out, n)
        for i = 1, count do
            local yes, err = conditions[i](ctx, vars)
            if err then
                return nil, err
            end
            if yes then
                return blocks[i](ctx, vars, out, n)
            end
        end
        if otherwise then
            return otherwise(ctx, vars, out, n)
        end
        return n
    end
end

local function compile_for(P, node)
    local iter = compile_value(P, node.iter)
    local body = compile_block(P, node.body)
    local otherwise = node.else_body and compile_block(P, node.else_body)
    local slot = node.slot
    local before, after = location(P, node.p)
    before = before .. "'" .. excerpt(P, node.iter.p, node.iter.e) .. "' is "
    return function(ctx, vars, out, n)
        local list, err = iter(ctx, vars)
        if err then
            return nil, err
        end
        local count = 0
        if list ~= nil and list ~= null then
            if type(list) ~= "table" then
                return nil, before .. describe(list) .. ", not a list" .. after
            end
            count = #list
            if count == 0 and next(list) ~= nil then
                return nil, before .. "an object, not a list" .. after
            end
        end
        if count == 0 then
            if otherwise then
                return otherwise(ctx, vars, out, n)
            end
            return n
        end
        vars[slot + 2] = count
        for i = 1, count do
            vars[slot], vars[slot + 1] = list[i], i
            n, err = body(ctx, vars, out, n)
            if not n then
                return nil, err
            end
        end
        return n
    end
end

local function empty_block(_, _, _, n)
    return n
end

compile_block = function(P, nodes)
    local fns = {}
    for i, node in ipairs(nodes) do
        local t = node.t
        if t == "text" then
            local s = concat(node.parts)
            fns[i] = function(_, _, out, n)
                n = n + 1
                out[n] = s
                return n
            end
        elseif t == "out" then
            fns[i] = compile_output(P, node, P.escape)
        elseif t == "if" then
            fns[i] = compile_if(P, node)
        else
            fns[i] = compile_for(P, node)
        end
    end
    local count = #fns
    if count == 0 then
        return empty_block
    elseif count == 1 then
        return fns[1]
    end
    return function(ctx, vars, out, n)
        local err
        for i = 1, count do
            n, err = fns[i](ctx, vars, out, n)
            if not n then
                return nil, err
            end
        end
        return n
    end
end

---------------------------------------------------------------------------
-- Entry points

-- template.compile(source, opts): parses source once and returns a render
-- function(ctx) -> string, or nil, err on a syntax error. opts (optional):
--   name    -- used in error messages (default "template")
--   html    -- true: escape & < > " ' in every inserted value
--   json    -- true: escape inserted values for use inside a JSON string
--              literal (html wins when both are set)
--   filters -- the filter table to use (default template.filters)
--   paths   -- a list: compile appends { path = { "payload", "x", ... },
--              line =, column = } for each path read from the context (not
--              loop variables), so a caller can check them against a schema
-- Errors read "<name>:<line>: <problem> (column <c>)[; <hint>]". The render
-- function returns the text, or nil, err (same form) when a value is missing
-- and has no default, is a table, or a filter or comparison fails; ctx is
-- only read. A non-string source or non-table opts is a usage error.
function template.compile(source, opts)
    if type(source) ~= "string" then
        error("template.compile: source must be a string, got " .. type(source), 2)
    end
    opts = opts or {}
    if type(opts) ~= "table" then
        error("template.compile: opts must be a table, got " .. type(opts), 2)
    end
    local P = {
        src = source,
        name = opts.name or "template",
        filters = opts.filters or template.filters,
        escape = (opts.html and escape_html) or (opts.json and json.quote) or nil,
        lines = line_starts(source),
        scopes = {},
        slots = 0,
        paths = opts.paths,
    }
    local ok, root = pcall(parse_template, P)
    if not ok then
        if getmetatable(root) == failure_mt then
            return nil, root.message
        end
        error(root, 0)
    end
    if #root == 0 then
        return function()
            return ""
        end
    elseif #root == 1 and root[1].t == "text" then
        local s = concat(root[1].parts)
        return function()
            return s
        end
    end
    local body = compile_block(P, root)
    local uses_loops = P.slots > 0
    return function(ctx)
        local out = {}
        local n, err = body(ctx, uses_loops and {} or nil, out, 0)
        if not n then
            return nil, err
        end
        return concat(out, "", 1, n)
    end
end

-- template.render(source, ctx, opts): compile and render in one call (for
-- one-off use; compile once when rendering repeatedly). Returns the text or
-- nil, err.
function template.render(source, ctx, opts)
    local fn, err = template.compile(source, opts)
    if not fn then
        return nil, err
    end
    return fn(ctx)
end

return template
