-- Specs for crier.testing, the rule authors' busted helpers: loading rule
-- directories and files like the engine, events, plans with fake query rows
-- and preferences, paged audiences, notification keys, rendered content, the
-- assertions and their messages, and misuse.
local crier = require "crier"
local json = require "crier.json"
local nginx = require "crier.nginx"
local testing = require "crier.testing"

local function sh_quote(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function run(cmd)
    local status = os.execute(cmd)
    assert(status == 0 or status == true, "command failed: " .. cmd)
end

-- A fresh directory with files { name = source } (a table value makes a subdirectory).
local function make_dir(files)
    local dir = os.tmpname()
    os.remove(dir)
    run("mkdir " .. sh_quote(dir))
    for name, source in pairs(files) do
        if type(source) == "table" then
            run("mkdir " .. sh_quote(dir .. "/" .. name))
        else
            local f = assert(io.open(dir .. "/" .. name, "wb"))
            f:write(source)
            f:close()
        end
    end
    return dir
end

local function remove_dir(dir)
    run("rm -rf " .. sh_quote(dir))
end

local function lines(text)
    local out = {}
    for line in text:gmatch("[^\n]+") do
        out[#out + 1] = line
    end
    return out
end

-- The error message fn raises (a string), with busted's own prefix left as is.
local function error_of(fn)
    local ok, err = pcall(fn)
    assert.is_false(ok, "expected an error")
    return tostring(err)
end

local header = 'local crier = require "crier"\n'

-- Rules used by most specs: webhook, email and kafka routing, a discriminator,
-- a required type, a rule ignoring preferences, a query and a paged audience.
local rules_source = header .. [[
crier.event_type "invoice.created" {
    payload = { invoice_id = "string", amount_cents = "integer", currency = "string", memo = "string?" },
}
crier.event_type "invoice.reminder" { payload = { invoice_id = "string", month = "string" } }
crier.event_type "account.locked" { payload = { reason = "string" }, required = true }
crier.event_type "maintenance" { payload = { window = "string" } }
crier.event_type "team.news" { payload = { team = "string", headline = "string" } }
crier.event_type "org.news" { payload = { org = "string" } }
crier.event_type "undelivered" {}

local team = crier.query("team_members", "SELECT id, email, name, vip FROM m WHERE team = $1 ORDER BY id")
local org_page = crier.query("org_page",
    "SELECT id, email FROM m WHERE org = $1 AND id > $2 ORDER BY id LIMIT $3")

crier.rule "invoice.created" {
    recipients = {
        { id = "alice", email = "alice@example.test", name = "Alice" },
        { id = "bob", email = "bob@example.test", name = "Bob" },
    },
    channels = function(_, r)
        if r.id == "alice" then return { "webhook", "email", "kafka" } end
        return { "webhook" }
    end,
    webhook = {
        url = crier.setting("hook_url", "http://hooks.test/billing"),
        secret = { "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2VjcmV0LW9sZA==" },
        body = function(event, r)
            return { invoice = event.payload.invoice_id, to = r.id, cents = event.payload.amount_cents }
        end,
        retry = { 0, "5s", "1m" },
    },
    email = {
        from = "billing@example.test",
        subject = "Invoice {{ payload.invoice_id }}: {{ payload.amount_cents | money(payload.currency) }}",
        text = "Hello {{ recipient.name }},\n{% if payload.memo %}Memo: {{ payload.memo }}\n{% endif %}Bye",
        html = "<p>Hello {{ recipient.name }}</p><p>{{ payload.memo | default('no memo') }}</p>",
    },
    kafka = {
        topic = function(event) return "billing." .. event.tenant end,
        body = '{"invoice": "{{ payload.invoice_id }}", "who": "{{ recipient.id }}"}',
    },
}

crier.rule "invoice.reminder" {
    recipients = { "alice" },
    discriminator = function(event) return event.payload.month end,
    channels = { "email" },
    email = { to = "{{ recipient.id }}@example.test", subject = "Reminder", text = "{{ payload.month }}" },
}

crier.rule "account.locked" {
    recipients = { "alice", "bob" },
    channels = { "webhook" },
    webhook = { url = "http://hooks.test/security" },
}

crier.rule "maintenance" {
    recipients = { "alice", "bob" },
    preferences = "ignore",
    channels = { "webhook" },
    webhook = { url = "http://hooks.test/ops" },
}

crier.rule "team.news" {
    recipients = function(event) return team(event.payload.team) end,
    channels = function(_, r) return r.email and { "email" } or {} end,
    email = {
        subject = "{% if recipient.vip == 't' %}[VIP] {% endif %}{{ payload.headline }}",
        text = "{{ recipient.name | default(recipient.id) }}: {{ payload.headline }}",
    },
}

crier.rule "org.news" {
    recipients = crier.pages {
        query = org_page,
        params = function(event) return { event.payload.org } end,
        page_size = 2,
    },
    channels = { "webhook" },
    webhook = { url = "http://hooks.test/org" },
}
]]

local function load(opts)
    return testing.load_source(rules_source, opts)
end

local invoice = { type = "invoice.created", tenant = "acme", entity_id = "inv_1234",
    payload = { invoice_id = "inv_1234", amount_cents = 123450, currency = "EUR" } }

describe("crier.testing.load", function()
    local dir
    after_each(function()
        if dir then
            remove_dir(dir)
            dir = nil
        end
    end)

    it("loads a directory like the engine: *.lua sorted by name, no specs, dot files or directories", function()
        dir = make_dir({
            ["b.lua"] = header .. 'crier.event_type "b" {}\n',
            ["a.lua"] = header .. 'crier.event_type "a" {}\n',
            ["a_spec.lua"] = "error('specs are not rules')",
            [".#a.lua"] = "error('editor files are not rules')",
            [".deploy.tmp.lua"] = "error('temp files are not rules')",
            ["notes.txt"] = "not lua",
            ["dir.lua"] = {},
        })
        local rules = testing.load(dir)
        assert.are.same({ "a.lua", "b.lua" }, rules.files)
        assert.are.same({ "a", "b" }, rules:event_types())
        assert.are.same({ dir .. "/a.lua", dir .. "/b.lua" }, rules.paths)
        -- the rules version crier check prints (a prefix of) and nginx computes
        local sources = {}
        for i, name in ipairs(rules.files) do
            local f = assert(io.open(dir .. "/" .. name, "rb"))
            sources[i] = { name = name, source = f:read("*a") }
            f:close()
        end
        assert.are.equal(nginx.version(sources), rules.version)
        assert.are.equal(64, #rules.version)
        -- a trailing slash changes nothing
        assert.are.same({ "a.lua", "b.lua" }, testing.load(dir .. "/").files)
    end)

    it("lists a directory with ls when LuaFileSystem is not installed", function()
        dir = make_dir({
            ["b.lua"] = header .. 'crier.event_type "b" {}\n',
            ["it's here.lua"] = header .. 'crier.event_type "a" {}\n',
            ["x_spec.lua"] = "error('specs are not rules')",
            ["d.lua"] = {},
        })
        local saved_loaded, saved_preload = package.loaded.lfs, package.preload.lfs
        package.loaded.lfs = nil
        package.preload.lfs = function() error("no lfs here") end
        local ok, rules = pcall(testing.load, dir)
        local ok2, err = pcall(testing.load, dir .. "/missing")
        package.loaded.lfs, package.preload.lfs = saved_loaded, saved_preload
        assert.is_true(ok, rules)
        assert.are.same({ "b.lua", "it's here.lua" }, rules.files)
        assert.is_false(ok2)
        assert.matches("cannot open rules directory", err, 1, true)
    end)

    it("loads one file or a list of files, in the engine's order by file name", function()
        dir = make_dir({
            ["z.lua"] = header .. 'crier.event_type "z" {}\n',
            ["m.lua"] = header .. 'crier.rule "z" { recipients = { "x" }, channels = {} }\n',
        })
        assert.are.same({ "z" }, testing.load(dir .. "/z.lua"):event_types())
        local rules = testing.load({ dir .. "/z.lua", dir .. "/m.lua" })
        assert.are.same({ "m.lua", "z.lua" }, rules.files)
        assert.are.same({ "x" }, rules:plan({ type = "z" }).recipients)
    end)

    it("raises with the problems as path:line: message lines", function()
        dir = make_dir({
            ["a.lua"] = header .. "\ncrier.rule \"ghost\" { recipients = {}, channels = {} }\n",
            ["b.lua"] = "local x = = 1\n",
        })
        local err = error_of(function() testing.load(dir) end)
        assert.matches("crier.testing: the rules did not load:\n", err, 1, true)
        assert.matches(dir .. "/a.lua:3: rule for undeclared event type 'ghost'", err, 1, true)
        assert.matches(dir .. "/b.lua:1: unexpected symbol near '='", err, 1, true)
        local rules, problems = testing.try_load(dir)
        assert.is_nil(rules)
        assert.are.same({
            dir .. "/a.lua:3: rule for undeclared event type 'ghost' (declare it with crier.event_type \"ghost\" "
                .. "{ ... })",
            dir .. "/b.lua:1: unexpected symbol near '='",
        }, lines(problems))
    end)

    it("passes settings, as strings, and reports a missing one at its line", function()
        local source = header .. 'local url = crier.setting("url")\nlocal n = crier.setting("n", "1")\n'
            .. 'crier.event_type "x" {}\n'
            .. 'crier.rule "x" { recipients = { n }, channels = { "webhook" }, webhook = { url = url } }\n'
        local rules = testing.load_source(source, { settings = { url = "https://h.test/x", n = 42 } })
        local result = rules:plan({ type = "x" })
        assert.are.same({ "42" }, result.recipients)
        assert.are.equal("https://h.test/x", result:delivery("42", "webhook").url)
        local _, err = testing.try_load_source(source, { path = "/rules/x.lua" })
        assert.are.equal("/rules/x.lua:2: setting 'url' is not set: pass --set url=VALUE or set CRIER_SET_url=VALUE",
            err)
    end)

    it("refuses misuse with a message", function()
        local empty = make_dir({})
        local empty_err = error_of(function() testing.load(empty) end)
        remove_dir(empty)
        assert.matches("no rule files in", empty_err, 1, true)
        assert.matches("cannot open rules directory", error_of(function()
            testing.load("/nonexistent/crier/rules")
        end), 1, true)
        assert.matches("x_spec.lua is not a rule file", error_of(function()
            testing.load({ "/rules/x_spec.lua" })
        end), 1, true)
        assert.matches("expected a rules directory", error_of(function() testing.load(42) end), 1, true)
        assert.matches("opts: unknown field 'setting'", error_of(function()
            testing.load_source(rules_source, { setting = {} })
        end), 1, true)
        assert.matches("opts.settings.x must be a string", error_of(function()
            testing.load_source(rules_source, { settings = { x = {} } })
        end), 1, true)
        assert.matches("opts.queries.q must be a list of rows", error_of(function()
            testing.load_source(rules_source, { queries = { q = "rows" } })
        end), 1, true)
    end)

    it("cannot be required by rule files (the sandbox refuses it)", function()
        local rules, err = testing.try_load_source(header .. 'local t = require "crier.testing"\n'
            .. 'crier.event_type "x" {}\n', { path = "/rules/x.lua" })
        assert.is_nil(rules)
        assert.matches('require "crier.testing" is not allowed in rules', err, 1, true)
    end)
end)

describe("crier.testing.event", function()
    it("fills in an id, the tenant acme, an entity id and an empty payload", function()
        local a, b = testing.event({ type = "x" }), testing.event({ type = "x" })
        assert.are.equal(a.id + 1, b.id)
        assert.are.same({ id = b.id, tenant = "acme", type = "x", entity_id = "entity_" .. b.id, payload_json = "{}" },
            b)
        assert.are.same({ id = 7, tenant = "globex", type = "y", entity_id = "e", payload_json = '{"a":[1,2]}',
            cursor = "c" }, testing.event({ id = 7, tenant = "globex", type = "y", entity_id = "e",
            payload = { a = { 1, 2 } }, cursor = "c" }))
        assert.are.equal("{not json", testing.event({ type = "x", payload = "{not json" }).payload_json)
    end)

    it("refuses misuse", function()
        assert.matches("event: type must be an event type name", error_of(function() testing.event({}) end), 1, true)
        assert.matches("event: unknown field 'entity'", error_of(function()
            testing.event({ type = "x", entity = "e" })
        end), 1, true)
        assert.matches("payload cannot be encoded as JSON", error_of(function()
            testing.event({ type = "x", payload = { f = print } })
        end), 1, true)
    end)
end)

describe("rules:plan", function()
    it("lists recipients in order with their notification keys", function()
        local result = load():plan(invoice)
        assert.are.same({ "alice", "bob" }, result.recipients)
        local alice = result:recipient("alice")
        assert.are.equal("invoice.created:inv_1234:alice", alice.key)
        -- the same key the engine hashes (tests/unit/test_keys.c)
        assert.are.equal("45a96ae5-c059-8cab-2ac2-8303a7821ca2", alice.key_hash)
        assert.are.equal("msg_45a96ae5c0598cab2ac28303a7821ca2", alice.message_id)
        assert.is_nil(result.next_cursor)
        assert.is_nil(result:recipient("carol"))
        assert.are.equal("inv_1234", result.event.entity_id)
    end)

    it("decodes webhook and kafka bodies, keeping the raw text", function()
        local result = load():plan(invoice)
        local hook = testing.assert_delivered(result, "alice", "webhook")
        assert.are.same({ invoice = "inv_1234", to = "alice", cents = 123450 }, hook.body)
        assert.are.equal('{"cents":123450,"invoice":"inv_1234","to":"alice"}', hook.raw)
        assert.are.equal("http://hooks.test/billing", hook.url)
        assert.are.equal(hook.url, hook.target)
        assert.are.same({ "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2VjcmV0LW9sZA==" }, hook.secrets)
        assert.is_true(hook.signed)
        assert.are.same({ 0, 5, 60 }, hook.retry)
        assert.are.equal("{0,5,60}", hook.retry_literal)
        assert.are.equal("msg_45a96ae5c0598cab2ac28303a7821ca2", hook.message_id)
        local kafka = result:delivery("alice", "kafka")
        assert.are.equal("billing.acme", kafka.topic)
        assert.are.same({ invoice = "inv_1234", who = "alice" }, kafka.body)
        assert.is_nil(result:delivery("bob", "kafka"))
        assert.are.same({ "alice", "bob" }, result:delivered_to("webhook"))
        assert.are.equal(4, #result:deliveries())
        assert.are.equal(2, #result:deliveries("webhook"))
    end)

    it("renders email subject, text and html templates", function()
        local rules = load()
        local mail = rules:plan(invoice):delivery("alice", "email")
        assert.are.equal("alice@example.test", mail.to)
        assert.are.equal("billing@example.test", mail.from)
        assert.are.equal("Invoice inv_1234: 1234.50 EUR", mail.subject)
        assert.are.equal("Hello Alice,\nBye", mail.text)
        assert.are.equal(mail.text, mail.body)
        assert.are.equal("<p>Hello Alice</p><p>no memo</p>", mail.html)
        local hostile = rules:plan({ type = "invoice.created", payload = { invoice_id = "i", amount_cents = 5,
            currency = "JPY", memo = "<script>{{ x }}</script>" } }):delivery("alice", "email")
        assert.are.equal("Invoice i: 5 JPY", hostile.subject)
        assert.are.equal("Hello Alice,\nMemo: <script>{{ x }}</script>\nBye", hostile.text)
        assert.are.equal("<p>Hello Alice</p><p>&lt;script&gt;{{ x }}&lt;/script&gt;</p>", hostile.html)
    end)

    it("keeps one notification per recipient and discriminator", function()
        local rules = load()
        local result = rules:plan({ type = "invoice.reminder", entity_id = "inv_9",
            payload = { invoice_id = "inv_9", month = "2026-11" } })
        local entry = result:recipient("alice", "2026-11")
        assert.are.equal("invoice.reminder:inv_9:alice:2026-11", entry.key)
        assert.are.equal(testing.key("acme", "invoice.reminder", "inv_9", "alice", "2026-11").message_id,
            entry.message_id)
        assert.are.equal("alice@example.test", result:delivery("alice", "email", "2026-11").to)
        assert.is_nil(result:recipient("alice", "2026-12"))
    end)

    it("takes the event's fields directly or a testing.event", function()
        local rules = load()
        local ev = testing.event(invoice)
        assert.are.same(rules:plan(ev).recipients, rules:plan(invoice).recipients)
        assert.are.equal(ev.id, rules:plan(ev).event.id)
    end)

    it("plans nobody for a declared type without a rule", function()
        local result = load():plan({ type = "undelivered" })
        assert.are.same({}, result.recipients)
        testing.assert_recipients(result, {})
    end)

    it("validates payloads like the engine's intake", function()
        local rules = load()
        assert.is_true(rules:validate("invoice.created", invoice.payload))
        local ok, err, code = rules:validate("invoice.created", { invoice_id = 1 })
        assert.is_nil(ok)
        assert.are.equal("invalid_payload", code)
        assert.matches("payload field 'invoice_id' must be a string, got number", err, 1, true)
        assert.are.equal("unknown_event_type", select(3, rules:validate("nope", {})))
    end)
end)

describe("rules:plan failures", function()
    it("raises with the code and message; try_plan returns nil, err, code", function()
        local rules = load()
        local err = error_of(function() rules:plan({ type = "invoice.deleted" }) end)
        assert.matches('plan failed (unknown_event_type): unknown event type "invoice.deleted"', err, 1, true)
        local result, msg, code = rules:try_plan({ type = "invoice.created", payload = { invoice_id = "i" } })
        assert.is_nil(result)
        assert.are.equal("invalid_payload", code)
        assert.are.equal("invoice.created: payload field 'amount_cents' is required (an integer); payload field "
            .. "'currency' is required (a string)", msg)
        local _, bad_json, bad_code = rules:try_plan({ type = "invoice.created", payload = "{not json" })
        assert.are.equal("invalid_payload", bad_code)
        assert.matches("payload is not valid JSON", bad_json, 1, true)
    end)

    it("reports template render errors as rule errors naming the field", function()
        local rules = load()
        local err = testing.assert_plan_error(rules, { type = "invoice.created",
            payload = { invoice_id = "i", amount_cents = 1, currency = "EURO" } }, "rule_error", "email.subject:1:")
        assert.matches("rule 'invoice.created' (rules.lua:", err, 1, true)
        assert.matches("money", err, 1, true)
    end)

    it("reports errors raised by rule code with a traceback", function()
        local rules = testing.load_source(header .. 'crier.event_type "x" {}\n'
            .. 'crier.rule "x" { recipients = function() error("no directory today") end, channels = {} }\n')
        local err = testing.assert_plan_error(rules, { type = "x" }, "rule_error", "no directory today")
        assert.matches("stack traceback", err, 1, true)
    end)

    it("assert_plan_error fails when the plan succeeds or fails differently", function()
        local rules = load()
        assert.matches("expected the plan to fail with rule_error, but it planned:\n  alice: webhook, email, kafka",
            error_of(function() testing.assert_plan_error(rules, invoice, "rule_error") end), 1, true)
        assert.matches("expected a rule_error failure, got unknown_event_type", error_of(function()
            testing.assert_plan_error(rules, { type = "nope" }, "rule_error")
        end), 1, true)
        assert.matches('expected the unknown_event_type message to contain "zzz"', error_of(function()
            testing.assert_plan_error(rules, { type = "nope" }, "unknown_event_type", "zzz")
        end), 1, true)
    end)

    it("refuses misuse", function()
        local rules = load()
        assert.matches("call it as rules:plan", error_of(function() rules.plan(invoice) end), 1, true)
        assert.matches("unknown option 'prefs'", error_of(function() rules:plan(invoice, { prefs = {} }) end), 1, true)
        assert.matches("event must be a table", error_of(function() rules:plan("invoice.created") end), 1, true)
    end)
end)

describe("fake queries", function()
    it("serve rows by query name, as the database would give them: strings, NULLs absent", function()
        local rules = load({ queries = { team_members = {
            { id = "ann", email = "ann@example.test", name = "Ann", vip = true },
            { id = 7, email = json.null, vip = false },
            { id = "cy", email = "cy@example.test", vip = false },
        } } })
        local result = rules:plan({ type = "team.news", payload = { team = "core", headline = "Ship it" } })
        testing.assert_recipients(result, { "ann", "7", "cy" })
        assert.are.equal("[VIP] Ship it", result:delivery("ann", "email").subject)
        assert.are.equal("Ann: Ship it", result:delivery("ann", "email").text)
        assert.are.equal("Ship it", result:delivery("cy", "email").subject) -- false is "f", not a VIP
        assert.are.equal("cy: Ship it", result:delivery("cy", "email").text)
        testing.assert_not_planned(result, "7", "email") -- no email column: no email channel
        assert.are.same({ { name = "team_members", sql = "SELECT id, email, name, vip FROM m WHERE team = $1 "
            .. "ORDER BY id", params = { "core" }, n = 1 } }, result.queries)
    end)

    it("call a function with the parameters, and let plan options override load options", function()
        local seen
        local rules = load({ queries = { team_members = { { id = "loaded" } } } })
        assert.are.same({ "loaded" }, rules:plan({ type = "team.news", payload = { team = "a", headline = "h" } })
            .recipients)
        local result = rules:plan({ type = "team.news", payload = { team = "x'; DROP TABLE m; --", headline = "h" } },
            { queries = { team_members = function(team)
                seen = team
                return { { id = "from-fn", email = "f@example.test" } }
            end } })
        assert.are.equal("x'; DROP TABLE m; --", seen)
        assert.are.same({ "from-fn" }, result.recipients)
    end)

    it("fail the event when a query has no rows given, or its function returns nil, err", function()
        local rules = load()
        testing.assert_plan_error(rules, { type = "team.news", payload = { team = "a", headline = "h" } },
            "rule_error", 'no fake rows for query "team_members" (give them as queries = { team_members = { ... } })')
        testing.assert_plan_error(rules, { type = "team.news", payload = { team = "a", headline = "h" } },
            "rule_error", 'crier.query "team_members" failed: connection refused',
            { queries = { team_members = function() return nil, "connection refused" end } })
    end)
end)

describe("paged audiences", function()
    local members = {
        { id = "e", email = "e@x.test" }, { id = "a" }, { id = "c" }, { id = "b" }, { id = "d" },
    }

    it("plan one page per call, with the cursor of the next page", function()
        local rules = load({ queries = { org_page = members } })
        local first = rules:plan({ type = "org.news", entity_id = "n1", payload = { org = "acme" } })
        assert.are.same({ "a", "b" }, first.recipients)
        assert.are.equal("b", first.next_cursor)
        assert.are.same({ "acme", "", "2" }, first.queries[1].params)
        local second = rules:plan({ type = "org.news", entity_id = "n1", payload = { org = "acme" },
            cursor = first.next_cursor })
        assert.are.same({ "c", "d" }, second.recipients)
        assert.are.equal("d", second.next_cursor)
        local last = rules:plan({ type = "org.news", entity_id = "n1", payload = { org = "acme" }, cursor = "d" })
        assert.are.same({ "e" }, last.recipients)
        assert.is_nil(last.next_cursor)
    end)

    it("plan_all_pages follows the cursor to the end, as successive batches would", function()
        local rules = load({ queries = { org_page = members } })
        local result = rules:plan_all_pages({ type = "org.news", payload = { org = "acme" } })
        testing.assert_recipients(result, { "a", "b", "c", "d", "e" })
        assert.are.equal(3, result.pages)
        assert.are.same({ 1, 1, 2, 2, 3 }, (function()
            local p = {}
            for i, e in ipairs(result.entries) do
                p[i] = e.page
            end
            return p
        end)())
        assert.are.same({ "", "b", "d" }, { result.queries[1].params[2], result.queries[2].params[2],
            result.queries[3].params[2] })
        assert.is_nil(result.next_cursor)
        -- exactly a page's worth: one more page that finds nobody
        local four = rules:plan_all_pages({ type = "org.news", payload = { org = "acme" } },
            { queries = { org_page = { { id = "a" }, { id = "b" }, { id = "c" }, { id = "d" } } } })
        assert.are.equal(3, four.pages)
        assert.are.equal(4, #four.recipients)
    end)

    it("keeps a notification planned again on a later page once, as the unique index does", function()
        local rules = testing.load_source(header .. 'crier.event_type "x" {}\n'
            .. 'local q = crier.query("q", "SELECT id, seq FROM t WHERE seq > $1 ORDER BY seq LIMIT $2")\n'
            .. 'crier.rule "x" { recipients = crier.pages { query = q, cursor = "seq", page_size = 1 }, '
            .. 'channels = {} }\n', { queries = { q = { { id = "a", seq = 1 }, { id = "b", seq = 2 },
            { id = "a", seq = 3 } } } })
        local result = rules:plan_all_pages({ type = "x" })
        testing.assert_recipients(result, { "a", "b" })
        assert.are.equal(1, result.duplicates)
        assert.are.equal(4, result.pages)
    end)

    it("stops after max_pages", function()
        local rules = load({ queries = { org_page = members } })
        assert.matches("plan_all_pages: more than 2 pages", error_of(function()
            rules:plan_all_pages({ type = "org.news", payload = { org = "acme" } }, { max_pages = 2 })
        end), 1, true)
    end)

    it("raise a page's failure", function()
        local rules = load({ queries = { org_page = function() return nil, "statement timeout" end } })
        local err = error_of(function()
            rules:plan_all_pages({ type = "org.news", payload = { org = "acme" } })
        end)
        assert.matches("plan failed (rule_error): rule 'org.news' (rules.lua:", err, 1, true)
        assert.matches('crier.query "org_page" failed: statement timeout', err, 1, true)
    end)
end)

describe("preferences", function()
    local prefs = {
        alice = { { event_type = "*", channel = "email", enabled = false } },
        bob = {
            { event_type = "*", channel = "*", enabled = false },
            { event_type = "invoice.created", channel = "webhook", enabled = true },
        },
    }

    it("suppress what the most specific stored preference mutes", function()
        local result = load({ preferences = prefs }):plan(invoice)
        local mail = testing.assert_suppressed(result, "alice", "email")
        assert.are.same(prefs.alice[1], mail.suppressed_by)
        testing.assert_delivered(result, "alice", "webhook")
        testing.assert_delivered(result, "alice", "kafka")
        testing.assert_delivered(result, "bob", "webhook")
        assert.are.same({ "alice", "bob" }, result:delivered_to("webhook"))
        assert.are.same({}, result:delivered_to("email"))
        local other = load({ preferences = prefs }):plan({ type = "invoice.reminder",
            payload = { invoice_id = "i", month = "m" } })
        testing.assert_suppressed(other, "alice", "email")
    end)

    it("do not apply to required event types or rules with preferences = \"ignore\"", function()
        local rules = load({ preferences = prefs })
        local locked = rules:plan({ type = "account.locked", payload = { reason = "too many attempts" } })
        local d = testing.assert_delivered(locked, "bob", "webhook")
        assert.is_false(d.honor_preferences)
        local maintenance = rules:plan({ type = "maintenance", payload = { window = "tonight" } })
        testing.assert_delivered(maintenance, "bob", "webhook")
        assert.matches("(the event type is required or the rule ignores preferences)", error_of(function()
            testing.assert_suppressed(maintenance, "bob", "webhook")
        end), 1, true)
    end)

    it("given per plan win over the loaded ones, per recipient; a function decides per recipient", function()
        local rules = load({ preferences = prefs })
        local result = rules:plan(invoice, { preferences = { alice = {} } })
        testing.assert_delivered(result, "alice", "email")
        local asked = {}
        result = rules:plan(invoice, { preferences = function(id, event)
            asked[#asked + 1] = id .. ":" .. event.type
            return id == "bob" and { { channel = "webhook", enabled = false } } or nil
        end })
        testing.assert_suppressed(result, "bob", "webhook")
        testing.assert_delivered(result, "alice", "webhook")
        assert.are.same({ "alice:invoice.created", "alice:invoice.created", "alice:invoice.created",
            "bob:invoice.created" }, asked)
    end)

    it("are checked like crier.set_preference checks them", function()
        assert.matches("channel must be \"*\", \"webhook\", \"email\", \"kafka\" or \"feed\", got \"sms\"",
            error_of(function()
                load({ preferences = { alice = { { channel = "sms", enabled = false } } } })
            end), 1, true)
        assert.matches("enabled must be true or false, got nil", error_of(function()
            load():plan(invoice, { preferences = { alice = { { event_type = "*" } } } })
        end), 1, true)
        assert.matches("event_type must be \"*\" or an event type name", error_of(function()
            load({ preferences = { alice = { { event_type = "a b", enabled = true } } } })
        end), 1, true)
        assert.is_true(crier.preference_allows(prefs.bob, "invoice.created", "webhook"))
    end)
end)

describe("assertions", function()
    it("say what was planned when they fail", function()
        local result = load({ preferences = { bob = { { enabled = false } } } }):plan(invoice)
        assert.are.equal(result.recipients, testing.assert_recipients(result, { "alice", "bob" }))
        local err = error_of(function() testing.assert_recipients(result, { "bob", "alice" }) end)
        assert.matches('expected recipients { "bob", "alice" }, planned { "alice", "bob" }:\n'
            .. "  alice: webhook, email, kafka\n  bob: webhook (suppressed)", err, 1, true)
        assert.matches('expected a email delivery to "bob"; planned:', error_of(function()
            testing.assert_delivered(result, "bob", "email")
        end), 1, true)
        assert.matches('expected a webhook delivery to "bob", but the recipient\'s preference (event type *, '
            .. "channel *, enabled = false) suppresses it", error_of(function()
            testing.assert_delivered(result, "bob", "webhook")
        end), 1, true)
        assert.matches('expected the webhook delivery to "alice" to be suppressed, but it is sent', error_of(function()
            testing.assert_suppressed(result, "alice", "webhook")
        end), 1, true)
        assert.matches('expected a suppressed email delivery to "bob", but none is planned', error_of(function()
            testing.assert_suppressed(result, "bob", "email")
        end), 1, true)
        assert.matches('expected no notification for "alice"', error_of(function()
            testing.assert_not_planned(result, "alice")
        end), 1, true)
        assert.matches('expected no kafka delivery to "alice"', error_of(function()
            testing.assert_not_planned(result, "alice", "kafka")
        end), 1, true)
        testing.assert_not_planned(result, "carol")
        testing.assert_not_planned(result, "bob", "kafka")
        assert.matches("expected a result of rules:plan", error_of(function()
            testing.assert_recipients({ recipients = {} }, {})
        end), 1, true)
    end)

    it("report failures at the spec's line", function()
        local result = load():plan(invoice)
        local _, err = pcall(function()
            testing.assert_recipients(result, {}) -- this line
        end)
        local line = debug.getinfo(1, "l").currentline - 2
        assert.matches("testing_spec.lua:" .. line .. ": expected recipients", tostring(err), 1, true)
    end)
end)

describe("feeds", function()
    -- the feed channel and mode = "read" (pending where the library has no feed channel yet)
    local has_feed = crier.channel_kinds.feed ~= nil

    it("decodes a feed item's content", function()
        if not has_feed then
            return pending("the library has no feed channel")
        end
        local rules = testing.load_source(header .. 'crier.event_type "x" { payload = { t = "string" } }\n'
            .. 'crier.rule "x" { recipients = { "a" }, channels = { "feed" }, '
            .. 'feed = { title = "New: {{ payload.t }}" } }\n')
        local item = testing.assert_delivered(rules:plan({ type = "x", payload = { t = "<b>" } }), "a", "feed")
        assert.are.equal("New: <b>", item.content.title)
        assert.are.equal(item.content, item.body)
        assert.are.equal("string", type(item.raw))
    end)

    it("lists the items of a rule in mode \"read\" by audience", function()
        if not has_feed then
            return pending("the library has no feed channel")
        end
        local rules = testing.load_source(header .. 'crier.event_type "x" { payload = { t = "string" } }\n'
            .. 'crier.rule "x" { mode = "read", audience = function(e) return { "team:core", "team:ops" } end, '
            .. 'feed = { title = "{{ payload.t }}" } }\n')
        local result = rules:plan({ type = "x", payload = { t = "hello" } })
        testing.assert_recipients(result, {})
        assert.are.equal(2, #result.audience_items)
        assert.are.equal("team:core", result.audience_items[1].audience)
        assert.are.equal("hello", result.audience_items[1].content.title)
    end)
end)

describe("testing.key", function()
    it("computes the engine's notification keys", function()
        assert.are.same({
            key = "invoice.created:inv_1234:alice",
            key_hash = "45a96ae5-c059-8cab-2ac2-8303a7821ca2",
            message_id = "msg_45a96ae5c0598cab2ac28303a7821ca2",
        }, testing.key("acme", "invoice.created", "inv_1234", "alice"))
        -- every other vector (empty discriminator vs none, separators, control
        -- characters, unicode) is in tests/vectors/notification_keys.tsv,
        -- checked by notification_keys_spec.lua
        assert.has_error(function() testing.key("acme", "a", 1, "c") end)
    end)
end)
