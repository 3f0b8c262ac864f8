-- crier.patterns: the string library that rules get, with bounded pattern
-- functions. Lua's matcher backtracks, and one call of string.find, match,
-- gmatch or gsub runs in C, where the rules' instruction hook cannot stop it:
-- '.-.-.-x' on 30,000 bytes would run for hours. Before calling the real
-- function each wrapper bounds the matcher's worst case on this subject and
-- refuses the call, with "pattern too complex for a rule: ...", when the
-- bound is over patterns.max_steps. Pure Lua.
--
-- The bound: Lua tries the pattern at each start position (one, when it is
-- anchored with ^), and at each start an item that can match a variable
-- length (x*, x+, x-) retries every length it can take whenever something
-- after it in the pattern fails; x? tries two. So the steps are at most
--   starts * items * 2^(x? items) * product over retrying items of (run + 1)
-- where run is the longest stretch of the subject the item's class matches
-- (the whole subject for '.'), the number of x in s for %bxy, and the subject
-- length for a back-reference %1-%9. An item with only never-failing items
-- after it (x*, x-, x?, captures) never retries, so '%s+' in gsub, '[^,]+'
-- in gmatch or '(%w+)$' stay linear. gsub also counts the bytes its result
-- may take.

local byte, find, format, gmatch, gsub, match, rep, sub =
    string.byte, string.find, string.format, string.gmatch, string.gsub, string.match, string.rep, string.sub
local type, tostring, error, pairs, pcall = type, tostring, error, pairs, pcall
local huge = math.huge

local patterns = {}

-- The most matching steps one call may take (about 0.1 s of one core at
-- worst).
patterns.max_steps = 1e7

