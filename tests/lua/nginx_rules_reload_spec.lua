-- crier.nginx's rules reload (M.rules_check, run by each worker's timer) with
-- a stand-in `ngx` whose sleep is where another process writes the rules
-- directory: a version is acted on only when the second read, after the
-- settle pause, agrees with the first — a file caught half-written (an
-- in-place `printf >` truncates, then writes) is neither loaded nor refused.
-- tests/integration/openresty_rules.sh covers the same in a real nginx.
local crier_nginx = require "crier.nginx"

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir))

local function write(name, text)
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(text)
    f:close()
end

local A = 'local crier = require "crier"\ncrier.event_type "ping" {}\n'
    .. 'crier.rule "ping" { recipients = { "ann" }, channels = { "feed" }, feed = { title = "ping" } }\n'
local B = 'local crier = require "crier"\ncrier.event_type "pong" {}\n'
    .. 'crier.rule "pong" { recipients = { "bob" }, channels = { "feed" }, feed = { title = "pong" } }\n'
local BROKEN = 'local crier = require "crier"\ncrier.rule "pong" { recipients = { "x" }\n'

-- during_sleep: what "another process" does while the worker pauses (nil: nothing).
local during_sleep
local logged = {}

setup(function()
    write("a.lua", A)
    crier_nginx.rules_init({ dir = dir, settings = {} })
    rawset(_G, "ngx", {
        ERR = "error", NOTICE = "notice",
        log = function(_, ...) logged[#logged + 1] = table.concat({ ... }) end,
        sleep = function()
            if during_sleep then
                during_sleep()
                during_sleep = nil
            end
        end,
    })
end)

teardown(function()
    rawset(_G, "ngx", nil)
    os.execute("rm -rf " .. dir)
end)

describe("crier.nginx.rules_check", function()
    it("does not load a file caught half-written, and loads it once it is whole", function()
        local before = crier_nginx.rules().version
        write("b.lua", "") -- truncated: what a reader sees between `>` and the write
        during_sleep = function() write("b.lua", B) end
        assert.are.equal("settling", (crier_nginx.rules_check()))
        assert.are.equal(before, crier_nginx.rules().version)
        assert.are.equal(0, #logged)
        assert.are.equal("swapped", (crier_nginx.rules_check()))
        assert.are_not.equal(before, crier_nginx.rules().version)
        local plan = assert(crier_nginx.rules().generation:plan({ type = "pong", tenant = "t", payload_json = "{}" }))
        assert.are.equal("bob", plan[1].recipient)
    end)

    it("does not refuse a file caught half-written, and refuses it once it stays broken", function()
        local before = crier_nginx.rules().version
        logged = {}
        write("b.lua", BROKEN)
        during_sleep = function() write("b.lua", BROKEN .. "-- still writing\n") end
        assert.are.equal("settling", (crier_nginx.rules_check()))
        assert.are.equal(0, #logged)
        local outcome, err = crier_nginx.rules_check()
        assert.are.equal("refused", outcome)
        assert.matches("b.lua:%d+:", err)
        assert.are.equal(1, #logged)
        assert.are.equal(before, crier_nginx.rules().version)
        assert.are.equal("refused", (crier_nginx.rules_check())) -- logged once
        assert.are.equal(1, #logged)
    end)
end)
