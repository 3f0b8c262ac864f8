/* test_json_native.c — unit test of json_native.c: the C encoder must give
 * exactly the bytes of lua/crier/json.lua's own encoder, and decline (return
 * nothing) exactly where json.lua refuses a value, plus the documented cases
 * it leaves to json.lua (a json.array much sparser than its length). Numbers
 * that need 17 digits are where printf and LuaJIT round a tie differently.
 *
 * crier/json.lua is loaded without the C encoder in package.loaded (so its
 * json.encode is the Lua one), and the C function is called directly with that
 * module's sentinels; 20,000 random values (all bytes in strings, integers
 * and doubles of every magnitude, -0, number keys, holes, sentinels, nesting)
 * and a list of hand-written cases are compared. Then the module is loaded
 * with the C encoder in place and json.encode is checked to return json.lua's
 * error message for each refused value. Exits 1 on any failure. */
#include "json_native.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static const char DRIVER[] =
    "local lua_dir, native = ...\n"
    "local path = lua_dir .. '/crier/json.lua'\n"
    "package.loaded['crier.json_native'] = nil\n"
    "local J = assert(loadfile(path))()\n"
    "local null, ea, amt = J.null, J.empty_array, J.array_mt\n"
    "local function c_encode(v, depth) return native(v, null, ea, amt, depth or J.max_depth) end\n"
    "local problems = {}\n"
    "local function show(s) return s and string.format('%q', s) or 'nil' end\n"
    "local function compare(v, what, depth, declines)\n"
    "  local saved = J.max_depth\n"
    "  if depth then J.max_depth = depth end\n"
    "  local want, err = J.encode(v)\n"
    "  J.max_depth = saved\n"
    "  local got = c_encode(v, depth)\n"
    "  if got ~= want and not (got == nil and declines) then\n"
    "    problems[#problems + 1] = what .. ': json.lua ' .. show(want) .. (err and (' (' .. err .. ')') or '')\n"
    "      .. ', C ' .. show(got)\n"
    "  end\n"
    "end\n"
    /* hand-written cases: [name] = value */
    "local cyc = {}; cyc.self = cyc\n"
    "local shared = { 1 }\n"
    "local deep = {}; do local t = deep; for _ = 1, 20 do t.x = {}; t = t.x end end\n"
    "local protected = setmetatable({ 1, 2 }, { __metatable = amt })\n"
    "local cases = {\n"
    "  { 'nil', nil }, { 'true', true }, { 'false', false }, { 'zero', 0 }, { 'neg zero', -0.0 },\n"
    "  { '2^53-1', 2^53 - 1 }, { '2^53', 2^53 }, { '-2^53', -2^53 }, { '-(2^53-1)', -(2^53 - 1) },\n"
    "  { '0.1', 0.1 }, { '1/3', 1/3 }, { '1e300', 1e300 }, { '5e-324', 5e-324 }, { '1e-7', 1e-7 },\n"
    "  { '123456789012345678', 123456789012345678 }, { '1.5', 1.5 }, { '-2.5e-10', -2.5e-10 },\n"
    "  { 'nan', 0/0 }, { 'inf', math.huge }, { '-inf', -math.huge },\n"
    "  { 'empty string', '' }, { 'controls', '\\0\\1\\b\\f\\n\\r\\t\\31\\127\"\\\\/' },\n"
    "  { 'utf8', 'caf\\195\\169 \\226\\130\\172' }, { 'high bytes', '\\128\\255\\254' },\n"
    "  { 'empty table', {} }, { 'null', null }, { 'empty_array', ea }, { 'marked empty', J.array() },\n"
    "  { 'array', { 1, 'a', true } }, { 'marked holes', J.array({ [1] = 1, [3] = 3 }) },\n"
    "  { 'unmarked holes', { [1] = 1, [3] = 3 } }, { 'nulls', { null, null } },\n"
    "  { 'object', { b = 1, a = 2, c = { d = ea } } }, { 'mixed', { 1, 2, x = 3 } },\n"
    "  { 'number keys', { [1.5] = 'a', [-1] = 'b', [0] = 'c', [2^60] = 'd' } },\n"
    "  { 'sorted bytes', { ['b'] = 1, ['a\\0b'] = 2, ['a'] = 3, ['\\255'] = 4, ['A'] = 5, ['a\\0'] = 6 } },\n"
    "  { 'key escapes', { ['a\"b'] = 1, ['\\n'] = 2 } },\n"
    "  { 'shared twice', { shared, shared } }, { 'deep 21', deep }, { 'protected marked', protected },\n"
    "  { 'cycle', cyc }, { 'function', print }, { 'function inside', { f = print } },\n"
    "  { 'duplicate keys', { [1] = 'a', ['1'] = 'b', x = 1 } }, { 'boolean key', { [true] = 1 } },\n"
    "  { 'table key', { [{}] = 1 } }, { 'inf key', { [math.huge] = 1 } }, { 'nan value', { x = 0/0 } },\n"
    "  { 'marked with name', J.array({ 1, x = 2 }) }, { 'coroutine', coroutine.create(print) },\n"
    "}\n"
    "for _, c in ipairs(cases) do compare(c[2], c[1]) end\n"
    /* documented: a json.array far sparser than its length is left to json.lua */
    "compare(J.array({ [100000] = 1 }), 'sparse marked', nil, true)\n"
    "if c_encode(J.array({ [100000] = 1 })) ~= nil then problems[#problems + 1] = 'sparse marked: C encoded it' end\n"
    "compare(J.array({ [1000] = 1, 2, 3 }), 'marked, 1000 long, 3 entries')\n"
    "compare(deep, 'deep 21 at max_depth 5', 5)\n"
    "compare(deep, 'deep 21 at max_depth 21', 21)\n"
    "compare(deep, 'deep 21 at max_depth 22', 22)\n"
    /* random values */
    "math.randomseed(tonumber(os.getenv('JSON_NATIVE_SEED') or '12345'))\n"
    "local R = math.random\n"
    "local function rstring()\n"
    "  local n = R(0, 12); local b = {}\n"
    "  for i = 1, n do\n"
    "    local k = R(1, 10)\n"
    "    b[i] = k <= 2 and R(0, 31) or k == 3 and R(128, 255) or k == 4 and (R(1, 2) == 1 and 34 or 92) or R(32, 126)\n"
    "  end\n"
    "  return string.char(unpack(b))\n"
    "end\n"
    "local function rnumber()\n"
    "  local k = R(1, 8)\n"
    "  if k == 1 then return R(-1000, 1000)\n"
    "  elseif k == 2 then return (R() - 0.5) * 10 ^ R(-320, 308)\n"
    "  elseif k == 3 then return R(-2^31, 2^31) * 2 ^ R(0, 30)\n"
    "  elseif k == 4 then return R(-99999, 99999) / 10 ^ R(1, 6)\n"
    "  elseif k == 5 then return 2^53 + R(-3, 3)\n"
    "  elseif k == 6 then return -0.0\n"
    "  elseif k == 7 then return R() end\n"
    "  return R(-1e6, 1e6) + R()\n"
    "end\n"
    "local rvalue\n"
    "local function rtable(depth)\n"
    "  local k = R(1, 7); local t = {}\n"
    "  local n = R(0, 6)\n"
    "  if k <= 2 then for i = 1, n do t[i] = rvalue(depth + 1) end\n"
    "  elseif k == 3 then for i = 1, n do if R(1, 3) > 1 then t[i] = rvalue(depth + 1) end end; J.array(t)\n"
    "  elseif k == 4 then for _ = 1, n do t[rstring()] = rvalue(depth + 1) end\n"
    "  elseif k == 5 then for _ = 1, n do t[R(1, 2) == 1 and rnumber() or rstring()] = rvalue(depth + 1) end\n"
    "  elseif k == 6 then return R(1, 2) == 1 and null or ea\n"
    "  else for i = 1, n do t[i] = rvalue(depth + 1) end; t[rstring()] = rvalue(depth + 1) end\n"
    "  return t\n"
    "end\n"
    "rvalue = function(depth)\n"
    "  local k = R(1, depth > 4 and 4 or 6)\n"
    "  if k == 1 then return rstring() elseif k == 2 then return rnumber()\n"
    "  elseif k == 3 then return R(1, 2) == 1 elseif k == 4 then return rnumber() end\n"
    "  return rtable(depth)\n"
    "end\n"
    "local declined = 0\n"
    "for i = 1, 20000 do\n"
    "  local v = rvalue(0)\n"
    "  if c_encode(v) == nil then declined = declined + 1 end\n"
    "  compare(v, 'random value ' .. i)\n"
    "  if #problems > 20 then break end\n"
    "end\n"
    /* with the C encoder in place: json.encode's refusals still carry json.lua's message */
    "package.loaded['crier.json_native'] = native\n"
    "local JN = assert(loadfile(path))()\n"
    "local refused = { { 'cycle', cyc }, { 'function inside', { f = print } }, { 'nan value', { x = 0/0 } },\n"
    "  { 'duplicate keys', { [1] = 'a', ['1'] = 'b', x = 1 } } }\n"
    "for _, c in ipairs(refused) do\n"
    "  local _, want = J.encode(c[2])\n"
    "  local text, got = JN.encode(c[2])\n"
    "  if text ~= nil or got ~= want then\n"
    "    problems[#problems + 1] = c[1] .. ' with the C encoder: ' .. show(text) .. ', ' .. show(got)\n"
    "      .. ' (want ' .. show(want) .. ')'\n"
    "  end\n"
    "end\n"
    "local ok_text = JN.encode({ b = { 1, 2.5, 'x\\n' }, a = JN.null })\n"
    "if ok_text ~= '{\"a\":null,\"b\":[1,2.5,\"x\\\\n\"]}' then problems[#problems + 1] = 'JN.encode: ' .. show(ok_text) end\n"
    "return table.concat(problems, '\\n'), declined\n";

