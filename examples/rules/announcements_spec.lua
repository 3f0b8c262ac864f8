-- busted spec for the announcements example: the org's members come from a
-- fake app.members (crier.testing serves the rules' queries from rows given
-- here, cut into pages like the database would), preferences mute
-- announcements but not security alerts, and the emails render as expected.
--   busted --lua=luajit examples/rules     (crier's lua/ directory on LUA_PATH)

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
package.path = package.path .. ";" .. here .. "/../../lua/?.lua;" .. here .. "/../../lua/?/init.lua"

local testing = require "crier.testing"

-- app.members of org acme, as the queries return them (NULL columns absent).
local members = {
    { id = "u001", email = "ana@acme.test", name = "Ana" },
    { id = "u002", name = "Ben" }, -- no email address
    { id = "u003", email = "cy@acme.test" }, -- no display name
}

-- n members m0001, m0002, ... (user_id is text: the cursor compares text,
-- so the ids are zero-padded to keep their order)
local function many_members(n)
    local rows = {}
    for i = 1, n do
        rows[i] = { id = string.format("m%04d", i), email = "m" .. i .. "@acme.test" }
    end
    return rows
end

local admins = { { id = "u001", email = "ana@acme.test", name = "Ana" } }

local launch = {
    type = "org.announcement",
    tenant = "acme",
    entity_id = "ann-7",
    payload = {
        org = "acme",
        title = "Spring launch <and> party",
        body = "We ship on Wednesday & celebrate.",
        highlights = { "Faster search", "Dark mode" },
        starts_at = "2026-04-01T18:30:00+02:00",
        price_cents = 250000,
        currency = "EUR",
    },
}

describe("announcements", function()
    local rules
    before_each(function()
        rules = testing.load(here, { queries = { org_members_page = members, org_admins = admins } })
    end)

    it("reaches every member: email when they have an address, the in-app webhook always", function()
        local result = rules:plan(launch)
        testing.assert_recipients(result, { "u001", "u002", "u003" })
        assert.are.same({ "u001", "u003" }, result:delivered_to("email"))
        assert.are.same({ "u001", "u002", "u003" }, result:delivered_to("webhook"))
        testing.assert_not_planned(result, "u002", "email")
        -- the org and the page come to the query as parameters, never as SQL
        assert.are.same({ "acme", "", "500" }, result.queries[1].params)
    end)

    it("renders the email's subject, text and html", function()
        local mail = testing.assert_delivered(rules:plan(launch), "u001", "email")
        assert.are.equal("ana@acme.test", mail.to)
        assert.are.equal("news@example.com", mail.from)
        assert.are.equal("[ACME] Spring launch <and> party", mail.subject)
        assert.are.equal([[
Hello Ana,

We ship on Wednesday & celebrate.

Highlights:
  1. Faster search
  2. Dark mode

When: Wednesday 01 April 2026, 16:30 UTC

Price: 2,500.00 EUR

-- You get this because you are a member of acme.
]], mail.text)
        assert.are.equal([[
<h1>Spring launch &lt;and&gt; party</h1>
<p>Hello Ana,</p>
<p>We ship on Wednesday &amp; celebrate.</p>
<ol>
  <li class="first">Faster search</li>
  <li>Dark mode</li>
</ol>
<p>When: Wednesday 01 April 2026, 16:30 UTC</p>
<p>Price: 2,500.00 EUR</p>
]], mail.html)
    end)

    it("leaves out what the announcement does not have", function()
        local result = rules:plan({ type = "org.announcement", payload = {
            org = "acme", title = string.rep("very long title ", 10), body = "Short.", price_cents = 0,
        } })
        local mail = result:delivery("u003", "email")
        assert.are.equal("[ACME] very long title very long title very long title very long...", mail.subject)
        assert.are.equal("Hello there,\n\nShort.\n\nFree of charge.\n\n"
            .. "-- You get this because you are a member of acme.\n", mail.text)
    end)

    it("sends the in-app bridge a JSON body with the values escaped", function()
        local result = rules:plan(launch)
        local hook = result:delivery("u002", "webhook")
        assert.are.equal("http://127.0.0.1:8080/hooks/announcements", hook.url)
        assert.are.same({ kind = "announcement", org = "acme", member = "u002", title = "Spring launch <and> party",
            event_id = tostring(result.event.id) }, hook.body)
        local tricky = rules:plan({ type = "org.announcement", payload = {
            org = "acme", title = 'He said "hi"\n', body = "b" } }):delivery("u001", "webhook")
        assert.are.equal('He said "hi"\n', tricky.body.title)
    end)

    it("fans a large org out page by page, everyone once", function()
        rules = testing.load(here, { queries = { org_members_page = many_members(1234) } })
        local first = rules:plan(launch)
        assert.are.equal(500, #first.recipients)
        assert.are.equal("m0500", first.next_cursor)
        local all = rules:plan_all_pages(launch)
        assert.are.equal(3, all.pages)
        assert.are.equal(1234, #all.recipients)
        assert.are.equal(0, all.duplicates)
        assert.are.same({ "", "m0500", "m1000" }, { all.queries[1].params[2], all.queries[2].params[2],
            all.queries[3].params[2] })
    end)

    it("lets members mute announcements by email, or altogether", function()
        local result = rules:plan(launch, { preferences = {
            u001 = { { event_type = "org.announcement", channel = "email", enabled = false } },
            u003 = { { event_type = "*", channel = "*", enabled = false } },
        } })
        testing.assert_suppressed(result, "u001", "email")
        testing.assert_delivered(result, "u001", "webhook")
        testing.assert_suppressed(result, "u003", "email")
        testing.assert_suppressed(result, "u003", "webhook")
        testing.assert_delivered(result, "u002", "webhook")
    end)
end)

describe("security alerts", function()
    local rules
    before_each(function()
        rules = testing.load(here, { queries = { org_admins = admins } })
    end)

    local login = { type = "security.alert", tenant = "acme", entity_id = "alert-1",
        payload = { org = "acme", kind = "new_login", at = "2026-03-01T10:00:00Z", ip = "203.0.113.9" } }

    it("reach the admins even when they muted everything", function()
        local result = rules:plan(login, { preferences = { u001 = { { enabled = false } } } })
        testing.assert_recipients(result, { "u001" })
        local mail = testing.assert_delivered(result, "u001", "email")
        assert.is_false(mail.honor_preferences)
        assert.are.same({ 0, 30, 120, 600, 1800 }, mail.retry)
        assert.are.equal("Security alert for acme: new sign-in", mail.subject)
        assert.are.equal("Hello Ana,\n\nSomeone signed in to acme from 203.0.113.9 on 2026-03-01 at 10:00:00 UTC.\n\n"
            .. "If this was not you or a colleague, rotate your credentials now.\n", mail.text)
    end)

    it("name the kind of event", function()
        local result = rules:plan({ type = "security.alert", payload = { org = "acme", kind = "key_created",
            at = "2026-03-01T12:00:00+01:00" } })
        local mail = result:delivery("u001", "email")
        assert.are.equal("Security alert for acme: new API key", mail.subject)
        assert.matches("An API key was created for acme on 2026-03-01 at 11:00:00 UTC.", mail.text, 1, true)
        result = rules:plan({ type = "security.alert", payload = { org = "acme", kind = "mfa_disabled",
            at = "2026-03-01" } })
        assert.are.equal("Security alert for acme: mfa_disabled", result:delivery("u001", "email").subject)
    end)

    it("fail the event when the time is not a date", function()
        testing.assert_plan_error(rules, { type = "security.alert",
            payload = { org = "acme", kind = "new_login", at = "yesterday" } }, "rule_error", "email.text:")
    end)
end)
