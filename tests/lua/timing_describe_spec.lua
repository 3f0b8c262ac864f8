-- Specs for crier.timing.describe: a planned delivery's timing in words (what
-- crier try prints), in the engine's order: delay, throttle, digest.
local timing = require "crier.timing"
local json = require "crier.json"

describe("crier.timing.describe", function()
    it("says how long a delay holds and what drops the delivery when it ends", function()
        assert.are.equal("held 10 min, then sent", timing.describe('{"delay":600}'))
        assert.are.equal("held 10 min, then dropped if the feed item was read or invoice.paid arrived for the "
            .. "same entity by then; otherwise sent",
            timing.describe('{"delay":600,"unless":"read","cancel_on":["invoice.paid"]}'))
        assert.are.equal("held 1 h 30 min, then dropped if the feed item was seen or read by then; otherwise sent",
            timing.describe('{"delay":5400,"unless":"seen"}'))
        assert.are.equal("held 1 d, then dropped if invoice.paid or invoice.voided arrived for the same entity by "
            .. "then; otherwise sent", timing.describe('{"delay":86400,"cancel_on":["invoice.paid","invoice.voided"]}'))
    end)

    it("says what a throttle lets through and what becomes of the excess", function()
        assert.are.equal("at most 3 per 1 h for throttle key build.failed (the excess is suppressed)",
            timing.describe('{"throttle":{"limit":3,"per":3600,"key":"build.failed"}}'))
    end)

    it("names the digest, its recipient, its window and its size", function()
        assert.are.equal("joins digest comment.created for alice, a window of 1 h from its first item, "
            .. "at most 50 items (a full window is sent at once)",
            timing.describe('{"digest":{"key":"comment.created","window":3600,"max_items":50,'
                .. '"recipient":{"id":"alice"}}}'))
        assert.are.equal("joins digest d for bo, fixed windows of 1 min 30 s (aligned to the Unix epoch, in UTC)",
            timing.describe('{"digest":{"key":"d","every":90,"recipient":{"id":"bo"}}}'))
    end)

    it("chains the stages in the engine's order", function()
        assert.are.equal("at most 3 per 1 min for throttle key api; the excess joins digest api for al, "
            .. "a window of 1 h from its first item",
            timing.describe('{"throttle":{"limit":3,"per":60,"key":"api"},'
                .. '"digest":{"key":"api","window":3600,"recipient":{"id":"al"}}}'))
        assert.are.equal("held 10 min, then joins digest c for al, a window of 1 h from its first item",
            timing.describe('{"delay":600,"digest":{"key":"c","window":3600,"recipient":{"id":"al"}}}'))
    end)

    it("describes every timing spec_for produces", function()
        local spec = timing.check({ delay = "10m", unless = "read", throttle = { limit = 2, per = "1h" },
            digest = { window = "1d", max_items = 5 } }, "email", function(msg) error(msg) end)
        local text = timing.spec_for(spec, "email", { type = "comment.created" }, { id = "ann" }, error)
        assert.are.equal("held 10 min, then dropped if the feed item was read by then; otherwise at most 2 per "
            .. "1 h for throttle key comment.created; the excess joins digest comment.created for ann, a window "
            .. "of 1 d from its first item, at most 5 items (a full window is sent at once)",
            timing.describe(text))
        assert.are.equal("sent at once", timing.describe(json.encode({})))
    end)

    it("returns nil and why for what is not a timing, and raises on misuse", function()
        local words, err = timing.describe("[1]")
        assert.is_nil(words)
        assert.matches("not a timing object", err)
        words, err = timing.describe("{nope")
        assert.is_nil(words)
        assert.matches("json.decode", err)
        assert.has_error(function() timing.describe(nil) end,
            "timing.describe: expected the timing's JSON text, got nil")
    end)
end)
