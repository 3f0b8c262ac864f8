-- crier.locale: locale tags, their fallback chains, CLDR plural categories
-- and the per-locale formats of the template filters plural, date and money.
-- Pure Lua (no C calls): the same code runs in crier serve, crier try,
-- crier.testing and nginx.
--
-- Tags: a language of 2-3 letters with optional subtags of 1-8 letters or
-- digits separated by "-" ("de", "de-AT", "pt-BR", "zh-Hant-TW"), at most 35
-- characters -- what crier.set_recipient_settings accepts. "_" is read as "-"
-- and case is normalised (language lower case, 2-letter regions upper case,
-- 4-letter scripts title case); matching ignores case.
--
-- Plural categories follow the cardinal rules of the Unicode CLDR
-- (https://cldr.unicode.org, "Language Plural Rules"), written here from
-- their definitions in terms of the CLDR operands:
--   n  the absolute value        i  its integer digits
--   v  count of visible fraction digits (with trailing zeros: "1.50" -> 2)
--   t  visible fraction digits without trailing zeros, as an integer
-- The compact-exponent operand e is always 0 here (no compact numbers).
-- Languages without rules here have the category "other" only.

local find, format, gsub, lower, match, sub, upper = string.find, string.format, string.gsub, string.lower,
    string.match, string.sub, string.upper
local concat = table.concat
local floor = math.floor
local ipairs, pairs, tonumber, type, setmetatable = ipairs, pairs, tonumber, type, setmetatable

local locale = {}

---------------------------------------------------------------------------
-- Tags

-- locale.normalize(tag) -> the tag in canonical case ("de-AT"), or nil and a
-- message when tag is not a locale tag.
function locale.normalize(tag)
    if type(tag) ~= "string" then
        return nil, "a locale tag must be a string like \"de\" or \"de-AT\", got " .. type(tag)
    end
    local t = gsub(tag, "_", "-")
    local bad = format("%q is not a locale tag: use a language code with optional subtags of 1-8 letters or "
        .. "digits, like \"de\", \"de-AT\" or \"pt-BR\"", tag)
    if #t > 35 or find(t, "^%-") or find(t, "%-%-") or find(t, "%-$") then
        return nil, bad
    end
    local parts = {}
    for part in t:gmatch("[^%-]+") do
        local n = #parts + 1
        if n == 1 then
            if not find(part, "^%a%a%a?$") then
                return nil, bad
            end
            part = lower(part)
        elseif not find(part, "^%w+$") or #part > 8 then
            return nil, bad
        elseif #part == 2 and find(part, "^%a%a$") then
            part = upper(part)
        elseif #part == 4 and find(part, "^%a%a%a%a$") then
            part = upper(sub(part, 1, 1)) .. lower(sub(part, 2))
        else
            part = lower(part)
        end
        parts[n] = part
    end
    if #parts == 0 then
        return nil, bad
    end
    return concat(parts, "-")
end

-- locale.key(tag): the canonical tag in lower case (for lookups), or nil.
function locale.key(tag)
    local t = locale.normalize(tag)
    return t and lower(t)
end

-- locale.chain(tag) -> the lookup keys from the most specific to the
-- language alone: "de-AT" -> { "de-at", "de" }. Empty for a bad tag.
function locale.chain(tag)
    local key = locale.key(tag)
    local out = {}
    while key do
        out[#out + 1] = key
        key = match(key, "^(.*)%-[^%-]+$")
    end
    return out
end

---------------------------------------------------------------------------
-- Plural categories (CLDR cardinal rules)

locale.CATEGORIES = { zero = true, one = true, two = true, few = true, many = true, other = true }

local function in_range(x, lo, hi)
    return x >= lo and x <= hi and x == floor(x)
end

-- i = 1 and v = 0
local function one_i1_v0(o)
    return o.i == 1 and o.v == 0 and "one" or nil
end

-- e = 0 and i != 0 and i % 1000000 = 0 and v = 0 (fr, es, it, pt, ca)
local function many_million(o)
    return o.i ~= 0 and o.i % 1000000 == 0 and o.v == 0 and "many" or nil
end

local function n_is(o, x)
    return o.n == x
end

-- language key -> function(operands) -> category (nil: "other")
local rules = {}

local function rule_for(langs, fn)
    for lang in langs:gmatch("%S+") do
        rules[lang] = fn
    end
end

rule_for("en de nl sv fi et", one_i1_v0)
rule_for("it ca", function(o)
    return one_i1_v0(o) or many_million(o)
end)
rule_for("es", function(o)
    return (n_is(o, 1) and "one") or many_million(o)
end)
rule_for("fr", function(o)
    return ((o.i == 0 or o.i == 1) and "one") or many_million(o)
end)
rule_for("pt", function(o)
    return ((o.i == 0 or o.i == 1) and "one") or many_million(o)
end)
rule_for("pt-pt", function(o)
    return one_i1_v0(o) or many_million(o)
end)
rule_for("da", function(o)
    return (n_is(o, 1) or (o.t ~= 0 and (o.i == 0 or o.i == 1))) and "one" or nil
end)
rule_for("nb no nn tr el hu bg", function(o)
    return n_is(o, 1) and "one" or nil
end)
rule_for("pl", function(o)
    if o.v ~= 0 then
        return nil
    end
    local i, i10, i100 = o.i, o.i % 10, o.i % 100
    if i == 1 then
        return "one"
    elseif in_range(i10, 2, 4) and not in_range(i100, 12, 14) then
        return "few"
    elseif (i ~= 1 and in_range(i10, 0, 1)) or in_range(i10, 5, 9) or in_range(i100, 12, 14) then
        return "many"
    end
end)
rule_for("ru uk be", function(o)
    if o.v ~= 0 then
        return nil
    end
    local i10, i100 = o.i % 10, o.i % 100
    if i10 == 1 and i100 ~= 11 then
        return "one"
    elseif in_range(i10, 2, 4) and not in_range(i100, 12, 14) then
        return "few"
    elseif i10 == 0 or in_range(i10, 5, 9) or in_range(i100, 11, 14) then
        return "many"
    end
end)
rule_for("cs sk", function(o)
    if o.i == 1 and o.v == 0 then
        return "one"
    elseif in_range(o.i, 2, 4) and o.v == 0 then
        return "few"
    elseif o.v ~= 0 then
        return "many"
    end
end)
rule_for("ar", function(o)
    local n = o.n
    if n == 0 then
        return "zero"
    elseif n == 1 then
        return "one"
    elseif n == 2 then
        return "two"
    end
    local n100 = n % 100
    if in_range(n100, 3, 10) then
        return "few"
    elseif in_range(n100, 11, 99) then
        return "many"
    end
end)
-- ja, zh, ko, id, th, vi, ms and any language not listed: "other" only.

-- Lookups by tag, cached per tag text (at most CACHE_MAX tags: the texts come
-- from data, so the cache is not allowed to grow without bound).
local CACHE_MAX = 256
local rule_cache, formats_cache = {}, {}
local cached = {} -- cache -> entries

-- The first entry of t along tag's chain (false when none), through cache.
local function lookup(cache, t, tag)
    local hit = cache[tag]
    if hit ~= nil then
        return hit
    end
    local found = false
    for _, key in ipairs(locale.chain(tag)) do
        if t[key] then
            found = t[key]
            break
        end
    end
    local n = cached[cache] or 0
    if n < CACHE_MAX and type(tag) == "string" then
        cache[tag], cached[cache] = found, n + 1
    end
    return found
end

-- The operands of a count given as a number or a decimal string, or nil.
local function operands(value)
    local s
    if type(value) == "number" then
        if value ~= value or value == 1 / 0 or value == -1 / 0 then
            return nil
        end
        s = format("%.15g", value < 0 and -value or value)
        if find(s, "e") then
            s = format("%.0f", value < 0 and -value or value)
        end
    elseif type(value) == "string" then
        s = match(value, "^%-?(%d+%.?%d*)$")
        if not s or sub(s, -1) == "." then
            return nil
        end
    else
        return nil
    end
    local int, frac = match(s, "^(%d+)%.?(%d*)$")
    -- beyond 15 digits keep the low ones, exact for the rules' modulos
    local i = #int > 15 and 1e15 + tonumber(sub(int, -12)) or tonumber(int)
    local trimmed = gsub(frac, "0+$", "")
    local o = { i = i, v = #frac, t = tonumber(trimmed) or 0 }
    o.n = i + (frac ~= "" and tonumber("0." .. frac) or 0)
    return o, int, frac
end

-- locale.plural_category(tag, count) -> "zero"|"one"|"two"|"few"|"many"|
-- "other" for the language of tag (English when tag is nil), or nil and a
-- message when count is not a number or a decimal string.
function locale.plural_category(tag, count)
    local o = operands(count)
    if not o then
        return nil
    end
    local rule = lookup(rule_cache, rules, tag or "en")
    return rule and rule(o) or "other"
end

---------------------------------------------------------------------------
-- Formats: names, date styles, number separators, money

local english = {
    months = { "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
        "November", "December" },
    months_abbr = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" },
    days = { "Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday" },
    days_abbr = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" },
    am = "AM", pm = "PM",
}

-- Date styles: {d} day, {dd} 2-digit day, {M} month, {MM} 2-digit month,
-- {MMM} abbreviated month name, {MMMM} month name, {y} year, {yy} 2-digit
-- year, {EEEE} weekday name, {H} {HH} 24-hour, {h} 12-hour, {mm} minutes,
-- {a} AM/PM. Money: symbol before (prefix) or after the amount, separators,
-- and min_group: grouping starts at integers of this many digits + 3.
local data = {
    en = {
        styles = { short = "{M}/{d}/{yy}", medium = "{MMM} {d}, {y}", long = "{MMMM} {d}, {y}",
            full = "{EEEE}, {MMMM} {d}, {y}", time = "{h}:{mm} {a}" },
        decimal = ".", group = ",", prefix = true,
        symbols = { CAD = "CA$", AUD = "A$", CNY = "CN¥", INR = "₹" },
    },
    de = {
        months = { "Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober",
            "November", "Dezember" },
        months_abbr = { "Jan.", "Feb.", "März", "Apr.", "Mai", "Juni", "Juli", "Aug.", "Sept.", "Okt.", "Nov.",
            "Dez." },
        days = { "Sonntag", "Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag" },
        days_abbr = { "So.", "Mo.", "Di.", "Mi.", "Do.", "Fr.", "Sa." },
        styles = { short = "{dd}.{MM}.{yy}", medium = "{dd}.{MM}.{y}", long = "{d}. {MMMM} {y}",
            full = "{EEEE}, {d}. {MMMM} {y}", time = "{HH}:{mm}" },
        decimal = ",", group = ".",
    },
    fr = {
        months = { "janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre",
            "novembre", "décembre" },
        months_abbr = { "janv.", "févr.", "mars", "avr.", "mai", "juin", "juil.", "août", "sept.", "oct.", "nov.",
            "déc." },
        days = { "dimanche", "lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi" },
        days_abbr = { "dim.", "lun.", "mar.", "mer.", "jeu.", "ven.", "sam." },
        styles = { short = "{dd}/{MM}/{y}", medium = "{d} {MMM} {y}", long = "{d} {MMMM} {y}",
            full = "{EEEE} {d} {MMMM} {y}", time = "{HH}:{mm}" },
        decimal = ",", group = " ",
        symbols = { USD = "$US", GBP = "£GB" },
    },
    es = {
        months = { "enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre", "octubre",
            "noviembre", "diciembre" },
        months_abbr = { "ene", "feb", "mar", "abr", "may", "jun", "jul", "ago", "sept", "oct", "nov", "dic" },
        days = { "domingo", "lunes", "martes", "miércoles", "jueves", "viernes", "sábado" },
        days_abbr = { "dom", "lun", "mar", "mié", "jue", "vie", "sáb" },
        styles = { short = "{d}/{M}/{yy}", medium = "{d} {MMM} {y}", long = "{d} de {MMMM} de {y}",
            full = "{EEEE}, {d} de {MMMM} de {y}", time = "{H}:{mm}" },
        decimal = ",", group = ".", min_group = 2,
        symbols = { USD = "US$" },
    },
    pl = {
        -- month names in the genitive, as they are written after a day
        months = { "stycznia", "lutego", "marca", "kwietnia", "maja", "czerwca", "lipca", "sierpnia", "września",
            "października", "listopada", "grudnia" },
        months_abbr = { "sty", "lut", "mar", "kwi", "maj", "cze", "lip", "sie", "wrz", "paź", "lis", "gru" },
        days = { "niedziela", "poniedziałek", "wtorek", "środa", "czwartek", "piątek", "sobota" },
        days_abbr = { "niedz.", "pon.", "wt.", "śr.", "czw.", "pt.", "sob." },
        styles = { short = "{d}.{MM}.{y}", medium = "{d} {MMM} {y}", long = "{d} {MMMM} {y}",
            full = "{EEEE}, {d} {MMMM} {y}", time = "{HH}:{mm}" },
        decimal = ",", group = " ", min_group = 2,
        symbols = { PLN = "zł", USD = "USD", GBP = "GBP" },
    },
    ja = {
        months = { "1月", "2月", "3月", "4月", "5月", "6月", "7月", "8月", "9月", "10月", "11月", "12月" },
        days = { "日曜日", "月曜日", "火曜日", "水曜日", "木曜日", "金曜日", "土曜日" },
        days_abbr = { "日", "月", "火", "水", "木", "金", "土" },
        am = "午前", pm = "午後",
        styles = { short = "{y}/{MM}/{dd}", medium = "{y}/{MM}/{dd}", long = "{y}年{M}月{d}日",
            full = "{y}年{M}月{d}日{EEEE}", time = "{H}:{mm}" },
        decimal = ".", group = ",", prefix = true,
        symbols = { JPY = "￥" },
    },
}
data.ja.months_abbr = data.ja.months
-- Austrian German: "Jänner" for January, otherwise German
data["de-at"] = setmetatable({
    months = { "Jänner", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober",
        "November", "Dezember" },
    months_abbr = { "Jän.", "Feb.", "März", "Apr.", "Mai", "Juni", "Juli", "Aug.", "Sep.", "Okt.", "Nov.", "Dez." },
}, { __index = data.de })
for key, d in pairs(data) do
    if key ~= "de-at" then
        setmetatable(d, { __index = english })
    end
end

-- Currency symbols most locales share; a locale's own symbols come first and
-- a currency with none is written with its ISO code.
local common_symbols = { EUR = "€", GBP = "£", USD = "$", JPY = "¥" }

-- locale.formats(tag) -> the format data of tag's chain (nil when none of
-- its tags has data: the filters then keep their locale-free formats).
function locale.formats(tag)
    return lookup(formats_cache, data, tag) or nil
end

locale.STYLES = { short = true, medium = true, long = true, full = true, time = true }

-- locale.format_style(formats, style, t): a date in a named style. formats
-- from locale.formats (nil: English); t has year, month, day, hour, min,
-- wday (1 = Sunday).
function locale.format_style(formats, style, t)
    local L = formats or data.en
    local fields = {
        d = t.day, dd = format("%02d", t.day), M = t.month, MM = format("%02d", t.month),
        MMM = L.months_abbr[t.month], MMMM = L.months[t.month], y = format("%04d", t.year),
        yy = format("%02d", t.year % 100), EEEE = L.days[t.wday], H = t.hour, HH = format("%02d", t.hour),
        h = (t.hour + 11) % 12 + 1, mm = format("%02d", t.min), a = t.hour < 12 and L.am or L.pm,
    }
    return (gsub(L.styles[style], "{(%a+)}", fields))
end

-- locale.names(formats) -> the table of month/day names and am/pm to use
-- (English when formats is nil).
function locale.names(formats)
    return formats or english
end

-- Digits of a whole number grouped by threes with sep (from min_group + 3
-- digits on; min_group defaults to 1).
local function group_digits(whole, sep, min_group)
    if #whole < 3 + (min_group or 1) then
        return whole
    end
    local first = (#whole - 1) % 3 + 1
    local parts = { sub(whole, 1, first) }
    for i = first + 1, #whole, 3 do
        parts[#parts + 1] = sub(whole, i, i + 2)
    end
    return concat(parts, sep)
end

-- locale.format_number(formats, text): a decimal number's text ("1234.5",
-- "-3") with the locale's separators; unchanged when formats is nil.
function locale.format_number(formats, text)
    if not formats then
        return text
    end
    local sign, whole, fraction = match(text, "^(%-?)(%d+)(%.?%d*)$")
    if not whole then
        return text
    end
    if fraction ~= "" then
        fraction = formats.decimal .. sub(fraction, 2)
    end
    return sign .. group_digits(whole, formats.group, formats.min_group) .. fraction
end

-- locale.format_money(formats, negative, whole, fraction, currency): an
-- amount already split into digits (fraction "" for 0-decimal currencies)
-- written the locale's way: "$1,234.50", "1.234,50 €", "￥1,235".
function locale.format_money(formats, negative, whole, fraction, currency)
    local symbol = (formats.symbols and formats.symbols[currency]) or common_symbols[currency] or currency
    local amount = group_digits(whole, formats.group, formats.min_group)
    if fraction ~= "" then
        amount = amount .. formats.decimal .. fraction
    end
    local sign = negative and "-" or ""
    if formats.prefix then
        -- a symbol that is letters (an ISO code) is set apart by a space
        return sign .. symbol .. (find(symbol, "^%a+$") and " " or "") .. amount
    end
    return sign .. amount .. " " .. symbol
end

return locale
