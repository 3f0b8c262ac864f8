-- Specs for crier.template: paths, conditionals, loops, filters (money and
-- dates computed deterministically), whitespace control, escaping modes,
-- hostile values inserted literally, and errors that name template, line and
-- column.
local template = require "crier.template"
local json = require "crier.json"

local function render(source, ctx, opts)
    local fn = assert(template.compile(source, opts))
    return fn(ctx)
end

-- The compile error for source (asserting there is one).
local function compile_error(source, name)
    local fn, err = template.compile(source, { name = name or "t" })
    assert.is_nil(fn, source)
    assert.is_string(err)
    assert.is_nil(err:find("\n"), "multi-line error: " .. err)
    return err
end

-- The render error for source with ctx (asserting there is one).
local function render_error(source, ctx, name)
    local fn = assert(template.compile(source, { name = name or "t" }))
    local out, err = fn(ctx)
    assert.is_nil(out, source)
    assert.is_string(err)
    assert.is_nil(err:find("\n"), "multi-line error: " .. err)
    return err
end

describe("crier.template values", function()
    it("inserts values found by dotted paths", function()
        local ctx = { payload = { amount = 1250, invoice = { id = "inv_1" }, items = { "first", "second" } } }
        assert.are.equal("inv_1: 1250 (second)",
            render("{{ payload.invoice.id }}: {{payload.amount}} ({{ payload.items.2 }})", ctx))
    end)

    it("finds numeric segments in objects by their text", function()
        assert.are.equal("x", render("{{ m.2024 }}", { m = { ["2024"] = "x" } }))
    end)

    it("renders numbers and booleans as text", function()
        assert.are.equal("12.5 3 true false", render("{{ a }} {{ b }} {{ c }} {{ d }}",
            { a = 12.5, b = 3.0, c = true, d = false }))
    end)

    it("renders literals", function()
        assert.are.equal("x 12 -1.5 true false", render("{{ 'x' }} {{ 12 }} {{ -1.5 }} {{ true }} {{ false }}", {}))
    end)

    it("keeps text without tags as is", function()
        assert.are.equal("plain } { text }} %} #}", render("plain } { text }} %} #}", {}))
        assert.are.equal("", render("", {}))
    end)

    it("reads values through __index (the rule runtime's context)", function()
        local event = { payload = { n = 1 } }
        local ctx = setmetatable({ recipient = { id = "r1" } }, { __index = event })
        assert.are.equal("r1 1", render("{{ recipient.id }} {{ payload.n }}", ctx))
    end)

    it("does not index strings (no string methods leak out)", function()
        assert.are.equal("-", render("{{ s.upper | default('-') }}", { s = "abc" }))
    end)

    it("uses default() for missing values and JSON null", function()
        assert.are.equal("n/a|n/a|x|0", render(
            "{{ payload.memo | default('n/a') }}|{{ payload.none.deeper | default(\"n/a\") }}|"
                .. "{{ payload.set | default('n/a') }}|{{ payload.null | default(0) }}",
            { payload = { set = "x", null = json.null } }))
    end)

    it("takes filter arguments from paths", function()
        assert.are.equal("Ada", render("{{ payload.name | default(recipient.name) }}",
            { payload = {}, recipient = { name = "Ada" } }))
    end)

    it("fails to render a missing value without a default, naming template, line and column", function()
        local fn = assert(template.compile("line one\n  {{ payload.memo }}", { name = "billing.text" }))
        local out, err = fn({ payload = {} })
        assert.is_nil(out)
        assert.are.equal(
            "billing.text:2: 'payload.memo' is missing (column 6); add | default('...') to allow that", err)
        -- null is missing too
        assert.matches("'x' is missing", render_error("{{ x }}", { x = json.null }))
    end)

    it("refuses to insert a table", function()
        assert.are.equal("t:1: 'payload' is a table, not text (column 4)",
            render_error("{{ payload }}", { payload = {} }))
    end)

    it("renders the same compiled template for many contexts without changing them", function()
        local fn = assert(template.compile("{% for x in xs %}{{ loop.index }}{{ x }}{% endfor %}"))
        local a, b = { xs = { "a", "b" } }, { xs = { "c" } }
        assert.are.equal("1a2b", fn(a))
        assert.are.equal("1c", fn(b))
        assert.are.equal("1a2b", fn(a))
        assert.are.same({ xs = { "a", "b" } }, a)
    end)
end)

