-- crier.schedule: recurring schedules declared by rules, checked when they
-- load (crier check) with file:line — a bad cron field, an unknown zone, an
-- undeclared event type, a payload the type refuses, a duplicate — and what
-- the daemon receives (gen:schedules_json).
local runtime = require "crier.runtime"
local json = require "crier.json"

local declare = [[
local crier = require "crier"
crier.event_type "summary.daily" { payload = { schedule = "string", occurrence = "string", scope = "string?" } }
]]

-- rules whose line 3 is `crier.schedule "NAME" { BODY }`
local function load(body, name)
    return runtime.new_generation({ { path = "/rules/s.lua",
        source = declare .. 'crier.schedule "' .. (name or "daily") .. '" { ' .. body .. " }\n" } }, {})
end

describe("crier.schedule", function()
    it("declares a schedule the daemon gets as JSON", function()
        local gen = assert(load('cron = "0 8 * * *", time_zone = "Europe/Berlin", tenants = { "acme", "globex" }, '
            .. 'event = "summary.daily", payload = { scope = "all" }, catch_up = "latest"'))
        local list = json.decode(gen:schedules_json())
        assert.are.same({ {
            name = "daily", cron = "0 8 * * *", time_zone = "Europe/Berlin", tenants = { "acme", "globex" },
            event_type = "summary.daily", entity = "daily", payload = { scope = "all" }, catch_up = "latest",
        } }, list)
        assert.are.equal("/rules/s.lua:3", gen:schedules()[1].where)
    end)

    it("defaults: zone UTC, entity the name, payload {}, catch_up each", function()
        local gen = assert(load('cron = "*/2 * * * * *", tenants = { "acme" }, event = "summary.daily"'))
        local sc = json.decode(gen:schedules_json())[1]
        assert.are.equal("UTC", sc.time_zone)
        assert.are.equal("daily", sc.entity)
        assert.are.same({}, sc.payload)
        assert.are.equal("each", sc.catch_up)
        assert.matches('"payload":{}', gen:schedules_json(), 1, true)
    end)

    it("gives [] when the rules declare none", function()
        local gen = assert(runtime.new_generation({ { path = "/rules/s.lua", source = declare } }, {}))
        assert.are.equal("[]", gen:schedules_json())
    end)

    local refused = {
        { 'cron = "0 25 * * *", tenants = { "acme" }, event = "summary.daily"',
            "/rules/s.lua:3: schedule 'daily': cron \"0 25 * * *\": hour: 25 is out of range 0-23" },
        { 'cron = "0 8 * *", tenants = { "acme" }, event = "summary.daily"',
            "/rules/s.lua:3: schedule 'daily': cron \"0 8 * *\" has 4 fields; expected 5" },
        { 'tenants = { "acme" }, event = "summary.daily"', "/rules/s.lua:3: schedule 'daily': cron is required" },
        { 'cron = "0 8 * * *", time_zone = "Europe/Berlim", tenants = { "acme" }, event = "summary.daily"',
            "/rules/s.lua:3: schedule 'daily': unknown time zone \"Europe/Berlim\"" },
        { 'cron = "0 8 * * *", tenants = { "acme" }, event = "summary.weekly"',
            "/rules/s.lua:3: schedule 'daily': event type 'summary.weekly' is not declared" },
        { 'cron = "0 8 * * *", tenants = {}, event = "summary.daily"',
            "/rules/s.lua:3: schedule 'daily': tenants must be a non-empty list" },
        { 'cron = "0 8 * * *", tenants = { "acme" }, event = "summary.daily", catch_up = "all"',
            "/rules/s.lua:3: schedule 'daily': catch_up must be \"each\"" },
        { 'cron = "0 8 * * *", tenants = { "acme" }, event = "summary.daily", payload = { scope = 3 }',
            "/rules/s.lua:3: schedule 'daily': its events would be refused: summary.daily: payload field 'scope' "
                .. "must be a string" },
        { 'cron = "0 8 * * *", tenants = { "acme" }, event = "summary.daily", every = "day"',
            "/rules/s.lua:3: schedule 'daily': unknown field 'every'" },
    }
    for _, case in ipairs(refused) do
        it("refuses " .. case[1], function()
            local gen, err = load(case[1])
            assert.is_nil(gen)
            assert(err:find(case[2], 1, true), "got: " .. tostring(err))
        end)
    end

    it("refuses a second schedule of one name", function()
        local gen, err = runtime.new_generation({ { path = "/rules/s.lua", source = declare
            .. 'crier.schedule "d" { cron = "0 8 * * *", tenants = { "a" }, event = "summary.daily" }\n'
            .. 'crier.schedule "d" { cron = "0 9 * * *", tenants = { "a" }, event = "summary.daily" }\n' } }, {})
        assert.is_nil(gen)
        assert.matches("/rules/s.lua:4: schedule 'd' is declared twice %(first at /rules/s.lua:3%)", err)
    end)

    it("raises on a bad name", function()
        local gen, err = load('cron = "0 8 * * *", tenants = { "a" }, event = "summary.daily"', "no spaces")
        assert.is_nil(gen)
        assert.matches("crier.schedule: name must be", err)
    end)
end)
