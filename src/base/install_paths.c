/* install_paths.c — the installed layout beside the binary, or the source
 * tree of a binary in its build directory (see install_paths.h). */
#include "install_paths.h"
#include "log.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether dir holds the crier Lua library (crier/init.lua). */
static bool paths_has_library(const char *dir)
{
    char path[CRIER_INSTALL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/crier/init.lua", dir);
    return access(path, R_OK) == 0;
}

/* Whether directories a and b are the same one (both resolved). */
static bool paths_same_dir(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

/* Removes "." and "NAME/.." steps from the absolute path p, in place
 * (for a path that does not exist, so realpath cannot tidy it). */
static void paths_tidy(char *p)
{
    char *out = p, *in = p;
    while (*in) {
        size_t n;
        while (*in == '/')
            in++;
        n = strcspn(in, "/");
        if (n == 1 && in[0] == '.') {
            /* skip */
        } else if (n == 2 && in[0] == '.' && in[1] == '.') {
            while (out > p && *--out != '/')
                ;
        } else if (n > 0) {
            *out++ = '/';
            memmove(out, in, n);
            out += n;
        }
        in += n;
    }
    if (out == p)
        *out++ = '/';
    *out = '\0';
}

/* Writes dir/rel to out (len bytes), resolved when it exists, else tidied:
 * /usr/share/crier, not /usr/bin/../share/crier. */
static void paths_join(const char *dir, const char *rel, char *out, size_t len)
{
    char resolved[PATH_MAX];
    int n = snprintf(out, len, "%s/%s", dir, rel);
    if (n <= 0 || (size_t)n >= len)
        return;
    if (realpath(out, resolved) && strlen(resolved) < len)
        memcpy(out, resolved, strlen(resolved) + 1);
    else if (out[0] == '/')
        paths_tidy(out);
}

void crier_install_paths_find(const char *exe, const char *data_from_bin, const char *build_dir,
                              const char *source_dir, crier_install_paths *out)
{
    char bin_dir[CRIER_INSTALL_PATH_MAX], data_dir[CRIER_INSTALL_PATH_MAX];
    const char *slash = strrchr(exe, '/');
    size_t n = slash ? (size_t)(slash - exe) : 0;

    if (n >= sizeof bin_dir)
        n = sizeof bin_dir - 1;
    memcpy(bin_dir, exe, n);
    bin_dir[n] = '\0';
    if (!slash)
        snprintf(bin_dir, sizeof bin_dir, ".");
    else if (n == 0)
        snprintf(bin_dir, sizeof bin_dir, "/");
    paths_join(bin_dir, data_from_bin, data_dir, sizeof data_dir);
    paths_join(data_dir, "lua", out->lua_dir, sizeof out->lua_dir);
    paths_join(data_dir, "examples", out->examples_dir, sizeof out->examples_dir);
    out->origin = CRIER_PATHS_INSTALLED;
    if (paths_has_library(out->lua_dir))
        return;
    if (build_dir && source_dir && paths_same_dir(bin_dir, build_dir)) {
        char lua_dir[CRIER_INSTALL_PATH_MAX];
        paths_join(source_dir, "lua", lua_dir, sizeof lua_dir);
        if (paths_has_library(lua_dir)) {
            snprintf(out->lua_dir, sizeof out->lua_dir, "%s", lua_dir);
            paths_join(source_dir, "examples", out->examples_dir, sizeof out->examples_dir);
            out->origin = CRIER_PATHS_SOURCE_TREE;
            return;
        }
    }
    out->origin = CRIER_PATHS_NONE;
}

int crier_install_paths_self(char *out, size_t len, char *err, size_t err_len)
{
    ssize_t n = readlink("/proc/self/exe", out, len);
    if (n < 0 || (size_t)n >= len) {
        crier_set_error(err, err_len, "cannot find this binary's path in /proc/self/exe: %s",
                        n < 0 ? strerror(errno) : "too long");
        return -1;
    }
    out[n] = '\0';
    return 0;
}
