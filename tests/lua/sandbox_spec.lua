-- The rules' sandbox: what rule files may reach, and the limits of a rule call.
local runtime = require "crier.runtime"

local header = 'local crier = require "crier"\ncrier.event_type "thing" { payload = {} }\n'

local function load_one(source)
    return runtime.new_generation({ { path = "/rules/main.lua", source = source } }, {})
end

local function rule_with(recipients_body, extra)
    return header .. (extra or "") .. 'crier.rule "thing" {\n  recipients = function(event)\n' .. recipients_body
        .. '\n  end,\n  channels = { "webhook" }, webhook = { url = "http://hooks.test/x" },\n}\n'
end

local function plan_error(source)
    local gen = assert(load_one(source))
    local plan, err, code = gen:plan({ id = 1, tenant = "acme", type = "thing", entity_id = "e1",
        payload_json = "{}" })
    assert.is_nil(plan)
    assert.are.equal("rule_error", code)
    return err
end

describe("the rules sandbox", function()
    for _, name in ipairs({ "io", "debug", "loadfile", "dofile", "load", "loadstring", "ffi", "jit",
        "setfenv", "getfenv", "collectgarbage", "rawset", "package", "coroutine", "module", "newproxy" }) do
        it("does not provide " .. name, function()
            local gen, err = load_one(header .. "local x = " .. name .. "\n")
            assert.is_nil(gen)
            assert.matches("main.lua:3: global '" .. name .. "' is not available to rules", err, 1, true)
        end)
    end

    it("has no os.execute, os.getenv, os.remove or string.dump", function()
        for _, expr in ipairs({ "os.execute", "os.getenv", "os.remove", "os.exit", "string.dump" }) do
            local gen = assert(load_one(header .. "assert(" .. expr .. " == nil, '" .. expr .. "')\n"))
            assert.is_truthy(gen)
        end
    end)

    it("refuses require of anything but crier's own modules", function()
        local gen, err = load_one(header .. 'local x = require "io"\n')
        assert.is_nil(gen)
        assert.matches('require "io" is not allowed in rules', err, 1, true)
        gen, err = load_one(header .. 'local x = require "ffi"\n')
        assert.is_nil(gen)
        assert.matches('require "ffi" is not allowed', err, 1, true)
        assert.is_truthy(load_one(header .. 'local json = require "crier.json"\nassert(json.encode)\n'))
    end)

    it("refuses writes to globals, at load and while running", function()
        local gen, err = load_one(header .. "counter = 0\n")
        assert.is_nil(gen)
        assert.matches("main.lua:3: rules may not set global 'counter'", err, 1, true)
        err = plan_error(rule_with("    seen = (seen or 0) + 1\n    return {}"))
        assert.matches("global 'seen' is not available to rules", err, 1, true)
    end)

    it("keeps the library tables of other generations and of crier untouched", function()
        -- (the libraries are read-only views: a write is refused, see isolation_spec.lua)
        local gen, err = load_one(header .. "string.upper = nil\ntable.concat = nil\n")
        assert.is_nil(gen)
        assert.matches("main.lua:3: rules may not change string.upper", err, 1, true)
        assert.are.equal("ABC", string.upper("abc"))
        assert.is_function(table.concat)
        assert.is_nil(select(2, load_one(header .. 'assert(getmetatable("") == nil)\n')))
    end)

    it("refuses bytecode rule files", function()
        local gen, err = load_one(string.dump(function() end))
        assert.is_nil(gen)
        assert.matches("attempt to load chunk with wrong mode", err, 1, true)
    end)
end)

describe("rule limits", function()
    it("stops an endless loop in a rule: that event fails with a clear error", function()
        local err = plan_error(rule_with("    while true do end"))
        assert.matches("rule exceeded its instruction limit", err, 1, true)
    end)

    it("stops an endless loop at load time", function()
        local gen, err = load_one(header .. "local n = 0\nwhile true do n = n + 1 end\n")
        assert.is_nil(gen)
        assert.matches("instruction limit", err, 1, true)
    end)

    it("cannot be swallowed by the rule's own pcall", function()
        local err = plan_error(rule_with(
            "    while true do pcall(function() while true do end end) end"))
        assert.matches("instruction limit", err, 1, true)
        err = plan_error(rule_with(
            "    for i = 1, 1e9 do xpcall(function() while true do end end, function(e) return e end) end"))
        assert.matches("instruction limit", err, 1, true)
    end)

    it("stops runaway memory", function()
        local err = plan_error(rule_with(
            "    local t = {}\n    for i = 1, 1e9 do t[i] = string.rep('x', 64) .. i end",
            'crier.limits { memory = "64MB", instructions = 1e9, time = "20s" }\n'))
        assert.matches("memory limit", err, 1, true)
    end)

    it("applies a time limit", function()
        local err = plan_error(rule_with("    local s = 0\n    for i = 1, 1e12 do s = s + i end",
            'crier.limits { instructions = 1e12, time = "50ms" }\n'))
        assert.matches("time limit (0.05s", err, 1, true)
    end)

    it("lets the next event run normally after a failure", function()
        local gen = assert(load_one(rule_with(
            '    if event.entity_id == "loop" then while true do end end\n    return { "alice" }')))
        local plan, err = gen:plan({ id = 1, tenant = "acme", type = "thing", entity_id = "loop", payload_json = "{}" })
        assert.is_nil(plan)
        assert.matches("instruction limit", err, 1, true)
        plan = assert(gen:plan({ id = 2, tenant = "acme", type = "thing", entity_id = "ok", payload_json = "{}" }))
        assert.are.equal("alice", plan[1].recipient)
    end)

    it("checks crier.limits", function()
        local _, err = load_one(header .. 'crier.limits { memory = "1KB" }\n')
        assert.matches("main.lua:3: crier.limits: limits.memory must be at least 4MB", err, 1, true)
        _, err = load_one(header .. "crier.limits { cpu = 1 }\n")
        assert.matches("unknown field 'cpu'", err, 1, true)
    end)
end)

describe("the crier module as rules see it", function()
    it("offers the declarations but not the internals, and cannot be changed", function()
        local gen, err = load_one(header .. "assert(crier._registry == nil and crier._set_registry == nil "
            .. "and crier.channel_kinds == nil, 'internals visible')\nassert(crier.rule and crier.query)\n")
        assert.is_truthy(gen, err)
        local _, err2 = load_one(header .. "crier.rule = nil\n")
        assert.matches("rules may not change crier.rule", err2, 1, true)
        local _, err3 = load_one(header .. 'local json = require "crier.json"\njson.encode = nil\n')
        assert.matches("rules may not change crier.json.encode", err3, 1, true)
        local _, err4 = load_one(header .. 'local t = require "crier.testing"\n')
        assert.matches('require "crier.testing" is not allowed', err4, 1, true)
    end)

    it("gives each generation its own limits", function()
        local a = assert(load_one(header .. 'crier.limits { instructions = 2000 }\n'))
        local b = assert(load_one(header))
        assert.are_not.equal(a.registry.limits, b.registry.limits)
        assert.are.equal(2000, a.registry.limits.instructions)
        assert.are_not.equal(2000, b.registry.limits.instructions)
    end)
end)
