-- crier.crypto: the hashes and MACs crier's Lua needs (SHA-256, MD5,
-- HMAC-SHA-256, PBKDF2-HMAC-SHA-256, random bytes, constant-time compare),
-- through the LuaJIT FFI to OpenSSL's libcrypto: inside nginx the one nginx
-- already links (its symbols are in the process), elsewhere (busted, plain
-- LuaJIT) libcrypto loaded by name. No hash is written by hand here.
-- Strings in, binary strings out; hex and base64 helpers beside them.
-- Misuse raises error(msg, 2); a libcrypto failure returns nil, err.

local ffi = require "ffi"

local type, error, pcall, tostring = type, error, pcall, tostring
local byte, char, format, gsub, sub = string.byte, string.char, string.format, string.gsub, string.sub
local concat = table.concat
local ffi_new, ffi_string, ffi_cast = ffi.new, ffi.string, ffi.cast

local M = {}

pcall(ffi.cdef, [[
typedef struct evp_md_st EVP_MD;
typedef struct engine_st ENGINE;
const EVP_MD *EVP_sha256(void);
const EVP_MD *EVP_md5(void);
int EVP_Digest(const void *data, size_t count, unsigned char *md, unsigned int *size,
               const EVP_MD *type, ENGINE *impl);
unsigned char *HMAC(const EVP_MD *evp_md, const void *key, int key_len, const unsigned char *d,
                    size_t n, unsigned char *md, unsigned int *md_len);
int PKCS5_PBKDF2_HMAC(const char *pass, int passlen, const unsigned char *salt, int saltlen,
                      int iter, const EVP_MD *digest, int keylen, unsigned char *out);
int RAND_bytes(unsigned char *buf, int num);
int CRYPTO_memcmp(const void *a, const void *b, size_t len);
]])

-- The library: the process's own symbols when libcrypto is linked (nginx),
-- else libcrypto by its soname.
local lib
do
    local function has(l)
        return pcall(function()
            return l.EVP_sha256
        end)
    end
    if has(ffi.C) then
        lib = ffi.C
    else
        for _, name in ipairs({ "libcrypto.so.3", "crypto", "libcrypto.so.1.1" }) do
            local ok, l = pcall(ffi.load, name)
            if ok and has(l) then
                lib = l
                break
            end
        end
    end
end

-- M.available(): whether libcrypto was found.
function M.available()
    return lib ~= nil
end

local function need()
    if not lib then
        error("crier.crypto: OpenSSL's libcrypto is not available (install libssl3)", 3)
    end
end

local md_buf = ffi_new("unsigned char[64]")
local md_len = ffi_new("unsigned int[1]")

