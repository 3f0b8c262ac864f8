/* rules.c — one generation of Lua rules (see rules.h): a fresh lua_State with
 * the crier library, every rule file of a directory handed to
 * crier.runtime.new_generation, and the calls that plan and validate events
 * through it, copying the results into the caller's plan accumulator. */
#include "rules.h"

#include "json_native.h"

#include <libpq-fe.h>

#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <openssl/evp.h>

#define RULES_MAX_FILE_BYTES (16u * 1024u * 1024u)
#define PLAN_BLOCK_MIN 65536u

/* The Lua state's allocator: a hard ceiling on its heap, so that a rule
 * cannot take the process's memory (the sandbox's hook checks the declared
 * limit between instructions; this also catches one huge allocation). */
typedef struct {
    size_t used;
    size_t cap;
    lua_Alloc inner; /* LuaJIT's allocator, which does the work */
    void *inner_ud;
} rules_memory;

struct crier_rules {
    lua_State *L;
    int generation_ref; /* registry reference to the runtime's generation object */
    int plan_keys_ref;  /* registry reference to the plan's field names (plan_keys) */
    size_t n_files;
    char version[65];
    rules_memory memory;
    crier_rules_query_fn query_fn;
    void *query_ud;
    bool defer_queries; /* crier_rules_defer_queries */
    bool query_deferred; /* a query was deferred during the current plan */
    char *schedules_json; /* gen:schedules_json(), asked once */
};

/* Heap allowed while loading, before the rules state their own limit. */
#define RULES_LOAD_MEMORY ((size_t)512 << 20)
/* Room above the declared limit for the engine's own work in the state. */
#define RULES_MEMORY_MARGIN ((size_t)32 << 20)

/* The state's allocator: LuaJIT's own (taken from luaL_newstate, much faster
 * than libc's malloc for the many small objects a plan makes: malloc and free
 * were a fifth of crier serve's CPU in crier bench pipeline), with the
 * rules' memory limit counted around it. The few bytes LuaJIT allocated
 * before the limit was put in place are not counted (m->used stays >= 0). */
static void *rules_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    rules_memory *m = ud;
    size_t old = ptr ? osize : 0;
    size_t rest = m->used - (old < m->used ? old : m->used); /* counted without this block */
    if (nsize == 0) {
        m->inner(m->inner_ud, ptr, osize, 0);
        m->used = rest;
        return NULL;
    }
    if (nsize > old && rest + nsize > m->cap)
        return NULL; /* Lua raises "not enough memory" */
    void *p = m->inner(m->inner_ud, ptr, osize, nsize);
    if (p)
        m->used = rest + nsize;
    return p;
}

/* A rule file read from disk. */
typedef struct {
    char *name; /* file name inside the rules directory */
    char *path; /* full path */
    char *source;
    size_t source_len;
} rules_file;

/* Message handler for lua_pcall: the error message with a Lua traceback. */
static int rules_traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Calls the function below nargs arguments on the stack with a traceback
 * handler. Returns lua_pcall's status; on error the message is on the stack. */
static int rules_pcall(lua_State *L, int nargs, int nresults)
{
    int base = lua_gettop(L) - nargs; /* the function's index */
    int status;
    lua_pushcfunction(L, rules_traceback);
    lua_insert(L, base);
    status = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    return status;
}

static const char *lua_error_text(lua_State *L, int status)
{
    const char *msg = lua_tostring(L, -1);
    if (status == LUA_ERRMEM)
        return "out of memory in the rules' Lua state";
    return msg ? msg : "(error without a message)";
}

/* ------------------------------------------------------------------------ */
/* Reading the rules directory */

static int is_rule_file(const char *name)
{
    size_t len = strlen(name);
    if (name[0] == '.') /* editor and deploy temp files */
        return 0;
    if (len <= 4 || strcmp(name + len - 4, ".lua") != 0)
        return 0;
    if (len >= 9 && strcmp(name + len - 9, "_spec.lua") == 0)
        return 0;
    return 1;
}

static int compare_names(const void *a, const void *b)
{
    const rules_file *fa = a, *fb = b;
    return strcmp(fa->name, fb->name);
}

static void free_files(rules_file *files, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(files[i].name);
        free(files[i].path);
        free(files[i].source);
    }
    free(files);
}

/* Reads path into a new NUL-terminated buffer. Returns 0, or -1 with err set. */
static int read_file(const char *path, char **out, size_t *out_len, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!f) {
        crier_set_error(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        size_t n;
        if (cap - len < 4096) {
            char *grown;
            cap = cap ? cap * 2 : 8192;
            if (cap > RULES_MAX_FILE_BYTES + 4096) {
                crier_set_error(err, err_len, "%s: larger than %u bytes", path, RULES_MAX_FILE_BYTES);
                goto fail;
            }
            grown = realloc(buf, cap);
            if (!grown) {
                crier_set_error(err, err_len, "%s: out of memory", path);
                goto fail;
            }
            buf = grown;
        }
        n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) {
                crier_set_error(err, err_len, "%s: read error: %s", path, strerror(errno));
                goto fail;
            }
            break;
        }
    }
    fclose(f);
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return 0;
fail:
    fclose(f);
    free(buf);
    return -1;
}

/* Lists and reads the rule files of dir, sorted by name. Returns 0 with a new
 * array in *out (free with free_files), or -1 with err set. */
