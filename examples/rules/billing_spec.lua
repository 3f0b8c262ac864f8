-- busted spec for the billing example rule, written the way a rule author
-- would: crier.testing loads this directory exactly as the engine does (every
-- *.lua file but the specs, sorted by name), then checks who is alerted about
-- an issued invoice, what each webhook carries and under which key.
--   busted --lua=luajit examples/rules     (crier's lua/ directory on LUA_PATH)

-- This file's directory, so the spec runs from any working directory.
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
-- Inside the crier source tree, use its library when LUA_PATH lacks it.
package.path = package.path .. ";" .. here .. "/../../lua/?.lua;" .. here .. "/../../lua/?/init.lua"

local testing = require "crier.testing"

local function invoice(tenant, payload)
    return {
        type = "invoice.created",
        tenant = tenant,
        entity_id = "inv_1",
        payload = payload or { invoice_id = "inv_1", amount_cents = 1250, currency = "EUR" },
    }
end

describe("billing rule", function()
    local rules
    before_each(function()
        rules = testing.load(here)
    end)

    it("declares invoice.created", function()
        assert.is_truthy(rules:validate("invoice.created",
            { invoice_id = "i", amount_cents = 1, currency = "EUR", memo = "m" }))
    end)

    it("alerts each acme admin once by webhook", function()
        local result = rules:plan(invoice("acme"))
        testing.assert_recipients(result, { "alice", "bob", "carol" })
        for _, who in ipairs({ "alice", "bob", "carol" }) do
            local hook = testing.assert_delivered(result, who, "webhook")
            assert.are.equal("http://127.0.0.1:8080/hooks/billing", hook.url)
            assert.is_false(hook.signed)
            assert.are.same({
                type = "invoice.created",
                tenant = "acme",
                invoice_id = "inv_1",
                amount_cents = 1250,
                currency = "EUR",
                recipient = who,
                text = "Invoice inv_1 for 12.50 EUR was issued",
            }, hook.body)
            testing.assert_not_planned(result, who, "email")
        end
    end)

    it("gives each alert a key of its own that a retried batch reproduces", function()
        local first = rules:plan(invoice("acme"))
        local alice = first:recipient("alice")
        assert.are.equal("invoice.created:inv_1:alice", alice.key)
        assert.matches("^msg_%x+$", alice.message_id)
        assert.are_not.equal(alice.message_id, first:recipient("bob").message_id)
        -- the job runner retries the whole batch: the same event, the same keys,
        -- so the database's unique index keeps one notification per admin
        local retried = rules:plan(invoice("acme"))
        for i, entry in ipairs(first.entries) do
            assert.are.equal(entry.message_id, retried.entries[i].message_id)
        end
        -- the same invoice number in another tenant is another notification
        assert.are_not.equal(alice.key_hash, rules:plan(invoice("globex")).entries[1].key_hash)
    end)

    it("alerts globex's admins, and nobody for a tenant without admins", function()
        testing.assert_recipients(rules:plan(invoice("globex")), { "dave", "erin" })
        testing.assert_recipients(rules:plan(invoice("initech")), {})
    end)

    it("formats small and negative amounts", function()
        local function text(cents)
            local result = rules:plan(invoice("globex",
                { invoice_id = "inv_2", amount_cents = cents, currency = "USD" }))
            return result:delivery("dave", "webhook").body.text
        end
        assert.are.equal("Invoice inv_2 for 0.05 USD was issued", text(5))
        assert.are.equal("Invoice inv_2 for -3.07 USD was issued", text(-307))
        assert.are.equal("Invoice inv_2 for 1000.00 USD was issued", text(100000))
    end)

    it("takes the webhook url and secret from settings", function()
        rules = testing.load(here, { settings = {
            billing_webhook_url = "https://billing.example/hooks",
            billing_webhook_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        } })
        local hook = rules:plan(invoice("acme")):delivery("alice", "webhook")
        assert.are.equal("https://billing.example/hooks", hook.url)
        assert.are.equal("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", hook.secret)
        assert.is_true(hook.signed)
    end)

    it("honours an admin's stored preference to mute billing webhooks", function()
        local result = rules:plan(invoice("acme"), { preferences = {
            bob = { { event_type = "invoice.created", channel = "webhook", enabled = false } },
        } })
        testing.assert_suppressed(result, "bob", "webhook")
        assert.are.same({ "alice", "carol" }, result:delivered_to("webhook"))
    end)

    it("refuses invoices that do not match the schema", function()
        local bad = invoice("acme", { invoice_id = "inv_1", amount_cents = 12.5, currency = "EUR" })
        testing.assert_plan_error(rules, bad, "invalid_payload",
            "invoice.created: payload field 'amount_cents' must be an integer, got number")
        testing.assert_plan_error(rules, { type = "invoice.deleted" }, "unknown_event_type")
    end)
end)