describe("crier.template conditionals", function()
    local function cond(expr, ctx)
        return render("{% if " .. expr .. " %}yes{% else %}no{% endif %}", ctx or {})
    end

    it("chooses the first true branch of if / elif / else", function()
        local source = "{% if a %}A{% elif b %}B{% elif c %}C{% else %}none{% endif %}"
        assert.are.equal("A", render(source, { a = 1, b = 1 }))
        assert.are.equal("B", render(source, { b = 1, c = 1 }))
        assert.are.equal("C", render(source, { c = 1 }))
        assert.are.equal("none", render(source, {}))
        assert.are.equal("", render("{% if a %}A{% endif %}", {}))
    end)

    it("treats nil, false, null, empty strings and empty lists/objects as false; 0 is true", function()
        for _, v in ipairs({ false, json.null, "", {}, json.empty_array, json.array() }) do
            assert.are.equal("no", cond("v", { v = v }), tostring(v))
        end
        assert.are.equal("no", cond("v", {}))
        for _, v in ipairs({ true, 0, "0", " ", "false", { 1 }, { a = 1 } }) do
            assert.are.equal("yes", cond("v", { v = v }), tostring(v))
        end
    end)

    it("compares with literals and paths", function()
        local ctx = { s = "paid", n = 12, m = 12.0, o = 3, d = "2026-01-02", e = "2026-01-10" }
        assert.are.equal("yes", cond("s == 'paid'", ctx))
        assert.are.equal("yes", cond('s == "paid"', ctx))
        assert.are.equal("no", cond("s != 'paid'", ctx))
        assert.are.equal("yes", cond("n == m", ctx))
        assert.are.equal("yes", cond("n > o", ctx))
        assert.are.equal("yes", cond("n >= 12", ctx))
        assert.are.equal("no", cond("n < 12", ctx))
        assert.are.equal("yes", cond("n <= 12.5", ctx))
        assert.are.equal("yes", cond("-1 < o", ctx))
        assert.are.equal("yes", cond("d < e", ctx)) -- strings compare byte-wise
        assert.are.equal("yes", cond("'b' > 'a'", ctx))
    end)

    it("never converts types in == and treats null like a missing value", function()
        assert.are.equal("no", cond("n == '12'", { n = 12 }))
        assert.are.equal("yes", cond("n != '12'", { n = 12 }))
        assert.are.equal("yes", cond("x == null", { x = json.null }))
        assert.are.equal("yes", cond("missing == null", {}))
        assert.are.equal("no", cond("missing == 'x'", {}))
        assert.are.equal("yes", cond("flag == true", { flag = true }))
        assert.are.equal("yes", cond("flag == false", { flag = false }))
    end)

    it("combines with not, and, or and parentheses (and binds tighter than or)", function()
        assert.are.equal("yes", cond("not a", {}))
        assert.are.equal("no", cond("not not a", {}))
        assert.are.equal("yes", cond("a or b and c", { a = true }))
        assert.are.equal("no", cond("(a or b) and c", { a = true }))
        assert.are.equal("yes", cond("a and not b", { a = true }))
        assert.are.equal("yes", cond("not (a and b)", { a = true }))
        assert.are.equal("yes", cond("n > 1 and s == 'x' or false", { n = 2, s = "x" }))
    end)

    it("short-circuits, so the right side of and/or is not evaluated when not needed", function()
        assert.are.equal("no", cond("missing and missing > 1", {}))
        assert.are.equal("yes", cond("n or missing > 1", { n = 1 }))
    end)

    it("applies filters inside conditions", function()
        assert.are.equal("yes", cond("lines | length > 2", { lines = { 1, 2, 3 } }))
        assert.are.equal("yes", cond("name | lower == 'ada'", { name = "ADA" }))
        assert.are.equal("yes", cond("missing | default(0) == 0", {}))
    end)

    it("fails to order values of different types, naming the condition", function()
        assert.are.equal("t:1: 'total > 100': cannot compare a missing value with a number (column 13)",
            render_error("{% if total > 100 %}big{% endif %}", {}))
        assert.matches("'a < b': cannot compare a string with a number",
            render_error("{% if a < b %}{% endif %}", { a = "1", b = 2 }), 1, true)
        assert.matches("cannot compare a table with a table",
            render_error("{% if a < b %}{% endif %}", { a = {}, b = {} }), 1, true)
    end)

    it("does not evaluate the branches it skips", function()
        assert.are.equal("ok", render("{% if false %}{{ missing }}{% else %}ok{% endif %}", {}))
    end)
end)