static int read_rules_dir(const char *dir, rules_file **out, size_t *n_out, char *err,
                          size_t err_len)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    rules_file *files = NULL;
    size_t n = 0, cap = 0;
    if (!d) {
        crier_set_error(err, err_len, "%s: cannot open rules directory: %s", dir, strerror(errno));
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        rules_file *f;
        size_t path_len;
        if (!is_rule_file(de->d_name))
            continue;
        if (n == cap) {
            rules_file *grown;
            cap = cap ? cap * 2 : 16;
            grown = realloc(files, cap * sizeof *files);
            if (!grown) {
                crier_set_error(err, err_len, "%s: out of memory", dir);
                goto fail;
            }
            files = grown;
        }
        f = &files[n];
        memset(f, 0, sizeof *f);
        path_len = strlen(dir) + 1 + strlen(de->d_name) + 1;
        f->name = strdup(de->d_name);
        f->path = malloc(path_len);
        if (!f->name || !f->path) {
            free(f->name);
            free(f->path);
            crier_set_error(err, err_len, "%s: out of memory", dir);
            goto fail;
        }
        snprintf(f->path, path_len, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
                 de->d_name);
        /* stat follows symlinks: a linked rule file counts, a directory named x.lua does not */
        if (stat(f->path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(f->name);
            free(f->path);
            continue;
        }
        n++;
    }
    closedir(d);
    d = NULL;
    if (n == 0) {
        crier_set_error(err, err_len,
                        "%s: no rules here: the directory has no rule files (*.lua, other than "
                        "*_spec.lua)",
                        dir);
        goto fail;
    }
    qsort(files, n, sizeof *files, compare_names);
    for (size_t i = 0; i < n; i++) {
        if (read_file(files[i].path, &files[i].source, &files[i].source_len, err, err_len) != 0)
            goto fail;
    }
    *out = files;
    *n_out = n;
    return 0;
fail:
    if (d)
        closedir(d);
    free_files(files, n);
    return -1;
}

/* version = hex SHA-256 over, per file in order: 8-byte big-endian name
 * length, name, 8-byte big-endian content length, content. */
static int compute_version(const rules_file *files, size_t n, char out[65], char *err,
                           size_t err_len)
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_len = 0;
    int ok = 1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
        ok = 0;
    for (size_t i = 0; ok && i < n; i++) {
        const char *parts[2] = {files[i].name, files[i].source};
        size_t lens[2] = {strlen(files[i].name), files[i].source_len};
        for (int p = 0; ok && p < 2; p++) {
            unsigned char prefix[8];
            uint64_t len = lens[p];
            for (int b = 7; b >= 0; b--) {
                prefix[b] = (unsigned char)(len & 0xff);
                len >>= 8;
            }
            ok = EVP_DigestUpdate(ctx, prefix, sizeof prefix) == 1 &&
                 EVP_DigestUpdate(ctx, parts[p], lens[p]) == 1;
        }
    }
    if (ok)
        ok = EVP_DigestFinal_ex(ctx, digest, &digest_len) == 1 && digest_len == 32;
    EVP_MD_CTX_free(ctx);
    if (!ok) {
        crier_set_error(err, err_len, "cannot compute the rules version: SHA-256 failed");
        return -1;
    }
    for (unsigned int i = 0; i < digest_len; i++)
        snprintf(out + 2 * i, 3, "%02x", digest[i]);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Loading */

