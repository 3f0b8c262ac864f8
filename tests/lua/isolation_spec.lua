-- Rule files cannot change what other files, other generations or the engine
-- see (issue 10, item 5): crier's modules and tables (template filters,
-- currency decimals, json's metatables), the standard libraries and query
-- objects are read-only views; a write raises and, while rules load, is a
-- load problem at the writer's file:line even when the rule catches it.
-- string.dump is out of reach, and filters of one's own are declared with
-- crier.filter, for the declaring file's templates only.
local runtime = require "crier.runtime"
local template = require "crier.template"
local json = require "crier.json"

-- A generation of files { { path, source }, ... }.
local function load(files)
    for i, f in ipairs(files) do
        files[i] = { path = f[1], source = f[2] }
    end
    return runtime.new_generation(files, {})
end

local declare = [[
local crier = require "crier"
crier.event_type "invoice.created" { payload = { amount_cents = "integer", currency = "string", who = "string?" } }
]]

-- file B: renders the amount with the built-in money filter.
local file_b = { "/rules/b.lua", [[
local crier = require "crier"
crier.rule "invoice.created" {
  recipients = { "alice" },
  channels = { "feed" },
  feed = { title = "{{ payload.amount_cents | money(payload.currency) }}" },
}
]] }

local function title(gen, payload)
    local plan, err = gen:plan({ id = 1, tenant = "acme", type = payload.type or "invoice.created", entity_id = "e1",
        payload_json = json.encode(payload.body or { amount_cents = 1250, currency = "EUR" }) })
    assert(plan, err)
    return json.decode(plan[1].deliveries[1].body).title
end

describe("rule files are isolated from each other", function()
    it("refuses a file's attempt to redefine a filter or currency decimals, even inside pcall", function()
        local gen, err = load({ { "/rules/a.lua", declare .. [[
local template = require "crier.template"
pcall(function() template.filters.money = function() return "pwned" end end)
pcall(function() template.currency_decimals.EUR = 0 end)
local ok = pcall(function() crier.json.array_mt.__index = { evil = true } end)
assert(not ok)
]] }, file_b })
        assert.is_nil(gen)
        assert.matches("/rules/a.lua:4: rules may not change crier.template.filters.money: ", err, 1, true)
        assert.matches("/rules/a.lua:5: rules may not change crier.template.currency_decimals.EUR: ", err, 1, true)
        assert.matches("/rules/a.lua:6: rules may not change crier.json.array_mt.__index: ", err, 1, true)
        local _, lines = err:gsub("\n", "")
        assert.are.equal(2, lines, err) -- three problems, once each
        -- the engine's tables are as they were, and file B renders as before
        assert.are.equal(2, template.currency_decimals.EUR or 2)
        assert.is_nil(getmetatable(json.array()).__index)
        gen = assert(load({ { "/rules/a.lua", declare }, file_b }))
        assert.are.equal("12.50 EUR", title(gen, {}))
    end)

    it("reports an uncaught attempt once, at its line", function()
        local _, err = load({ { "/rules/a.lua", declare .. "require('crier.template').filters.trim = nil\n" } })
        assert.are.equal("/rules/a.lua:3: rules may not change crier.template.filters.trim: crier's modules are "
            .. "shared by every rule file and by the engine (a filter for your own templates: crier.filter(name, "
            .. "function(value, args) ... end))", err)
    end)

    it("keeps other files' rendering intact when a rule tries it while running", function()
        local gen = assert(load({ { "/rules/a.lua", declare .. [[
crier.event_type "probe" {}
crier.rule "probe" {
  recipients = function()
    local ok, err = pcall(function() require("crier.template").filters.money = function() return "pwned" end end)
    assert(not ok and err:find("rules may not change crier.template.filters.money", 1, true), err)
    return { "x" }
  end,
  channels = { "feed" }, feed = { title = "probe" },
}
]] }, file_b }))
        assert.are.equal("probe", title(gen, { type = "probe", body = {} }))
        assert.are.equal("12.50 EUR", title(gen, {}))
    end)

    it("makes the standard libraries read-only", function()
        for _, write in ipairs({ "string.upper = nil", "table.concat = nil", "math.floor = nil",
            "os.time = function() return 0 end", "string.find = string.match" }) do
            local _, err = load({ { "/rules/a.lua", declare .. write .. "\n" } })
            assert.matches("/rules/a.lua:3: rules may not change " .. write:match("^[%w.]+") .. ": the standard "
                .. "libraries are shared by every rule file", err, 1, true)
        end
        assert.is_function(string.upper)
    end)

    it("keeps string.dump and the string metatable out of reach", function()
        local gen, err = load({ { "/rules/a.lua", declare .. [[
assert(string.dump == nil, "string.dump")
assert(("").dump == nil, '("").dump')
assert(getmetatable("") == nil, "string metatable")
assert(("%d"):format(5) == "5" and ("abc"):upper() == "ABC")
local ok = pcall(function() ("").dump = 1 end)
assert(not ok)
]] } })
        assert(gen, err)
        assert.is_function(("").dump) -- the engine's own strings keep their methods
    end)

    it("keeps JSON sentinels and metatables consistent", function()
        local gen, err = load({ { "/rules/a.lua", [[
local crier = require "crier"
local json = require "crier.json"
assert(getmetatable(json.array()) == json.array_mt)
assert(json.encode(json.array()) == "[]" and json.encode({ a = json.null }) == '{"a":null}')
crier.event_type "x" { payload = { v = "string?" } }
crier.rule "x" {
  recipients = function(event)
    assert(event.payload.v == json.null and crier.json.null == json.null)
    return { "a" }
  end,
  channels = { "feed" }, feed = { title = "t" },
}
]] } })
        assert(gen, err)
        assert(gen:plan({ id = 1, tenant = "t", type = "x", entity_id = "e", payload_json = '{"v": null}' }))
    end)

    it("makes query and pages objects read-only, so their SQL stays what was declared", function()
        local source = [[
local crier = require "crier"
local q = crier.query("members", "SELECT id FROM m WHERE org = $1 AND id > $2 ORDER BY id LIMIT $3")
local p = crier.pages { query = q, params = function(e) return { e.payload.org } end }
crier.event_type "x" { payload = { org = "string" } }
crier.rule "x" { recipients = p, channels = { "feed" }, feed = { title = "t" } }
]]
        for _, write in ipairs({ "q.sql = 'SELECT secret FROM crier.api_tenants'", "p.query = nil",
            "setmetatable(q, nil)", "setmetatable(p, nil)", "getmetatable(q).__call = nil" }) do
            local gen, err = load({ { "/rules/a.lua", source .. write .. "\n" } })
            assert.is_nil(gen, write)
            assert.matches("/rules/a.lua:6: ", err, 1, true)
        end
        local gen = assert(load({ { "/rules/a.lua", source } }))
        local seen
        gen:set_query_backend(function(_, sql)
            seen = sql
            return { { id = "ann" } }
        end)
        assert(gen:plan({ id = 1, tenant = "t", type = "x", entity_id = "e", payload_json = '{"org": "o"}' }))
        assert.are.equal("SELECT id FROM m WHERE org = $1 AND id > $2 ORDER BY id LIMIT $3", seen)
    end)
end)

