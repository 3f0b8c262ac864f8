-- busted spec for the billing example rule: loads billing.lua through
-- crier.runtime exactly as the daemon does, then checks who is alerted about
-- an issued invoice and what each webhook carries.
--   busted --lua=luajit examples/rules     (crier's lua/ directory on LUA_PATH)

-- This file's directory, so the spec runs from any working directory.
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
-- Inside the crier source tree, use its library when LUA_PATH lacks it.
package.path = package.path .. ";" .. here .. "/../../lua/?.lua;" .. here .. "/../../lua/?/init.lua"

local json = require "crier.json"
local runtime = require "crier.runtime"

local function read(path)
    local f = assert(io.open(path, "rb"))
    local text = f:read("*a")
    f:close()
    return text
end

local function load_billing(settings)
    local path = here .. "/billing.lua"
    local gen, err = runtime.new_generation({ { path = path, source = read(path) } }, settings)
    assert(gen, err)
    return gen
end

local function invoice_event(tenant, payload)
    return {
        id = 1001,
        tenant = tenant,
        type = "invoice.created",
        entity_id = "inv_1",
        payload_json = json.encode(payload or { invoice_id = "inv_1", amount_cents = 1250, currency = "EUR" }),
    }
end

describe("billing rule", function()
    it("declares invoice.created", function()
        assert.are.same({ "invoice.created" }, load_billing():event_types())
    end)

    it("alerts each acme admin once by webhook", function()
        local plan = assert(load_billing():plan(invoice_event("acme")))
        assert.are.equal(3, #plan)
        for i, who in ipairs({ "alice", "bob", "carol" }) do
            local entry = plan[i]
            assert.are.equal(who, entry.recipient)
            assert.is_nil(entry.discriminator)
            assert.are.equal(1, #entry.deliveries)
            local d = entry.deliveries[1]
            assert.are.equal("webhook", d.channel)
            assert.are.equal("http://127.0.0.1:8080/hooks/billing", d.url)
            assert.is_nil(d.secret)
            assert.are.same({
                type = "invoice.created",
                tenant = "acme",
                invoice_id = "inv_1",
                amount_cents = 1250,
                currency = "EUR",
                recipient = who,
                text = "Invoice inv_1 for 12.50 EUR was issued",
            }, json.decode(d.body))
        end
    end)

    it("alerts globex's admins, and nobody for a tenant without admins", function()
        local gen = load_billing()
        local plan = gen:plan(invoice_event("globex"))
        assert.are.same({ "dave", "erin" }, { plan[1].recipient, plan[2].recipient })
        assert.are.same({}, gen:plan(invoice_event("initech")))
    end)

    it("formats small and negative amounts", function()
        local gen = load_billing()
        local body = function(cents)
            local plan = gen:plan(invoice_event("globex",
                { invoice_id = "inv_2", amount_cents = cents, currency = "USD" }))
            return json.decode(plan[1].deliveries[1].body).text
        end
        assert.are.equal("Invoice inv_2 for 0.05 USD was issued", body(5))
        assert.are.equal("Invoice inv_2 for -3.07 USD was issued", body(-307))
        assert.are.equal("Invoice inv_2 for 1000.00 USD was issued", body(100000))
    end)

    it("takes the webhook url and secret from settings", function()
        local gen = load_billing({
            billing_webhook_url = "https://billing.example/hooks",
            billing_webhook_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        })
        local d = gen:plan(invoice_event("acme"))[1].deliveries[1]
        assert.are.equal("https://billing.example/hooks", d.url)
        assert.are.equal("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", d.secret)
    end)

    it("refuses invoices that do not match the schema", function()
        local gen = load_billing()
        local plan, err, code = gen:plan(invoice_event("acme",
            { invoice_id = "inv_1", amount_cents = 12.5, currency = "EUR" }))
        assert.is_nil(plan)
        assert.are.equal("invalid_payload", code)
        assert.are.equal("invoice.created: payload field 'amount_cents' must be an integer, got number", err)
        assert.is_true(gen:validate("invoice.created",
            '{"invoice_id":"i","amount_cents":1,"currency":"EUR","memo":"m"}'))
    end)
end)
