-- crier.json: pure-Lua JSON encoding and decoding for rule payloads and
-- webhook bodies. Encoding is deterministic (object keys sorted, fixed number
-- formatting) so the same value always gives the same bytes.
--
-- Arrays and objects: a table whose keys are exactly 1..n encodes as an array,
-- any other non-empty table as an object, and an empty table as {}. Mark a
-- table as an array with json.array(t) (decoded arrays come back marked), or
-- use the json.empty_array sentinel for a literal []. JSON null decodes to the
-- json.null sentinel so arrays keep their positions.

local byte, char, find, format, sub, gsub =
    string.byte, string.char, string.find, string.format, string.sub, string.gsub
local concat, sort = table.concat, table.sort
local floor, huge = math.floor, math.huge
local type, pairs, tostring, tonumber, setmetatable, getmetatable, error, pcall =
    type, pairs, tostring, tonumber, setmetatable, getmetatable, error, pcall

local json = {}

-- Maximum nesting of arrays/objects accepted by encode and decode.
json.max_depth = 512

local function read_only(name)
    return setmetatable({}, {
        __newindex = function()
            error(name .. " is read-only", 2)
        end,
        __tostring = function()
            return name
        end,
        __metatable = false,
    })
end

-- json.null: the value JSON null decodes to, and encodes to null.
json.null = read_only("json.null")
-- json.empty_array: a sentinel that encodes as [] (a plain {} encodes as {}).
json.empty_array = read_only("json.empty_array")
-- json.array_mt: the metatable marking a table as an array.
json.array_mt = { __name = "json.array" }

local null, empty_array, array_mt = json.null, json.empty_array, json.array_mt

-- json.array(t): marks t (default: a new table) as an array so it encodes as
-- [...] even when empty. Returns t.
function json.array(t)
    if t == nil then
        t = {}
    elseif type(t) ~= "table" then
        error("json.array: expected a table, got " .. type(t), 2)
    end
    return setmetatable(t, array_mt)
end

-- json.is_array(v): true when v is a table that encodes as a JSON array.
function json.is_array(v)
    if v == empty_array then
        return true
    end
    if type(v) ~= "table" or v == null then
        return false
    end
    if getmetatable(v) == array_mt then
        return true
    end
    local n, max = 0, 0
    for k in pairs(v) do
        if type(k) ~= "number" or k < 1 or k ~= floor(k) then
            return false
        end
        n = n + 1
        if k > max then
            max = k
        end
    end
    return n > 0 and max == n
end

-- json.format_number(n): the canonical text of a finite number: integers
-- without a fraction ("12", not "12.0" or "1.2e+01"), others with the fewest
-- digits that read back as the same number. Returns nil for NaN and infinities.
function json.format_number(n)
    if n ~= n or n == huge or n == -huge then
        return nil
    end
    if n == floor(n) and n > -2 ^ 53 and n < 2 ^ 53 then
        return format("%d", n)
    end
    local s = format("%.14g", n)
    if tonumber(s) ~= n then
        s = format("%.17g", n)
    end
    return s
end
local format_number = json.format_number

---------------------------------------------------------------------------
-- Encoding

local escapes = {
    ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
    ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
}
for i = 0, 31 do
    local c = char(i)
    if not escapes[c] then
        escapes[c] = format("\\u%04x", i)
    end
end

-- json.quote(s): s as the contents of a JSON string literal, without the
-- surrounding quotes. Bytes >= 0x80 pass through unchanged.
local NEEDS_ESCAPE = '[%z\1-\31"\\]'
function json.quote(s)
    if not find(s, NEEDS_ESCAPE) then
        return s
    end
    return (gsub(s, NEEDS_ESCAPE, escapes))
end
local quote = json.quote

-- Errors raised inside the encoder and decoder carry this metatable; the
-- entry points catch them and return nil, message.
local failure_mt = {}

-- The encoder's position, kept as one segment per nesting level (a key or
-- an index) and spelled out ("$.body.when[2]") only when encoding fails: most
-- values are encoded without an error, and building every value's path cost
-- more than the encoding itself.
local segments = {}