describe("crier.template loops", function()
    it("iterates a list with loop.index, loop.first, loop.last and loop.length", function()
        local source = "{% for line in payload.lines %}"
            .. "{% if loop.first %}[{% endif %}{{ loop.index }}/{{ loop.length }} {{ line.name }}"
            .. "{% if loop.last %}]{% else %}, {% endif %}{% endfor %}"
        assert.are.equal("[1/3 a, 2/3 b, 3/3 c]",
            render(source, { payload = { lines = { { name = "a" }, { name = "b" }, { name = "c" } } } }))
        assert.are.equal("[1/1 only]", render(source, { payload = { lines = { { name = "only" } } } }))
    end)

    it("renders the else branch for an empty, null or missing list", function()
        local source = "{% for x in xs %}{{ x }}{% else %}(none){% endfor %}"
        assert.are.equal("(none)", render(source, { xs = {} }))
        assert.are.equal("(none)", render(source, { xs = json.empty_array }))
        assert.are.equal("(none)", render(source, { xs = json.null }))
        assert.are.equal("(none)", render(source, {}))
        assert.are.equal("", render("{% for x in xs %}{{ x }}{% endfor %}", {}))
        assert.are.equal("ab", render(source, { xs = json.decode('["a","b"]') }))
    end)

    it("nests loops; the loop variable shadows outer names and loop is the innermost loop", function()
        local source = "{% for item in items %}{{ item.name }}:"
            .. "{% for item in item.parts %}{{ loop.index }}={{ item }}{% if not loop.last %},{% endif %}{% endfor %}"
            .. "({{ loop.index }}:{{ item.name }}) {% endfor %}{{ item }}"
        assert.are.equal("A:1=x,2=y(1:A) B:1=z(2:B) top", render(source, {
            item = "top",
            items = { { name = "A", parts = { "x", "y" } }, { name = "B", parts = { "z" } } },
        }))
    end)

    it("evaluates the list in the outer scope and the else branch without the loop variable", function()
        assert.are.equal("outer", render("{% for x in xs %}{{ x }}{% else %}{{ x }}{% endfor %}", { x = "outer" }))
    end)

    it("treats loop outside any loop as an ordinary name", function()
        assert.are.equal("v", render("{{ loop.index }}", { loop = { index = "v" } }))
    end)

    it("fails on a value that is not a list", function()
        assert.are.equal("t:1: 'xs' is the string \"abc\", not a list (column 13)",
            render_error("{% for x in xs %}{% endfor %}", { xs = "abc" }))
        assert.are.equal("t:1: 'xs' is an object, not a list (column 13)",
            render_error("{% for x in xs %}{% endfor %}", { xs = { a = 1 } }))
    end)

    it("reports errors inside a loop body at their own line", function()
        assert.are.equal("t:2: 'x.name' is missing (column 4); add | default('...') to allow that",
            render_error("{% for x in xs %}\n{{ x.name }}\n{% endfor %}", { xs = { { name = "a" }, {} } }))
    end)
end)

describe("crier.template whitespace control", function()
    it("trims whitespace and newlines beside {%- -%} {{- -}} and {#- -#}", function()
        local source = "Items:\n{% for l in lines -%}\n  - {{ l }}\n{% endfor -%}\nTotal: {{- ' ' -}}  {{ n }}\n"
        assert.are.equal("Items:\n- a\n- b\nTotal: 2\n", render(source, { lines = { "a", "b" }, n = 2 }))
        assert.are.equal("ab", render("a  \n {#- comment -#} \n b", {}))
        assert.are.equal("a\nb", render("a\n{# comment #}b", {}))
    end)

    it("keeps text emails free of blank lines from loops and conditions", function()
        local source = [[
Hello {{ name }},
{%- for line in lines %}
{%- if line.qty > 0 %}
* {{ line.name }} x{{ line.qty }}
{%- endif %}
{%- endfor %}

Thanks]]
        assert.are.equal("Hello Ada,\n* pen x2\n* ink x1\n\nThanks", render(source, {
            name = "Ada",
            lines = { { name = "pen", qty = 2 }, { name = "gum", qty = 0 }, { name = "ink", qty = 1 } },
        }))
    end)
end)

