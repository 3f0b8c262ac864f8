-- Specs for crier.json: deterministic encoding, array/object rules, strict
-- decoding with positioned errors, and round trips.
local json = require "crier.json"

describe("crier.json.encode", function()
    it("sorts object keys so output is deterministic", function()
        assert.are.equal('{"a":1,"b":2,"c":{"x":true,"y":false}}',
            json.encode({ c = { y = false, x = true }, b = 2, a = 1 }))
    end)

    it("encodes 1..n tables as arrays and empty tables as objects", function()
        assert.are.equal("[1,2,3]", json.encode({ 1, 2, 3 }))
        assert.are.equal("{}", json.encode({}))
        assert.are.equal('{"1":"a","3":"c"}', json.encode({ [1] = "a", [3] = "c" }))
        assert.are.equal('{"1":1,"x":2}', json.encode({ 1, x = 2 }))
    end)

    it("encodes marked arrays and the empty_array sentinel as []", function()
        assert.are.equal("[]", json.encode(json.empty_array))
        assert.are.equal("[]", json.encode(json.array()))
        assert.are.equal('{"list":[]}', json.encode({ list = json.empty_array }))
        assert.are.equal("[1,null,3]", json.encode(json.array({ [1] = 1, [3] = 3 })))
    end)

    it("formats numbers canonically", function()
        assert.are.equal("[12,-3,0.5,0.1,1e+300]", json.encode({ 12, -3, 0.5, 0.1, 1e300 }))
        assert.are.equal("1250", json.encode(1250.0))
        assert.are.equal("9007199254740991", json.encode(2 ^ 53 - 1))
    end)

    it("escapes strings", function()
        assert.are.equal([["a\"b\\c\n\t\u0001/é"]], json.encode('a"b\\c\n\t\1/é'))
    end)

    it("encodes null, booleans and nil", function()
        assert.are.equal("[null,true,false]", json.encode({ json.null, true, false }))
        assert.are.equal("null", json.encode(nil))
    end)

    it("returns nil and a path for values JSON cannot hold", function()
        local s, err = json.encode({ a = { b = function() end } })
        assert.is_nil(s)
        assert.matches("cannot encode a function at %$%.a%.b", err)
        s, err = json.encode({ x = 0 / 0 })
        assert.is_nil(s)
        assert.matches("at %$%.x", err)
        local t = {}
        t.self = t
        s, err = json.encode(t)
        assert.is_nil(s)
        assert.matches("contains itself", err)
        s, err = json.encode({ [true] = 1 })
        assert.is_nil(s)
        assert.matches("boolean key", err)
        s, err = json.encode(json.array({ 1, x = 2 }))
        assert.is_nil(s)
        assert.matches("non%-index key", err)
    end)

    it("allows the same table twice when it is not a cycle", function()
        local shared = { 1 }
        assert.are.equal('{"a":[1],"b":[1]}', json.encode({ a = shared, b = shared }))
    end)

    it("names the path of the value it cannot encode", function()
        local cases = {
            { { a = { 1, { b = print } } }, "cannot encode a function at %$%.a%[2%]%.b$" },
            { { 1, 2, 0 / 0 }, "cannot encode %-?nan at %$%[3%]$" },
            { { x = { y = json.array({ 1, k = 2 }) } }, "non%-index key at %$%.x%.y$" },
            { { [true] = 1 }, "cannot encode a boolean key at %$$" },
            { print, "cannot encode a function at %$$" },
        }
        local cyclic = { list = {} }
        cyclic.list[1] = cyclic
        cases[#cases + 1] = { cyclic, "table contains itself at %$%.list%[1%]$" }
        for _, case in ipairs(cases) do
            local s, err = json.encode(case[1])
            assert.is_nil(s)
            assert.matches(case[2], err)
        end
        -- a failure leaves nothing behind for the next encoding
        assert.are.equal('{"a":"q\\"","b":[1]}', json.encode({ a = 'q"', b = { 1 } }))
    end)

    it("escapes control bytes, quotes and backslashes in keys and values", function()
        assert.are.equal('{"a\\nb":"\\u0001\\\\x"}', json.encode({ ["a\nb"] = "\1\\x" }))
    end)

    it("keeps the sentinels read-only", function()
        assert.has_error(function() json.null.x = 1 end)
        assert.has_error(function() json.empty_array[1] = 1 end)
    end)
end)

describe("crier.json.decode", function()
    it("decodes objects, arrays and scalars", function()
        local v = json.decode(' {"a": [1, 2.5, -3e2, "x", true, false, null], "b": {}} ')
        assert.are.same({ 1, 2.5, -300, "x", true, false, json.null }, v.a)
        assert.are.same({}, v.b)
        assert.are.equal(json.array_mt, getmetatable(v.a))
        assert.is_nil(getmetatable(v.b))
        assert.are.equal(5, json.decode("5"))
        assert.are.equal("s", json.decode('"s"'))
    end)

    it("decodes escapes and surrogate pairs to UTF-8", function()
        assert.are.equal('q"\\/\b\f\n\r\t', json.decode([["q\"\\\/\b\f\n\r\t"]]))
        assert.are.equal("é€😀", json.decode([["\u00e9\u20ac\ud83d\ude00"]]))
    end)

    it("reports errors with the position, line and column", function()
        local v, err = json.decode('{"a": 1,\n "b" 2}')
        assert.is_nil(v)
        assert.are.equal("json.decode: expected ':' after object key at position 15 (line 2, column 6)", err)
    end)

    it("rejects what strict JSON rejects", function()
        local bad = {
            "", "{", "[1,]", "{\"a\":1,}", "01", "1.", ".5", "+1", "'x'", "nul", "[1 2]",
            "\"a\nb\"", "\"\\x\"", "\"\\ud800\"", "{1:2}", "1 2", "NaN", "[", "\"abc",
        }
        for _, text in ipairs(bad) do
            local v, err = json.decode(text)
            assert.is_nil(v, text)
            assert.matches("position %d+", err, 1, false, text)
        end
    end)

    it("limits nesting depth", function()
        local v, err = json.decode(string.rep("[", 1000) .. string.rep("]", 1000))
        assert.is_nil(v)
        assert.matches("nesting deeper than", err)
    end)

    it("raises on a non-string argument", function()
        assert.has_error(function() json.decode(nil) end, "json.decode: expected a string, got nil")
    end)

    it("round-trips decoded values, keeping empty arrays as arrays", function()
        local text = '{"a":[],"b":{},"c":[{"d":null}],"e":"x"}'
        assert.are.equal(text, json.encode(json.decode(text)))
    end)
end)

describe("crier.json helpers", function()
    it("is_array distinguishes arrays from objects", function()
        assert.is_true(json.is_array({ 1, 2 }))
        assert.is_true(json.is_array(json.array()))
        assert.is_true(json.is_array(json.empty_array))
        assert.is_false(json.is_array({}))
        assert.is_false(json.is_array({ [2] = 1, [3] = 1, [4] = 1 }))
        assert.is_false(json.is_array({ 1, x = 1 }))
        assert.is_false(json.is_array("x"))
    end)

    it("format_number refuses non-finite numbers", function()
        assert.is_nil(json.format_number(1 / 0))
        assert.are.equal("-7", json.format_number(-7))
    end)
end)