crier_rules *crier_rules_load(const char *lua_dir, const char *rules_dir,
                              const crier_setting *settings, size_t n_settings, char *err,
                              size_t err_len)
{
    crier_rules *rules = NULL;
    rules_file *files = NULL;
    size_t n_files = 0;
    lua_State *L = NULL;
    int status;

    if (!lua_dir || !rules_dir) {
        crier_set_error(err, err_len, "crier_rules_load: lua_dir and rules_dir are required");
        return NULL;
    }
    if (read_rules_dir(rules_dir, &files, &n_files, err, err_len) != 0)
        return NULL;

    rules = calloc(1, sizeof *rules);
    if (!rules) {
        crier_set_error(err, err_len, "out of memory");
        goto fail;
    }
    rules->generation_ref = LUA_NOREF;
    rules->plan_keys_ref = LUA_NOREF;
    rules->n_files = n_files;
    if (compute_version(files, n_files, rules->version, err, err_len) != 0)
        goto fail;

    rules->memory.cap = RULES_LOAD_MEMORY;
    L = luaL_newstate();
    if (!L) {
        crier_set_error(err, err_len, "cannot create a Lua state");
        goto fail;
    }
    rules->memory.inner = lua_getallocf(L, &rules->memory.inner_ud);
    lua_setallocf(L, rules_alloc, &rules->memory);
    rules->L = L;
    luaL_openlibs(L);
    /* json.encode in C for the rules (json_native.h): json.lua picks it up */
    crier_json_native_register(L);

    /* package.path = "<lua_dir>/?.lua;<lua_dir>/?/init.lua" */
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua", lua_dir, lua_dir);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);

    /* runtime = require "crier.runtime" */
    lua_getglobal(L, "require");
    lua_pushliteral(L, "crier.runtime");
    status = rules_pcall(L, 1, 1);
    if (status != 0) {
        crier_set_error(err, err_len, "%s/crier/runtime.lua: cannot load the crier library: %s", lua_dir,
                lua_error_text(L, status));
        goto fail;
    }

    /* runtime.new_generation(files, settings) */
    lua_getfield(L, -1, "new_generation");
    lua_remove(L, -2);
    lua_createtable(L, (int)n_files, 0);
    for (size_t i = 0; i < n_files; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, files[i].path);
        lua_setfield(L, -2, "path");
        lua_pushlstring(L, files[i].source, files[i].source_len);
        lua_setfield(L, -2, "source");
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_createtable(L, 0, (int)n_settings);
    for (size_t i = 0; i < n_settings; i++) {
        if (!settings[i].name || !settings[i].value)
            continue;
        lua_pushstring(L, settings[i].value);
        lua_setfield(L, -2, settings[i].name);
    }
    status = rules_pcall(L, 2, 2);
    if (status != 0) {
        crier_set_error(err, err_len, "%s: loading rules failed: %s", rules_dir, lua_error_text(L, status));
        goto fail;
    }
    if (lua_isnil(L, -2)) {
        const char *msg = lua_tostring(L, -1);
        crier_set_error(err, err_len, "%s", msg ? msg : "rules failed to load (no message)");
        goto fail;
    }
    lua_pop(L, 1);
    /* The memory ceiling the rules declared (crier.limits), plus a margin. */
    lua_getfield(L, -1, "memory_limit");
    lua_pushvalue(L, -2);
    if (rules_pcall(L, 1, 1) == 0 && lua_isnumber(L, -1))
        rules->memory.cap = (size_t)lua_tonumber(L, -1) + RULES_MEMORY_MARGIN;
    lua_pop(L, 1);
    rules->generation_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    rules->plan_keys_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_gc(L, LUA_GCCOLLECT, 0); /* drop what loading left behind */
    free_files(files, n_files);
    crier_info("rules", "loaded %zu rule file%s from %s (version %.12s)", n_files,
               n_files == 1 ? "" : "s", rules_dir, rules->version);
    return rules;

fail:
    free_files(files, n_files);
    crier_rules_free(rules);
    return NULL;
}

const char *crier_rules_version(const crier_rules *rules)
{
    return rules->version;
}

void crier_rules_free(crier_rules *rules)
{
    if (!rules)
        return;
    if (rules->L)
        lua_close(rules->L);
    free(rules->schedules_json);
    free(rules);
}

/* ------------------------------------------------------------------------ */
/* Plan storage */

/* Each storage block starts with its capacity (a size_t); strings follow. */
static size_t block_capacity(const char *block)
{
    size_t cap;
    memcpy(&cap, block, sizeof cap);
    return cap;
}

/* Copies len bytes of s (plus a NUL) into plan storage. Returns the copy or NULL. */
static const char *plan_store(crier_plan *plan, const char *s, size_t len)
{
    char *dst;
    if (plan->n_blocks == 0 || plan->block_size - plan->block_used < len + 1) {
        size_t cap = len + 1 > PLAN_BLOCK_MIN ? len + 1 : PLAN_BLOCK_MIN;
        char *block;
        if (plan->n_blocks == plan->cap_blocks) {
            size_t new_cap = plan->cap_blocks ? plan->cap_blocks * 2 : 8;
            char **grown = realloc(plan->blocks, new_cap * sizeof *grown);
            if (!grown)
                return NULL;
            plan->blocks = grown;
            plan->cap_blocks = new_cap;
        }
        block = malloc(sizeof(size_t) + cap);
        if (!block)
            return NULL;
        memcpy(block, &cap, sizeof cap);
        plan->blocks[plan->n_blocks++] = block;
        plan->block_size = cap;
        plan->block_used = 0;
    }
    dst = plan->blocks[plan->n_blocks - 1] + sizeof(size_t) + plan->block_used;
    memcpy(dst, s, len);
    dst[len] = '\0';
    plan->block_used += len + 1;
    return dst;
}

static crier_plan_recipient *plan_add_recipient(crier_plan *plan)
{
    if (plan->n_recipients == plan->cap_recipients) {
        size_t cap = plan->cap_recipients ? plan->cap_recipients * 2 : 64;
        crier_plan_recipient *grown = realloc(plan->recipients, cap * sizeof *grown);
        if (!grown)
            return NULL;
        plan->recipients = grown;
        plan->cap_recipients = cap;
    }
    return &plan->recipients[plan->n_recipients++];
}

static crier_plan_delivery *plan_add_delivery(crier_plan *plan)
{
    if (plan->n_deliveries == plan->cap_deliveries) {
        size_t cap = plan->cap_deliveries ? plan->cap_deliveries * 2 : 64;
        crier_plan_delivery *grown = realloc(plan->deliveries, cap * sizeof *grown);
        if (!grown)
            return NULL;
        plan->deliveries = grown;
        plan->cap_deliveries = cap;
    }
    return &plan->deliveries[plan->n_deliveries++];
}

/* Where a plan stood before an event was appended, to undo a partial append. */
typedef struct {
    size_t n_recipients, n_deliveries, n_blocks, block_used, n_audience_items;
} plan_mark;

static plan_mark plan_mark_take(const crier_plan *plan)
{
    plan_mark m = {plan->n_recipients, plan->n_deliveries, plan->n_blocks, plan->block_used,
                   plan->n_audience_items};
    return m;
}