describe("crier.template filters", function()
    it("chains filters left to right", function()
        assert.are.equal("HELLO", render("{{ s | trim | upper }}", { s = "  hello \n" }))
        assert.are.equal("-", render("{{ missing | upper | default('-') }}", {}))
    end)

    it("maps ASCII case only and trims whitespace", function()
        assert.are.equal("ÉCOLE É", render("{{ a | upper }} {{ b | lower }}", { a = "École", b = "É" }))
        assert.are.equal("a b", render("{{ s | trim }}", { s = "\t a b \r\n" }))
        assert.are.equal("12", render("{{ n | upper }}", { n = 12 }))
    end)

    it("truncates by UTF-8 characters, ending with '...' or a given ending", function()
        local ctx = { s = "héllo wörld" }
        assert.are.equal("héllo wörld", render("{{ s | truncate(11) }}", ctx))
        assert.are.equal("héllo...", render("{{ s | truncate(9) }}", ctx)) -- no space before the ending
        assert.are.equal("héllo w…", render("{{ s | truncate(8, '…') }}", ctx))
        assert.are.equal("hé", render("{{ s | truncate(2) }}", ctx))
        assert.are.equal("", render("{{ s | truncate(0) }}", ctx))
        assert.are.equal("hél", render("{{ s | truncate(n, '') }}", { s = ctx.s, n = 3 }))
    end)

    it("counts characters, list items and object keys", function()
        assert.are.equal("5 3 0 2", render("{{ s | length }} {{ l | length }} {{ e | length }} {{ o | length }}",
            { s = "héllo", l = { 1, 2, 3 }, e = json.empty_array, o = { a = 1, b = 2 } }))
    end)

    it("joins lists", function()
        assert.are.equal("a, 1, true|a-1-true|", render("{{ l | join }}|{{ l | join('-') }}|{{ e | join }}",
            { l = { "a", 1, true }, e = {} }))
        assert.matches("join: item 2 is null, not text", render_error("{{ l | join }}", { l = { 1, json.null } }),
            1, true)
        assert.matches("join: expected a list, got the string", render_error("{{ l | join }}", { l = "x" }), 1, true)
    end)

    it("encodes values as JSON", function()
        assert.are.equal('{"a":[1,"x"],"b":null}|"q\\""|null',
            render("{{ v | json }}|{{ s | json }}|{{ n | json }}", { v = { a = { 1, "x" }, b = json.null }, s = 'q"',
                n = json.null }))
        assert.matches("json: json.encode: cannot encode a function", render_error("{{ v | json }}", { v = { print } }),
            1, true)
    end)

    it("reports a filter failure with the expression and the filter's column", function()
        assert.are.equal("t:1: 'v | upper': upper: expected text, got a table (column 8)",
            render_error("{{ v | upper }}", { v = {} }))
    end)

    it("lets a custom filter table extend the built-ins and fail renders with nil, message", function()
        local filters = setmetatable({
            shout = function(v) return v .. "!" end,
            picky = function() return nil, "picky: no\nthanks" end,
        }, { __index = template.filters })
        assert.are.equal("HI!", render("{{ s | upper | shout }}", { s = "hi" }, { filters = filters }))
        local fn = assert(template.compile("{{ s | picky }}", { name = "c", filters = filters }))
        local out, err = fn({ s = 1 })
        assert.is_nil(out)
        assert.are.equal("c:1: 's | picky': picky: no thanks (column 8)", err)
    end)

    it("does not offer a 'safe' filter", function()
        assert.matches("unknown filter 'safe'", compile_error("{{ v | safe }}"), 1, true)
    end)
end)

