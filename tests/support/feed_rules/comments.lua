-- comments.lua — a rule for the integration tests of feeds: a comment becomes
-- a feed item (titled with its text) for each person in its `to` list.
local crier = require "crier"
crier.event_type "comment.created" { payload = { text = "string", to = "array" } }
crier.rule "comment.created" {
    recipients = function(event) return event.payload.to end,
    channels = { "feed" },
    feed = { title = "{{ payload.text }}" },
}
