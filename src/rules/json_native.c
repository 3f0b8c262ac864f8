/* json_native.c — crier.json's encoder in C (see json_native.h).
 *
 * lua/crier/json.lua's encoder was half of what planning a webhook event
 * cost in crier serve (rules run under the sandbox's count hook, and their
 * own functions are kept out of the JIT compiler). This is the same
 * encoder, for values it can encode: it produces exactly the bytes json.lua
 * does (object keys sorted byte-wise, numbers as json.format_number writes
 * them, the same escapes), and for everything json.lua would refuse or that is
 * not plain data (NaN, a cycle, a function, a key that is neither string nor
 * number, two keys encoding alike, a sparse json.array, nesting at the limit)
 * it returns nothing, so that json.lua's own encoder runs and reports the error
 * with its path. tests/unit/test_json_native.c compares the two on random values. */
#include "json_native.h"
#include "decimal.h"

#include <lauxlib.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The arguments (from json.lua, which owns the sentinels); the closure's
 * upvalues are string.format and the buffers' box (crier_json_native_register). */
enum { ARG_VALUE = 1, ARG_NULL, ARG_EMPTY_ARRAY, ARG_ARRAY_MT, ARG_MAX_DEPTH };

/* A text longer than this is left to json.lua (which holds it in Lua memory,
 * under the rules' memory limit). */
#define NATIVE_MAX_TEXT ((size_t)256 << 20)

typedef struct {
    const char *name; /* a string key's bytes (the Lua string's); see key_name */
    size_t len;
    double key_number; /* the key when it is a number */
    int key_is_number;
    int stack_idx; /* a string key's copy on the Lua stack (0: none, push it again) */
    char num[32];
} native_key;

/* The encoder's C memory, kept from call to call in a userdata (an upvalue
 * of the encoder) whose __gc frees it with the Lua state: a Lua error in the
 * middle of a call (out of memory while growing the stack) leaks nothing. */
typedef struct {
    char *buf;
    size_t cap;
    native_key *keys;
    size_t cap_keys;
} native_box;

static int box_gc(lua_State *L)
{
    native_box *b = lua_touserdata(L, 1);
    free(b->buf);
    free(b->keys);
    memset(b, 0, sizeof *b);
    return 0;
}

typedef struct {
    lua_State *L;
    native_box *box; /* owns the text and the keys' stack, and their capacities */
    size_t len;
    const void *path[600]; /* the tables being encoded, outermost first (cycles) */
    size_t n_keys; /* object keys in box->keys, a stack shared by the nesting levels */
    int max_depth;
    int failed;
} native_enc;

static int put(native_enc *e, const char *s, size_t n)
{
    if (e->len + n > e->box->cap) {
        size_t cap = e->box->cap ? e->box->cap : 1024;
        while (cap < e->len + n)
            cap *= 2;
        if (cap > NATIVE_MAX_TEXT)
            return e->failed = 1, -1;
        char *p = realloc(e->box->buf, cap);
        if (!p)
            return e->failed = 1, -1;
        e->box->buf = p;
        e->box->cap = cap;
    }
    memcpy(e->box->buf + e->len, s, n);
    e->len += n;
    return 0;
}

#define PUT_LITERAL(e, s) put((e), (s), sizeof(s) - 1)

/* json.format_number: integers in (-2^53, 2^53) with %d, others with %.14g
 * unless that does not read back as n, then %.17g. Returns the length, or -1
 * for NaN and infinities. The %.17g text comes from LuaJIT's own string.format
 * (the closure's upvalue), not from printf: the two round a tie in the 18th
 * digit differently (284352131191819.125: LuaJIT …13, glibc …12). A %.14g text
 * that reads back as n is the same from both (the correctly rounded 14 digits;
 * a tie in the 15th digit cannot read back as n). */
static int format_number(lua_State *L, double n, char out[32])
{
    if (isnan(n) || isinf(n))
        return -1;
    if (n == floor(n) && n > -9007199254740992.0 && n < 9007199254740992.0)
        return (int)crier_decimal_int64(out, (int64_t)n);
    int len = snprintf(out, 32, "%.14g", n);
    if (strtod(out, NULL) == n)
        return len;
    size_t lua_len;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushliteral(L, "%.17g");
    lua_pushnumber(L, n);
    lua_call(L, 2, 1);
    const char *text = lua_tolstring(L, -1, &lua_len);
    len = text && lua_len < 32 ? (int)lua_len : -1;
    if (len >= 0)
        memcpy(out, text, lua_len + 1);
    lua_pop(L, 1);
    return len;
}