describe("crier.template money", function()
    local function money(amount, args)
        return render("{{ a | money(" .. (args or "'EUR'") .. ") }}", { a = amount })
    end

    it("formats integer minor units with the currency's decimals", function()
        assert.are.equal("12.50 EUR", money(1250))
        assert.are.equal("0.05 EUR", money(5))
        assert.are.equal("0.00 EUR", money(0))
        assert.are.equal("1250 JPY", money(1250, "'JPY'"))
        assert.are.equal("1250 KRW", money(1250, "'krw'"))
        assert.are.equal("1.250 KWD", money(1250, "'KWD'"))
        assert.are.equal("0.005 BHD", money(5, "'BHD'"))
        assert.are.equal("1.2345 CLF", money(12345, "'CLF'"))
        assert.are.equal("12.50 XYZ", money(1250, "'XYZ'")) -- unlisted: 2 decimals
    end)

    it("formats negative amounts", function()
        assert.are.equal("-12.50 EUR", money(-1250))
        assert.are.equal("-0.01 EUR", money(-1))
        assert.are.equal("-1250 JPY", money(-1250, "'JPY'"))
        assert.are.equal("-0.001 KWD", money(-1, "'KWD'"))
    end)

    it("rounds fractional minor units half away from zero", function()
        assert.are.equal("19.99 USD", money(19.99 * 100, "'USD'")) -- 1998.9999999999998
        assert.are.equal("0.01 EUR", money(0.5))
        assert.are.equal("-0.01 EUR", money(-0.5))
        assert.are.equal("0.00 EUR", money(-0.4)) -- no "-0.00"
        assert.are.equal("0.00 EUR", money(0.49))
        assert.are.equal("2.00 EUR", money(199.5))
    end)

    it("takes digit strings exactly, at any size", function()
        assert.are.equal("123456789012345678.90 EUR", money("12345678901234567890"))
        assert.are.equal("-0.07 EUR", money("-007"))
        assert.are.equal("0.00 EUR", money("-0"))
    end)

    it("groups thousands and replaces the decimal mark when asked", function()
        assert.are.equal("1,234,567.89 USD", money(123456789, "'USD', ','"))
        assert.are.equal("1.234.567,89 EUR", money(123456789, "'EUR', '.', ','"))
        assert.are.equal("-1 000 000 JPY", money(-1000000, "'JPY', ' '"))
        assert.are.equal("999.99 USD", money(99999, "'USD', ','"))
        assert.are.equal("1234567.89 USD", money(123456789, "'USD'"))
    end)

    it("takes the currency from a path", function()
        assert.are.equal("12.50 EUR / 1250 JPY", render(
            "{{ p.a | money(p.c) }} / {{ q.a | money(q.c) }}",
            { p = { a = 1250, c = "EUR" }, q = { a = 1250, c = "JPY" } }))
    end)

    it("passes a missing amount on to default()", function()
        assert.are.equal("n/a", render("{{ a | money('EUR') | default('n/a') }}", {}))
    end)

    it("refuses amounts and currencies it cannot format exactly", function()
        assert.matches("money: expected an amount in minor units (an integer), got the string \"12.50\"",
            render_error("{{ a | money('EUR') }}", { a = "12.50" }), 1, true)
        assert.matches("is not an exact amount of minor units", render_error("{{ a | money('EUR') }}", { a = 2 ^ 60 }),
            1, true)
        assert.matches("'a | money(c)': money: the currency is missing (column 8)",
            render_error("{{ a | money(c) }}", { a = 1 }), 1, true)
        assert.matches("money: the currency must be a 3-letter code like 'EUR', got the string \"<b>\"",
            render_error("{{ a | money(c) }}", { a = 1, c = "<b>" }), 1, true)
        assert.are.equal("t:1: money: the currency must be a 3-letter code like 'EUR', got the string \"EURO\" "
            .. "(column 8)", compile_error("{{ a | money('EURO') }}"))
        assert.are.equal("t:1: filter 'money' takes 1 to 3 arguments, got 0 (column 8)",
            compile_error("{{ a | money }}"))
    end)
end)

