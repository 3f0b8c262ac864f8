-- Numbers (issue 10, item 7): what a double cannot hold exactly is refused,
-- never rounded or wrapped. A payload field declared "integer" takes whole
-- numbers within ±(2^53-1) only; the money filter refuses amounts outside
-- that range (digit strings stay exact at any size).
local runtime = require "crier.runtime"
local template = require "crier.template"

local MAX = "9007199254740991" -- 2^53 - 1

local function generation(source)
    return assert(runtime.new_generation({ { path = "/rules/n.lua", source = source } }, {}))
end

describe("integer payload fields", function()
    local gen = generation([[
local crier = require "crier"
crier.event_type "count" { payload = { n = "integer", x = "number?" } }
]])

    it("accept whole numbers up to 2^53-1 in magnitude", function()
        for _, n in ipairs({ "0", "-1", MAX, "-" .. MAX, "1e3", "4.0" }) do
            assert.is_true(gen:validate("count", '{"n": ' .. n .. "}"), n)
        end
    end)

    it("refuse what a double cannot hold exactly, naming the field and the limit", function()
        for _, n in ipairs({ "9007199254740992", "9007199254740993", "-9007199254740993", "1.23e29", "1e300" }) do
            local ok, err, code = gen:validate("count", '{"n": ' .. n .. "}")
            assert.is_nil(ok, n)
            assert.are.equal("invalid_payload", code)
            assert.matches("count: payload field 'n' is outside the integers a rule can hold exactly "
                .. "(-9007199254740991 to 9007199254740991, that is ±(2^53-1)); send larger values as strings",
                err, 1, true)
        end
        local _, err = gen:validate("count", '{"n": 1.5}')
        assert.matches("payload field 'n' must be an integer, got number", err, 1, true)
    end)

    it("leave number fields as doubles", function()
        assert.is_true(gen:validate("count", '{"n": 1, "x": 1.23e29}'))
    end)

    it("keep the billing example from rendering a wrapped amount", function()
        local f = assert(io.open("examples/rules/billing.lua", "rb"))
        local billing = generation(f:read("*a"))
        f:close()
        local plan, err, code = billing:plan({ id = 1, tenant = "acme", type = "invoice.created", entity_id = "i",
            payload_json = '{"invoice_id": "i", "amount_cents": 1.23e29, "currency": "EUR"}' })
        assert.is_nil(plan)
        assert.are.equal("invalid_payload", code)
        assert.matches("payload field 'amount_cents' is outside the integers", err, 1, true)
    end)
end)

describe("the money filter", function()
    local function money(v)
        return assert(template.compile("{{ v | money('EUR') }}"))({ v = v })
    end

    it("formats exactly up to 2^53-1 minor units", function()
        assert.are.equal("90071992547409.91 EUR", money(2 ^ 53 - 1))
        assert.are.equal("-90071992547409.91 EUR", money(-(2 ^ 53 - 1)))
        assert.are.equal("12.50 EUR", money(1250))
        assert.are.equal("1230000000000000000000000000.00 EUR", money("123000000000000000000000000000"))
    end)

    it("refuses amounts it cannot hold exactly, and never wraps", function()
        for _, v in ipairs({ 2 ^ 53, -2 ^ 53, 1.23e29, -1.23e29, math.huge, -math.huge, 0 / 0 }) do
            local out, err = money(v)
            assert.is_nil(out, tostring(v))
            assert.matches("money: ", err, 1, true)
            assert.matches("; pass larger amounts as a string of digits", err, 1, true)
        end
        local _, err = money(1.23e29)
        assert.matches("money: the number 1.23e+29 is not an exact amount of minor units: it is outside "
            .. "±9007199254740991, what a number holds exactly", err, 1, true)
    end)
end)