describe("crier.filter", function()
    local rule = [[
crier.rule "invoice.created" {
  recipients = { "alice" }, channels = { "feed" },
  feed = { title = "{{ payload.who | initials }} {{ payload.amount_cents | money(payload.currency) }}" },
}
]]

    it("declares a filter for the declaring file's templates", function()
        local gen = assert(load({ { "/rules/a.lua", declare .. [[
crier.filter("initials", function(value)
  if value == nil then return nil end
  return (value:gsub("(%a)%a*%s*", "%1"))
end)
]] .. rule } }))
        assert.are.equal("AL 12.50 EUR", title(gen, { body = { amount_cents = 1250, currency = "EUR",
            who = "Ada Lovelace" } }))
    end)

    it("is not seen by other files", function()
        local _, err = load({
            { "/rules/a.lua", declare .. 'crier.filter("initials", function(v) return v end)\n' },
            { "/rules/b.lua", 'local crier = require "crier"\n' .. rule },
        })
        assert.matches("/rules/b.lua:2: rule 'invoice.created': feed.title:1: unknown filter 'initials'", err, 1, true)
    end)

    it("cannot replace a built-in filter or be declared twice in a file", function()
        local _, err = load({ { "/rules/a.lua", declare .. [[
crier.filter("money", function(v) return v end)
crier.filter("shout", function(v) return v end)
crier.filter("shout", function(v) return v end)
]] } })
        assert.matches("/rules/a.lua:3: crier.filter \"money\": a built-in filter has this name", err, 1, true)
        assert.matches("/rules/a.lua:5: crier.filter \"shout\" is declared twice in this file (first at "
            .. "/rules/a.lua:4)", err, 1, true)
        _, err = load({ { "/rules/a.lua", declare .. 'crier.filter("bad name", type)\n' } })
        assert.matches("/rules/a.lua:3: crier.filter: name must be", err, 1, true)
    end)

    it("runs under the rules' limits", function()
        local gen = assert(load({ { "/rules/a.lua", declare .. [[
crier.limits { instructions = 100000 }
crier.filter("initials", function() while true do end end)
]] .. rule } }))
        local plan, err = gen:plan({ id = 1, tenant = "acme", type = "invoice.created", entity_id = "e1",
            payload_json = '{"amount_cents": 1, "currency": "EUR", "who": "x"}' })
        assert.is_nil(plan)
        assert.matches("instruction limit", err, 1, true)
    end)
end)