static void plan_rollback(crier_plan *plan, plan_mark m)
{
    while (plan->n_blocks > m.n_blocks)
        free(plan->blocks[--plan->n_blocks]);
    plan->n_recipients = m.n_recipients;
    plan->n_deliveries = m.n_deliveries;
    plan->n_audience_items = m.n_audience_items;
    plan->block_size = plan->n_blocks ? block_capacity(plan->blocks[plan->n_blocks - 1]) : 0;
    plan->block_used = plan->n_blocks ? m.block_used : 0;
}

void crier_plan_reset(crier_plan *plan)
{
    plan->n_recipients = 0;
    plan->n_deliveries = 0;
    plan->n_audience_items = 0;
    if (plan->n_blocks > 1) {
        /* Coalesce: one block as large as all of them, so a batch of the same
         * size fits without allocating next time. */
        size_t total = 0;
        char *block;
        for (size_t i = 0; i < plan->n_blocks; i++) {
            total += block_capacity(plan->blocks[i]);
            free(plan->blocks[i]);
        }
        plan->n_blocks = 0;
        plan->block_size = 0;
        block = malloc(sizeof(size_t) + total);
        if (block) {
            memcpy(block, &total, sizeof total);
            plan->blocks[0] = block;
            plan->n_blocks = 1;
            plan->block_size = total;
        }
    }
    plan->block_used = 0;
}

void crier_plan_free(crier_plan *plan)
{
    for (size_t i = 0; i < plan->n_blocks; i++)
        free(plan->blocks[i]);
    free(plan->blocks);
    free(plan->recipients);
    free(plan->deliveries);
    free(plan->audience_items);
    memset(plan, 0, sizeof *plan);
}

/* ------------------------------------------------------------------------ */
/* Planning */

/* The fields of the plan table gen:plan returns, as runtime.PLAN_FIELDS in
 * lua/crier/runtime.lua declares them (PLAN_<LEVEL>_<FIELD>, the plan's own
 * fields without a level). This file reads no other field, and only through
 * these names: tests/lua/plan_fields_spec.lua checks both against the
 * declaration. */
#define PLAN_NEXT_CURSOR "next_cursor"
#define PLAN_AUDIENCE_ITEMS "audience_items"
#define PLAN_ENTRY_RECIPIENT "recipient"
#define PLAN_ENTRY_DISCRIMINATOR "discriminator"
#define PLAN_ENTRY_DELIVERIES "deliveries"
#define PLAN_DELIVERY_CHANNEL "channel"
#define PLAN_DELIVERY_TARGET "target"
#define PLAN_DELIVERY_BODY "body"
#define PLAN_DELIVERY_SECRET "secret"
#define PLAN_DELIVERY_SUBJECT "subject"
#define PLAN_DELIVERY_HTML "html"
#define PLAN_DELIVERY_FROM "from"
#define PLAN_DELIVERY_RETRY_LITERAL "retry_literal"
#define PLAN_DELIVERY_HONOR_PREFERENCES "honor_preferences"
#define PLAN_DELIVERY_TIMING "timing"
#define PLAN_AUDIENCE_ITEM_AUDIENCE "audience"
#define PLAN_AUDIENCE_ITEM_CONTENT "content"
#define PLAN_AUDIENCE_ITEM_BACKFILL "backfill"

static crier_plan_status status_from_code(const char *code)
{
    if (code && strcmp(code, "unknown_event_type") == 0)
        return CRIER_PLAN_UNKNOWN_TYPE;
    if (code && strcmp(code, "invalid_payload") == 0)
        return CRIER_PLAN_INVALID_PAYLOAD;
    if (code && strcmp(code, "slow") == 0)
        return CRIER_PLAN_SLOW;
    return CRIER_PLAN_RULE_ERROR;
}

/* The plan's field names as Lua strings, made once: lua_getfield interns its
 * key on every call (a hash, then a compare in the string table), about 70
 * times per event of 5 recipients. The table at keys (plan_keys_ref) maps
 * each PLAN_ constant's address to its string. */
static void push_plan_key(lua_State *L, int keys, const char *key)
{
    lua_pushlightuserdata(L, (void *)key);
    lua_rawget(L, keys);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushstring(L, key);
        lua_pushlightuserdata(L, (void *)key);
        lua_pushvalue(L, -2);
        lua_rawset(L, keys);
    }
}

/* lua_getfield(L, idx, key) with the key's string from keys. */
static void plan_getfield(lua_State *L, int idx, const char *key, int keys)
{
    if (idx < 0)
        idx = lua_gettop(L) + idx + 1;
    push_plan_key(L, keys, key);
    lua_gettable(L, idx);
}

/* Copies the string field `key` of the table at idx into plan storage.
 * Returns 0 (with *out NULL when the field is nil and optional), or -1 with
 * *why set. */
static int copy_field(lua_State *L, int idx, const char *key, int optional, int keys, crier_plan *plan,
                      const char **out, size_t *out_len, const char **why)
{
    size_t len;
    const char *s;
    int rc = 0;
    plan_getfield(L, idx, key, keys);
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (lua_isnil(L, -1) && optional)
        goto out;
    if (lua_type(L, -1) != LUA_TSTRING) {
        *why = key;
        rc = -1;
        goto out;
    }
    s = lua_tolstring(L, -1, &len);
    *out = plan_store(plan, s, len);
    if (!*out) {
        *why = "out of memory";
        rc = -1;
        goto out;
    }
    if (out_len)
        *out_len = len;
out:
    lua_pop(L, 1);
    return rc;
}

