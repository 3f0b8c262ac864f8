-- Rules for the email and Kafka channel tests: a "notice" goes by email to each
-- member (address from the recipient table) and, when kafka_topic is set, to
-- that Kafka topic; quick retries.
local crier = require "crier"

crier.event_type "notice" {
    payload = { title = "string", body = "string?" },
}

local kafka_topic = crier.setting("kafka_topic", nil)

crier.rule "notice" {
    recipients = {
        { id = "ana", email = "ana@example.test", name = "Ana" },
        { id = "ben", email = "ben@example.test", name = "Ben" },
    },
    channels = kafka_topic and { "email", "kafka" } or { "email" },
    email = {
        from = "notices@crier.test",
        subject = "Notice: {{ payload.title }}",
        text = "Hello {{ recipient.name }},\n\n{{ payload.body | default('no details') }}\n",
        html = "<p>Hello {{ recipient.name }},</p><p>{{ payload.body | default('no details') }}</p>",
        retry = { 0, "1s", "2s", "2s", "2s", "2s", "2s", "2s", "2s", "2s", "2s", "2s", "2s", "2s", "2s" },
    },
    kafka = {
        topic = kafka_topic or "unused",
        body = function(event, recipient)
            return { title = event.payload.title, to = recipient.id }
        end,
    },
}
