/* cli_config.c — the optional Lua configuration file (--config FILE or
 * CRIER_CONFIG): a Lua chunk that returns a table (or sets globals) whose keys
 * are long options, read into an argument vector that is parsed before the
 * command line, so flags given on the command line win. One file serves every
 * command: options at the top level apply to each command that has them (the
 * common ones: database, data_dir, rules, lua_dir, set), and a command's own
 * options go in a table named after it (serve, dead, bench_feed, …); the
 * other commands' tables are skipped.
 *
 *   -- crier.conf.lua
 *   return {
 *       database = "host=/run/postgresql dbname=crier",
 *       rules = "/etc/crier/rules",
 *       set = { billing_url = "https://…" }, -- --set billing_url=https://…
 *       serve = {
 *           http = "127.0.0.1:8080",
 *           batch_size = 500,                -- --batch-size 500
 *           smtp_url = "smtp://mail:25",
 *       },
 *   }
 *
 * Values: a string or number is the option's argument; true turns on a flag
 * that takes none (false leaves it off); an array repeats the option; a table
 * of names gives NAME=VALUE arguments (for --set). The chunk runs in an empty
 * environment with only os.getenv, string and a few base functions
 * (tostring, tonumber, type, error, assert, pairs, ipairs, select): a
 * configuration, not a program; secrets can come from the environment. */
#include "cli.h"
#include "alloc.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char **v;
    int n, cap;
} config_argv;

static void argv_push(config_argv *a, const char *s)
{
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? a->cap * 2 : 16;
        char **v = crier_xrealloc(a->v, (size_t)cap * sizeof *v);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n] = crier_xstrdup(s);
    a->n++;
    a->v[a->n] = NULL;
}

void crier_cli_config_free(char **argv)
{
    if (!argv)
        return;
    for (char **p = argv; *p; p++)
        free(*p);
    free(argv);
}

/* The option named like key (underscores as dashes), or NULL. */
static const struct option *config_option(const struct option *options, const char *key, char *name,
                                          size_t name_len)
{
    snprintf(name, name_len, "%s", key);
    for (char *c = name; *c; c++)
        if (*c == '_')
            *c = '-';
    for (const struct option *o = options; o->name; o++)
        if (!strcmp(o->name, name))
            return o;
    return NULL;
}

/* A scalar at the top of the stack as an option argument. */
static const char *config_scalar(lua_State *L, char *buf, size_t len)
{
    if (lua_type(L, -1) == LUA_TSTRING)
        return lua_tostring(L, -1);
    if (lua_type(L, -1) == LUA_TNUMBER) {
        double v = lua_tonumber(L, -1);
        if (v == (double)(long long)v)
            snprintf(buf, len, "%lld", (long long)v);
        else
            snprintf(buf, len, "%.17g", v);
        return buf;
    }
    return NULL;
}

/* Adds the arguments of one key (its value at the top of the stack). */
static int config_add(lua_State *L, const char *cmd, const char *path, const char *key,
                      const struct option *o, config_argv *out)
{
    char flag[160], num[64];
    const char *s;
    snprintf(flag, sizeof flag, "--%s", o->name);
    if (lua_type(L, -1) == LUA_TBOOLEAN) {
        if (o->has_arg != no_argument) {
            crier_cli_error(cmd, "%s: %s takes a value (--%s VALUE), not a boolean", path, key, o->name);
            return -1;
        }
        if (lua_toboolean(L, -1))
            argv_push(out, flag);
        return 0;
    }
    if (o->has_arg == no_argument) {
        crier_cli_error(cmd, "%s: %s is a switch: set it to true or false", path, key);
        return -1;
    }
    if ((s = config_scalar(L, num, sizeof num))) {
        argv_push(out, flag);
        argv_push(out, s);
        return 0;
    }
    if (lua_type(L, -1) != LUA_TTABLE) {
        crier_cli_error(cmd, "%s: %s must be a string, a number, a list or a table of NAME = VALUE, got %s",
                        path, key, luaL_typename(L, -1));
        return -1;
    }
    /* a list repeats the option; NAME = VALUE pairs give NAME=VALUE */
    int n = (int)lua_objlen(L, -1);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        s = config_scalar(L, num, sizeof num);
        if (!s) {
            crier_cli_error(cmd, "%s: %s[%d] must be a string or a number", path, key, i);
            lua_pop(L, 1);
            return -1;
        }
        argv_push(out, flag);
        argv_push(out, s);
        lua_pop(L, 1);
    }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -2) == LUA_TNUMBER) {
            lua_pop(L, 1);
            continue;
        }
        if (lua_type(L, -2) != LUA_TSTRING || !(s = config_scalar(L, num, sizeof num))) {
            crier_cli_error(cmd, "%s: %s must map names to strings or numbers", path, key);
            lua_pop(L, 2);
            return -1;
        }
        char *pair = crier_xmalloc(strlen(lua_tostring(L, -2)) + strlen(s) + 2);
        sprintf(pair, "%s=%s", lua_tostring(L, -2), s);
        argv_push(out, flag);
        argv_push(out, pair);
        free(pair);
        lua_pop(L, 1);
    }
    return 0;
}

