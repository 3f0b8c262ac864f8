/* cli.h — what every subcommand shares: the common flags (database, data
 * directory, rules, settings), their environment fallbacks, and the commands'
 * entry points (each returns the process exit status).
 *
 * Layer: cli (src/cli/), may use engine, api and every layer below them.
 * Calls into: database, migrate (pg), rules, rules_query (rules), alloc, install_paths (base).
 */
#ifndef CRIER_CLI_H
#define CRIER_CLI_H

#include "database.h"
#include "install_paths.h"
#include "rules.h"
#include "rules_query.h"

#include <getopt.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>

#define CRIER_MAX_SETTINGS 64

enum {
    CLI_OPT_DATABASE = 1000,
    CLI_OPT_DATA_DIR,
    CLI_OPT_RULES,
    CLI_OPT_LUA_DIR,
    CLI_OPT_CONFIG,
    CLI_OPT_SET,
    CLI_OPT_HELP,
    CLI_OPT_RULES_DATABASE,
    CLI_OPT_ALLOW_PRIVILEGED_RULE_QUERIES,
};

/* The long options every subcommand accepts; put CLI_COMMON_OPTIONS first in
 * a subcommand's option table. */
#define CLI_COMMON_OPTIONS                                                                         \
    {"database", required_argument, NULL, CLI_OPT_DATABASE},                                      \
        {"data-dir", required_argument, NULL, CLI_OPT_DATA_DIR},                                  \
        {"rules", required_argument, NULL, CLI_OPT_RULES},                                        \
        {"lua-dir", required_argument, NULL, CLI_OPT_LUA_DIR},                                    \
        {"set", required_argument, NULL, CLI_OPT_SET},                                            \
        {"config", required_argument, NULL, CLI_OPT_CONFIG}, {"help", no_argument, NULL, CLI_OPT_HELP}

#define CLI_COMMON_HELP                                                                            \
    "  --database URL     libpq connection string (default: $CRIER_DATABASE_URL, else the\n"      \
    "                     embedded cluster)\n"                                                     \
    "  --data-dir DIR     embedded cluster directory (default: $CRIER_DATA_DIR or ./.crier/pg)\n"  \
    "  --rules DIR        rules directory (default: $CRIER_RULES; serve needs one, the other\n"    \
    "                     commands use the bundled example rules, named below)\n"               \
    "  --lua-dir DIR      the crier Lua library (default: $CRIER_LUA_DIR, else this binary's,\n"  \
    "                     named below)\n"                                                        \
    "  --set NAME=VALUE   a setting for the rules (crier.setting); also CRIER_SET_NAME=VALUE\n"    \
    "  --config FILE      a Lua file returning a table of these options (batch_size = 500,\n"    \
    "                     set = { url = \"…\" }); flags given here win (also CRIER_CONFIG)\n"   \
    "  --help             this text\n"

/* The options of the commands that run rule queries (serve, try): put
 * CLI_RULE_QUERY_OPTIONS after CLI_COMMON_OPTIONS and CLI_RULE_QUERY_HELP in
 * the help. */
#define CLI_RULE_QUERY_OPTIONS                                                                     \
    {"rules-database", required_argument, NULL, CLI_OPT_RULES_DATABASE},                          \
        {"allow-privileged-rule-queries", no_argument, NULL, CLI_OPT_ALLOW_PRIVILEGED_RULE_QUERIES}

#define CLI_RULE_QUERY_HELP                                                                        \
    "  --rules-database URL  the connection of the rules' queries (crier.query), as an\n"          \
    "                     unprivileged role that reads only what you grant it (default:\n"       \
    "                     $CRIER_RULES_DATABASE_URL, else the database as role crier_rules,\n"  \
    "                     which crier migrate creates: GRANT it your tables)\n"                \
    "  --allow-privileged-rule-queries  run rule queries even when their role is a\n"          \
    "                     superuser or may read files, run programs or crier's own\n"          \
    "                     tables (refused otherwise)\n"

typedef struct {
    const char *database;
    const char *rules_database;        /* --rules-database (NULL: the default) */
    bool allow_privileged_rule_queries; /* --allow-privileged-rule-queries */
    const char *data_dir;
    const char *rules_dir;
    const char *lua_dir;
    bool rules_given;   /* rules_dir came from --rules, CRIER_RULES or the config file */
    bool lua_dir_given; /* lua_dir came from --lua-dir, CRIER_LUA_DIR or the config file */
    crier_setting settings[CRIER_MAX_SETTINGS];
    char *setting_storage[CRIER_MAX_SETTINGS];
    size_t n_settings;
    bool help;
    char **config_argv; /* the config file's options, as arguments (owned) */
} crier_cli;

/* Fills defaults from the environment (CRIER_RULES, CRIER_LUA_DIR,
 * CRIER_SET_*), else the bundled files (crier_cli_install_paths: the Lua
 * library, and the example rules, which serve refuses to run by default).
 * Call before parsing flags. */
void crier_cli_init(crier_cli *cli);

/* Adds or replaces a setting "NAME=VALUE". Returns 0 or -1 (message printed). */
int crier_cli_set(crier_cli *cli, const char *name_value);

