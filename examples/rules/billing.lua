-- Billing alerts: when an invoice is issued for a tenant, each of that
-- tenant's billing admins gets exactly one webhook alert about it.
-- Settings: billing_webhook_url (where alerts go) and billing_webhook_secret
-- (optional "whsec_..." key; without it alerts are sent unsigned).
local crier = require "crier"

-- Billing admins per tenant. A real deployment would keep these elsewhere;
-- a table in the rule file keeps the example self-contained.
local admins = {
    acme = { "alice", "bob", "carol" },
    globex = { "dave", "erin" },
}

local webhook_url = crier.setting("billing_webhook_url", "http://127.0.0.1:8080/hooks/billing")
local webhook_secret = crier.setting("billing_webhook_secret", nil)

crier.event_type "invoice.created" {
    description = "An invoice was issued to a tenant's customer",
    payload = {
        invoice_id = "string",
        amount_cents = "integer",
        currency = "string",
        memo = "string?",
    },
}

-- 1250 -> "12.50", -5 -> "-0.05"
local function format_amount(cents)
    local sign = cents < 0 and "-" or ""
    cents = math.abs(cents)
    return string.format("%s%d.%02d", sign, math.floor(cents / 100), cents % 100)
end

crier.rule "invoice.created" {
    description = "Tell every billing admin of the tenant about a new invoice",
    recipients = function(event)
        return admins[event.tenant] or {}
    end,
    channels = { "webhook" },
    webhook = {
        url = webhook_url,
        secret = webhook_secret,
        body = function(event, recipient)
            local p = event.payload
            return {
                type = event.type,
                tenant = event.tenant,
                invoice_id = p.invoice_id,
                amount_cents = p.amount_cents,
                currency = p.currency,
                recipient = recipient.id,
                text = string.format("Invoice %s for %s %s was issued",
                    p.invoice_id, format_amount(p.amount_cents), p.currency),
            }
        end,
    },
}
