-- Specs pinning crier.testing's notification keys to the shared vectors of
-- tests/vectors/notification_keys.tsv (the same rows test src/base/keys.c and
-- PostgreSQL): testing.key on every row, and the keys rules:plan gives each
-- planned notification, so a rule author's spec sees the ids the engine stores.
local testing = require "crier.testing"

local byte, char, find, format, sub = string.byte, string.char, string.find, string.format, string.sub

local COLUMNS = { "tenant", "event_type", "entity_id", "recipient_id", "discriminator", "key", "key_hash",
    "message_id", "lock_key" }
local MIN_ROWS = 44 -- fewer rows means the file was cut short

local simple_escapes = { ["\\"] = "\\", t = "\t", n = "\n", r = "\r" }

-- One field of COPY text format, in the subset the file allows (\N alone for
-- nil; \\ \t \n \r \xHH); raises on anything else.
local function decode(field, where)
    if field == "\\N" then
        return nil
    end
    local out, pos = {}, 1
    while true do
        local at = find(field, "\\", pos, true)
        if not at then
            out[#out + 1] = sub(field, pos)
            break
        end
        out[#out + 1] = sub(field, pos, at - 1)
        local c = sub(field, at + 1, at + 1)
        if c == "x" then
            local code = tonumber(sub(field, at + 2, at + 3), 16)
            assert(code and code > 0 and find(sub(field, at + 2, at + 3), "^%x%x$"), where .. ": bad \\x escape")
            out[#out + 1] = char(code)
            pos = at + 4
        else
            assert(simple_escapes[c], where .. ": unknown escape \\" .. c)
            out[#out + 1] = simple_escapes[c]
            pos = at + 2
        end
    end
    return table.concat(out)
end

local function split_tabs(line)
    local fields, pos = {}, 1
    while true do
        local tab = find(line, "\t", pos, true)
        fields[#fields + 1] = sub(line, pos, (tab or 0) - 1)
        if not tab then
            return fields
        end
        pos = tab + 1
    end
end

-- The rows of the vectors file as { tenant =, event_type =, ..., line = n }.
local function read_vectors()
    local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
    local path = here .. "/../vectors/notification_keys.tsv"
    local f = assert(io.open(path, "rb"))
    local rows, n, header = {}, 0, nil
    for line in f:lines() do
        n = n + 1
        if byte(line, 1) ~= byte("#") then
            local fields = split_tabs(line)
            if not header then
                header = fields
                assert.are.same(COLUMNS, header)
            else
                local where = format("notification_keys.tsv:%d", n)
                assert(#fields == #COLUMNS, where .. ": expected " .. #COLUMNS .. " fields")
                local row = { line = n }
                for i, name in ipairs(COLUMNS) do
                    row[name] = decode(fields[i], where)
                    assert(row[name] ~= nil or name == "discriminator", where .. ": " .. name .. " is \\N")
                end
                rows[#rows + 1] = row
            end
        end
    end
    f:close()
    assert(#rows >= MIN_ROWS, format("%s has %d rows, expected at least %d", path, #rows, MIN_ROWS))
    return rows
end

local vectors = read_vectors()

-- What a rule can produce: an event type crier accepts, and a discriminator
-- that is not "" (a rule's "" means none).
local function plannable(v)
    return find(v.event_type, "^[%w_.%-]+$") and #v.event_type <= 200 and v.discriminator ~= ""
end

describe("notification key vectors", function()
    it("testing.key gives every row's key, key hash and message id", function()
        for _, v in ipairs(vectors) do
            local got = testing.key(v.tenant, v.event_type, v.entity_id, v.recipient_id, v.discriminator)
            assert.are.same({ key = v.key, key_hash = v.key_hash, message_id = v.message_id }, got,
                format("notification_keys.tsv:%d", v.line))
        end
    end)

    it("rules:plan gives each planned notification and delivery the row's ids", function()
        local types, source = {}, { 'local crier = require "crier"' }
        for _, v in ipairs(vectors) do
            if plannable(v) and not types[v.event_type] then
                types[v.event_type] = true
                source[#source + 1] = format([[
crier.event_type %q { payload = { recipient = "string", discriminator = "string?" } }
crier.rule %q {
    recipients = function(event) return { event.payload.recipient } end,
    discriminator = function(event) return event.payload.discriminator end,
    channels = { "webhook" },
    webhook = { url = "https://hooks.test/keys", body = function() return {} end },
}]], v.event_type, v.event_type)
            end
        end
        local rules = testing.load_source(table.concat(source, "\n"))
        local planned = 0
        for _, v in ipairs(vectors) do
            if plannable(v) then
                local where = format("notification_keys.tsv:%d", v.line)
                local result = rules:plan { tenant = v.tenant, type = v.event_type, entity_id = v.entity_id,
                    payload = { recipient = v.recipient_id, discriminator = v.discriminator } }
                assert.are.equal(1, #result.entries, where)
                local entry = result.entries[1]
                assert.are.same({ v.key, v.key_hash, v.message_id },
                    { entry.key, entry.key_hash, entry.message_id }, where)
                assert.are.equal(v.message_id, result:delivery(v.recipient_id, "webhook").message_id, where)
                planned = planned + 1
            end
        end
        assert.is_true(planned >= MIN_ROWS / 2, "most rows are plannable: " .. planned)
    end)
end)
