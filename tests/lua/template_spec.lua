-- Specs for crier.template: dotted paths, the default filter, escaping modes,
-- and errors that name the template and line.
local template = require "crier.template"
local json = require "crier.json"

local function render(source, ctx, opts)
    local fn = assert(template.compile(source, opts))
    return fn(ctx)
end

describe("crier.template", function()
    it("inserts values found by dotted paths", function()
        local ctx = { payload = { amount = 1250, invoice = { id = "inv_1" }, items = { "first", "second" } } }
        assert.are.equal("inv_1: 1250 (second)",
            render("{{ payload.invoice.id }}: {{payload.amount}} ({{ payload.items.2 }})", ctx))
    end)

    it("renders numbers and booleans as text", function()
        assert.are.equal("12.5 3 true false", render("{{ a }} {{ b }} {{ c }} {{ d }}",
            { a = 12.5, b = 3.0, c = true, d = false }))
    end)

    it("keeps text without tags as is", function()
        assert.are.equal("plain } { text", render("plain } { text", {}))
        assert.are.equal("", render("", {}))
    end)

    it("uses default() for missing values and JSON null", function()
        assert.are.equal("n/a|n/a|x|0", render(
            "{{ payload.memo | default('n/a') }}|{{ payload.none.deeper | default(\"n/a\") }}|"
                .. "{{ payload.set | default('n/a') }}|{{ payload.null | default(0) }}",
            { payload = { set = "x", null = json.null } }))
    end)

    it("fails to render a missing value without a default, naming template and line", function()
        local fn = assert(template.compile("line one\n{{ payload.memo }}", { name = "billing.text" }))
        local out, err = fn({ payload = {} })
        assert.is_nil(out)
        assert.are.equal(
            "billing.text:2: 'payload.memo' is missing (add | default('...') to allow that)", err)
    end)

    it("refuses to insert a table", function()
        local out, err = render("{{ payload }}", { payload = {} })
        assert.is_nil(out)
        assert.matches("'payload' is a table", err)
    end)

    it("escapes values for HTML when asked, not the template text", function()
        assert.are.equal("<b>&lt;script&gt;&amp;&quot;&#39;</b>",
            render("<b>{{ v }}</b>", { v = "<script>&\"'" }, { html = true }))
        assert.are.equal("<script>", render("{{ v }}", { v = "<script>" }))
    end)

    it("escapes values for JSON string literals when asked", function()
        local out = render('{"memo": "{{ v }}"}', { v = 'say "hi"\n\\' }, { json = true })
        assert.are.equal('{"memo": "say \\"hi\\"\\n\\\\"}', out)
        assert.are.equal('say "hi"\n\\', json.decode(out).memo)
    end)

    it("inserts hostile values literally, never as template syntax", function()
        assert.are.equal("{{ secret }}", render("{{ v }}", { v = "{{ secret }}", secret = "s3cret" }))
    end)

    it("writes a literal {{ with a string literal", function()
        assert.are.equal("{{ x }}", render("{{ '{{' }} x }}", {}))
    end)

    it("reports syntax errors with the template name and line", function()
        local cases = {
            { "a\n\n{{ x | upper }}", "t:3: unknown filter 'upper'" },
            { "a\n{{ x ", "t:2: unterminated '{{' (missing '}}')" },
            { "{{ }}", "t:1: empty {{ }}" },
            { "{{ 1x }}", "t:1: bad path '1x'" },
            { "{{ a..b }}", "t:1: bad path 'a..b'" },
            { "{{ a b }}", "t:1: expected '| filter' in 'a b'" },
            { "{{ a | default(x) }}", "t:1: bad argument to filter 'default' in 'a | default(x)'" },
        }
        for _, case in ipairs(cases) do
            local fn, err = template.compile(case[1], { name = "t" })
            assert.is_nil(fn)
            assert.are.equal(case[2], err)
        end
    end)

    it("counts lines inside multi-line tags", function()
        local _, err = template.compile("{{\n a }}\n{{ b | nope }}", { name = "t" })
        assert.are.equal("t:3: unknown filter 'nope'", err)
    end)

    it("raises on misuse", function()
        assert.has_error(function() template.compile(nil) end,
            "template.compile: source must be a string, got nil")
    end)

    it("render() compiles and renders in one call", function()
        assert.are.equal("hi bob", template.render("hi {{ name }}", { name = "bob" }))
        local out, err = template.render("{{", {})
        assert.is_nil(out)
        assert.matches("^template:1:", err)
    end)
end)
