/* cli_install.c — what this binary is and where its files are: `crier
 * --version` (the version, the embedded schema's latest migration and
 * checksum, the Lua library in use), and the installed layout beside the
 * binary — or, for a binary in its build directory, the source tree — that
 * gives --lua-dir's default and the bundled example rules (see cli.h). */
#include "cli.h"
#include "install_paths.h"
#include "migrate.h"

#include <luajit.h>
#include <stdio.h>
#include <string.h>

static crier_install_paths install_paths;
static char install_rules[CRIER_INSTALL_PATH_MAX + 8];
static bool install_found;

const crier_install_paths *crier_cli_install_paths(void)
{
    char exe[CRIER_INSTALL_PATH_MAX];

    if (install_found)
        return &install_paths;
    install_found = true;
    if (crier_install_paths_self(exe, sizeof exe, NULL, 0) == 0) {
        crier_install_paths_find(exe, CRIER_DATA_FROM_BIN, CRIER_BUILD_DIR, CRIER_SOURCE_DIR,
                                 &install_paths);
    } else {
        install_paths.origin = CRIER_PATHS_NONE;
        snprintf(install_paths.lua_dir, sizeof install_paths.lua_dir,
                 "(unknown: /proc/self/exe is unreadable)");
        snprintf(install_paths.examples_dir, sizeof install_paths.examples_dir, "%s",
                 install_paths.lua_dir);
    }
    snprintf(install_rules, sizeof install_rules, "%s/rules", install_paths.examples_dir);
    return &install_paths;
}

const char *crier_cli_bundled_rules(void)
{
    crier_cli_install_paths();
    return install_rules;
}

/* Where the bundled files were found, for --help and --version. */
static const char *install_origin(const crier_install_paths *p)
{
    switch (p->origin) {
    case CRIER_PATHS_INSTALLED:
        return "installed with this binary, " CRIER_DATA_FROM_BIN "/lua beside it";
    case CRIER_PATHS_SOURCE_TREE:
        return "the source tree: this binary runs from its build directory";
    case CRIER_PATHS_NONE:
        break;
    }
    return "not found beside this binary: give --lua-dir DIR or CRIER_LUA_DIR";
}

void crier_cli_print_paths(FILE *out, const crier_cli *cli)
{
    const crier_install_paths *p = crier_cli_install_paths();
    fprintf(out, "\nthis crier's Lua library: %s (%s)\n", cli->lua_dir,
            cli->lua_dir_given ? "from --lua-dir or CRIER_LUA_DIR" : install_origin(p));
    fprintf(out, "the bundled example rules: %s\n", crier_cli_bundled_rules());
}

int crier_cli_require_lua_dir(const char *cmd, const crier_cli *cli)
{
    const crier_install_paths *p = crier_cli_install_paths();
    if (cli->lua_dir_given || p->origin != CRIER_PATHS_NONE)
        return 0;
    fprintf(stderr,
            "crier%s%s: cannot find crier's Lua library: it belongs at %s, beside the binary "
            "(%s), and only a binary in its build directory uses the source tree; give "
            "--lua-dir DIR or CRIER_LUA_DIR\n",
            cmd ? " " : "", cmd ? cmd : "", p->lua_dir, CRIER_DATA_FROM_BIN "/lua");
    return -1;
}

int crier_cmd_version(int argc, char **argv)
{
    const crier_install_paths *p = crier_cli_install_paths();
    char checksum[65];
    crier_cli cli;

    (void)argc;
    (void)argv;
    crier_cli_init(&cli);
    crier_migrate_schema_checksum(checksum);
    printf("crier %s\n", CRIER_VERSION);
    printf("schema: %zu migrations up to %s, %zu function files; sql checksum %.12s\n",
           crier_migrations_count,
           crier_migrations_count ? crier_migrations[crier_migrations_count - 1].name : "(none)",
           crier_functions_count, checksum);
    printf("rules runtime: %s; Lua library %s (%s)\n", LUAJIT_VERSION, cli.lua_dir,
           cli.lua_dir_given ? "from CRIER_LUA_DIR" : install_origin(p));
    crier_cli_free(&cli);
    return 0;
}