/* Appends the plan table at the top of the stack to plan. Returns 0, or -1
 * with err set (the caller rolls back). */
static int append_plan(crier_rules *rules, size_t slot, crier_plan *plan, char *err, size_t err_len)
{
    lua_State *L = rules->L;
    int top = lua_gettop(L);
    int keys = top + 1;
    const char *why = NULL;
    size_t n;
    if (lua_type(L, top) != LUA_TTABLE) {
        crier_set_error(err, err_len, "crier.runtime returned a %s instead of a plan",
                luaL_typename(L, top));
        return -1;
    }
    lua_checkstack(L, 12);
    lua_rawgeti(L, LUA_REGISTRYINDEX, rules->plan_keys_ref); /* at keys */
    n = lua_objlen(L, top);
    for (size_t i = 1; i <= n; i++) {
        crier_plan_recipient *r;
        const char *recipient, *discriminator;
        size_t n_deliveries, first;
        lua_rawgeti(L, top, (int)i);
        if (lua_type(L, -1) != LUA_TTABLE) {
            why = "entry";
            goto fail;
        }
        if (copy_field(L, -1, PLAN_ENTRY_RECIPIENT, 0, keys, plan, &recipient, NULL, &why) != 0 ||
            copy_field(L, -1, PLAN_ENTRY_DISCRIMINATOR, 1, keys, plan, &discriminator, NULL, &why) != 0)
            goto fail;
        if (recipient[0] == '\0') {
            why = PLAN_ENTRY_RECIPIENT;
            goto fail;
        }
        plan_getfield(L, -1, PLAN_ENTRY_DELIVERIES, keys);
        if (lua_type(L, -1) != LUA_TTABLE) {
            why = PLAN_ENTRY_DELIVERIES;
            goto fail;
        }
        first = plan->n_deliveries;
        n_deliveries = lua_objlen(L, -1);
        for (size_t j = 1; j <= n_deliveries; j++) {
            crier_plan_delivery *d;
            const char *channel, *target, *body, *secret, *subject, *html, *sender, *retry, *timing;
            size_t body_len;
            lua_rawgeti(L, -1, (int)j);
            if (lua_type(L, -1) != LUA_TTABLE) {
                why = "delivery";
                goto fail;
            }
            if (copy_field(L, -1, PLAN_DELIVERY_CHANNEL, 0, keys, plan, &channel, NULL, &why) != 0 ||
                copy_field(L, -1, PLAN_DELIVERY_TARGET, 0, keys, plan, &target, NULL, &why) != 0 ||
                copy_field(L, -1, PLAN_DELIVERY_BODY, 0, keys, plan, &body, &body_len, &why) != 0 ||
                copy_field(L, -1, PLAN_DELIVERY_SECRET, 1, keys, plan, &secret, NULL, &why) != 0 ||
                copy_field(L, -1, PLAN_DELIVERY_SUBJECT, 1, keys, plan, &subject, NULL, &why) != 0 ||
                copy_field(L, -1, PLAN_DELIVERY_HTML, 1, keys, plan, &html, NULL, &why) != 0 ||
                copy_field(L, -1, PLAN_DELIVERY_FROM, 1, keys, plan, &sender, NULL, &why) != 0 ||
                copy_field(L, -1, PLAN_DELIVERY_RETRY_LITERAL, 1, keys, plan, &retry, NULL, &why) != 0 ||
                copy_field(L, -1, PLAN_DELIVERY_TIMING, 1, keys, plan, &timing, NULL, &why) != 0)
                goto fail;
            d = plan_add_delivery(plan);
            if (!d) {
                why = "out of memory";
                goto fail;
            }
            d->channel = channel;
            d->target = target;
            d->body = body;
            d->body_len = body_len;
            d->secret = secret;
            d->subject = subject;
            d->html = html;
            d->sender = sender;
            d->retry = retry;
            d->timing = timing;
            plan_getfield(L, -1, PLAN_DELIVERY_HONOR_PREFERENCES, keys);
            d->honor_preferences = lua_isnil(L, -1) || lua_toboolean(L, -1);
            lua_pop(L, 1);
            lua_pop(L, 1);
        }
        lua_pop(L, 2); /* deliveries, entry */
        r = plan_add_recipient(plan);
        if (!r) {
            why = "out of memory";
            goto fail;
        }
        r->slot = slot;
        r->recipient = recipient;
        r->discriminator = discriminator;
        r->first_delivery = first;
        r->n_deliveries = n_deliveries;
    }
    /* mode = "read": { audience_items = { { audience, content, backfill }, ... } } */
    plan_getfield(L, top, PLAN_AUDIENCE_ITEMS, keys);
    if (lua_type(L, -1) == LUA_TTABLE) {
        size_t m = lua_objlen(L, -1);
        for (size_t i = 1; i <= m; i++) {
            const char *audience, *content;
            lua_rawgeti(L, -1, (int)i);
            if (lua_type(L, -1) != LUA_TTABLE) {
                why = "audience item";
                goto fail;
            }
            if (copy_field(L, -1, PLAN_AUDIENCE_ITEM_AUDIENCE, 0, keys, plan, &audience, NULL, &why) != 0 ||
                copy_field(L, -1, PLAN_AUDIENCE_ITEM_CONTENT, 0, keys, plan, &content, NULL, &why) != 0)
                goto fail;
            if (plan->n_audience_items == plan->cap_audience_items) {
                size_t cap = plan->cap_audience_items ? plan->cap_audience_items * 2 : 16;
                crier_plan_audience_item *grown = realloc(plan->audience_items, cap * sizeof *grown);
                if (!grown) {
                    why = "out of memory";
                    goto fail;
                }
                plan->audience_items = grown;
                plan->cap_audience_items = cap;
            }
            crier_plan_audience_item *a = &plan->audience_items[plan->n_audience_items++];
            a->slot = slot;
            a->audience = audience;
            a->content = content;
            plan_getfield(L, -1, PLAN_AUDIENCE_ITEM_BACKFILL, keys);
            a->backfill = lua_toboolean(L, -1);
            lua_pop(L, 2);
        }
    }
    lua_settop(L, top);
    return 0;
fail:
    lua_settop(L, top);
    if (strcmp(why, "out of memory") == 0)
        crier_set_error(err, err_len, "out of memory while copying the plan");
    else
        crier_set_error(err, err_len, "crier.runtime returned a malformed plan (bad %s)", why);
    return -1;
}

