-- Specs for the rule DSL (crier) and crier.runtime: loading generations,
-- load-time problems with file:line, payload validation and planning.
local crier = require "crier"
local json = require "crier.json"
local runtime = require "crier.runtime"

-- Loads rule sources given as { { "path", "source" }, ... } (or one source).
local function load_rules(sources, settings)
    if type(sources) == "string" then
        sources = { { "/rules/main.lua", sources } }
    end
    local files = {}
    for i, s in ipairs(sources) do
        files[i] = { path = s[1], source = s[2] }
    end
    return runtime.new_generation(files, settings)
end

local function must_load(sources, settings)
    local gen, err = load_rules(sources, settings)
    assert(gen, err)
    return gen
end

local function event(type_name, payload, extra)
    local ev = {
        id = 1,
        tenant = "acme",
        type = type_name,
        entity_id = "e1",
        payload_json = type(payload) == "string" and payload or json.encode(payload or {}),
    }
    for k, v in pairs(extra or {}) do
        ev[k] = v
    end
    return ev
end

local header = [[
local crier = require "crier"
crier.event_type "thing" { payload = { name = "string?", n = "integer?", period = "string?" } }
]]

local function rule_source(body)
    return header .. 'crier.rule "thing" {\n' .. body .. "\n}\n"
end

local basic_hook = 'channels = { "webhook" }, webhook = { url = "http://hooks.test/x" },'

