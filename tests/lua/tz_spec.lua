-- Specs for crier.tz (the TZif reader over the system's tz database), the
-- date filter in a time zone, and the time fields of recipients and rules
-- (time_zone, quiet_hours, urgent). Expected instants were computed once with
-- the date command (TZ=<zone> date -d @<t> '+%F %T %Z %z') and are literals here.
local json = require "crier.json"
local runtime = require "crier.runtime"
local template = require "crier.template"
local tz = require "crier.tz"

local function offset_of(zone, t)
    local offset, abbr = tz.at(zone, t)
    return offset, abbr
end

describe("crier.tz", function()
    it("gives the offset and abbreviation on both sides of DST changes", function()
        -- Europe/Berlin, 2024-03-31 01:00 UTC: 02:00 CET -> 03:00 CEST
        assert.are.same({ 3600, "CET" }, { offset_of("Europe/Berlin", 1711846799) })
        assert.are.same({ 7200, "CEST" }, { offset_of("Europe/Berlin", 1711846800) })
        -- Europe/Berlin, 2026-10-25 01:00 UTC: 03:00 CEST -> 02:00 CET
        assert.are.same({ 7200, "CEST" }, { offset_of("Europe/Berlin", 1792889999) })
        assert.are.same({ 3600, "CET" }, { offset_of("Europe/Berlin", 1792890000) })
        -- America/Los_Angeles, 2024-03-10 10:00 UTC and 2026-11-01 09:00 UTC
        assert.are.same({ -28800, "PST" }, { offset_of("America/Los_Angeles", 1710064799) })
        assert.are.same({ -25200, "PDT" }, { offset_of("America/Los_Angeles", 1710064800) })
        assert.are.same({ -25200, "PDT" }, { offset_of("America/Los_Angeles", 1793523599) })
        assert.are.same({ -28800, "PST" }, { offset_of("America/Los_Angeles", 1793523600) })
    end)

    it("follows the POSIX rule of a zone's footer past its last transition (and past 2037)", function()
        -- 2060-03-14 10:00 UTC: Los Angeles springs forward (second Sunday of March, 02:00 PST)
        assert.are.same({ -28800, "PST" }, { offset_of("America/Los_Angeles", 2846483999) })
        assert.are.same({ -25200, "PDT" }, { offset_of("America/Los_Angeles", 2846484000) })
        -- 2090-03-26 01:00 UTC: Berlin's last Sunday of March
        assert.are.same({ 3600, "CET" }, { offset_of("Europe/Berlin", 3794173199) })
        assert.are.same({ 7200, "CEST" }, { offset_of("Europe/Berlin", 3794173200) })
        -- southern hemisphere (daylight time across the new year), a half-hour and a 45-minute zone
        assert.are.same({ 39600, "AEDT" }, { offset_of("Australia/Sydney", 2500000000) })
        assert.are.same({ 36000, "AEST" }, { offset_of("Australia/Sydney", 2515552000) })
        assert.are.same({ 19800, "IST" }, { offset_of("Asia/Kolkata", 2500000000) })
        assert.are.same({ 20700, "+0545" }, { offset_of("Asia/Kathmandu", 2537654400) })
        -- negative daylight saving time (Dublin's winter "GMT" is its DST) and a zone with
        -- negative transition times ("<-02>2<-01>,M3.L.6/-1,M10.L.6/0" style rules)
        assert.are.same({ 0, "GMT" }, { offset_of("Europe/Dublin", 2500000000) })
        assert.are.same({ 3600, "IST" }, { offset_of("Europe/Dublin", 2515552000) })
        assert.are.same({ -7200, "-02" }, { offset_of("America/Nuuk", 2500000000) })
        assert.are.same({ -3600, "-01" }, { offset_of("America/Nuuk", 2515552000) })
    end)

    it("parses POSIX TZ strings with every rule form", function()
        local z = assert(tz.parse_posix("CET-1CEST,M3.5.0,M10.5.0/3"))
        assert.are.same({ 3600, 7200, "CET", "CEST" }, { z.std.offset, z.dst.offset, z.std.abbr, z.dst.abbr })
        assert.are.same(10800, z.end_rule.time)
        z = assert(tz.parse_posix("<+0330>-3:30"))
        assert.are.same({ 12600, "+0330" }, { z.std.offset, z.std.abbr })
        assert.is_nil(z.dst)
        z = assert(tz.parse_posix("XXX3YYY,J60/1,100/-2:30"))
        assert.are.same({ "julian", 60, 3600 }, { z.start_rule.kind, z.start_rule.day, z.start_rule.time })
        assert.are.same({ "zero", 100, -9000 }, { z.end_rule.kind, z.end_rule.day, z.end_rule.time })
        assert.is_nil((tz.parse_posix("CET-1CEST,M13.5.0,M10.5.0")))
        assert.is_nil((tz.parse_posix("1CET")))
        assert.is_nil((tz.parse_posix("CET-1 junk")))
    end)

    it("refuses unknown zones and names that are not zone names, saying what to use", function()
        local ok, err = tz.check("Mars/Olympus_Mons")
        assert.is_nil(ok)
        assert.matches('unknown time zone "Mars/Olympus_Mons"', err, 1, true)
        assert.matches('"Europe/Berlin"', err, 1, true)
        for _, bad in ipairs({ "../etc/passwd", "/etc/passwd", "Europe//Berlin", "Europe/", "", 42 }) do
            ok, err = tz.check(bad)
            assert.is_nil(ok)
            assert.matches("is not a time zone name", err, 1, true)
        end
        assert.is_true(tz.check("UTC"))
        assert.is_true(tz.check("America/Los_Angeles"))
    end)

    it("reads a file of the version 1 format and refuses one that is not TZif", function()
        assert.is_nil((tz.parse_tzif("not a zone file")))
        local f = assert(io.open("/usr/share/zoneinfo/Europe/Berlin", "rb"))
        local data = f:read("*a")
        f:close()
        local z = assert(tz.parse_tzif(data))
        assert.is_truthy(z.footer)
        assert.is_nil((tz.parse_tzif(data:sub(1, 60))))
    end)
end)

describe("the date filter in a time zone", function()
    local function render(src, ctx)
        local fn = assert(template.compile(src, { name = "t" }))
        return fn(ctx)
    end

    it("prints in the recipient's time zone, with %Z and %z, across Berlin's spring change", function()
        local ctx = { x = "2026-03-29T00:30:00Z", recipient = { id = "a", time_zone = "Europe/Berlin" } }
        local src = "{{ x | date }} {{ x | date('%H:%M %Z %z') }}"
        assert.are.equal("2026-03-29T01:30:00+01:00 01:30 CET +0100", render(src, ctx))
        ctx.x = "2026-03-29T01:30:00Z"
        assert.are.equal("2026-03-29T03:30:00+02:00 03:30 CEST +0200", render(src, ctx))
    end)

    it("takes an explicit zone over the recipient's, and prints UTC without one", function()
        local ctx = { x = 1793523600, recipient = { id = "a", time_zone = "Europe/Berlin" } }
        assert.are.equal("01:00 PST", render("{{ x | date('%H:%M %Z', 'America/Los_Angeles') }}", ctx))
        assert.are.equal("09:00 UTC", render("{{ x | date('%H:%M %Z', 'UTC') }}", ctx))
        assert.are.equal("2026-11-01T09:00:00Z", render("{{ x | date }}", { x = 1793523600 }))
    end)

    it("refuses an unknown literal zone when compiling, and a recipient's when rendering", function()
        local fn, err = template.compile("{{ x | date('%H', 'Mars/Olympus') }}", { name = "t" })
        assert.is_nil(fn)
        assert.matches('t:1: date: unknown time zone "Mars/Olympus"', err, 1, true)
        fn = assert(template.compile("{{ x | date }}", { name = "t" }))
        local out
        out, err = fn({ x = 0, recipient = { id = "a", time_zone = "Nowhere/City" } })
        assert.is_nil(out)
        assert.matches('unknown time zone "Nowhere/City"', err, 1, true)
    end)
end)

describe("time zones and quiet hours in rules", function()
    local function load(source)
        return runtime.new_generation({ { path = "/rules/q.lua", source = source } })
    end
    local function plan(gen, recipients_json)
        return gen:plan({ id = 1, tenant = "acme", type = "thing", entity_id = "e1",
            payload_json = json.encode({ r = recipients_json }) })
    end
    local rules = [[
local crier = require "crier"
crier.event_type "thing" { payload = { r = "array" } }
crier.event_type "alarm" { urgent = true }
crier.rule "thing" {
    recipients = function(event) return event.payload.r end,
    channels = { "webhook", "feed" },
    quiet_hours = { from = "22:00", to = "07:00" },
    webhook = { url = "http://hooks.test/x", body = '{"at": "{{ event.payload.r.1.at | date(\'%H:%M %Z\') }}"}' },
    feed = { title = "t" },
}
crier.rule "alarm" {
    recipients = { { id = "ann", time_zone = "Europe/Berlin" } },
    channels = { "email" },
    quiet_hours = { from = "00:00", to = "23:59" },
    email = { to = "a@x.test", subject = "s", text = "t" },
}
]]

    it("puts the quiet hours and the recipient's zone in the timing of sending channels only", function()
        local gen = assert(load(rules))
        local p = assert(plan(gen, { { id = "ann", time_zone = "America/Los_Angeles", at = "2026-07-01T12:00:00Z" } }))
        local hook, feed = p[1].deliveries[1], p[1].deliveries[2]
        assert.are.equal("feed", feed.channel)
        assert.is_nil(feed.timing)
        assert.are.same({ hours = { { from = "22:00", to = "07:00" } }, zone = "America/Los_Angeles" },
            json.decode(hook.timing).quiet)
        assert.are.equal('{"at": "05:00 PDT"}', hook.body)
    end)

    it("lets the person's own quiet hours win, and {} mean none", function()
        local gen = assert(load(rules))
        local p = assert(plan(gen, {
            { id = "bob", quiet_hours = { { from = "12:00", to = "13:00", days = { "sat" } } }, at = "2026-01-01" },
            { id = "cy", quiet_hours = {}, at = "2026-01-01" },
        }))
        assert.are.same({ { from = "12:00", to = "13:00", days = { "sat" } } },
            json.decode(p[1].deliveries[1].timing).quiet.hours)
        assert.is_nil(p[2].deliveries[1].timing)
    end)

    it("sends urgent types in quiet hours", function()
        local gen = assert(load(rules))
        local p = assert(gen:plan({ id = 2, tenant = "acme", type = "alarm", entity_id = "e", payload_json = "{}" }))
        assert.is_nil(p[1].deliveries[1].timing)
    end)

    it("fails the event naming the recipient whose time zone is unknown", function()
        local gen = assert(load(rules))
        local p, err, code = plan(gen, { { id = "dee", time_zone = "Europe/Atlantis", at = "2026-01-01" } })
        assert.is_nil(p)
        assert.are.equal("rule_error", code)
        assert.matches('recipient "dee" has time_zone "Europe/Atlantis": unknown time zone', err, 1, true)
        p, err = plan(gen, { { id = "eve", quiet_hours = { from = "25:00", to = "07:00" }, at = "2026-01-01" } })
        assert.is_nil(p)
        assert.matches('recipient "eve" has bad quiet_hours.from must be a local time "HH:MM"', err, 1, true)
    end)

    it("applies a batch's stored settings over the rules' fields, until the batch ends", function()
        local gen = assert(load(rules))
        local ev = { id = 7, tenant = "acme", type = "thing", entity_id = "e1",
            payload_json = json.encode({ r = { { id = "ann", time_zone = "Asia/Tokyo", at = "2026-07-01T12:00:00Z" },
                "bob" } }) }
        assert.are.same({ "ann", "bob" }, gen:batch_recipients(ev))
        gen:set_batch_settings({
            { tenant = "acme", recipient_id = "ann", time_zone = "Europe/Berlin", locale = "de-AT" },
            { tenant = "acme", recipient_id = "bob", quiet_hours = "[]" },
            { tenant = "other", recipient_id = "ann", time_zone = "America/Los_Angeles" },
        })
        local p = assert(gen:plan(ev))
        local quiet = json.decode(p[1].deliveries[1].timing).quiet
        assert.are.equal("Europe/Berlin", quiet.zone)
        assert.are.equal('{"at": "14:00 CEST"}', p[1].deliveries[1].body)
        assert.is_nil(p[2].deliveries[1].timing) -- bob's stored [] takes the rule's quiet hours away
        gen:end_batch()
        p = assert(gen:plan(ev))
        assert.are.equal("Asia/Tokyo", json.decode(p[1].deliveries[1].timing).quiet.zone)
        -- an event that fails gives no recipients here (its plan reports it)
        assert.are.same({}, gen:batch_recipients({ id = 8, tenant = "acme", type = "thing", entity_id = "e",
            payload_json = "{}" }))
    end)

    it("aligns fixed digest windows in the recipient's local time", function()
        local testing = require "crier.testing"
        local src = [[
local crier = require "crier"
crier.event_type "ping" {}
crier.rule "ping" {
    recipients = { { id = "ann", time_zone = "Europe/Berlin" }, "bob" },
    channels = { "webhook" },
    webhook = { url = "http://hooks.test/x", digest = { every = "1d" } },
}
]]
        local loaded = testing.load_source(src)
        local p = assert(loaded:plan { type = "ping", tenant = "acme", entity_id = "p1" })
        local ann = testing.assert_delivered(p, "ann", "webhook")
        assert.are.equal("Europe/Berlin", json.decode(ann.plan.timing).digest.zone)
        assert.is_nil(json.decode(testing.assert_delivered(p, "bob", "webhook").plan.timing).digest.zone)
        -- the timeline's windows: Berlin's day is 23:00-23:00 UTC in winter, 22:00-22:00 in summer
        local sim = loaded:timeline { start = "2026-03-28T12:00:00Z" }
        sim:emit { type = "ping", entity_id = "p1" }
        local g = sim:digests("ann", "webhook")[1]
        assert.are.same({ "2026-03-27T23:00:00Z", "2026-03-28T23:00:00Z" }, { g.window_start, g.window_end })
        g = sim:digests("bob", "webhook")[1]
        assert.are.same({ "2026-03-28T00:00:00Z", "2026-03-29T00:00:00Z" }, { g.window_start, g.window_end })
        sim = loaded:timeline { start = "2026-03-29T12:00:00Z" } -- the spring change: a day of 23 hours
        sim:emit { type = "ping", entity_id = "p2" }
        g = sim:digests("ann", "webhook")[1]
        assert.are.same({ "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z" }, { g.window_start, g.window_end })
    end)

    it("reports bad quiet hours at load with file:line", function()
        local gen, err = load([[
local crier = require "crier"
crier.event_type "thing" {}
crier.rule "thing" {
    recipients = { "a" },
    channels = { "email" },
    quiet_hours = { from = "22:00", to = "7:00", days = { "monday" } },
    email = { to = "a@x.test", subject = "{{ 0 | date('%H', 'Europe/Atlantis') }}", text = "t",
              quiet_hours = { { from = "01:00", to = "01:00" } } },
    feed = { title = "t", quiet_hours = {} },
}
crier.event_type "other" { urgent = "yes" }
]])
        assert.is_nil(gen)
        assert.matches('/rules/q.lua:3: rule \'thing\': quiet_hours.to must be a local time "HH:MM" '
            .. '(00:00-23:59), got "7:00"', err, 1, true)
        assert.matches('/rules/q.lua:3: rule \'thing\': quiet_hours.days[1] is "monday"', err, 1, true)
        assert.matches("/rules/q.lua:3: rule 'thing': email.quiet_hours: the period from 01:00 to 01:00 is empty",
            err, 1, true)
        assert.matches("/rules/q.lua:3: rule 'thing': feed.quiet_hours: feed items are shown at once", err, 1, true)
        assert.matches("/rules/q.lua:11: event type 'other': urgent must be true or false", err, 1, true)
        assert.matches("/rules/q.lua:3: rule 'thing': email.subject:1: date: unknown time zone \"Europe/Atlantis\"",
            err, 1, true)
    end)
end)
