-- What a load checks that used to fail only per event (issue 10, item 10):
-- template paths against the event type's declared payload, channel lists;
-- channels functions are checked when they run, with the known channels in
-- the message; and `strict = true` refuses payload fields the type does not
-- declare.
local runtime = require "crier.runtime"
local json = require "crier.json"

local function load(files)
    return runtime.new_generation(files, {})
end

local declare = [[
local crier = require "crier"
crier.event_type "comment.created" { payload = { author = "string", body = "string", meta = "table?" } }
]]

-- A rule for comment.created whose feed title is `title`, declared at line 3
-- of /rules/c.lua.
local function with_title(title, extra)
    return load({ { path = "/rules/c.lua", source = declare .. 'crier.rule "comment.created" {\n'
        .. '  recipients = { "ann" }, channels = { "feed" },\n'
        .. "  feed = { title = " .. string.format("%q", title) .. " },\n" .. (extra or "") .. "}\n" } })
end

describe("template paths are checked against the payload schema at load", function()
    it("reports a payload field the event type does not declare, with file:line and the declared fields", function()
        local gen, err = with_title("By {{ payload.autor }}")
        assert.is_nil(gen)
        assert.are.equal("/rules/c.lua:3: rule 'comment.created': feed.title:1: template uses payload.autor, "
            .. "which event type comment.created does not declare (declared: author, body, meta) (column 7)", err)
    end)

    it("checks every path of a template: event.payload, conditions, filter arguments, loops", function()
        for _, title in ipairs({
            "{{ event.payload.autor }}",
            "{% if payload.autor %}x{% endif %}",
            "{{ payload.author | default(payload.autor) }}",
            "{% for c in payload.autor %}{{ c }}{% endfor %}",
            "{{ payload.author }} {{ payload.autor | default('?') }}",
        }) do
            local _, err = with_title(title)
            assert.matches("template uses ", err, 1, true)
            assert.matches("payload.autor, which event type comment.created does not declare", err, 1, true)
        end
    end)

    it("accepts declared fields, nested values of tables, loop variables and the other names", function()
        assert(with_title("{{ payload.author }}: {{ payload.meta.x.y | default('') }} {{ recipient.id }} "
            .. "{{ id }} {{ tenant }} {{ type }} {{ entity_id }} {{ event.type }} {{ cursor | default('') }}"
            .. "{% for line in payload.meta.lines %}{{ line.text }}{{ loop.index }}{% endfor %}"))
    end)

    it("reports a path below a field that is not a table", function()
        local _, err = with_title("{{ payload.author.name }}")
        assert.matches("feed.title:1: template uses payload.author.name, but payload.author is a string "
            .. "(column 4)", err, 1, true)
    end)

    it("reports names a template never sees", function()
        local _, err = with_title("{{ paylod.author }}")
        assert.matches("feed.title:1: template uses paylod.author, but templates see only payload, event, "
            .. "recipient, locale, id, tenant, type, entity_id and cursor (column 4)", err, 1, true)
    end)

    it("checks templates against a type declared in another file, and types without a payload", function()
        local rule = 'local crier = require "crier"\ncrier.rule "t" {\n'
            .. '  recipients = { "a" }, channels = { "email" },\n'
            .. '  email = { to = "a@b.test", subject = "{{ payload.s }}", text = "{{ payload.x }}" },\n}\n'
        local _, err = load({ { path = "/rules/a.lua", source = 'local crier = require "crier"\ncrier.event_type "t" '
            .. '{ payload = { s = "string" } }\n' }, { path = "/rules/b.lua", source = rule } })
        assert.matches("/rules/b.lua:2: rule 't': email.text:1: template uses payload.x, which event type t does "
            .. "not declare (declared: s)", err, 1, true)
        assert.is_nil(err:find("payload.s", 1, true))
        _, err = load({ { path = "/rules/a.lua", source = 'local crier = require "crier"\ncrier.event_type "t" {}\n' },
            { path = "/rules/b.lua", source = rule } })
        assert.matches("template uses payload.s, which event type t does not declare (it declares no payload "
            .. "fields)", err, 1, true)
    end)

    it("checks JSON body templates too", function()
        local _, err = with_title("t",
            '  webhook = { url = "http://h.test/x", body = \'{"a": "{{ payload.boddy }}"}\' },\n')
        assert.matches("webhook.body:1: template uses payload.boddy", err, 1, true)
    end)
end)

describe("channels", function()
    it("a list naming an unknown channel is a load error", function()
        local _, err = load({ { path = "/rules/c.lua", source = declare
            .. 'crier.rule "comment.created" { recipients = { "a" }, channels = { "sms" } }\n' } })
        assert.matches("/rules/c.lua:3: rule 'comment.created': unknown channel 'sms' (known: email, feed, kafka, "
            .. "webhook)", err, 1, true)
    end)

    it("a function returning an unknown channel fails the event naming it and the known ones", function()
        local gen = assert(load({ { path = "/rules/c.lua", source = declare .. [[
crier.rule "comment.created" {
  recipients = { "ann" },
  channels = function() return { "feed", "sms" } end,
  feed = { title = "t" },
}
]] } }))
        local plan, err, code = gen:plan({ id = 1, tenant = "t", type = "comment.created", entity_id = "e",
            payload_json = json.encode({ author = "a", body = "b" }) })
        assert.is_nil(plan)
        assert.are.equal("rule_error", code)
        assert.matches("rule 'comment.created' (/rules/c.lua:3): channels returned unknown channel \"sms\" for "
            .. "recipient \"ann\" (known: email, feed, kafka, webhook)", err, 1, true)
    end)
end)

describe("strict event types", function()
    local function gen_with(strict)
        return assert(load({ { path = "/rules/s.lua", source = 'local crier = require "crier"\n'
            .. 'crier.event_type "s" { payload = { a = "string", b = "integer?" }' .. strict .. " }\n" } }))
    end

    it("refuse payload fields they do not declare", function()
        local gen = gen_with(", strict = true")
        assert.is_true(gen:validate("s", '{"a": "x", "b": 1}'))
        local ok, err, code = gen:validate("s", '{"a": "x", "extra": 1, "more": null}')
        assert.is_nil(ok)
        assert.are.equal("invalid_payload", code)
        assert.are.equal("s: payload field 'extra' is not declared (strict = true; declared: a, b); payload field "
            .. "'more' is not declared (strict = true; declared: a, b)", err)
    end)

    it("accept them by default, and with strict = false", function()
        assert.is_true(gen_with(""):validate("s", '{"a": "x", "extra": 1}'))
        assert.is_true(gen_with(", strict = false"):validate("s", '{"a": "x", "extra": 1}'))
    end)

    it("must say true or false", function()
        local _, err = load({ { path = "/rules/s.lua", source =
            'local crier = require "crier"\ncrier.event_type "s" { strict = 1 }\n' } })
        assert.matches("/rules/s.lua:2: event type 's': strict must be true or false", err, 1, true)
    end)
end)