describe("crier.template dates", function()
    local function date(value, fmt)
        return render("{{ t | date(" .. (fmt and ("'" .. fmt .. "'") or "") .. ") }}", { t = value })
    end

    it("formats unix seconds in UTC", function()
        assert.are.equal("1970-01-01T00:00:00Z", date(0))
        assert.are.equal("1969-12-31T23:59:59Z", date(-1))
        assert.are.equal("1970-01-01T00:00:01Z", date(1.999)) -- fractions are dropped
        assert.are.equal("1969-12-31T23:59:59Z", date(-0.5))
        assert.are.equal("2038-01-19T03:14:07Z", date(2 ^ 31 - 1))
        assert.are.equal("2038-01-19T03:14:08Z", date(2 ^ 31))
        assert.are.equal("2106-02-07T06:28:16Z", date(2 ^ 32))
        assert.are.equal("9999-12-31T23:59:59Z", date(253402300799))
        assert.are.equal("0000-01-01T00:00:00Z", date(-62167219200))
        assert.are.equal("1900-01-01T00:00:00Z", date(-2208988800))
    end)

    it("parses ISO-8601 timestamps and normalises offsets to UTC", function()
        assert.are.equal("2026-12-01T15:00:00Z", date("2026-12-01T10:00:00-05:00"))
        assert.are.equal("2027-01-01T03:30:00Z", date("2026-12-31T22:00:00-05:30"))
        assert.are.equal("2026-12-31T23:00:00Z", date("2027-01-01T01:00:00+02:00"))
        assert.are.equal("2024-02-29T04:45:00Z", date("2024-02-29T10:15:00+0530"))
        assert.are.equal("2024-03-01T01:00:00Z", date("2024-02-29T23:00:00-02"))
        assert.are.equal("2026-12-01T10:00:00Z", date("2026-12-01T10:00:00Z"))
        assert.are.equal("2026-12-01T10:00:00Z", date("2026-12-01t10:00:00z"))
        assert.are.equal("2026-12-01T10:00:00Z", date("2026-12-01 10:00:00"))
        assert.are.equal("2026-12-01T10:00:00Z", date("2026-12-01T10:00:00.999+00:00"))
        assert.are.equal("2026-12-01T10:00:00Z", date("2026-12-01T10:00"))
        assert.are.equal("2026-12-01T00:00:00Z", date("2026-12-01"))
        assert.are.equal("2017-01-01T00:00:00Z", date("2016-12-31T23:59:60Z")) -- leap second
    end)

    it("knows leap years", function()
        assert.are.equal("2024-02-29 060 Thu", date("2024-02-29", "%F %j %a"))
        assert.are.equal("2000-02-29 060 Tue", date("2000-02-29", "%F %j %a"))
        assert.are.equal("2024-12-31 366", date("2024-12-31", "%F %j"))
        assert.are.equal("2023-12-31 365", date("2023-12-31", "%F %j"))
        assert.are.equal("2100-03-01 060", date("2100-03-01", "%F %j"))
        for _, bad in ipairs({ "2023-02-29", "1900-02-29", "2100-02-29", "2026-13-01", "2026-00-10", "2026-04-31",
            "2026-12-01T24:00:00Z", "2026-12-01T10:60:00Z", "2026-12-01T10:00:61Z", "2026-12-01T10:00:00+24:00",
            "2026-12-01T10:00:00 Z", "26-12-01", "20261201", "1767225600", "", "yesterday" }) do
            assert.matches("date: expected an ISO-8601 timestamp or unix seconds", render_error("{{ t | date }}",
                { t = bad }), 1, true)
        end
    end)

    it("formats every directive", function()
        local t = "2026-03-05T07:08:09Z" -- a Thursday
        assert.are.equal("2026 26 03 05  5 07 07 AM 08 09 064 Mar March Thu Thursday 2026-03-05 07:08:09 UTC %",
            date(t, "%Y %y %m %d %e %H %I %p %M %S %j %b %B %a %A %F %T %Z %%"))
        assert.are.equal("12 PM 12 AM 11 PM", render("{{ a | date('%I %p') }} {{ b | date('%I %p') }} "
            .. "{{ c | date('%I %p') }}", { a = "2026-01-01T12:00:00Z", b = "2026-01-01T00:30:00Z",
            c = "2026-01-01T23:59:59Z" }))
        assert.are.equal("Due: Tuesday, 1 December 2026", date("2026-12-01T10:00:00-05:00", "Due: %A, %e %B %Y")
            :gsub("  ", " "))
    end)

    it("agrees with the C library's UTC calendar across centuries", function()
        local fmt = "%Y-%m-%d %H:%M:%S %j %a %b"
        local fn = assert(template.compile("{{ t | date('" .. fmt .. "') }}"))
        local t = -2208988800 -- 1900
        while t < 4102444800 do -- 2100
            assert.are.equal(os.date("!" .. fmt, t), fn({ t = t }), t)
            t = t + 86400 * 17 + 3631
        end
        for _, s in ipairs({ 0, 68169600, 951782400, 951868800, 1709164800, 2147483647, 4107542399 }) do
            assert.are.equal(os.date("!" .. fmt, s), fn({ t = s }), s)
        end
    end)

    it("refuses values outside 0000-9999 and unknown directives", function()
        assert.matches("date: the number 1767225600000 is outside the years 0000-9999",
            render_error("{{ t | date }}", { t = 1767225600000 }), 1, true)
        assert.matches("outside the years", render_error("{{ t | date }}", { t = "0000-01-01T00:00:00+01:00" }),
            1, true)
        assert.matches("date: expected an ISO-8601 timestamp or unix seconds, got a table",
            render_error("{{ t | date }}", { t = {} }), 1, true)
        local err = compile_error("{{ t | date('%Y %Q') }}")
        assert.are.equal("t:1: date: unknown directive '%Q' in the format (known: %Y %m %d %H %M %S %b %B %a %A "
            .. "%e %j %y %I %p %F %T %Z %z %%) (column 8)", err)
        assert.matches("unknown directive '%'", compile_error("{{ t | date('%') }}"), 1, true)
        assert.matches("date: unknown directive '%Q'", render_error("{{ t | date(f) }}", { t = 0, f = "%Q" }), 1, true)
    end)

    it("passes a missing date on to default()", function()
        assert.are.equal("never", render("{{ t | date('%F') | default('never') }}", { t = json.null }))
    end)
end)

