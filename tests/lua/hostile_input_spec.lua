-- Hostile input against what rules can run (issue 10, item 2): the built-in
-- template filters and crier's helpers stay linear on payloads such as 60,000
-- spaces, and the pattern functions the sandbox gives rules either finish fast
-- or refuse a backtracking pattern with "pattern too complex for a rule", since
-- the instruction hook cannot interrupt one long C call.
local template = require "crier.template"
local runtime = require "crier.runtime"
local json = require "crier.json"
local crier = require "crier"

-- Seconds of CPU that fn takes (and its results).
local function timed(fn, ...)
    local start = os.clock()
    local results = { fn(...) }
    return os.clock() - start, unpack(results)
end

-- The budget for one call on hostile input: well under the rules' 1 s limit.
local FAST = 0.25

local spaces = string.rep(" ", 60000)

describe("built-in filters on hostile input", function()
    local function render(source, ctx)
        return assert(template.compile(source))(ctx)
    end

    it("trim is linear on long runs of whitespace", function()
        local value = "a" .. spaces .. "b" .. spaces
        local took, out = timed(render, "[{{ v | trim }}]", { v = spaces .. value })
        assert.are.equal("[a" .. spaces .. "b]", out)
        assert.is_true(took < FAST, "trim took " .. took .. "s")
        took, out = timed(render, "[{{ v | trim }}]", { v = spaces .. "\t\r\n" })
        assert.are.equal("[]", out)
        assert.is_true(took < FAST, "trim of blanks took " .. took .. "s")
        assert.are.equal("[x y]", render("[{{ v | trim }}]", { v = " \t\v\f\r\nx y\n\t " }))
    end)

    it("truncate is linear on long runs of whitespace", function()
        local value = "a" .. spaces .. "bcdef" .. spaces
        local took, out = timed(render, "[{{ v | truncate(60006) }}]", { v = value })
        assert.are.equal("[a" .. spaces .. "bc...]", out)
        assert.is_true(took < FAST, "truncate took " .. took .. "s")
        took, out = timed(render, "[{{ v | truncate(60004) }}]", { v = value })
        assert.are.equal("[a...]", out)
        assert.is_true(took < FAST, "truncate took " .. took .. "s")
        assert.are.equal("[ab...]", render("[{{ v | truncate(8) }}]", { v = "ab    cdefgh" }))
    end)

    it("the other filters are linear too", function()
        local big = string.rep("a ", 60000)
        local digits = string.rep("9", 60000)
        for _, case in ipairs({
            { "{{ v | upper | lower | length }}", { v = big } },
            { "{{ v | money('EUR', ',') }}", { v = digits } },
            { "{{ v | money('EUR') }}", { v = digits .. "x" } },
            { "{{ v | date(f) | length }}", { v = "2026-01-01T00:00:00Z", f = string.rep("%A ", 20000) } },
            { "{{ v | date }}", { v = "2026-01-01T00:00:00" .. string.rep("5", 60000) } },
            { "{{ v | join(' ') | length }}", { v = { big, big } } },
            { "{{ v | json | length }}", { v = { big } } },
        }) do
            local took = timed(function()
                return assert(template.compile(case[1]))(case[2])
            end)
            assert.is_true(took < FAST, case[1] .. " took " .. took .. "s")
        end
    end)

    it("compiling a template with long whitespace runs is linear", function()
        local run = string.rep(" ", 20000)
        local source = "a" .. run .. "b" .. run .. "{{- ' x ' -}}" .. run .. "c{{ v |" .. run .. "upper }}"
        local took, fn = timed(template.compile, source)
        assert.is_true(took < FAST, "compile took " .. took .. "s")
        assert.are.equal("a" .. run .. "b x c1", fn({ v = 1 }))
        local pieces = {}
        for i = 1, 20000 do
            pieces[i] = "abcdefghij{# #}"
        end
        took, fn = timed(template.compile, table.concat(pieces))
        assert.is_true(took < FAST, "compile of 20000 comments took " .. took .. "s")
        assert.are.equal(200000, #fn({}))
        took = timed(template.compile, "{{ x | bad(" .. spaces .. ") }}")
        assert.is_true(took < FAST, "a compile error took " .. took .. "s")
    end)

    it("crier.parse_retry and json are linear", function()
        local took = timed(crier.parse_retry, { string.rep("1", 20000) .. "x" })
        assert.is_true(took < FAST, "parse_retry took " .. took .. "s")
        took = timed(json.decode, "[" .. spaces .. "1" .. spaces .. "]")
        assert.is_true(took < FAST, "json.decode took " .. took .. "s")
    end)
end)

-- A generation whose rule runs `body` (Lua statements) for each event, with
-- the payload's field s as the local `s`; returns plan's results.
local function run_rule(body, s)
    local gen = assert(runtime.new_generation({ { path = "/rules/p.lua", source = [[
local crier = require "crier"
crier.event_type "thing" { payload = { s = "string" } }
crier.rule "thing" {
  recipients = function(event)
    local s = event.payload.s
]] .. body .. [[

    return { "alice" }
  end,
  channels = { "webhook" }, webhook = { url = "http://hooks.test/x" },
}
]] } }, {}))
    return gen:plan({ id = 1, tenant = "acme", type = "thing", entity_id = "e1",
        payload_json = json.encode({ s = s }) })
end

describe("pattern functions in rules", function()
    local hostile = string.rep("a", 30000)

    local blanks = "a" .. string.rep(" ", 30000) .. "a"
    local opens = string.rep("(", 30000)
    for _, case in ipairs({
        { "string.find(s, '.-.-.-.-x')", hostile },
        { "s:find('.-.-.-.-x')", hostile },
        { "string.match(s, '(a-)(a-)(a-)b')", hostile },
        { "s:match('^(.-)%s*$')", blanks },
        { "string.gsub(s, 'a*b', '')", hostile },
        { "for w in s:gmatch('%w+@') do end", hostile },
        { "string.find(s, string.rep('a?', 40) .. string.rep('a', 40) .. 'b')", hostile },
        { "string.find(s, '(a*)%1b')", hostile },
        { "string.gsub(s, '%b()', '')", opens },
    }) do
        local call, subject = case[1], case[2]
        it("refuses or finishes fast: " .. call, function()
            local took, plan, err = timed(run_rule, "    " .. call, subject)
            assert.is_true(took < FAST, call .. " took " .. took .. "s")
            assert.is_nil(plan)
            assert.matches("pattern too complex for a rule: ", err, 1, true)
            assert.matches("p.lua:6:", err, 1, true)
        end)
    end

    it("runs the same patterns on ordinary input", function()
        local plan, err = run_rule([[
    assert(select(3, s:find("(%w+)@(%w+)")) == "ana")
    assert(string.match(s, "^%s*(.-)%s*$") == "ana@example.test wrote")
    assert(string.gsub(s, "%s+", "_") == "_ana@example.test_wrote_")
    local n = 0
    for w in s:gmatch("%a+") do n = n + 1 end
    assert(n == 4, n)
    assert(("x"):rep(3, ",") == "x,x,x" and s:find("e.t", 1, true) == 13)]], "  ana@example.test wrote  ")
        assert.is_nil(err)
        assert.are.equal("alice", plan[1].recipient)
    end)

    it("keeps linear patterns usable on long input", function()
        local plan, err = run_rule([[
    local words, blanks = 0, 0
    for _ in s:gmatch("%a+") do words = words + 1 end
    for _ in string.gmatch(s, "%s+") do blanks = blanks + 1 end
    assert(words == 20000 and blanks == 20000, words .. " " .. blanks)
    assert(#s:gsub("%s+", "") == 40000)
    assert(s:find("^ab") == 1 and s:find("zz", 1, true) == nil and s:match("(%a+) *$") == "ab")]],
            string.rep("ab  ", 20000))
        assert.is_nil(err)
        assert.are.equal("alice", plan[1].recipient)
    end)

    it("refuses a gsub or rep whose result would be huge", function()
        local _, err = run_rule("    s:gsub('', s)", hostile)
        assert.matches("pattern too complex for a rule: ", err, 1, true)
        _, err = run_rule("    local x = string.rep(s, 1e6)", hostile)
        assert.matches("string.rep: not enough memory for a result of 30000000000 bytes (the rules' memory limit "
            .. "is 256 MB)", err, 1, true)
    end)

    it("reports malformed patterns as Lua does", function()
        local _, err = run_rule("    s:find('%')", "x")
        assert.matches("malformed pattern (ends with '%')", err, 1, true)
        _, err = run_rule("    s:find('[a')", "x")
        assert.matches("malformed pattern (missing ']')", err, 1, true)
    end)

    it("leaves the engine's own string functions untouched", function()
        run_rule("    s:find('x')", "x")
        assert.is_function(string.dump)
        assert.is_function(("").dump)
        assert.are.equal(string.find, ("").find)
    end)
end)