/* Pushes the generation and its method `name` as (method, generation). */
static void push_method(crier_rules *rules, const char *name)
{
    lua_State *L = rules->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, rules->generation_ref);
    lua_getfield(L, -1, name);
    lua_insert(L, -2);
}

/* The status and message of a failed plan or validate call, whose four
 * results (nil, err, code, detail) are on top of the stack. */
static crier_plan_status failure_status(lua_State *L, char *err, size_t err_len)
{
    const char *msg = lua_tostring(L, -3);
    const char *code = lua_tostring(L, -2);
    crier_set_error(err, err_len, "%s", msg ? msg : "rules failed without a message");
    return status_from_code(code);
}

/* Pushes the Lua table of an event (gen:plan's argument). */
static void push_event(lua_State *L, const crier_rule_event *ev)
{
    lua_createtable(L, 0, 5);
    lua_pushnumber(L, (lua_Number)ev->id);
    lua_setfield(L, -2, "id");
    lua_pushstring(L, ev->tenant ? ev->tenant : "");
    lua_setfield(L, -2, "tenant");
    lua_pushstring(L, ev->event_type ? ev->event_type : "");
    lua_setfield(L, -2, "type");
    lua_pushstring(L, ev->entity_id ? ev->entity_id : "");
    lua_setfield(L, -2, "entity_id");
    lua_pushstring(L, ev->payload_json ? ev->payload_json : "{}");
    lua_setfield(L, -2, "payload_json");
    if (ev->cursor) {
        lua_pushstring(L, ev->cursor);
        lua_setfield(L, -2, "cursor");
    }
    if (ev->slow_after > 0) {
        lua_pushnumber(L, ev->slow_after);
        lua_setfield(L, -2, "slow_after");
    }
}

crier_plan_status crier_rules_plan(crier_rules *rules, const crier_rule_event *ev,
                                   crier_plan *plan, char *err, size_t err_len)
{
    lua_State *L = rules->L;
    int base = lua_gettop(L);
    crier_plan_status result = CRIER_PLAN_OK;
    plan_mark mark = plan_mark_take(plan);
    int status;

    push_method(rules, "plan");
    push_event(L, ev);

    plan->next_cursor = NULL;
    plan->limit_exceeded = false;
    plan->query_deferred = false;
    rules->query_deferred = false;
    status = rules_pcall(L, 2, 4); /* plan | nil, err, code, detail */
    if (rules->query_deferred) {
        /* whatever the rule made of the deferred query's error, this plan
         * is not the event's: it is planned again where queries run */
        plan_rollback(plan, mark);
        plan->next_cursor = NULL;
        plan->query_deferred = true;
        crier_set_error(err, err_len, "its rule queries the database (crier.query)");
        result = CRIER_PLAN_SLOW;
    } else if (status != 0) {
        crier_set_error(err, err_len, "%s", lua_error_text(L, status));
        result = CRIER_PLAN_RULE_ERROR;
    } else if (lua_isnil(L, -4)) {
        result = failure_status(L, err, err_len);
        plan->limit_exceeded = result == CRIER_PLAN_RULE_ERROR && lua_isstring(L, -1) &&
                               strcmp(lua_tostring(L, -1), "limit") == 0;
    } else {
        lua_pop(L, 3);
        if (append_plan(rules, ev->slot, plan, err, err_len) != 0) {
            plan_rollback(plan, mark);
            result = CRIER_PLAN_RULE_ERROR;
        } else {
            size_t len;
            const char *next;
            lua_getfield(L, -1, PLAN_NEXT_CURSOR);
            next = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
            if (next && !(plan->next_cursor = plan_store(plan, next, len))) {
                plan_rollback(plan, mark);
                crier_set_error(err, err_len, "out of memory while copying the plan");
                result = CRIER_PLAN_RULE_ERROR;
            }
        }
    }
    lua_settop(L, base);
    return result;
}

