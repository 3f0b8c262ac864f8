-- Specs of lua/crier/cron.lua, the cron grammar rules are checked with when
-- they load: every row of tests/vectors/cron.tsv (the same rows test SQL's
-- crier.cron_parse and crier.cron_next in tests/integration/cron_vectors.sh):
-- the sets an expression means or the message it is refused with, and the
-- next occurrence of the UTC rows; and time zone names.
local cron = require "crier.cron"

local function read_vectors()
    local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
    local f = assert(io.open(here .. "/../vectors/cron.tsv", "rb"))
    local rows, n, header = {}, 0, false
    for line in f:lines() do
        n = n + 1
        if line:sub(1, 1) ~= "#" then
            local fields = {}
            for field in (line .. "\t"):gmatch("([^\t]*)\t") do
                fields[#fields + 1] = field
            end
            if not header then
                header = true
                assert.are.same({ "expr", "sets", "zone", "after", "next" }, fields)
            else
                assert(#fields == 5, "cron.tsv:" .. n .. ": expected 5 fields")
                rows[#rows + 1] = { line = n, expr = fields[1], sets = fields[2], zone = fields[3],
                    after = fields[4], next = fields[5] }
            end
        end
    end
    f:close()
    return rows
end

describe("crier.cron", function()
    local rows = read_vectors()

    it("reads enough vector rows", function()
        assert.is_true(#rows >= 40, "only " .. #rows .. " rows")
    end)

    it("parses every vector row to its sets, or refuses it with its message", function()
        for _, row in ipairs(rows) do
            local where = "cron.tsv:" .. row.line .. " (" .. row.expr .. ")"
            local spec, err = cron.parse(row.expr)
            local want_err = row.sets:match("^error: (.*)$")
            if want_err then
                assert(spec == nil, where .. ": accepted")
                assert(err:find(want_err:gsub("'", '"'), 1, true), where .. ": message " .. tostring(err))
            else
                assert(spec, where .. ": " .. tostring(err))
                assert.are.equal(row.sets, cron.describe(spec), where)
            end
        end
    end)

    it("finds the next occurrence of every row, in its zone", function()
        local checked = 0
        for _, row in ipairs(rows) do
            if row.zone ~= "-" then
                local spec = assert(cron.parse(row.expr))
                local after = assert(cron.parse_utc(row.after), row.after)
                local nxt = cron.next_in_zone(spec, row.zone, after)
                assert.are.equal(row.next, nxt and cron.format_utc(nxt) or "-",
                    "cron.tsv:" .. row.line .. " (" .. row.expr .. ")")
                checked = checked + 1
            end
        end
        assert.is_true(checked >= 10)
    end)

    it("never gives an occurrence at or before the time it starts from", function()
        local spec = assert(cron.parse("*/7 * * * * *"))
        local t = assert(cron.parse_utc("2026-12-31T23:59:58Z"))
        for _ = 1, 50 do
            local n = cron.next_utc(spec, t)
            assert.is_true(n > t)
            assert.are.equal(0, (n % 60) % 7)
            t = n
        end
    end)

    it("refuses what is not a string", function()
        local spec, err = cron.parse(42)
        assert.is_nil(spec)
        assert.matches("must be a string", err)
    end)

    it("checks time zone names against the tz database", function()
        assert.is_true(cron.valid_zone("UTC"))
        assert.is_true(cron.valid_zone("Europe/Berlin"))
        assert.is_true(cron.valid_zone("America/New_York"))
        for _, bad in ipairs({ "", "../etc/passwd", "/etc/passwd", "Europe/", 42 }) do
            local ok, err = cron.valid_zone(bad)
            assert.is_nil(ok, tostring(bad))
            assert.matches("not a zone name", err)
        end
        local f = io.open("/usr/share/zoneinfo/UTC", "rb")
        if f then
            f:close()
            local ok, err = cron.valid_zone("Mars/Olympus_Mons")
            assert.is_nil(ok)
            assert.matches('unknown time zone "Mars/Olympus_Mons"', err)
        end
    end)
end)
