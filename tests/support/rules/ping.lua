-- Rules for the delivery tests: each "ping" goes to one recipient's webhook at
-- the ping_url setting, retried quickly (1 s steps) so the tests run fast; the
-- engine's crier.endpoint.disabled event goes to ops_url when that is set.
local crier = require "crier"

crier.event_type "ping" {
    payload = { n = "integer?" },
}

crier.rule "ping" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = {
        url = crier.setting("ping_url"),
        secret = crier.setting("ping_secret", nil),
        body = function(event)
            return { entity = event.entity_id, n = event.payload.n }
        end,
        retry = { 0, "1s", "1s", "1s" },
    },
}

local ops_url = crier.setting("ops_url", nil)
if ops_url then
    crier.rule "crier.endpoint.disabled" {
        recipients = { "oncall" },
        channels = { "webhook" },
        webhook = { url = ops_url },
    }
end