int main(void)
{
    const char *src = getenv("CRIER_SOURCE_DIR");
    char lua_dir[4200];
    lua_State *L;

    if (!src || !*src)
        src = ".";
    snprintf(lua_dir, sizeof lua_dir, "%s/lua", src);
    L = luaL_newstate();
    luaL_openlibs(L);
    crier_json_native_register(L);


    if (luaL_loadbuffer(L, DRIVER, sizeof DRIVER - 1, "test_json_native") != 0) {
        fprintf(stderr, "driver: %s\n", lua_tostring(L, -1));
        return 1;
    }
    lua_pushstring(L, lua_dir);
    /* the registration: package.loaded["crier.json_native"] is a C function */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaded");
    lua_getfield(L, -1, "crier.json_native");
    lua_replace(L, -3);
    lua_pop(L, 1);
    CHECK(lua_iscfunction(L, -1));
    if (lua_pcall(L, 2, 2, 0) != 0) {
        fprintf(stderr, "driver failed: %s\n", lua_tostring(L, -1));
        return 1;
    }
    const char *problems = lua_tostring(L, -2);
    int declined = (int)lua_tointeger(L, -1);
    if (problems && *problems) {
        fprintf(stderr, "C encoder differs from json.lua:\n%s\n", problems);
        check_failures++;
    }
    /* the random values must mostly be encodable, or the comparison says little */
    printf("random values the C encoder left to json.lua: %d of 20000\n", declined);
    CHECK(declined < 4000);
    lua_close(L);
    return CHECK_DONE();
}