describe("crier.template escaping and hostile values", function()
    local hostile = {
        "{{ secret }}", "{% if true %}x{% endif %}", "{# c #}", "<script>alert('x')</script>", "\"'&", "{{",
        "%}", "]]..os.exit()..[[", "\0\n\r\\", "{{- secret -}}",
    }

    it("escapes values for HTML when asked, not the template text", function()
        assert.are.equal("<b>&lt;script&gt;&amp;&quot;&#39;</b>",
            render("<b>{{ v }}</b>", { v = "<script>&\"'" }, { html = true }))
        assert.are.equal("<script>", render("{{ v }}", { v = "<script>" }))
        assert.are.equal("plain", template.escape_html("plain"))
    end)

    it("escapes after filters, including json and money separators", function()
        assert.are.equal("{&quot;a&quot;:&quot;&lt;b&gt;&quot;}", render("{{ v | json }}", { v = { a = "<b>" } },
            { html = true }))
        assert.are.equal("1&lt;000.00 USD", render("{{ a | money('USD', '<') }}", { a = 100000 }, { html = true }))
        assert.are.equal("&lt;SCRIPT&gt;", render("{{ v | upper }}", { v = "<script>" }, { html = true }))
    end)

    it("escapes values for JSON string literals when asked", function()
        local out = render('{"memo": "{{ v }}"}', { v = 'say "hi"\n\\' }, { json = true })
        assert.are.equal('{"memo": "say \\"hi\\"\\n\\\\"}', out)
        assert.are.equal('say "hi"\n\\', json.decode(out).memo)
    end)

    it("inserts hostile values literally, never as template syntax", function()
        for _, v in ipairs(hostile) do
            local ctx = { v = v, secret = "s3cret", list = { v } }
            assert.are.equal(v, render("{{ v }}", ctx))
            assert.are.equal(v, render("{% for x in list %}{{ x }}{% endfor %}", ctx))
            assert.are.equal(v, render("{% if v == v %}{{ v }}{% endif %}", ctx))
            assert.are.equal(v, render("{{ missing | default(v) }}", ctx))
            assert.are.equal(template.escape_html(v), render("{{ v }}", ctx, { html = true }))
            assert.are.equal(v, json.decode(render('{"v": "{{ v }}"}', ctx, { json = true })).v)
        end
    end)

    it("uses hostile argument values literally", function()
        assert.are.equal("1970 {{ secret }}", render("{{ t | date(f) }}", { t = 0, f = "%Y {{ secret }}",
            secret = "s3cret" }))
        assert.are.equal("ab{% if %}c", render("{{ l | join(s) }}", { l = { "ab", "c" }, s = "{% if %}" }))
    end)

    it("compares hostile strings as data", function()
        assert.are.equal("no", render("{% if v == 'x' %}yes{% else %}no{% endif %}", { v = "x' or 'a' == 'a" }))
    end)

    it("writes literal delimiters with string literals", function()
        assert.are.equal("{{ x }} {% y %} {# z #}", render("{{ '{{' }} x }} {{ '{%' }} y %} {{ '{#' }} z #}", {}))
        assert.are.equal("}} %}", render("{{ '}}' }} {{ \"%}\" }}", {}))
    end)
end)

