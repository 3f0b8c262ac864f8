-- crier.template: a minimal text template language for notification content.
-- "{{ payload.amount }}" inserts a value found by a dotted path in the render
-- context; "{{ payload.memo | default('n/a') }}" gives a fallback for a missing
-- value. Templates are parsed once by compile() and rendered many times; the
-- renderer never evaluates code, so hostile values are inserted literally
-- (escaped for HTML or JSON when asked). A literal "{{" is written {{ '{{' }}.

local json = require "crier.json"

local find, format, gmatch, gsub, sub, match =
    string.find, string.format, string.gmatch, string.gsub, string.sub, string.match
local concat = table.concat
local type, tostring, tonumber, error = type, tostring, tonumber, error

local null = json.null

local template = {}

local html_escapes = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }

-- template.escape_html(s): s with & < > " ' replaced by HTML entities.
function template.escape_html(s)
    return (gsub(s, "[&<>\"']", html_escapes))
end

-- Filters: name -> function(value, args) returning the new value. A filter
-- sees nil for a missing value; the renderer fails if nil comes out of the
-- last filter. args are the literal arguments from the template.
template.filters = {
    -- default(fallback): fallback when the value is missing or JSON null.
    default = function(value, args)
        if value == nil or value == null then
            return args[1]
        end
        return value
    end,
}

local function count_lines(str, from, to)
    local n = 0
    local i = from
    while true do
        local nl = find(str, "\n", i, true)
        if not nl or nl >= to then
            return n
        end
        n = n + 1
        i = nl + 1
    end
end

-- Parses the literal at the start of s: 'text', "text" or a number. Returns
-- the value and the rest of s, or nil.
local function parse_literal(s)
    local q = sub(s, 1, 1)
    if q == "'" or q == '"' then
        local close = find(s, q, 2, true)
        if not close then
            return nil
        end
        return sub(s, 2, close - 1), sub(s, close + 1)
    end
    local num, rest = match(s, "^(%-?%d+%.?%d*)(.*)$")
    if num then
        return tonumber(num), rest
    end
    return nil
end

-- Parses the inside of one {{ }} tag into { path = {segments} | literal = v,
-- filters = { { name, fn, args } }, source = text }. Returns it or nil, message.
local function parse_tag(body, filters)
    local expr = match(body, "^%s*(.-)%s*$")
    if expr == "" then
        return nil, "empty {{ }}"
    end
    local tag = { source = expr, filters = {} }
    local head, rest = match(expr, "^([%w_%.]+)(.*)$")
    if head then
        -- head: a name, then .name or .index segments.
        if not find(head, "^[%a_]") or find(head, "%.%.") or sub(head, -1) == "." then
            return nil, "bad path '" .. head .. "'"
        end
        local path = {}
        for seg in gmatch(head, "[^%.]+") do
            path[#path + 1] = find(seg, "^%d+$") and tonumber(seg) or seg
        end
        tag.path = path
    else
        local value
        value, rest = parse_literal(expr)
        if value == nil then
            return nil, "expected a dotted path or a quoted string in '" .. expr .. "'"
        end
        tag.literal = value
    end
    while true do
        rest = match(rest, "^%s*(.*)$")
        if rest == "" then
            break
        end
        local name, after = match(rest, "^|%s*([%a_][%w_]*)(.*)$")
        if not name then
            return nil, "expected '| filter' in '" .. expr .. "'"
        end
        local fn = filters[name]
        if not fn then
            return nil, "unknown filter '" .. name .. "'"
        end
        local args = {}
        after = match(after, "^%s*(.*)$")
        if sub(after, 1, 1) == "(" then
            after = sub(after, 2)
            while true do
                after = match(after, "^%s*(.*)$")
                if sub(after, 1, 1) == ")" then
                    after = sub(after, 2)
                    break
                end
                local value
                value, after = parse_literal(after)
                if value == nil then
                    return nil, "bad argument to filter '" .. name .. "' in '" .. expr .. "'"
                end
                args[#args + 1] = value
                after = match(after, "^%s*(.*)$")
                if sub(after, 1, 1) == "," then
                    after = sub(after, 2)
                elseif sub(after, 1, 1) ~= ")" then
                    return nil, "expected ',' or ')' after argument to '" .. name .. "'"
                end
            end
        end
        tag.filters[#tag.filters + 1] = { name = name, fn = fn, args = args }
        rest = after
    end
    return tag
end

local function stringify(value)
    local vt = type(value)
    if vt == "string" then
        return value
    elseif vt == "number" then
        return json.format_number(value) or tostring(value)
    elseif vt == "boolean" then
        return value and "true" or "false"
    end
    return nil, vt == "table" and "a table" or ("a " .. vt)
end

-- template.compile(source, opts): parses source once and returns a render
-- function(ctx) -> string, or nil, err on a syntax error. opts (optional):
--   name  -- used in error messages (default "template")
--   html  -- true: escape & < > " ' in inserted values
--   json  -- true: escape inserted values for use inside a JSON string literal
-- Errors read "<name>:<line>: <message>". The render function returns the
-- text, or nil, err when a value is missing (and has no default) or is a
-- table. A non-string source is a usage error.
function template.compile(source, opts)
    if type(source) ~= "string" then
        error("template.compile: source must be a string, got " .. type(source), 2)
    end
    opts = opts or {}
    if type(opts) ~= "table" then
        error("template.compile: opts must be a table, got " .. type(opts), 2)
    end
    local name = opts.name or "template"
    local filters = opts.filters or template.filters
    local escape
    if opts.html then
        escape = template.escape_html
    elseif opts.json then
        escape = json.quote
    end

    -- parts: literal strings and tags, in order.
    local parts = {}
    local pos, line = 1, 1
    while true do
        local open = find(source, "{{", pos, true)
        if not open then
            if pos <= #source then
                parts[#parts + 1] = sub(source, pos)
            end
            break
        end
        if open > pos then
            parts[#parts + 1] = sub(source, pos, open - 1)
        end
        line = line + count_lines(source, pos, open)
        local close = find(source, "}}", open + 2, true)
        if not close then
            return nil, format("%s:%d: unterminated '{{' (missing '}}')", name, line)
        end
        local body = sub(source, open + 2, close - 1)
        local tag, err = parse_tag(body, filters)
        if not tag then
            return nil, format("%s:%d: %s", name, line, err)
        end
        tag.line = line
        parts[#parts + 1] = tag
        line = line + count_lines(source, open, close)
        pos = close + 2
    end

    local n = #parts
    return function(ctx)
        local out = {}
        for i = 1, n do
            local part = parts[i]
            if type(part) == "string" then
                out[i] = part
            else
                local value
                if part.path then
                    value = ctx
                    local path = part.path
                    for j = 1, #path do
                        if type(value) ~= "table" or value == null then
                            value = nil
                            break
                        end
                        local seg = path[j]
                        local v = value[seg]
                        if v == nil and type(seg) == "number" then
                            v = value[tostring(seg)]
                        end
                        value = v
                    end
                else
                    value = part.literal
                end
                local fs = part.filters
                for j = 1, #fs do
                    value = fs[j].fn(value, fs[j].args)
                end
                if value == nil or value == null then
                    return nil, format("%s:%d: '%s' is missing (add | default('...') to allow that)",
                        name, part.line, part.source)
                end
                local s, why = stringify(value)
                if not s then
                    return nil, format("%s:%d: '%s' is %s, not text", name, part.line, part.source, why)
                end
                out[i] = escape and escape(s) or s
            end
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