static void put_string(native_enc *e, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t start = 0;
    PUT_LITERAL(e, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(e, s + start, i - start);
        start = i + 1;
        switch (c) {
        case '"': PUT_LITERAL(e, "\\\""); break;
        case '\\': PUT_LITERAL(e, "\\\\"); break;
        case '\b': PUT_LITERAL(e, "\\b"); break;
        case '\f': PUT_LITERAL(e, "\\f"); break;
        case '\n': PUT_LITERAL(e, "\\n"); break;
        case '\r': PUT_LITERAL(e, "\\r"); break;
        case '\t': PUT_LITERAL(e, "\\t"); break;
        default: {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(e, u, sizeof u);
        }
        }
    }
    put(e, s + start, n - start);
    PUT_LITERAL(e, "\"");
}

/* getmetatable(t) as Lua sees it (a __metatable field stands in for the
 * metatable) compared with json.array_mt. */
static int marked_array(lua_State *L, int idx)
{
    int marked;
    if (!lua_getmetatable(L, idx))
        return 0;
    lua_pushliteral(L, "__metatable");
    lua_rawget(L, -2);
    if (lua_isnil(L, -1))
        lua_pop(L, 1);
    else
        lua_remove(L, -2);
    marked = lua_rawequal(L, -1, ARG_ARRAY_MT);
    lua_pop(L, 1);
    return marked;
}

/* A key's text: a number key's is in the entry itself (which qsort moves). */
static const char *key_name(const native_key *k)
{
    return k->key_is_number ? k->num : k->name;
}