describe("crier.template errors", function()
    it("reports syntax errors with the template name, line and column", function()
        local cases = {
            { "a\n\n{{ x | monye }}",
                "t:3: unknown filter 'monye' (column 8); known: date, default, join, json, length, lower, money, "
                    .. "plural, trim, truncate, upper" },
            { "a\n{{ x ", "t:2: unterminated '{{' (column 1); missing '}}'" },
            { "{% if x", "t:1: unterminated '{%' (column 1); missing '%}'" },
            { "x {# note", "t:1: unterminated '{#' (column 3); missing '#}'" },
            { "{{ 'x }}", "t:1: unterminated string (column 4); missing '" },
            { "{{ }}", "t:1: empty {{ }} (column 1)" },
            { "{%- -%}", "t:1: empty {% %} (column 1)" },
            { "{{ 1x }}", "t:1: bad path '1x' (column 4)" },
            { "{{ a..b }}", "t:1: bad path 'a..b' (column 4)" },
            { "{{ a. }}", "t:1: bad path 'a.' (column 4)" },
            { "{{ a b }}", "t:1: unexpected 'b' in 'a b' (column 6); expected '|' or '}}'" },
            { "{{ a | }}", "t:1: expected a filter name after '|' in 'a |', got end of tag (column 8)" },
            { "{{ a | default(b c) }}",
                "t:1: expected ',' or ')' after an argument of 'default', got 'c' (column 18)" },
            { "{{ a | default() }}", "t:1: filter 'default' takes 1 argument, got 0 (column 8)" },
            { "{{ a | upper(1) }}", "t:1: filter 'upper' takes 0 arguments, got 1 (column 8)" },
            { "{{ a | truncate(-1) }}",
                "t:1: truncate: the length must be a whole number >= 0, got the number -1 (column 8)" },
            { "{{ a = b }}", "t:1: unexpected character '=' (column 6); compare with == or !=" },
            { "{% iff x %}", "t:1: unknown tag 'iff' (column 4); known: if, elif, else, endif, for, endfor" },
            { "{% if %}{% endif %}", "t:1: missing condition in '{% if %}' (column 7)" },
            { "{% if a b %}{% endif %}", "t:1: unexpected 'b' in 'if a b' (column 9); expected 'and', 'or' or '%}'" },
            { "{% if (a %}{% endif %}", "t:1: expected ')' in 'if (a', got end of tag (column 10)" },
            { "{% if a %}\n{% else x %}{% endif %}", "t:2: unexpected 'x' in 'else x' (column 9); expected '%}'" },
            { "\n{% if a %}\nA\n", "t:2: unclosed {% if %} (column 1); no {% endif %} before the end of the template" },
            { "{% for x in xs %}",
                "t:1: unclosed {% for %} (column 1); no {% endfor %} before the end of the template" },
            { "a\n  {% endfor %}", "t:2: {% endfor %} without {% for %} (column 3)" },
            { "{% endif %}", "t:1: {% endif %} without {% if %} (column 1)" },
            { "{% elif x %}", "t:1: {% elif %} without {% if %} (column 1)" },
            { "{% else %}", "t:1: {% else %} without {% if %} or {% for %} (column 1)" },
            { "{% for x in xs %}\n{% if x %}\n{% endfor %}",
                "t:3: {% endfor %} inside {% if %} opened at line 2 (column 1); close it with {% endif %} first" },
            { "{% if x %}{% else %}{% elif y %}{% endif %}", "t:1: {% elif %} after {% else %} (column 21)" },
            { "{% if x %}{% else %}{% else %}{% endif %}", "t:1: second {% else %} in {% if %} (column 21)" },
            { "{% for in xs %}{% endfor %}",
                "t:1: expected a loop variable name after 'for', got 'in' (column 8); write {% for item in list %}" },
            { "{% for loop in xs %}{% endfor %}",
                "t:1: expected a loop variable name after 'for', got 'loop' (column 8); write {% for item in list %}" },
            { "{% for x of xs %}{% endfor %}", "t:1: expected 'in' after 'for x', got 'of' (column 10)" },
            { "{% for x in xs %}{{ loop.idx }}{% endfor %}",
                "t:1: 'loop.idx' is not a loop field (column 21); loop has index, first, last and length" },
        }
        for _, case in ipairs(cases) do
            assert.are.equal(case[2], compile_error(case[1]), case[1])
        end
    end)

    it("counts lines and columns inside multi-line tags", function()
        assert.are.equal("t:3: unknown filter 'nope' (column 5); known: date, default, join, json, length, lower, "
            .. "money, plural, trim, truncate, upper", compile_error("{{\n a\n  | nope }}"))
    end)

    it("keeps error messages on one line", function()
        local err = compile_error("{{ a | nope(\n'x') }}\n")
        assert.matches("^t:1: unknown filter 'nope'", err)
        err = render_error("{% if a\n  <\n  b %}{% endif %}", { a = "x", b = 1 })
        assert.are.equal("t:2: 'a < b': cannot compare a string with a number (column 3)", err)
    end)

    it("limits nesting", function()
        assert.matches("blocks nested too deeply", compile_error(("{% if x %}"):rep(40) .. ("{% endif %}"):rep(40)),
            1, true)
        assert.matches("condition nested too deeply", compile_error("{% if " .. ("not "):rep(40) .. "x %}{% endif %}"),
            1, true)
        assert.matches("condition nested too deeply", compile_error("{% if " .. ("("):rep(40) .. "x" .. (")"):rep(40)
            .. " %}{% endif %}"), 1, true)
        assert.matches("and/or terms", compile_error("{% if x" .. (" or x"):rep(70) .. " %}{% endif %}"), 1, true)
        assert.is_function(template.compile(("{% if x %}"):rep(30) .. ("{% endif %}"):rep(30)))
    end)

    it("raises on misuse", function()
        assert.has_error(function() template.compile(nil) end,
            "template.compile: source must be a string, got nil")
        assert.has_error(function() template.compile("", "html") end,
            "template.compile: opts must be a table, got string")
    end)

    it("render() compiles and renders in one call", function()
        assert.are.equal("hi bob", template.render("hi {{ name }}", { name = "bob" }))
        local out, err = template.render("{{", {})
        assert.is_nil(out)
        assert.matches("^template:1:", err)
    end)
end)