int crier_rules_batch_recipients(crier_rules *rules, const crier_rule_event *ev, crier_rules_recipient_fn fn,
                                 void *ud)
{
    lua_State *L = rules->L;
    int base = lua_gettop(L);
    int rc = 0;

    push_method(rules, "batch_recipients");
    push_event(L, ev);
    rules->query_deferred = false;
    if (rules_pcall(L, 2, 1) != 0) {
        crier_warn("rules", "event %lld: its recipients for the stored settings: %s", (long long)ev->id,
                   lua_tostring(L, -1));
        rc = -1;
    } else if (rules->query_deferred) {
        /* the list came from a query that did not run: forgotten, so that
         * the plan runs the recipients again, meets the deferral and hands
         * the event to the slow lane */
        lua_settop(L, base);
        push_method(rules, "forget_batch_recipients");
        push_event(L, ev);
        if (rules_pcall(L, 2, 0) != 0)
            crier_warn("rules", "event %lld: forgetting its recipients: %s", (long long)ev->id, lua_tostring(L, -1));
        rules->query_deferred = false;
    } else if (lua_istable(L, -1)) {
        size_t n = lua_objlen(L, -1);
        for (size_t i = 1; i <= n && rc == 0; i++) {
            lua_rawgeti(L, -1, (int)i);
            if (lua_type(L, -1) == LUA_TSTRING)
                rc = fn(ud, ev->tenant, lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    }
    lua_settop(L, base);
    return rc;
}

int crier_rules_set_batch_settings(crier_rules *rules, const PGresult *res)
{
    static const char *const columns[] = {"tenant", "recipient_id", "time_zone", "locale", "quiet_hours"};
    lua_State *L = rules->L;
    int base = lua_gettop(L);
    int rows = PQntuples(res), rc = 0;
    int col[5];

    for (int c = 0; c < 5; c++)
        if ((col[c] = PQfnumber(res, columns[c])) < 0)
            return -1;
    push_method(rules, "set_batch_settings");
    lua_createtable(L, rows, 0);
    for (int r = 0; r < rows; r++) {
        lua_createtable(L, 0, 5);
        for (int c = 0; c < 5; c++) {
            if (PQgetisnull(res, r, col[c]))
                continue;
            lua_pushlstring(L, PQgetvalue(res, r, col[c]), (size_t)PQgetlength(res, r, col[c]));
            lua_setfield(L, -2, columns[c]);
        }
        lua_rawseti(L, -2, r + 1);
    }
    if (rules_pcall(L, 2, 0) != 0) {
        crier_warn("rules", "stored settings: %s", lua_tostring(L, -1));
        rc = -1;
    }
    lua_settop(L, base);
    return rc;
}

void crier_rules_end_batch(crier_rules *rules)
{
    lua_State *L = rules->L;
    int base = lua_gettop(L);
    push_method(rules, "end_batch");
    if (rules_pcall(L, 1, 0) != 0)
        crier_warn("rules", "end of batch: %s", lua_tostring(L, -1));
    lua_settop(L, base);
}

crier_plan_status crier_rules_render_digest(crier_rules *rules, const char *input_json, size_t slot,
                                            crier_plan *plan, char *err, size_t err_len)
{
    lua_State *L = rules->L;
    int base = lua_gettop(L);
    crier_plan_status result = CRIER_PLAN_OK;
    plan_mark mark = plan_mark_take(plan);
    int status;

    push_method(rules, "render_digest");
    lua_pushstring(L, input_json);
    plan->next_cursor = NULL;
    plan->limit_exceeded = false;
    status = rules_pcall(L, 2, 4); /* plan | nil, err, code, detail */
    if (status != 0) {
        crier_set_error(err, err_len, "%s", lua_error_text(L, status));
        result = CRIER_PLAN_RULE_ERROR;
    } else if (lua_isnil(L, -4)) {
        result = failure_status(L, err, err_len);
    } else {
        lua_pop(L, 3);
        if (append_plan(rules, slot, plan, err, err_len) != 0) {
            plan_rollback(plan, mark);
            result = CRIER_PLAN_RULE_ERROR;
        }
    }
    lua_settop(L, base);
    return result;
}

/* The Lua side of crier.query in the engine: (name, sql, params, n) -> rows
 * (a list of { column = value }, NULL columns absent) or nil, err. */
static int rules_query_backend(lua_State *L)
{
    crier_rules *rules = lua_touserdata(L, lua_upvalueindex(1));
    const char *sql = luaL_checkstring(L, 2);
    int n = (int)luaL_optinteger(L, 4, 0);
    const char *values[64];
    char err[1024];

    if (!rules->query_fn) {
        lua_pushnil(L);
        lua_pushliteral(L, "no database is configured for queries");
        return 2;
    }
    if (rules->defer_queries) {
        /* the plan is thrown away and made again in the slow lane */
        rules->query_deferred = true;
        lua_pushnil(L);
        lua_pushliteral(L, "crier.query is deferred: this event is planned again in the slow lane");
        return 2;
    }
    if (n < 0 || n > 64) {
        lua_pushnil(L);
        lua_pushliteral(L, "too many parameters (at most 64)");
        return 2;
    }
    luaL_checktype(L, 3, LUA_TTABLE);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 3, i + 1);
        values[i] = lua_isnil(L, -1) ? NULL : lua_tostring(L, -1);
        lua_pop(L, 1); /* the strings stay referenced by the params table */
    }
    PGresult *res = rules->query_fn(rules->query_ud, sql, n, values, err, sizeof err);
    if (!res) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    int rows = PQntuples(res), cols = PQnfields(res);
    lua_createtable(L, rows, 0);
    for (int r = 0; r < rows; r++) {
        lua_createtable(L, 0, cols);
        for (int c = 0; c < cols; c++) {
            if (PQgetisnull(res, r, c))
                continue;
            lua_pushlstring(L, PQgetvalue(res, r, c), (size_t)PQgetlength(res, r, c));
            lua_setfield(L, -2, PQfname(res, c));
        }
        lua_rawseti(L, -2, r + 1);
    }
    PQclear(res);
    return 1;
}