local function fail(depth, msg)
    local parts = { "$" }
    for i = 1, depth do
        local seg = segments[i]
        parts[#parts + 1] = type(seg) == "number" and "[" .. seg .. "]" or "." .. seg
    end
    error(setmetatable({ message = "json.encode: " .. msg .. " at " .. concat(parts) }, failure_mt), 0)
end

-- '"name":' for object keys, which repeat from value to value (bounded).
local key_texts, n_key_texts = {}, 0
local function key_text(name)
    local t = key_texts[name]
    if not t then
        t = '"' .. quote(name) .. '":'
        if n_key_texts >= 4096 then
            key_texts, n_key_texts = {}, 0
        end
        key_texts[name], n_key_texts = t, n_key_texts + 1
    end
    return t
end

local encode_value

local function encode_array(t, n, out, depth, seen)
    out[#out + 1] = "["
    for i = 1, n do
        if i > 1 then
            out[#out + 1] = ","
        end
        local v = t[i]
        if v == nil then
            v = null
        end
        segments[depth] = i
        encode_value(v, out, depth, seen)
    end
    out[#out + 1] = "]"
end

local function encode_table(t, out, depth, seen)
    if t == null then
        out[#out + 1] = "null"
        return
    elseif t == empty_array then
        out[#out + 1] = "[]"
        return
    end
    if seen[t] then
        fail(depth, "table contains itself")
    end
    if depth >= json.max_depth then
        fail(depth, "nesting deeper than " .. json.max_depth)
    end
    seen[t] = true
    local outer = depth
    depth = depth + 1

    local marked = getmetatable(t) == array_mt
    local n, max, all_index = 0, 0, true
    for k in pairs(t) do
        n = n + 1
        if type(k) == "number" and k >= 1 and k == floor(k) then
            if k > max then
                max = k
            end
        else
            all_index = false
        end
    end

    if marked then
        if not all_index then
            fail(outer, "array marked with json.array has a non-index key")
        end
        encode_array(t, max, out, depth, seen)
    elseif n > 0 and all_index and max == n then
        encode_array(t, n, out, depth, seen)
    else
        local keys, by_name = {}, {}
        for k, v in pairs(t) do
            local name
            local kt = type(k)
            if kt == "string" then
                name = k
            elseif kt == "number" then
                name = format_number(k)
                if not name then
                    fail(outer, "cannot encode key " .. tostring(k))
                end
            else
                fail(outer, "cannot encode a " .. kt .. " key")
            end
            if by_name[name] ~= nil then
                fail(outer, "two keys encode as \"" .. name .. "\"")
            end
            by_name[name] = v
            keys[#keys + 1] = name
        end
        sort(keys)
        out[#out + 1] = "{"
        for i = 1, #keys do
            local name = keys[i]
            if i > 1 then
                out[#out + 1] = ","
            end
            out[#out + 1] = key_text(name)
            segments[depth] = name
            encode_value(by_name[name], out, depth, seen)
        end
        out[#out + 1] = "}"
    end
    seen[t] = nil
end

encode_value = function(v, out, depth, seen)
    local vt = type(v)
    if vt == "string" then
        local n = #out
        out[n + 1] = '"'
        out[n + 2] = quote(v)
        out[n + 3] = '"'
    elseif vt == "number" then
        local s = format_number(v)
        if not s then
            fail(depth, "cannot encode " .. tostring(v))
        end
        out[#out + 1] = s
    elseif vt == "boolean" then
        out[#out + 1] = v and "true" or "false"
    elseif vt == "table" then
        encode_table(v, out, depth, seen)
    elseif v == nil then
        out[#out + 1] = "null"
    else
        fail(depth, "cannot encode a " .. vt)
    end
end

-- json.encode(value): the JSON text of value (nil, booleans, finite numbers,
-- strings, tables, json.null, json.empty_array). Object keys are sorted
-- byte-wise; number keys become strings. Returns the text, or nil and an
-- error naming the offending path ("$.body.when") for values JSON cannot hold
-- (functions, NaN, cycles, mixed keys in a json.array, too deep).
-- Inside crier's own process (not in nginx or busted) the encoding runs in C
-- (package.loaded["crier.json_native"], src/rules/json_native.c): rules run
-- under the sandbox's count hook, where LuaJIT interprets, and encoding was
-- half of what planning a webhook event cost. Same bytes; every refusal and its
-- message still come from the encoder below.
local native_encode = type(package) == "table" and package.loaded["crier.json_native"] or nil
function json.encode(value)
    if native_encode then
        -- crier's own process: the same encoder in C (src/rules/json_native.c),
        -- which returns nothing for a value it leaves to the code below
        local text = native_encode(value, null, empty_array, array_mt, json.max_depth)
        if text then
            return text
        end
    end
    local out = {}
    local ok, err = pcall(encode_value, value, out, 0, {})
    if not ok then
        if getmetatable(err) == failure_mt then
            return nil, err.message
        end
        error(err, 0)
    end
    return concat(out)
end

---------------------------------------------------------------------------
-- Decoding

local function decode_error(str, pos, msg)
    if pos > #str then
        msg = "unexpected end of input"
    end
    local line, col = 1, pos
    local i = 1
    while true do
        local nl = find(str, "\n", i, true)
        if not nl or nl >= pos then
            break
        end
        line = line + 1
        col = pos - nl
        i = nl + 1
    end
    local message = format("json.decode: %s at position %d (line %d, column %d)", msg, pos, line, col)
    error(setmetatable({ message = message }, failure_mt), 0)
end

local function skip_space(str, pos)
    local _, e = find(str, "^[ \t\r\n]+", pos)
    if e then
        return e + 1
    end
    return pos
end

local function utf8_char(cp)
    if cp < 0x80 then
        return char(cp)
    elseif cp < 0x800 then
        return char(0xC0 + floor(cp / 0x40), 0x80 + cp % 0x40)
    elseif cp < 0x10000 then
        return char(0xE0 + floor(cp / 0x1000), 0x80 + floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
    end
    return char(0xF0 + floor(cp / 0x40000), 0x80 + floor(cp / 0x1000) % 0x40,
        0x80 + floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
end

local simple_unescape = {
    [34] = '"', [92] = "\\", [47] = "/", [98] = "\b",
    [102] = "\f", [110] = "\n", [114] = "\r", [116] = "\t",
}

local function read_hex4(str, pos)
    local hex = sub(str, pos, pos + 3)
    if not find(hex, "^%x%x%x%x$") then
        decode_error(str, pos, "expected 4 hex digits after \\u")
    end
    return tonumber(hex, 16)
end

-- Reads the string whose opening quote is at pos; returns it and the position after.
local function decode_string(str, pos)
    local parts, n = nil, 0
    local i = pos + 1
    while true do
        local s = find(str, '[%z\1-\31"\\]', i)
        if not s then
            decode_error(str, pos, "unterminated string")
        end
        local c = byte(str, s)
        if c == 34 then -- closing quote
            if not parts then
                return sub(str, pos + 1, s - 1), s + 1
            end
            n = n + 1
            parts[n] = sub(str, i, s - 1)
            return concat(parts, "", 1, n), s + 1
        elseif c < 32 then
            decode_error(str, s, "control character in string")
        end
        -- backslash
        parts = parts or {}
        n = n + 1
        parts[n] = sub(str, i, s - 1)
        local e = byte(str, s + 1)
        if e == 117 then -- \u
            local cp = read_hex4(str, s + 2)
            i = s + 6
            if cp >= 0xD800 and cp <= 0xDBFF then
                if sub(str, i, i + 1) ~= "\\u" then
                    decode_error(str, s, "unpaired surrogate in \\u escape")
                end
                local lo = read_hex4(str, i + 2)
                if lo < 0xDC00 or lo > 0xDFFF then
                    decode_error(str, i, "invalid low surrogate in \\u escape")
                end
                cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
                i = i + 6
            elseif cp >= 0xDC00 and cp <= 0xDFFF then
                decode_error(str, s, "unpaired surrogate in \\u escape")
            end
            n = n + 1
            parts[n] = utf8_char(cp)
        else
            local u = simple_unescape[e]
            if not u then
                decode_error(str, s, "invalid escape in string")
            end
            n = n + 1
            parts[n] = u
            i = s + 2
        end
    end
end

local function decode_number(str, pos)
    local i = pos
    if byte(str, i) == 45 then -- '-'
        i = i + 1
    end
    local c = byte(str, i)
    if c == 48 then -- '0'
        i = i + 1
    else
        local _, e = find(str, "^[1-9]%d*", i)
        if not e then
            decode_error(str, pos, "invalid number")
        end
        i = e + 1
    end
    if byte(str, i) == 46 then -- '.'
        local _, e = find(str, "^%d+", i + 1)
        if not e then
            decode_error(str, pos, "invalid number")
        end
        i = e + 1
    end
    c = byte(str, i)
    if c == 101 or c == 69 then -- 'e' 'E'
        local _, e = find(str, "^[+-]?%d+", i + 1)
        if not e then
            decode_error(str, pos, "invalid number")
        end
        i = e + 1
    end
    return tonumber(sub(str, pos, i - 1)), i
end

local decode_value

local function decode_array(str, pos, depth)
    local t, n = setmetatable({}, array_mt), 0
    pos = skip_space(str, pos + 1)
    if byte(str, pos) == 93 then -- ']'
        return t, pos + 1
    end
    while true do
        local v
        v, pos = decode_value(str, pos, depth)
        n = n + 1
        t[n] = v
        pos = skip_space(str, pos)
        local c = byte(str, pos)
        if c == 93 then
            return t, pos + 1
        elseif c ~= 44 then -- ','
            decode_error(str, pos, "expected ',' or ']' in array")
        end
        pos = skip_space(str, pos + 1)
    end
end

local function decode_object(str, pos, depth)
    local t = {}
    pos = skip_space(str, pos + 1)
    if byte(str, pos) == 125 then -- '}'
        return t, pos + 1
    end
    while true do
        if byte(str, pos) ~= 34 then
            decode_error(str, pos, "expected a string key in object")
        end
        local k, v
        k, pos = decode_string(str, pos)
        pos = skip_space(str, pos)
        if byte(str, pos) ~= 58 then -- ':'
            decode_error(str, pos, "expected ':' after object key")
        end
        v, pos = decode_value(str, skip_space(str, pos + 1), depth)
        t[k] = v
        pos = skip_space(str, pos)
        local c = byte(str, pos)
        if c == 125 then
            return t, pos + 1
        elseif c ~= 44 then
            decode_error(str, pos, "expected ',' or '}' in object")
        end
        pos = skip_space(str, pos + 1)
    end
end

local literals = { t = { "true", true }, f = { "false", false }, n = { "null", null } }

decode_value = function(str, pos, depth)
    local c = byte(str, pos)
    if c == 34 then
        return decode_string(str, pos)
    elseif c == 123 or c == 91 then -- '{' '['
        if depth >= json.max_depth then
            decode_error(str, pos, "nesting deeper than " .. json.max_depth)
        end
        if c == 123 then
            return decode_object(str, pos, depth + 1)
        end
        return decode_array(str, pos, depth + 1)
    elseif c == 45 or (c and c >= 48 and c <= 57) then
        return decode_number(str, pos)
    elseif c == nil then
        decode_error(str, pos, "unexpected end of input")
    end
    local lit = literals[char(c)]
    if lit and sub(str, pos, pos + #lit[1] - 1) == lit[1] then
        return lit[2], pos + #lit[1]
    end
    decode_error(str, pos, "unexpected character '" .. char(c) .. "'")
end

-- json.decode(text): the Lua value of a JSON text. Objects become plain
-- tables, arrays tables marked with json.array_mt, null json.null. Returns the
-- value, or nil and an error with the byte position, line and column
-- ("json.decode: expected ':' after object key at position 9 (line 1, column 9)").
-- A non-string argument is a usage error.
function json.decode(text)
    if type(text) ~= "string" then
        error("json.decode: expected a string, got " .. type(text), 2)
    end
    local ok, value, pos = pcall(decode_value, text, skip_space(text, 1), 0)
    if not ok then
        if getmetatable(value) == failure_mt then
            return nil, value.message
        end
        error(value, 0)
    end
    pos = skip_space(text, pos)
    if pos <= #text then
        local _, err = pcall(decode_error, text, pos, "unexpected text after the value")
        return nil, err.message
    end
    return value
end

return json
