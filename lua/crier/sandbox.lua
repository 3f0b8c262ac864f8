-- crier.sandbox: what rule code may see and how long it may run.
--
-- Rule files run in an allow-listed environment: the safe parts of the base
-- library, string/table/math, os.time/clock/date, and a require that only
-- returns crier's own pure-Lua modules. No io, os.execute, load, loadstring,
-- loadfile, dofile, debug, ffi, jit, coroutine, collectgarbage, C modules or
-- package; no setfenv/getfenv, rawset or string.dump (not even as ("").dump:
-- while rule code runs, the string methods are the rules' own library).
-- Globals are read-only: a write raises (rules keep state in locals), so
-- nothing leaks from one event to the next through the environment, and
-- reading a global that is not provided raises with the list of what is.
-- Every table a rule can reach that is shared — the libraries, crier's
-- modules and their tables (template filters, currency decimals, json's
-- metatables) — is a read-only view: a write raises "rules may not change
-- X: ...", and while rules load it is also a load problem at the writer's
-- file:line even when the rule catches the error, so one file cannot change
-- what another file (or the engine) sees.
--
-- Every rule call (and the loading of rule files) runs under limits: an
-- instruction budget and a CPU-time budget (os.clock) checked by a count hook, and a
-- memory ceiling checked there too (the engine also caps its Lua state's
-- allocator). Rule functions are kept out of the JIT compiler (jit.off(f,
-- true)), because compiled loops do not run hooks. A limit error cannot be
-- caught by the rule's own pcall. One C call is not interrupted by the hook:
-- rules' pattern functions are bounded before they run (crier.patterns) and
-- the clock is read after them. Pure Lua: works in LuaJIT, crier serve and
-- nginx.

local ipairs, type, pairs, error, tostring, tonumber, setmetatable, getmetatable, select, unpack, pcall, xpcall =
    ipairs, type, pairs, error, tostring, tonumber, setmetatable, getmetatable, select, unpack, pcall, xpcall
local collectgarbage, require = collectgarbage, require
local format, match, sub, concat, sort = string.format, string.match, string.sub, table.concat, table.sort
-- The wall clock of the limits: monotonic seconds (clock_gettime through the
-- FFI in LuaJIT, in crier serve and nginx alike); os.clock — the process's CPU
-- time, which other threads share — only where there is no FFI.
local clock = os.clock
do
    local ok, ffi = pcall(require, "ffi")
    if ok then
        pcall(ffi.cdef, [[
            struct crier_timespec { long tv_sec; long tv_nsec; };
            int clock_gettime(int clk_id, struct crier_timespec *tp);
        ]])
        local ts = ffi.new("struct crier_timespec")
        local C, CLOCK_MONOTONIC = ffi.C, 1
        if pcall(C.clock_gettime, CLOCK_MONOTONIC, ts) then
            clock = function()
                C.clock_gettime(CLOCK_MONOTONIC, ts)
                return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
            end
        end
    end
end
local sethook, gethook, getinfo = debug.sethook, debug.gethook, debug.getinfo
local jit = rawget(_G, "jit")
local patterns = require "crier.patterns"
local json = require "crier.json"

local sandbox = {}

-- Defaults when the rules state none (crier.limits { ... } overrides).
sandbox.default_limits = {
    instructions = 50000000, -- VM instructions per call
    time = 1.0,              -- wall-clock seconds per call
    memory = 256 * 1024 * 1024, -- bytes the Lua heap may grow during one call
}

local HOOK_EVERY = 1000

local limit_mt = {
    __tostring = function(e)
        return e.message
    end,
}

-- sandbox.is_limit_error(err): true for the error a limit raises.
function sandbox.is_limit_error(err)
    return getmetatable(err) == limit_mt
end

local units = { [""] = 1, B = 1, KB = 1024, MB = 1024 * 1024, GB = 1024 * 1024 * 1024 }
local time_units = { ms = 0.001, s = 1, [""] = 1 }

-- sandbox.parse_limits(spec): checks { instructions = n, time = "500ms"|seconds,
-- memory = "128MB"|bytes } and returns a full limits table, or nil and a
-- message naming the bad field.
function sandbox.parse_limits(spec)
    if type(spec) ~= "table" then
        return nil, "limits must be a table { instructions = ..., time = ..., memory = ... }"
    end
    local out = {}
    for k, v in pairs(sandbox.default_limits) do
        out[k] = v
    end
    for k, v in pairs(spec) do
        if k == "instructions" then
            if type(v) ~= "number" or v < 1000 or v ~= v then
                return nil, "limits.instructions must be a number of at least 1000"
            end
            out.instructions = v
        elseif k == "time" then
            local seconds = v
            if type(v) == "string" and #v <= 32 then -- (short: the pattern backtracks)
                local n, unit = match(v, "^(%d+%.?%d*)(m?s?)$")
                seconds = n and time_units[unit] and tonumber(n) * time_units[unit]
            end
            if type(seconds) ~= "number" or seconds <= 0 or seconds > 60 then
                return nil, "limits.time must be a duration from 1ms to 60s (\"200ms\", \"2s\" or seconds), got "
                    .. tostring(v)
            end
            out.time = seconds
        elseif k == "memory" then
            local bytes = v
            if type(v) == "string" and #v <= 32 then
                local n, unit = match(v, "^(%d+)%s*(%u*)$")
                bytes = n and units[unit] and tonumber(n) * units[unit]
            end
            if type(bytes) ~= "number" or bytes < 4 * 1024 * 1024 then
                return nil, "limits.memory must be at least 4MB (\"64MB\", \"1GB\" or bytes), got " .. tostring(v)
            end
            out.memory = bytes
        else
            return nil, format("limits: unknown field '%s' (expected instructions, time, memory)", tostring(k))
        end
    end
    return out
end

local function limit_error(message)
    return setmetatable({ message = message }, limit_mt)
end

-- sandbox.run(limits, fn, handler, ...): like xpcall(fn, handler, ...) with
-- the limits enforced. Returns what xpcall returns. (Module-level state, no
-- allocation per call: it runs once per event.)
--
-- The memory limit bounds how much the heap grows during the call (in nginx
-- the heap is shared with everything else in the worker, so its total says
-- nothing about the rule); crier serve also caps its rules state's allocator.
-- debug.sethook is global to the LuaJIT VM, not per coroutine: that is safe
-- because rule code cannot yield (the sandbox gives it no coroutines and no
-- ngx), so nothing else runs under the hook.
-- The state of the call running under the hook (one at a time: rule code
-- cannot yield, and a nested run shares the outer one's budget).
local active, budget, deadline, soft_deadline, memory_kb, base_kb, used, tripped, run_limits

local function hook()
    if tripped then
        error(tripped, 0) -- keep failing: a rule's pcall cannot swallow it
    end
    used = used + HOOK_EVERY
    if used > budget then
        tripped = limit_error(format("rule exceeded its instruction limit (%d instructions; raise it with "
            .. "crier.limits { instructions = ... })", budget))
    elseif clock() > deadline then
        tripped = limit_error(format("rule exceeded its time limit (%gs; raise it with crier.limits "
            .. "{ time = ... })", run_limits.time))
    elseif soft_deadline and clock() > soft_deadline then
        -- not a failure: the caller plans the event again apart (crier serve's slow lane)
        tripped = limit_error(format("rule ran longer than %gs: planned again in the slow lane",
            run_limits.soft))
        tripped.slow = true
    elseif collectgarbage("count") - base_kb > memory_kb then
        -- over by the count: collect once to see whether it is garbage
        collectgarbage()
        local now_kb = collectgarbage("count")
        if now_kb - base_kb > memory_kb then
            tripped = limit_error(format("rule exceeded the memory limit (%d MB; raise it with crier.limits "
                .. "{ memory = ... })", run_limits.memory / (1024 * 1024)))
        elseif now_kb < base_kb then
            base_kb = now_kb
        end
    end
    if tripped then
        error(tripped, 0)
    end
end

-- Matching steps of the rules' pattern functions since the clock was last
-- read: the hook counts VM instructions only, and a loop of a few hundred
-- instructions can make many long C calls.
local c_steps = 0
local CLOCK_EVERY = 1e6

-- after(steps, ...): called by the rules' string library after a C call with
-- its estimated steps and results; returns the results, or raises a limit
-- error (the hook's checks run every CLOCK_EVERY steps).
local function after_c_call(steps, ...)
    if active then
        c_steps = c_steps + steps
        if c_steps > CLOCK_EVERY or tripped then
            c_steps = 0
            hook()
        end
    end
    return ...
end

-- The string library rules get, as string.* and as the methods of string
-- values while rule code runs (the string metatable is shared by the whole
-- VM: outside rule calls its __index is restored).
local rules_string = patterns.string_library(after_c_call, function()
    return (active and run_limits or sandbox.default_limits).memory
end)
local string_mt = getmetatable("")

local finish_handler, old_hook, old_mask, old_count, old_string_index

local function finish(ok, ...)
    active = false
    string_mt.__index = old_string_index
    if old_hook then
        sethook(old_hook, old_mask, old_count)
    else
        sethook()
    end
    local limit = tripped
    tripped = nil
    if limit and ok then
        -- the limit tripped inside a pcall the rule made and the rule went on:
        -- still a failure
        return false, finish_handler(limit)
    end
    return ok, ...
end

function sandbox.run(limits, fn, handler, ...)
    if active then
        return xpcall(fn, handler, ...)
    end
    active, run_limits, finish_handler = true, limits, handler
    local now = clock()
    budget, deadline = limits.instructions, now + limits.time
    soft_deadline = limits.soft and now + limits.soft or nil
    memory_kb, base_kb = limits.memory / 1024, collectgarbage("count")
    used, tripped = 0, nil
    old_hook, old_mask, old_count = gethook()
    old_string_index, string_mt.__index = string_mt.__index, rules_string
    c_steps = 0
    sethook(hook, "", HOOK_EVERY)
    return finish(xpcall(fn, handler, ...))
end

-- sandbox.pause(): called by a query backend that is about to yield (nginx's
-- cosockets): takes the running call's limits state off the VM — the hook,
-- the rules' string library — so that whatever runs in the worker meanwhile
-- (other requests, other rules) is not measured or served as this rule.
-- Returns a token for sandbox.resume, or nil when no call is running. The
-- wall clock keeps counting: time spent waiting still counts against the
-- rule's time limit, as it does in crier serve.
function sandbox.pause()
    if not active then
        return nil
    end
    local token = {
        run_limits, finish_handler, budget, deadline, soft_deadline, memory_kb, base_kb, used, tripped,
        old_hook, old_mask, old_count, old_string_index, c_steps, collectgarbage("count"),
    }
    active = false
    string_mt.__index = old_string_index
    if old_hook then
        sethook(old_hook, old_mask, old_count)
    else
        sethook()
    end
    return token
end

-- sandbox.resume(token): puts a paused call back on the VM (nil: nothing).
-- Memory others allocated during the pause is not counted against the rule.
function sandbox.resume(token)
    if not token then
        return
    end
    run_limits, finish_handler, budget, deadline, soft_deadline, memory_kb, base_kb, used, tripped,
        old_hook, old_mask, old_count, old_string_index, c_steps = unpack(token, 1, 14)
    base_kb = base_kb + (collectgarbage("count") - token[15])
    old_hook, old_mask, old_count = gethook()
    active = true
    string_mt.__index = rules_string
    sethook(hook, "", HOOK_EVERY)
end

-- sandbox.protect(fn): keeps fn (and every function defined inside it) out of
-- the JIT compiler so that the limits' hook runs in its loops.
function sandbox.protect(fn)
    if jit and jit.off then
        jit.off(fn, true)
    end
    return fn
end

local function copy(t)
    local c = {}
    for k, v in pairs(t) do
        c[k] = v
    end
    return c
end

-- pcall/xpcall for rules: a limit error passes through.
local function safe_pcall(f, ...)
    local n, results
    local function pack(...)
        n = select("#", ...)
        results = { ... }
    end
    pack(pcall(f, ...))
    if not results[1] and sandbox.is_limit_error(results[2]) then
        error(results[2], 0)
    end
    return unpack(results, 1, n)
end

local function safe_xpcall(f, handler, ...)
    local n, results
    local function pack(...)
        n = select("#", ...)
        results = { ... }
    end
    pack(xpcall(f, function(e)
        if sandbox.is_limit_error(e) then
            return e
        end
        return handler(e)
    end, ...))
    if not results[1] and sandbox.is_limit_error(results[2]) then
        error(results[2], 0)
    end
    return unpack(results, 1, n)
end

-- Only crier's own pure-Lua modules.
local allowed_modules = {
    crier = true, ["crier.json"] = true, ["crier.template"] = true,
}

-- What rules see of the crier module: the declarations and helpers, read-only
-- (not its internals, such as the registry or the channel kinds, which a rule
-- could otherwise change for every later event).
local crier_public = {
    "event_type", "rule", "schedule", "filter", "setting", "query", "pages", "retry", "limits", "parse_retry",
    "preference_allows",
}

-- Raises "rules may not change <name>.<key>: <why>" at the writer's line; while
-- rules load, the attempt is also a load problem at that file:line, so that
-- `crier check` reports it even when the rule catches the error.
local function refuse(name, key, why)
    local message = format("rules may not change %s.%s: %s", name, tostring(key), why)
    local registry = require("crier")._registry()
    local info = getinfo(3, "Sl")
    if registry and registry.phase == "load" and info and info.currentline and info.currentline > 0 then
        local src = info.source or "?"
        src = sub(src, 1, 1) == "@" and sub(src, 2) or info.short_src
        registry.problems[#registry.problems + 1] = src .. ":" .. info.currentline .. ": " .. message
    end
    error(message, 3)
end

-- A read-only table whose reads come from source (a table, or a function(key)).
local function read_only(name, why, source)
    return setmetatable({}, {
        __index = source,
        __newindex = function(_, k)
            refuse(name, k, why)
        end,
        __metatable = false,
    })
end

-- Read-only views of crier's shared tables, one per table (a view cannot be
-- changed, so every file and generation can share it): nested tables are
-- views too, except the JSON sentinels, which are read-only themselves and
-- must keep their identity (v == json.null).
local views = {}
local as_is = { [json.null] = true, [json.empty_array] = true }

local function view(name, t, why)
    local v = views[t]
    if not v then
        v = read_only(name, why, function(_, k)
            local value = t[k]
            if type(value) == "table" and not as_is[value] then
                return view(name .. "." .. tostring(k), value, why)
            end
            return value
        end)
        views[t] = v
    end
    return v
end

local MODULE_WHY = "crier's modules are shared by every rule file and by the engine"

local function module_view(name)
    local why = MODULE_WHY
    if name == "crier.template" then
        why = why .. " (a filter for your own templates: crier.filter(name, function(value, args) ... end))"
    end
    return view(name, require(name), why)
end

local function crier_view()
    local crier = require "crier"
    local public = {}
    for _, name in ipairs(crier_public) do
        public[name] = crier[name]
    end
    public.json = module_view("crier.json")
    return read_only("crier", MODULE_WHY, public)
end

local function safe_require(name)
    if not allowed_modules[name] then
        error(format("require %q is not allowed in rules (allowed: crier, crier.json, crier.template)",
            tostring(name)), 2)
    end
    if name == "crier" then
        return crier_view()
    end
    return module_view(name)
end

-- Metatables crier shares between objects, which rules see as views.
local shared_metatables

local function safe_getmetatable(v)
    if type(v) == "string" then
        return nil -- the string metatable is shared: not the rules' to change
    end
    local mt = getmetatable(v)
    if not shared_metatables then
        local crier = require "crier"
        shared_metatables = { [json.array_mt] = "crier.json.array_mt", [crier.query_mt] = "crier.query_mt",
            [crier.pages_mt] = "crier.pages_mt" }
    end
    local name = shared_metatables[mt]
    if name then
        return view(name, mt, MODULE_WHY)
    end
    return mt
end

local LIBRARY_WHY = "the standard libraries are shared by every rule file; keep your own functions in locals"

-- The libraries rules see: read-only views of private copies (string is the
-- bounded library of crier.patterns).
local libraries = {
    string = read_only("string", LIBRARY_WHY, rules_string),
    table = read_only("table", LIBRARY_WHY, copy(table)),
    math = read_only("math", LIBRARY_WHY, copy(math)),
    os = read_only("os", LIBRARY_WHY, { time = os.time, clock = os.clock, date = os.date, difftime = os.difftime }),
}

-- sandbox.env(): a fresh environment for one generation's rule files.
function sandbox.env()
    local provided = {
        assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs,
        pcall = safe_pcall, xpcall = safe_xpcall, select = select, tonumber = tonumber,
        tostring = tostring, type = type, unpack = unpack, rawequal = rawequal, rawget = rawget,
        setmetatable = setmetatable, getmetatable = safe_getmetatable, require = safe_require,
        string = libraries.string, table = libraries.table, math = libraries.math, os = libraries.os,
        _VERSION = _VERSION,
    }
    local names = {}
    for k in pairs(provided) do
        names[#names + 1] = k
    end
    sort(names)
    local list = concat(names, ", ")
    local env = setmetatable({}, {
        __index = function(_, k)
            local v = provided[k]
            if v == nil and k ~= "_G" then
                error(format("global '%s' is not available to rules (the sandbox provides: %s)", tostring(k),
                    list), 2)
            end
            return v
        end,
        __newindex = function(_, k)
            error(format("rules may not set global '%s': declare it local (globals would leak between events)",
                tostring(k)), 2)
        end,
        __metatable = false,
    })
    provided._G = env
    return env
end

return sandbox
