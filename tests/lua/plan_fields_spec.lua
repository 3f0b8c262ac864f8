-- Specs keeping the plan table's two sides in step: runtime.PLAN_FIELDS (the
-- declared shape of what gen:plan returns) against the fields src/rules/rules.c
-- reads (parsed from its source text: its PLAN_… constants and every
-- lua_getfield / plan_getfield / copy_field of the plan), and against plans the planner really
-- produces for every channel, a paged audience and a rule in mode "read".
local json = require "crier.json"
local runtime = require "crier.runtime"

local find, format, gmatch, gsub, match, sub, upper = string.find, string.format, string.gmatch, string.gsub,
    string.match, string.sub, string.upper

local PLAN_FIELDS = runtime.PLAN_FIELDS

-- The C constant that names field at level: PLAN_<LEVEL>_<FIELD>, the plan's own PLAN_<FIELD>.
local function constant_for(level, field)
    if level == "plan" then
        return "PLAN_" .. upper(field)
    end
    return "PLAN_" .. upper(level) .. "_" .. upper(field)
end

-- { constant = { level =, field =, kind = } } for every declared field.
local function declared_constants()
    local out = {}
    for level, fields in pairs(PLAN_FIELDS) do
        for field, kind in pairs(fields) do
            out[constant_for(level, field)] = { level = level, field = field, kind = kind }
        end
    end
    return out
end

-- { key = true } for every key of t.
local function key_set(t)
    local set = {}
    for k in pairs(t) do
        set[k] = true
    end
    return set
end

local function read_rules_c()
    local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
    local f = assert(io.open(here .. "/../../src/rules/rules.c", "rb"))
    local text = f:read("*a")
    f:close()
    return (gsub(text, "/%*.-%*/", "")) -- comments out
end

-- The body of the C function whose definition starts with signature.
local function c_function(text, signature)
    local start = find(text, signature, 1, true)
    assert(start, "rules.c has no " .. signature)
    local stop = find(text, "\n}\n", start, true)
    return sub(text, start, stop)
end

describe("runtime.PLAN_FIELDS", function()
    local c = read_rules_c()
    local declared = declared_constants()
    -- the C functions that read a plan table
    local readers = c_function(c, "static int append_plan(") .. c_function(c, "crier_plan_status crier_rules_plan(")

    it("declares each field with a kind C can read", function()
        for constant, d in pairs(declared) do
            assert.is_truthy(match(d.kind, "^string%??$") or match(d.kind, "^boolean%??$")
                or match(d.kind, "^list%??$"), constant .. ": kind " .. d.kind)
        end
    end)

    it("is what rules.c defines as PLAN_ constants", function()
        local defined = {}
        for name, value in gmatch(c, "#define%s+(PLAN_[%w_]+)%s+\"([^\"]*)\"") do
            defined[name] = value
        end
        local expected = {}
        for name, d in pairs(declared) do
            expected[name] = d.field
        end
        assert.are.same(expected, defined)
    end)

    it("is exactly what rules.c reads from a plan, only through the constants", function()
        local read = {}
        local function note(call, key)
            key = gsub(key, "^%s+", "")
            key = gsub(key, "%s+$", "")
            assert.is_truthy(match(key, "^PLAN_[%w_]+$"),
                format("rules.c reads the plan with %s(…, %s): use a PLAN_ constant", call, key))
            read[key] = true
        end
        for key in gmatch(readers, "lua_getfield%(L,[^,]+,([^%)]+)%)") do
            note("lua_getfield", key)
        end
        for key in gmatch(readers, "plan_getfield%(L,[^,]+,([^,]+),[^%)]+%)") do
            note("plan_getfield", key)
        end
        for key, optional in gmatch(readers, "copy_field%(L,[^,]+,([^,]+),%s*(%d)") do
            note("copy_field", key)
            local name = gsub(key, "%s", "")
            local kind = declared[name] and declared[name].kind or "?"
            assert.are.equal(sub(kind, -1) == "?", optional == "1",
                format("%s: copy_field's optional flag is %s, PLAN_FIELDS says %s", name, optional, kind))
        end
        assert.are.same(key_set(declared), read)
    end)
end)

describe("the planner's output", function()
    local source = [[
local crier = require "crier"
crier.event_type "note" { payload = { to = "string" } }
crier.event_type "urgent" { payload = {}, required = true }
crier.event_type "wide" { payload = {} }
crier.event_type "board" { payload = {} }
local page = crier.query("page", "SELECT id FROM m WHERE id > $1 ORDER BY id LIMIT $2")
crier.rule "note" {
    recipients = function(event) return { { id = "ann", email = event.payload.to }, "bo" } end,
    discriminator = function(_, recipient) return recipient.id == "ann" and "d1" or nil end,
    channels = function(_, recipient)
        return recipient.email and { "webhook", "email", "kafka", "feed" } or { "webhook" }
    end,
    webhook = { url = "https://hooks.test/x", secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                body = function() return { ok = true } end, retry = { 0, "5s" } },
    email = { from = "n@example.test", subject = "S", text = "T", html = "<p>H</p>" },
    kafka = { topic = "notes", body = function() return { ok = true } end },
    feed = { title = "t" },
}
crier.rule "urgent" { recipients = { "ann" }, channels = { "webhook" },
    webhook = { url = "https://hooks.test/u", throttle = { limit = 3, per = "1h" } } }
crier.rule "wide" {
    recipients = crier.pages { query = page, page_size = 1 },
    channels = { "webhook" }, webhook = { url = "https://hooks.test/w" },
}
crier.rule "board" { mode = "read", audience = "team:core", backfill = true, feed = { title = "b" } }
]]

    local function event(type_name, payload)
        return { id = 1, tenant = "acme", type = type_name, entity_id = "e1", payload_json = json.encode(payload) }
    end

    local function kind_of(v)
        if type(v) == "table" then
            return "list"
        end
        return type(v)
    end

    -- Checks t's declared fields at level; records those present in seen[level].
    local function check(level, t, seen)
        for field, kind in pairs(PLAN_FIELDS[level]) do
            local v = t[field]
            if v == nil then
                assert.are.equal("?", sub(kind, -1), format("%s.%s is nil but declared %s", level, field, kind))
            else
                assert.are.equal(gsub(kind, "%?$", ""), kind_of(v), format("%s.%s", level, field))
                seen[level][field] = true
            end
        end
    end

    it("has every declared field, of its declared kind, and no required one missing", function()
        local gen = assert(runtime.new_generation({ { path = "/rules/plan.lua", source = source } }))
        gen:set_query_backend(runtime.fake_query_backend({ page = { { id = "a" }, { id = "b" } } }))
        local seen = {}
        for level in pairs(PLAN_FIELDS) do
            seen[level] = {}
        end
        for _, ev in ipairs({ event("note", { to = "ann@example.test" }), event("urgent", {}), event("wide", {}),
            event("board", {}) }) do
            local plan = assert(gen:plan(ev))
            check("plan", plan, seen)
            for _, entry in ipairs(plan) do
                check("entry", entry, seen)
                for _, delivery in ipairs(entry.deliveries) do
                    check("delivery", delivery, seen)
                end
            end
            for _, item in ipairs(plan.audience_items or {}) do
                check("audience_item", item, seen)
            end
        end
        for level, fields in pairs(PLAN_FIELDS) do
            assert.are.same(key_set(fields), seen[level], level .. ": fields never produced")
        end
    end)
end)
