-- The example's rules: an order.created event tells its customer in their
-- feed. Edit this file while nginx runs: every worker picks the new version
-- up within a second (a broken edit is refused and logged; the old one runs on).
local crier = require "crier"

crier.event_type "order.created" {
    payload = { order_id = "string", customer = "string", total_cents = "integer" },
}

crier.rule "order.created" {
    recipients = function(event)
        return { event.payload.customer }
    end,
    channels = { "feed" },
    feed = { title = "Order {{ payload.order_id }} received", body = "Total: {{ payload.total_cents }} cents" },
}
