-- crier.nginx: what an nginx (lua-nginx-module / OpenResty) server needs to run
-- crier rules: read a rules directory's files from disk into a generation,
-- with the same rules version the C core computes (src/rules/rules.c), so that an
-- edge server can say which rules it runs. Load from init_by_lua*: the
-- master reads the files once, the workers inherit the generation, and a
-- broken reload (`nginx -s reload`) is refused while the old configuration
-- keeps serving. Plain Lua (LuaJIT's bit library); does not touch ngx, so
-- it loads in plain LuaJIT too. Emitting events from a worker without
-- blocking it comes later and will live here as well.

local runtime = require "crier.runtime"

local type, ipairs, error, tostring = type, ipairs, error, tostring
local byte, char, find, rep, sub = string.byte, string.char, string.find, string.rep, string.sub
local concat, sort = table.concat, table.sort
local floor = math.floor
local open = io.open

local M = {}

---------------------------------------------------------------------------
-- SHA-256 (FIPS 180-4), for the rules version. Needs LuaJIT's bit library.

local K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

-- be64(n): n (a non-negative integer below 2^53) as 8 big-endian bytes.
local function be64(n)
    local b = {}
    for i = 8, 1, -1 do
        b[i] = char(n % 256)
        n = floor(n / 256)
    end
    return concat(b)
end

-- M.sha256_hex(s): the SHA-256 of the string s as 64 lowercase hex digits.
function M.sha256_hex(s)
    local bit = require "bit"
    local band, bxor, bnot, bor, lshift, rshift, ror, tobit, tohex =
        bit.band, bit.bxor, bit.bnot, bit.bor, bit.lshift, bit.rshift, bit.ror, bit.tobit, bit.tohex
    local k = {}
    for i = 1, 64 do
        k[i - 1] = tobit(K[i])
    end
    local h0, h1, h2, h3 = tobit(0x6a09e667), tobit(0xbb67ae85), tobit(0x3c6ef372), tobit(0xa54ff53a)
    local h4, h5, h6, h7 = tobit(0x510e527f), tobit(0x9b05688c), tobit(0x1f83d9ab), tobit(0x5be0cd19)
    local len = #s
    s = s .. "\128" .. rep("\0", (55 - len) % 64) .. be64(len * 8)
    local w = {}
    for chunk = 1, #s, 64 do
        for i = 0, 15 do
            local a, b, c, d = byte(s, chunk + i * 4, chunk + i * 4 + 3)
            w[i] = bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
        end
        for i = 16, 63 do
            local x, y = w[i - 15], w[i - 2]
            local s0 = bxor(ror(x, 7), ror(x, 18), rshift(x, 3))
            local s1 = bxor(ror(y, 17), ror(y, 19), rshift(y, 10))
            w[i] = tobit(w[i - 16] + s0 + w[i - 7] + s1)
        end
        local a, b, c, d, e, f, g, h = h0, h1, h2, h3, h4, h5, h6, h7
        for i = 0, 63 do
            local S1 = bxor(ror(e, 6), ror(e, 11), ror(e, 25))
            local ch = bxor(band(e, f), band(bnot(e), g))
            local t1 = h + S1 + ch + k[i] + w[i]
            local S0 = bxor(ror(a, 2), ror(a, 13), ror(a, 22))
            local maj = bxor(band(a, b), band(a, c), band(b, c))
            h, g, f, e = g, f, e, tobit(d + t1)
            d, c, b, a = c, b, a, tobit(t1 + S0 + maj)
        end
        h0, h1, h2, h3 = tobit(h0 + a), tobit(h1 + b), tobit(h2 + c), tobit(h3 + d)
        h4, h5, h6, h7 = tobit(h4 + e), tobit(h5 + f), tobit(h6 + g), tobit(h7 + h)
    end
    return tohex(h0) .. tohex(h1) .. tohex(h2) .. tohex(h3) .. tohex(h4) .. tohex(h5) .. tohex(h6) .. tohex(h7)
end

---------------------------------------------------------------------------
-- Rules from disk

-- M.is_rule_file(name): the C core's rule: "*.lua", not "*_spec.lua", not
-- starting with "." (editor and deploy temp files).
function M.is_rule_file(name)
    return type(name) == "string" and sub(name, 1, 1) ~= "." and #name > 4 and sub(name, -4) == ".lua"
        and not (#name >= 9 and sub(name, -9) == "_spec.lua") and not find(name, "/", 1, true)
end

-- M.version(files): the rules version of files ({ name =, source = }, in
-- load order): hex SHA-256 over, per file, the 8-byte big-endian length of
-- its name, the name, the 8-byte big-endian length of its source, the source
-- (as src/rules/rules.c computes it, so `crier check` prints the same prefix).
function M.version(files)
    local parts = {}
    for _, f in ipairs(files) do
        parts[#parts + 1] = be64(#f.name)
        parts[#parts + 1] = f.name
        parts[#parts + 1] = be64(#f.source)
        parts[#parts + 1] = f.source
    end
    return M.sha256_hex(concat(parts))
end

local function read_all(path)
    local f, err = open(path, "rb")
    if not f then
        return nil, err
    end
    local source, read_err = f:read("*a")
    f:close()
    if not source then
        return nil, path .. ": " .. tostring(read_err)
    end
    return source
end

-- M.read_rules(dir, names): reads the rule files names (file names inside
-- dir; plain Lua cannot list a directory, so the caller names them) in the
-- C core's order (sorted by name; names that are not rule files are
-- skipped). Returns an array of { name =, path =, source = }, or nil, err.
function M.read_rules(dir, names)
    if type(dir) ~= "string" or dir == "" then
        error("crier.nginx.read_rules: dir must be a directory path", 2)
    end
    if type(names) ~= "table" then
        error("crier.nginx.read_rules: names must be a list of file names", 2)
    end
    local sorted = {}
    for _, name in ipairs(names) do
        if M.is_rule_file(name) then
            sorted[#sorted + 1] = name
        end
    end
    sort(sorted)
    local files = {}
    for i, name in ipairs(sorted) do
        local path = sub(dir, -1) == "/" and dir .. name or dir .. "/" .. name
        local source, err = read_all(path)
        if not source then
            return nil, err
        end
        files[i] = { name = name, path = path, source = source }
    end
    return files
end

-- M.load_rules(dir, names, settings): reads the rule files and loads them
-- into a new generation (crier.runtime.new_generation). Returns
-- { generation =, version = "<64 hex>", files = { names } }, or nil and the
-- problems ("path:line: message" lines) or the read error.
function M.load_rules(dir, names, settings)
    local files, err = M.read_rules(dir, names)
    if not files then
        return nil, err
    end
    local generation, problems = runtime.new_generation(files, settings)
    if not generation then
        return nil, problems
    end
    local loaded = {}
    for i, f in ipairs(files) do
        loaded[i] = f.name
    end
    return { generation = generation, version = M.version(files), files = loaded }
end

return M