/* Reads the Lua config file at path for command cmd: its keys must be long
 * options of options (underscores for dashes). On success *argv (owned:
 * crier_cli_config_free) holds cmd and the options as arguments, *argc their
 * count. Returns 0, or -1 with a message printed. */
int crier_cli_config_read(const char *cmd, const char *path, const struct option *options, char ***argv,
                          int *argc);
void crier_cli_config_free(char **argv);

/* A command's handler for its own options: returns 0, or -1 after printing
 * what was wrong with the value. */
typedef int (*crier_cli_opt_fn)(void *ud, int opt, const char *arg);

/* Parses argv (argv[0] is the command name) with getopt_long over options,
 * which must start with CLI_COMMON_OPTIONS; common options fill cli, the others
 * go to on_opt. Returns 0 to go on (optind indexes the first positional
 * argument), or 1 when the command should exit with *rc: 0 after --help, 2
 * after a bad flag (what was wrong goes to stderr, with a suggestion for a
 * mistyped option and a line pointing at --help). */
int crier_cli_parse(crier_cli *cli, const char *help, int argc, char **argv, const struct option *options,
                    crier_cli_opt_fn on_opt, void *ud, int *rc);

/* Parses a positive integer flag value no larger than max, or prints
 * "crier CMD: --NAME expects …" and returns -1. */
int crier_cli_positive_int(const char *cmd, const char *name, const char *arg, long max, int *out);

/* Parses a positive duration: a number with an optional unit ms, s, m, h or d
 * ("90", "1.5s", "250ms", "30m", "5d") into seconds, or prints "crier CMD: --NAME
 * expects …" and returns -1. */
int crier_cli_duration(const char *cmd, const char *name, const char *arg, double *seconds);

/* Reads a whole file ("-": standard input) into a NUL-terminated buffer the
 * caller frees. NULL with errno set on failure. */
char *crier_cli_read_file(const char *path);

/* What the rules' queries' role may be, per --allow-privileged-rule-queries. */
crier_rules_query_role crier_cli_rule_query_role(const crier_cli *cli);

/* Frees setting storage. */
void crier_cli_free(crier_cli *cli);

/* Opens the database named by cli (crier_database_open: the embedded cluster
 * is started when none is configured), connects to it, and checks that it
 * holds this crier's schema (crier_migrate_check). Returns the connection
 * (the caller PQfinishes it, then crier_database_close(db)), or NULL after
 * printing "crier CMD: …" — "run crier migrate" for an unmigrated database —
 * with db closed. */
PGconn *crier_cli_connect(const char *cmd, const crier_cli *cli, crier_database *db);

/* Loads the rules named by cli, printing problems to stderr. NULL on failure. */
crier_rules *crier_cli_load_rules(const crier_cli *cli);

/* The name in names[0..n) nearest to given (a slip of a key or two, a
 * swapped pair of letters), or NULL when none is near enough to suggest. */
const char *crier_cli_nearest(const char *given, const char *const *names, size_t n);

/* Prints to stderr that word (a command-line argument such as "--bach-size"
 * or "--batch=3") is not an option of crier CMD, with the nearest option of
 * options ("did you mean --batch-size?") or the ones an ambiguous
 * abbreviation fits, and a line pointing at crier CMD --help. */
void crier_cli_unknown_option(const char *cmd, const char *word, const struct option *options);

/* Prints "crier CMD: message" to stderr. */
void crier_cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The files this binary comes with: the installed layout beside it
 * (BINDIR/../share/crier), else — for a binary in its build directory — the
 * source tree (install_paths.h). Found once, on first use; never NULL. */
const crier_install_paths *crier_cli_install_paths(void);

/* The bundled example rules: crier_cli_install_paths()'s examples_dir/rules. */
const char *crier_cli_bundled_rules(void);

/* Prints, for --help, which Lua library cli uses and why (installed beside
 * the binary, the source tree, or --lua-dir), and where the bundled example
 * rules are. */
void crier_cli_print_paths(FILE *out, const crier_cli *cli);

/* Returns 0 when cli has a Lua library (given, or found beside the binary),
 * else -1 after printing "crier CMD: cannot find crier's Lua library …" with
 * the way out (cmd may be NULL: "crier: …"). */
int crier_cli_require_lua_dir(const char *cmd, const crier_cli *cli);

/* `crier --version`: the version, the embedded schema (latest migration, SQL
 * checksum), LuaJIT and the Lua library in use. Returns 0. */
int crier_cmd_version(int argc, char **argv);

int crier_cmd_serve(int argc, char **argv);
int crier_cmd_migrate(int argc, char **argv);
int crier_cmd_emit(int argc, char **argv);
int crier_cmd_status(int argc, char **argv);
int crier_cmd_check(int argc, char **argv);
int crier_cmd_try(int argc, char **argv);
int crier_cmd_cluster(int argc, char **argv);
int crier_cmd_demo(int argc, char **argv);
int crier_cmd_dead(int argc, char **argv);
int crier_cmd_feed(int argc, char **argv);
int crier_cmd_keys(int argc, char **argv);
int crier_cmd_token(int argc, char **argv);

#endif