/* The base functions a config file may use (besides os.getenv and string). */
static const char *const config_base[] = {"tostring", "tonumber", "type",   "error", "assert",
                                          "pairs",    "ipairs",   "select", NULL};

/* "bench feed" → "bench_feed": the name of a command's table. */
static void config_section_name(const char *cmd, char *out, size_t len)
{
    snprintf(out, len, "%s", cmd);
    for (char *c = out; *c; c++)
        if (*c == ' ' || *c == '-')
            *c = '_';
}

/* Adds the options of the table at the top of the stack. At the top level
 * (section NULL) a table that is not an option is another command's section
 * and is skipped; in a section every key must be an option. */
static int config_table(lua_State *L, const char *cmd, const char *path, const char *section,
                        const struct option *options, config_argv *out)
{
    char own[64];
    config_section_name(cmd, own, sizeof own);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        char name[128];
        const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        const struct option *o = key ? config_option(options, key, name, sizeof name) : NULL;
        if (o && (!strcmp(o->name, "config") || !strcmp(o->name, "help")))
            o = NULL;
        if (!o && !section && key && (lua_istable(L, -1) || !strcmp(key, own))) {
            lua_pop(L, 1); /* a command's table: its own, read next, or another's */
            continue;
        }
        if (!o) {
            if (section)
                crier_cli_error(cmd, "%s: %s: unknown setting '%s' for crier %s (see crier %s --help: its "
                                "long options, with _ or -)", path, section, key ? key : luaL_typename(L, -2),
                                cmd, cmd);
            else
                crier_cli_error(cmd, "%s: unknown setting '%s' for crier %s: the top level holds the "
                                "options every command has (database, data_dir, rules, lua_dir, set); "
                                "put a command's own options in a table named after it, e.g. "
                                "%s = { %s = ... }", path, key ? key : luaL_typename(L, -2), cmd, own,
                                key ? key : "...");
            lua_pop(L, 2);
            return -1;
        }
        if (config_add(L, cmd, path, key, o, out) < 0) {
            lua_pop(L, 2);
            return -1;
        }
        lua_pop(L, 1);
    }
    return 0;
}

int crier_cli_config_read(const char *cmd, const char *path, const struct option *options, char ***argv,
                          int *argc)
{
    char section[64];
    config_argv out = {0};
    lua_State *L = luaL_newstate();
    int rc = -1;

    if (!L) {
        crier_cli_error(cmd, "%s: out of memory", path);
        return -1;
    }
    argv_push(&out, cmd);
    if (luaL_loadfile(L, path) != 0) {
        crier_cli_error(cmd, "cannot read the config file %s", lua_tostring(L, -1));
        goto out;
    }
    /* an environment with what a configuration needs, nothing more */
    lua_newtable(L);
    lua_pushcfunction(L, luaopen_os);
    lua_call(L, 0, 1);
    lua_newtable(L);
    lua_getfield(L, -2, "getenv");
    lua_setfield(L, -2, "getenv");
    lua_setfield(L, -3, "os");
    lua_pop(L, 1);
    lua_pushcfunction(L, luaopen_base);
    lua_call(L, 0, 0);
    lua_pushcfunction(L, luaopen_string);
    lua_call(L, 0, 1);
    lua_setfield(L, -2, "string");
    for (const char *const *f = config_base; *f; f++) {
        lua_getglobal(L, *f);
        lua_setfield(L, -2, *f);
    }
    lua_pushvalue(L, -1);
    lua_insert(L, -3); /* env, chunk, env */
    lua_setfenv(L, -2);
    if (lua_pcall(L, 0, 1, 0) != 0) {
        crier_cli_error(cmd, "the config file failed: %s", lua_tostring(L, -1));
        goto out;
    }
    if (lua_isnil(L, -1)) { /* no table returned: the globals it set */
        lua_pop(L, 1);
        lua_pushnil(L);
        lua_setfield(L, -2, "os");
        lua_pushnil(L);
        lua_setfield(L, -2, "string");
        for (const char *const *f = config_base; *f; f++) {
            lua_pushnil(L);
            lua_setfield(L, -2, *f);
        }
    } else if (!lua_istable(L, -1)) {
        crier_cli_error(cmd, "%s: the config file must return a table of settings (got %s)", path,
                        luaL_typename(L, -1));
        goto out;
    }
    /* the top level, then the command's own table */
    if (config_table(L, cmd, path, NULL, options, &out) < 0)
        goto out;
    config_section_name(cmd, section, sizeof section);
    lua_getfield(L, -1, section);
    if (lua_istable(L, -1) && config_table(L, cmd, path, section, options, &out) < 0)
        goto out;
    if (!lua_isnil(L, -1) && !lua_istable(L, -1)) {
        crier_cli_error(cmd, "%s: %s must be a table of crier %s's options", path, section, cmd);
        goto out;
    }
    rc = 0;
out:
    lua_close(L);
    if (rc < 0) {
        crier_cli_config_free(out.v);
        return -1;
    }
    *argv = out.v;
    *argc = out.n;
    return 0;
}