int crier_rules_set_fake_queries(crier_rules *rules, const char *json, char *err, size_t err_len)
{
    static const char chunk[] =
        "local gen, text = ...\n"
        "local rows = require('crier.json').decode(text)\n"
        "gen:set_query_backend(require('crier.runtime').fake_query_backend(rows))\n";
    lua_State *L = rules->L;
    int base = lua_gettop(L);
    int rc = 0;
    if (luaL_loadbuffer(L, chunk, sizeof chunk - 1, "=fake queries") != 0) {
        crier_set_error(err, err_len, "%s", lua_tostring(L, -1));
        rc = -1;
    } else {
        lua_rawgeti(L, LUA_REGISTRYINDEX, rules->generation_ref);
        lua_pushstring(L, json);
        int status = rules_pcall(L, 2, 0);
        if (status != 0) {
            crier_set_error(err, err_len, "fake queries: %s", lua_error_text(L, status));
            rc = -1;
        }
    }
    lua_settop(L, base);
    return rc;
}

int crier_rules_set_recipient_locale(crier_rules *rules, const char *tag, char *err, size_t err_len)
{
    lua_State *L = rules->L;
    int base = lua_gettop(L);
    int rc = 0;
    push_method(rules, "set_recipient_locale");
    if (tag)
        lua_pushstring(L, tag);
    else
        lua_pushnil(L);
    int status = rules_pcall(L, 2, 2);
    if (status != 0) {
        crier_set_error(err, err_len, "locale: %s", lua_error_text(L, status));
        rc = -1;
    } else if (!lua_toboolean(L, -2)) {
        crier_set_error(err, err_len, "--locale: %s", lua_tostring(L, -1));
        rc = -1;
    }
    lua_settop(L, base);
    return rc;
}

void crier_rules_defer_queries(crier_rules *rules, bool defer)
{
    rules->defer_queries = defer;
}

void crier_rules_set_query(crier_rules *rules, crier_rules_query_fn fn, void *ud)
{
    lua_State *L = rules->L;
    int base = lua_gettop(L);
    rules->query_fn = fn;
    rules->query_ud = ud;
    push_method(rules, "set_query_backend");
    if (fn) {
        lua_pushlightuserdata(L, rules);
        lua_pushcclosure(L, rules_query_backend, 1);
    } else {
        lua_pushnil(L);
    }
    if (rules_pcall(L, 2, 0) != 0)
        crier_error("rules", "cannot set the query backend: %s", lua_tostring(L, -1));
    lua_settop(L, base);
}

crier_plan_status crier_rules_validate(crier_rules *rules, const char *event_type,
                                       const char *payload_json, char *err, size_t err_len)
{
    lua_State *L = rules->L;
    int base = lua_gettop(L);
    crier_plan_status result = CRIER_PLAN_OK;
    int status;

    push_method(rules, "validate");
    lua_pushstring(L, event_type ? event_type : "");
    lua_pushstring(L, payload_json ? payload_json : "");
    status = rules_pcall(L, 3, 4); /* true | nil, err, code, (nothing) */
    if (status != 0) {
        crier_set_error(err, err_len, "%s", lua_error_text(L, status));
        result = CRIER_PLAN_RULE_ERROR;
    } else if (lua_isnil(L, -4)) {
        result = failure_status(L, err, err_len);
    }
    lua_settop(L, base);
    return result;
}

/* ------------------------------------------------------------------------ */
/* Schedules */

/* Calls gen:METHOD(arg) (arg < 0: no argument) and returns its string result
 * as a malloc'd copy, or NULL with err set. */
static char *rules_call_string(crier_rules *rules, const char *method, double arg, char *err, size_t err_len)
{
    lua_State *L = rules->L;
    int base = lua_gettop(L);
    char *out = NULL;
    push_method(rules, method);
    if (arg >= 0)
        lua_pushnumber(L, arg);
    int status = rules_pcall(L, arg >= 0 ? 2 : 1, 1);
    if (status != 0) {
        crier_set_error(err, err_len, "%s", lua_error_text(L, status));
    } else if (!lua_isstring(L, -1)) {
        crier_set_error(err, err_len, "gen:%s returned no text", method);
    } else {
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        out = malloc(len + 1);
        if (out) {
            memcpy(out, s, len);
            out[len] = 0;
        } else {
            crier_set_error(err, err_len, "out of memory");
        }
    }
    lua_settop(L, base);
    return out;
}

const char *crier_rules_schedules_json(crier_rules *rules)
{
    char err[1024];
    if (!rules->schedules_json) {
        rules->schedules_json = rules_call_string(rules, "schedules_json", -1, err, sizeof err);
        if (!rules->schedules_json) {
            crier_error("rules", "the rules' schedules: %s", err);
            return "[]";
        }
    }
    return rules->schedules_json;
}

char *crier_rules_describe_schedules(crier_rules *rules, double now, char *err, size_t err_len)
{
    return rules_call_string(rules, "describe_schedules", now, err, err_len);
}
