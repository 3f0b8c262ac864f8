/* install_paths.h — where the files a crier binary comes with (the Lua
 * library, the example rules) are, found from the binary's own path: the
 * installed layout beside it (BINDIR/../share/crier: /usr/bin/crier uses
 * /usr/share/crier/lua), else — only for a binary that runs from its build
 * directory — the source tree it was built from. No other path is assumed.
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: log (crier_set_error).
 */
#ifndef CRIER_INSTALL_PATHS_H
#define CRIER_INSTALL_PATHS_H

#include <stddef.h>

#define CRIER_INSTALL_PATH_MAX 4096

typedef enum {
    CRIER_PATHS_INSTALLED,   /* the installed layout beside the binary */
    CRIER_PATHS_SOURCE_TREE, /* a binary in its build directory: the source tree */
    CRIER_PATHS_NONE,        /* neither has the Lua library */
} crier_paths_origin;

typedef struct {
    crier_paths_origin origin;
    char lua_dir[CRIER_INSTALL_PATH_MAX];      /* holds crier/init.lua */
    char examples_dir[CRIER_INSTALL_PATH_MAX]; /* holds rules/ (the example rules) */
} crier_install_paths;

/* Finds the files of the binary at exe (an absolute path, symbolic links
 * resolved). data_from_bin: the data directory relative to the binary's
 * directory ("../share/crier", from CMake's GNUInstallDirs); build_dir and
 * source_dir: where the binary was built and from what (either may be NULL).
 * The installed layout wins when its lua/crier/init.lua exists; else the
 * source tree is used when exe's directory is build_dir (both resolved) and
 * source_dir has lua/crier/init.lua. Fills *out; with CRIER_PATHS_NONE its
 * directories name where the installed layout would have them. */
void crier_install_paths_find(const char *exe, const char *data_from_bin, const char *build_dir,
                              const char *source_dir, crier_install_paths *out);

/* Writes the running binary's resolved path (/proc/self/exe) to out (len
 * bytes). Returns 0, or -1 with err set. */
int crier_install_paths_self(char *out, size_t len, char *err, size_t err_len);

#endif