local function digest(md, s)
    md_len[0] = 64
    if lib.EVP_Digest(s, #s, md_buf, md_len, md, nil) ~= 1 then
        return nil, "EVP_Digest failed"
    end
    return ffi_string(md_buf, md_len[0])
end

-- M.sha256(s): the 32-byte SHA-256 of s.
function M.sha256(s)
    need()
    if type(s) ~= "string" then
        error("crier.crypto.sha256: expected a string, got " .. type(s), 2)
    end
    return digest(lib.EVP_sha256(), s)
end

-- M.md5(s): the 16-byte MD5 of s (PostgreSQL's md5 authentication only).
function M.md5(s)
    need()
    if type(s) ~= "string" then
        error("crier.crypto.md5: expected a string, got " .. type(s), 2)
    end
    return digest(lib.EVP_md5(), s)
end

-- M.hmac_sha256(key, msg): the 32-byte HMAC-SHA-256 of msg under key.
function M.hmac_sha256(key, msg)
    need()
    if type(key) ~= "string" or type(msg) ~= "string" then
        error("crier.crypto.hmac_sha256: key and msg must be strings", 2)
    end
    md_len[0] = 64
    if lib.HMAC(lib.EVP_sha256(), key, #key, ffi_cast("const unsigned char *", msg), #msg, md_buf,
            md_len) == nil then
        return nil, "HMAC failed"
    end
    return ffi_string(md_buf, md_len[0])
end

-- M.pbkdf2_sha256(password, salt, iterations, len): PBKDF2-HMAC-SHA-256.
function M.pbkdf2_sha256(password, salt, iterations, len)
    need()
    if type(password) ~= "string" or type(salt) ~= "string" or type(iterations) ~= "number"
        or iterations < 1 then
        error("crier.crypto.pbkdf2_sha256: password, salt (strings), iterations (>= 1)", 2)
    end
    len = len or 32
    local out = ffi_new("unsigned char[?]", len)
    if lib.PKCS5_PBKDF2_HMAC(password, #password, ffi_cast("const unsigned char *", salt), #salt,
            iterations, lib.EVP_sha256(), len, out) ~= 1 then
        return nil, "PKCS5_PBKDF2_HMAC failed"
    end
    return ffi_string(out, len)
end

-- M.random(n): n bytes from OpenSSL's CSPRNG, or nil, err.
function M.random(n)
    need()
    local buf = ffi_new("unsigned char[?]", n)
    if lib.RAND_bytes(buf, n) ~= 1 then
        return nil, "RAND_bytes failed"
    end
    return ffi_string(buf, n)
end

-- M.equal(a, b): constant-time comparison of two strings of the same length
-- (false when the lengths differ).
function M.equal(a, b)
    need()
    if type(a) ~= "string" or type(b) ~= "string" then
        error("crier.crypto.equal: expected two strings", 2)
    end
    return #a == #b and lib.CRYPTO_memcmp(a, b, #a) == 0
end

-- M.xor(a, b): bytewise XOR of two strings of the same length.
function M.xor(a, b)
    if #a ~= #b then
        error("crier.crypto.xor: lengths differ", 2)
    end
    local bit = require "bit"
    local out = {}
    for i = 1, #a do
        out[i] = char(bit.bxor(byte(a, i), byte(b, i)))
    end
    return concat(out)
end

-- M.hex(s): s as lowercase hex.
function M.hex(s)
    return (gsub(s, ".", function(c)
        return format("%02x", byte(c))
    end))
end

-- M.unhex(h): the bytes of hex text h, or nil, err.
function M.unhex(h)
    if type(h) ~= "string" or #h % 2 == 1 or h:find("[^0-9a-fA-F]") then
        return nil, "not hex"
    end
    return (gsub(h, "..", function(x)
        return char(tonumber(x, 16))
    end))
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

local function b64_encode(s, alphabet, pad)
    local out = {}
    local bit = require "bit"
    for i = 1, #s, 3 do
        local a, b, c = byte(s, i, i + 2)
        local n = bit.bor(bit.lshift(a, 16), bit.lshift(b or 0, 8), c or 0)
        local chunk = {
            sub(alphabet, bit.rshift(n, 18) + 1, bit.rshift(n, 18) + 1),
            sub(alphabet, bit.band(bit.rshift(n, 12), 63) + 1, bit.band(bit.rshift(n, 12), 63) + 1),
            b and sub(alphabet, bit.band(bit.rshift(n, 6), 63) + 1, bit.band(bit.rshift(n, 6), 63) + 1)
                or (pad and "=" or ""),
            c and sub(alphabet, bit.band(n, 63) + 1, bit.band(n, 63) + 1) or (pad and "=" or ""),
        }
        out[#out + 1] = concat(chunk)
    end
    return concat(out)
end

local function b64_decode(s, alphabet)
    local bit = require "bit"
    local map = {}
    for i = 1, 64 do
        map[byte(alphabet, i)] = i - 1
    end
    s = gsub(s, "=+$", "")
    if #s % 4 == 1 then
        return nil, "invalid base64"
    end
    local out = {}
    for i = 1, #s, 4 do
        local n, count = 0, 0
        for j = i, i + 3 do
            local c = byte(s, j)
            if c then
                local v = map[c]
                if not v then
                    return nil, "invalid base64"
                end
                n = bit.bor(bit.lshift(n, 6), v)
                count = count + 1
            end
        end
        n = bit.lshift(n, 6 * (4 - count))
        local bytes = { char(bit.band(bit.rshift(n, 16), 255)), char(bit.band(bit.rshift(n, 8), 255)),
            char(bit.band(n, 255)) }
        out[#out + 1] = concat(bytes, "", 1, count - 1)
    end
    return concat(out)
end

-- M.base64(s) / M.unbase64(s): standard base64 with padding.
function M.base64(s)
    return b64_encode(s, B64, true)
end

function M.unbase64(s)
    if type(s) ~= "string" then
        return nil, "invalid base64: " .. tostring(s)
    end
    return b64_decode(s, B64)
end

-- M.base64url(s) / M.unbase64url(s): the URL alphabet without padding (the
-- HTTP API's tokens and cursors, src/base/base64.c).
function M.base64url(s)
    return b64_encode(s, B64URL, false)
end

function M.unbase64url(s)
    if type(s) ~= "string" or s:find("=", 1, true) then
        return nil, "invalid base64url"
    end
    return b64_decode(s, B64URL)
end

return M
