-- Specs for crier.testing's timeline (rules:timeline): the engine's time
-- features — digest windows (window, every, max_items), throttles (alone and
-- folding into a digest), delays with unless read / seen and cancel_on — on
-- a controllable clock, with the real planner's and digest renderer's
-- content, the engine's reason strings, the notification key rules, and the
-- misuse messages (raised at the spec's line).
local testing = require "crier.testing"

local rules_source = [[
local crier = require "crier"

crier.event_type "comment.created" { payload = { author = "string" } }
crier.event_type "report.ready" { payload = { name = "string" } }
crier.event_type "build.failed" { payload = { repo = "string" } }
crier.event_type "alert.raised" { payload = { level = "string" } }
crier.event_type "mention.created" { payload = { by = "string" } }
crier.event_type "task.assigned" { payload = { title = "string" } }
crier.event_type "invoice.created" { payload = { amount = "integer" } }
crier.event_type "invoice.paid" {}
crier.event_type "welcome" {}
crier.event_type "digest.broken" {}

local alice = { { id = "alice", email = "alice@example.test", name = "Alice" } }

-- a digest per hour from the first comment, at most 3 comments a message
crier.rule "comment.created" {
    recipients = alice,
    channels = { "email", "feed" },
    feed = { title = "{{ payload.author }} commented" },
    email = {
        subject = "{{ payload.author }} commented",
        text = "see {{ entity_id }}",
        digest = {
            window = "1h", max_items = 3,
            subject = "{{ digest.count }} new comments",
            text = "{% for c in digest.items %}{{ c.entity_id }} by {{ c.payload.author }};{% endfor %}",
        },
    },
}

-- on the hour, every hour (UTC)
crier.rule "report.ready" {
    recipients = alice,
    channels = { "kafka" },
    kafka = {
        topic = "reports",
        digest = { every = "1h", body = '{"reports": {{ digest.count }}, "from": "{{ digest.window_start }}"}' },
    },
}

-- at most 3 webhooks a minute per recipient and repository
crier.rule "build.failed" {
    recipients = alice,
    channels = { "webhook" },
    webhook = {
        url = "https://hooks.example.test/builds",
        throttle = { limit = 3, per = "1m", key = function(event) return event.payload.repo end },
    },
}

-- the first 3 alerts a minute at once, the rest in a digest
crier.rule "alert.raised" {
    recipients = alice,
    channels = { "email" },
    email = {
        subject = "alert {{ entity_id }}",
        text = "level {{ payload.level }}",
        throttle = { limit = 3, per = "1m" },
        digest = { window = "10m", subject = "{{ digest.count }} more alerts" },
    },
}

-- an email only when the mention stays unread for 10 minutes
crier.rule "mention.created" {
    recipients = alice,
    channels = { "email", "feed" },
    feed = { title = "{{ payload.by }} mentioned you" },
    email = { subject = "{{ payload.by }} mentioned you", text = "open the app", delay = "10m", unless = "read" },
}

crier.rule "task.assigned" {
    recipients = alice,
    channels = { "email", "feed" },
    feed = { title = "{{ payload.title }}" },
    email = { subject = "task: {{ payload.title }}", text = "open the app", delay = "5m", unless = "seen" },
}

-- a reminder an hour later, unless the invoice was paid in between
crier.rule "invoice.created" {
    recipients = alice,
    channels = { "webhook" },
    webhook = { url = "https://hooks.example.test/invoices", delay = "1h", cancel_on = { "invoice.paid" } },
}

crier.rule "welcome" {
    recipients = alice,
    channels = { "email", "feed" },
    feed = { title = "Welcome" },
    email = { subject = "Welcome, {{ recipient.name }}", text = "Hello." },
}

crier.rule "digest.broken" {
    recipients = alice,
    channels = { "email" },
    email = {
        subject = "x",
        text = "x",
        digest = { window = "1m", subject = function() error("no subject today") end },
    },
}
]]

-- The error message fn raises.
local function error_of(fn)
    local ok, err = pcall(fn)
    assert.is_false(ok, "expected an error")
    return tostring(err)
end

-- A misuse error: raised at the spec's own line, with the message.
local function misuse_of(fn)
    local err = error_of(fn)
    assert.matches("^[^\n]*testing_clock_spec%.lua:%d+: crier%.testing: ", err)
    return err
end

local function entities_of(digest_message)
    local out = {}
    for i, item in ipairs(digest_message.digest.items) do
        out[i] = item.entity_id
    end
    return out
end

describe("crier.testing timeline", function()
    local rules, sim
    before_each(function()
        rules = testing.load_source(rules_source)
        sim = rules:timeline { start = "2026-01-05T09:00:00Z" }
    end)

    local function comment(entity, author)
        return sim:emit { type = "comment.created", entity_id = entity, payload = { author = author or "bob" } }
    end

    describe("the clock", function()
        it("starts where it is told and moves only forward, by spans or to a time", function()
            assert.are.equal("2026-01-05T09:00:00Z", sim:now())
            assert.are.equal("2026-01-05T10:01:00Z", sim:advance "61m")
            assert.are.equal("2026-01-05T10:01:30Z", sim:advance(30))
            assert.are.equal("2026-01-05T10:01:30.25Z", sim:advance(0.25))
            assert.are.equal("2026-01-06T00:00:00Z", sim:advance_to "2026-01-06T00:00:00Z")
            assert.are.equal("2026-01-06T00:00:00Z", sim:advance(0))
            assert.are.equal("2026-01-01T00:00:00Z", rules:timeline():now())
            assert.are.equal("2024-02-29T23:59:59Z", rules:timeline({ start = 1709251199 }):now())
        end)

        it("fires the timers one advance passes at their own times, earliest first", function()
            comment("c1") -- a digest window to 10:00
            sim:advance "20m"
            sim:emit { type = "mention.created", entity_id = "m1", payload = { by = "bob" } } -- held to 09:30
            sim:emit { type = "invoice.created", entity_id = "inv_1", payload = { amount = 1 } } -- held to 10:20
            assert.are.equal("2026-01-05T12:20:00Z", sim:advance "3h")
            local sent = sim:sent()
            assert.are.equal(3, #sent)
            assert.are.same({ "m1", "comment.created", "inv_1" },
                { sent[1].entity_id, sent[2].entity_id, sent[3].entity_id })
            assert.are.same({ "2026-01-05T09:30:00Z", "2026-01-05T10:00:00Z", "2026-01-05T10:20:00Z" },
                { sent[1].at, sent[2].at, sent[3].at })
        end)
    end)

    describe("deliveries without timing", function()
        it("are sent when the event is emitted; feed items appear at once", function()
            sim:advance "1m"
            local ev = sim:emit { type = "welcome", entity_id = "u1" }
            local sent = sim:sent("alice", "email")
            assert.are.equal(1, #sent)
            assert.are.equal("Welcome, Alice", sent[1].subject)
            assert.are.equal("alice@example.test", sent[1].to)
            assert.are.equal("2026-01-05T09:01:00Z", sent[1].at)
            assert.are.equal("sent", sent[1].state)
            assert.are.equal(ev.id, sent[1].event_id)
            assert.are.equal(testing.key("acme", "welcome", "u1", "alice").message_id, sent[1].message_id)
            local feed = sim:feed("alice")
            assert.are.equal(1, #feed)
            assert.are.equal("Welcome", feed[1].content.title)
            assert.is_false(feed[1].read)
            assert.are.same({}, sim:held())
            assert.are.same({}, sim:suppressed())
        end)
    end)

    describe("notification keys", function()
        it("keeps one event per dedupe key: emitting it again returns it and plans nothing", function()
            local first = sim:emit { type = "welcome", entity_id = "u1" }
            sim:advance "1h"
            local again = sim:emit { type = "welcome", entity_id = "u1" }
            assert.are.equal(first, again)
            assert.are.equal(1, #sim:sent())
            assert.are.equal(1, #sim:feed("alice"))
        end)

        it("plans a notification once per key, even for a new event (another dedupe key)", function()
            local first = sim:emit { type = "welcome", entity_id = "u1" }
            local second = sim:emit { type = "welcome", entity_id = "u1", dedupe_key = "signup-2" }
            assert.are_not.equal(first, second)
            assert.are.equal(first.id + 1, second.id)
            assert.are.equal(1, #first.notifications)
            assert.are.equal(0, #second.notifications)
            assert.are.equal(1, #sim:sent())
            assert.are.equal(1, #sim:deliveries())
        end)
    end)

    describe("digest", function()
        it("collects a window's items and sends one message when it ends; later items open the next window",
            function()
                comment("c1", "ann")
                sim:advance "30m"
                comment("c2", "ben")
                sim:advance_to "2026-01-05T09:59:59Z"
                assert.are.same({}, sim:sent("alice", "email"))
                assert.are.equal(2, sim:digests("alice", "email")[1].count)
                assert.are.equal("open", sim:digests()[1].state)
                assert.are.equal(2, #sim:feed("alice")) -- the feed is not digested

                sim:advance "1s" -- 10:00:00, the window's end
                local sent = sim:sent("alice", "email")
                assert.are.equal(1, #sent)
                assert.are.equal("2 new comments", sent[1].subject)
                assert.are.equal("c1 by ann;c2 by ben;", sent[1].text)
                assert.are.equal(2, sent[1].digest.count)
                assert.are.equal("2026-01-05T09:00:00Z", sent[1].digest.window_start)
                assert.are.equal("2026-01-05T10:00:00Z", sent[1].digest.window_end)
                assert.are.equal("2026-01-05T10:00:00Z", sent[1].at)
                assert.are.equal("2026-01-05T09:30:00Z", sent[1].digest.items[2].created_at)

                -- at and after the edge: the next window, from its first item
                comment("c3")
                sim:advance "10m"
                comment("c4")
                sim:advance "49m"
                assert.are.equal(1, #sim:sent("alice", "email"))
                sim:advance "1m" -- 11:00:00
                sent = sim:sent("alice", "email")
                assert.are.equal(2, #sent)
                assert.are.same({ "c3", "c4" }, entities_of(sent[2]))
                assert.are.equal("2026-01-05T10:00:00Z", sent[2].digest.window_start)

                local seen = {}
                for _, m in ipairs(sent) do
                    for _, e in ipairs(entities_of(m)) do
                        assert.is_nil(seen[e], e .. " is in two digests")
                        seen[e] = true
                    end
                end
                assert.are.same({ c1 = true, c2 = true, c3 = true, c4 = true }, seen)
                for _, d in ipairs(sim:deliveries("alice", "email")) do
                    assert.is_true(d.state == "digested" or d.digest ~= nil, d.state)
                end
            end)

        it("sends a window at once when it reaches max_items, and every item goes out exactly once", function()
            for i = 1, 7 do
                comment("c" .. i)
                sim:advance "1m"
            end
            local sent = sim:sent("alice", "email")
            assert.are.equal(2, #sent)
            assert.are.same({ "c1", "c2", "c3" }, entities_of(sent[1]))
            assert.are.equal("2026-01-05T09:02:00Z", sent[1].at) -- when c3 filled it
            assert.are.same({ "c4", "c5", "c6" }, entities_of(sent[2]))
            assert.are.equal("2026-01-05T09:03:00Z", sent[2].digest.window_start)
            assert.are.equal(1, #sim:digests("alice", "email")[3].items)
            assert.are.equal("open", sim:digests()[3].state)

            sim:advance "2h"
            sent = sim:sent("alice", "email")
            assert.are.equal(3, #sent)
            assert.are.same({ "c7" }, entities_of(sent[3]))
            assert.are.equal("2026-01-05T10:06:00Z", sent[3].at) -- an hour after c7 opened it
            assert.are.equal(0, #sim:held())
        end)

        it("gives the digest's notification the engine's key (the window's start in its discriminator)", function()
            for i = 1, 3 do
                comment("c" .. i)
            end
            local m = sim:sent("alice", "email")[1]
            local k = testing.key("acme", "comment.created", "comment.created", "alice",
                "digest:email:2026-01-05T09:00:00.000000Z")
            assert.are.equal(k.key, m.key)
            assert.are.equal(k.message_id, m.message_id)
            assert.are.equal("digest:email:2026-01-05T09:00:00.000000Z", m.discriminator)
            assert.are.equal(3, m.event_id) -- the last item's event
        end)

        it("with every, uses fixed windows aligned to the epoch (on the hour)", function()
            sim = rules:timeline { start = "2026-01-05T09:20:00Z" }
            local function report(name)
                sim:emit { type = "report.ready", entity_id = name, payload = { name = name } }
            end
            report("r1")
            sim:advance "30m" -- 09:50
            report("r2")
            sim:advance "599s"
            assert.are.equal("2026-01-05T09:59:59Z", sim:now())
            assert.are.same({}, sim:sent("alice", "kafka"))
            sim:advance "1s"
            local sent = sim:sent("alice", "kafka")
            assert.are.equal(1, #sent)
            assert.are.equal("reports", sent[1].topic)
            assert.are.same({ reports = 2, from = "2026-01-05T09:00:00Z" }, sent[1].body)
            assert.are.equal("2026-01-05T10:00:00Z", sent[1].digest.window_end)
            assert.are.equal("2026-01-05T10:00:00Z", sent[1].at)

            sim:advance "5m"
            report("r3")
            sim:advance_to "2026-01-05T10:59:59Z"
            assert.are.equal(1, #sim:sent("alice", "kafka"))
            sim:advance "1s"
            sent = sim:sent("alice", "kafka")
            assert.are.equal(2, #sent)
            assert.are.same({ reports = 1, from = "2026-01-05T10:00:00Z" }, sent[2].body)
        end)

        it("with every and max_items, a window closed early is followed by one to the same hour's end", function()
            local src = rules_source:gsub('digest = { every = "1h", body',
                'digest = { every = "1h", max_items = 2, body')
            sim = testing.load_source(src):timeline { start = "2026-01-05T09:10:00Z" }
            for i = 1, 3 do
                sim:emit { type = "report.ready", entity_id = "r" .. i, payload = { name = "r" .. i } }
                sim:advance "10m"
            end
            local sent = sim:sent("alice", "kafka")
            assert.are.equal(1, #sent) -- r1, r2: full at 09:20
            assert.are.equal("2026-01-05T09:20:00Z", sent[1].at)
            sim:advance_to "2026-01-05T10:00:00Z"
            sent = sim:sent("alice", "kafka")
            assert.are.equal(2, #sent)
            assert.are.same({ "r3" }, entities_of(sent[2]))
            assert.are.equal("2026-01-05T10:00:00Z", sent[2].digest.window_end)
            -- the second window starts a microsecond after the first: another notification
            assert.are.equal("digest:kafka:2026-01-05T09:00:00.000001Z", sent[2].discriminator)
            assert.are_not.equal(sent[1].key, sent[2].key)
        end)

        it("keeps a digest that fails to render, and says so at the spec's line", function()
            sim:emit { type = "digest.broken", entity_id = "x1" }
            local err = error_of(function() sim:advance "2m" end)
            assert.matches("testing_clock_spec%.lua:%d+: crier%.testing: the digest 1 for alice on email", err)
            assert.matches("failed to render (rule_error)", err, 1, true)
            assert.matches("no subject today", err, 1, true)
            assert.matches("tries again in 5 s", err, 1, true)
            assert.are.equal("2026-01-05T09:01:00Z", sim:now())
            assert.are.equal("open", sim:digests()[1].state)
            assert.are.equal("2026-01-05T09:01:05Z", sim:digests()[1].due)
            assert.are.same({}, sim:sent())
        end)
    end)

    describe("throttle", function()
        local function build(entity, repo)
            return sim:emit { type = "build.failed", entity_id = entity, payload = { repo = repo or "api" } }
        end

        it("sends limit per period and suppresses the rest with the engine's reason", function()
            for i = 1, 10 do
                build("b" .. i)
                sim:advance "1s"
            end
            local sent = sim:sent("alice", "webhook")
            assert.are.equal(3, #sent)
            assert.are.equal("b1", sent[1].body.entity_id)
            assert.are.equal("b3", sent[3].body.entity_id)
            local dropped = sim:suppressed("alice", "webhook")
            assert.are.equal(7, #dropped)
            for _, d in ipairs(dropped) do
                assert.are.equal("throttled: 3 webhook already sent to alice for throttle key api in the last 60 s "
                    .. "(throttle = { limit = 3, per = 60 s })", d.reason)
            end
            assert.are.equal("b4", dropped[1].entity_id)
            -- another throttle key counts apart
            build("w1", "web")
            assert.are.equal(4, #sim:sent("alice", "webhook"))
        end)

        it("slides: a slot reopens when the send that took it is a period old, not on the minute", function()
            build("b1") -- 09:00:00
            sim:advance "30s"
            build("b2") -- 09:00:30
            sim:advance "20s"
            build("b3") -- 09:00:50
            sim:advance "9s"
            build("b4") -- 09:00:59: suppressed
            sim:advance "1s"
            build("b5") -- 09:01:00: b1's slot is free again
            build("b6") -- 09:01:00: b2, b3, b5 in the last minute
            sim:advance "29s"
            build("b7") -- 09:01:29: still full
            sim:advance "1s"
            build("b8") -- 09:01:30: b2's slot is free
            local sent = {}
            for i, m in ipairs(sim:sent("alice", "webhook")) do
                sent[i] = m.body.entity_id
            end
            assert.are.same({ "b1", "b2", "b3", "b5", "b8" }, sent)
            local dropped = {}
            for i, d in ipairs(sim:suppressed("alice", "webhook")) do
                dropped[i] = d.entity_id
            end
            assert.are.same({ "b4", "b6", "b7" }, dropped)
        end)

        it("with a digest, folds the excess into the digest instead of dropping it", function()
            for i = 1, 10 do
                sim:emit { type = "alert.raised", entity_id = "a" .. i, payload = { level = "high" } }
                sim:advance "1s"
            end
            local sent = sim:sent("alice", "email")
            assert.are.equal(3, #sent)
            assert.are.equal("alert a1", sent[1].subject)
            assert.is_nil(sent[1].digest)
            assert.are.same({}, sim:suppressed())
            assert.are.equal(7, sim:digests("alice", "email")[1].count)

            sim:advance "10m"
            sent = sim:sent("alice", "email")
            assert.are.equal(4, #sent)
            assert.are.equal("7 more alerts", sent[4].subject)
            assert.are.same({ "a4", "a5", "a6", "a7", "a8", "a9", "a10" }, entities_of(sent[4]))
            assert.are.equal("2026-01-05T09:00:03Z", sent[4].digest.window_start) -- opened by a4
        end)
    end)

    describe("delay", function()
        local function mention(entity)
            return sim:emit { type = "mention.created", entity_id = entity, payload = { by = "bob" } }
        end

        it("holds the email, and drops it when the feed item is read within the delay (unless = \"read\")",
            function()
                local ev = mention("m1")
                local held = sim:held("alice", "email")
                assert.are.equal(1, #held)
                assert.are.equal("2026-01-05T09:10:00Z", held[1].due)
                sim:advance "5m"
                assert.are.equal(1, #sim:mark_read("alice", ev))
                assert.is_true(sim:feed("alice")[1].read)
                sim:advance "5m"
                assert.are.same({}, sim:sent("alice", "email"))
                assert.are.same({}, sim:held())
                local dropped = sim:suppressed("alice", "email")
                assert.are.equal(1, #dropped)
                assert.are.equal("cancelled: the feed item was read within the delay (unless = \"read\")",
                    dropped[1].reason)
                assert.are.equal("2026-01-05T09:10:00Z", dropped[1].at)
            end)

        it("sends exactly one email when the item stays unread until the delay ends", function()
            mention("m1")
            sim:advance "599s"
            assert.are.same({}, sim:sent("alice", "email"))
            sim:advance "1s"
            local sent = sim:sent("alice", "email")
            assert.are.equal(1, #sent)
            assert.are.equal("bob mentioned you", sent[1].subject)
            assert.are.equal("2026-01-05T09:10:00Z", sent[1].at)
            sim:mark_read("alice", "m1") -- too late to matter
            sim:advance "1h"
            assert.are.equal(1, #sim:sent("alice", "email"))
            assert.are.same({}, sim:suppressed())
        end)

        it("does not drop an unless = \"read\" delivery for an item only seen; unless = \"seen\" does", function()
            mention("m1")
            sim:emit { type = "task.assigned", entity_id = "t1", payload = { title = "review" } }
            sim:mark_seen("alice", "m1")
            sim:mark_all_seen("alice")
            sim:advance "10m"
            local sent = sim:sent("alice", "email")
            assert.are.equal(1, #sent)
            assert.are.equal("bob mentioned you", sent[1].subject)
            local dropped = sim:suppressed("alice", "email")
            assert.are.equal(1, #dropped)
            assert.are.equal("t1", dropped[1].entity_id)
            assert.are.equal("cancelled: the feed item was seen within the delay (unless = \"seen\")",
                dropped[1].reason)
        end)

        it("counts a mark-all-read, but not for items that arrive after it", function()
            mention("m1")
            assert.are.equal(1, sim:mark_all_read("alice"))
            mention("m2")
            sim:advance "10m"
            local sent = sim:sent("alice", "email")
            assert.are.equal(1, #sent)
            assert.are.equal("m2", sent[1].entity_id)
            assert.are.equal("m1", sim:suppressed("alice", "email")[1].entity_id)
        end)

        it("is cancelled by a cancel_on event for the same tenant and entity emitted after it", function()
            sim:emit { type = "invoice.paid", entity_id = "inv_0" } -- paid before it was created: no effect
            sim:emit { type = "invoice.created", entity_id = "inv_0", payload = { amount = 5 } }
            sim:emit { type = "invoice.created", entity_id = "inv_1", payload = { amount = 10 } }
            sim:emit { type = "invoice.created", entity_id = "inv_2", payload = { amount = 20 } }
            sim:advance "30m"
            local paid = sim:emit { type = "invoice.paid", entity_id = "inv_1" }
            sim:emit { type = "invoice.paid", entity_id = "inv_2", tenant = "globex" } -- another tenant's
            assert.are.equal(3, #sim:held("alice", "webhook"))
            sim:advance "30m"
            local sent = {}
            for i, m in ipairs(sim:sent("alice", "webhook")) do
                sent[i] = m.body.entity_id
            end
            assert.are.same({ "inv_0", "inv_2" }, sent)
            local dropped = sim:suppressed("alice", "webhook")
            assert.are.equal(1, #dropped)
            assert.are.equal("inv_1", dropped[1].entity_id)
            assert.are.equal(("cancelled: event %d (invoice.paid) arrived for inv_1 within the delay (cancel_on)")
                :format(paid.id), dropped[1].reason)
        end)
    end)

    describe("preferences", function()
        it("suppress a delivery before its timing, with the engine's reason, and keep the feed item out", function()
            sim = rules:timeline {
                start = "2026-01-05T09:00:00Z",
                preferences = { alice = { { event_type = "mention.created", channel = "feed", enabled = false },
                    { event_type = "*", channel = "email", enabled = false } } },
            }
            sim:emit { type = "mention.created", entity_id = "m1", payload = { by = "bob" } }
            assert.are.same({}, sim:held())
            assert.are.same({}, sim:feed("alice"))
            local dropped = sim:suppressed("alice", "email")
            assert.are.equal(1, #dropped)
            assert.are.equal("suppressed by the recipient's preference (event type *, channel email)",
                dropped[1].reason)
            local err = misuse_of(function() sim:mark_read("alice", "m1") end)
            assert.matches("mark_read: \"alice\" has no feed item for \"m1\"", err, 1, true)
        end)
    end)

    describe("misuse", function()
        it("raises at the spec's line with what to do", function()
            assert.matches("start must be a UTC time like \"2026-01-05T09:00:00Z\"",
                misuse_of(function() rules:timeline { start = "monday" } end), 1, true)
            misuse_of(function() rules:timeline { start = "2026-02-30T00:00:00Z" } end)
            assert.matches("unknown option 'begin' (expected start, queries, preferences)",
                misuse_of(function() rules:timeline { begin = "2026-01-05T09:00:00Z" } end), 1, true)
            assert.matches("call it as rules:timeline",
                misuse_of(function() testing.load_source(rules_source).timeline({}) end), 1, true)

            assert.matches("advance: expected seconds (a number >= 0) or a duration like",
                misuse_of(function() sim:advance "soon" end), 1, true)
            misuse_of(function() sim:advance(-5) end)
            assert.matches("call it as sim:advance(...)", misuse_of(function() sim.advance("1m") end), 1, true)
            assert.matches("advance_to: 2026-01-05T08:00:00Z is before the timeline's clock (2026-01-05T09:00:00Z)",
                misuse_of(function() sim:advance_to "2026-01-05T08:00:00Z" end), 1, true)

            assert.matches("emit: the timeline numbers events in emit order",
                misuse_of(function() sim:emit { type = "welcome", id = 7 } end), 1, true)
            assert.matches("emit: unknown field 'kind'",
                misuse_of(function() sim:emit { kind = "welcome" } end), 1, true)
            assert.matches("emit: dedupe_key must be a non-empty string",
                misuse_of(function() sim:emit { type = "welcome", dedupe_key = "" } end), 1, true)
            assert.matches("emit: unknown option 'prefs'",
                misuse_of(function() sim:emit({ type = "welcome" }, { prefs = {} }) end), 1, true)

            assert.matches("sent: feed items are not sent; list them with sim:feed(recipient)",
                misuse_of(function() sim:sent("alice", "feed") end), 1, true)
            assert.matches("held: channel must be \"webhook\", \"email\", \"kafka\" or nil",
                misuse_of(function() sim:held("alice", "sms") end), 1, true)
            assert.matches("suppressed: recipient must be a recipient id",
                misuse_of(function() sim:suppressed(42) end), 1, true)
            assert.matches("mark_read: say which item", misuse_of(function() sim:mark_read("alice", 42) end), 1, true)
            assert.matches("feed: expected a recipient id", misuse_of(function() sim:feed() end), 1, true)
            assert.matches("mark_all_read: expected a recipient id",
                misuse_of(function() sim:mark_all_read() end), 1, true)
        end)

        it("refuses an event the intake would refuse, storing nothing", function()
            local err = error_of(function() sim:emit { type = "no.such.type" } end)
            assert.matches("testing_clock_spec%.lua:%d+: crier%.testing: emit failed %(unknown_event_type%)", err)
            local ok, msg, code = sim:try_emit { type = "comment.created", entity_id = "c1", payload = {} }
            assert.is_nil(ok)
            assert.are.equal("invalid_payload", code)
            assert.matches("payload field 'author' is required", msg, 1, true)
            assert.are.equal(1, sim:emit({ type = "welcome" }).id) -- the refused ones took no id
        end)
    end)

    it("logs what it decided, for failure messages", function()
        sim:emit { type = "build.failed", entity_id = "b1", payload = { repo = "api" } }
        assert.matches("2026-01-05T09:00:00Z  alice webhook: sent", sim:log(), 1, true)
    end)
end)
