-- busted spec for the collaboration example: what each rule plans right
-- away (feed items, the content of the immediate messages) and the timing
-- each delivery carries (digest, delay with its condition, throttle folded
-- into a digest, cancel_on); and the digest's message, rendered as the
-- engine renders it when the window ends.
--   busted --lua=luajit examples/rules     (crier's lua/ directory on LUA_PATH)

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
package.path = package.path .. ";" .. here .. "/../../lua/?.lua;" .. here .. "/../../lua/?/init.lua"

local testing = require "crier.testing"
local json = require "crier.json"

local rules = testing.load(here .. "/collaboration.lua")

local function timing_of(delivery)
    return delivery.plan.timing and json.decode(delivery.plan.timing)
end

local comment = {
    type = "comment.created", tenant = "acme", entity_id = "cm_1",
    payload = {
        post = "p1", post_title = "Release notes", author = "ann", text = "Looks good <3",
        watchers = { { id = "ann", email = "ann@acme.test" }, { id = "bo", email = "bo@acme.test" }, { id = "cy" } },
    },
}

describe("collaboration example", function()
    it("puts a comment in every other watcher's feed and collects their emails in an hourly digest", function()
        local result = rules:plan(comment)
        testing.assert_recipients(result, { "bo", "cy" })
        local item = testing.assert_delivered(result, "cy", "feed")
        assert.are.equal("ann commented on Release notes", item.content.title)
        testing.assert_not_planned(result, "cy", "email")
        local email = testing.assert_delivered(result, "bo", "email")
        local t = timing_of(email)
        assert.are.same({ key = "comments:p1", window = 3600, max_items = 25,
                          recipient = { id = "bo", email = "bo@acme.test" } }, t.digest)
        assert.is_nil(t.delay)
    end)

    it("renders the digest with every comment of the window", function()
        local input = {
            tenant = "acme", event_type = "comment.created", channel = "email",
            recipient = { id = "bo", email = "bo@acme.test" },
            digest = { key = "comments:p1", window_start = "2026-01-05T09:00:00Z",
                       window_end = "2026-01-05T10:00:00Z" },
            items = {
                { id = 1, type = "comment.created", entity_id = "cm_1", payload = comment.payload },
                { id = 2, type = "comment.created", entity_id = "cm_2",
                  payload = { post = "p1", post_title = "Release notes", author = "cy", text = "Ship it",
                              watchers = {} } },
            },
        }
        local plan = assert(rules.generation:render_digest(json.encode(input)))
        local d = plan[1].deliveries[1]
        assert.are.equal("bo@acme.test", d.target)
        assert.are.equal("2 new comments on Release notes", d.subject)
        assert.are.equal("- ann: Looks good <3\n- cy: Ship it\n", d.body)
    end)

    it("speaks German to watchers whose locale is de or de-AT, English to the others", function()
        local event = {
            type = "comment.created", tenant = "acme", entity_id = "cm_3",
            payload = { post = "p1", post_title = "Release notes", author = "ann", text = "Danke",
                        watchers = { { id = "dora", locale = "de-AT" }, { id = "eve", locale = "fr" } } },
        }
        local result = rules:plan(event)
        assert.are.equal("ann hat Release notes kommentiert",
            testing.assert_delivered(result, "dora", "feed").content.title)
        assert.are.equal("ann commented on Release notes",
            testing.assert_delivered(result, "eve", "feed").content.title)
        -- as crier try --locale de would show it
        result = rules:plan(event, { locale = "de" })
        assert.are.equal("ann hat Release notes kommentiert",
            testing.assert_delivered(result, "eve", "feed").content.title)
        -- the hourly digest, in German, with German plurals; the lines
        -- themselves are the block's own (the de block does not translate them)
        local input = {
            tenant = "acme", event_type = "comment.created", channel = "email",
            recipient = { id = "dora", email = "dora@acme.test", locale = "de-AT" },
            digest = { key = "comments:p1", window_start = "2026-01-05T09:00:00Z",
                       window_end = "2026-01-05T10:00:00Z" },
            items = { { id = 1, type = "comment.created", entity_id = "cm_1", payload = comment.payload } },
        }
        local d = assert(rules.generation:render_digest(json.encode(input)))[1].deliveries[1]
        assert.are.equal("1 neuer Kommentar zu Release notes", d.subject)
        assert.are.equal("- ann: Looks good <3\n", d.body)
        input.items[2] = { id = 2, type = "comment.created", entity_id = "cm_2", payload = comment.payload }
        d = assert(rules.generation:render_digest(json.encode(input)))[1].deliveries[1]
        assert.are.equal("2 neue Kommentare zu Release notes", d.subject)
    end)

    it("escalates an unread mention: email after 10 minutes, on-call after an hour, both only if unread", function()
        local result = rules:plan { type = "mention.created", tenant = "acme", entity_id = "mn_1",
            payload = { person = "bo", email = "bo@acme.test", author = "ann", post_title = "Release notes",
                        url = "https://app.test/p1#c1" } }
        testing.assert_delivered(result, "bo", "feed")
        local email = timing_of(testing.assert_delivered(result, "bo", "email"))
        assert.are.same({ delay = 600, unless = "read", quiet = { hours = { { from = "22:00", to = "07:00" } } } },
            email)
        local hook = timing_of(testing.assert_delivered(result, "bo", "webhook"))
        assert.are.same({ delay = 3600, unless = "read" }, hook)
    end)

    it("holds the mention email in the person's night, in their time zone", function()
        local result = rules:plan { type = "mention.created", tenant = "acme", entity_id = "mn_2",
            payload = { person = "cy", email = "cy@acme.test", author = "ann", post_title = "Release notes",
                        url = "https://app.test/p1#c2", tz = "America/Los_Angeles" } }
        local t = timing_of(testing.assert_delivered(result, "cy", "email"))
        -- the engine holds it when the delay ends inside 22:00-07:00 Los Angeles time
        -- (crier.quiet_hours_end; crier try describes it)
        assert.are.same({ hours = { { from = "22:00", to = "07:00" } }, zone = "America/Los_Angeles" }, t.quiet)
        assert.is_nil(timing_of(testing.assert_delivered(result, "cy", "webhook")).quiet)
    end)

    it("throttles build alerts per repo and folds the excess into a digest", function()
        local result = rules:plan { type = "build.failed", tenant = "acme", entity_id = "b_41",
            payload = { repo = "api", branch = "main", build = 41, owners = { "ann" } } }
        local t = timing_of(testing.assert_delivered(result, "ann", "webhook"))
        assert.are.same({ limit = 3, per = 3600, key = "api" }, t.throttle)
        assert.are.equal("builds:api", t.digest.key)
    end)

    it("holds an overdue reminder for a day, cancelled by invoice.paid", function()
        local result = rules:plan { type = "invoice.overdue", tenant = "acme", entity_id = "inv_9",
            payload = { invoice_id = "inv_9", customer_email = "pay@cust.test", amount_cents = 1250,
                        currency = "EUR" } }
        local email = testing.assert_delivered(result, "pay@cust.test", "email")
        assert.are.equal("12.50 EUR are due for invoice inv_9.", email.text)
        assert.are.same({ delay = 86400, cancel_on = { "invoice.paid" } }, timing_of(email))
    end)

    it("schedules the team's morning reminder at 08:00 Berlin time, the latest missed one only", function()
        local schedules = rules.generation:schedules()
        assert.are.equal(1, #schedules)
        local daily = schedules[1]
        assert.are.same({ "daily-summary", "0 8 * * *", "Europe/Berlin", { "acme" }, "team.daily", "latest" },
            { daily.name, daily.cron, daily.time_zone, daily.tenants, daily.event_type, daily.catch_up })
        -- the event each occurrence emits
        local result = rules:plan { type = "team.daily", tenant = "acme",
            entity_id = "daily-summary:2026-12-04T07:00:00Z",
            payload = { schedule = "daily-summary", occurrence = "2026-12-04T07:00:00Z" } }
        local item = testing.assert_delivered(result, "team", "feed")
        assert.are.equal("Good morning: catch up on yesterday's comments", item.content.title)
        assert.are.equal("2026-12-04T07:00:00Z", item.content.body)
    end)
end)