-- Bytes that make a find pattern a pattern (LuaJIT's lj_str_haspattern).
local SPECIALS = "[%^%$%*%+%?%.%(%[%%%-]"

local function malformed(message)
    error({ malformed = message }, 0)
end

-- Index after the single-character class starting at i (lstrlib's classEnd).
local function class_end(p, i, len)
    local c = byte(p, i)
    if c == 37 then -- %
        if i >= len then
            malformed("malformed pattern (ends with '%')")
        end
        return i + 2
    elseif c == 91 then -- [
        local j = i + 1
        if byte(p, j) == 94 then -- ^
            j = j + 1
        end
        repeat
            if j > len then
                malformed("malformed pattern (missing ']')")
            end
            local cj = byte(p, j)
            j = j + 1
            if cj == 37 and j <= len then
                j = j + 1
            end
        until byte(p, j) == 93 and j <= len
        return j + 1
    end
    return i + 1
end

-- The pattern text matching a run of the class p:sub(i, e - 1), positions
-- captured: "()" .. class .. "+()" (a plain character is escaped when it is
-- not alphanumeric, so '^' or '(' stay characters).
local function run_pattern(class)
    if #class == 1 and not find(class, "%w") then
        class = "%" .. class
    end
    return "()" .. class .. "+()"
end

-- Parses pattern p (up to its first NUL, where Lua's matcher stops) into
-- { anchored, items = n, optional = count of x? that retry, retrying = {
-- { kind = "run", class = "." | pattern } | { kind = "balance", open = "(" }
-- | { kind = "backref" } } }. Raises { malformed = message } for a malformed
-- pattern.
local function analyze(p, anchors)
    local len = (find(p, "\0", 1, true) or #p + 1) - 1
    local i, anchored = 1, false
    if anchors and byte(p, 1) == 94 then
        i, anchored = 2, true
    end
    local items = {} -- { can_fail = bool, retry = nil | descriptor | "optional" }
    while i <= len do
        local c = byte(p, i)
        local d = i < len and byte(p, i + 1) or nil
        local item
        if c == 40 then -- ( or ()
            i = i + (d == 41 and 2 or 1)
            item = { can_fail = false }
        elseif c == 41 then
            i = i + 1
            item = { can_fail = false }
        elseif c == 36 and i == len then -- $ at the end
            i = i + 1
            item = { can_fail = true }
        elseif c == 37 and d == 98 then -- %bxy
            if i + 3 > len then
                malformed("unbalanced pattern")
            end
            item = { can_fail = true, always = { kind = "balance", open = sub(p, i + 2, i + 2) } }
            i = i + 4
        elseif c == 37 and d == 102 then -- %f[set]
            if i + 2 > len or byte(p, i + 2) ~= 91 then
                malformed("missing '[' after '%f' in pattern")
            end
            i = class_end(p, i + 2, len)
            item = { can_fail = true }
        elseif c == 37 and d and d >= 48 and d <= 57 then -- %0-%9
            i = i + 2
            item = { can_fail = true, always = { kind = "backref" } }
        else
            local e = class_end(p, i, len)
            local q = e <= len and byte(p, e) or nil
            local class = sub(p, i, e - 1)
            if q == 42 or q == 45 then -- * -
                item = { can_fail = false, retry = { kind = "run", class = class } }
                e = e + 1
            elseif q == 43 then -- +
                item = { can_fail = true, retry = { kind = "run", class = class } }
                e = e + 1
            elseif q == 63 then -- ?
                item = { can_fail = false, retry = "optional" }
                e = e + 1
            else
                item = { can_fail = true }
            end
            i = e
        end
        items[#items + 1] = item
    end
    local result = { anchored = anchored, items = #items, optional = 0, retrying = {} }
    local failing_after = false
    for j = #items, 1, -1 do
        local item = items[j]
        if item.always then
            result.retrying[#result.retrying + 1] = item.always
        elseif item.retry and failing_after then
            if item.retry == "optional" then
                result.optional = result.optional + 1
            else
                result.retrying[#result.retrying + 1] = item.retry
            end
        end
        failing_after = failing_after or item.can_fail
    end
    if result.items == 0 then
        result.items = 1
    end
    return result
end

-- Analyses by pattern and kind, kept for the patterns seen most recently.
local cache, cached = {}, 0

local function analysis(p, anchors)
    local key = anchors and p or ("\0g" .. p)
    local a = cache[key]
    if not a then
        a = analyze(p, anchors)
        if cached >= 256 then
            cache, cached = {}, 0
        end
        cache[key], cached = a, cached + 1
    end
    return a
end

-- The longest stretch of s that one class matches.
local function longest_run(s, class)
    if class == "." then
        return #s
    end
    local best = 0
    for from, to in gmatch(s, run_pattern(class)) do
        if to - from > best then
            best = to - from
        end
    end
    return best
end

-- How many times the byte c occurs in s.
local function count_byte(s, c)
    local class = c == "\0" and "%z" or (find(c, "%w") and c or "%" .. c)
    local _, n = gsub(s, class, "")
    return n
end

-- Worst-case steps of matching a (an analysis) over s; stops early at more
-- than the budget.
local function steps(a, s)
    local n = #s
    local w = (a.anchored and 1 or n + 1) * a.items * 2 ^ a.optional
    local retrying = a.retrying
    for j = 1, #retrying do
        if w > patterns.max_steps then
            return w
        end
        local r = retrying[j]
        local factor = n + 1
        if r.kind == "balance" then
            factor = count_byte(s, r.open) + 1
        elseif r.kind == "run" and w * (n + 1) > patterns.max_steps then
            -- the whole subject would do; measure the longest run only when it matters
            factor = longest_run(s, r.class) + 1
        end
        w = w * factor
    end
    return w
end

local function show(p)
    if #p > 40 then
        p = sub(p, 1, 37) .. "..."
    end
    return (format("%q", p):gsub("\\\n", "\\n"))
end

local function too_complex(name, p, n, w, level)
    error(format("pattern too complex for a rule: %s with %s on %d bytes could take over %.2g matching steps "
        .. "(the limit is %.2g): each variable-length item (.- .* %%s* a+ ...) with more pattern after it "
        .. "retries over the subject; anchor the pattern with ^, use fewer such items, or shorten the subject",
        name, show(p), n, w, patterns.max_steps), level + 1)
end

-- patterns.steps(name, s, p, anchors, plain, level): the worst-case matching
-- steps of one call, or an error at `level` (counted like error's) when they
-- are over the budget or p is malformed. s and p are strings; anchors is
-- false for gmatch (where ^ is a plain character); plain for find's plain
-- search (also used when p has no special characters).
function patterns.steps(name, s, p, anchors, plain, level)
    local w
    if plain or (name == "string.find" and not find(p, SPECIALS)) then
        w = (#s + 1) * (1 + #p / 16)
    else
        local ok, a = pcall(analysis, p, anchors)
        if not ok then
            if type(a) == "table" and a.malformed then
                error(a.malformed, level + 1)
            end
            error(a, 0)
        end
        w = steps(a, s)
    end
    if w > patterns.max_steps then
        too_complex(name, p, #s, w, level + 1)
    end
    return w
end

-- Bytes gsub's result may take with a string replacement: every possible
-- match (max_n of them at most) replaced by repl, and each %0-%9 in it
-- copying at most the whole subject once over all matches.
local function gsub_bytes(s, repl, max_n)
    local matches = #s + 1
    if type(max_n) == "number" and max_n < matches then
        matches = max_n > 0 and max_n or 0
    end
    local _, refs = gsub(repl, "%%%d", "")
    return matches * #repl + refs * #s
end

local function text(v)
    local t = type(v)
    if t == "string" then
        return v
    elseif t == "number" then
        return tostring(v)
    end
    return nil
end

-- patterns.string_library(after, max_bytes): a new table with the string
-- functions rules may use: no string.dump, find, match, gmatch and gsub
-- bounded as above, and rep refusing a result larger than max_bytes() (the
-- rules' memory limit: one allocation the hook would only see afterwards).
-- after(steps, ...) is called with the estimated steps and the real
-- function's results and returns the results (the sandbox checks its clock
-- there). Arguments that are not strings or numbers go to the real function
-- unchanged, which raises its usual error.
function patterns.string_library(after, max_bytes)
    local lib = {}
    for k, v in pairs(string) do
        lib[k] = v
    end
    lib.dump = nil

    lib.find = function(s, p, init, plain)
        local ts, tp = text(s), text(p)
        if not (ts and tp) then
            return find(s, p, init, plain)
        end
        return after(patterns.steps("string.find", ts, tp, true, plain, 2), find(ts, tp, init, plain))
    end
    lib.match = function(s, p, init)
        local ts, tp = text(s), text(p)
        if not (ts and tp) then
            return match(s, p, init)
        end
        return after(patterns.steps("string.match", ts, tp, true, false, 2), match(ts, tp, init))
    end
    lib.gmatch = function(s, p)
        local ts, tp = text(s), text(p)
        if not (ts and tp) then
            return gmatch(s, p)
        end
        return after(patterns.steps("string.gmatch", ts, tp, false, false, 2), gmatch(ts, tp))
    end
    lib.gsub = function(s, p, repl, max_n)
        local ts, tp = text(s), text(p)
        if not (ts and tp) then
            return gsub(s, p, repl, max_n)
        end
        local w = patterns.steps("string.gsub", ts, tp, true, false, 2)
        local trepl = text(repl)
        if trepl then
            w = w + gsub_bytes(ts, trepl, max_n) / 8
            if w > patterns.max_steps then
                too_complex("string.gsub", tp, #ts, w, 2)
            end
        end
        return after(w, gsub(ts, tp, repl, max_n))
    end
    lib.rep = function(s, n, sep)
        local ts, tsep = text(s), sep == nil and "" or text(sep)
        if ts and tsep and type(n) == "number" and n > 1 then
            local bytes, most = #ts * n + #tsep * (n - 1), max_bytes()
            if bytes > most or bytes ~= bytes or bytes == huge then
                error(format("string.rep: not enough memory for a result of %.0f bytes (the rules' memory limit "
                    .. "is %.0f MB)", bytes, most / (1024 * 1024)), 2)
            end
            return after(bytes / 8, rep(s, n, sep))
        end
        return rep(s, n, sep)
    end
    return lib
end

return patterns