static int key_cmp(const void *a, const void *b)
{
    const native_key *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(key_name(x), key_name(y), n);
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

static void encode_value(native_enc *e, int idx, int depth);

static void encode_array(native_enc *e, int idx, int64_t n, int depth)
{
    lua_State *L = e->L;
    PUT_LITERAL(e, "[");
    for (int64_t i = 1; i <= n && !e->failed; i++) {
        if (i > 1)
            PUT_LITERAL(e, ",");
        lua_rawgeti(L, idx, (int)i);
        if (lua_isnil(L, -1))
            PUT_LITERAL(e, "null");
        else
            encode_value(e, lua_gettop(L), depth);
        lua_pop(L, 1);
    }
    PUT_LITERAL(e, "]");
}

static void encode_object(native_enc *e, int idx, int depth)
{
    lua_State *L = e->L;
    size_t base = e->n_keys;
    int top = lua_gettop(L);

    lua_pushnil(L);
    while (lua_next(L, idx)) {
        native_key *k;
        lua_pop(L, 1);
        if (e->n_keys == e->box->cap_keys) {
            size_t cap = e->box->cap_keys ? e->box->cap_keys * 2 : 64;
            native_key *p = realloc(e->box->keys, cap * sizeof *p);
            if (!p) {
                e->failed = 1;
                goto out;
            }
            e->box->keys = p;
            e->box->cap_keys = cap;
        }
        k = &e->box->keys[e->n_keys++];
        k->key_is_number = lua_type(L, -1) == LUA_TNUMBER;
        if (k->key_is_number) {
            int len;
            k->key_number = lua_tonumber(L, -1);
            len = format_number(L, k->key_number, k->num);
            if (len < 0) {
                e->failed = 1;
                goto out;
            }
            k->len = (size_t)len;
        } else if (lua_type(L, -1) == LUA_TSTRING) {
            k->name = lua_tolstring(L, -1, &k->len);
            /* a copy of the key below the iteration's, to look its value up
             * with later: pushing its bytes again would intern them again
             * (hash and compare), a tenth of the encoder's time */
            k->stack_idx = 0;
            if (lua_checkstack(L, 2)) {
                lua_pushvalue(L, -1);
                lua_insert(L, -2);
                k->stack_idx = lua_gettop(L) - 1;
            }
        } else {
            e->failed = 1; /* json.lua: "cannot encode a … key" */
            goto out;
        }
    }
    if (e->n_keys - base > 1)
        qsort(e->box->keys + base, e->n_keys - base, sizeof *e->box->keys, key_cmp);
    for (size_t i = base + 1; i < e->n_keys; i++)
        if (key_cmp(&e->box->keys[i - 1], &e->box->keys[i]) == 0) {
            e->failed = 1; /* json.lua: "two keys encode as …" */
            goto out;
        }

    PUT_LITERAL(e, "{");
    for (size_t i = base; i < e->n_keys && !e->failed; i++) {
        /* the keys' stack may move while a nested object adds its keys: a copy */
        native_key k = e->box->keys[i];
        if (i > base)
            PUT_LITERAL(e, ",");
        put_string(e, key_name(&k), k.len);
        PUT_LITERAL(e, ":");
        if (k.key_is_number)
            lua_pushnumber(L, k.key_number);
        else if (k.stack_idx)
            lua_pushvalue(L, k.stack_idx);
        else
            lua_pushlstring(L, k.name, k.len); /* the key itself: interned, no allocation */
        lua_rawget(L, idx);
        encode_value(e, lua_gettop(L), depth);
        lua_pop(L, 1);
    }
    PUT_LITERAL(e, "}");
out: /* the keys' copies (and, on a failure, the iteration's key) go */
    e->n_keys = base;
    lua_settop(L, top);
}

static void encode_table(native_enc *e, int idx, int depth)
{
    lua_State *L = e->L;
    const void *self = lua_topointer(L, idx);
    int64_t n = 0;
    double max = 0;
    int all_index = 1, marked;

    if (lua_rawequal(L, idx, ARG_NULL)) {
        PUT_LITERAL(e, "null");
        return;
    }
    if (lua_rawequal(L, idx, ARG_EMPTY_ARRAY)) {
        PUT_LITERAL(e, "[]");
        return;
    }
    if (depth >= e->max_depth || depth >= (int)(sizeof e->path / sizeof e->path[0]) ||
        !lua_checkstack(L, 8)) {
        e->failed = 1;
        return;
    }
    for (int i = 0; i < depth; i++)
        if (e->path[i] == self) {
            e->failed = 1; /* json.lua: "table contains itself" */
            return;
        }
    e->path[depth] = self;

    marked = marked_array(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        n++;
        if (lua_type(L, -1) == LUA_TNUMBER) {
            double k = lua_tonumber(L, -1);
            if (k >= 1 && k == floor(k)) {
                if (k > max)
                    max = k;
            } else {
                all_index = 0;
            }
        } else {
            all_index = 0;
        }
    }

    if (marked) {
        /* a hole encodes as null; a marked array far sparser than its length
         * (or with a non-index key) is json.lua's to handle */
        if (!all_index || max > (double)n * 2 + 1024) {
            e->failed = 1;
            return;
        }
        encode_array(e, idx, (int64_t)max, depth + 1);
    } else if (n > 0 && all_index && max == (double)n) {
        encode_array(e, idx, n, depth + 1);
    } else {
        encode_object(e, idx, depth + 1);
    }
}

static void encode_value(native_enc *e, int idx, int depth)
{
    lua_State *L = e->L;
    if (e->failed)
        return;
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        put_string(e, s, n);
        break;
    }
    case LUA_TNUMBER: {
        char num[32];
        int len = format_number(L, lua_tonumber(L, idx), num);
        if (len < 0)
            e->failed = 1;
        else
            put(e, num, (size_t)len);
        break;
    }
    case LUA_TBOOLEAN:
        if (lua_toboolean(L, idx))
            PUT_LITERAL(e, "true");
        else
            PUT_LITERAL(e, "false");
        break;
    case LUA_TNIL:
        PUT_LITERAL(e, "null");
        break;
    case LUA_TTABLE:
        encode_table(e, idx, depth);
        break;
    default:
        e->failed = 1; /* functions, userdata, threads, cdata: json.lua says which */
    }
}

/* After a call, a text buffer larger than this is given back. */
#define NATIVE_KEEP_TEXT ((size_t)1 << 20)

static int json_encode_native(lua_State *L)
{
    native_enc e;
    /* the closure's second upvalue: buffers kept from call to call (a call
     * cannot nest in another: nothing it calls can call it back) */
    native_box *box = lua_touserdata(L, lua_upvalueindex(2));
    int max_depth = (int)luaL_checkinteger(L, ARG_MAX_DEPTH);

    lua_settop(L, ARG_MAX_DEPTH);
    memset(&e, 0, sizeof e);
    e.L = L;
    e.max_depth = max_depth;
    e.box = box;
    encode_value(&e, ARG_VALUE, 0);
    if (!e.failed)
        lua_pushlstring(L, box->buf ? box->buf : "", e.len);
    if (box->cap > NATIVE_KEEP_TEXT) {
        free(box->buf);
        box->buf = NULL;
        box->cap = 0;
    }
    return e.failed ? 0 : 1;
}

void crier_json_native_register(lua_State *L)
{
    native_box *box;
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaded");
    lua_getglobal(L, "string");
    lua_getfield(L, -1, "format");
    lua_remove(L, -2);
    box = lua_newuserdata(L, sizeof *box);
    memset(box, 0, sizeof *box);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_pushcclosure(L, json_encode_native, 2);
    lua_setfield(L, -2, "crier.json_native");
    lua_pop(L, 2);
}