describe("crier.runtime.new_generation", function()
    it("loads declarations into a generation", function()
        local gen = must_load({
            { "/rules/a.lua", header },
            { "/rules/b.lua", 'local crier = require "crier"\ncrier.event_type "other" {}' },
        })
        assert.are.same({ "other", "thing" }, gen:event_types())
        local info = gen:describe_event_type("thing")
        assert.are.equal("/rules/a.lua:2", info.where)
        assert.are.same({ name = "n", type = "integer", optional = true }, info.fields[1])
        assert.is_nil(info.rule)
    end)

    it("lets a rule come before its event type's declaration (in another file)", function()
        local gen = must_load({
            { "/rules/a.lua", 'local crier = require "crier"\ncrier.rule "late" { recipients = { "a" }, '
                .. basic_hook .. " }" },
            { "/rules/b.lua", 'local crier = require "crier"\ncrier.event_type "late" {}' },
        })
        assert.are.equal(1, #gen:plan(event("late")))
    end)

    it("reports every problem as one path:line: message line", function()
        local gen, err = load_rules({
            { "/rules/a.lua", 'local crier = require "crier"\n\ncrier.rule "ghost" { recipients = {}, '
                .. basic_hook .. " }" },
            { "/rules/b.lua", "local x = = 1" },
            { "/rules/c.lua", header .. 'crier.rule "thing" {\n recipients = {"a"},\n channels = { "sms" },\n'
                .. " webhok = {},\n}\n" },
            { "/rules/d.lua", 'error("plain failure")' },
            { "/rules/e.lua", 'error({})' },
        })
        assert.is_nil(gen)
        local lines = {}
        for line in err:gmatch("[^\n]+") do
            lines[#lines + 1] = line
        end
        assert.are.same({
            "/rules/a.lua:3: rule for undeclared event type 'ghost' "
                .. "(declare it with crier.event_type \"ghost\" { ... })",
            "/rules/b.lua:1: unexpected symbol near '='",
            "/rules/c.lua:3: rule 'thing': unknown field 'webhok' (expected one of: audience, backfill, "
                .. "channels, description, discriminator, email, feed, kafka, locale, mode, preferences, quiet_hours, "
                .. "recipients, webhook)",
            "/rules/c.lua:3: rule 'thing': unknown channel 'sms' (known: email, feed, kafka, webhook)",
            "/rules/d.lua:1: plain failure",
            "/rules/e.lua: (error object is a table value)",
        }, lines)
    end)

    it("reports declaration problems at the declaration's line", function()
        local cases = {
            { 'crier.event_type "x" { payload = { a = "int" } }',
                "event type 'x': payload field 'a' has type \"int\"" },
            { 'crier.event_type "x" { paylod = {} }', "event type 'x': unknown field 'paylod'" },
            { 'crier.event_type "thing" {}', "event type 'thing' is declared twice (first at /rules/main.lua:2)" },
            { 'crier.rule "thing" { recipients = {"a"}, ' .. basic_hook .. ' }\ncrier.rule "thing" { recipients = '
                .. '{"a"}, ' .. basic_hook .. " }",
                "rule 'thing': a second rule for this event type (first at /rules/main.lua:3)", 4 },
            { 'crier.rule "thing" { recipients = {"a"}, channels = {"webhook"} }',
                "rule 'thing': channel 'webhook' is listed but has no webhook = { ... } block" },
            { 'crier.rule "thing" { recipients = {"a"}, channels = {"webhook"}, webhook = {} }',
                "rule 'thing': webhook.url is required" },
            { 'crier.rule "thing" { recipients = {"a"}, channels = {"webhook"}, webhook = { url = "ftp://x" } }',
                "rule 'thing': webhook.url must start with http:// or https://" },
            { 'crier.rule "thing" { channels = {"webhook"}, webhook = { url = "http://x" } }',
                "rule 'thing': recipients is required" },
            { 'crier.rule "thing" { recipients = {"a"}, webhook = { url = "http://x" } }',
                "rule 'thing': channels is required" },
            { 'crier.rule "thing" { recipients = "a", ' .. basic_hook .. " }",
                "rule 'thing': recipients must be a list, a function(event) or crier.pages { ... }, got string" },
            { 'crier.rule "thing" { recipients = {"a"}, channels = {"webhook"}, webhook = { url = "http://x", '
                .. 'body = "{{ x | nope }}" } }', "rule 'thing': webhook.body:1: unknown filter 'nope'" },
        }
        for _, case in ipairs(cases) do
            local gen, err = load_rules(header .. case[1])
            assert.is_nil(gen, case[1])
            assert.are.equal("/rules/main.lua:" .. (case[3] or 3) .. ": ", err:sub(1, 19), err)
            assert.truthy(err:find(case[2], 1, true), "expected «" .. case[2] .. "» in «" .. err .. "»")
        end
    end)

    it("reports misuse of the DSL at the caller's line", function()
        local _, err = load_rules(header .. "crier.event_type(42) {}")
        assert.matches("^/rules/main.lua:3: crier.event_type: name must be 1%-200 letters", err)
        _, err = load_rules(header .. 'crier.rule "thing" "oops"')
        assert.matches("^/rules/main.lua:3: crier.rule \"thing\": expected a table", err)
    end)

    it("restores full paths that Lua shortens in messages", function()
        local path = "/very/long/directory/name/that/goes/on/and/on/for/quite/a/while/rules/syntax.lua"
        local _, err = load_rules({ { path, "local x = = 1" } })
        assert.are.equal(path .. ":1: unexpected symbol near '='", err)
    end)

    it("raises on malformed arguments", function()
        assert.has_error(function() runtime.new_generation("x") end)
        assert.has_error(function() runtime.new_generation({ { path = 1 } }) end)
        assert.has_error(function() runtime.new_generation({}, { a = 1 }) end)
    end)

    it("keeps each generation's declarations to itself", function()
        local one = must_load('local crier = require "crier"\ncrier.event_type "one" {}')
        local two = must_load('local crier = require "crier"\ncrier.event_type "two" {}')
        assert.are.same({ "one" }, one:event_types())
        assert.are.same({ "two" }, two:event_types())
    end)

    it("refuses declarations outside a load", function()
        assert.has_error(function() crier.event_type "x" {} end,
            "crier.event_type: no rules are being loaded (rules are loaded by crier.runtime.new_generation)")
        assert.has_error(function() crier.setting("x") end, "crier.setting: no rules are being loaded or run")
    end)
end)

describe("crier.setting", function()
    local source = header .. [[
local url = crier.setting("hook_url", "http://default.test/")
local secret = crier.setting("hook_secret", nil)
crier.rule "thing" {
  recipients = { "a" }, channels = { "webhook" },
  webhook = { url = url, secret = secret,
    body = function() return { region = crier.setting("region", "eu") } end },
}
]]

    it("uses defaults, and nil as an explicit optional default", function()
        local d = must_load(source):plan(event("thing"))[1].deliveries[1]
        assert.are.equal("http://default.test/", d.url)
        assert.is_nil(d.secret)
        assert.are.equal('{"region":"eu"}', d.body)
    end)

    it("uses given settings, also while rules run", function()
        local gen = must_load(source, { hook_url = "https://set.test/", hook_secret = "whsec_abc", region = "us" })
        local d = gen:plan(event("thing"))[1].deliveries[1]
        assert.are.equal("https://set.test/", d.url)
        assert.are.equal("whsec_abc", d.secret)
        assert.are.equal('{"region":"us"}', d.body)
    end)

    it("fails the load at the caller's line when missing without a default", function()
        local _, err = load_rules(header .. 'local token = crier.setting("api.token")')
        assert.are.equal("/rules/main.lua:3: setting 'api.token' is not set: pass --set api.token=VALUE "
            .. "or set CRIER_SET_api.token=VALUE", err)
    end)
end)

describe("payload validation", function()
    local gen = must_load([[
local crier = require "crier"
crier.event_type "typed" {
  payload = { s = "string", n = "number", i = "integer", b = "boolean", t = "table", a = "array", o = "string?" },
}
]])
    local good = { s = "x", n = 1.5, i = 2, b = false, t = { k = 1 }, a = json.array() }

    local function with(changes)
        local p = {}
        for k, v in pairs(good) do
            p[k] = v
        end
        for k, v in pairs(changes) do
            p[k] = v
        end
        return json.encode(p)
    end

    it("accepts a payload matching the schema, extra fields included", function()
        assert.is_true(gen:validate("typed", with({ extra = 1, o = json.null })))
        assert.is_true(gen:validate("typed", with({ o = "memo", t = { 1, 2 } })))
    end)

    it("names the type and field of a mismatch", function()
        local cases = {
            { { i = "2" }, "typed: payload field 'i' must be an integer, got string" },
            { { i = 2.5 }, "typed: payload field 'i' must be an integer, got number" },
            { { n = "1" }, "typed: payload field 'n' must be a number, got string" },
            { { b = 0 }, "typed: payload field 'b' must be a boolean, got number" },
            { { t = "x" }, "typed: payload field 't' must be a table, got string" },
            { { a = { k = 1 } }, "typed: payload field 'a' must be an array, got object" },
            { { s = json.null }, "typed: payload field 's' is required (a string)" },
            { { o = 5 }, "typed: payload field 'o' must be a string, got number" },
        }
        for _, case in ipairs(cases) do
            local ok, err, code = gen:validate("typed", with(case[1]))
            assert.is_nil(ok)
            assert.are.equal(case[2], err)
            assert.are.equal("invalid_payload", code)
        end
    end)

    it("reports every bad field at once", function()
        local _, err = gen:validate("typed", '{"a": []}')
        assert.are.equal("typed: payload field 'b' is required (a boolean); payload field 'i' is required "
            .. "(an integer); payload field 'n' is required (a number); payload field 's' is required (a string); "
            .. "payload field 't' is required (a table)", err)
    end)

    it("refuses non-objects and bad JSON with the position", function()
        local _, err, code = gen:validate("typed", "[]")
        assert.are.equal("typed: payload must be a JSON object, got array", err)
        assert.are.equal("invalid_payload", code)
        _, err = gen:validate("typed", '{"s": "x",}')
        assert.are.equal("typed: payload is not valid JSON: expected a string key in object at position 11 "
            .. "(line 1, column 11)", err)
    end)

    it("refuses unknown event types", function()
        local ok, err, code = gen:validate("nope", "{}")
        assert.is_nil(ok)
        assert.are.equal('unknown event type "nope"', err)
        assert.are.equal("unknown_event_type", code)
        local _, _, plan_code = gen:plan(event("nope"))
        assert.are.equal("unknown_event_type", plan_code)
    end)

    it("plans nobody for a declared type without a rule", function()
        assert.are.same({}, gen:plan(event("typed", with({}))))
    end)
end)

describe("gen:plan", function()
    it("returns one entry per recipient with its deliveries", function()
        local gen = must_load(rule_source('recipients = { "alice", "bob" }, ' .. basic_hook))
        local plan = gen:plan(event("thing", { name = "x" }))
        assert.are.same({
            { recipient = "alice", deliveries = { { channel = "webhook", url = "http://hooks.test/x",
                target = "http://hooks.test/x", honor_preferences = true,
                body = '{"entity_id":"e1","event_id":1,"payload":{"name":"x"},"recipient":"alice",'
                    .. '"tenant":"acme","type":"thing"}' } } },
            { recipient = "bob", deliveries = { { channel = "webhook", url = "http://hooks.test/x",
                target = "http://hooks.test/x", honor_preferences = true,
                body = '{"entity_id":"e1","event_id":1,"payload":{"name":"x"},"recipient":"bob",'
                    .. '"tenant":"acme","type":"thing"}' } } },
        }, plan)
    end)

    it("passes the decoded event to rule functions", function()
        local gen = must_load(rule_source([[
recipients = function(event)
  return { event.tenant .. "-" .. event.entity_id .. "-" .. event.id .. "-" .. event.payload.name }
end,
]] .. basic_hook))
        assert.are.equal("acme-e1-7-zed", gen:plan(event("thing", { name = "zed" }, { id = 7 }))[1].recipient)
    end)

    it("accepts ids, numbers and tables with ids, and merges duplicates", function()
        local gen = must_load(rule_source([[
recipients = { "a", 12, { id = "b", email = "b@x.test" }, "a", { id = 12 }, "b" },
channels = { "webhook" },
webhook = { url = "http://hooks.test/x", body = function(_, r) return { id = r.id, email = r.email } end },
]]))
        local plan = gen:plan(event("thing"))
        assert.are.equal(3, #plan)
        assert.are.same({ "a", "12", "b" }, { plan[1].recipient, plan[2].recipient, plan[3].recipient })
        assert.are.equal('{"email":"b@x.test","id":"b"}', plan[3].deliveries[1].body)
    end)

    it("keeps one entry per recipient and discriminator", function()
        local gen = must_load(rule_source([[
recipients = { "a", "b", "a" },
discriminator = function(event, r) return r.id == "b" and event.payload.period or nil end,
]] .. basic_hook))
        local plan = gen:plan(event("thing", { period = "2024-05" }))
        assert.are.equal(2, #plan)
        assert.is_nil(plan[1].discriminator)
        assert.are.equal("2024-05", plan[2].discriminator)
    end)

    it("routes channels per recipient; no channel leaves a recipient without deliveries", function()
        local gen = must_load(rule_source([[
recipients = { "loud", "quiet" },
channels = function(_, r) if r.id == "quiet" then return {} end return { "webhook", "webhook" } end,
webhook = { url = function(event, r) return "https://hooks.test/" .. event.tenant .. "/" .. r.id end,
            secret = function() return "whsec_k" end },
]]))
        local plan = gen:plan(event("thing"))
        assert.are.equal(1, #plan[1].deliveries)
        assert.are.equal("https://hooks.test/acme/loud", plan[1].deliveries[1].url)
        assert.are.equal("whsec_k", plan[1].deliveries[1].secret)
        assert.are.same({}, plan[2].deliveries)
    end)

    it("renders template bodies with JSON escaping and checks the result is JSON", function()
        local gen = must_load(rule_source([[
recipients = { "r1" }, channels = { "webhook" },
webhook = { url = "http://hooks.test/x",
  body = '{"to": "{{ recipient.id }}", "name": "{{ payload.name | default(\'?\') }}", '
    .. '"n": {{ payload.n | default(0) }}}' },
]]))
        local body = gen:plan(event("thing", { name = 'Bob "B" <b>', n = 3 }))[1].deliveries[1].body
        assert.are.same({ to = "r1", name = 'Bob "B" <b>', n = 3 }, json.decode(body))
        assert.are.equal('{"to": "r1", "name": "?", "n": 0}', gen:plan(event("thing"))[1].deliveries[1].body)
    end)

    it("encodes a static table body once", function()
        local gen = must_load(rule_source([[
recipients = { "r1" }, channels = { "webhook" },
webhook = { url = "http://hooks.test/x", body = { kind = "ping", list = crier.json.empty_array } },
]]))
        assert.are.equal('{"kind":"ping","list":[]}', gen:plan(event("thing"))[1].deliveries[1].body)
    end)

    local function rule_error(body, payload)
        local gen = must_load(rule_source(body))
        local plan, err, code = gen:plan(event("thing", payload))
        assert.is_nil(plan)
        assert.are.equal("rule_error", code)
        return err
    end

    it("fails with a traceback when rule code raises", function()
        local err = rule_error('recipients = function(event) return event.payload.name.first end, ' .. basic_hook)
        assert.matches("^rule 'thing' %(/rules/main.lua:3%) failed: /rules/main.lua:4: attempt to index", err)
        assert.matches("stack traceback:", err)
    end)

    it("names the rule when it returns bad values", function()
        assert.are.equal("rule 'thing' (/rules/main.lua:3): recipient #2 must be an id (string or number) or a "
            .. "table with an id, got boolean", rule_error('recipients = { "a", true }, ' .. basic_hook))
        assert.are.equal("rule 'thing' (/rules/main.lua:3): recipient #1 is an empty string",
            rule_error('recipients = { "" }, ' .. basic_hook))
        assert.are.equal("rule 'thing' (/rules/main.lua:3): recipient #1 has id nil; expected a non-empty "
            .. "string or a number", rule_error("recipients = { { name = 'x' } }, " .. basic_hook))
        assert.are.equal("rule 'thing' (/rules/main.lua:3): recipients returned string; expected a list",
            rule_error('recipients = function() return "a" end, ' .. basic_hook))
        assert.matches("unknown channel \"sms\" for recipient \"a\"", rule_error(
            'recipients = { "a" }, channels = function() return { "sms" } end, webhook = { url = "http://x" },'))
        assert.matches("discriminator returned table", rule_error(
            'recipients = { "a" }, discriminator = function() return {} end, ' .. basic_hook))
        assert.matches("webhook.url returned \"nope\"", rule_error(
            'recipients = { "a" }, channels = { "webhook" }, webhook = { url = function() return "nope" end },'))
        assert.matches("webhook.body is not valid JSON: json.decode: unexpected character 'n'", rule_error(
            'recipients = { "a" }, channels = { "webhook" }, webhook = { url = "http://x", '
                .. 'body = function() return "not json" end },'))
        assert.matches("webhook.body: json.encode: cannot encode a function at %$.f", rule_error(
            'recipients = { "a" }, channels = { "webhook" }, webhook = { url = "http://x", '
                .. 'body = function() return { f = tostring } end },'))
        assert.matches("webhook.body:1: 'payload.name' is missing", rule_error(
            'recipients = { "a" }, channels = { "webhook" }, webhook = { url = "http://x", '
                .. 'body = \'{"n": "{{ payload.name }}"}\' },'))
    end)

    it("refuses declarations while a rule runs", function()
        local err = rule_error('recipients = function() crier.event_type "late" {} end, ' .. basic_hook)
        assert.matches("declarations are only allowed while rules load", err)
    end)

    it("gives each event a fresh payload", function()
        local gen = must_load(rule_source([[
recipients = function(event) event.payload.name = (event.payload.name or "") .. "!"; return { event.payload.name } end,
]] .. basic_hook))
        assert.are.equal("x!", gen:plan(event("thing", { name = "x" }))[1].recipient)
        assert.are.equal("x!", gen:plan(event("thing", { name = "x" }))[1].recipient)
    end)
end)

describe("preferences", function()
    it("lets the most specific stored preference decide", function()
        local prefs = {
            { event_type = "*", channel = "*", enabled = false },
            { event_type = "news", channel = "webhook", enabled = true },
            { event_type = "news", channel = "*", enabled = false },
            { event_type = "*", channel = "email", enabled = true },
        }
        assert.is_true(crier.preference_allows(prefs, "news", "webhook"))
        assert.is_false(crier.preference_allows(prefs, "news", "email"))
        assert.is_true(crier.preference_allows(prefs, "billing", "email"))
        assert.is_false(crier.preference_allows(prefs, "billing", "kafka"))
        assert.is_true(crier.preference_allows({}, "news", "webhook"))
        assert.is_true(crier.preference_allows(nil, "news", "webhook"))
    end)

    it("marks deliveries of required types and ignoring rules as not subject to preferences", function()
        local gen = must_load('local crier = require "crier"\n'
            .. 'crier.event_type "a" { payload = {}, required = true }\n'
            .. 'crier.event_type "b" { payload = {} }\n'
            .. 'crier.event_type "c" { payload = {} }\n'
            .. 'crier.rule "a" { recipients = { "x" }, ' .. basic_hook .. ' }\n'
            .. 'crier.rule "b" { recipients = { "x" }, ' .. basic_hook .. ' }\n'
            .. 'crier.rule "c" { recipients = { "x" }, preferences = "ignore", ' .. basic_hook .. ' }\n')
        local function honors(t)
            return gen:plan(event(t, {}))[1].deliveries[1].honor_preferences
        end
        assert.is_false(honors("a"))
        assert.is_true(honors("b"))
        assert.is_false(honors("c"))
    end)

    it("refuses a preferences value other than honor or ignore, and a non-boolean required", function()
        local _, err = runtime.new_generation({ { path = "/r.lua", source = 'local crier = require "crier"\n'
            .. 'crier.event_type "a" { payload = {}, required = "yes" }\n'
            .. 'crier.rule "a" { recipients = {}, preferences = "skip", ' .. basic_hook .. ' }\n' } })
        assert.matches("required must be true or false", err, 1, true)
        assert.matches('preferences must be "honor"', err, 1, true)
    end)
end)

describe("crier.query and crier.pages", function()
    local source = 'local crier = require "crier"\n'
        .. 'crier.event_type "team.news" { payload = { team = "string" } }\n'
        .. 'crier.event_type "org.news" { payload = { org = "string" } }\n'
        .. 'local members = crier.query("members", "SELECT id, email FROM m WHERE team = $1 ORDER BY id")\n'
        .. 'local page = crier.query("org_page", "SELECT id FROM m WHERE org = $1 AND id > $2 ORDER BY id LIMIT $3")\n'
        .. 'crier.rule "team.news" { recipients = function(event) return members(event.payload.team) end, '
        .. basic_hook .. ' }\n'
        .. 'crier.rule "org.news" { recipients = crier.pages { query = page, page_size = 2, '
        .. 'params = function(event) return { event.payload.org } end }, ' .. basic_hook .. ' }\n'

    local calls
    local function backend(name, sql, params, n)
        calls[#calls + 1] = { name = name, params = params, n = n }
        if name == "members" then
            assert.matches("WHERE team = %$1", sql)
            return { { id = "ann", email = "ann@x.test" }, { id = "bo", email = "bo@x.test" } }
        end
        local all = { "a", "b", "c", "d", "e" }
        local rows = {}
        for _, id in ipairs(all) do
            if id > params[2] and #rows < tonumber(params[3]) then
                rows[#rows + 1] = { id = id }
            end
        end
        return rows
    end

    it("runs a declared query with parameters only", function()
        calls = {}
        local gen = must_load(source)
        gen:set_query_backend(backend)
        local plan = assert(gen:plan(event("team.news", { team = "core'; DROP TABLE m; --" })))
        assert.are.equal(2, #plan)
        assert.are.equal("ann", plan[1].recipient)
        assert.are.same({ "core'; DROP TABLE m; --" }, calls[1].params)
        assert.is_nil(plan.next_cursor)
    end)

    it("fans a paged audience out one page at a time, with the cursor of the next page", function()
        calls = {}
        local gen = must_load(source)
        gen:set_query_backend(backend)
        local seen, cursor, pages = {}, nil, 0
        repeat
            local ev = event("org.news", { org = "acme" })
            ev.cursor = cursor
            local plan = assert(gen:plan(ev))
            for _, entry in ipairs(plan) do
                seen[#seen + 1] = entry.recipient
            end
            cursor = plan.next_cursor
            pages = pages + 1
        until cursor == nil
        assert.are.same({ "a", "b", "c", "d", "e" }, seen)
        assert.are.equal(3, pages)
        assert.are.same({ "acme", "", 2 }, { calls[1].params[1], calls[1].params[2], tonumber(calls[1].params[3]) })
        assert.are.equal("b", calls[2].params[2])
    end)

    it("fails the event clearly without a backend, and refuses SQL built at run time", function()
        local gen = must_load(source)
        local plan, err = gen:plan(event("team.news", { team = "core" }))
        assert.is_nil(plan)
        assert.matches('crier.query "members": no database is available here', err, 1, true)
        local _, load_err = runtime.new_generation({ { path = "/r.lua", source = 'local crier = require "crier"\n'
            .. 'crier.event_type "x" { payload = {} }\n'
            .. 'crier.rule "x" { recipients = function(e) return crier.query("q", "SELECT 1")() end, '
            .. basic_hook .. ' }\n' } })
        assert.is_nil(load_err)
        local gen2 = must_load('local crier = require "crier"\ncrier.event_type "x" { payload = {} }\n'
            .. 'crier.rule "x" { recipients = function(e) return crier.query("q", "SELECT 1")() end, '
            .. basic_hook .. ' }\n')
        local p2, err2 = gen2:plan(event("x", {}))
        assert.is_nil(p2)
        assert.matches("crier.query: declarations are only allowed while rules load", err2, 1, true)
    end)
end)

describe("runtime.fake_query_backend", function()
    it("serves rows by query name and cuts pages by the cursor column", function()
        local gen = must_load('local crier = require "crier"\n'
            .. 'crier.event_type "org.news" { payload = {} }\n'
            .. 'local page = crier.query("org_page", "SELECT id FROM m WHERE id > $1 ORDER BY id LIMIT $2")\n'
            .. 'crier.rule "org.news" { recipients = crier.pages { query = page, page_size = 2 }, '
            .. basic_hook .. ' }\n')
        gen:set_query_backend(runtime.fake_query_backend({
            org_page = { { id = "c" }, { id = "a" }, { id = "b" } },
        }))
        local first = assert(gen:plan(event("org.news", {})))
        assert.are.same({ "a", "b" }, { first[1].recipient, first[2].recipient })
        assert.are.equal("b", first.next_cursor)
        local ev = event("org.news", {})
        ev.cursor = "b"
        local second = assert(gen:plan(ev))
        assert.are.equal("c", second[1].recipient)
        assert.is_nil(second.next_cursor)
        gen:set_query_backend(runtime.fake_query_backend({}))
        local _, err = gen:plan(event("org.news", {}))
        assert.matches('no fake rows for query "org_page"', err, 1, true)
    end)
end)
